"""Dark circular markers on a light background: blob finding and sub-pixel centres.

Centre estimator (justified in docs/vision.md): the darkness-weighted centroid
``sum(w x) / sum(w)`` with ``w = max(0, 1 - I / bg - 2 sigma / bg)``, in the *distorted*
image, then corrected for the projection bias with the known plane pose
(:func:`disk_bias`). The centroid is linear in the image, so under motion blur it returns
the exposure-averaged centroid (the mid-exposure position for smooth motion), which a
contour or ellipse fit does not; its only bias is geometric (a projected disk's centroid
is not the projection of its centre), and that is computed exactly from the camera model.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import cv2
import numpy as np

from physid.vision.camera import Camera


@dataclass(frozen=True)
class Blob:
    """A connected dark region: centroid (px), area (px^2), bounding box x, y, w, h (px)."""

    x: float
    y: float
    area: float
    box: tuple[int, int, int, int]


@dataclass(frozen=True)
class Centre:
    """A sub-pixel centre (px, distorted image) with its standard deviation ``sigma`` (px)
    from the image noise, and the local background and noise levels (grey levels)."""

    x: float
    y: float
    sigma: float
    background: float
    noise: float


_DILATE = cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (7, 7))
# Grey levels: the least noise a centre's sigma assumes. 8-bit quantization and lossy
# codecs leave errors of about this size in absolute grey levels even where they smooth
# the sensor noise away (H.264 in flat areas: MAD ~0.5), so a circle on a dark surface
# (low contrast in levels) gets the larger sigma it has: on MuJoCo footage the corner
# circles on a dark vignetted sheet were off by 0.05-0.2 px, the bright markers by less.
NOISE_FLOOR = 2.0


def local_background(gray: np.ndarray, size: int, smooth: bool = True) -> np.ndarray:
    """Upper envelope of the image (float32, grey levels): the brightest level within a
    ``size`` x ``size`` px square, smoothed over the same square (``smooth``; the small
    windows of per-frame tracking skip it: it is ~40 % of their cost and only rounds the
    envelope's corners). A dark feature narrower than the square (a circle, a marker) is
    replaced by the surface around it; a smooth lighting gradient or vignetting is
    followed."""
    size = max(3, int(size) | 1)
    kernel = cv2.getStructuringElement(cv2.MORPH_RECT, (size, size))
    env = cv2.dilate(gray, kernel).astype(np.float32)
    return cv2.blur(env, (size, size)) if smooth else env


def darkness_ratio(gray: np.ndarray, size: int, smooth: bool = True) -> np.ndarray:
    """``gray / local_background`` (float32): 1 on a surface whatever its grey level or
    lighting, ink/paper (~0.2-0.5 after gamma) on a circle. Contrast is judged against the
    surface a circle is printed on, so a grey bar next to the circles (~0.8-0.95 of the
    paper around it) is never darker than the circles on it."""
    bg = local_background(gray, size, smooth)
    return gray.astype(np.float32) / np.maximum(bg, 1.0)


def ratio_threshold(ratio: np.ndarray) -> float:
    """Half-way between the surface (1) and the darkest 0.05 % of the ratio image: the
    circles' own contrast sets the cut, so it works on light and dark backgrounds."""
    small = ratio[::4, ::4]
    return 0.5 * (1.0 + float(np.percentile(small, 0.05)))


def dark_threshold(gray: np.ndarray) -> float:
    """Grey level half-way between the background (median) and the darkest ink (a global
    cut: only for uniform light backgrounds; the tracker uses ``darkness_ratio``)."""
    small = gray[::4, ::4]
    return 0.5 * (float(np.median(small)) + float(np.percentile(small, 0.05)))


def find_blobs(
    gray: np.ndarray, threshold: float, min_area: float = 20.0, offset=(0, 0)
) -> list[Blob]:
    """Dark connected regions (``gray < threshold``) of at least ``min_area`` px; see
    ``blobs_in_mask``."""
    # THRESH_BINARY_INV keeps src <= thresh; gray < threshold on integers is this
    _, mask = cv2.threshold(gray, float(np.ceil(threshold) - 1), 1, cv2.THRESH_BINARY_INV)
    return blobs_in_mask(mask, min_area, offset)


def dark_mask(ratio: np.ndarray, threshold: float) -> np.ndarray:
    """uint8 mask of ``ratio < threshold``."""
    return (ratio < threshold).astype(np.uint8)


def blobs_in_mask(
    mask: np.ndarray, min_area: float = 20.0, offset=(0, 0), min_fill: float = 0.33
) -> list[Blob]:
    """Connected regions of a uint8 ``mask`` of at least ``min_area`` px that fill at least
    ``min_fill`` of their bounding box (circles and blurred circles do, lines don't).

    Outer contours of every connected region, also of those inside another region's hole
    (a marker on a light plywood ellipse surrounded by a darker sheet: the sheet's dark
    ring around the ellipse encloses it), not ``connectedComponentsWithStats``: the same
    regions at ~1/30 of the cost on small windows, which is what keeps tracking close to
    decoding speed. Area is the pixel count of the region's polygon plus half its
    perimeter (the contour runs through boundary pixel centres).
    """
    contours, hierarchy = cv2.findContours(mask, cv2.RETR_CCOMP, cv2.CHAIN_APPROX_SIMPLE)
    out = []
    for i, cnt in enumerate(contours):
        if hierarchy[0, i, 3] >= 0:  # the boundary of a hole, not of a region
            continue
        x, y, w, h = cv2.boundingRect(cnt)
        m = cv2.moments(cnt)
        area = m["m00"] + 0.5 * cv2.arcLength(cnt, True) + 1.0
        if area < min_area or area < min_fill * w * h or m["m00"] <= 0:
            continue
        out.append(
            Blob(
                float(m["m10"] / m["m00"] + offset[0]),
                float(m["m01"] / m["m00"] + offset[1]),
                float(area),
                (int(x + offset[0]), int(y + offset[1]), int(w), int(h)),
            )
        )
    return out


def roundness(blob: Blob) -> float:
    """Area over the area of the ellipse inscribed in the bounding box (~1 for a disk or a
    projected disk at any orientation up to ~0.6 for a 45-degree tilted one, ~0 for a
    thin band)."""
    w, h = blob.box[2], blob.box[3]
    return blob.area / max(np.pi / 4 * w * h, 1e-9)


def weighted_centre(
    gray: np.ndarray, box: tuple[int, int, int, int], origin=(0, 0)
) -> Centre | None:
    """Darkness-weighted centroid inside ``box`` (px, image coordinates) grown by a margin;
    None if the window leaves ``gray`` or has no contrast. ``gray`` may be a crop whose
    top-left pixel is ``origin`` in the image. The window's border gives the background,
    as a plane ``a + b x + c y`` (a lighting gradient across the window would otherwise
    pull the centroid towards its dark side), and the noise (MAD about that plane)."""
    x, y, w, h = box
    m = max(3, int(0.25 * max(w, h)))
    found = window_centre(gray, (x - m, y - m, x + w + m, y + h + m), origin)
    return None if found is None else found.centre


@dataclass(frozen=True)
class WindowCentre:
    """A window's darkness-weighted centre, its dark mass ``mass`` (sum of the weights:
    px, conserved under motion blur, which only spreads it) and whether the weighted
    region reaches the window's edge (``at_edge``: something dark is cut by the
    window), and the size of its half-darkness region (a blob's box, for the smear)."""

    centre: Centre
    mass: float
    at_edge: bool
    size: tuple[int, int] = (0, 0)  # w, h (px) of the half-darkness region's bounding box


def window_centre(gray: np.ndarray, window, origin=(0, 0)) -> WindowCentre | None:
    """Darkness-weighted centroid of the window ``x0, y0, x1, y1`` (px, image coordinates,
    end exclusive) of ``gray`` (a crop whose top-left pixel is ``origin``); None if the
    window leaves ``gray`` or has no contrast. See ``weighted_centre``."""
    x0, y0, x1, y1 = (int(v) for v in window)
    x0, x1, y0, y1 = x0 - origin[0], x1 - origin[0], y0 - origin[1], y1 - origin[1]
    H, W = gray.shape[:2]
    if x0 < 0 or y0 < 0 or x1 > W or y1 > H or x1 - x0 < 5 or y1 - y0 < 5:
        return None
    raw = gray[y0:y1, x0:x1]
    bg, noise = _border_plane(raw)
    level = float(bg[raw.shape[0] // 2, raw.shape[1] // 2])
    # darkness relative to the local surface, 1 - I / bg: a lighting gradient or
    # vignetting scales ink and surface alike, so this weight does not lean towards the
    # brighter side of the circle as bg - I does (by g r^2 / 4 for a relative gradient g:
    # 0.1-0.25 px on vignetted corner circles of MuJoCo-rendered footage)
    depth = 1.0 - raw.astype(np.float32) / np.maximum(bg, np.float32(1.0))
    rel_noise = noise / max(level, 1.0)
    # support: the marker's half-darkness region grown by 3 px, so that other dark things
    # in the window (a bar, a neighbouring edge) get no weight; the cut is symmetric, so it
    # does not bias the centroid of a symmetric (or symmetrically blurred) disk
    half = (depth > np.float32(0.5 * float(depth.max()))).view(np.uint8)
    support = cv2.dilate(half, _DILATE)
    wgt = np.maximum(depth - np.float32(2.0 * rel_noise), np.float32(0)) * support
    mom = cv2.moments(wgt)
    total = mom["m00"]
    if total <= 0:
        return None
    cx, cy = mom["m10"] / total, mom["m01"] / total
    # var of a ratio of sums with i.i.d. pixel noise: sum((x_i - cx)^2) sigma^2 / total^2,
    # over the pixels that carry weight
    live = cv2.moments(wgt, binaryImage=True)
    sxx = live["m20"] - 2 * cx * live["m10"] + cx * cx * live["m00"]
    syy = live["m02"] - 2 * cy * live["m01"] + cy * cy * live["m00"]
    sigma = np.sqrt(max(sxx + syy, 0.0) / 2) * rel_noise / total
    edge = bool(wgt.ravel()[_border_geometry(*wgt.shape)[6]].any())
    _, _, bw, bh = cv2.boundingRect(half)
    centre = Centre(cx + x0 + origin[0], cy + y0 + origin[1], float(sigma), level, noise)
    return WindowCentre(centre, float(total), edge, (bw, bh))


@lru_cache(maxsize=256)
def _border_geometry(h: int, w: int):
    """Row and column indices of the two-pixel border of an ``h`` x ``w`` window, its
    design matrix ``[1, x - w/2, y - h/2]``, the matrix that maps the border's values to
    their least-squares plane (one product), the window's centred pixel coordinates and
    the flat indices of its outermost ring of pixels. Windows of a video repeat a few
    sizes (the tracker's are rounded), so this is built once per size."""
    ys = np.concatenate([np.repeat([0, 1, h - 2, h - 1], w), np.tile(np.arange(2, h - 2), 4)])
    xs = np.concatenate([np.tile(np.arange(w), 4), np.repeat([0, 1, w - 2, w - 1], max(h - 4, 0))])
    A = np.column_stack([np.ones(xs.size), xs - w / 2, ys - h / 2])
    gx = np.arange(w, dtype=np.float32) - np.float32(w / 2)
    gy = np.arange(h, dtype=np.float32) - np.float32(h / 2)
    fit = np.linalg.solve(A.T @ A, A.T)  # least-squares plane of all border pixels
    outer = (ys == 0) | (ys == h - 1) | (xs == 0) | (xs == w - 1)
    ring = ys[outer] * w + xs[outer]
    for arr in (ys, xs, A, fit, gx, gy, ring):
        arr.flags.writeable = False
    return ys, xs, A, fit, gx, gy, ring


def _border_plane(raw: np.ndarray) -> tuple[np.ndarray, float]:
    """Background plane (float32 image of ``raw``'s shape) fitted to the two-pixel border
    of ``raw``, and the noise (grey levels, MAD of the border about the plane, at least
    ``NOISE_FLOOR``). Robust: a border that crosses a neighbouring dark thing (the bar
    beside a ground circle) is fitted without it: first a flat level (median, MAD), then
    two plane fits of the pixels within 4 (then 3) MADs. This runs for every marker of
    every frame, so the border's geometry is cached per window size and a clean border
    (every pixel near the least-squares plane of all of them, as a marker on plain plywood
    has) takes one product with a cached matrix instead."""
    h, w = raw.shape
    ys, xs, A, fit, gx, gy, _ = _border_geometry(h, w)
    vals = raw[ys, xs].astype(np.float64)  # the border only (a crop's ravel would copy it all)
    coef = fit @ vals
    res = np.abs(vals - A @ coef)
    half = vals.size // 2
    mad = 1.4826 * float(np.partition(res, half)[half])
    # clean: a MAD of at most 3 noise floors (a dark neighbour over part of the border
    # inflates it to tens of levels) and no pixel beyond 4.5 of them (Gaussian noise alone
    # exceeds it in ~0.1 % of 200-pixel borders; a few JPEG-ringing pixels, 5-8 levels on
    # a flat MJPG border whose MAD is 0.2, move the plane by < 0.1 level). Otherwise the
    # robust fit, which drops what is not the surface
    if mad > 3 * NOISE_FLOOR or res.max() > 4.5 * max(mad, NOISE_FLOOR):
        coef, mad = _robust_plane(vals, A)
    plane = (
        np.float32(coef[0]) + np.float32(coef[1]) * gx[None, :] + np.float32(coef[2]) * gy[:, None]
    )
    return plane, max(NOISE_FLOOR, mad)


def _robust_plane(vals: np.ndarray, A: np.ndarray) -> tuple[np.ndarray, float]:
    """Plane coefficients and MAD (grey levels) of border values ``vals`` with outliers:
    a flat level (median, MAD) first, then two plane fits of the values within 4 (then 3)
    MADs."""
    half = vals.size // 2
    level = float(np.partition(vals, half)[half])
    res = vals - level
    mad = 1.4826 * float(np.partition(np.abs(res), half)[half])
    keep = np.abs(res) <= max(4.0 * mad, 3.0)
    coef = np.array([level, 0.0, 0.0])
    for _ in range(2):
        if keep.sum() < 6:
            break
        Ak = A[keep]
        try:
            coef = np.linalg.solve(Ak.T @ Ak, Ak.T @ vals[keep])
        except np.linalg.LinAlgError:
            break
        res = vals - A @ coef
        kept = np.abs(res[keep])
        mad = 1.4826 * float(np.partition(kept, kept.size // 2)[kept.size // 2])
        keep = np.abs(res) <= max(3.0 * mad, 1.5)
    return coef, mad


def disk_centroids(
    camera: Camera, rvec, tvec, centres_xy: np.ndarray, radius: float, n: int = 48
) -> tuple[np.ndarray, np.ndarray]:
    """Area centroids (px) of projected disks and the projections of their centres (px).

    ``centres_xy`` [N, 2] are disk centres on the plane (m), ``radius`` (m); the plane pose
    is ``rvec``, ``tvec``. The disk's image is the polygon of its projected rim (``n``
    vertices); the polygon's centroid differs from the curve's by O(bias / n^2): 3e-4 px
    for n = 48 and the < 0.3 px biases met here.
    """
    c = np.asarray(centres_xy, dtype=float).reshape(-1, 2)
    ang = np.linspace(0, 2 * np.pi, n, endpoint=False)
    rim = c[:, None, :] + radius * np.stack([np.cos(ang), np.sin(ang)], axis=-1)[None]
    pts = np.concatenate([rim.reshape(-1, 2), c])
    px = camera.project(np.column_stack([pts, np.zeros(len(pts))]), rvec, tvec)
    poly = px[: len(c) * n].reshape(len(c), n, 2)
    x, y = poly[..., 0], poly[..., 1]
    xn, yn = np.roll(x, -1, axis=1), np.roll(y, -1, axis=1)
    cross = x * yn - xn * y
    area = cross.sum(axis=1) / 2
    cx = ((x + xn) * cross).sum(axis=1) / (6 * area)
    cy = ((y + yn) * cross).sum(axis=1) / (6 * area)
    return np.column_stack([cx, cy]), px[len(c) * n :]


def disk_bias(camera: Camera, rvec, tvec, centres_xy: np.ndarray, radius: float) -> np.ndarray:
    """Centroid minus projected centre (px) of disks at ``centres_xy`` (m): subtract it
    from a measured centroid to get the projection of the circle's centre."""
    cent, proj = disk_centroids(camera, rvec, tvec, centres_xy, radius)
    return cent - proj
