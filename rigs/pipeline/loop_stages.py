"""The pipeline stages of a loop rig (``[rig] model = "loop"``, ``rigs.models.identify_loop``):
a log of the measured point and the force → single shooting; or a marker video → camera
model → marker tracking → single shooting through the camera model."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from physid.errors import InputError
from physid.rigs.pipeline.run import (
    Result,
    StageLog,
    _frame_ticker,
    _series,
    _with_report_series,
    camera_for,
    check_video_frames,
)


def loop_stages(exp, spec, work: Path, log: StageLog, settings: dict) -> Result:
    """One log (``physid simulate`` writes it) or one marker video of the loop."""
    from physid.rigs.models import identify_loop as il
    from physid.rigs.models.identify_hinged import enable_compilation_cache

    enable_compilation_cache()  # a re-run reuses the compiled rollout and its tangents
    if exp.videos:
        return _video(exp, spec, work, log)
    if len(exp.encoders) != 1:
        raise InputError(
            f"{exp.name}: a loop rig is identified from one log (t,x,y,z,Fx,Fy,Fz) or one "
            f"marker video; got {len(exp.encoders)} logs"
        )
    log.begin("log")
    data = il.read_loop_log(exp.encoders[0])
    log.print(f"{data.path.name}: {len(data.t)} rows, {data.t[-1] - data.t[0]:.3g} s")
    log.begin("identify")
    estimate = il.identify_log_series(spec, data, log.print)
    facts = {"log": {"file": data.path.name, "rows": len(data.t)}}
    return Result(_with_series(estimate, "m"), facts, {}, [])


def _with_series(estimate, unit: str):
    """The report's measured/fitted series per channel, from the free run in the estimate."""
    run = estimate.extra["prediction_series"][0]
    series = []
    for c in run["channels"]:
        meas = np.array([np.nan if v is None else v for v in c["measured"]])
        fit = np.array([np.nan if v is None else v for v in c["predicted"]])
        tt = np.asarray(run["t"])
        ok = np.isfinite(meas)
        series.append(_series(c["name"], unit, tt[ok], meas[ok], tt, fit))
    return _with_report_series(estimate, {"series": series})


def loop_markers(spec):
    """The spec's ``[video]`` markers as ``identify_loop.LoopMarkers`` (and the table)."""
    from physid.rigs.models.identify_loop import LoopMarkers
    from physid.rigs.pipeline.fusion import video_markers

    markers = video_markers(spec)
    if markers is None:
        raise InputError(
            f"{spec.path}: a loop video needs the [video] markers on the loop's bodies "
            "([video.markers.NAME] with id, body, position, normal, up)"
        )
    from physid.rigs.models.loop import load_loop

    n_bodies = load_loop(spec).system.tree.n_bodies
    bad = [b for b in markers.body if not 0 <= b < n_bodies]
    if bad:
        raise spec.error("video.markers", f"body {bad[0]}: the tree has bodies 0..{n_bodies - 1}")
    return LoopMarkers(tuple(markers.body), np.asarray(markers.points), markers.noise_px), markers


def _video(exp, spec, work: Path, log: StageLog) -> Result:
    from physid.rigs.models.identify_loop import identify_loop_video
    from physid.vision.markers3d import track_markers
    from physid.vision.video import open_video

    if len(exp.videos) != 1 or exp.encoders:
        raise InputError(f"{exp.name}: a loop video experiment takes one video and no logs")
    loop, markers = loop_markers(spec)
    camera = camera_for(exp, work, log)
    video = exp.videos[0]
    log.begin("tracking")
    _, info = open_video(video)
    tracks = track_markers(
        video, camera, markers.ids, markers.side,
        progress=_frame_ticker(log, info.frames), dictionary=markers.dictionary,
    )  # fmt: skip
    warned: list[str] = []
    frames = check_video_frames(info, tracks.t, log, warned)
    seen = 1.0 - tracks.missing.mean(axis=0)
    log.print("markers seen in " + ", ".join(f"{100 * s:.0f} %" for s in seen) + " of frames")
    facts = {
        "tracking": {
            "video": video.name,
            "frames": len(tracks.t),
            **{f"seen_{n}": float(s) for n, s in zip(markers.names, seen, strict=True)},
            **frames,
        }
    }
    log.begin("identify")
    estimate = identify_loop_video(
        spec, loop, camera, tracks.t, tracks.uv, tracks.missing, video.name, log.print
    )
    return Result(_with_series(estimate, "px"), facts, {}, warned)
