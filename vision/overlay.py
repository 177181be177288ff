"""Overlay video: detected markers, identities, body axes and the ground line drawn on the
original frames, so a user can check the tracking by eye."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np

from physid.vision.tracking import TrackResult
from physid.vision.video import VideoWriter, frames

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
    with VideoWriter(out, fps, camera.size) as w:
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
