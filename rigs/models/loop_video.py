"""Filming a flexible loop: its ``[video]`` markers and rods along a simulated motion, rendered
through a camera by ``vision.markers3d`` (the renderer the Furuta sample uses)."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from physid.dynamics.variational.kinematics import world_poses
from physid.rigs.models.loop import LoopRig
from physid.vision.markers3d import RenderSettings, body_marker_frames, render_marker_video


def body_poses(rig: LoopRig, q) -> tuple[np.ndarray, np.ndarray]:
    """World poses of the tree's body frames along q[F, n]: R[F, nb, 3, 3], p[F, nb, 3] (m)."""
    tree, params = rig.system.tree, rig.closed.params
    R, p = jax.jit(jax.vmap(lambda x: world_poses(tree, params, x)))(jnp.asarray(q, float))
    return np.asarray(R), np.asarray(p)


def loop_rods(rig: LoopRig, p: np.ndarray) -> np.ndarray:
    """Rod segments [F, k, 2, 3] (m): from each body with mass to its child's frame origin
    (a link of the loop, from its corner to the next one)."""
    tree, params = rig.system.tree, rig.closed.params
    mass = np.asarray(params.bodies.mass)
    parents = np.asarray(tree.parent_rows)
    pairs = [
        (i, c) for i in range(tree.n_bodies) if mass[i] > 0 for c in np.flatnonzero(parents == i)
    ]
    return np.stack([np.stack([p[:, i], p[:, c]], axis=1) for i, c in pairs], axis=1)


def render_loop_video(
    path: str | Path,
    rig: LoopRig,
    markers,
    q,
    camera,
    R_cw,
    t_cw,
    fps: float,
    settings: RenderSettings | None = None,
    progress=None,
) -> dict:
    """Write a video of the loop along q[F, n] (frame k at k / fps s): the ``markers``
    (``rigs.pipeline.fusion.VideoMarkers`` of the spec's ``[video]`` table) and the rods.
    Returns ``render_marker_video``'s truth."""
    R, p = body_poses(rig, q)
    frames = body_marker_frames(R, p, markers.body, markers.points, markers.normals, markers.ups)
    return render_marker_video(
        path, camera, R_cw, t_cw, frames.centres, frames.normals, frames.ups, markers.ids,
        markers.side, fps=fps, settings=settings or RenderSettings(), rods=loop_rods(rig, p),
        progress=progress,
    )  # fmt: skip
