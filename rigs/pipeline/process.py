"""``physid process FOLDER``: every experiment of a folder through the pipeline, on Dask.

Local runs start a ``LocalCluster`` of ``jobs`` worker processes (one thread each: JAX, IPOPT
and OpenCV are compute-bound, and separate processes keep them from fighting over the GIL;
glibc malloc tuned as ``rigs.pipeline.allocator`` says, in place of Dask's eager trimming);
``--scheduler tcp://HOST:PORT`` sends the same tasks to a running Dask cluster whose workers
have physid installed and see the same file system. Each experiment is one task
(``rigs.pipeline.run.run_experiment``); workers report stages and frames through Dask's event log,
shown here as one progress line per experiment. The index is rewritten after every finished
experiment, so an interrupted run still leaves a valid ``index.html`` for what is done.

One run at a time per output folder (``outputs.run_lock``); the local cluster is reachable
by this process only (``rigs.pipeline.cluster``). ``exit_status`` gives the command's exit
status from the experiments' statuses (``EXIT_*``).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import sys
import threading
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from distributed.diagnostics.plugin import WorkerPlugin
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, ProgressColumn, TextColumn
from rich.text import Text

from physid.estimation.estimate import write_json_atomic
from physid.estimation.report import write_index
from physid.files import naming
from physid.rigs.cli_output import library_warning_line
from physid.rigs.pipeline import cluster
from physid.rigs.pipeline.experiments import Experiment, discover
from physid.rigs.pipeline.outputs import run_lock
from physid.rigs.pipeline.run import FINISHED, PROGRESS_TOPIC, cross_validate, run_experiment
from physid.terminal import error_line


@dataclass(frozen=True)
class ProcessOptions:
    """``jobs``: local worker processes; ``scheduler``: a Dask scheduler address (overrides
    ``jobs``); ``force``: recompute even when inputs are unchanged; ``cross_validate``: fit
    each model to the other experiments of its rig (N² state fits for N experiments);
    ``allow_outside``: accept manifest inputs outside the folder (listed in the index);
    ``dashboard``: start Dask's HTTP dashboard on 127.0.0.1 (local clusters)."""

    jobs: int = 1
    scheduler: str | None = None
    force: bool = False
    cross_validate: bool = True
    allow_outside: bool = False
    dashboard: bool = False


# Exit statuses of `physid process` (docs/pipeline.md).
EXIT_OK = 0  # every experiment reported ("ok", "warning" or reused)
EXIT_FAILED = 1  # an experiment failed or was invalid, or none was reported
EXIT_INPUT = 2  # a command-line or input error before any experiment ran
EXIT_BUSY = 3  # another run holds the output folder
EXIT_OS = 4  # an OS error outside the experiments (disk full, permissions)
# Every experiment reported, but some fit is not to be trusted: its verdict is "poor fit" or
# "not converged" (issue 24: a failure must not read as a success, to a script either).
EXIT_UNTRUSTED = 5


def exit_status(summaries: list[dict]) -> int:
    """``EXIT_FAILED`` when an experiment was not reported (or there was none),
    ``EXIT_UNTRUSTED`` when all were but some fit is not trusted (``untrusted``), else
    ``EXIT_OK``."""
    reported = [s for s in summaries if s.get("status") in FINISHED]
    if not summaries or len(reported) < len(summaries):
        return EXIT_FAILED
    return EXIT_UNTRUSTED if any(untrusted(s) for s in reported) else EXIT_OK


def untrusted(summary: dict) -> str | None:
    """Why a reported experiment's numbers are not to be trusted: its fit did not pass a
    convergence test, or its verdict by prediction is not "good fit"; None when they are
    (a reused report, or one no check was run on, counts by what it recorded)."""
    if summary.get("converged") is False:
        return "not converged"
    verdict = summary.get("verdict")
    return verdict if verdict not in (None, "good fit") else None


def process_folder(folder: Path, out: Path, options: ProcessOptions, console: Console) -> Path:
    """Process every experiment in ``folder`` into ``out``; returns the index path. Holds
    the output folder's lock throughout (``OutputBusy`` when another run has it)."""
    experiments = discover(folder, allow_outside=options.allow_outside)
    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    with run_lock(out):
        return _process(experiments, Path(folder), out, options, console)


def _process(experiments, folder: Path, out: Path, options: ProcessOptions, console) -> Path:
    _clean_partials(out)
    settings = {"force": options.force}
    console.print(
        f"{len(experiments)} experiment(s) in {folder}: " + ", ".join(e.name for e in experiments)
    )
    summaries: dict[str, dict] = {}
    start = time.perf_counter()
    # Pinned workers run 1.5x faster side by side but cannot use a core that falls idle:
    # worth it only when the queue keeps every worker busy most of the time. Experiments with
    # problems end at once and do not count.
    runnable = sum(not e.problems for e in experiments)
    pin = runnable >= 2 * max(1, options.jobs)
    library_log = out / "physid.log"
    with (
        _client(options, console, pin, warnings_log=library_log) as client,
        _ProgressView(experiments, console) as view,
    ):
        client.subscribe_topic(PROGRESS_TOPIC, view.event)
        futures = {
            client.submit(
                run_experiment,
                exp,
                out,
                settings,
                pure=False,
                key=f"physid-{exp.name}-{time.time_ns()}",
            ): exp  # fmt: skip
            for exp in experiments
        }
        from distributed import as_completed

        for future in as_completed(futures):
            exp = futures[future]
            summary = _result(future, exp)
            summaries[exp.name] = summary
            view.done(exp.name, summary)
            _write_index(out, experiments, summaries)
        if options.cross_validate:
            _cross_validate(client, experiments, summaries, console)
    index = _write_index(out, experiments, summaries)
    ok = sum(s["status"] in FINISHED for s in summaries.values())
    console.print(
        f"{ok} of {len(experiments)} experiment(s) reported in {time.perf_counter() - start:.1f} s"
    )
    for s in summaries.values():
        if s["status"] not in FINISHED:
            console.print(error_line(s["experiment"], f"{s['status']}: {s.get('error')}"))
        for note in s.get("warnings", []):
            console.print(error_line(s["experiment"], f"warning: {note}", "yellow"))
        for path in s.get("outside_inputs", []):
            note = f"input outside {folder} (--allow-outside): {path}"
            console.print(error_line(s["experiment"], note, "yellow"))
    _print_verdicts(summaries, console)
    return index


def _print_verdicts(summaries: dict, console) -> None:
    """One line per identified experiment: its verdict by prediction (issue 24)."""
    for s in summaries.values():
        if s["status"] in FINISHED and s.get("verdict"):
            colour = "green" if s["verdict"] == "good fit" else "red"
            text = s.get("verdict_summary") or s["verdict"]
            console.print(error_line(s["experiment"], text, colour))


def cross_validation_pairs(experiments: list[Experiment], summaries: dict) -> list[tuple]:
    """(tuned-on, states-of) name pairs, every ordered pair within each group of two or more
    identified encoder experiments sharing a rig and its free parameters."""
    groups: dict[tuple, list[str]] = {}
    for exp in experiments:
        s = summaries.get(exp.name, {})
        if s.get("status") in FINISHED and exp.encoders and s.get("parameters"):
            key = (s.get("rig_name"), tuple(sorted(s["parameters"])))
            groups.setdefault(key, []).append(exp.name)
    return [(a, b) for names in groups.values() if len(names) > 1 for a in names for b in names]


def _cross_validate(client, experiments: list[Experiment], summaries: dict, console) -> None:
    """Each model on every other experiment of its group: the states of that log estimated
    with the model held, then the model's predictions of it (``run.cross_validate``). In each
    summary: ``cross_validation`` {states-of: cost/step}, ``cv_experiments`` (mean over the
    others) and ``cross_prediction`` {log: {"ratio": worst channel's k-step RMS over its
    noise, "horizon_s", "k_step", "free_run"}} (Marklund et al. Tables 2 and 4, by
    prediction). The diagonal (its own log) is the in-sample comparison."""
    from distributed import as_completed

    pairs = cross_validation_pairs(experiments, summaries)
    if not pairs:
        return
    console.print(f"cross-validation: {len(pairs)} state fits (model × experiment)")
    by_name = {e.name: e for e in experiments}
    futures = {
        client.submit(
            cross_validate,
            by_name[b],
            {k: p["value"] for k, p in summaries[a]["parameters"].items()},
            summaries[b].get("state_weights"),  # the log's own identification's weights
            pure=False,
        ): (a, b)
        for a, b in pairs
    }
    costs: dict[str, dict[str, float | None]] = {a: {} for a, _ in pairs}
    predicted: dict[str, dict[str, dict | None]] = {a: {} for a, _ in pairs}
    for future in as_completed(futures):
        a, b = futures[future]
        try:
            out = future.result()
            costs[a][b] = float(out["cost"])
            predicted[a][b] = {k: out[k] for k in ("ratio", "horizon_s", "k_step", "free_run")}
        except Exception as exc:  # noqa: BLE001  (a failed fit leaves a gap, not a crash)
            costs[a][b] = predicted[a][b] = None
            console.print(error_line(f"cross-validation {a} → {b} failed", str(exc), "yellow"))
    for a, row in costs.items():
        others = [c for b, c in row.items() if b != a and c is not None]
        summaries[a]["cross_validation"] = row
        summaries[a]["cv_experiments"] = float(sum(others) / len(others)) if others else None
        summaries[a]["cross_prediction"] = predicted[a]
        bad = [b for b, p in predicted[a].items() if p and b != a and p["ratio"] > 3.0]
        if bad:
            note = f"mispredicts {', '.join(bad)} (k-step RMS above 3 × the noise)"
            console.print(error_line(f"{a}'s model", note, "yellow"))


def _result(future, exp: Experiment) -> dict:
    """The task's summary; a crashed worker becomes a failed summary, never an exception."""
    try:
        return future.result()
    except Exception as exc:  # noqa: BLE001  (a lost worker must not stop the others)
        return {
            "experiment": exp.name,
            "status": "failed",
            "rig": exp.rig,
            "error": f"worker failed: {type(exc).__name__}: {exc}",
        }


def _write_index(out: Path, experiments: list[Experiment], summaries: dict) -> Path:
    ordered = [summaries[e.name] for e in experiments if e.name in summaries]
    write_json_atomic(out / "index.json", {"experiments": ordered})
    with naming(out / "index.html"):
        return write_index(out / "index.html", ordered)


def _clean_partials(out: Path) -> None:
    """Work folders of an interrupted run are incomplete by construction: drop them (this run
    holds the folder's lock, so no other run is writing them). Links are not followed."""
    for partial in out.glob(".*.partial"):
        if partial.is_dir() and not partial.is_symlink():
            shutil.rmtree(partial, ignore_errors=True)


@contextmanager
def _client(
    options: ProcessOptions,
    console: Console,
    pin_workers: bool = False,
    shutdown_timeout: float = cluster.SHUTDOWN_TIMEOUT_S,
    warnings_log: Path | None = None,
):
    """A Dask client: of the scheduler given, or of a local cluster of ``options.jobs``
    workers (``cluster.local_cluster``: TLS, no HTTP server unless ``options.dashboard``;
    each worker pinned to its own core when ``pin_workers``, see ``PinToCore``; other
    libraries' warnings appended to ``warnings_log`` where given, see ``WarningsToLog``). A
    local cluster that does not shut down within ``shutdown_timeout`` s after the work is a
    warning, not a failure."""
    import dask
    from distributed import Client

    from physid.rigs.pipeline import allocator

    if options.scheduler:
        console.print(f"connecting to the Dask scheduler at {options.scheduler}")
        with Client(options.scheduler, timeout="30s") as client:
            yield client
        return
    jobs = max(1, int(options.jobs))
    environ = {**dask.config.get("distributed.nanny.pre-spawn-environ"), **allocator.ENVIRONMENT}
    with dask.config.set({"distributed.nanny.pre-spawn-environ": environ}):
        local = cluster.local_cluster(jobs, dashboard=options.dashboard)
        try:
            client = Client(local)
        except BaseException:
            local.close()
            raise

        def warn(text: str) -> None:
            console.print(error_line("warning", text, "yellow"))

        with cluster.closing(local, client, warn, shutdown_timeout):
            link = cluster.dashboard_link(local)
            if link:
                console.print(f"Dask dashboard: {link}")
            if warnings_log is not None:
                client.register_plugin(WarningsToLog(warnings_log), name="physid-warnings")
            if pin_workers and jobs > 1 and hasattr(os, "sched_getaffinity"):
                cpus = tuple(sorted(os.sched_getaffinity(0)))
                if len(cpus) > 1:
                    client.register_plugin(PinToCore(cpus), name="physid-pin-to-core")
            yield client


class WarningsToLog(WorkerPlugin):
    """Other libraries' warnings raised in a local worker go to the run's ``physid.log``, as
    the command's own do (``rigs.cli_output.LibraryLog``): a worker's stderr is the terminal
    of the live view, where CVXPY's "Solution may be inaccurate" from the Furuta's
    consistency projection landed in the middle of the README's first command. physid's
    own warnings stay on the terminal, one line each."""

    def __init__(self, path: Path):
        self.path = str(path)

    def setup(self, worker):
        warnings.showwarning = functools.partial(_warning_to_file, self.path)


def _warning_to_file(path: str, message, category, filename, lineno, file=None, line=None):
    """``warnings.showwarning`` of a worker: see ``WarningsToLog``."""
    logged = library_warning_line(
        message, category, filename, lineno, line, where=f" (worker {os.getpid()})"
    )
    if logged is None:
        print(f"warning: {message}", file=sys.stderr)
        return
    try:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(logged + "\n")
    except OSError:
        pass  # a full disk loses the warning, not the experiment


class PinToCore(WorkerPlugin):
    """Pins local worker ``i`` (all its threads) to core ``cpus[i mod len(cpus)]``.

    An experiment alone uses ~1.4 of 2 cores (XLA's intra-op threads, OpenCV's), so with
    ``--jobs 2`` unpinned workers oversubscribe the cores: two processes linearizing the
    13-parameter Furuta at once took 0.36 s per call unpinned, 0.24 s pinned (0.21 s alone);
    pinned, XLA sizes its thread pool to the one core it sees. A pinned worker cannot use a
    core that falls idle, though: the sample folder (three experiments, the Furuta one the
    longest) took 20 s longer pinned, so ``process`` pins only when there are at least two
    experiments per worker. ``--jobs 1`` stays unpinned.
    """

    def __init__(self, cpus: tuple[int, ...]):
        self.cpus = cpus

    def setup(self, worker):
        try:
            index = int(worker.name)
        except (TypeError, ValueError):
            return  # not a LocalCluster worker: leave it alone
        cpu = {self.cpus[index % len(self.cpus)]}
        for tid in os.listdir("/proc/self/task"):  # every thread, the task executor's too
            try:
                os.sched_setaffinity(int(tid), cpu)
            except OSError:  # a thread that ended meanwhile
                pass


class StageClock(ProgressColumn):
    """Time since the experiment started and since its stage began, e.g. ``1:02:07 (0:41 in
    identify)``, frozen when it ends. Kept in the task's fields rather than rich's own elapsed
    time, which stops when a bar fills up (tracking fills it, then identification ran for
    minutes under a clock that stood still)."""

    def render(self, task) -> Text:
        f = task.fields
        if f.get("t0") is None:
            return Text("-:--:--", style="progress.elapsed")
        end = f.get("t_end") or task.get_time()
        text = _hms(end - f["t0"])
        if f.get("t_end") is None and f.get("stage_t0") is not None:
            text += f" ({_hms(end - f['stage_t0'])} in {f.get('stage', '')})"
        return Text(text, style="progress.elapsed")


def _hms(seconds: float) -> str:
    return str(timedelta(seconds=max(0, int(seconds))))


class _ProgressView:
    """One rich progress line per experiment: its stage, frames where known, a clock that
    keeps moving through every stage, and its status. ``get_time``: the clock (tests)."""

    def __init__(self, experiments: list[Experiment], console: Console, get_time=None):
        # Names and notes are shown verbatim (markup=False): a note is often an error message
        # with "[method] h" or "[fixed.m]" in it; only the status word is coloured.
        self.progress = Progress(
            TextColumn("{task.fields[name]:<12}", markup=False),
            BarColumn(bar_width=20),
            TextColumn("{task.fields[stage]:<12}"),
            TextColumn("{task.fields[note]}", markup=False),
            StageClock(),
            console=console,
            transient=False,
            get_time=get_time,
        )
        self.tasks = {}
        self.lock = threading.Lock()
        self.experiments = experiments

    def __enter__(self):
        self.progress.start()
        for e in self.experiments:
            self.tasks[e.name] = self.progress.add_task(
                e.name, total=None, name=e.name, stage="queued", note="", t0=None, stage_t0=None
            )
        return self

    def __exit__(self, *exc):
        self.progress.stop()

    def event(self, event) -> None:
        """Handler of worker events ``(timestamp, {"experiment", "stage", ...})``."""
        msg = event[1] if isinstance(event, tuple) else event
        task = self.tasks.get(msg.get("experiment"))
        if task is None:
            return
        with self.lock:
            now = self.progress.get_time()
            fields = self.progress.tasks[task].fields
            stage = escape(str(msg.get("stage", "")))
            update = {"stage": stage, "note": msg.get("message", "")[:60]}
            if fields.get("t0") is None:
                update["t0"] = now
            if stage != fields.get("stage") or fields.get("stage_t0") is None:
                update["stage_t0"] = now  # a new stage: its own clock, and an empty bar
                self._empty_bar(task)
            if "frames" in msg:
                update.update(completed=msg["frames"], total=msg.get("total"))
                update.pop("note")
            self.progress.update(task, **update)

    def _empty_bar(self, task) -> None:
        """A pulsing bar until the stage reports frames (``update`` cannot unset a total)."""
        with self.progress._lock:
            bar = self.progress._tasks[task]
            bar.total, bar.completed, bar.finished_time = None, 0, None

    def done(self, name: str, summary: dict) -> None:
        with self.lock:
            status = summary["status"]
            note = "reused" if summary.get("skipped") else summary.get("error", "")[:60]
            if status == "warning" and not summary.get("skipped"):
                note = "; ".join(summary.get("warnings", []))[:60]
            colour = {"ok": "green", "warning": "yellow"}.get(status, "red")
            now = self.progress.get_time()
            t0 = self.progress.tasks[self.tasks[name]].fields.get("t0")
            self.progress.update(
                self.tasks[name],
                total=1,
                completed=1,
                stage=f"[{colour}]{status}[/{colour}]",
                note=note,
                t0=now if t0 is None else t0,
                t_end=now,
            )


def load_index(out: Path) -> list[dict]:
    """The experiments' summaries from ``index.json`` (for tests and scripts)."""
    return json.loads((Path(out) / "index.json").read_text())["experiments"]
