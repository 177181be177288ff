"""Pure geometry from image points to the world plane: homography, plane pose, ground
segment and body pose (x, y, theta) with uncertainty propagated from pixel noise.

All image points here are *undistorted normalized* coordinates (x/z, y/z) unless a
function takes a Camera; world lengths in m, angles in rad.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

from physid.vision.camera import Camera


@dataclass(frozen=True)
class PlanePose:
    """Plane-to-camera pose: p_cam = R @ [X, Y, 0] + t; ``H`` maps normalized image points
    to plane points (m)."""

    R: np.ndarray
    t: np.ndarray
    H: np.ndarray

    @property
    def rvec(self) -> np.ndarray:
        return cv2.Rodrigues(self.R)[0].ravel()

    def to_world(self, normalized: np.ndarray) -> np.ndarray:
        """Plane points [N, 2] (m) of normalized image points [N, 2]."""
        p = np.asarray(normalized, dtype=float).reshape(-1, 2)
        h = np.column_stack([p, np.ones(len(p))]) @ self.H.T
        return h[:, :2] / h[:, 2:3]


def plane_pose(normalized: np.ndarray, world: np.ndarray) -> PlanePose:
    """Plane pose from >= 4 correspondences of normalized image points and plane points (m).

    The homography world -> normalized is K-free, so its columns are (r1, r2, t) up to scale;
    the rotation is the nearest orthonormal matrix (SVD).
    """
    n = np.asarray(normalized, dtype=float).reshape(-1, 2)
    w = np.asarray(world, dtype=float).reshape(-1, 2)
    G, _ = cv2.findHomography(w, n, 0)
    if G is None:
        raise ValueError("degenerate reference points: no homography")
    lam = 2.0 / (np.linalg.norm(G[:, 0]) + np.linalg.norm(G[:, 1]))
    if G[2, 2] * lam < 0:  # the plane must lie in front of the camera
        lam = -lam
    r1, r2, t = lam * G[:, 0], lam * G[:, 1], lam * G[:, 2]
    U, _, Vt = np.linalg.svd(np.column_stack([r1, r2, np.cross(r1, r2)]))
    R = U @ Vt
    if np.linalg.det(R) < 0:
        R = U @ np.diag([1, 1, -1]) @ Vt
    return PlanePose(R, t, np.linalg.inv(G))


def pixels_to_world(camera: Camera, pose: PlanePose, pixels: np.ndarray) -> np.ndarray:
    """Plane points [N, 2] (m) of distorted pixels [N, 2]; NaN rows stay NaN."""
    px = np.asarray(pixels, dtype=float).reshape(-1, 2)
    out = np.full(px.shape, np.nan)
    ok = np.all(np.isfinite(px), axis=1)
    if ok.any():
        out[ok] = pose.to_world(camera.normalize(px[ok]))
    return out


def body_pose(world_markers: np.ndarray, body_markers: np.ndarray) -> np.ndarray:
    """Poses [N, 3] = (x, y, theta) from two markers' plane points [N, 2, 2] (m) and their
    body-frame positions [2, 2] (m, relative to the centre of mass). theta is wrapped to
    (-pi, pi]; the position is the mean over both markers of m_i - R(theta) b_i."""
    w = np.asarray(world_markers, dtype=float)
    b = np.asarray(body_markers, dtype=float)
    dw = w[:, 1] - w[:, 0]
    db = b[1] - b[0]
    theta = np.arctan2(dw[:, 1], dw[:, 0]) - np.arctan2(db[1], db[0])
    theta = np.angle(np.exp(1j * theta))
    c, s = np.cos(theta), np.sin(theta)
    mean_b = b.mean(axis=0)
    x = w[:, :, 0].mean(axis=1) - (c * mean_b[0] - s * mean_b[1])
    y = w[:, :, 1].mean(axis=1) - (s * mean_b[0] + c * mean_b[1])
    return np.column_stack([x, y, theta])


def pose_std(
    camera: Camera,
    pose: PlanePose,
    marker_px: np.ndarray,
    marker_sigma: np.ndarray,
    body_markers: np.ndarray,
    step: float = 0.05,
) -> np.ndarray:
    """Standard deviations [N, 3] of (x, y, theta) from independent isotropic pixel noise
    ``marker_sigma`` [N, 2] (px) on the two markers' pixels [N, 2, 2]: first-order
    propagation through the full chain (undistortion, homography, body pose) with a
    central-difference Jacobian of ``step`` px."""
    px = np.asarray(marker_px, dtype=float)
    var = np.zeros((len(px), 3))
    for m in range(2):
        for k in range(2):
            hi, lo = px.copy(), px.copy()
            hi[:, m, k] += step
            lo[:, m, k] -= step
            qh = body_pose(
                pixels_to_world(camera, pose, hi.reshape(-1, 2)).reshape(-1, 2, 2), body_markers
            )
            ql = body_pose(
                pixels_to_world(camera, pose, lo.reshape(-1, 2)).reshape(-1, 2, 2), body_markers
            )
            d = qh - ql
            d[:, 2] = np.angle(np.exp(1j * d[:, 2]))
            var += (d / (2 * step) * marker_sigma[:, m : m + 1]) ** 2
    return np.sqrt(var)


def plane_pose_std(
    camera: Camera,
    reference_px: np.ndarray,
    reference_sigma: np.ndarray,
    reference_world: np.ndarray,
    marker_px: np.ndarray,
    body_markers: np.ndarray,
    step: float = 0.05,
) -> np.ndarray:
    """Standard deviations [N, 3] of the poses (x, y, theta) that the error of the plane
    pose causes: each reference circle's centre (px [4, 2]) with its std
    ``reference_sigma`` [4] (px), propagated through the homography to the poses of the
    markers at ``marker_px`` [N, 2, 2] (central differences of ``step`` px). This error is
    common to all frames of a video (a bias, not noise)."""
    ref = np.asarray(reference_px, dtype=float)
    mk = np.asarray(marker_px, dtype=float).reshape(-1, 2)
    norm_mk = camera.normalize(mk)
    var = np.zeros((len(mk) // 2, 3))
    for i in range(len(ref)):
        for k in range(2):
            poses = []
            for sgn in (1.0, -1.0):
                r = ref.copy()
                r[i, k] += sgn * step
                pose = plane_pose(camera.normalize(r), reference_world)
                poses.append(body_pose(pose.to_world(norm_mk).reshape(-1, 2, 2), body_markers))
            d = poses[0] - poses[1]
            d[:, 2] = np.angle(np.exp(1j * d[:, 2]))
            var += (d / (2 * step) * reference_sigma[i]) ** 2
    return np.sqrt(var)


def distance_std(
    camera: Camera,
    pose: PlanePose,
    marker_px: np.ndarray,
    marker_sigma: np.ndarray,
    step: float = 0.05,
) -> np.ndarray:
    """Standard deviation [N] (m) of the world distance between the two markers from
    independent isotropic pixel noise ``marker_sigma`` [N, 2] (px) on their pixels
    [N, 2, 2]: first-order propagation with a central-difference Jacobian of ``step`` px."""
    px = np.asarray(marker_px, dtype=float)

    def dist(p):
        w = pixels_to_world(camera, pose, p.reshape(-1, 2)).reshape(-1, 2, 2)
        return np.linalg.norm(w[:, 1] - w[:, 0], axis=1)

    var = np.zeros(len(px))
    for m in range(2):
        for k in range(2):
            hi, lo = px.copy(), px.copy()
            hi[:, m, k] += step
            lo[:, m, k] -= step
            var += ((dist(hi) - dist(lo)) / (2 * step) * marker_sigma[:, m]) ** 2
    return np.sqrt(var)


def match_corners(normalized: np.ndarray, world: np.ndarray) -> np.ndarray:
    """Indices into ``normalized`` [N, 2] (image-like axes: y down) of the four extreme
    points that match the four ``world`` [4, 2] corners (y up): the point furthest towards
    each diagonal. Assumes the camera is upright within +-45 degrees."""
    n = np.asarray(normalized, dtype=float)
    w = np.asarray(world, dtype=float)
    dirs = np.array([[-1, -1], [1, -1], [1, 1], [-1, 1]], dtype=float)  # image diagonals
    centre = w.mean(axis=0)
    out = np.empty(len(w), dtype=int)
    for i, p in enumerate(w):
        d = np.sign(p - centre) * np.array([1, -1])  # world y up -> image y down
        k = int(np.argmax((dirs == d).all(axis=1)))
        out[i] = int(np.argmax(n @ dirs[k]))
    return out
