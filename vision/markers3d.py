"""Square fiducial markers (ArUco) moving in 3D: an exact renderer and an identity tracker.

Rendering is ray casting through the exact inverse of the camera model (``Camera.normalize``
of every pixel corner, once): inside a small window around each marker, each pixel corner's
ray meets the marker plane, pixels wholly inside one module take its colour, and pixels on an
edge are box-filtered from ``S x S`` sub-samples: the image of a flat marker through the
fisheye with anti-aliased edges and exact perspective, no planar approximation. Markers are plates
(black ArUco square plus a white quiet zone); a plate seen from behind shows its plain back,
nearer plates cover farther ones (painter's order by depth).

Tracking detects the markers with ``cv2.aruco`` (ids give identity), refines the four outer
corners, and takes the marker centre as the intersection of the diagonals *in undistorted
normalized coordinates*, re-projected through the camera: a projective map sends the
square's centre to the intersection of the image diagonals, so this is exact for a flat
marker under any pose, where the mean of the four corners is not.

World frame: any right-handed frame (the Furuta helpers use y up); camera extrinsics are
``x_c = R_cw @ x_w + t_cw`` (m), camera frame x right, y down, z forward (OpenCV).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import cv2
import numpy as np

from physid.errors import InputError
from physid.streams import Stream
from physid.vision.camera import Camera
from physid.vision.video import VideoWriter, frames, open_video

BACKGROUND, PLATE, INK, PLATE_BACK, ROD = 200.0, 238.0, 28.0, 150.0, 120.0
DICTIONARY = "DICT_4X4_50"
MIN_MODULE_PX = 2.0  # narrower modules (far or edge-on) give no clean edge profile
MIN_CONTRAST = 20.0  # grey levels between border and quiet zone
N_PROFILE = 13  # samples across each edge profile


class MarkerTrackingError(InputError):
    """A marker video that does not match the camera or the request; names file and frame."""


# --- geometry --------------------------------------------------------------------------------
def look_at(eye, target, up=(0.0, 1.0, 0.0)) -> tuple[np.ndarray, np.ndarray]:
    """Extrinsics ``(R_cw, t_cw)`` of a camera at ``eye`` (m, world) looking at ``target``
    with image "up" towards world ``up`` (no roll)."""
    eye, target = np.asarray(eye, dtype=float), np.asarray(target, dtype=float)
    z = target - eye
    z /= np.linalg.norm(z)
    x = np.cross(z, np.asarray(up, dtype=float))
    x /= np.linalg.norm(x)
    y = np.cross(z, x)  # image y points down
    R = np.vstack([x, y, z])
    return R, -R @ eye


@dataclass(frozen=True)
class MarkerFrames:
    """Per-frame poses of ``m`` markers in world coordinates: ``centres``, unit plane
    ``normals`` (pointing out of the printed face) and unit in-plane ``ups`` (the marker's
    top edge direction), each ``[F, m, 3]`` (m / unitless)."""

    centres: np.ndarray
    normals: np.ndarray
    ups: np.ndarray


def _unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


def furuta_marker_frames(
    theta_arm,
    theta_pend,
    arm_length: float = 0.248,
    arm_marker_at: float = 0.17,
    pend_marker_at: float = 0.13,
    arm_marker_tilt: float = np.pi / 4,
    pend_offset: float = 0.012,
    pend_markers: tuple[tuple[float, float], ...] | None = None,
) -> MarkerFrames:
    """Marker poses on a Furuta pendulum for arm angles ``theta_arm[F]`` and pendulum angles
    ``theta_pend[F]`` (rad).

    Convention: world y up; hinge 1 is the y axis at the origin; the arm points along
    ``d = (cos t1, 0, -sin t1)`` (a positive turn about +y). The pendulum hangs from the arm's
    end (``arm_length`` m) and turns about ``d``: its direction from the hinge is
    ``p = -cos t2 * y + sin t2 * (d x y)``, ``t2 = 0`` hanging down, ``pi`` upright.

    Marker 0 is on the arm, ``arm_marker_at`` m from the axis, its face tilted
    ``arm_marker_tilt`` rad from up towards ``d`` (outwards, to face a camera placed outward
    and above). Marker 1 is on the pendulum ``pend_marker_at`` m from its hinge, its face
    along ``d`` (so it turns in its own plane as the pendulum swings), set ``pend_offset`` m
    outward of the hinge (the plate is mounted on the pendulum's outer face); its top edge
    points to the hinge. ``pend_markers`` = ((distance m, face turn rad), ...) replaces it by
    several pendulum markers (1, 2, ...), each face turned about the pendulum's own axis
    ``p`` from ``d`` (towards ``p x d``): faces turned both ways keep one marker seen
    face-on enough while the arm swings the pendulum's plane away from the camera.
    """
    t1 = np.atleast_1d(np.asarray(theta_arm, dtype=float))
    t2 = np.atleast_1d(np.asarray(theta_pend, dtype=float))
    yhat = np.array([0.0, 1.0, 0.0])
    d = np.stack([np.cos(t1), np.zeros_like(t1), -np.sin(t1)], axis=-1)
    side = np.cross(d, yhat)
    p = -np.cos(t2)[:, None] * yhat + np.sin(t2)[:, None] * side
    c0 = arm_marker_at * d
    n0 = np.cos(arm_marker_tilt) * yhat + np.sin(arm_marker_tilt) * d
    u0 = np.cross(n0, side)  # in the face plane, perpendicular to the arm's side axis
    hinge = arm_length * d
    centres, normals, ups = [c0], [n0], [u0]
    for at, turn in pend_markers or ((pend_marker_at, 0.0),):
        centres.append(hinge + pend_offset * d + at * p)
        normals.append(np.cos(turn) * d + np.sin(turn) * np.cross(p, d))
        ups.append(-p)
    return MarkerFrames(
        centres=np.stack(centres, axis=1),
        normals=_unit(np.stack(normals, axis=1)),
        ups=_unit(np.stack(ups, axis=1)),
    )


def furuta_rods(
    theta_arm, theta_pend, arm_length: float = 0.248, pend_length: float = 0.2
) -> np.ndarray:
    """Rod segments ``[F, 3, 2, 3]`` (m) for drawing: the vertical shaft, the arm, the
    pendulum (same conventions as ``furuta_marker_frames``)."""
    t1 = np.atleast_1d(np.asarray(theta_arm, dtype=float))
    t2 = np.atleast_1d(np.asarray(theta_pend, dtype=float))
    yhat = np.array([0.0, 1.0, 0.0])
    d = np.stack([np.cos(t1), np.zeros_like(t1), -np.sin(t1)], axis=-1)
    p = -np.cos(t2)[:, None] * yhat + np.sin(t2)[:, None] * np.cross(d, yhat)
    origin = np.zeros_like(d)
    hinge = arm_length * d
    shaft = np.stack([origin - 0.15 * yhat, origin], axis=1)
    arm = np.stack([origin, hinge], axis=1)
    pend = np.stack([hinge, hinge + pend_length * p], axis=1)
    return np.stack([shaft, arm, pend], axis=1)


def body_marker_frames(R, p, body, points, normals, ups) -> MarkerFrames:
    """Marker poses for markers fixed on bodies whose world poses per frame are ``R[F, nb,
    3, 3]``, ``p[F, nb, 3]`` (m): marker j sits on body ``body[j]`` at ``points[j]`` (m),
    face ``normals[j]`` and top edge ``ups[j]``, all in that body's frame (any kinematic
    chain: the caller's forward kinematics gives R and p)."""
    R, p = np.asarray(R, dtype=float), np.asarray(p, dtype=float)
    idx = np.asarray(body, dtype=int)
    Rb = R[:, idx]  # [F, m, 3, 3]

    def turn(v):
        return np.einsum("fmij,mj->fmi", Rb, np.asarray(v, dtype=float))

    return MarkerFrames(centres=turn(points) + p[:, idx], normals=_unit(turn(normals)),
                        ups=_unit(turn(ups)))  # fmt: skip


# --- rendering ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class RenderSettings:
    """Sub-samples per edge-pixel side ``supersample``, sensor ``noise`` std (grey levels),
    ``quality`` (MJPG only), white quiet zone width ``quiet`` (whole modules), ArUco
    ``dictionary``, noise ``seed``, rod line width ``rod_px`` (px)."""

    supersample: int = 6
    noise: float = 1.0
    quality: int = 90
    quiet: int = 1
    dictionary: str = DICTIONARY
    seed: int = 0
    rod_px: float = 3.0


def _bitmap(marker_id: int, dictionary: str) -> np.ndarray:
    """Module colours of the marker with its black border: [n, n] grey levels, row 0 on top."""
    d = cv2.aruco.getPredefinedDictionary(getattr(cv2.aruco, dictionary))
    n = d.markerSize + 2
    img = cv2.aruco.generateImageMarker(d, int(marker_id), n)
    return np.where(img > 127, PLATE, INK)


class MarkerRenderer:
    """Renders frames of square markers of side ``side`` m (the black square, as OpenCV
    defines an ArUco marker's length) with ids ``ids`` through ``camera`` at ``(R_cw, t_cw)``."""

    def __init__(self, camera: Camera, R_cw, t_cw, ids, side, settings=RenderSettings()):
        self.camera = camera
        self.R = np.asarray(R_cw, dtype=float)
        self.t = np.asarray(t_cw, dtype=float).reshape(3)
        self.ids = [int(i) for i in ids]
        self.side = np.broadcast_to(np.asarray(side, dtype=float), (len(self.ids),)).copy()
        self.settings = settings
        self.bitmaps = [_bitmap(i, settings.dictionary) for i in self.ids]
        q = int(settings.quiet)
        self.plates = [np.pad(b, q, constant_values=PLATE) for b in self.bitmaps]
        # exact rays through every pixel corner, once (~0.1 s for 800x600)
        w, h = camera.size
        u, v = np.meshgrid(np.arange(w + 1) - 0.5, np.arange(h + 1) - 0.5)
        rays = camera.normalize(np.column_stack([u.ravel(), v.ravel()]))
        self._rays_x = rays[:, 0].reshape(h + 1, w + 1)
        self._rays_y = rays[:, 1].reshape(h + 1, w + 1)

    def to_camera(self, pts_w: np.ndarray) -> np.ndarray:
        return np.asarray(pts_w, dtype=float) @ self.R.T + self.t

    def project(self, pts_w: np.ndarray) -> np.ndarray:
        """Pixels [..., 2] of world points [..., 3] (NaN behind the camera)."""
        pts_w = np.asarray(pts_w, dtype=float)
        pc = self.to_camera(pts_w.reshape(-1, 3))
        px = self.camera.project(pc)
        px[pc[:, 2] <= 1e-6] = np.nan
        return px.reshape(*pts_w.shape[:-1], 2)

    def _plate_half(self, j: int) -> float:
        n = self.bitmaps[j].shape[0]
        return self.side[j] / 2 * (1 + 2 * int(self.settings.quiet) / n)

    def _frame_axes(self, normal, up) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Camera-frame unit axes (x right, y up, z out of the face) of a marker."""
        n = self.R @ _unit(np.asarray(normal, dtype=float))
        y = self.R @ np.asarray(up, dtype=float)
        y = _unit(y - (y @ n) * n)  # tolerate an "up" that is not exactly in the plane
        return np.cross(y, n), y, n

    def plate_outline(self, j: int, centre, normal, up, per_side: int = 8) -> np.ndarray:
        """Camera-frame points [4 * per_side, 3] along the plate's edge (fisheye curves the
        edges, so the corners alone do not bound the image of the plate)."""
        ex, ey, _ = self._frame_axes(normal, up)
        c = self.to_camera(centre)
        h = self._plate_half(j)
        s = np.linspace(-1, 1, per_side, endpoint=False)
        a = np.concatenate([s, np.ones_like(s), -s, -np.ones_like(s)]) * h
        b = np.concatenate([np.ones_like(s), -s, -np.ones_like(s), s]) * h
        return c + a[:, None] * ex + b[:, None] * ey

    def _roi(self, outline_c: np.ndarray) -> tuple[slice, slice] | None:
        if np.any(outline_c[:, 2] <= 1e-3):
            return None  # crosses the camera plane: not imaged (a rig never does this)
        px = self.camera.project(outline_c)
        w, h = self.camera.size
        x0, y0 = np.floor(px.min(axis=0)).astype(int) - 2
        x1, y1 = np.ceil(px.max(axis=0)).astype(int) + 3
        x0, y0, x1, y1 = max(x0, 0), max(y0, 0), min(x1, w), min(y1, h)
        if x1 <= x0 or y1 <= y0:
            return None
        return slice(y0, y1), slice(x0, x1)

    def _draw_marker(self, img, j: int, centre, normal, up) -> None:
        """Composite marker ``j`` over ``img`` (float, modified in place).

        The plate coordinates (in modules) are computed exactly at the ROI's pixel corners;
        a pixel whose four corners fall in the same module cell takes that cell's value, and
        only the others (edge pixels) are supersampled, bilinearly between their corners
        (the map is smooth at the sub-pixel scale: <= 0.002 px from the exact ray cast).
        """
        roi = self._roi(self.plate_outline(j, centre, normal, up))
        if roi is None:
            return
        ys, xs = roi
        rx = self._rays_x[ys.start : ys.stop + 1, xs.start : xs.stop + 1]
        ry = self._rays_y[ys.start : ys.stop + 1, xs.start : xs.stop + 1]
        ex, ey, n = self._frame_axes(normal, up)
        c = self.to_camera(centre)
        depth = (c @ n) / (rx * n[0] + ry * n[1] + n[2])
        hx, hy, hz = rx * depth - c[0], ry * depth - c[1], depth - c[2]
        nmod = self.bitmaps[j].shape[0]
        per_mod = nmod / self.side[j]
        # module coordinates: col right, row down, 0 at the black square's top-left corner
        col = (hx * ex[0] + hy * ex[1] + hz * ex[2]) * per_mod + nmod / 2
        row = nmod / 2 - (hx * ey[0] + hy * ey[1] + hz * ey[2]) * per_mod
        front = c @ n < 0  # the printed face looks at the camera
        plate = self.plates[j] if front else np.full_like(self.plates[j], PLATE_BACK)
        q = self.settings.quiet
        cell = self._cell(col + q, row + q, plate.shape[0], depth)
        same = (
            (cell[:-1, :-1] == cell[:-1, 1:])
            & (cell[:-1, :-1] == cell[1:, :-1])
            & (cell[:-1, :-1] == cell[1:, 1:])
        )
        flat = np.append(plate.ravel(), 0.0)  # index -1: not on the plate
        cover = (cell[:-1, :-1] >= 0).astype(float)
        value = flat[cell[:-1, :-1]] * cover
        iy, ix = np.nonzero(~same)
        if iy.size:
            cover[iy, ix], value[iy, ix] = self._supersample(col + q, row + q, iy, ix, plate, depth)
        img[roi] = img[roi] * (1 - cover) + value

    @staticmethod
    def _cell(col, row, size: int, depth) -> np.ndarray:
        """Flat plate-cell index of module coordinates, -1 off the plate (or behind)."""
        ci, ri = np.floor(col).astype(int), np.floor(row).astype(int)
        on = (ci >= 0) & (ci < size) & (ri >= 0) & (ri < size) & (depth > 0)
        return np.where(on, ri * size + ci, -1)

    def _supersample(self, col, row, iy, ix, plate, depth) -> tuple[np.ndarray, np.ndarray]:
        """Coverage and value of pixels (iy, ix) from S x S sub-samples (bilinear between
        the pixel's corner coordinates)."""
        s = self.settings.supersample
        f = (np.arange(s) + 0.5) / s
        fu, fv = (g.ravel()[None, :] for g in np.meshgrid(f, f))

        def bilinear(a):
            a00, a01 = a[iy, ix][:, None], a[iy, ix + 1][:, None]
            a10, a11 = a[iy + 1, ix][:, None], a[iy + 1, ix + 1][:, None]
            return (a00 * (1 - fu) + a01 * fu) * (1 - fv) + (a10 * (1 - fu) + a11 * fu) * fv

        d = np.minimum.reduce([depth[iy, ix], depth[iy, ix + 1], depth[iy + 1, ix]])
        cell = self._cell(bilinear(col), bilinear(row), plate.shape[0], d[:, None])
        flat = np.append(plate.ravel(), 0.0)
        return (cell >= 0).mean(axis=1), flat[cell].mean(axis=1)

    def _draw_rods(self, img, rods_w: np.ndarray) -> None:
        """Grey anti-aliased polylines along the (fisheye-curved) images of the rods."""
        w = self.settings.rod_px
        shift = 4  # cv2 draws with 1/16 px precision
        for a, b in rods_w:
            pts = a + np.linspace(0, 1, 24)[:, None] * (b - a)
            px = self.project(pts)
            if not np.all(np.isfinite(px)):
                continue
            poly = np.rint(px * (1 << shift)).astype(np.int32)
            cv2.polylines(img, [poly], False, ROD, max(1, round(w)), cv2.LINE_AA, shift)

    def frame(self, centres, normals, ups, hidden=None, rods=None) -> np.ndarray:
        """Float grey image of one frame (before noise): markers ``[m, 3]`` poses (world),
        ``hidden[m]`` markers left out (an occluder), optional rod segments ``[k, 2, 3]``."""
        w, h = self.camera.size
        img = np.full((h, w), BACKGROUND, dtype=np.float64)
        if rods is not None:
            self._draw_rods(img, np.asarray(rods, dtype=float))
        depth = self.to_camera(np.asarray(centres, dtype=float))[:, 2]
        for j in np.argsort(-depth):  # far to near: nearer plates cover farther ones
            if hidden is not None and hidden[j]:
                continue
            self._draw_marker(img, int(j), centres[j], normals[j], ups[j])
        return img

    def truth(self, centres, normals, ups) -> dict:
        """Exact image quantities per frame: ``centre_px [F, m, 2]`` (projected centres),
        ``corners_px [F, m, 4, 2]`` (black square, OpenCV order: top-left clockwise),
        ``view_angle [F, m]`` (rad between the face normal and the direction to the camera;
        > pi/2 means seen from behind), ``depth [F, m]`` (m, camera z)."""
        centres = np.asarray(centres, dtype=float)
        F, m = centres.shape[:2]
        corners = np.empty((F, m, 4, 3))
        angle = np.empty((F, m))
        for k in range(F):
            for j in range(m):
                ex, ey, n = self._frame_axes(normals[k, j], ups[k, j])
                c = self.to_camera(centres[k, j])
                h = self.side[j] / 2
                corners[k, j] = c + h * np.array([-ex + ey, ex + ey, ex - ey, -ex - ey])
                angle[k, j] = np.arccos(np.clip(-(c @ n) / np.linalg.norm(c), -1, 1))
        cam_centres = self.to_camera(centres.reshape(-1, 3))
        return {
            "centre_px": self.project(centres),
            "corners_px": self.camera.project(corners.reshape(-1, 3)).reshape(F, m, 4, 2),
            "view_angle": angle,
            "depth": cam_centres[:, 2].reshape(F, m),
        }


def render_marker_video(
    path: str | Path,
    camera: Camera,
    R_cw,
    t_cw,
    centres,
    normals,
    ups,
    ids,
    side,
    fps: float = 120.0,
    settings: RenderSettings = RenderSettings(),
    hidden=None,
    rods=None,
    progress: Callable[[int], None] | None = None,
) -> dict:
    """Write a video of markers ``ids`` (side ``side`` m, scalar or per marker) whose world
    poses per frame are ``centres``, ``normals``, ``ups`` ``[F, m, 3]``, frame k at time
    ``k / fps`` (s); ``hidden[F, m]`` leaves markers out (occlusions), ``rods[F, k, 2, 3]``
    draws grey rods. Suffix picks the codec (``.mp4``: mp4v, small; ``.avi``: MJPG).

    Motion blur: poses of shape ``[F, S, m, 3]`` (S odd) are S instants evenly spread over
    each frame's exposure, the middle one at the frame time; the frame is the mean of their
    renders (a box shutter) and the truth is that of the middle instant.

    Returns (and saves as ``<path>.truth.npz``) the truth: ``t`` (s), ``centre_px``,
    ``corners_px``, ``view_angle``, ``depth`` (see ``MarkerRenderer.truth``), ``in_view``
    [F, m] (face towards the camera, plate wholly inside the image, not hidden), ``ids``,
    ``side``, the camera ``K``, ``D``, ``size``, ``R_cw``, ``t_cw``.
    """
    path = Path(path)
    centres = np.asarray(centres, dtype=float)
    normals = np.asarray(normals, dtype=float)
    ups = np.asarray(ups, dtype=float)
    if normals.shape != centres.shape or ups.shape != centres.shape:
        raise ValueError(f"centres {centres.shape}, normals {normals.shape}, ups {ups.shape}")
    if centres.ndim == 3:  # sharp: one instant per frame
        centres, normals, ups = centres[:, None], normals[:, None], ups[:, None]
    F, S, m = centres.shape[:3]
    if S % 2 == 0:
        raise ValueError(f"{S} sub-exposure instants; give an odd number (the middle is the frame)")
    hidden = np.zeros((F, m), bool) if hidden is None else np.asarray(hidden, dtype=bool)
    rnd = MarkerRenderer(camera, R_cw, t_cw, ids, side, settings)
    rng = np.random.default_rng(settings.seed)
    with VideoWriter(path, fps, camera.size, settings.quality) as out:
        for k in range(F):
            rod = None if rods is None else rods[k]
            img = (
                sum(
                    rnd.frame(centres[k, i], normals[k, i], ups[k, i], hidden[k], rod)
                    for i in range(S)
                )
                / S
            )
            if settings.noise > 0:
                img += rng.standard_normal(img.shape) * settings.noise
            out.write(np.clip(np.rint(img), 0, 255).astype(np.uint8))
            if progress is not None:
                progress(k + 1)
    centres, normals, ups = (a[:, S // 2] for a in (centres, normals, ups))
    truth = rnd.truth(centres, normals, ups)
    truth.update(
        t=np.arange(F) / fps,
        in_view=_in_view(rnd, truth, centres, normals, ups) & ~hidden,
        hidden=hidden,
        ids=np.array(rnd.ids),
        side=rnd.side,
        K=camera.K,
        D=camera.D,
        size=np.array(camera.size),
        R_cw=rnd.R,
        t_cw=rnd.t,
    )
    np.savez(truth_path(path), **truth)
    return truth


def _in_view(rnd: MarkerRenderer, truth: dict, centres, normals, ups) -> np.ndarray:
    F, m = centres.shape[:2]
    w, h = rnd.camera.size
    ok = truth["view_angle"] < np.pi / 2
    for k in range(F):
        for j in range(m):
            pc = rnd.plate_outline(j, centres[k, j], normals[k, j], ups[k, j])
            if np.any(pc[:, 2] <= 1e-3):
                ok[k, j] = False
                continue
            px = rnd.camera.project(pc)
            ok[k, j] &= bool(np.all((px >= 0) & (px <= [w - 1, h - 1])))
    return ok


def truth_path(path: str | Path) -> Path:
    path = Path(path)
    return path.with_name(path.name + ".truth.npz")


def load_truth(path: str | Path) -> dict:
    """The truth written beside a video by ``render_marker_video``."""
    with np.load(truth_path(path)) as data:
        return {k: data[k] for k in data.files}


# --- tracking ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class MarkerTracks:
    """Per-frame marker centres from ``track_markers``.

    ``t[F]`` presentation times (s), ``frame[F]`` indices; for the markers ``ids`` (m of
    them, in the order asked for): ``uv[F, m, 2]`` pixel centres in the distorted image
    (NaN where missing), ``missing[F, m]``, ``corners[F, m, 4, 2]`` refined corners (px,
    top-left clockwise), ``side_px[F, m]`` mean side length (px), ``edge_rms[F, m]`` RMS
    distance (px) of the edge points from the fitted straight sides (a fit-quality number:
    ~0.02-0.05 px on a clean sharp marker), ``n_detected[F]`` how many were found.
    """

    path: Path
    ids: tuple[int, ...]
    t: np.ndarray
    frame: np.ndarray
    uv: np.ndarray
    missing: np.ndarray
    corners: np.ndarray
    side_px: np.ndarray
    edge_rms: np.ndarray
    n_detected: np.ndarray
    stats: dict = field(default_factory=dict)

    def stream(self) -> Stream:
        """A Stream with channels ``m<id>_u``, ``m<id>_v`` (px) per marker; a missing marker
        is missing (NaN) in both of its channels, nothing is interpolated."""
        F, m = self.missing.shape
        channels = tuple(f"m{i}_{c}" for i in self.ids for c in ("u", "v"))
        values = self.uv.reshape(F, 2 * m)
        missing = np.repeat(self.missing, 2, axis=1)
        return Stream(
            self.t,
            values,
            channels,
            ("px",) * (2 * m),
            missing,
            {"file": str(self.path), **self.stats},
        )


def detector(dictionary: str = DICTIONARY) -> cv2.aruco.ArucoDetector:
    """ArUco detector for finding markers; corners are refined by ``refine_corners``."""
    if not hasattr(cv2.aruco, dictionary):
        raise ValueError(f"unknown ArUco dictionary {dictionary!r}")
    params = cv2.aruco.DetectorParameters()
    # contour refinement gives ~0.5 px corners: enough to place the edge profiles
    params.cornerRefinementMethod = cv2.aruco.CORNER_REFINE_CONTOUR
    d = cv2.aruco.getPredefinedDictionary(getattr(cv2.aruco, dictionary))
    return cv2.aruco.ArucoDetector(d, params)


def _line_intersection(p, q, r, s) -> np.ndarray:
    """Intersection of lines p-q and r-s (2D points)."""
    d1, d2 = np.subtract(q, p), np.subtract(s, r)
    den = d1[0] * d2[1] - d1[1] * d2[0]
    u = ((r[0] - p[0]) * d2[1] - (r[1] - p[1]) * d2[0]) / den
    return np.asarray(p, dtype=float) + u * d1


def centre_from_corners(camera: Camera, corners_px: np.ndarray) -> np.ndarray:
    """Pixel [2] of the centre of a flat square from its 4 corners (px, in order around the
    square): the diagonals meet at the image of the centre in undistorted coordinates."""
    n = camera.normalize(corners_px)
    c = _line_intersection(n[0], n[2], n[1], n[3])
    return camera.project(np.array([[c[0], c[1], 1.0]]))[0]


@dataclass(frozen=True)
class EdgeFit:
    """Refined corners (px [4, 2] and normalized [4, 2]), edge residual RMS (px), mean side
    length (px), black and white levels (grey)."""

    corners_px: np.ndarray
    corners_n: np.ndarray
    rms_px: float
    side_px: float
    contrast: float


def refine_corners(
    gray: np.ndarray, camera: Camera, corners_px: np.ndarray, modules: int = 6, passes: int = 2
) -> EdgeFit | None:
    """Corners of a square marker from straight-line fits to its four outer edges.

    Each side is sampled every ~1 px between 8 % and 92 % of its length; along the image
    normal at each sample an intensity profile spans +/- 0.45 of a module (inside: the black
    border module, outside: the white quiet zone), and the edge's position on the profile is
    its *area* estimate ``e = w - integral((I - B) / (W - B))``, exact for any symmetric blur
    of a straight edge and linear in the image. The edge points are undistorted, a straight
    line is fitted to each side in normalized coordinates (where the sides of a flat square
    are straight), and adjacent lines meet at the corners. None when the contrast is too low
    or the modules are too narrow (< ``MIN_MODULE_PX`` = 2 px across a side) to place a
    profile.
    """
    n = camera.normalize(corners_px)
    fit = None
    for _ in range(passes):
        fit = _edge_pass(gray, camera, n, modules)
        if fit is None:
            return None
        n = fit.corners_n
    return fit


_NEXT, _PREV, _OPP = [1, 2, 3, 0], [3, 0, 1, 2], [2, 3, 0, 1]


def _homog(a: np.ndarray) -> np.ndarray:
    """Normalized points [..., 2] -> rays [..., 3] with z = 1."""
    return np.concatenate([a, np.ones((*a.shape[:-1], 1))], axis=-1)


def _edge_pass(gray, camera: Camera, n: np.ndarray, modules: int) -> EdgeFit | None:
    """One refinement pass, vectorized over the four sides (index i: corner i to i+1)."""
    px_corners = camera.project(_homog(n))
    lengths = np.linalg.norm(px_corners - px_corners[_NEXT], axis=1)
    if lengths.min() < MIN_MODULE_PX * modules:
        return None
    a, b = n, n[_NEXT]
    # the opposite side, run the same way, to find "one module inwards"
    oa, ob = n[_PREV], n[_OPP]
    k = max(8, int(lengths.max() * 0.84))
    t = np.linspace(0.08, 0.92, k)[None, :, None]
    on = a[:, None] + t * (b - a)[:, None]
    inward = on + (oa[:, None] + t * (ob - oa)[:, None] - on) / modules
    proj = camera.project(_homog(np.concatenate([on, inward]).reshape(-1, 2))).reshape(8, k, 2)
    p_on, p_in = proj[:4], proj[4:]
    # unit image normal pointing out of the marker, and the module width along it
    tangent = np.gradient(p_on, axis=1)
    nrm = np.stack([tangent[..., 1], -tangent[..., 0]], axis=-1)
    nrm /= np.linalg.norm(nrm, axis=-1, keepdims=True)
    depth_in = np.sum((p_in - p_on) * nrm, axis=-1)
    nrm = np.where((depth_in > 0)[..., None], -nrm, nrm)
    module_px = np.abs(depth_in).mean(axis=1)
    if module_px.min() < MIN_MODULE_PX:
        return None
    half = 0.45 * module_px[:, None, None]
    offs = np.linspace(-1.0, 1.0, N_PROFILE)[None, None, :] * half
    sx = (p_on[..., 0:1] + offs * nrm[..., 0:1]).astype(np.float32)
    sy = (p_on[..., 1:2] + offs * nrm[..., 1:2]).astype(np.float32)
    h, w = gray.shape
    if sx.min() < 0 or sy.min() < 0 or sx.max() > w - 1 or sy.max() > h - 1:
        return None  # a side at the image border: no clean profile
    prof = cv2.remap(gray, sx.reshape(4 * k, -1), sy.reshape(4 * k, -1), cv2.INTER_LINEAR)
    prof = prof.reshape(4, k, N_PROFILE).astype(np.float64)
    # levels: the profile ends, inside the black border and inside the white quiet zone
    black = prof[..., :2].mean(axis=(1, 2))[:, None, None]
    white = prof[..., -2:].mean(axis=(1, 2))[:, None, None]
    if np.min(white - black) < MIN_CONTRAST:
        return None
    frac = np.clip((prof - black) / (white - black), -0.5, 1.5)
    step = 2 * half[..., 0] / (N_PROFILE - 1)
    area = (frac.sum(axis=-1) - 0.5 * (frac[..., 0] + frac[..., -1])) * step
    e = half[..., 0] - area  # edge offset along the outward normal (px)
    edge_n = camera.normalize((p_on + e[..., None] * nrm).reshape(-1, 2)).reshape(4, k, 2)
    corners_n, resid = _fit_sides(edge_n)
    px_per_n = lengths / np.linalg.norm(b - a, axis=1)
    return EdgeFit(
        corners_px=camera.project(_homog(corners_n)),
        corners_n=corners_n,
        rms_px=float(np.sqrt(np.mean((resid * px_per_n[:, None]) ** 2))),
        side_px=float(lengths.mean()),
        contrast=float(np.min(white - black)),
    )


def _fit_sides(pts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Total least squares lines through each side's points [4, k, 2]; corner i is where
    sides i-1 and i meet. Returns corners [4, 2] and residuals [4, k] (same units)."""
    c = pts.mean(axis=1, keepdims=True)
    d = pts - c
    sxx, syy = (d[..., 0] ** 2).sum(axis=1), (d[..., 1] ** 2).sum(axis=1)
    sxy = (d[..., 0] * d[..., 1]).sum(axis=1)
    phi = 0.5 * np.arctan2(2 * sxy, sxx - syy)  # direction of the principal axis
    nx, ny = -np.sin(phi), np.cos(phi)  # unit line normals
    rho = nx * c[:, 0, 0] + ny * c[:, 0, 1]
    resid = d[..., 0] * nx[:, None] + d[..., 1] * ny[:, None]
    # corner i: nx_p x + ny_p y = rho_p (side i-1) and nx x + ny y = rho (side i)
    nxp, nyp, rp = nx[_PREV], ny[_PREV], rho[_PREV]
    det = nxp * ny - nyp * nx
    corners = np.stack([(rp * ny - nyp * rho) / det, (nxp * rho - rp * nx) / det], axis=1)
    return corners, resid


def track_markers(
    path: str | Path,
    camera: Camera,
    ids,
    side=None,
    progress: Callable[[int], None] | None = None,
    dictionary: str = DICTIONARY,
    max_edge_rms: float = 0.5,
    full_search_every: int = 4,
) -> MarkerTracks:
    """Track ArUco markers ``ids`` in the video ``path`` seen through ``camera``.

    Identity comes from the ids alone (a marker is never swapped). Each frame, a marker found
    in the previous frame is first searched for in a window around its constant-velocity
    prediction (widened while the marker is unseen); markers not found so are searched for
    in the whole frame, every ``full_search_every`` frames (1: every frame). Each found
    marker's corners are refined (``refine_corners``) and its centre is the diagonal
    intersection in normalized coordinates (``centre_from_corners``). ``progress(n)`` gets
    the number of frames done. A marker is *missing* when it is not detected, when its
    modules are too narrow to refine (< 2 px: far away or seen edge-on, typically beyond
    ~65 deg from face-on), when its edge fit is poor (``edge_rms > max_edge_rms`` px: partly
    covered, at the image border), or when its id is seen twice in a whole-frame search.
    ``side`` (m) is only recorded: the centre needs no metric size.
    """
    path = Path(path)
    ids = tuple(int(i) for i in ids)
    _, info = open_video(path)
    if info.size != camera.size:
        raise MarkerTrackingError(
            f"{path}: frame 0: video is {info.size[0]}x{info.size[1]} px but the camera is "
            f"{camera.size[0]}x{camera.size[1]}; calibrate at the recording resolution"
        )
    tracker = _Tracker(camera, detector(dictionary), ids, max_edge_rms, full_search_every)
    rows = []
    for k, t, img in frames(path):
        gray = img if img.ndim == 2 else cv2.cvtColor(img, cv2.COLOR_BGR2GRAY)
        rows.append((k, t, tracker.step(gray)))
        if progress is not None:
            progress(k + 1)
    if not rows:
        raise MarkerTrackingError(f"{path}: frame 0: the video has no frames")
    return _collect(path, camera, ids, side, rows, tracker.reasons)


class _Tracker:
    """Per-frame detection: first in a window around each marker's last detection (moved by
    its last velocity, widened while it is unseen), then, for markers not found so, in the
    whole frame (at most every ``full_every`` frames: a whole-frame search costs ~10x a
    window's)."""

    def __init__(self, camera: Camera, det, ids, max_edge_rms: float, full_every: int):
        self.camera, self.det, self.ids = camera, det, ids
        self.modules = det.getDictionary().markerSize + 2
        self.max_edge_rms = max_edge_rms
        self.full_every = max(1, int(full_every))
        self.since_full = self.full_every  # frames since the last whole-frame search
        self.last: list = [None] * len(ids)  # corners (px) of the last detection
        self.lost = [0] * len(ids)  # frames since then
        self.vel: list = [np.zeros(2)] * len(ids)  # px per frame
        self.reasons = dict.fromkeys(
            ("not_detected", "too_small_or_low_contrast", "poor_edge_fit", "duplicate"), 0
        )

    def _detect(self, gray, x0: int = 0, y0: int = 0) -> dict[int, list]:
        corners, got, _ = self.det.detectMarkers(gray)
        seen: dict[int, list] = {}
        if got is not None:
            for c, i in zip(corners, got.ravel(), strict=True):
                seen.setdefault(int(i), []).append(c.reshape(4, 2).astype(np.float64) + [x0, y0])
        return seen

    def _window(self, gray, j: int) -> list:
        """Candidates for marker j in a window around its predicted corners."""
        guess = self.last[j] + self.vel[j] * (self.lost[j] + 1)
        size = np.ptp(guess, axis=0).max()
        margin = 0.6 * size + 8 + np.abs(self.vel[j]).max() + 6 * self.lost[j]
        h, w = gray.shape
        x0, y0 = np.maximum(np.floor(guess.min(axis=0) - margin).astype(int), 0)
        x1, y1 = np.minimum(np.ceil(guess.max(axis=0) + margin).astype(int), [w, h])
        if x1 - x0 < 8 or y1 - y0 < 8:
            return []
        return self._detect(gray[y0:y1, x0:x1], x0, y0).get(self.ids[j], [])

    def step(self, gray: np.ndarray) -> list:
        """EdgeFit (or None: missing) per marker for one grey frame."""
        cands: list = [None] * len(self.ids)
        for j in range(len(self.ids)):
            if self.last[j] is not None:
                found = self._window(gray, j)
                cands[j] = found if len(found) == 1 else None
        self.since_full += 1
        if any(c is None for c in cands) and self.since_full >= self.full_every:
            self.since_full = 0
            seen = self._detect(gray)
            for j, i in enumerate(self.ids):
                if cands[j] is None:
                    cands[j] = seen.get(i, [])
        out: list = []
        for j, found in enumerate(cands):
            fit = self._measure(gray, found or [])
            if found and len(found) == 1:
                corners = found[0] if fit is None else fit.corners_px
                if self.last[j] is not None and self.lost[j] == 0:
                    self.vel[j] = (corners - self.last[j]).mean(axis=0)
                self.last[j], self.lost[j] = corners, 0
            else:
                self.lost[j] += 1
                if self.lost[j] > 30:  # a second unseen: forget where it was
                    self.last[j], self.vel[j] = None, np.zeros(2)
            out.append(fit)
        return out

    def _measure(self, gray, found: list):
        if len(found) != 1:
            self.reasons["duplicate" if found else "not_detected"] += 1
            return None
        fit = refine_corners(gray, self.camera, found[0], self.modules)
        if fit is None:
            self.reasons["too_small_or_low_contrast"] += 1
            return None
        if fit.rms_px > self.max_edge_rms:
            self.reasons["poor_edge_fit"] += 1
            return None
        return fit


def _collect(path: Path, camera: Camera, ids, side, rows, reasons) -> MarkerTracks:
    F, m = len(rows), len(ids)
    centre_n = np.full((F, m, 2), np.nan)
    corners = np.full((F, m, 4, 2), np.nan)
    side_px = np.full((F, m), np.nan)
    edge_rms = np.full((F, m), np.nan)
    for r, (_, _, fits) in enumerate(rows):
        for j, fit in enumerate(fits):
            if fit is None:
                continue
            cn = fit.corners_n
            centre_n[r, j] = _line_intersection(cn[0], cn[2], cn[1], cn[3])
            corners[r, j] = fit.corners_px
            side_px[r, j] = fit.side_px
            edge_rms[r, j] = fit.rms_px
    missing = ~np.isfinite(centre_n[..., 0])
    uv = np.full((F, m, 2), np.nan)
    if (~missing).any():
        cn = centre_n[~missing]
        uv[~missing] = camera.project(np.column_stack([cn, np.ones(len(cn))]))
    stats = {
        "frames": F,
        "ids": list(ids),
        "side_m": None if side is None else np.broadcast_to(side, (m,)).tolist(),
        "missing_per_marker": missing.sum(axis=0).tolist(),
        "missing_reasons": dict(reasons),
    }
    return MarkerTracks(
        path=path,
        ids=tuple(ids),
        t=np.array([r[1] for r in rows]),
        frame=np.array([r[0] for r in rows]),
        uv=uv,
        missing=missing,
        corners=corners,
        side_px=side_px,
        edge_rms=edge_rms,
        n_detected=(~missing).sum(axis=1),
        stats=stats,
    )
