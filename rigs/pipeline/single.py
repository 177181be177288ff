"""``physid identify``: one experiment from files named on the command line, through the same
stages and into the same report folder as ``physid process`` (``run.run_experiment``).

The data files are sorted by what they hold before anything runs, so that a file the rig
cannot use is one clear error (a video, a capture of another format, a spreadsheet...) instead
of a failure deep inside a stage.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from physid.errors import InputError
from physid.rigs.encoders.columns import check_sensors
from physid.rigs.pipeline.experiments import ENCODER_SUFFIXES, VIDEO_SUFFIXES, Experiment
from physid.rigs.pipeline.run import SUMMARY, run_experiment

POSE_HEADER = ["t", "x", "y", "theta"]
# What the output folder of an earlier identify or process run holds: it may be replaced.
OUTPUT_FILES = {SUMMARY, "estimate.json", "report.html", "log.txt", "physid.log", "fit.png"}


def sort_inputs(data: list[Path]) -> tuple[tuple[Path, ...], tuple[Path, ...]]:
    """(encoder logs, pose CSVs) among ``data``; an InputError names any other file."""
    encoders, poses = [], []
    for path in data:
        path = Path(path)
        suffix = path.suffix.lower()
        if not path.exists():
            raise InputError(f"{path}: no such file")
        if path.is_dir():
            raise InputError(
                f"{path}: a folder; identify takes files (encoder logs, pose CSVs); for a "
                "folder of experiments run: physid process FOLDER"
            )
        if suffix in VIDEO_SUFFIXES:
            raise InputError(
                f"{path}: a video; identify takes encoder logs (.csv, .bin) or a pose CSV. "
                "Track the video first (physid track VIDEO ... --out poses.csv), or put it in "
                "a folder with its rig and run physid process FOLDER"
            )
        if suffix in ENCODER_SUFFIXES:
            encoders.append(path.resolve())
        elif suffix == ".csv":
            (poses if _csv_header(path)[:4] == POSE_HEADER else encoders).append(path.resolve())
        else:
            raise InputError(
                f"{path}: unknown data file type {path.suffix or '(no suffix)'!r}; identify "
                "takes encoder logs (.csv, .bin from physid record) or pose CSVs (t,x,y,theta)"
            )
    return tuple(encoders), tuple(poses)


def _csv_header(path: Path) -> list[str]:
    """The first line's names; an InputError if the file starts like no text file does."""
    with open(path, "rb") as fh:
        head = fh.read(4096)
    nul = head.find(b"\0")
    if nul >= 0:
        raise InputError(
            f"{path}: byte {nul}: not a text file; a CSV log has a header line and one row of "
            "numbers per sample (a raw capture should end in .bin)"
        )
    first = head.split(b"\n", 1)[0]
    return [c.strip() for c in first.decode("utf-8", "replace").split(",")]


def check_output_folder(out: Path) -> None:
    """``out`` is replaced as a whole when the run succeeds: refuse a folder that holds
    anything but an earlier run's output."""
    if not out.exists():
        return
    if not out.is_dir():
        raise InputError(f"--out {out}: a file; give a folder for the report")
    others = sorted(p.name for p in out.iterdir() if p.name not in OUTPUT_FILES)
    earlier = (out / SUMMARY).exists() or (out / "estimate.json").exists()
    if not earlier and others:
        shown = ", ".join(others[:3]) + (", ..." if len(others) > 3 else "")
        raise InputError(
            f"--out {out}: the folder holds other files ({shown}); the report replaces the "
            "whole folder, so give a new one"
        )


def prepare(rig: str, data: list[Path], out: Path) -> Experiment:
    """The experiment ``physid identify RIG DATA... --out OUT`` runs, checked before anything
    runs: the spec (its ``[method]`` keys too), each data file and the output folder; an
    InputError names what is wrong."""
    from physid.spec import load_spec

    out = Path(out).resolve()
    spec = load_spec(rig)
    encoders, poses = sort_inputs(data)
    wrong = encoders if spec.model == "ellipse_drop" else poses
    if wrong:
        wants = "one pose CSV (t,x,y,theta)" if spec.model == "ellipse_drop" else "encoder logs"
        raise InputError(
            f"{wrong[0]}: the {spec.model} rig is identified from {wants}; this file is "
            f"{'an encoder log' if wrong is encoders else 'a pose CSV (t,x,y,theta)'}"
        )
    check_output_folder(out)
    check_sensors(spec)
    check_method(spec)  # last: it loads the estimator (JAX or CasADi)
    return Experiment(
        name=out.name,
        folder=Path.cwd(),
        rig=str(spec.path.resolve()),
        encoders=encoders,
        poses=poses,
    )


def check_method(spec) -> None:
    """Read the spec's ``[method]`` as its estimator will (a misspelled key is an error)."""
    if spec.model == "ellipse_drop":
        from physid.rigs.models.ellipse_drop import ipopt_settings

        ipopt_settings(spec)
    elif spec.model == "loop":
        from physid.rigs.models.identify_loop import METHOD_KEYS

        spec.check_keys("method", METHOD_KEYS)
    elif spec.model in ("pendulum", "furuta", "tree"):
        from physid.rigs.models.identify_hinged import method_settings
        from physid.rigs.models.identify_tree import estimator, tree_settings

        if estimator(spec) == "tree":
            tree_settings(spec)
        else:
            method_settings(spec)


def identify_files(
    exp: Experiment,
    out: Path,
    method: dict | None = None,
    force: bool = False,
    sink: Callable[[dict], None] | None = None,
) -> dict:
    """Run ``exp`` (from ``prepare``) into the folder ``out``: estimate.json, report.html,
    log.txt, summary.json, replaced only when all are written.

    ``method`` overrides ``[method]`` settings of the spec; ``sink`` receives the progress
    events ``physid process`` shows. Returns the run's summary (``status`` "ok", "warning"
    with its ``warnings``, or "failed" with the ``error``)."""
    # A log with a gap longer than [method] max_gap is refused (process splits it): the
    # user named these files, and a split would fit a part of one they did not choose.
    settings = {"force": force, "method": dict(method or {}), "refuse_gaps": True}
    kwargs = {} if sink is None else {"sink": sink}
    return run_experiment(exp, Path(out).resolve().parent, settings, **kwargs)
