"""Synthetic videos with ground truth: the ellipse-drop scene and checkerboard calibration.

Rendering is analytic, not supersampled: every pixel knows the plane point it sees (the
camera model inverted once per pixel), and a shape's coverage of a pixel is
``clip(0.5 - d, 0, 1)`` with ``d`` the signed distance to the shape's edge in pixels (plane
distance x local px/m scale). That gives anti-aliased edges whose centroid is exact to
~0.01 px, so the renderer can judge a 0.1 px detector. Motion blur averages sub-exposure
renders; then Gaussian sensor noise and JPEG compression (MJPG) are applied.

Truth written beside each video (``<video>.truth.npz``): frame times, poses, and the true
projections (px) of every circle centre at mid-exposure.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

from physid.vision.camera import Camera, rodrigues
from physid.vision.scene import Scene
from physid.vision.video import VideoWriter

PAPER, PLYWOOD, BAR, INK = 225.0, 170.0, 165.0, 30.0


@dataclass(frozen=True)
class PlaneView:
    """A camera looking at the world plane: p_cam = R @ [X, Y, 0] + t (m)."""

    camera: Camera
    R: np.ndarray
    t: np.ndarray

    @property
    def rvec(self) -> np.ndarray:
        return rodrigues(self.R)

    def project(self, xy: np.ndarray) -> np.ndarray:
        """Pixels [N, 2] of plane points [N, 2] (m)."""
        xy = np.asarray(xy, dtype=float).reshape(-1, 2)
        pts = np.column_stack([xy, np.zeros(len(xy))])
        return self.camera.project(pts, self.rvec, self.t)


def default_view(camera: Camera, scene: Scene, distance: float = 0.19) -> PlaneView:
    """Camera facing the workspace centre from ``distance`` (m), slightly tilted (as a
    hand-placed action camera is), image x along world x and image y along world -y."""
    centre = scene.reference.mean(axis=0)
    base = np.array([[1.0, 0, 0], [0, -1.0, 0], [0, 0, -1.0]])
    tilt = cv2.Rodrigues(np.array([0.06, -0.08, 0.015]))[0]
    R = tilt @ base
    c = np.array([centre[0], centre[1], distance])
    return PlaneView(camera, R, -R @ c)


class PixelRays:
    """Normalized ray directions of every pixel of a camera (computed once: ~0.3 s)."""

    def __init__(self, camera: Camera):
        w, h = camera.size
        u, v = np.meshgrid(np.arange(w, dtype=float), np.arange(h, dtype=float))
        n = camera.normalize(np.column_stack([u.ravel(), v.ravel()]))
        self.x = n[:, 0].reshape(h, w)
        self.y = n[:, 1].reshape(h, w)

    def on_plane(self, R: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Plane coordinates (X, Y) (m) seen by each pixel, for plane pose R, t."""
        X, Y, _ = self.hit(R, t)
        return X, Y

    def hit(self, R: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(X, Y) as ``on_plane``, and where each pixel's ray meets the plane behind the
        camera (those pixels do not see the plane)."""
        n = R[:, 2]
        denom = n[0] * self.x + n[1] * self.y + n[2]
        s = (n @ t) / denom
        px, py, pz = s * self.x - t[0], s * self.y - t[1], s - t[2]
        X = R[0, 0] * px + R[1, 0] * py + R[2, 0] * pz
        Y = R[0, 1] * px + R[1, 1] * py + R[2, 1] * pz
        return X, Y, s <= 0


def _coverage(d_px: np.ndarray) -> np.ndarray:
    return np.clip(0.5 - d_px, 0.0, 1.0)


def _footprint(X: np.ndarray, Y: np.ndarray) -> np.ndarray:
    """Pixels per metre on the plane at each pixel (from the local Jacobian)."""
    gxu, gxv = np.gradient(X, axis=1), np.gradient(X, axis=0)
    gyu, gyv = np.gradient(Y, axis=1), np.gradient(Y, axis=0)
    return 1.0 / np.sqrt(np.abs(gxu * gyv - gxv * gyu))


# --- trajectories -------------------------------------------------------------------------
@dataclass(frozen=True)
class Trajectory:
    """Poses q = (x, y, theta) (m, m, rad) sampled finely at times ``t`` (s)."""

    t: np.ndarray
    q: np.ndarray

    def __call__(self, times) -> np.ndarray:
        times = np.atleast_1d(np.asarray(times, dtype=float))
        return np.column_stack([np.interp(times, self.t, self.q[:, i]) for i in range(3)])


def drop_trajectory(
    scene: Scene,
    duration: float = 0.5,
    q0=(0.12, 0.19, 0.5),
    v0=(0.3, 0.0, 3.0),
    mass: float = 0.064,
    inertia: float = 4.84e-5,
    restitution: float = 0.4,
    mu: float = 0.3,
    dt: float = 1e-4,
) -> Trajectory:
    """A ballistic drop of the ellipse onto the sloped bar with impulsive, frictional
    bounces (Newton restitution, Coulomb friction at the contact point of Sect. 4.1).

    Only a source of realistic motion for the renderer; the identification model lives in
    ``dynamics/``.
    """
    p0, alpha = scene.ground_line(scene.ground)
    n = np.array([-np.sin(alpha), np.cos(alpha)])
    tan = np.array([np.cos(alpha), np.sin(alpha)])
    a, b = scene.a, scene.b
    q = np.array(q0, dtype=float)
    v = np.array(v0, dtype=float)
    steps = int(round(duration / dt)) + 1
    out = np.empty((steps, 3))
    for k in range(steps):
        out[k] = q
        # lowest boundary point along -n: support point of the ellipse
        c, s = np.cos(q[2]), np.sin(q[2])
        Rt = np.array([[c, s], [-s, c]])
        m_loc = Rt @ (-n)
        denom = np.hypot(a * m_loc[0], b * m_loc[1])
        r = np.array([[c, -s], [s, c]]) @ np.array([a * a * m_loc[0], b * b * m_loc[1]]) / denom
        gap = (q[:2] + r - p0) @ n
        vel = v[:2] + v[2] * np.array([-r[1], r[0]])
        if gap < 0 and vel @ n < 0:
            rn = r[0] * n[1] - r[1] * n[0]
            rt = r[0] * tan[1] - r[1] * tan[0]
            pn = -(1 + restitution) * (vel @ n) / (1 / mass + rn * rn / inertia)
            pt = -(vel @ tan) / (1 / mass + rt * rt / inertia)
            pt = float(np.clip(pt, -mu * pn, mu * pn))
            impulse = pn * n + pt * tan
            v[:2] += impulse / mass
            v[2] += (r[0] * impulse[1] - r[1] * impulse[0]) / inertia
        v[1] -= 9.81 * dt
        q = q + v * dt
    return Trajectory(np.arange(steps) * dt, out)


# --- the drop scene -------------------------------------------------------------------------
@dataclass(frozen=True)
class RenderOptions:
    """fps (Hz), exposure (s; 0 = sharp), sub-exposure samples, noise std (grey levels),
    JPEG quality (0-100), occlusions as (marker index, first frame, number of frames),
    noise ``seed``, trajectory time of the first frame ``start`` (s)."""

    fps: float = 240.0
    exposure: float = 0.0
    blur_samples: int = 12
    noise: float = 2.0
    quality: int = 95
    occlusions: tuple[tuple[int, int, int], ...] = ()
    seed: int = 0
    start: float = 0.0


class DropRenderer:
    """Renders the ellipse-drop scene through a camera; see the module docstring."""

    def __init__(self, view: PlaneView, scene: Scene):
        self.view, self.scene = view, scene
        rays = PixelRays(view.camera)
        self.X, self.Y = rays.on_plane(view.R, view.t)
        self.scale = _footprint(self.X, self.Y)
        self.background = self._static()

    def _static(self) -> np.ndarray:
        sc, X, Y, s = self.scene, self.X, self.Y, self.scale
        img = np.full(X.shape, PAPER, dtype=np.float64)
        p0, alpha = sc.ground_line(sc.ground)
        tan = np.array([np.cos(alpha), np.sin(alpha)])
        nrm = np.array([-np.sin(alpha), np.cos(alpha)])
        along = (X - p0[0]) * tan[0] + (Y - p0[1]) * tan[1]
        across = (X - p0[0]) * nrm[0] + (Y - p0[1]) * nrm[1]
        length = float(np.linalg.norm(sc.ground[1] - sc.ground[0])) + 0.04
        # bar: a 6 mm band below the contact surface, from 20 mm before the first circle
        d = np.maximum.reduce([across, -0.006 - across, -0.02 - along, along - length])
        cov = _coverage(d * s)
        img = img * (1 - cov) + BAR * cov
        for c, r in [(c, sc.reference_radius) for c in sc.reference] + [
            (c, sc.ground_radius) for c in sc.ground
        ]:
            cov = _coverage((np.hypot(X - c[0], Y - c[1]) - r) * s)
            img = img * (1 - cov) + INK * cov
        return img

    def _bbox(self, poses: np.ndarray) -> tuple[slice, slice]:
        ang = np.linspace(0, 2 * np.pi, 16, endpoint=False)
        ring = self.scene.a * 1.1 * np.column_stack([np.cos(ang), np.sin(ang)])
        pts = np.concatenate([ring + p[:2] for p in poses])
        px = self.view.project(pts)
        h, w = self.X.shape
        x0, y0 = np.clip(np.floor(px.min(axis=0)).astype(int) - 3, 0, [w, h])
        x1, y1 = np.clip(np.ceil(px.max(axis=0)).astype(int) + 4, 0, [w, h])
        return slice(y0, y1), slice(x0, x1)

    def body(self, pose: np.ndarray, roi, hidden=()) -> tuple[np.ndarray, np.ndarray]:
        """Coverage and intensity of the moving ellipse (with its markers) inside ``roi``."""
        sc = self.scene
        X, Y, s = self.X[roi], self.Y[roi], self.scale[roi]
        c, sn = np.cos(pose[2]), np.sin(pose[2])
        dx, dy = X - pose[0], Y - pose[1]
        u, v = c * dx + sn * dy, -sn * dx + c * dy
        g = np.hypot(u / sc.a, v / sc.b)
        grad = np.hypot(u / sc.a**2, v / sc.b**2) / np.maximum(g, 1e-12)
        cov_e = _coverage((g - 1) / np.maximum(grad, 1e-12) * s)
        inten = np.full(X.shape, PLYWOOD)
        for i, m in enumerate(sc.markers):
            if i in hidden:
                continue
            cov = _coverage((np.hypot(u - m[0], v - m[1]) - sc.marker_radius) * s)
            inten = inten * (1 - cov) + INK * cov
        return cov_e, inten

    def frame(self, t: float, traj: Trajectory, opts: RenderOptions, hidden=()) -> np.ndarray:
        """Float image (grey levels, before noise) of the scene at frame time ``t`` (s)."""
        n = max(1, opts.blur_samples) if opts.exposure > 0 else 1
        times = t + (np.arange(n) + 0.5) / n * opts.exposure - opts.exposure / 2
        poses = traj(times)
        roi = self._bbox(poses)
        img = self.background.copy()
        bg = img[roi]
        acc = np.zeros_like(bg)
        for pose in poses:
            cov, inten = self.body(pose, roi, hidden)
            acc += bg * (1 - cov) + inten * cov
        img[roi] = acc / n
        return img

    def truth(self, poses: np.ndarray) -> dict:
        """True projections (px) of every circle centre for ``poses`` [N, 3]."""
        sc = self.scene
        markers = []
        for p in poses:
            c, s = np.cos(p[2]), np.sin(p[2])
            world = p[:2] + sc.markers @ np.array([[c, s], [-s, c]])
            markers.append(self.view.project(world))
        return {
            "marker_px": np.array(markers).reshape(len(poses), -1, 2),
            "reference_px": self.view.project(sc.reference),
            "ground_px": self.view.project(sc.ground),
        }


def render_drop(
    path: str | Path,
    view: PlaneView,
    scene: Scene,
    traj: Trajectory,
    n_frames: int,
    opts: RenderOptions = RenderOptions(),
    renderer: DropRenderer | None = None,
) -> Path:
    """Write a drop video and ``<path>.truth.npz`` (t, poses, marker_px, hidden, ...)."""
    path = Path(path)
    renderer = renderer or DropRenderer(view, scene)
    rng = np.random.default_rng(opts.seed)
    t = opts.start + np.arange(n_frames) / opts.fps
    hidden = np.zeros((n_frames, len(scene.markers)), dtype=bool)
    for marker, first, count in opts.occlusions:
        hidden[first : first + count, marker] = True
    with VideoWriter(path, opts.fps, view.camera.size, opts.quality) as out:
        for k, tk in enumerate(t):
            img = renderer.frame(tk, traj, opts, tuple(np.flatnonzero(hidden[k])))
            if opts.noise > 0:
                img = img + rng.standard_normal(img.shape, dtype=np.float32) * opts.noise
            out.write(np.clip(np.rint(img), 0, 255).astype(np.uint8))
    poses = traj(t)
    truth = renderer.truth(poses)
    np.savez(
        _truth_path(path),
        t=t,
        pts=t - opts.start,
        poses=poses,
        hidden=hidden,
        K=view.camera.K,
        D=view.camera.D,
        R=view.R,
        tvec=view.t,
        exposure=opts.exposure,
        **truth,
    )
    return path


def _truth_path(path: Path) -> Path:
    return path.with_name(path.name + ".truth.npz")


def load_truth(path: str | Path) -> dict:
    """The ground truth written beside a rendered video."""
    with np.load(_truth_path(Path(path))) as data:
        return {k: data[k] for k in data.files}


# --- checkerboards ---------------------------------------------------------------------------
def board_poses(n: int, board_size: tuple[float, float], seed: int = 0) -> list[tuple]:
    """``n`` board poses (rvec, tvec) that sweep the image and tilt the board up to ~45 deg,
    at 0.22-0.35 m, as a person waving a board in front of the camera does."""
    rng = np.random.default_rng(seed)
    w, h = board_size
    poses = []
    for k in range(n):
        phase = 2 * np.pi * k / n
        # Lissajous sweep of the image plus tilts about both axes
        target = np.array([0.16 * np.sin(phase), 0.09 * np.sin(2 * phase + 0.5), 0.0])
        z = 0.27 + 0.05 * np.sin(3 * phase)
        tilt = np.array(
            [0.7 * np.sin(phase * 2 + 1.0), 0.7 * np.cos(phase * 3), 0.3 * np.sin(phase)]
        )
        tilt += rng.normal(0, 0.05, 3)
        R = cv2.Rodrigues(tilt)[0]
        centre = np.array([target[0], target[1], z])
        t = centre - R @ np.array([w / 2, h / 2, 0.0])
        poses.append((cv2.Rodrigues(R)[0].ravel(), t))
    return poses


def render_checkerboard_video(
    path: str | Path,
    camera: Camera,
    pattern: tuple[int, int],
    square: float,
    n_frames: int = 40,
    noise: float = 2.0,
    quality: int = 95,
    seed: int = 0,
) -> Path:
    """A calibration video of a ``pattern`` = (cols, rows) inner-corner board with ``square``
    (m) squares; truth: board poses and the projected inner corners per frame."""
    path = Path(path)
    cols, rows = pattern
    rays = PixelRays(camera)
    rng = np.random.default_rng(seed)
    poses = board_poses(n_frames, ((cols - 1) * square, (rows - 1) * square), seed)
    obj = board_points(pattern, square)
    corners = []
    with VideoWriter(path, 30.0, camera.size, quality) as out:
        for rvec, tvec in poses:
            R = cv2.Rodrigues(rvec)[0]
            X, Y, behind = rays.hit(R, tvec)
            fu = np.abs(np.gradient(X, axis=1)) + np.abs(np.gradient(X, axis=0))
            fv = np.abs(np.gradient(Y, axis=1)) + np.abs(np.gradient(Y, axis=0))
            su = np.clip(np.sin(np.pi * X / square) * square / np.pi / np.maximum(fu, 1e-9), -1, 1)
            sv = np.clip(np.sin(np.pi * Y / square) * square / np.pi / np.maximum(fv, 1e-9), -1, 1)
            img = 127.5 + 100 * su * sv
            # white margin of one square around the pattern, grey wall beyond
            m = square
            d = np.maximum.reduce(
                [-m - X, X - (cols - 1) * square - m, -m - Y, Y - (rows - 1) * square - m]
            )
            inside = np.clip(0.5 - d / np.maximum(np.maximum(fu, fv), 1e-9), 0, 1)
            pad = np.maximum.reduce(
                [
                    -2 * m - X,
                    X - (cols - 1) * square - 2 * m,
                    -2 * m - Y,
                    Y - (rows - 1) * square - 2 * m,
                ]
            )
            margin = np.clip(0.5 - pad / np.maximum(np.maximum(fu, fv), 1e-9), 0, 1)
            img = np.where(inside > 0, img * inside + 228 * (1 - inside), 228.0)
            img = img * margin + 110 * (1 - margin)
            img[behind] = 110
            img = img + rng.standard_normal(img.shape) * noise
            out.write(np.clip(np.rint(img), 0, 255).astype(np.uint8))
            corners.append(camera.project(obj, rvec, tvec))
    _save_board_truth(path, camera, poses, corners)
    return path


def _save_board_truth(path: Path, camera: Camera, poses, corners) -> None:
    """Ground truth beside a calibration video: board poses and projected corners (px)."""
    np.savez(
        _truth_path(path),
        corners=np.array(corners),
        rvecs=np.array([p[0] for p in poses]),
        tvecs=np.array([p[1] for p in poses]),
        K=camera.K,
        D=camera.D,
    )


def board_points(pattern: tuple[int, int], square: float) -> np.ndarray:
    """Inner corners [cols*rows, 3] (m) in OpenCV's order (row by row)."""
    cols, rows = pattern
    gx, gy = np.meshgrid(np.arange(cols), np.arange(rows))
    return np.column_stack([gx.ravel(), gy.ravel(), np.zeros(cols * rows)]) * square


def render_charuco_video(
    path: str | Path,
    camera: Camera,
    squares: tuple[int, int],
    square: float,
    marker: float,
    dictionary: str = "DICT_4X4_50",
    n_frames: int = 30,
    noise: float = 2.0,
    quality: int = 95,
    seed: int = 0,
) -> Path:
    """A ChArUco calibration video (``squares`` = (cols, rows) squares of ``square`` m,
    markers of ``marker`` m); truth: board poses and projected chessboard corners (all of
    them, in the board's id order). The board bitmap is sampled (area interpolation) at
    each pixel's board point, which anti-aliases its edges."""
    path = Path(path)
    cols, rows = squares
    d = cv2.aruco.getPredefinedDictionary(getattr(cv2.aruco, dictionary))
    board = cv2.aruco.CharucoBoard(squares, square, marker, d)
    per_sq = 60  # bitmap px per square
    bitmap = board.generateImage((cols * per_sq, rows * per_sq), marginSize=0, borderBits=1)
    pad = per_sq
    bitmap = cv2.copyMakeBorder(bitmap, pad, pad, pad, pad, cv2.BORDER_CONSTANT, value=255)
    # pre-filter: the bitmap is sampled at ~1/3 of its resolution, and unfiltered point
    # samples alias (0.3 px corner errors); sigma = 1.5 bitmap px ~ half an image pixel
    bitmap = cv2.GaussianBlur(bitmap.astype(np.float32), (0, 0), 1.5) * 0.8 + 20
    per_m = per_sq / square
    rays = PixelRays(camera)
    rng = np.random.default_rng(seed)
    # board frame: origin at the top-left corner, x right, y down, as CharucoBoard has it;
    # board_poses centres the board, so its poses are about the board's centre
    poses = board_poses(n_frames, (cols * square, rows * square), seed)
    obj = board.getChessboardCorners().astype(np.float64)
    corners = []
    with VideoWriter(path, 30.0, camera.size, quality) as out:
        for rvec, tvec in poses:
            R = cv2.Rodrigues(rvec)[0]
            X, Y, behind = rays.hit(R, tvec)
            mx = (X * per_m + pad - 0.5).astype(np.float32)
            my = (Y * per_m + pad - 0.5).astype(np.float32)
            img = cv2.remap(
                bitmap, mx, my, cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT, borderValue=110
            ).astype(np.float64)
            img[behind] = 110
            img = img + rng.standard_normal(img.shape) * noise
            out.write(np.clip(np.rint(img), 0, 255).astype(np.uint8))
            corners.append(camera.project(obj, rvec, tvec))
    _save_board_truth(path, camera, poses, corners)
    return path
