"""Camera calibration from a checkerboard video (fisheye or pinhole OpenCV models).

Frames are chosen for coverage, not taken in order: every detection is binned by where the
board is in the image (4 x 3 grid of the board centre) and by its tilt (sign of the
foreshortening along each board axis), and a greedy pick takes the frames that add the most
new (cell, tilt) bins, up to ``max_frames``. After a first fit, frames whose reprojection
RMS is more than 3x the median (and above 0.5 px) are rejected and the fit is repeated.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

from rigs.errors import InputError
from vision.camera import Camera
from vision.render import board_points
from vision.video import frames, open_video


class BoardError(InputError):
    """No usable checkerboard in a video; names the file and the frames examined."""


@dataclass(frozen=True)
class CalibrationReport:
    """Per-frame reprojection RMS (px) of the used frames, overall RMS (px), the frame
    indices used and rejected, and how many frames showed the board."""

    camera: Camera
    rms: float
    frame_rms: dict[int, float]
    rejected: dict[int, float]
    detected: int
    examined: int


def parse_board(text: str) -> tuple[int, int]:
    """``"9x6"`` -> (9, 6) inner corners (columns, rows)."""
    try:
        cols, rows = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise InputError(f"--board {text!r}: expected COLSxROWS inner corners, e.g. 9x6") from None
    if cols < 3 or rows < 3:
        raise InputError(f"--board {text!r}: need at least 3x3 inner corners")
    return cols, rows


def detect_board(gray: np.ndarray, pattern: tuple[int, int]) -> np.ndarray | None:
    """Inner corners [N, 2] (px) of a checkerboard, refined to sub-pixel.

    The classic detector + ``cornerSubPix`` with a window of ~0.3 square measured 0.04 px
    RMS against rendered truth, the sector-based ``findChessboardCornersSB`` 0.2-0.7 px on
    tilted fisheye views; SB is only the fallback when the classic detector fails.
    """
    flags = cv2.CALIB_CB_ADAPTIVE_THRESH | cv2.CALIB_CB_NORMALIZE_IMAGE
    ok, corners = cv2.findChessboardCorners(gray, pattern, flags=flags)
    if not ok:
        ok, corners = cv2.findChessboardCornersSB(gray, pattern, flags=cv2.CALIB_CB_ACCURACY)
        return corners.reshape(-1, 2).astype(np.float64) if ok else None
    c = corners.reshape(pattern[1], pattern[0], 2)
    spacing = min(
        np.linalg.norm(np.diff(c, axis=0), axis=2).min(),
        np.linalg.norm(np.diff(c, axis=1), axis=2).min(),
    )
    half = int(np.clip(0.3 * spacing, 2, 11))
    crit = (cv2.TERM_CRITERIA_COUNT | cv2.TERM_CRITERIA_EPS, 100, 1e-4)
    refined = cv2.cornerSubPix(gray, corners, (half, half), (-1, -1), crit)
    return refined.reshape(-1, 2).astype(np.float64)


def _bins(corners: np.ndarray, pattern: tuple[int, int], size: tuple[int, int]) -> set:
    cols, rows = pattern
    g = corners.reshape(rows, cols, 2)
    c = g.reshape(-1, 2).mean(axis=0)
    cell = (min(3, int(4 * c[0] / size[0])), min(2, int(3 * c[1] / size[1])))
    left = np.linalg.norm(g[-1, 0] - g[0, 0])
    right = np.linalg.norm(g[-1, -1] - g[0, -1])
    top = np.linalg.norm(g[0, -1] - g[0, 0])
    bottom = np.linalg.norm(g[-1, -1] - g[-1, 0])
    tx, ty = np.log(right / left), np.log(bottom / top)
    tilt = (int(np.sign(tx) * (abs(tx) > 0.08)), int(np.sign(ty) * (abs(ty) > 0.08)))
    # corners spread over a 8 x 6 grid of the image also count, for distortion coverage
    spread = {(int(8 * x / size[0]), int(6 * y / size[1])) for x, y in corners}
    return {("pose", cell, tilt)} | {("px", s) for s in spread}


def calibrate_video(
    path: str | Path,
    pattern: tuple[int, int],
    square: float,
    model: str = "fisheye",
    max_frames: int = 25,
    max_examined: int = 150,
    progress: Callable[[int, int], None] | None = None,
) -> CalibrationReport:
    """Calibrate from a board video; see the module docstring."""
    path = Path(path)
    _, info = open_video(path)
    total = info.frames if info.frames > 0 else max_examined
    stride = max(1, total // max_examined)
    found: dict[int, np.ndarray] = {}
    examined = 0
    for k, _, img in frames(path, gray=True):
        if progress is not None:
            progress(k + 1, total)
        if k % stride:
            continue
        examined += 1
        corners = detect_board(img, pattern)
        if corners is not None:
            found[k] = corners
    if len(found) < 4:
        raise BoardError(
            f"{path}: frames 0-{total - 1}: the {pattern[0]}x{pattern[1]} board was found in "
            f"{len(found)} of {examined} examined frames (need 4); check --board counts INNER "
            "corners (squares minus one per side) and that the whole board is in view and sharp"
        )
    return calibrate_views(
        found, pattern, square, model, info.size, max_frames, str(path), examined
    )


def calibrate_views(
    found: dict[int, np.ndarray],
    pattern: tuple[int, int],
    square: float,
    model: str,
    size: tuple[int, int],
    max_frames: int = 25,
    source: str = "",
    examined: int = 0,
) -> CalibrationReport:
    """Pick views for coverage, fit, reject outlier views, refit (pure: no I/O)."""
    bins = {k: _bins(c, pattern, size) for k, c in found.items()}
    chosen: list[int] = []
    covered: set = set()
    while len(chosen) < min(max_frames, len(found)):
        k = max((k for k in found if k not in chosen), key=lambda k: len(bins[k] - covered))
        chosen.append(k)
        covered |= bins[k]
    obj = board_points(pattern, square)
    camera, per = _fit(model, obj, {k: found[k] for k in chosen}, size)
    med = float(np.median(list(per.values())))
    rejected = {k: v for k, v in per.items() if v > max(3 * med, 0.5)}
    if rejected and len(per) - len(rejected) >= 4:
        keep = {k: found[k] for k in chosen if k not in rejected}
        camera, per = _fit(model, obj, keep, size)
    else:
        rejected = {}
    rms = float(np.sqrt(np.mean([v**2 for v in per.values()])))
    camera = Camera(
        camera.model,
        camera.K,
        camera.D,
        camera.size,
        {
            "rms_px": rms,
            "frames_used": sorted(per),
            "frames_rejected": sorted(rejected),
            "board": f"{pattern[0]}x{pattern[1]}",
            "square_m": square,
            "source": source,
        },
    )
    return CalibrationReport(camera, rms, per, rejected, len(found), examined)


def _fit(model: str, obj: np.ndarray, views: dict[int, np.ndarray], size) -> tuple[Camera, dict]:
    keys = sorted(views)
    img_pts = [views[k].reshape(-1, 1, 2) for k in keys]
    if model == "fisheye":
        # OpenCV 5's fisheye.calibrate wants (1, N, 3) / (1, N, 2) float64 per view
        objs = [obj.reshape(1, -1, 3).astype(np.float64) for _ in keys]
        fish_pts = [p.reshape(1, -1, 2) for p in img_pts]
        flags = cv2.CALIB_RECOMPUTE_EXTRINSIC | cv2.CALIB_FIX_SKEW
        crit = (cv2.TERM_CRITERIA_COUNT | cv2.TERM_CRITERIA_EPS, 200, 1e-12)
        _, K, D, rvecs, tvecs = cv2.fisheye.calibrate(
            objs, fish_pts, size, None, None, flags=flags, criteria=crit
        )
        camera = Camera("fisheye", K, D.ravel(), size)
    elif model == "pinhole":
        objs = [obj.astype(np.float32) for _ in keys]
        _, K, D, rvecs, tvecs = cv2.calibrateCamera(
            objs, [p.astype(np.float32) for p in img_pts], size, None, None
        )
        camera = Camera("pinhole", K, D.ravel()[:5], size)
    else:
        raise InputError(f"--model {model!r}: expected fisheye or pinhole")
    per = {}
    for k, p, r, t in zip(keys, img_pts, rvecs, tvecs, strict=True):
        proj = camera.project(obj, r, t)
        per[k] = float(np.sqrt(np.mean(np.sum((proj - p.reshape(-1, 2)) ** 2, axis=1))))
    return camera, per
