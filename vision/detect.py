"""First-frame detection of the static circles (four reference, two ground) by local contrast.

A circle is found by how much darker it is than the surface it is printed on, not by a
global grey level: the image is divided by its local upper envelope
(``circles.darkness_ratio``), so a circle on a grey bar, on a dark or light sheet, under a
lighting gradient or in a vignetted corner has the same ratio (ink over surface) while the
bar and the gradient stay near 1. The cut is half-way between the surface and the darkest
circles (``circles.ratio_threshold``); round regions of plausible size are the candidates.

Reference circles: per image diagonal the three candidates furthest along it; of those
combinations the one whose four blobs best have the image area a reference circle would
have there under the plane pose they imply (a missing corner circle makes another blob a
"corner" and fails that check). Ground circles: the candidates nearest to their nominal
positions (<= 30 mm, the bar's slope is adjustable).

When detection fails, a PNG beside the error shows the frame with every candidate, the
dark mask's outline, the chosen circles and where the ground circles were looked for; the
error message names it.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from itertools import product
from pathlib import Path

import cv2
import numpy as np

from physid.errors import InputError
from physid.vision.camera import Camera
from physid.vision.circles import (
    Blob,
    blobs_in_mask,
    dark_mask,
    darkness_ratio,
    ratio_threshold,
    roundness,
)
from physid.vision.scene import Scene
from physid.vision.world import PlanePose, match_corners, plane_pose

GROUND_SEARCH = 0.03  # m: nominal ground circles may be this far off (adjustable slope)
AREA_RANGE = (0.6, 1.6)  # blob area / expected area of a reference circle
MIN_ROUNDNESS = 0.5  # circles and blurred circles ~0.8-1.2, bands and rings far less


class TrackingError(InputError):
    """The video does not show what the rig spec says; names the file and frame."""


class DetectionError(TrackingError):
    """The static circles are not where the rig spec says; names file, frame and figure."""


@dataclass(frozen=True)
class StaticCircles:
    """The six static circles in the first frame: blobs (reference 0-3, ground 0-1), the
    rough plane pose they give, the ratio threshold and every candidate considered."""

    blobs: list[Blob]
    pose: PlanePose
    threshold: float
    candidates: list[Blob]


def background_window(shape: tuple[int, ...]) -> int:
    """Side (px) of the local-background square: 1/16 of the image width, wider than any
    circle a camera that sees the whole workspace can show (a 16 mm circle spans < 1/20)."""
    return max(15, int(shape[1] / 16) | 1)


def find_static_circles(
    gray: np.ndarray,
    camera: Camera,
    scene: Scene,
    source: str = "video",
    figure_dir: str | Path | None = None,
) -> StaticCircles:
    """Detect the static circles of ``scene`` in ``gray`` (see the module docstring).

    Raises DetectionError (naming ``source``, frame 0, and the saved figure) if they are
    not all found; the figure goes to ``figure_dir`` (default: the system's temp folder).
    """
    ratio = darkness_ratio(gray, background_window(gray.shape))
    thr = ratio_threshold(ratio)
    mask = dark_mask(ratio, thr)
    blobs = [b for b in blobs_in_mask(mask, min_area=12.0) if roundness(b) >= MIN_ROUNDNESS]
    fail = _Failure(source, gray, mask, thr, blobs, figure_dir)
    where = (
        "check that the four corner circles are in view and darker than the surface they "
        "are on, and that the rig spec's [scene] reference_circles match the rig"
    )
    if len(blobs) < 4:
        fail(
            f"found {len(blobs)} dark circles (round regions darker than their surroundings), "
            "need at least the 4 reference circles; " + where
        )
        raise AssertionError  # fail() raises
    pts = np.array([[b.x, b.y] for b in blobs])
    norm = camera.normalize(pts)
    ref_i, pose, worst = _reference_circles(norm, blobs, camera, scene)
    if ref_i is None or worst > np.log(AREA_RANGE[1]):
        fail(
            "fewer than 4 reference circles found: no four corner blobs have the image area "
            f"a {scene.reference_radius * 1000:.0f} mm reference circle would have there "
            f"(best combination off by {np.exp(worst) if np.isfinite(worst) else np.inf:.2f}x); "
            + where,
            chosen=ref_i,
        )
    world = pose.to_world(norm)
    used = set(ref_i.tolist())
    gnd_i = []
    for g in scene.ground:
        local = _local_circle(gray, camera, pose, g, scene.ground_radius)
        if local is not None:  # searched against the bar the circle is on
            blobs.append(local)
            world = np.vstack([world, [g + _offset(camera, pose, local, g)]])
            gnd_i.append(len(blobs) - 1)
            continue
        d = np.linalg.norm(world - g, axis=1)
        d[list(used)] = np.inf
        j = int(np.argmin(d))
        if d[j] > GROUND_SEARCH:
            fail(
                f"no dark circle within {GROUND_SEARCH * 1000:.0f} mm of the ground circle at "
                f"({g[0] * 1000:.0f}, {g[1] * 1000:.0f}) mm (nearest candidate "
                f"{d[j] * 1000:.0f} mm away); check the rig spec's [scene] ground_circles "
                "and that the bar's circles are in view",
                chosen=np.array([*ref_i.tolist(), *gnd_i]),
                camera=camera,
                pose=pose,
                scene=scene,
            )
        gnd_i.append(j)
        used.add(j)
    static = [blobs[i] for i in [*ref_i.tolist(), *gnd_i]]
    return StaticCircles(static, pose, thr, blobs)


def _reference_circles(norm, blobs, camera: Camera, scene: Scene, per_corner: int = 3):
    """Indices of the four reference blobs, their plane pose and the worst |log| area ratio
    of the best combination of the ``per_corner`` blobs furthest along each diagonal."""
    first = match_corners(norm, scene.reference)  # the single extreme per corner
    dirs = np.array([[-1, -1], [1, -1], [1, 1], [-1, 1]], dtype=float)
    centre = scene.reference.mean(axis=0)
    options = []
    for n, p in enumerate(scene.reference):
        d = np.sign(p - centre) * np.array([1, -1])
        k = int(np.argmax((dirs == d).all(axis=1)))
        order = np.argsort(-(norm @ dirs[k]))[:per_corner]
        options.append([int(first[n])] + [int(i) for i in order if i != first[n]])
    ang = np.linspace(0, 2 * np.pi, 64, endpoint=False)
    rim = scene.reference_radius * np.column_stack([np.cos(ang), np.sin(ang), 0 * ang])
    rims = np.concatenate([rim + [*p, 0.0] for p in scene.reference])
    best = (None, None, np.inf)
    # a pick other than a corner's most extreme blob must earn its place (by 5 %): the
    # combinations in order of that penalty, so that those which cannot beat the best so
    # far are skipped (the same answer as trying all, at a fraction of the plane poses)
    combos = product(*[o[:per_corner] for o in options])
    penalty = {c: 0.05 * sum(i != o[0] for i, o in zip(c, options, strict=True)) for c in combos}
    for combo in sorted(penalty, key=penalty.get):
        if penalty[combo] >= best[2]:
            break
        if len(set(combo)) < 4 or not _same_quadrilateral(norm[list(combo)], scene.reference):
            continue
        idx = np.array(combo)
        try:
            pose = plane_pose(norm[idx], scene.reference)
        except ValueError:
            continue
        worst = penalty[combo]
        rings = camera.project(rims, pose.rvec, pose.t).astype(np.float32).reshape(4, -1, 2)
        for i, ring in zip(idx, rings, strict=True):
            expected = cv2.contourArea(ring)
            worst = max(worst, abs(np.log(blobs[i].area / max(expected, 1e-9))))
        if worst < best[2]:
            best = (idx, pose, worst)
    return best


def _same_quadrilateral(image: np.ndarray, world: np.ndarray) -> bool:
    """True if the four image points (y down) form a convex quadrilateral traversed in the
    same sense as the four world points (y up): a homography of an upright view keeps
    both, while two swapped corners make a bow-tie."""

    def turns(p):
        d = np.roll(p, -1, axis=0) - p
        return d[:, 0] * np.roll(d, -1, axis=0)[:, 1] - d[:, 1] * np.roll(d, -1, axis=0)[:, 0]

    img = turns(np.asarray(image, float) * [1.0, -1.0])
    ref = turns(np.asarray(world, float))
    return bool(np.all(np.sign(img) == np.sign(ref[0])) and np.all(np.sign(ref) == np.sign(ref[0])))


def _offset(camera: Camera, pose: PlanePose, blob: Blob, nominal) -> np.ndarray:
    """World position of ``blob`` minus ``nominal`` (m)."""
    return pose.to_world(camera.normalize(np.array([[blob.x, blob.y]])))[0] - nominal


def _local_circle(gray, camera: Camera, pose: PlanePose, nominal, radius: float) -> Blob | None:
    """The round dark blob nearest to the plane point ``nominal`` (<= GROUND_SEARCH) found
    against its own surroundings: the window around the search area is divided by its
    envelope over a square of ~2.5 circle radii (so a circle on a bar is judged against
    the bar, even where the whole bar is dark against a light sheet and merged with it in
    the frame-wide mask) and cut half-way to its darkest ratio. None if there is none."""
    ang = np.linspace(0, 2 * np.pi, 24, endpoint=False)
    ring = nominal + GROUND_SEARCH * np.column_stack([np.cos(ang), np.sin(ang)])
    px = camera.project(np.column_stack([ring, 0 * ang]), pose.rvec, pose.t)
    rim = camera.project(
        np.array([[*nominal, 0.0], [nominal[0] + radius, nominal[1], 0.0]]), pose.rvec, pose.t
    )
    r_px = float(np.linalg.norm(rim[1] - rim[0]))
    H, W = gray.shape
    x0, y0 = np.clip(np.floor(px.min(axis=0) - r_px).astype(int), 0, [W, H])
    x1, y1 = np.clip(np.ceil(px.max(axis=0) + r_px).astype(int), 0, [W, H])
    if x1 - x0 < 4 * r_px or y1 - y0 < 4 * r_px:
        return None
    crop = gray[y0:y1, x0:x1]
    ratio = darkness_ratio(crop, int(2.5 * r_px + 3))
    cut = 0.5 * (1.0 + float(ratio.min()))
    area = np.pi * r_px**2
    found = [
        b
        for b in blobs_in_mask(dark_mask(ratio, cut), 0.3 * area, (x0, y0))
        if b.area < 3 * area and roundness(b) >= MIN_ROUNDNESS
    ]
    best, best_d = None, GROUND_SEARCH
    for b in found:
        d = float(np.linalg.norm(_offset(camera, pose, b, nominal)))
        if d <= best_d:
            best, best_d = b, d
    return best


class _Failure:
    """Raises DetectionError after saving the annotated frame."""

    def __init__(self, source, gray, mask, thr, blobs, figure_dir):
        self.source, self.gray, self.mask, self.thr, self.blobs = source, gray, mask, thr, blobs
        self.figure_dir = figure_dir

    def __call__(self, message, chosen=None, camera=None, pose=None, scene=None):
        path = self._figure(message, chosen, camera, pose, scene)
        raise DetectionError(
            f"{self.source}: frame 0: {message} (what was found and where it looked: {path})"
        )

    def _figure(self, message, chosen, camera, pose, scene) -> Path:
        img = cv2.cvtColor(self.gray, cv2.COLOR_GRAY2BGR)
        contours, _ = cv2.findContours(self.mask, cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE)
        cv2.drawContours(img, contours, -1, (255, 128, 0), 1)  # dark mask outline: blue
        for i, b in enumerate(self.blobs):
            x, y, w, h = b.box
            cv2.rectangle(img, (x - 2, y - 2), (x + w + 2, y + h + 2), (0, 200, 255), 1)
            cv2.putText(
                img, str(i), (x + w + 3, y), cv2.FONT_HERSHEY_SIMPLEX, 0.4, (0, 200, 255), 1
            )
        for n, i in enumerate([] if chosen is None else list(chosen)):
            b = self.blobs[int(i)]
            label = f"R{n}" if n < 4 else f"G{n - 4}"
            cv2.circle(img, (int(b.x), int(b.y)), 4, (0, 220, 0), -1)
            cv2.putText(
                img,
                label,
                (int(b.x) + 6, int(b.y) + 14),
                cv2.FONT_HERSHEY_SIMPLEX,
                0.5,
                (0, 220, 0),
                1,
            )
        if camera is not None and pose is not None and scene is not None:
            ang = np.linspace(0, 2 * np.pi, 48)
            for g in scene.ground:  # where each ground circle was looked for
                ring = g + GROUND_SEARCH * np.column_stack([np.cos(ang), np.sin(ang)])
                px = camera.project(np.column_stack([ring, 0 * ang]), pose.rvec, pose.t)
                cv2.polylines(img, [np.round(px).astype(np.int32)], True, (0, 0, 255), 1)
        lines = [
            f"frame 0: ratio threshold {self.thr:.2f} (image / local background)",
            "blue: dark mask, orange: round candidates, green: chosen, red: ground search",
            message[:150],
        ]
        for k, text in enumerate(lines):
            cv2.putText(img, text, (10, 20 + 18 * k), cv2.FONT_HERSHEY_SIMPLEX, 0.5, (0, 0, 0), 3)
            cv2.putText(
                img, text, (10, 20 + 18 * k), cv2.FONT_HERSHEY_SIMPLEX, 0.5, (255, 255, 255), 1
            )
        folder = Path(self.figure_dir) if self.figure_dir is not None else None
        name = f"{Path(self.source).name}.detection.png"
        for target in ([folder] if folder is not None else []) + [Path(tempfile.gettempdir())]:
            try:
                target.mkdir(parents=True, exist_ok=True)
                path = target / name
                if cv2.imwrite(str(path), img):
                    return path
            except OSError:
                continue
        return Path("(figure could not be written)")
