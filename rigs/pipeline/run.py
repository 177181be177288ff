"""Run one experiment end to end: calibrate, track, read encoders, synchronize, identify, report.

``run_experiment`` is what ``physid process`` sends to a Dask worker for each experiment. It
writes into a hidden work folder ``.NAME.partial`` next to the final one and swaps it into
place only when everything, report included, is written: an interrupted or failed run never
leaves a half-written report and never replaces a good one. ``summary.json`` (written last)
records the input hash, so a re-run with unchanged inputs reuses the finished report.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import time
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from physid.errors import InputError
from physid.estimation.estimate import Estimate, write_json_atomic
from physid.files import naming
from physid.rigs.pipeline.experiments import Experiment, input_hash
from physid.rigs.pipeline.outputs import damaged_outputs, file_hashes
from physid.terminal import plain

PROGRESS_TOPIC = "physid-progress"
SUMMARY = "summary.json"
FINISHED = ("ok", "warning")  # statuses of an experiment whose report was written


# ------------------------------------------------------------------------------ progress


def emit(event: dict) -> None:
    """Send a progress event to the client that submitted the task (Dask worker event log),
    or nowhere when running outside a worker (tests call ``run_experiment`` directly)."""
    try:
        from distributed import get_worker

        worker = get_worker()
    except (ImportError, ValueError):
        return
    worker.log_event(PROGRESS_TOPIC, event)


@dataclass
class StageLog:
    """The console handed to the rig modules: lines go to ``log.txt`` and out as progress
    events tagged with the experiment and the current stage."""

    experiment: str
    path: Path
    stage: str = "start"
    started: float = field(default_factory=time.perf_counter)
    timings: dict[str, float] = field(default_factory=dict)
    sink: Callable[[dict], None] = emit

    def begin(self, stage: str) -> None:
        now = time.perf_counter()
        if self.stage != "start":
            self.timings[self.stage] = self.timings.get(self.stage, 0.0) + now - self.started
        self.stage, self.started = stage, now
        self.print(f"stage {stage}")

    def finish(self) -> None:
        self.begin("done")

    def print(self, *objects, **_) -> None:
        text = plain(" ".join(str(o) for o in objects))
        with open(self.path, "a") as fh:
            fh.write(f"[{self.stage}] {text}\n")
        self.sink({"experiment": self.experiment, "stage": self.stage, "message": text})


# ------------------------------------------------------------------------------ one experiment


def run_experiment(
    exp: Experiment, out_root: str | Path, settings: dict, sink: Callable[[dict], None] = emit
) -> dict:
    """Process one experiment into ``out_root/NAME``; returns its summary (never raises for
    bad input: the error is in the summary with ``status`` "failed" or "invalid").
    ``settings["method"]`` overrides ``[method]`` settings of the rig spec; ``sink`` receives
    the progress events (default: the Dask client that submitted the task).

    Nothing is written or removed before the experiment's output paths are checked to lie
    inside ``out_root`` (``outputs.inside``). A finished report is reused only when its
    input hash matches and every file it recorded is there unchanged. The status is "ok",
    "warning" (finished, with problems listed in ``warnings``), "failed" or "invalid".
    """
    from physid.rigs.pipeline.outputs import UnsafePath

    if exp.problems:
        return _summary(exp, "invalid", error="; ".join(exp.problems))
    try:
        paths = OutputPaths.of(Path(out_root), exp.name)
    except UnsafePath as exc:
        return _summary(exp, "invalid", error=str(exc))
    paths.restore_interrupted_swap()
    try:
        digest = input_hash(exp, {k: v for k, v in settings.items() if k != "force"})
    except OSError as exc:
        return _summary(exp, "invalid", error=f"cannot read an input: {_os_error(exc)}")
    cached = _cached_summary(paths.final, digest)
    if cached is not None and not settings.get("force"):
        sink({"experiment": exp.name, "stage": "done", "message": "unchanged; report reused"})
        return {**cached, "skipped": True}

    work = paths.work
    log = StageLog(exp.name, work / "log.txt", sink=sink)
    try:
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        result = identify_experiment(exp, work, log, settings)
        result.estimate.write(work / "estimate.json")
        log.begin("report")
        from physid.estimation.report import write_experiment_report

        status = "warning" if result.warnings else "ok"
        summary = _summary(exp, status, digest=digest, result=result, timings=log.timings)
        with naming(work / "report.html"):
            write_experiment_report(work / "report.html", summary, result.estimate, work)
        log.finish()
        summary["timings"] = dict(log.timings)  # now with the report stage
        summary["outputs"] = file_hashes(work)  # checked before the report is reused
        write_json_atomic(work / SUMMARY, summary)
        paths.swap_into_place()
        paths.failed_log.unlink(missing_ok=True)  # an earlier failure's
        return summary
    except Exception as exc:  # noqa: BLE001  (one bad experiment never stops the others)
        message = _one_line(exc)
        detail = message if isinstance(exc, InputError | OSError) else traceback.format_exc()
        kept = paths.keep_log(log, detail)
        shutil.rmtree(work, ignore_errors=True)
        expected = isinstance(exc, InputError)
        return _summary(
            exp, "failed", error=message, stage=log.stage, log=kept, input_error=expected
        )


def _one_line(exc: BaseException) -> str:
    """The message of a failed experiment: an input error's own text, the file and the
    reason for an OS error (disk full, permissions), else the exception's type and text."""
    if isinstance(exc, InputError):
        return str(exc)
    if isinstance(exc, OSError):
        return _os_error(exc)
    return f"{type(exc).__name__}: {exc}"


def _os_error(exc: OSError) -> str:
    where = f"{exc.filename}: " if exc.filename else ""
    reason = exc.strerror or str(exc)
    hint = "; free space there and run again" if exc.errno == errno.ENOSPC else ""
    return f"{where}{reason}{hint}"


@dataclass(frozen=True)
class OutputPaths:
    """Where one experiment's outputs go in ``--out``, each checked to lie inside it:
    ``final`` (NAME/), ``work`` (.NAME.partial/), ``old`` (.NAME.old/ during the swap) and
    ``failed_log`` (NAME.failed.log)."""

    final: Path
    work: Path
    old: Path
    failed_log: Path

    @staticmethod
    def of(out_root: Path, name: str) -> OutputPaths:
        from physid.rigs.pipeline.outputs import inside

        return OutputPaths(
            inside(out_root, name),
            inside(out_root, f".{name}.partial"),
            inside(out_root, f".{name}.old"),
            inside(out_root, f"{name}.failed.log"),
        )

    def swap_into_place(self) -> None:
        """Replace ``final`` by ``work`` with renames only (a crash in between is repaired
        by ``restore_interrupted_swap`` on the next run)."""
        shutil.rmtree(self.old, ignore_errors=True)
        if self.final.exists():
            self.final.rename(self.old)
        self.work.rename(self.final)
        shutil.rmtree(self.old, ignore_errors=True)

    def restore_interrupted_swap(self) -> None:
        if self.old.exists() and not self.final.exists():
            self.old.rename(self.final)

    def keep_log(self, log: StageLog, detail: str) -> str | None:
        """Move the work folder's log to ``NAME.failed.log`` and end it with ``detail``.
        A rename needs no free space, so on a full disk the lines logged so far survive
        even when the last one cannot be added. The file name, or None when the log is
        empty (the index still has the error)."""
        try:
            log.print(detail)
        except OSError:
            pass  # the disk is full: keep what was written
        try:
            if log.path.stat().st_size == 0:  # not one line could be written
                return None
            os.replace(log.path, self.failed_log)
        except OSError:
            return None
        return self.failed_log.name


@dataclass
class Result:
    """What the stages produced: the estimate, extra report facts, the files written and
    ``warnings`` (problems that did not stop the fit, e.g. a few frames missing from a video;
    any makes the experiment's status "warning")."""

    estimate: Estimate
    facts: dict = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def identify_experiment(exp: Experiment, work: Path, log: StageLog, settings: dict) -> Result:
    """Run the stages the experiment's rig model needs (see ``STAGES``)."""
    from dataclasses import replace

    from physid.rigs.models.kinds import kind_module
    from physid.spec import load_spec, with_overrides

    log.begin("spec")
    spec = with_overrides(load_spec(exp.rig), exp.overrides, exp.overrides_origin())
    if settings.get("method"):
        spec = replace(spec, method={**spec.method, **settings["method"]})
    kind_module(spec)  # unknown models fail here with the spec's name in the message
    stages = STAGES.get(spec.model)
    if stages is None:
        raise InputError(no_pipeline_message(exp.rig, spec.model))
    return stages(exp, spec, work, log, settings)


def no_pipeline_message(rig, model: str) -> str:
    """Why a rig of ``model`` cannot be identified from files."""
    return f"{rig}: no pipeline for model {model!r}"


# ------------------------------------------------------------------------------ video rigs


def camera_for(exp: Experiment, work: Path, log: StageLog):
    """The camera model: the experiment's camera JSON, or one calibrated from its
    checkerboard video (saved as ``camera.json`` in the report folder)."""
    from physid.vision.camera import Camera

    if exp.calibration is not None:
        log.begin("calibration")
        log.print(f"camera model from {exp.calibration.name}")
        return Camera.load(exp.calibration)
    if exp.calibration_video is None:
        raise InputError(
            f'{exp.name}: video needs a camera model; add calibration = "camera.json" or '
            'calibration_video = "..." with board and square to the manifest'
        )
    if not exp.board or not exp.square:
        raise InputError(
            f"{exp.name}: calibration_video {exp.calibration_video.name} needs board = "
            '"COLSxROWS" (inner corners) and square = { value = ..., unit = "mm" }'
        )
    from physid.vision.calibrate import calibrate_video, parse_board

    log.begin("calibration")
    log.print(f"calibrating from {exp.calibration_video.name} ({exp.board}, {exp.square} m)")
    report = calibrate_video(exp.calibration_video, parse_board(exp.board), exp.square, "fisheye")
    log.print(f"calibration RMS {report.rms:.3f} px from {len(report.frame_rms)} frames")
    report.camera.save(work / "camera.json")
    return report.camera


def _frame_ticker(log: StageLog, total: int | None, every: int = 24):
    def tick(k: int) -> None:
        if k % every == 0:
            log.sink(
                {"experiment": log.experiment, "stage": log.stage, "frames": k, "total": total}
            )

    return tick


def ellipse_stages(exp: Experiment, spec, work: Path, log: StageLog, settings: dict) -> Result:
    """Ellipse drop: camera → track → IPOPT (J/m, μ); the ground line is the one measured
    in the video, not the spec's nominal one."""
    from physid.rigs.models import ellipse_drop

    facts: dict = {}
    files: dict[str, str] = {}
    warned: list[str] = []
    if exp.poses:
        poses = list(exp.poses)  # several throws of one object are pooled (issue 24)
    elif exp.videos:
        tracked, spec = _track_drop(exp, spec, work, log, facts, files, warned)
        poses = [tracked]
    else:
        raise InputError(f"{exp.name}: the ellipse drop needs a video or a pose CSV")
    log.begin("identify")
    estimate = ellipse_drop.identify(spec, poses, work, log, window=exp.window)
    estimate = _with_report_series(estimate, _drop_series(estimate.extra))
    files["fit"] = "fit.png"
    return Result(estimate, facts, files, warned)


def _drop_series(extra: dict) -> dict:
    """The report's data/fit series and impulses from the IPOPT fit's extras (camera
    samples ``frame_*`` against the fine-grid fit; impulses per fine step)."""
    units = {"x": "m", "y": "m", "theta": "rad"}
    series = [
        _series(k, u, extra["frame_t"], extra[f"frame_{k}"], extra["t"], extra[k])
        for k, u in units.items()
    ]
    impulses = {"t": extra["impulse_t"], "normal": extra["cn"], "tangential": extra["ct"]}
    return {"series": series, "impulses": impulses}


def _with_report_series(estimate: Estimate, additions: dict) -> Estimate:
    from dataclasses import replace

    return replace(estimate, extra={**estimate.extra, **additions})


def _track_drop(
    exp: Experiment, spec, work: Path, log: StageLog, facts: dict, files: dict, warned: list
):
    from physid.spec import with_overrides
    from physid.vision.overlay import OVERLAY_SUFFIX, write_overlay
    from physid.vision.posefile import write_pose_csv
    from physid.vision.scene import scene_from_spec
    from physid.vision.tracking import track_video
    from physid.vision.video import open_video

    camera = camera_for(exp, work, log)
    scene = scene_from_spec(spec)
    video = exp.videos[0]
    log.begin("tracking")
    _, info = open_video(video)
    # a failed detection's annotated frame goes beside the reports (work/ is removed then)
    result = track_video(
        video, camera, scene, progress=_frame_ticker(log, info.frames), figure_dir=work.parent
    )
    frames = check_video_frames(info, result.t, log, warned)
    valid = int((~result.missing.any(axis=1)).sum())
    log.print(f"{len(result.t)} frames tracked, {valid} poses, ground alpha {result.ground_alpha}")
    poses = write_pose_csv(work / "poses.csv", result.stream(), result.frame)
    log.begin("overlay")
    overlay = f"overlay{OVERLAY_SUFFIX}"
    write_overlay(result, camera, scene, work / overlay, info.fps or 30.0)
    files.update(poses="poses.csv", overlay=overlay)
    facts["tracking"] = {
        "video": video.name,
        "frames": len(result.t),
        "valid_poses": valid,
        "ground_p0_m": result.ground_p0.tolist(),
        "ground_alpha_rad": float(result.ground_alpha),
        **frames,
        "noise_scale": result.stats.get("noise_scale"),
    }
    p0 = result.ground_p0
    measured = {
        "ground_x0": f"{float(p0[0])!r} m",
        "ground_y0": f"{float(p0[1])!r} m",
        "ground_alpha": f"{float(result.ground_alpha)!r} rad",
    }
    return poses, with_overrides(spec, measured)


# ------------------------------------------------------------------------------ encoder rigs


def hinged_stages(exp: Experiment, spec, work: Path, log: StageLog, settings: dict) -> Result:
    """Pendulum / Furuta: encoder captures (+ a marker video when the rig declares markers)
    → clock sync → LM on joint states and parameters (encoders and markers fused)."""
    from physid.rigs.models.identify_hinged import (
        enable_compilation_cache,
        identify_series,
        method_settings,
        series_on_grid,
    )
    from physid.rigs.models.identify_tree import estimator
    from physid.rigs.models.kinds import kind_module

    if estimator(spec) == "tree":
        return tree_stages(exp, spec, work, log, settings)
    if not exp.encoders:
        raise InputError(f"{exp.name}: the {spec.model} rig needs an encoder capture or log")
    enable_compilation_cache()
    rig = kind_module(spec).build(spec)
    h = method_settings(spec)["h"]
    facts: dict = {"encoders": []}
    warned: list[str] = []
    streams, labels = read_encoders(exp, spec, h, log, settings, facts, warned)
    series = [
        series_on_grid(s, rig.channels, h, lab) for s, lab in zip(streams, labels, strict=True)
    ]
    markers, camera_info, files = None, None, {}
    if exp.videos:
        markers, camera_info = _fuse_video(
            exp, spec, rig, streams[0], series[0], work, log, facts, warned, files
        )
    log.begin("identify")
    estimate, fits = identify_series(spec, rig, series, markers, log.print, labels)
    additions = {"series": fit_series(rig, series[0], fits[0], markers)}
    if camera_info is not None:
        additions["camera"] = camera_info
    estimate = _with_report_series(estimate, additions)
    return Result(estimate, facts, files, warned)


def tree_stages(exp: Experiment, spec, work: Path, log: StageLog, settings: dict) -> Result:
    """Tree rigs (``[rig] model = "tree"``) and pendulum / Furuta specs with ``[method]
    estimator = "tree"``: encoder logs (+ a marker video of the first, when the rig declares
    markers: clock sync, camera pose, pixels on the grid) → joint state and parameter
    estimation on generalized coordinates, every log fitted jointly
    (``rigs.models.identify_tree``)."""
    from physid.rigs.models.identify_hinged import enable_compilation_cache
    from physid.rigs.models.identify_tree import (
        identify_tree_series,
        series_on_grid,
        tree_rig_of,
        tree_settings,
    )

    if not exp.encoders:
        raise InputError(f"{exp.name}: the {spec.model} rig needs an encoder capture or log")
    enable_compilation_cache()
    rig = tree_rig_of(spec)
    h = tree_settings(spec)["h"]
    facts: dict = {"encoders": []}
    warned: list[str] = []
    # As the SPOOK path: frame statistics and the reader's warnings in the facts, a log cut
    # at its long gaps; every segment is fitted (jointly, one parameter set), the longest of
    # the first log first (the video, if any, is fused with it).
    streams, labels = read_encoders(exp, spec, h, log, settings, facts, warned)
    series = [series_on_grid(s, rig, h, lab) for s, lab in zip(streams, labels, strict=True)]
    markers, camera_info, files = None, None, {}
    if exp.videos:
        markers, camera_info = _fuse_video(
            exp, spec, rig, streams[0], series[0], work, log, facts, warned, files
        )
    log.begin("identify")
    estimate, fits = identify_tree_series(spec, rig, series, log.print, labels, markers)
    additions = {"series": fit_series(rig, series[0], fits[0], markers)}
    if camera_info is not None:
        additions["camera"] = camera_info
    estimate = _with_report_series(estimate, additions)
    return Result(estimate, facts, files, warned)


def read_encoders(exp: Experiment, spec, h: float, log: StageLog, settings, facts, warned):
    """The experiment's encoder logs, each in the manifest's window, with their frame
    statistics and the reader's warnings in ``facts["encoders"]``, cut at long gaps
    (``encoder_segments``; refused instead under ``settings["refuse_gaps"]``, as ``physid
    identify`` does with the files a user named). Returns (streams, labels)."""
    from physid.rigs.encoders import read_log
    from physid.rigs.models.identify_hinged import refuse_long_gaps

    log.begin("encoders")
    streams = []
    for path in exp.encoders:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            stream = read_log(path, spec)
        stats = {k: stream.source.get(k) for k in ("frames", "dropped", "corrupted")}
        notes = [str(w.message) for w in caught]
        facts["encoders"].append({"file": path.name, "samples": len(stream), **stats})
        if notes:
            facts["encoders"][-1]["warnings"] = notes
        for note in notes:
            log.print(f"[yellow]warning:[/yellow] {note}")
        log.print(f"{path.name}: {len(stream)} samples, {stream.t[-1] - stream.t[0]:.2f} s")
        if exp.window is not None:
            stream = _within(stream, exp.window, path)
            log.print(f"{path.name}: window {exp.window[0]:g}-{exp.window[1]:g} s: {len(stream)}")
        streams.append(stream)
    if settings.get("refuse_gaps"):  # physid identify: the user named these files
        for stream, path in zip(streams, exp.encoders, strict=True):
            refuse_long_gaps(stream, spec, path)
    return encoder_segments(streams, exp.encoders, spec, h, facts, log, warned)


# A segment of a split log shorter than this many grid steps cannot be fitted on its own
# (a stray frame far from the others is one sample): it is left out, with a warning.
MIN_SEGMENT_STEPS = 10


def encoder_segments(streams, paths, spec, h: float, facts: dict, log: StageLog, warned: list):
    """Each log cut at its gaps longer than ``[method] max_gap`` (``split_at_gaps``), the
    longest segment of the first log first (the LM fits it; the others cross-validate).
    Returns the segments and their labels; splits and dropped segments are warnings, listed
    with their frame numbers in the report."""
    from physid.rigs.encoders.convert import split_at_gaps
    from physid.rigs.models.identify_hinged import max_gap

    limit = max_gap(spec)
    kept: list[tuple] = []
    for i, (stream, path) in enumerate(zip(streams, paths, strict=True)):
        segments, gaps = split_at_gaps(stream, limit)
        if not gaps:
            kept.append((i, stream, path.name))
            continue
        seq = [s.source.get("seq") for s in segments]
        spans = [f"seq {q[0]}-{q[-1]}" if q is not None else "?" for q in seq]
        usable = [len(s) > 1 and s.t[-1] - s.t[0] >= MIN_SEGMENT_STEPS * h for s in segments]
        note = (
            f"{path.name}: split at {len(gaps)} gap(s) longer than {limit:g} s ([method] "
            f"max_gap): " + "; ".join(g.describe() for g in gaps)
        )
        dropped = [sp for sp, ok in zip(spans, usable, strict=True) if not ok]
        if dropped:
            note += f"; left out, shorter than {MIN_SEGMENT_STEPS} steps: frames " + ", ".join(
                dropped
            )
        warned.append(note)
        log.print(f"[yellow]warning:[/yellow] {note}")
        facts["encoders"][i]["gaps"] = [g.describe() for g in gaps]
        for s, sp, ok in zip(segments, spans, usable, strict=True):
            if ok:
                kept.append((i, s, f"{path.name} frames {sp}"))
    if not kept:
        raise InputError(
            f"{paths[0]}: no segment of at least {MIN_SEGMENT_STEPS} steps between gaps "
            f"longer than {limit:g} s; see the warnings in the log"
        )
    first = [k for k in kept if k[0] == 0] or kept
    main = max(first, key=lambda k: k[1].t[-1] - k[1].t[0])
    ordered = [main, *(k for k in kept if k is not main)]
    return [k[1] for k in ordered], [k[2] for k in ordered]


def _within(stream, window: tuple[float, float], path: Path):
    """The samples of ``stream`` in the manifest's ``window`` (s from its first sample)."""
    from dataclasses import replace

    t0 = stream.t[0]
    keep = (stream.t >= t0 + window[0]) & (stream.t <= t0 + window[1])
    if keep.sum() < 2:
        raise InputError(
            f"{path}: the manifest's window {window[0]:g}-{window[1]:g} s holds "
            f"{int(keep.sum())} samples of a {stream.t[-1] - t0:.3g} s recording"
        )
    return replace(
        stream, t=stream.t[keep], values=stream.values[keep], missing=stream.missing[keep]
    )


def cross_validate(exp: Experiment, values: dict[str, float], weights: dict | None = None) -> dict:
    """``exp``'s first encoder log under the parameters ``values`` (another experiment's
    estimate; Marklund et al. Section 4.5, Tables 2 and 4): its states estimated with the
    parameters held, then the model's predictions of the log (issue 24: a model is judged by
    what it predicts, not by how well states it does not constrain follow the data). Encoder
    rows only, so that experiments with and without video compare on the same terms.
    ``weights``: the tree estimator's σ_w and natural-map inertia from ``exp``'s own
    identification (its summary's ``state_weights``), so that every model is scored on the
    log's rows as its identification weighed them (None: made at ``values``).

    Returns {"cost": cost per step of the state fit, "k_step" / "free_run": the prediction
    checks (``Prediction.to_dict``), "ratio": the worst channel's k-step RMS over its noise,
    "horizon_s": the k-step horizon}."""
    from physid.rigs.encoders import read_log
    from physid.rigs.encoders.convert import split_at_gaps
    from physid.rigs.models import validate_hinged
    from physid.rigs.models.identify_hinged import (
        enable_compilation_cache,
        estimate_states,
        max_gap,
        method_settings,
        series_on_grid,
    )
    from physid.rigs.models.identify_tree import estimator
    from physid.rigs.models.kinds import kind_module
    from physid.spec import load_spec, with_overrides

    enable_compilation_cache()
    spec = with_overrides(load_spec(exp.rig), exp.overrides, exp.overrides_origin())
    path = exp.encoders[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the experiment's own report already lists them
        stream = read_log(path, spec)
    # the segment the experiment's own fit used: the longest (see encoder_segments)
    segments, _ = split_at_gaps(stream, max_gap(spec))
    stream = max(segments, key=lambda s: s.t[-1] - s.t[0])
    if estimator(spec) == "tree":
        return _cross_validate_tree(exp, spec, stream, path, values, weights)
    rig = kind_module(spec).build(spec)
    settings = method_settings(spec)
    series = series_on_grid(stream, rig.channels, settings["h"], path)
    problem, result = estimate_states(spec, rig, series, values)
    chans = validate_hinged.channels(spec, rig)
    ahead, free = validate_hinged.predict(
        rig, values, series, result.X, problem.observed_angles(result.X), settings, chans,
        label=exp.name,
    )  # fmt: skip
    return _cross_validation_row(result.cost / len(series["grid"]), ahead, free)


def _cross_validation_row(cost_per_step: float, ahead, free) -> dict:
    """What the cross-experiment table keeps of one states-only fit: its cost per step, the
    k-step and free-run checks and the k-step's worst ratio to the noise."""
    k_step = ahead.to_dict()
    return {
        "cost": cost_per_step,
        "k_step": k_step,
        "free_run": free.to_dict(),
        "ratio": max(c["ratio"] for c in k_step["channels"]),
        "horizon_s": k_step["horizon_s"],
    }


def _cross_validate_tree(exp: Experiment, spec, stream, path, values: dict, weights) -> dict:
    """``cross_validate`` on the tree estimator's model: the states by the tree's LM with
    the parameters held at ``values`` (rows weighted by ``weights``), then its own k-step
    and free-run checks."""
    from physid.rigs.models import identify_tree as tree

    rig = tree.tree_rig_of(spec)
    settings = tree.tree_settings(spec)
    series = tree.series_on_grid(stream, rig, settings["h"], path)
    problem, result = tree.estimate_states(spec, rig, series, values, weights)
    ahead, free = tree.predict(rig, values, series, result.X, settings, exp.name, problem.c)
    return _cross_validation_row(result.cost / len(series["grid"]), ahead, free)


def check_video_frames(info, t, log: StageLog, warned: list[str]) -> dict:
    """Decoded frames against the container's count and duration (``account_frames``):
    a damaged video fails the experiment; a few missing frames are a warning, listed in
    the report. Returns the counts for the report's tracking facts."""
    from physid.vision.video import MISSING_WARN_FRACTION, VideoError, account_frames

    account = account_frames(info, t)
    if account.verdict == "failed":
        raise VideoError(
            f"{account.message()}; more than {100 * MISSING_WARN_FRACTION:g} % of the frames "
            "are missing or undecodable: copy the file from the camera again, or cut the "
            "video to its intact part"
        )
    if account.verdict == "warning":
        warned.append(account.message())
        log.print(f"[yellow]warning:[/yellow] {account.message()}")
    return account.as_dict()


def _fuse_video(exp, spec, rig, stream, series, work, log, facts, warned, files):
    """Track the spec's markers, synchronize the clocks, write the overlay video and put the
    pixels on the LM grid; (None, None) with the reason in the facts when the clocks cannot
    be trusted."""
    from physid.estimation.markers import MarkerObservations
    from physid.rigs.pipeline.fusion import (
        encoder_pixels,
        marker_kinematics,
        markers_on_grid,
        synchronize_video,
        video_markers,
    )
    from physid.vision.markers3d import track_markers

    markers = video_markers(spec)
    if markers is None:
        raise InputError(
            f"{exp.name}: {exp.videos[0].name} given but the rig spec {spec.path} declares no "
            "[video] markers to track; add them or drop the video from the manifest"
        )
    camera = camera_for(exp, work, log)
    log.begin("tracking")
    from physid.vision.video import open_video

    _, info = open_video(exp.videos[0])
    tracks = track_markers(
        exp.videos[0], camera, markers.ids, markers.side,
        progress=_frame_ticker(log, info.frames), dictionary=markers.dictionary,
    )  # fmt: skip
    frames = check_video_frames(info, tracks.t, log, warned)
    seen = 1.0 - tracks.missing.mean(axis=0)
    log.print("markers seen in " + ", ".join(f"{100 * s:.0f} %" for s in seen) + " of frames")
    facts["tracking"] = {
        "video": exp.videos[0].name,
        "frames": len(tracks.t),
        **{f"seen_{n}": float(s) for n, s in zip(markers.names, seen, strict=True)},
        **frames,
    }
    log.begin("sync")
    kinematics = marker_kinematics(rig, markers)

    def positions(a):
        return kinematics(a)[0]

    cols = [stream.channels.index(c) for c in rig.channels]
    ok = ~stream.missing[:, cols].any(axis=1)
    t_enc, angles = stream.t[ok], stream.values[ok][:, cols]
    sync, pose = synchronize_video(
        camera, tracks.t, tracks.uv, tracks.missing, t_enc, angles, positions
    )
    facts["sync"] = {
        "offset_s": sync.offset,
        "offset_std_s": sync.offset_std,
        "drift": sync.drift,
        "drift_std": sync.drift_std,
        "speed_correlation": sync.correlation,
        "margin": sync.margin,
        "reprojection_rms_px": sync.rms,
        "fused": sync.confident,
        "verdict": sync.reason,
    }
    truth = _truth(exp) or {}
    if "clock_offset_s" in truth:
        facts["sync"]["true_offset_s"] = truth["clock_offset_s"]
    log.print(
        f"clock offset {sync.offset:.6f} s ± {sync.offset_std * 1e6:.0f} us, reprojection "
        f"{sync.rms:.3f} px: {sync.reason}"
    )
    log.begin("overlay")
    m = len(markers.names)
    seen_at = encoder_pixels(sync.to_encoder(tracks.t), t_enc, angles, positions, camera, pose, m)
    files["overlay"] = _marker_overlay(tracks, seen_at, info.fps, markers.names, work)
    if not sync.confident:
        log.print("[yellow]not fusing the video: the clock offset is not trustworthy[/yellow]")
        return None, None
    uv, weight = markers_on_grid(
        series["grid"], sync, tracks.t, tracks.uv, tracks.missing, t_enc, angles, positions,
        camera, pose, markers.noise_px,
    )  # fmt: skip
    obs = MarkerObservations(
        markers.body, markers.points, camera.K, camera.D, pose.R_cw, pose.t_cw, uv, weight,
        camera.model,
    )  # fmt: skip
    camera_info = {"R_cw": pose.R_cw, "t_cw": pose.t_cw, "model": camera.model}
    return obs, camera_info


def _marker_overlay(tracks, predicted, fps: float, names, work: Path) -> str:
    """The 3D-marker overlay: detected markers, and circles where the encoder angles put
    them (``predicted``: synchronized clocks, fitted camera pose); returns its file name."""
    from physid.vision.overlay import OVERLAY_SUFFIX, write_marker_overlay

    name = f"overlay{OVERLAY_SUFFIX}"
    write_marker_overlay(tracks, work / name, fps or 30.0, predicted, names)
    return name


def fit_series(rig, series: dict, fit: dict, markers) -> list[dict]:
    """Measured vs fitted per encoder channel (rad) and per marker pixel axis (px), on the
    grid steps that have a measurement, for the report's data/fit/residual plots."""
    import numpy as np

    grid = series["grid"] - series["grid"][0]
    out = []
    for i, name in enumerate(rig.channels):
        ok = series["present"][:, i]
        y = series["y"][ok, i]
        f = np.asarray(fit["angles"])[:, i]
        # The model's angle is in (−π, π]; put it on the measured branch.
        f = f + 2 * np.pi * np.round((np.interp(grid, grid[ok], y) - f) / (2 * np.pi))
        out.append(_series(name, "rad", grid[ok], y, grid, f))
    pixels = fit.get("pixels")
    if markers is not None and pixels is not None:
        for j in range(len(markers.body)):
            ok = markers.weight[:, j] > 0
            for axis, label in enumerate("uv"):
                out.append(
                    _series(
                        f"marker {j} {label}",
                        "px",
                        grid[ok],
                        markers.uv[ok, j, axis],
                        grid,
                        np.asarray(pixels)[:, j, axis],
                    )  # fmt: skip
                )
    return out


def _series(name, unit, t, measured, t_fit, fitted) -> dict:
    return {
        "name": name,
        "unit": unit,
        "t": list(map(float, t)),
        "measured": list(map(float, measured)),
        "t_fit": list(map(float, t_fit)),
        "fitted": list(map(float, fitted)),
    }


def loop_stages(exp: Experiment, spec, work: Path, log: StageLog, settings: dict) -> Result:
    """Loop rigs (``[rig] model = "loop"``, ``rigs.models.identify_loop``): one log of the
    measured point and the force (``physid simulate`` writes it) → single shooting; or one
    marker video → camera model → marker tracking → single shooting through the camera."""
    from physid.rigs.models import identify_loop as il
    from physid.rigs.models.identify_hinged import enable_compilation_cache

    enable_compilation_cache()  # a re-run reuses the compiled rollout and its tangents
    if exp.videos:
        return _loop_video(exp, spec, work, log)
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
    return Result(_loop_series(estimate, "m"), facts, {}, [])


def _loop_series(estimate, unit: str):
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


def _loop_video(exp, spec, work: Path, log: StageLog) -> Result:
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
    return Result(_loop_series(estimate, "px"), facts, {}, warned)


STAGES: dict[str, Callable[..., Result]] = {
    "ellipse_drop": ellipse_stages,
    "pendulum": hinged_stages,
    "furuta": hinged_stages,
    "tree": tree_stages,
    "loop": loop_stages,
}


# ------------------------------------------------------------------------------ bookkeeping


def _worker() -> str | None:
    """Address of the Dask worker running this task (None outside a worker)."""
    try:
        from distributed import get_worker

        return get_worker().address
    except (ImportError, ValueError):
        return None


def _summary(exp: Experiment, status: str, **info) -> dict:
    result: Result | None = info.pop("result", None)
    summary = {
        "experiment": exp.name,
        "status": status,
        "worker": _worker(),
        "rig": exp.rig,
        "inputs": [str(p) for p in exp.input_files()],
        "truth": _truth(exp) if status != "invalid" else None,
        **info,
    }
    if exp.outside:
        summary["outside_inputs"] = [str(p) for p in exp.outside]
    if result is not None:
        est = result.estimate
        summary.update(
            rig_name=est.rig,
            parameters={k: vars(v) for k, v in est.parameters.items()},
            cost=est.cost,
            cv_cost=est.cv_cost,
            iterations=est.iterations,
            converged=est.converged,
            fit_status=est.status,
            verdict=est.verdict,
            verdict_summary=(est.validation or {}).get("summary"),
            solver=est.solver,
            state_weights=_state_weights(est),
            facts=result.facts,
            files=result.files,
        )
        if result.warnings:
            summary["warnings"] = list(result.warnings)
    return json.loads(json.dumps(summary, default=_json_default))


def _state_weights(est) -> dict | None:
    """The tree estimator's σ_w and natural-map inertia by joint (``recorded_weights``), for
    the cross-validation of this experiment's log; None for other estimators."""
    if (est.settings or {}).get("estimator") != "tree":
        return None
    from physid.rigs.models.identify_tree import recorded_weights

    return recorded_weights(est.settings, est.extra or {})


def _json_default(obj):
    try:
        return obj.tolist()
    except AttributeError:
        return str(obj)


def _truth(exp: Experiment) -> dict | None:
    if exp.truth is None or not exp.truth.exists():
        return None
    try:
        return json.loads(exp.truth.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def _cached_summary(final: Path, digest: str) -> dict | None:
    """The finished report's summary when it can be reused: same input hash, and every file
    it recorded present with its recorded SHA-256 (a report damaged or half-copied since is
    recomputed)."""
    try:
        summary = json.loads((final / SUMMARY).read_text())
    except (OSError, json.JSONDecodeError):
        return None
    if summary.get("status") not in FINISHED or summary.get("digest") != digest:
        return None
    return None if damaged_outputs(final, summary.get("outputs")) else summary
