"""Overlay videos: what the tracker saw drawn on the original frames, to check it by eye.

- ``write_overlay``: the planar drop: detected circles, identities, body axes, ground line.
- ``write_marker_overlay``: 3D markers (Furuta): each marker's refined outline and centre,
  and where the encoder angles put it (synchronized clocks, fitted camera pose).

Overlays are VP9 in WebM (``OVERLAY_SUFFIX``), which browsers play in a report's ``<video>``:
this OpenCV's FFmpeg writes VP9 and VP8 but no H.264 (``avc1`` needs an encoder it lacks),
and the MPEG-4 part 2 of ``.mp4`` plays in no browser.
"""

from __future__ import annotations

import logging
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path

import cv2
import numpy as np

from physid.vision.tracking import TrackResult
from physid.vision.video import VideoWriter, frames

OVERLAY_SUFFIX = ".webm"


@contextmanager
def _opencv_notes():
    """Send what OpenCV's FFmpeg backend prints on stderr meanwhile to the log, not the
    terminal (WebM has no codec tags, so it prints a note for any four-character code)."""
    try:
        saved = os.dup(2)
    except OSError:  # no stderr to redirect
        yield
        return
    with tempfile.TemporaryFile(mode="w+b") as caught:
        os.dup2(caught.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            caught.seek(0)
            text = caught.read().decode("utf-8", "replace").strip()
            if text:
                logging.getLogger("opencv").info(text)


def overlay_writer(out: str | Path, fps: float, size: tuple[int, int]) -> VideoWriter:
    """A VideoWriter for an overlay (``.webm``: VP9; other suffixes as ``VideoWriter``)."""
    with _opencv_notes():
        return VideoWriter(out, fps, size)


_COLOURS = [(0, 0, 255), (255, 0, 0)]  # BGR: marker 0 red, marker 1 blue


def write_overlay(result: TrackResult, camera, scene, out: str | Path, fps: float) -> Path:
    """Second pass over the video, drawing ``result`` on every frame into ``out``."""
    out = Path(out)
    pose = result.plane
    p0, alpha = result.ground_p0, result.ground_alpha
    d = np.array([np.cos(alpha), np.sin(alpha)])
    length = float(np.linalg.norm(scene.ground[1] - scene.ground[0])) + 0.04
    line = np.array([p0 - 0.02 * d + s * d for s in np.linspace(0, length, 30)])
    line_px = camera.project(np.column_stack([line, np.zeros(len(line))]), pose.rvec, pose.t)
    with overlay_writer(out, fps, camera.size) as w:
        for k, _, img in frames(result.path):
            if img.ndim == 2:
                img = cv2.cvtColor(img, cv2.COLOR_GRAY2BGR)
            cv2.polylines(
                img, [np.round(line_px * 4).astype(np.int32)], False, (0, 160, 0), 2, cv2.LINE_AA, 2
            )
            for i, c in enumerate(np.concatenate([result.reference_px, result.ground_px])):
                _cross(img, c, (0, 200, 0), f"R{i}" if i < 4 else f"G{i - 4}")
            for m in range(2):
                if not result.missing[k, m]:
                    _cross(img, result.marker_px[k, m], _COLOURS[m], f"M{m}")
            q = result.poses[k]
            if np.all(np.isfinite(q)):
                c, s = np.cos(q[2]), np.sin(q[2])
                pts = np.array(
                    [q[:2], q[:2] + 0.03 * np.array([c, s]), q[:2] + 0.03 * np.array([-s, c])]
                )
                px = camera.project(np.column_stack([pts, np.zeros(3)]), pose.rvec, pose.t)
                o = tuple(np.round(px[0]).astype(int))
                cv2.arrowedLine(
                    img, o, tuple(np.round(px[1]).astype(int)), (0, 0, 255), 2, cv2.LINE_AA
                )
                cv2.arrowedLine(
                    img, o, tuple(np.round(px[2]).astype(int)), (0, 200, 0), 2, cv2.LINE_AA
                )
            else:
                cv2.putText(
                    img, "pose masked", (20, 40), cv2.FONT_HERSHEY_SIMPLEX, 1, (0, 0, 255), 2
                )
            cv2.putText(
                img,
                f"t={result.t[k]:.4f}s",
                (20, img.shape[0] - 20),
                cv2.FONT_HERSHEY_SIMPLEX,
                0.7,
                (0, 0, 0),
                2,
            )
            w.write(img)
    return out


def _cross(img, c, colour, label) -> None:
    p = tuple(np.round(np.asarray(c) * 16).astype(int))
    cv2.circle(img, p, 6 * 16, colour, 1, cv2.LINE_AA, 4)
    cv2.drawMarker(img, tuple(np.round(c).astype(int)), colour, cv2.MARKER_CROSS, 10, 1)
    cv2.putText(
        img, label, (int(c[0]) + 8, int(c[1]) - 8), cv2.FONT_HERSHEY_SIMPLEX, 0.5, colour, 1
    )


_MARKER_COLOURS = [(0, 0, 255), (255, 0, 0), (0, 170, 255), (200, 0, 200), (0, 160, 0)]


def write_marker_overlay(
    tracks, out: str | Path, fps: float, predicted: np.ndarray | None = None, names=None
) -> Path:
    """Second pass over ``tracks.path`` (``vision.markers3d.MarkerTracks``), drawing each
    marker's refined outline, centre and name where it was detected, and a circle where
    ``predicted[F, m, 2]`` (px; NaN where unknown) puts it, into ``out``."""
    out = Path(out)
    names = list(names or [f"id {i}" for i in tracks.ids])
    size = None
    writer = None
    try:
        for k, _, img in frames(tracks.path):
            if img.ndim == 2:
                img = cv2.cvtColor(img, cv2.COLOR_GRAY2BGR)
            if writer is None:
                size = (img.shape[1], img.shape[0])
                writer = overlay_writer(out, fps, size)
            if k < len(tracks.t):
                _draw_markers(img, tracks, k, predicted, names)
                caption = f"t={tracks.t[k]:.4f}s  {int(tracks.n_detected[k])} markers"
                if predicted is not None:
                    caption += "  (circle: where the encoders put them)"
                cv2.putText(
                    img, caption, (20, img.shape[0] - 20), cv2.FONT_HERSHEY_SIMPLEX, 0.6,
                    (0, 0, 0), 2, cv2.LINE_AA,
                )  # fmt: skip
            writer.write(img)
    finally:
        if writer is not None:
            writer.close()
    return out


def _draw_markers(img, tracks, k: int, predicted, names) -> None:
    for j, name in enumerate(names):
        colour = _MARKER_COLOURS[j % len(_MARKER_COLOURS)]
        if not tracks.missing[k, j]:
            quad = np.round(tracks.corners[k, j] * 16).astype(np.int32)
            cv2.polylines(img, [quad], True, colour, 2, cv2.LINE_AA, 4)
            _cross(img, tracks.uv[k, j], colour, name)
        if predicted is not None and np.all(np.isfinite(predicted[k, j])):
            c = tuple(np.round(predicted[k, j] * 16).astype(int))
            cv2.circle(img, c, 9 * 16, colour, 2, cv2.LINE_AA, 4)
