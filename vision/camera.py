"""Camera models (OpenCV fisheye and pinhole) and their JSON form.

Pixel convention is OpenCV's: the centre of the top-left pixel is (0, 0), x right, y down.
The JSON is what OpenCV users expect (``K`` 3x3, ``D`` list, image ``width``/``height``) plus
``model`` and calibration statistics.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import cv2
import numpy as np

from physid.errors import InputError
from physid.files import atomic_open

MODELS = ("fisheye", "pinhole")
# Iterative undistortion: OpenCV's default (10 iterations) leaves ~0.01 px errors at the edge
# of a strong fisheye; 50 iterations to 1e-12 make the round trip exact to 1e-6 px.
_CRITERIA = (cv2.TERM_CRITERIA_COUNT | cv2.TERM_CRITERIA_EPS, 50, 1e-12)


class CalibrationError(InputError):
    """A camera JSON file that cannot be used; the message names the file."""


@dataclass(frozen=True)
class Camera:
    """Intrinsics: ``K`` (3x3, px), distortion ``D`` (fisheye: k1..k4; pinhole: k1 k2 p1 p2 k3),
    image ``size`` = (width, height) px."""

    model: str
    K: np.ndarray
    D: np.ndarray
    size: tuple[int, int]
    info: dict = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        if self.model not in MODELS:
            raise ValueError(f"camera model {self.model!r}; expected one of {MODELS}")
        object.__setattr__(self, "K", np.asarray(self.K, dtype=float).reshape(3, 3))
        n = 4 if self.model == "fisheye" else None
        d = np.asarray(self.D, dtype=float).ravel()
        if n is not None and d.size != n:
            raise ValueError(f"fisheye D needs 4 coefficients, got {d.size}")
        object.__setattr__(self, "D", d)
        object.__setattr__(self, "size", (int(self.size[0]), int(self.size[1])))

    # --- projection ---------------------------------------------------------------------
    def project(self, points: np.ndarray, rvec=None, tvec=None) -> np.ndarray:
        """Pixels [N, 2] of 3D points [N, 3] (m) given in the camera frame, or in a frame
        with pose ``rvec``, ``tvec`` (Rodrigues, m) relative to the camera."""
        pts = np.ascontiguousarray(np.asarray(points, dtype=float).reshape(-1, 1, 3))
        if pts.shape[0] == 0:
            return np.zeros((0, 2))
        r = np.zeros(3) if rvec is None else np.asarray(rvec, dtype=float).reshape(3)
        t = np.zeros(3) if tvec is None else np.asarray(tvec, dtype=float).reshape(3)
        if self.model == "fisheye":
            px, _ = cv2.fisheye.projectPoints(pts, r, t, self.K, self.D)
        else:
            px, _ = cv2.projectPoints(pts, r, t, self.K, self.D)
        return px.reshape(-1, 2)

    def normalize(self, pixels: np.ndarray) -> np.ndarray:
        """Undistorted normalized coordinates [N, 2] (x/z, y/z) of distorted pixels [N, 2]."""
        px = np.ascontiguousarray(np.asarray(pixels, dtype=float).reshape(-1, 1, 2))
        if px.shape[0] == 0:
            return np.zeros((0, 2))
        if self.model == "fisheye":
            out = cv2.fisheye.undistortPoints(px, self.K, self.D, criteria=_CRITERIA)
        else:
            out = cv2.undistortPoints(px, self.K, self.D, criteria=_CRITERIA)
        return out.reshape(-1, 2)

    # --- JSON ---------------------------------------------------------------------------
    def to_dict(self) -> dict:
        return {
            "model": self.model,
            "width": self.size[0],
            "height": self.size[1],
            "K": self.K.tolist(),
            "D": self.D.tolist(),
            **self.info,
        }

    def save(self, path: str | Path) -> Path:
        """Write the camera as JSON (atomically: a failed run never leaves half a file)."""
        with atomic_open(path) as fh:
            fh.write(json.dumps(self.to_dict(), indent=2) + "\n")
        return Path(path)

    @classmethod
    def from_dict(cls, raw: dict, where: str = "camera") -> Camera:
        try:
            info = {k: v for k, v in raw.items() if k not in ("model", "width", "height", "K", "D")}
            return cls(raw["model"], raw["K"], raw["D"], (raw["width"], raw["height"]), info)
        except (KeyError, ValueError, TypeError) as exc:
            raise CalibrationError(
                f"{where}: not a physid camera file ({exc}); expected keys model "
                "(fisheye|pinhole), width, height, K (3x3), D; make one with physid calibrate"
            ) from None

    @classmethod
    def load(cls, path: str | Path) -> Camera:
        path = Path(path)
        try:
            raw = json.loads(path.read_text())
        except OSError as exc:
            raise CalibrationError(f"{path}: cannot read camera file: {exc.strerror}") from None
        except json.JSONDecodeError as exc:
            raise CalibrationError(f"{path}: not valid JSON ({exc}); re-run calibrate") from None
        return cls.from_dict(raw, str(path))


def action_camera(width: int = 1280, height: int = 720) -> Camera:
    """A GoPro-like fisheye (equidistant-ish, ~120 degrees horizontal) used by the renderer."""
    f = 600.0 * width / 1280.0
    K = [[f, 0.0, (width - 1) / 2 + 3.2], [0.0, f * 1.002, (height - 1) / 2 - 2.7], [0, 0, 1]]
    return Camera("fisheye", K, [0.045, -0.012, 0.004, -0.0008], (width, height))


def pinhole_camera(width: int = 1280, height: int = 720) -> Camera:
    """A mildly distorted pinhole camera for tests of the pinhole path."""
    f = 900.0 * width / 1280.0
    K = [[f, 0.0, (width - 1) / 2], [0.0, f, (height - 1) / 2], [0, 0, 1]]
    return Camera("pinhole", K, [-0.08, 0.02, 0.0, 0.0, 0.0], (width, height))


def rodrigues(R: np.ndarray) -> np.ndarray:
    """Rotation vector (rad) of a rotation matrix."""
    return cv2.Rodrigues(np.asarray(R, dtype=float))[0].ravel()
