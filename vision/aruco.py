"""ArUco / AprilTag markers through ``cv2.aruco``, for rigs that need a 3D pose.

Markers are detected in the distorted image (sub-pixel corner refinement), their corners
undistorted to normalized coordinates with the camera model, and the pose solved with
``solvePnP(SOLVEPNP_IPPE_SQUARE)`` on those (identity K, no distortion): the same
detect-then-undistort-points route as the circles, so no frame is ever remapped.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

from physid.vision.camera import Camera


@dataclass(frozen=True)
class MarkerPose:
    """Marker ``id``, its corners (px, distorted image, OpenCV order: top-left clockwise),
    pose rvec (rad) / tvec (m) of the marker frame in the camera frame, and the corners'
    reprojection RMS (px)."""

    id: int
    corners: np.ndarray
    rvec: np.ndarray
    tvec: np.ndarray
    rms: float


def detector(dictionary: str = "DICT_4X4_50") -> cv2.aruco.ArucoDetector:
    """A detector for a predefined dictionary (e.g. DICT_4X4_50, DICT_APRILTAG_36h11)."""
    if not hasattr(cv2.aruco, dictionary):
        raise ValueError(f"unknown ArUco dictionary {dictionary!r}")
    params = cv2.aruco.DetectorParameters()
    params.cornerRefinementMethod = cv2.aruco.CORNER_REFINE_SUBPIX
    params.cornerRefinementWinSize = 4
    params.cornerRefinementMinAccuracy = 0.01
    d = cv2.aruco.getPredefinedDictionary(getattr(cv2.aruco, dictionary))
    return cv2.aruco.ArucoDetector(d, params)


def marker_poses(
    gray: np.ndarray, camera: Camera, length: float, det: cv2.aruco.ArucoDetector
) -> list[MarkerPose]:
    """Poses of all markers of side ``length`` (m) seen in ``gray``."""
    corners, ids, _ = det.detectMarkers(gray)
    if ids is None:
        return []
    h = length / 2
    obj = np.array([[-h, h, 0], [h, h, 0], [h, -h, 0], [-h, -h, 0]], dtype=np.float64)
    out = []
    for c, i in zip(corners, ids.ravel(), strict=True):
        px = c.reshape(4, 2).astype(np.float64)
        norm = camera.normalize(px)
        ok, rvec, tvec = cv2.solvePnP(obj, norm, np.eye(3), None, flags=cv2.SOLVEPNP_IPPE_SQUARE)
        if not ok:
            continue
        rvec, tvec = rvec.ravel(), tvec.ravel()
        rms = float(np.sqrt(np.mean(np.sum((camera.project(obj, rvec, tvec) - px) ** 2, 1))))
        out.append(MarkerPose(int(i), px, rvec, tvec, rms))
    return out


def render_marker(
    camera: Camera, marker_id: int, length: float, rvec, tvec, dictionary: str = "DICT_4X4_50"
) -> np.ndarray:
    """A grey image of one marker (with a white quiet zone) on a grey wall, rendered through
    ``camera`` at pose rvec, tvec (marker centre, m): for tests."""
    from physid.vision.render import PixelRays

    d = cv2.aruco.getPredefinedDictionary(getattr(cv2.aruco, dictionary))
    modules = d.markerSize + 2
    scale = 40  # bitmap px per module; bilinear sampling of it gives anti-aliased edges
    bitmap = cv2.aruco.generateImageMarker(d, marker_id, modules * scale).astype(np.float32)
    pad = 2 * scale
    bitmap = cv2.copyMakeBorder(bitmap, pad, pad, pad, pad, cv2.BORDER_CONSTANT, value=255)
    R = cv2.Rodrigues(np.asarray(rvec, dtype=float))[0]
    X, Y = PixelRays(camera).on_plane(R, np.asarray(tvec, dtype=float))
    per_m = modules * scale / length
    # marker frame: x right, y up; bitmap rows go down
    mx = (X + length / 2) * per_m + pad - 0.5
    my = (length / 2 - Y) * per_m + pad - 0.5
    img = cv2.remap(
        bitmap * 0.8 + 20,
        mx.astype(np.float32),
        my.astype(np.float32),
        cv2.INTER_AREA,
        borderMode=cv2.BORDER_CONSTANT,
        borderValue=110,
    )
    return np.clip(np.rint(img), 0, 255).astype(np.uint8)
