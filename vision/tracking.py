"""Video -> pose stream for a planar rig: static circles, marker tracking, world poses.

One decoding pass. The static circles (four reference, two ground) are found in the first
frame and measured over the first ``static_frames`` frames (they do not move, so averaging
lowers their noise). The two body markers are tracked in small windows around a
constant-velocity prediction with a gate that grows while a marker is unseen; the two are
assigned jointly so that one blob never serves both. A marker with no blob in its gate is a
*missing* sample (never interpolated) and keeps its identity when it reappears inside the
gate of its own prediction.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from itertools import product
from pathlib import Path

import cv2
import numpy as np

from physid.streams import Stream
from physid.vision.camera import Camera
from physid.vision.circles import (
    Blob,
    Centre,
    blobs_in_mask,
    dark_mask,
    darkness_ratio,
    disk_bias,
    weighted_centre,
    window_centre,
)
from physid.vision.detect import TrackingError, find_static_circles
from physid.vision.scene import Scene
from physid.vision.video import frames, open_video
from physid.vision.world import (
    PlanePose,
    body_pose,
    distance_std,
    pixels_to_world,
    plane_pose,
    plane_pose_std,
    pose_std,
)

POSE_CHANNELS = ("x", "y", "theta", "std_x", "std_y", "std_theta", "rigid_err", "px_sigma")
SIGMA_FLOOR_PX = 0.01
POSE_UNITS = ("m", "m", "rad", "m", "m", "rad", "m", "px")


@dataclass
class _Marker:
    pos: np.ndarray
    vel: np.ndarray
    lost: int = 0
    mass: float = 0.0  # dark mass of its last centre (px), see ``_State._follow``


@dataclass(frozen=True)
class TrackResult:
    """Everything the tracker measured. Pixel arrays are distorted-image px; ``marker_px``
    [N, 2, 2] are bias-corrected projections of the markers' centres (NaN where missing)."""

    path: Path
    t: np.ndarray
    frame: np.ndarray
    marker_raw: np.ndarray
    marker_px: np.ndarray
    marker_sigma: np.ndarray
    missing: np.ndarray
    reference_px: np.ndarray
    ground_px: np.ndarray
    plane: PlanePose
    ground_p0: np.ndarray
    ground_alpha: float
    poses: np.ndarray
    pose_std: np.ndarray
    rigid_err: np.ndarray
    stats: dict = field(default_factory=dict)
    ground_length: float = math.inf

    def stream(self) -> Stream:
        """The PoseStream: x, y, theta (m, m, rad) plus quality channels; a sample whose
        pose needs a missing marker is missing in every channel but none is invented."""
        miss = self.missing.any(axis=1)
        values = np.column_stack(
            [self.poses, self.pose_std, self.rigid_err, np.nanmax(self.marker_sigma, axis=1)]
        )
        return Stream(
            self.t,
            values,
            POSE_CHANNELS,
            POSE_UNITS,
            np.broadcast_to(miss[:, None], values.shape).copy(),
            {
                "file": str(self.path),
                "ground_p0": self.ground_p0.tolist(),
                "ground_alpha": self.ground_alpha,
                "ground_length": self.ground_length if math.isfinite(self.ground_length) else None,
                **self.stats,
            },
        )


def track_video(
    path: str | Path,
    camera: Camera,
    scene: Scene,
    progress: Callable[[int], None] | None = None,
    static_frames: int = 10,
    prefetch: int = 16,
    figure_dir: str | Path | None = None,
) -> TrackResult:
    """Track the rig in ``path`` (see module docstring). If the static circles are not
    found in the first frame, the error names an annotated copy of it written to
    ``figure_dir`` (default: the temp folder)."""
    path = Path(path)
    _, info = open_video(path)
    if info.size != camera.size:
        raise TrackingError(
            f"{path}: frame 0: video is {info.size[0]}x{info.size[1]} px but the calibration "
            f"is for {camera.size[0]}x{camera.size[1]}; calibrate at the recording resolution"
        )
    times, idx, raw, sig = [], [], [], []
    static: list[list] = []
    state: _State | None = None
    for k, t, img in frames(path, prefetch=prefetch):
        gray = None
        if state is None or state.markers is None:
            gray = _gray(img)
        if state is None:
            state = _State.first_frame(path, gray, camera, scene, figure_dir)
        if k < static_frames:
            static.append([_static_centre(img, gray, b.box) for b in state.static_blobs])
        centres = state.step(img, gray)
        times.append(t)
        idx.append(k)
        raw.append([(c.x, c.y) if c else (np.nan, np.nan) for c in centres])
        sig.append([c.sigma if c else np.nan for c in centres])
        if progress is not None:
            progress(k + 1)
    if state is None:
        raise TrackingError(f"{path}: no frames")
    return _finish(path, camera, scene, state, static, times, idx, raw, sig)


class _State:
    """Per-video tracking state (not part of the API)."""

    def __init__(self, path, camera, scene, static_blobs, threshold, pose):
        self.path, self.camera, self.scene = path, camera, scene
        self.static_blobs: list[Blob] = static_blobs
        self.threshold = threshold  # darkness ratio (image / local background)
        self.pose: PlanePose = pose
        self.markers: list[_Marker] | None = None
        self.frame = 0
        # expected marker radius in px near the workspace centre
        centre = scene.reference.mean(axis=0)
        p = camera.project(
            np.array([[*centre, 0.0], [centre[0] + scene.marker_radius, centre[1], 0.0]]),
            pose.rvec,
            pose.t,
        )
        self.r_px = float(np.linalg.norm(p[1] - p[0]))
        self.static_list = [(b.x, b.y) for b in static_blobs]

    @classmethod
    def first_frame(cls, path, gray, camera: Camera, scene: Scene, figure_dir=None) -> _State:
        found = find_static_circles(gray, camera, scene, str(path), figure_dir)
        return cls(path, camera, scene, found.blobs, found.threshold, found.pose)

    # --- body markers ---------------------------------------------------------------------
    def _candidates(
        self, gray, thr, x0=0, y0=0, x1=None, y1=None, origin=(0, 0), smear=0.0
    ) -> list[Blob]:
        """Plausible marker blobs inside the image box x0..x1, y0..y1 (px); ``gray`` is a
        crop whose top-left pixel is ``origin``. Dark means a darkness ratio (image over
        its local upper envelope over a square just wider than a marker smeared by
        ``smear`` px, so that the envelope is the plywood around the marker, not brighter
        paper beyond the ellipse) below ``thr``: lighting gradients and vignetting do not
        matter."""
        H, W = gray.shape
        ox, oy = origin
        x0, y0 = max(0, int(x0) - ox), max(0, int(y0) - oy)
        x1 = W if x1 is None else min(W, int(x1) - ox)
        y1 = H if y1 is None else min(H, int(y1) - oy)
        if x1 - x0 < 3 or y1 - y0 < 3:
            return []
        area = np.pi * self.r_px**2
        ratio = darkness_ratio(gray, int(2.5 * self.r_px + smear + 3), smooth=False)
        ratio = ratio[y0:y1, x0:x1]
        mask = dark_mask(ratio, thr)
        blobs = blobs_in_mask(mask, min_area=0.2 * area, offset=(x0 + ox, y0 + oy))
        keep = []
        for b in blobs:
            if b.area > 8 * area:
                continue
            near = 1.5 * self.r_px
            if any(math.hypot(b.x - sx, b.y - sy) < near for sx, sy in self.static_list):
                continue
            keep.append(b)
        return keep

    def _acquire(self, gray) -> list[Blob] | None:
        blobs = self._candidates(gray, self.threshold)
        if len(blobs) < 2:
            return None
        world = self.pose.to_world(self.camera.normalize(np.array([[b.x, b.y] for b in blobs])))
        target = self.scene.marker_distance
        best, best_err = None, 0.15 * target
        for i in range(len(blobs)):
            for j in range(i + 1, len(blobs)):
                err = abs(np.linalg.norm(world[i] - world[j]) - target)
                if err < best_err:
                    best, best_err = (i, j), err
        if best is None:
            return None
        i, j = best
        q = body_pose(world[[i, j]][None], self.scene.markers)[0]
        if not -np.pi / 2 < q[2] <= np.pi / 2:
            i, j = j, i
        return [blobs[i], blobs[j]]

    def step(self, img: np.ndarray, gray: np.ndarray | None = None) -> list:
        """Centres (or None) of the two body markers in this frame; ``gray`` is the whole
        frame in grey when the caller has it (only the search windows are converted)."""
        self.frame += 1
        if self.markers is None:
            gray = _gray(img) if gray is None else gray
            found = self._acquire(gray)
            if found is None:
                return [None, None]
            cs = [weighted_centre(gray, b.box) for b in found]
            if any(c is None for c in cs):
                return [None, None]
            cs = [_with_floor(c, b.box) for c, b in zip(cs, found, strict=True)]
            self.markers = [_Marker(np.array([c.x, c.y]), np.zeros(2)) for c in cs]
            ink = max(float(gray[int(c.y), int(c.x)]) / max(c.background, 1.0) for c in cs)
            # closer to the surface than the midpoint (a blurred marker never reaches ink),
            # but below plywood next to paper or a lighter sheet (~0.75)
            self.body_thr = 1.0 - 0.4 * (1.0 - min(ink, 0.9))
            return cs
        followed = self._follow(img, gray)
        if followed is not None:
            return followed
        preds, gates, boxes, crops, origins = [], [], [], [], []
        H, W = img.shape[:2]
        for m in self.markers:
            pred = m.pos + m.vel * (1 + m.lost)
            speed = float(np.linalg.norm(m.vel))
            gate = max(2.0 * self.r_px, 0.75 * speed) + 8.0 * m.lost
            # the whole (blurred) blob must fit: prediction error + radius + smear
            half = gate + 2.0 * self.r_px + speed
            box = (pred[0] - half, pred[1] - half, pred[0] + half, pred[1] + half)
            # convert only this window to grey, with room for the centroid's margin
            pad = 0.25 * (2.0 * self.r_px + speed) + 4
            x0, y0 = int(max(box[0] - pad, 0)), int(max(box[1] - pad, 0))
            x1, y1 = int(min(box[2] + pad, W)), int(min(box[3] + pad, H))
            crop = gray[y0:y1, x0:x1] if gray is not None else _gray(img[y0:y1, x0:x1])
            preds.append(pred)
            gates.append(gate)
            boxes.append(box)
            crops.append(crop)
            origins.append((x0, y0))
        smear = [float(np.linalg.norm(m.vel)) for m in self.markers]
        cands = [
            self._candidates(c, self.body_thr, *b, origin=o, smear=v)
            for c, b, o, v in zip(crops, boxes, origins, smear, strict=True)
        ]
        # joint assignment: each marker one of its candidates or none, no blob twice
        options = [[None] + list(range(len(c))) for c in cands]
        best, best_cost = (None, None), np.inf
        for choice in product(*options):
            cost, picked = 0.0, []
            for i, j in enumerate(choice):
                if j is None:
                    cost += gates[i]
                    continue
                b = cands[i][j]
                d = float(np.hypot(b.x - preds[i][0], b.y - preds[i][1]))
                if d > gates[i]:
                    cost = np.inf
                    break
                picked.append((round(b.x, 3), round(b.y, 3)))
                cost += d
            if len(set(picked)) < len(picked):
                continue
            if cost < best_cost:
                best, best_cost = choice, cost
        out = []
        for i, j in enumerate(best):
            m = self.markers[i]
            c = None
            if j is not None:
                c = weighted_centre(crops[i], cands[i][j].box, origins[i])
            if c is None:
                m.lost += 1
                out.append(None)
                continue
            c = _with_floor(c, cands[i][j].box)
            self._update(m, c, cands[i][j].box, crops[i], origins[i])
            out.append(c)
        return out

    def _update(self, m: _Marker, c: Centre, box, crop, origin) -> None:
        new = np.array([c.x, c.y])
        m.vel = (new - m.pos) / (1 + m.lost)
        m.pos, m.lost = new, 0
        # the dark mass the fast path compares against, measured in its own window
        found = window_centre(crop, self._follow_window(m.pos, m.vel), origin)
        m.mass = found.mass if found is not None and not found.at_edge else 0.0

    def _follow_window(self, pred: np.ndarray, vel: np.ndarray) -> tuple[int, int, int, int]:
        """The fast path's window around a predicted centre (px): the marker smeared by
        its speed, room for a prediction error of 3 px + a quarter of the speed (an impact
        changes the velocity by up to ~10 px per frame) and the centroid's border."""
        half = int(self._follow_half(float(np.hypot(*vel))))
        x, y = int(round(pred[0])), int(round(pred[1]))
        return (x - half, y - half, x + half + 1, y + half + 1)

    def _follow_half(self, speed: float) -> float:
        # rounded up to 2 px: a few window sizes, whose border geometry is cached
        return 2.0 * math.ceil(0.5 * (1.25 * (self.r_px + 0.5 * speed) + 0.25 * speed + 6.0))

    def _follow(self, img, gray) -> list | None:
        """Fast path of ``step``: each marker's centre measured directly in a small window
        around its constant-velocity prediction, without the search (envelope, contours,
        joint assignment). Taken only where it cannot be wrong while the search is right:
        both markers seen in the last frame; each window inside the image, clear of the
        static circles and of the other marker's window; the weighted region not cut by
        the window's edge; the centre within the search's gate; the dark mass within 30 %
        of the marker's last (another dark thing in the window adds mass, a marker leaving
        the window or hidden loses it; blur only spreads it). Otherwise None and the
        caller searches (docs/vision.md, *Tracking*)."""
        if any(m.lost or m.mass <= 0 for m in self.markers):
            return None
        H, W = img.shape[:2]
        preds = [m.pos + m.vel for m in self.markers]
        halves = [self._follow_half(float(np.hypot(*m.vel))) for m in self.markers]
        # windows (squares of half-size h) must not overlap each other or a static circle
        # (radius up to ~2 marker radii: 8 mm reference circles vs 5 mm markers). Each
        # window holds its own smeared marker with room to spare, so two squares apart by
        # more than the sum of their half-sizes along x or y (with a marker radius to
        # spare) hold one marker each; the dark-mass check catches the rest
        gap = float(np.max(np.abs(preds[0] - preds[1])))
        if gap < halves[0] + halves[1] + self.r_px:
            return None
        found = []
        for m, pred, half in zip(self.markers, preds, halves, strict=True):
            x0, y0, x1, y1 = self._follow_window(pred, m.vel)
            if x0 < 0 or y0 < 0 or x1 > W or y1 > H:
                return None
            # a static circle (radius <= 2 marker radii) wholly outside the square
            reach = half + 2.5 * self.r_px
            if any(
                max(abs(pred[0] - sx), abs(pred[1] - sy)) < reach for sx, sy in self.static_list
            ):
                return None
            crop = gray[y0:y1, x0:x1] if gray is not None else _gray(img[y0:y1, x0:x1])
            c = window_centre(crop, (x0, y0, x1, y1), (x0, y0))
            if c is None or c.at_edge or not 0.7 < c.mass / m.mass < 1.3:
                return None
            gate = max(2.0 * self.r_px, 0.75 * float(np.hypot(*m.vel)))
            if math.hypot(c.centre.x - pred[0], c.centre.y - pred[1]) > gate:
                return None
            found.append(c)
        out = []
        for m, c in zip(self.markers, found, strict=True):
            centre = _with_floor(c.centre, (0, 0, *c.size))
            new = np.array([centre.x, centre.y])
            m.vel, m.pos, m.mass = new - m.pos, new, c.mass
            out.append(centre)
        return out


def _static_centre(img: np.ndarray, gray: np.ndarray | None, box) -> Centre | None:
    """``weighted_centre`` of a static circle's ``box``, converting only its window to grey
    when the frame has not been (``gray`` None)."""
    if gray is not None:
        return weighted_centre(gray, box)
    x, y, w, h = box
    m = max(3, int(0.25 * max(w, h))) + 1
    x0, y0 = max(x - m, 0), max(y - m, 0)
    return weighted_centre(_gray(img[y0 : y + h + m, x0 : x + w + m]), box, (x0, y0))


def _gray(img: np.ndarray) -> np.ndarray:
    return cv2.cvtColor(img, cv2.COLOR_BGR2GRAY) if img.ndim == 3 else img


def _with_floor(c: Centre, box) -> Centre:
    """Pixel noise alone (``c.sigma``, ~0.003 px) understates the error: JPEG blocks and
    edge shading add ~0.01 px on sharp frames and blur ~0.005 px per px of smear (measured
    against the renderer, docs/vision.md); add that in quadrature."""
    smear = abs(box[2] - box[3])
    return replace(c, sigma=float(np.hypot(c.sigma, SIGMA_FLOOR_PX + 0.005 * smear)))


def _finish(path, camera, scene, state: _State, static, times, idx, raw, sig) -> TrackResult:
    # static circles: mean over the first frames, then bias-correct and refit the plane
    meas = np.array(
        [[(c.x, c.y) if c else (np.nan, np.nan) for c in row] for row in static], dtype=float
    )
    static_px = np.nanmean(meas, axis=0)
    if not np.all(np.isfinite(static_px)):
        bad = int(np.flatnonzero(~np.isfinite(static_px[:, 0]))[0])
        raise TrackingError(
            f"{path}: frame 0: static circle {bad} touches the image border; check the framing"
        )
    pose = state.pose
    corrected = static_px.copy()
    for _ in range(3):
        world = pixels_to_world(camera, pose, corrected)
        world[:4] = scene.reference
        bias = np.concatenate(
            [
                disk_bias(camera, pose.rvec, pose.t, world[:4], scene.reference_radius),
                disk_bias(camera, pose.rvec, pose.t, world[4:], scene.ground_radius),
            ]
        )
        corrected = static_px - bias
        pose = plane_pose(camera.normalize(corrected[:4]), scene.reference)
    ground_w = pixels_to_world(camera, pose, corrected[4:])
    p0, alpha = scene.ground_line(ground_w)

    raw = np.array(raw, dtype=float)
    sig = np.array(sig, dtype=float)
    missing = ~np.isfinite(raw[..., 0])
    px = raw.copy()
    for _ in range(2):  # bias of a 5 mm disk is < 1 px and smooth: two passes converge
        world = pixels_to_world(camera, pose, px.reshape(-1, 2))
        ok = np.all(np.isfinite(world), axis=1)
        bias = np.zeros_like(world)
        if ok.any():
            bias[ok] = disk_bias(camera, pose.rvec, pose.t, world[ok], scene.marker_radius)
        px = (raw.reshape(-1, 2) - bias).reshape(raw.shape)
    world = pixels_to_world(camera, pose, px.reshape(-1, 2)).reshape(-1, 2, 2)
    poses = body_pose(world, scene.markers)
    any_missing = missing.any(axis=1)
    poses[any_missing] = np.nan
    ok = ~any_missing
    if ok.any():
        poses[ok, 2] = np.unwrap(poses[ok, 2])
    dist = np.linalg.norm(world[:, 1] - world[:, 0], axis=1)
    scale, n_cal = noise_scale(dist[ok], distance_std(camera, pose, px[ok], sig[ok]))
    sig = sig * scale
    stds = np.full(poses.shape, np.nan)
    common = np.zeros(3)
    if ok.any():
        idx_ok = np.asarray(idx)[ok]
        frame_std = pose_std(camera, pose, px[ok], sig[ok], scene.markers)
        # the plane pose's own error, common to every frame: the reference centres' noise
        # model, scaled like the markers' (compression repeats a static scene's artefacts
        # in every frame, so averaging the first frames does not shrink it)
        ref_sigma = scale * np.array([_static_sigma(col) for col in zip(*static, strict=True)])
        # at least the markers' calibrated sigma: a codec's error of a circle's centre does
        # not shrink with the circle's area as pixel noise does (it comes in blocks), so
        # the larger, static circles are no better measured than the markers (MuJoCo
        # footage: reference circles 0.05-0.15 px off on H.264 against a model of 0.035)
        ref_sigma = np.maximum(ref_sigma, float(np.median(sig[ok])))
        plane = plane_pose_std(
            camera, corrected[:4], ref_sigma[:4], scene.reference, px[ok], scene.markers
        )
        frame_std = np.hypot(frame_std, acceleration_std(poses[ok], idx_ok, frame_std))
        stds[ok] = np.hypot(frame_std, plane)
        common = np.median(plane, axis=0)
    rigid = np.abs(dist - scene.marker_distance)
    start, length = scene.ground_segment(p0, alpha, ground_w)
    return TrackResult(
        path=Path(path),
        t=np.array(times),
        frame=np.array(idx),
        marker_raw=raw,
        marker_px=px,
        marker_sigma=sig,
        missing=missing,
        reference_px=corrected[:4],
        ground_px=corrected[4:],
        plane=pose,
        ground_p0=start,
        ground_alpha=float(alpha),
        poses=poses,
        pose_std=stds,
        rigid_err=rigid,
        stats={
            "frames": len(times),
            "missing_markers": int(missing.sum()),
            "noise_scale": scale,
            "noise_scale_frames": n_cal,
            "plane_pose_std": common.tolist(),
        },
        ground_length=length,
    )


# A blurred marker's centroid is its exposure-averaged position: the mid-exposure position
# plus a E^2 / 24 under a constant acceleration a (px/frame^2) over an exposure of E frames.
# E is not known (at most one frame), so the bound E = 1 is used.
BLUR_ACCELERATION = 1.0 / 24.0


def acceleration_std(poses: np.ndarray, frame: np.ndarray, noise: np.ndarray) -> np.ndarray:
    """Std [N, 3] of the pose a blurred frame's centroid adds where the motion accelerates
    (an impact, a bounce): ``BLUR_ACCELERATION`` times the pose's second difference over the
    neighbouring frames, whose own noise (6 ``noise``^2 for independent frames) is taken
    out first; 0 at a frame without both neighbours (``frame`` are the frame indices of
    the rows of ``poses`` [N, 3], ``noise`` [N, 3] their per-frame std).

    The centroid is linear in the image, so blur averages the position over the exposure
    (docs/vision.md): exact at constant velocity, off by a E^2 / 24 under an acceleration
    a. On MuJoCo footage (exposure half a frame, soft impacts over ~2 ms) the impact frames
    were off by 1/15-1/24 of the second difference: the per-frame noise model, blind to
    the acceleration, reported a fifth of it there."""
    q = np.asarray(poses, dtype=float)
    frame = np.asarray(frame)
    out = np.zeros_like(q)
    if len(q) < 3:
        return out
    inner = (frame[2:] - frame[1:-1] == 1) & (frame[1:-1] - frame[:-2] == 1)
    d2 = q[2:] - 2 * q[1:-1] + q[:-2]
    var = d2**2 - 6 * np.asarray(noise, dtype=float)[1:-1] ** 2
    out[1:-1] = np.where(inner[:, None], np.sqrt(np.maximum(var, 0.0)), 0.0) * BLUR_ACCELERATION
    return out


def _static_sigma(centres) -> float:
    """Noise model of a static circle's centre (px): its centres' mean sigma over the
    first frames with the floor of ``_with_floor``."""
    sig = [c.sigma for c in centres if c is not None]
    return float(np.hypot(np.mean(sig), SIGMA_FLOOR_PX)) if sig else SIGMA_FLOOR_PX


def noise_scale(dist: np.ndarray, dist_std: np.ndarray, min_frames: int = 10) -> tuple:
    """Factor by which the centre noise model's sigmas must be scaled to explain the
    scatter of the measured marker distance (a rigid body's, so constant), and the number
    of frames it rests on: ``sqrt(median(r^2) / 0.455)`` with r the distance's deviation
    from its median over its propagated std (0.455 is the median of chi^2 with one degree
    of freedom; the median keeps a few bad frames from setting it). 1 with fewer than
    ``min_frames`` frames.

    The model (pixel noise of each window, plus a floor and a smear term) has the right
    shape, but its size depends on what the video went through: compression correlates
    the noise over blocks and leaves artefacts the window's noise estimate cannot see
    (3-5x too small on H.264 footage, issue 27). The distance sees the two markers' errors
    along the line between them, which, for independent isotropic errors of the two
    markers, is the same noise that moves the pose.
    """
    good = np.isfinite(dist) & np.isfinite(dist_std) & (dist_std > 0)
    if good.sum() < min_frames:
        return 1.0, int(good.sum())
    r = (dist[good] - np.median(dist[good])) / dist_std[good]
    return float(np.sqrt(np.median(r**2) / 0.455)), int(good.sum())
