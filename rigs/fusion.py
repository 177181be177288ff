"""Join a marker video to an encoder log: clock offset, camera pose, markers on the LM grid.

The encoders fix where every marker is in space (forward kinematics of the rig at the
encoder angles); the video says where it is in the image. So for a trial clock offset the
camera pose follows from PnP on all frames at once, and its reprojection error says how good
the offset is (rigs.sync refines the offset on that error). The same PnP gives the camera
extrinsics that the fused LM observation uses.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import cv2
import numpy as np

from rigs.sync import DEFAULT_THRESHOLDS, SyncResult, Thresholds, point_speed, synchronize


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


def pnp_residuals(
    camera,
    t_video: np.ndarray,
    uv: np.ndarray,
    missing: np.ndarray,
    t_encoder: np.ndarray,
    angles: np.ndarray,
    positions: Callable[[np.ndarray], np.ndarray],
) -> Callable[[float, np.ndarray], np.ndarray]:
    """``residuals(offset, frames)``: pixel residuals of the frames selected by the boolean
    mask, with the marker positions ``positions(angles[N, k]) -> [N, m, 3]`` at the encoder
    angles of t_video + offset, and the camera pose fitted by PnP to exactly those points."""

    def residuals(offset: float, frames: np.ndarray) -> np.ndarray:
        a = angles_at(t_encoder, angles, t_video[frames] + offset)
        inside = np.all(np.isfinite(a), axis=1)
        world = positions(np.where(inside[:, None], a, 0.0))
        seen = ~missing[frames] & inside[:, None]
        if seen.sum() < 6:
            return np.full(2, np.nan)
        _, res = solve_pose(camera, world[seen], uv[frames][seen])
        return res.ravel()

    return residuals


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
    residuals = pnp_residuals(camera, t_video, uv, missing, t_encoder, angles, positions)
    result = synchronize(t_video, s_video, t_encoder, s_encoder, residuals, thresholds)
    a = angles_at(t_encoder, angles, result.to_encoder(t_video))
    inside = np.all(np.isfinite(a), axis=1)
    seen = ~missing & inside[:, None]
    world = positions(np.where(inside[:, None], a, 0.0))
    pose, _ = solve_pose(camera, world[seen], uv[seen])
    return result, pose
