"""physid's Python API: one function per job, the same jobs as the command line.

    import physid

    spec = physid.load_spec("pendulum")                 # a built-in rig, or a .toml file
    sim = physid.simulate(spec, duration=2.0, noise=1e-3, seed=1)
    estimate = physid.identify(spec, sim.stream)        # or a file: "log.csv", "run.bin"
    estimate                                            # a table in a notebook
    estimate.values, estimate.table()                   # plain dicts

``identify`` returns an ``Estimate`` (``physid.estimation.estimate``): values and std in SI
units, identifiability, cost, and ``write(path)`` for ``estimate.json``. ``process`` runs a
whole folder of experiments into HTML reports, as ``physid process`` does.

Errors in the inputs raise ``physid.errors.InputError`` (a ``ValueError``) whose message names
the file, line or key and says what to do. ``docs/python-api.md`` has examples by task.
"""

from __future__ import annotations

import io
import json
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from physid.errors import InputError
from physid.spec import RigSpec, with_overrides
from physid.spec import load_spec as _load_spec
from physid.streams import Stream

if TYPE_CHECKING:
    from physid.estimation.estimate import Estimate

__all__ = ["Reports", "Simulation", "identify", "load_spec", "process", "read_log", "simulate"]

PathLike = str | Path
HINGED = ("pendulum", "furuta")


def load_spec(spec: RigSpec | PathLike, overrides: dict[str, str] | None = None) -> RigSpec:
    """A rig spec: a ``.toml`` file, or the name of a built-in rig (``pendulum``, ``furuta``,
    ``ellipse_drop``). ``overrides`` replace fixed values or initial values, each
    ``"VALUE"`` or ``"VALUE UNIT"`` (as ``physid simulate --set``)."""
    loaded = spec if isinstance(spec, RigSpec) else _load_spec(spec)
    return with_overrides(loaded, overrides) if overrides else loaded


def read_log(path: PathLike, spec: RigSpec | PathLike | None = None) -> Stream:
    """An encoder log as a ``Stream`` (angles in rad, ``u`` in V, ``t`` in s): a CSV (physid's
    own, or a lab's columns as the spec's ``[sensors.NAME] column`` names them) or a raw
    ``.bin`` capture (which needs the spec for counts per revolution, sign and offset)."""
    from physid.rigs.encoders.readers import read_log as read

    return read(path, spec)


@dataclass(frozen=True)
class Simulation:
    """What ``simulate`` made: the measured ``stream`` (encoder angles and ``u``, or the drop's
    camera poses), the ``truth`` it was simulated with (``truth.json``: parameter values in
    SI and the scenario), and the ``files`` written (empty without ``out``)."""

    stream: Stream
    truth: dict[str, Any]
    files: dict[str, Path] = field(default_factory=dict)


def simulate(
    spec: RigSpec | PathLike,
    *,
    duration: float | None = None,
    dt: float | None = None,
    noise: float | None = None,
    seed: int = 0,
    control: PathLike | None = None,
    overrides: dict[str, str] | None = None,
    out: PathLike | None = None,
    engine: str | None = None,
) -> Simulation:
    """Simulate the spec's ``[simulation]`` scenario, as ``physid simulate`` does.

    ``duration`` and ``dt`` in s, ``noise`` the measurement noise std (rad, or m for the
    drop); None keeps the spec's value. ``control``: a CSV ``t,u`` of the motor voltage (V).
    With ``out`` the files (log or poses, truth, plot) stay in that folder. ``engine``
    (pendulum, furuta): "tree" (rigid joints, the default estimator's model) or "spook"
    (compliant hinges); None: the spec's ``[simulation] engine``, else its estimator."""
    from physid.rigs.models.kinds import SimulateOptions, kind_module

    spec = load_spec(spec, overrides)
    module = kind_module(spec)
    with tempfile.TemporaryDirectory(prefix="physid-simulate-") as tmp:
        folder = Path(out) if out is not None else Path(tmp)
        control_path = None if control is None else Path(control)
        options = SimulateOptions(folder, duration, dt, noise, seed, control_path, engine)
        written = module.simulate(spec, options, _Lines(None))
        truth = json.loads((folder / "truth.json").read_text())
        if (folder / "log.csv").exists():
            stream = read_log(folder / "log.csv", spec)
        else:
            from physid.rigs.models.ellipse_drop import read_pose_csv

            stream = read_pose_csv(folder / "poses.csv")
    files = {k: Path(v) for k, v in written.items()} if out is not None else {}
    return Simulation(stream, truth, files)


def identify(
    spec: RigSpec | PathLike,
    data: Stream | PathLike | Sequence[Stream | PathLike],
    *,
    progress: Callable[[str], None] | None = None,
) -> Estimate:
    """Identify the spec's ``[parameters]`` from ``data`` and return the ``Estimate``.

    Pendulum, Furuta and tree rigs take encoder logs: Streams or files (``.csv``, ``.bin``).
    The SPOOK estimator fits the first and each other one cross-validates the fit
    (``estimate.cv_cost``); the tree estimator (``[method] estimator = "tree"``, the only one
    of a ``model = "tree"`` rig) fits all of them jointly. The ellipse drop takes one pose
    CSV (``t,x,y,theta``) or a Stream of those channels. ``progress`` receives one line of
    text per step (e.g. ``print``).
    Nothing is written to disk (``estimate.write("estimate.json")`` does that)."""
    spec = load_spec(spec)
    items = [data] if isinstance(data, Stream | str | Path) else list(data)
    if not items:
        raise InputError("identify: no data given; pass an encoder log, a pose CSV or a Stream")
    if spec.model == "ellipse_drop":
        return _identify_drop(spec, items, progress)
    if spec.model not in (*HINGED, "tree"):
        raise InputError(f"{spec.path}: no estimator for model {spec.model!r} in this API yet")
    streams = [d if isinstance(d, Stream) else read_log(d, spec) for d in items]
    labels = [_label(d, i) for i, d in enumerate(items)]
    from physid.rigs.models.identify_tree import estimator

    if estimator(spec) == "tree":
        return _identify_tree(spec, streams, labels, progress)
    from physid.rigs.models.identify_hinged import (
        enable_compilation_cache,
        identify_series,
        method_settings,
        refuse_long_gaps,
        series_on_grid,
    )
    from physid.rigs.models.kinds import kind_module

    enable_compilation_cache()
    rig = kind_module(spec).build(spec)
    h = method_settings(spec)["h"]
    for stream, label in zip(streams, labels, strict=True):
        refuse_long_gaps(stream, spec, label)  # [method] max_gap: not bridged by the fit
    series = [
        series_on_grid(s, rig.channels, h, lab) for s, lab in zip(streams, labels, strict=True)
    ]
    estimate, _ = identify_series(spec, rig, series, None, progress, labels)
    return estimate


def _identify_tree(spec: RigSpec, streams: list[Stream], labels: list[str], progress):
    """The tree estimator (``[method] estimator = "tree"``, and every ``model = "tree"``
    rig): all logs fitted jointly, one parameter set and states per log."""
    from physid.rigs.models.identify_hinged import enable_compilation_cache, refuse_long_gaps
    from physid.rigs.models.identify_tree import (
        identify_tree_series,
        series_on_grid,
        tree_rig_of,
        tree_settings,
    )

    enable_compilation_cache()
    rig = tree_rig_of(spec)
    h = tree_settings(spec)["h"]
    for stream, label in zip(streams, labels, strict=True):
        refuse_long_gaps(stream, spec, label)  # [method] max_gap: not bridged by the fit
    series = [series_on_grid(s, rig, h, lab) for s, lab in zip(streams, labels, strict=True)]
    estimate, _ = identify_tree_series(spec, rig, series, progress, labels)
    return estimate


def _identify_drop(spec: RigSpec, items: list, progress) -> Estimate:
    from physid.rigs.models.ellipse_drop import identify as identify_drop
    from physid.rigs.models.ellipse_drop import write_pose_csv

    if len(items) != 1:
        raise InputError(f"ellipse drop: give exactly one pose CSV or Stream, got {len(items)}")
    with tempfile.TemporaryDirectory(prefix="physid-identify-") as tmp:
        data = items[0]
        if isinstance(data, Stream):
            q = [data.column(c) for c in ("x", "y", "theta")]  # NaN where missing
            data = write_pose_csv(Path(tmp) / "poses.csv", data.t, np.column_stack(q))
        return identify_drop(spec, [Path(data)], Path(tmp), _Lines(progress))


def _label(item, i: int) -> str:
    if isinstance(item, Stream):
        return str(item.source.get("file", f"stream {i}"))
    return str(item)


@dataclass(frozen=True)
class Reports:
    """What ``process`` wrote: ``index`` (``index.html``) and one summary per experiment
    (``status``, ``parameters`` with value, std and unit, ``error`` when it failed)."""

    index: Path
    experiments: list[dict]

    def _repr_html_(self) -> str:
        import html

        rows = "".join(
            f"<tr><td>{html.escape(s['experiment'])}</td><td>{html.escape(s['status'])}</td>"
            f"<td>{html.escape(s.get('error') or ', '.join(s.get('parameters', {})))}</td></tr>"
            for s in self.experiments
        )
        return (
            f"<p>{html.escape(str(self.index))}</p><table><tr><th>experiment</th>"
            f"<th>status</th><th>parameters / error</th></tr>{rows}</table>"
        )


def process(
    folder: PathLike,
    out: PathLike = "reports",
    *,
    jobs: int = 1,
    scheduler: str | None = None,
    force: bool = False,
    cross_validate: bool = True,
    console=None,
) -> Reports:
    """Every experiment of ``folder`` through tracking, synchronization and identification
    into one HTML report each and an index, as ``physid process`` does (``jobs`` local
    worker processes, or the Dask cluster at ``scheduler``). ``console``: a rich Console
    for the progress view (default: none shown)."""
    from rich.console import Console

    from physid.rigs.pipeline.process import ProcessOptions, load_index, process_folder

    console = console or Console(file=io.StringIO())
    options = ProcessOptions(jobs, scheduler, force, cross_validate)
    index = process_folder(Path(folder), Path(out), options, console)
    return Reports(index, load_index(Path(out)))


class _Lines:
    """A console for the rig modules that hands each printed line to ``say`` (or drops it)."""

    def __init__(self, say: Callable[[str], None] | None):
        self.say = say

    def print(self, *objects, **_) -> None:
        if self.say is not None:
            self.say(" ".join(str(o) for o in objects))
