"""Tracking throughput vs decode-only throughput on the same 1280x720 240 fps video.

Decode-only is OpenCV's ``VideoCapture.read`` loop, the floor any tracker built on OpenCV
pays; the target is tracking >= 0.7x decode-only. Each number is the median of ``--runs``
runs; the video (a rendered full drop, MJPG .avi and mp4v .mp4) is made once in a temp dir.

Two ratios: of wall-clock frame rates (the target's), and of CPU time (``process_time``:
all threads of the process, the decoder's included), decode-only's over tracking's. On a
machine shared with other jobs the wall ratio measures mostly the scheduler (the decoder
thread and the tracker wait for cores at different moments); the CPU ratio is the share
of the tracker's work that is decoding, which load changes far less. On an idle machine
with a core free for the decoder thread the wall ratio is at least the CPU ratio.

    python benchmarks/bench_tracking.py [--frames 240] [--runs 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import cv2
import numpy as np

from physid.vision.camera import action_camera
from physid.vision.render import (
    DropRenderer,
    RenderOptions,
    default_view,
    drop_trajectory,
    render_drop,
)
from physid.vision.scene import default_scene
from physid.vision.tracking import track_video


def decode_only(path: Path) -> tuple[float, float]:
    """Frames per second of wall time and of CPU time (all threads)."""
    cap = cv2.VideoCapture(str(path))
    n, start, cpu = 0, time.perf_counter(), time.process_time()
    while True:
        ok, _ = cap.read()
        if not ok:
            break
        n += 1
    cap.release()
    return n / (time.perf_counter() - start), n / (time.process_time() - cpu)


def tracking(path: Path, camera, scene) -> tuple[float, float]:
    """Frames per second of wall time and of CPU time (all threads)."""
    start, cpu = time.perf_counter(), time.process_time()
    result = track_video(path, camera, scene)
    n = len(result.t)
    return n / (time.perf_counter() - start), n / (time.process_time() - cpu)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=240)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    camera, scene = action_camera(), default_scene()
    view = default_view(camera, scene)
    traj = drop_trajectory(scene, duration=args.frames / 240 + 0.01, v0=(0, 0, 2.0))
    renderer = DropRenderer(view, scene)
    remap_vs_points(camera)
    with tempfile.TemporaryDirectory() as tmp:
        for suffix in (".avi", ".mp4"):
            path = Path(tmp) / f"drop{suffix}"
            opts = RenderOptions(exposure=1 / 960, seed=0)
            render_drop(path, view, scene, traj, args.frames, opts, renderer)
            dec, trk = [], []
            for _ in range(args.runs):  # interleaved so that machine load hits both alike
                dec.append(decode_only(path))
                trk.append(tracking(path, camera, scene))
            d, t = (statistics.median(r[0] for r in runs) for runs in (dec, trk))
            dc, tc = (statistics.median(r[1] for r in runs) for runs in (dec, trk))
            codec = "MJPG" if suffix == ".avi" else "mp4v"
            print(
                f"{codec:5s} 1280x720 {args.frames} frames: tracking {t:7.1f} frames/s, "
                f"decode-only {d:7.1f} frames/s, ratio {t / d:.2f}; per CPU second "
                f"{tc:7.1f} / {dc:7.1f} frames, ratio {tc / dc:.2f} (median of {args.runs})"
            )


def remap_vs_points(camera) -> None:
    """Why points are undistorted instead of frames: cost of each per frame."""
    w, h = camera.size
    map1, map2 = cv2.fisheye.initUndistortRectifyMap(
        camera.K, camera.D, None, camera.K, (w, h), cv2.CV_16SC2
    )
    img = np.random.default_rng(0).integers(0, 256, (h, w, 3), dtype=np.uint8)
    start = time.perf_counter()
    for _ in range(50):
        cv2.remap(img, map1, map2, cv2.INTER_LINEAR)
    remap_ms = (time.perf_counter() - start) / 50 * 1e3
    pts = camera.project([[0.01, 0.02, 0.2], [0.03, -0.01, 0.2]])
    start = time.perf_counter()
    for _ in range(500):
        camera.normalize(pts)
    point_ms = (time.perf_counter() - start) / 500 * 1e3
    print(
        f"undistort per frame: remap whole frame {remap_ms:.2f} ms, "
        f"2 marker points {point_ms:.3f} ms"
    )


if __name__ == "__main__":
    main()
