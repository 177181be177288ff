"""3D marker tracking throughput vs decode-only on the same rendered Furuta clip, plus the
clip's file size and the tracker's accuracy against the renderer's truth.

Decode-only is OpenCV's ``VideoCapture.read`` loop (the floor of any OpenCV-based tracker);
tracking is ``track_markers`` (decode in a prefetch thread + grey conversion + ArUco
detection in windows + edge refinement). Each number is the median of ``--runs`` runs,
interleaved so that machine load hits both alike.

    python benchmarks/bench_markers3d.py [--seconds 2] [--fps 120] [--size 800x600] [--runs 3]
        [--exposure 0.002] [--codecs mp4,avi]
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
from physid.vision.markers3d import (
    RenderSettings,
    furuta_marker_frames,
    furuta_rods,
    look_at,
    render_marker_video,
    track_markers,
)

IDS, SIDE = (3, 7), 0.035


def swing_up(t: np.ndarray, duration: float) -> tuple[np.ndarray, np.ndarray]:
    """Arm and pendulum angles (rad) of a swing-up-like motion: the arm oscillates within
    +/- 1 rad while the pendulum's swing grows until it goes over the top."""
    arm = 0.9 * np.sin(2 * np.pi * 0.8 * t) * np.minimum(1.0, t / 1.5)
    pend = np.minimum(1.0, t / (0.7 * duration)) * 3.6 * np.sin(2 * np.pi * 1.1 * t)
    return arm, pend


def decode_only(path: Path) -> float:
    cap = cv2.VideoCapture(str(path))
    n, start = 0, time.perf_counter()
    while cap.read()[0]:
        n += 1
    cap.release()
    return n / (time.perf_counter() - start)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--fps", type=float, default=120.0)
    ap.add_argument("--size", default="800x600")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--noise", type=float, default=1.0)
    ap.add_argument("--exposure", type=float, default=0.0, help="shutter time (s); 0: sharp")
    ap.add_argument("--codecs", default="mp4,avi")
    args = ap.parse_args()
    w, h = (int(v) for v in args.size.split("x"))
    camera = action_camera(w, h)
    R, tcw = look_at([0.5, 0.1, 0.0], [0.15, 0.0, 0.0])
    t = np.arange(int(round(args.seconds * args.fps))) / args.fps
    arm, pend = swing_up(t, args.seconds)
    # motion blur: 9 instants over the exposure, the middle one at the frame time
    sub = t[:, None] + np.linspace(-0.5, 0.5, 9 if args.exposure > 0 else 1) * args.exposure
    mf = furuta_marker_frames(*swing_up(sub.ravel(), args.seconds))
    mf = [a.reshape(*sub.shape, *a.shape[1:]) for a in (mf.centres, mf.normals, mf.ups)]
    settings = RenderSettings(noise=args.noise)
    with tempfile.TemporaryDirectory() as tmp:
        codecs = {"mp4": (".mp4", "mp4v"), "avi": (".avi", "MJPG q90")}
        for suffix, codec in (codecs[c] for c in args.codecs.split(",")):
            path = Path(tmp) / f"furuta{suffix}"
            start = time.perf_counter()
            truth = render_marker_video(
                path, camera, R, tcw, *mf, IDS, SIDE, args.fps,
                settings, rods=furuta_rods(arm, pend),
            )  # fmt: skip
            render_s = time.perf_counter() - start
            dec, trk = [], []
            for _ in range(args.runs):
                dec.append(decode_only(path))
                start = time.perf_counter()
                tracks = track_markers(path, camera, IDS, SIDE)
                trk.append(len(t) / (time.perf_counter() - start))
            d, k = statistics.median(dec), statistics.median(trk)
            err = np.linalg.norm(tracks.uv - truth["centre_px"], axis=-1)
            found = ~tracks.missing
            face = truth["in_view"] & (truth["view_angle"] < np.radians(60))
            print(
                f"{codec:8s} {w}x{h} {len(t)} frames ({args.seconds:g} s, exposure "
                f"{args.exposure * 1e3:g} ms): "
                f"{path.stat().st_size / 1e6:.2f} MB, render {render_s:.1f} s; "
                f"tracking {k:6.1f} frames/s, decode-only {d:6.1f} frames/s, "
                f"ratio {k / d:.2f} (median of {args.runs})"
            )
            print(
                f"         found {found.mean(axis=0).round(3).tolist()} of frames per marker "
                f"(within 60 deg of face-on and in view: "
                f"{(found & face).sum()}/{face.sum()}); centre error RMS "
                f"{np.sqrt(np.mean(err[found] ** 2)):.3f} px, max {err[found].max():.3f} px"
            )


if __name__ == "__main__":
    main()
