"""Join a marker video to an encoder log: clock offset, camera pose, markers on the LM grid.

The encoders fix where every marker is in space (forward kinematics of the rig at the
encoder angles); the video says where it is in the image. So for a trial clock offset the
camera pose follows from PnP on all frames at once, and its reprojection error says how good
the offset is (rigs.pipeline.sync refines the offset on that error). The same PnP gives the camera
extrinsics that the fused LM observation uses.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import cv2
import numpy as np

from physid.rigs.pipeline.sync import (
    DEFAULT_THRESHOLDS,
    SyncResult,
    Thresholds,
    point_speed,
    synchronize,
)


@dataclass(frozen=True)
class VideoMarkers:
    """Markers fixed on a rig's bodies (spec ``[video]``): ArUco ``ids``, ``body`` index,
    ``points`` [m, 3], ``normals`` [m, 3] and ``ups`` [m, 3] in the body frames (m), the
    black square's ``side`` (m), the ``dictionary``, and the centre noise std (px)."""

    names: tuple[str, ...]
    ids: tuple[int, ...]
    body: tuple[int, ...]
    points: np.ndarray
    normals: np.ndarray
    ups: np.ndarray
    side: float
    dictionary: str
    noise_px: float


def video_markers(spec) -> VideoMarkers | None:
    """The spec's ``[video]`` markers, or None when the rig declares none."""
    table = spec.sections.get("video")
    if table is None:
        return None
    markers = table.get("markers")
    if not isinstance(markers, dict) or not markers:
        raise spec.error("video.markers", "no markers; add [video.markers.NAME] tables")
    rows = []
    for name, m in markers.items():
        where = f"video.markers.{name}"
        try:
            point = np.array(m["position"]["value"], float) * _length_scale(m["position"]["unit"])
            row = (name, int(m["id"]), int(m["body"]), point, _unit(m["normal"]), _unit(m["up"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise spec.error(
                where,
                f'needs id, body, position = {{ value = [x, y, z], unit = "mm" }}, '
                f"normal = [..] and up = [..] ({exc})",
            ) from None
        if point.shape != (3,):
            raise spec.error(where, "position needs 3 coordinates")
        rows.append(row)
    names, ids, body, points, normals, ups = zip(*rows, strict=True)
    side = spec.section_value("video", "side", "m")
    noise = table.get("noise", {"value": 0.5, "unit": "px"})
    if not isinstance(noise, dict) or noise.get("unit") != "px":
        raise spec.error("video.noise", 'write noise = { value = 0.5, unit = "px" }')
    return VideoMarkers(
        names, ids, body, np.stack(points), np.stack(normals), np.stack(ups), side,
        str(table.get("dictionary", "DICT_4X4_50")), float(noise["value"]),
    )  # fmt: skip


def _length_scale(unit: str) -> float:
    from physid.units import to_si

    return to_si(1.0, unit)


def _unit(v) -> np.ndarray:
    v = np.asarray(v, float)
    n = np.linalg.norm(v)
    if v.shape != (3,) or n == 0:
        raise ValueError(f"{v.tolist()} is not a nonzero 3-vector")
    return v / n


def marker_kinematics(rig, markers: VideoMarkers):
    """``frames(angles[N, k]) -> (centres, normals, ups)`` each [N, m, 3] in the world (m),
    at those encoder angles: through a SPOOK rig's zero-violation configuration
    (``state_from_angles``), or a tree rig's (``rigs.models.tree_rig.FitRig``) body poses
    with the encoders' joints at the angles and any other joint at 0."""
    import jax
    import jax.numpy as jnp

    from physid.dynamics.quaternion import rotate

    body = jnp.asarray(markers.body)
    vecs = jnp.stack([markers.points, markers.normals, markers.ups])  # [3, m, 3]

    if hasattr(rig, "state_from_angles"):

        def one(a):
            r, e = rig.state_from_angles(a)
            turn = jax.vmap(jax.vmap(rotate), in_axes=(None, 0))(e[body], vecs)
            return r[body] + turn[0], turn[1], turn[2]

    else:
        from physid.dynamics.tree import body_poses

        params = rig.make_params({k: jnp.asarray(float(v)) for k, v in rig.values.items()})
        joints = jnp.asarray(rig.observed)

        def one(a):
            q = jnp.zeros(rig.tree.n_dof).at[joints].set(a)
            R, p = body_poses(rig.tree, params, q)
            turn = jnp.einsum("mij,vmj->vmi", R[body], vecs)
            return p[body] + turn[0], turn[1], turn[2]

    batched = jax.jit(jax.vmap(one))

    def frames(angles: np.ndarray):
        c, n, u = batched(jnp.asarray(angles, float))
        return np.asarray(c), np.asarray(n), np.asarray(u)

    return frames


@dataclass(frozen=True)
class CameraPose:
    """Camera-from-world rotation ``R_cw`` [3, 3] and translation ``t_cw`` [3] (m):
    x_camera = R_cw x_world + t_cw."""

    R_cw: np.ndarray
    t_cw: np.ndarray

    @property
    def rvec(self) -> np.ndarray:
        return cv2.Rodrigues(self.R_cw)[0].ravel()


def angles_at(t_encoder: np.ndarray, angles: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Encoder angles [N, k] linearly interpolated at times t (NaN outside the log)."""
    out = np.empty((len(t), angles.shape[1]))
    for i in range(angles.shape[1]):  # k ≤ 8 channels, not a loop over time
        out[:, i] = np.interp(t, t_encoder, angles[:, i], left=np.nan, right=np.nan)
    return out


def solve_pose(camera, world: np.ndarray, uv: np.ndarray) -> tuple[CameraPose, np.ndarray]:
    """Camera pose from 3D points world[N, 3] (m) seen at pixels uv[N, 2]; returns the pose
    and the pixel residuals [N, 2] (projected − observed)."""
    norm = camera.normalize(uv).reshape(-1, 1, 2)
    obj = np.ascontiguousarray(world.reshape(-1, 1, 3))
    ok, rvec, tvec = cv2.solvePnP(obj, norm, np.eye(3), None, flags=cv2.SOLVEPNP_SQPNP)
    if not ok:
        return CameraPose(np.eye(3), np.zeros(3)), np.full_like(uv, np.nan)
    rvec, tvec = cv2.solvePnPRefineLM(obj, norm, np.eye(3), None, rvec, tvec)
    R = cv2.Rodrigues(rvec)[0]
    pose = CameraPose(R, tvec.ravel())
    return pose, camera.project(world, pose.rvec, pose.t_cw) - uv


def fit_pose_at(
    camera, t_enc_frames, uv, missing, t_encoder, angles, positions
) -> tuple[CameraPose, np.ndarray]:
    """Camera pose by PnP on every seen marker of the given frames, with the marker positions
    at the encoder angles of the frames' encoder-clock times ``t_enc_frames``; returns the
    pose and the pixel residuals (NaN pair when fewer than 6 points are usable)."""
    a = angles_at(t_encoder, angles, t_enc_frames)
    inside = np.all(np.isfinite(a), axis=1)
    world = positions(np.where(inside[:, None], a, 0.0))
    seen = ~missing & inside[:, None]
    if seen.sum() < 6:
        return CameraPose(np.eye(3), np.zeros(3)), np.full(2, np.nan)
    pose, res = solve_pose(camera, world[seen], uv[seen])
    return pose, res.ravel()


def synchronize_video(
    camera,
    t_video: np.ndarray,
    uv: np.ndarray,
    missing: np.ndarray,
    t_encoder: np.ndarray,
    angles: np.ndarray,
    positions: Callable[[np.ndarray], np.ndarray],
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
) -> tuple[SyncResult, CameraPose]:
    """Clock offset between a marker video and an encoder log, and the camera pose.

    ``uv[F, m, 2]`` marker pixels with ``missing[F, m]``; ``angles[N, k]`` encoder angles at
    ``t_encoder`` (encoder clock); ``positions`` the rig's marker forward kinematics.
    """
    uv_nan = np.where(missing[..., None], np.nan, uv)
    s_video = point_speed(t_video, uv_nan)
    s_encoder = point_speed(t_encoder, positions(angles))

    def residuals(offset: float, frames: np.ndarray) -> np.ndarray:
        """Pixel residuals of the selected frames, camera pose fitted at this offset."""
        return fit_pose_at(
            camera, t_video[frames] + offset, uv[frames], missing[frames],
            t_encoder, angles, positions,
        )[1]  # fmt: skip

    result = synchronize(t_video, s_video, t_encoder, s_encoder, residuals, thresholds)
    t_enc = result.to_encoder(t_video)
    pose, _ = fit_pose_at(camera, t_enc, uv, missing, t_encoder, angles, positions)
    return result, pose


def encoder_pixels(
    t: np.ndarray, t_encoder: np.ndarray, angles: np.ndarray, positions, camera, pose, m: int
) -> np.ndarray:
    """Where the encoder angles (interpolated at times ``t``, encoder clock) put the ``m``
    markers in the image, through the camera ``pose``: [len(t), m, 2] px, NaN outside the
    log."""
    a = angles_at(t_encoder, angles, t)
    world = positions(np.where(np.isfinite(a), a, 0.0))
    px = camera.project(world.reshape(-1, 3), pose.rvec, pose.t_cw).reshape(-1, m, 2)
    return np.where(np.all(np.isfinite(a), axis=1)[:, None, None], px, np.nan)


def markers_on_grid(
    grid: np.ndarray,
    sync: SyncResult,
    t_video: np.ndarray,
    uv: np.ndarray,
    missing: np.ndarray,
    t_encoder: np.ndarray,
    angles: np.ndarray,
    positions: Callable[[np.ndarray], np.ndarray],
    camera,
    pose: CameraPose,
    noise_px: float,
):
    """Marker pixels on the estimator grid ``grid`` (encoder clock, step h) as
    ``estimation.markers.MarkerObservations`` inputs: (uv[n, m, 2], weight[n, m]).

    Frames are put on the encoder clock with the sync result and assigned to the nearest
    grid step by ``estimation.markers.pixels_on_grid``. The up-to-h/2 gap between a frame's
    time and its step's is first removed by adding the image motion the encoder angles
    predict over it (second-order small), so each observation belongs to its step exactly.
    """
    from physid.estimation.markers import pixels_on_grid

    h = float(grid[1] - grid[0])
    m = uv.shape[1]
    te = sync.to_encoder(t_video)
    step_t = grid[0] + h * np.rint((te - grid[0]) / h)

    def pixels(t):
        return encoder_pixels(t, t_encoder, angles, positions, camera, pose, m)

    moved = uv + (pixels(step_t) - pixels(te))
    unusable = missing | ~np.all(np.isfinite(moved), axis=-1)
    return pixels_on_grid(grid, te, moved, noise_px, unusable)
