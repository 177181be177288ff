"""Camera calibration from a checkerboard video or photos (fisheye or pinhole OpenCV models).

The views come from a video, a folder of images or a glob of images (``board_views``).

Frames are chosen for coverage, not taken in order: every detection is binned by where the
board is in the image (4 x 3 grid of the board centre) and by its tilt (sign of the
foreshortening along each board axis), and a greedy pick takes the frames that add the most
new (cell, tilt) bins, up to ``max_frames``. After a first fit, frames whose reprojection
RMS is more than 3x the median (and above 0.5 px) are rejected and the fit is repeated.
"""

from __future__ import annotations

import dataclasses
import glob
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import cv2
import numpy as np

from physid.errors import InputError
from physid.units import UnitError, parse_unit
from physid.vision.camera import Camera
from physid.vision.render import board_points
from physid.vision.video import frames, open_video


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
    names: dict[int, str] = field(default_factory=dict)  # image file per view (photos)

    def label(self, k: int) -> str:
        """``frame 12`` of a video, or the image file of a view."""
        return self.names.get(k, f"frame {k:5d}")


def parse_board(text: str) -> tuple[int, int]:
    """``"9x6"`` -> (9, 6) inner corners (columns, rows)."""
    try:
        cols, rows = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise InputError(f"--board {text!r}: expected COLSxROWS inner corners, e.g. 9x6") from None
    if cols < 3 or rows < 3:
        raise InputError(f"--board {text!r}: need at least 3x3 inner corners")
    return cols, rows


IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp")
# A checkerboard square (or ChArUco marker) is between 1 mm and 50 cm: a bare number outside
# this range is not metres (``--square 20`` meant 20 mm).
PLAUSIBLE_SQUARE_M = (1e-3, 0.5)


def parse_length(text: str, option: str = "--square") -> float:
    """``"20mm"``, ``"2 cm"``, ``"0.02m"`` or a bare ``"0.02"`` (metres) -> metres.

    A bare number that is implausible as metres is an error asking for a unit."""
    match = re.fullmatch(r"\s*([-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([A-Za-z]*)\s*", text)
    if not match:
        raise InputError(f"{option} {text!r}: expected a length with its unit, e.g. 20mm")
    value, unit = float(match.group(1)), match.group(2)
    if unit:
        try:
            parsed = parse_unit(unit)
        except UnitError as exc:
            raise InputError(f"{option} {text!r}: {exc}") from None
        if parsed.dims != parse_unit("m").dims:
            raise InputError(f"{option} {text!r}: {unit!r} is not a length; e.g. 20mm")
        value *= parsed.scale
    elif not PLAUSIBLE_SQUARE_M[0] <= value <= PLAUSIBLE_SQUARE_M[1]:
        raise InputError(
            f"{option} {text}: {value:g} m is not a plausible size; give the unit, e.g. "
            f"{option} {text}mm"
        )
    if not value > 0:
        raise InputError(f"{option} {text!r}: must be positive")
    return value


@dataclass(frozen=True)
class BoardViews:
    """Where the board views come from: ``count`` views (0 if unknown) of ``size`` (w, h) px;
    ``names`` the image files (empty for a video); ``what`` describes the source."""

    source: str
    count: int
    size: tuple[int, int]
    names: tuple[str, ...]
    what: str

    def __iter__(self) -> Iterator[tuple[int, np.ndarray]]:
        """(index, grey image) of every view."""
        if not self.names:
            for k, _, img in frames(self.source, gray=True):
                yield k, img
            return
        for k, name in enumerate(self.names):
            yield k, _read_image(name, self.size)


def board_views(source: str | Path) -> BoardViews:
    """The views of a calibration ``source``: a video file, a folder of images, or a glob
    pattern of images (``shots/*.jpg``); an InputError says what was found instead."""
    text = str(source)
    path = Path(text)
    if any(c in text for c in "*?[") and not path.exists():
        names = sorted(p for p in glob.glob(text) if Path(p).suffix.lower() in IMAGE_SUFFIXES)
        if not names:
            raise BoardError(f"{text}: no images match this pattern ({', '.join(IMAGE_SUFFIXES)})")
        return _image_views(text, names, f"{len(names)} images matching {text}")
    if path.is_dir():
        names = sorted(str(p) for p in path.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
        if not names:
            raise BoardError(
                f"{path}: no images in this folder ({', '.join(IMAGE_SUFFIXES)}); give a "
                "folder of checkerboard photos, a glob such as 'shots/*.jpg', or a video"
            )
        return _image_views(text, names, f"{len(names)} images in {path}")
    if path.suffix.lower() in IMAGE_SUFFIXES:
        if not path.exists():
            raise BoardError(f"{path}: no such image")
        return _image_views(text, [text], f"the image {path.name}")
    _, info = open_video(path)
    return BoardViews(text, info.frames, info.size, (), f"video {path.name}")


def _image_views(source: str, names: list[str], what: str) -> BoardViews:
    first = cv2.imread(names[0], cv2.IMREAD_GRAYSCALE)
    if first is None:
        raise BoardError(f"{names[0]}: OpenCV cannot read this image")
    size = (first.shape[1], first.shape[0])
    return BoardViews(source, len(names), size, tuple(names), what)


def _read_image(name: str, size: tuple[int, int]) -> np.ndarray:
    img = cv2.imread(name, cv2.IMREAD_GRAYSCALE)
    if img is None:
        raise BoardError(f"{name}: OpenCV cannot read this image")
    if (img.shape[1], img.shape[0]) != size:
        raise BoardError(
            f"{name}: {img.shape[1]}x{img.shape[0]} px, the other images are "
            f"{size[0]}x{size[1]}; every view must come from the same camera setting"
        )
    return img


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


def _bins(obj: np.ndarray, corners: np.ndarray, size: tuple[int, int]) -> set:
    """Coverage bins of one view: board-centre cell (4 x 3), tilt class (3 x 3) and the
    8 x 6 image cells its corners touch."""
    c = corners.mean(axis=0)
    cell = (min(3, int(4 * c[0] / size[0])), min(2, int(3 * c[1] / size[1])))
    # tilt from the homography's perspective row: its terms scaled by the board extent say
    # how much the board shrinks across it (0 = seen square-on)
    H, _ = cv2.findHomography(obj[:, :2], corners, 0)
    extent = np.ptp(obj[:, :2], axis=0)
    g = H[2, :2] / H[2, 2] * extent if H is not None else np.zeros(2)
    tilt = tuple(int(np.sign(v) * (abs(v) > 0.08)) for v in g)
    spread = {(int(8 * x / size[0]), int(6 * y / size[1])) for x, y in corners}
    return {("pose", cell, tilt)} | {("px", s) for s in spread}


def detect_charuco(gray: np.ndarray, det) -> tuple[np.ndarray, np.ndarray] | None:
    """ChArUco corners: (object points [n, 3] m, image points [n, 2] px), n >= 6, or None."""
    corners, ids, _, _ = det.detectBoard(gray)
    if ids is None or len(ids) < 6:
        return None
    obj = det.getBoard().getChessboardCorners()[ids.ravel()]
    return obj.astype(np.float64), corners.reshape(-1, 2).astype(np.float64)


def charuco_detector(squares: tuple[int, int], square: float, marker: float, dictionary: str):
    """A ``cv2.aruco.CharucoDetector`` for a board of ``squares`` (cols, rows) squares."""
    if not hasattr(cv2.aruco, dictionary):
        raise InputError(f"--charuco {dictionary!r}: not a cv2.aruco dictionary (DICT_4X4_50)")
    d = cv2.aruco.getPredefinedDictionary(getattr(cv2.aruco, dictionary))
    return cv2.aruco.CharucoDetector(cv2.aruco.CharucoBoard(squares, square, marker, d))


def calibrate_video(
    path: str | Path,
    pattern: tuple[int, int],
    square: float,
    model: str = "fisheye",
    max_frames: int = 25,
    max_examined: int = 150,
    progress: Callable[[int, int], None] | None = None,
    charuco: str | None = None,
    marker: float | None = None,
) -> CalibrationReport:
    """Calibrate from the board views of ``path``: a video, a folder of images or a glob of
    images (``board_views``); see the module docstring. ``pattern`` counts inner corners of a
    checkerboard, or squares of a ChArUco board when ``charuco`` names its dictionary
    (``marker``: marker side, m); ``square`` in m."""
    views = board_views(path)
    total = views.count if views.count > 0 else max_examined
    stride = max(1, total // max_examined)
    found: dict = {}
    examined = 0
    det = None
    if charuco is not None:
        det = charuco_detector(pattern, square, marker or 0.75 * square, charuco)
    for k, img in views:
        if progress is not None:
            progress(k + 1, total)
        if k % stride:
            continue
        examined += 1
        view = detect_board(img, pattern) if det is None else detect_charuco(img, det)
        if view is not None:
            found[k] = view
    if len(found) < 4:
        raise BoardError(_too_few_views(views, pattern, len(found), examined, det is not None))
    report = calibrate_views(
        found, pattern, square, model, views.size, max_frames, views.source, examined
    )
    if views.names:
        report = dataclasses.replace(report, names={k: Path(views.names[k]).name for k in found})
    return report


def _too_few_views(views: BoardViews, pattern, found: int, examined: int, charuco: bool) -> str:
    board = f"the {pattern[0]}x{pattern[1]} board"
    if views.names and len(views.names) < 4:
        seen = "shows the board" if found else "does not show the board"
        return (
            f"{views.source}: {views.what} ({seen}); calibration needs at least 4 views of "
            "the board from different angles: give a folder or glob of photos, or a video"
        )
    hint = (
        "--board counts SQUARES and --charuco/--marker match the printed board"
        if charuco
        else "--board counts INNER corners (squares minus one per side)"
    )
    where = "images" if views.names else f"frames 0-{max(views.count, examined) - 1}"
    return (
        f"{views.source}: {where}: {board} was found in {found} of {examined} examined "
        f"{'images' if views.names else 'frames'} (need 4); check {hint} and that the board is "
        "in view and sharp"
    )


def calibrate_views(
    found: dict,
    pattern: tuple[int, int],
    square: float,
    model: str,
    size: tuple[int, int],
    max_frames: int = 25,
    source: str = "",
    examined: int = 0,
) -> CalibrationReport:
    """Pick views for coverage, fit, reject outlier views, refit (pure: no I/O).

    ``found`` maps frame index to the corners [N, 2] of a full checkerboard view, or to
    (object points [n, 3], image points [n, 2]) of a partial (ChArUco) view."""
    full = board_points(pattern, square)
    found = {k: v if isinstance(v, tuple) else (full, v) for k, v in found.items()}
    bins = {k: _bins(o, c, size) for k, (o, c) in found.items()}
    chosen: list[int] = []
    covered: set = set()
    while len(chosen) < min(max_frames, len(found)):
        k = max((k for k in found if k not in chosen), key=lambda k: len(bins[k] - covered))
        chosen.append(k)
        covered |= bins[k]
    camera, per = _fit(model, {k: found[k] for k in chosen}, size)
    med = float(np.median(list(per.values())))
    rejected = {k: v for k, v in per.items() if v > max(3 * med, 0.5)}
    if rejected and len(per) - len(rejected) >= 4:
        keep = {k: found[k] for k in chosen if k not in rejected}
        camera, per = _fit(model, keep, size)
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


def _fit(model: str, views: dict[int, tuple], size) -> tuple[Camera, dict]:
    keys = sorted(views)
    objs = [views[k][0].astype(np.float64) for k in keys]
    imgs = [views[k][1].astype(np.float64) for k in keys]
    if model == "fisheye":
        # OpenCV 5's fisheye.calibrate wants (1, N, 3) / (1, N, 2) float64 per view
        flags = cv2.CALIB_RECOMPUTE_EXTRINSIC | cv2.CALIB_FIX_SKEW
        crit = (cv2.TERM_CRITERIA_COUNT | cv2.TERM_CRITERIA_EPS, 200, 1e-12)
        _, K, D, rvecs, tvecs = cv2.fisheye.calibrate(
            [o.reshape(1, -1, 3) for o in objs],
            [p.reshape(1, -1, 2) for p in imgs],
            size,
            None,
            None,
            flags=flags,
            criteria=crit,
        )
        camera = Camera("fisheye", K, D.ravel(), size)
    elif model == "pinhole":
        _, K, D, rvecs, tvecs = cv2.calibrateCamera(
            [o.astype(np.float32) for o in objs],
            [p.astype(np.float32) for p in imgs],
            size,
            None,
            None,
        )
        camera = Camera("pinhole", K, D.ravel()[:5], size)
    else:
        raise InputError(f"--model {model!r}: expected fisheye or pinhole")
    per = {}
    for k, o, p, r, t in zip(keys, objs, imgs, rvecs, tvecs, strict=True):
        proj = camera.project(o, r, t)
        per[k] = float(np.sqrt(np.mean(np.sum((proj - p) ** 2, axis=1))))
    return camera, per
