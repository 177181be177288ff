"""The ``physid`` command line: one entry point, one sub-command per job.

Every command ends with what it wrote; a bad input is one line that names the file or key and
says what to do (exit status 2); other libraries' warnings go to a log file, not the terminal
(``rigs.cli_output``).
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Annotated

import typer
from typer.core import TyperGroup

from physid.suggest import did_you_mean
from physid.terminal import Console, error_line


class _Commands(TyperGroup):
    """Sub-commands with a "did you mean" for a misspelled one."""

    def resolve_command(self, ctx, args):
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            listed = ", ".join(sorted(self.commands))
            ctx.fail(
                f"no command {args[0]!r}{did_you_mean(args[0], self.commands)}; commands: {listed}"
            )
        return super().resolve_command(ctx, args)


# Help texts are plain text (rich_markup_mode=None): "[method]", "[scene] and [markers]" in
# them are spec tables, not markup.
app = typer.Typer(
    name="physid",
    help="Identify physical parameters of mechanisms from video and encoder logs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    cls=_Commands,
)
console = Console(stderr=True)


def _print_version(value: bool) -> None:
    if value:
        from importlib import metadata

        try:
            version = metadata.version("physid")
        except metadata.PackageNotFoundError:
            version = "unknown (not installed)"
        print(f"physid {version}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version and exit"
        ),
    ] = False,
) -> None:
    """Identify physical parameters of mechanisms from video and encoder logs.

    Rigs are spec files (TOML) or built-in names; see docs/rig-spec.md."""


# Modules that add their own sub-commands through ``register(app)``.
COMMAND_MODULES: tuple[str, ...] = ("physid.rigs.encoders.record", "physid.vision.cli")


class UserError(Exception):
    """An error in the command line itself; printed without a traceback."""


def _parse_sets(items: list[str]) -> dict[str, str]:
    overrides = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise UserError(f"--set {item!r}: expected NAME=VALUE, e.g. --set mu=0.3")
        overrides[name.strip()] = value.strip()
    return overrides


SIMULATE_HELP = """
\b
Pendulum and furuta: the simulator is the default estimator's own model,
rigid joints integrated by the tree's variational step with exact dry
friction (engine "tree"), so that `physid identify` with the default fits
the model that made the data. Engine "spook" integrates Marklund et al.'s
compliant hinges with load-proportional dry friction (the SPOOK
estimator's model). Chosen by --engine, else the spec's [simulation]
engine, else its [method] estimator. truth.json lists only the values the
simulated model has (no eps_*, tau* on rigid joints).

\b
[simulation] keys (docs/rig-spec.md): h (s), duration (s), rate (Hz),
  noise (rad), theta0 / theta1, theta2 (rad), truth, engine
"""


@app.command(epilog=SIMULATE_HELP)
def simulate(
    rig: Annotated[
        str | None, typer.Argument(help="Rig spec TOML, or a built-in rig name (furuta)")
    ] = None,
    out: Annotated[Path | None, typer.Option(help="Output folder")] = None,
    sample: Annotated[
        Path | None,
        typer.Option(help="Write the sample experiments (videos/) into this folder instead"),
    ] = None,
    duration: Annotated[float | None, typer.Option(help="Simulated time (s)")] = None,
    dt: Annotated[float | None, typer.Option(help="Integrator time step h (s)")] = None,
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", help="Override a spec value: NAME=VALUE or 'NAME=VALUE UNIT'"),
    ] = None,
    control: Annotated[
        Path | None, typer.Option(help="CSV with columns t,u: control voltage (V)")
    ] = None,
    noise: Annotated[float | None, typer.Option(help="Measurement noise std (rad or m)")] = None,
    seed: Annotated[int, typer.Option(help="Random seed for the noise")] = 0,
    engine: Annotated[
        str | None,
        typer.Option(
            help='Pendulum, furuta: "tree" (rigid joints) or "spook" (compliant hinges); '
            "default: the spec's [simulation] engine, else its estimator"
        ),
    ] = None,
) -> None:
    """Simulate a rig and write encoder-style data, the true parameters and a plot."""
    from physid.rigs.models.kinds import SimulateOptions, kind_module

    if sample is not None:
        from physid.rigs.pipeline.sample import write_samples

        for label, path in write_samples(sample, console).items():
            console.print(f"[green]wrote[/green] {label}: {path}")
        return
    if rig is None or out is None:
        raise UserError("give a RIG and --out DIR, or --sample DIR for the sample experiments")
    from physid.rigs.cli_output import clock
    from physid.spec import load_spec, with_overrides

    spec = with_overrides(load_spec(rig), _parse_sets(set_ or []))
    if engine is not None and spec.model not in ("pendulum", "furuta"):
        raise UserError(
            f"--engine: {spec.name} (model {spec.model!r}) has one simulator; --engine "
            "chooses between the pendulum's and Furuta's two"
        )
    options = SimulateOptions(out, duration, dt, noise, seed, control, engine)
    module = kind_module(spec)
    with clock(console, f"simulating {spec.name}"):
        written = module.simulate(spec, options, console)
    for label, path in written.items():
        console.print(f"[green]wrote[/green] {label}: {path}")


IDENTIFY_HELP = """
\b
Data: encoder logs (.bin captures of the board, or CSV: a time column and
one column per encoder; a lab's own columns, units, sign and zero are
named in the spec's [sensors.NAME] column table), or for the ellipse
drop one pose CSV (t,x,y,theta from physid track). Hinged rigs: the
default estimator (the tree) fits several logs jointly; with estimator =
"spook" the first is fitted and each other one cross-validates the fit.

\b
[method] settings of the spec, all optional (docs/rig-spec.md):
  estimator: "tree" (the default) or "spook" (pendulum, furuta)
  pendulum, furuta with estimator = "spook": h (s), kappa, kappa_final, max_iter, eps_g,
    eps_delta, eps_f, lm_tau, alpha_shrink, eps_fric (rad/N m s),
    model_error, model_error_iterations, physical_consistency,
    max_gap (s), prediction_horizon (s), free_run_horizon (s), holdout,
    covariance_batches, step_extrapolation
  tree estimator (the default; pendulum, furuta, model = "tree"): h (s),
    process_noise (N m s per step), noise_bandwidth (Hz), max_iter, eps_g,
    eps_delta, eps_f, lm_tau, alpha_shrink, warmup_iter,
    physical_consistency, covariance_batches, prediction_horizon (s),
    free_run_horizon (s), step_extrapolation (refit at h/2, off),
    warm_start (θ from the filtered inverse dynamics, on)
  ellipse_drop: h_max (s), sigma_pos (m), sigma_theta (rad), rho,
    mu_pull, max_iter, covariance ("bootstrap", the default, or "linearized"),
    bootstrap_draws (20), bootstrap_seed, model_error (true)
  loop (a log t,x,y,z,Fx,Fy,Fz): h (s), sigma_pos (m), max_iter
"""


@app.command(epilog=IDENTIFY_HELP)
def identify(
    rig: Annotated[str, typer.Argument(help="Rig spec TOML, or a built-in rig name")],
    data: Annotated[list[Path], typer.Argument(help="Encoder logs (.csv, .bin) or a pose CSV")],
    out: Annotated[Path, typer.Option(help="Output folder: estimate.json, report.html, log.txt")],
    model_error: Annotated[
        bool,
        typer.Option(
            help="Encoder rigs: refit at half the time step and add the discretization error "
            "to each std (about doubles the run time; same as [method] model_error = true)"
        ),
    ] = False,
    force: Annotated[
        bool, typer.Option(help="Recompute even if the inputs are those of the report in --out")
    ] = False,
) -> None:
    """Identify a rig's parameters from recorded data: a table of the values, estimate.json
    and the same HTML report as physid process.

    Exit status: 0 a fit judged "good fit", 1 the run failed, 2 a command-line or input
    error, 5 the report is written but the fit's verdict is "poor fit" or "not converged".
    """
    from physid.estimation.estimate import Estimate
    from physid.rigs.cli_output import parameter_table
    from physid.rigs.pipeline.process import EXIT_UNTRUSTED, _ProgressView, untrusted
    from physid.rigs.pipeline.single import identify_files, prepare

    exp = prepare(rig, data, out)
    LIBRARY_LOG.write_to(Path(out) / "physid.log")
    method = {"model_error": True} if model_error else {}
    _load_model(exp.rig)
    with _ProgressView([exp], console) as view:
        summary = identify_files(exp, out, method, force, view.event)
        view.done(exp.name, summary)
    if summary["status"] not in ("ok", "warning"):
        log = summary.get("log")
        where = f" (log: {Path(out).resolve().parent / log})" if log else ""
        raise IdentifyFailed(f"{summary['error']}{where}", summary.get("input_error"))
    for note in summary.get("warnings", []):
        console.print(error_line("warning", note, "yellow"), soft_wrap=True)
    estimate = Estimate.read(Path(out) / "estimate.json")
    console.print(parameter_table(estimate, f"{estimate.rig}: identified parameters"))
    status = "converged" if estimate.converged else "NOT converged"
    reused = "; report reused (inputs unchanged)" if summary.get("skipped") else ""
    console.print(
        f"{estimate.solver}: {status} after {estimate.iterations} iterations, cost per step "
        f"{estimate.cost:.4g}{reused}",
        markup=False,
        highlight=False,
    )
    console.print(f"[green]wrote[/green] {Path(out) / 'report.html'}")
    why = untrusted(summary)
    if why is not None:
        _say_untrusted(f"the fit's verdict is {why!r}: read the report's verdict", EXIT_UNTRUSTED)
        raise typer.Exit(EXIT_UNTRUSTED)


def _say_untrusted(what: str, status: int) -> None:
    """The red line of a run whose reports are written but not to be trusted."""
    console.print(
        error_line("not trusted", f"{what} before using these numbers (exit status {status})",
                   "red"),
        soft_wrap=True,
    )  # fmt: skip


def _load_model(rig: str) -> None:
    """Import the rig's model (JAX, the estimator) before the live view starts: loading a
    large compiled library holds the interpreter lock, which would stop the view's clock."""
    from physid.rigs.models.kinds import kind_module
    from physid.spec import load_spec

    kind_module(load_spec(rig))
    importlib.import_module("physid.rigs.models.identify_hinged")


class IdentifyFailed(Exception):
    """A run that failed: the summary's error, and whether bad input caused it."""

    def __init__(self, message: str, input_error: bool | None):
        super().__init__(message)
        self.input_error = bool(input_error)


@app.command()
def process(
    folder: Annotated[Path, typer.Argument(help="Folder of recordings (experiments.toml)")],
    out: Annotated[Path, typer.Option(help="Folder for the reports")] = Path("reports"),
    jobs: Annotated[int, typer.Option(help="Experiments run in parallel (local processes)")] = 1,
    scheduler: Annotated[
        str | None, typer.Option(help="Dask scheduler address, e.g. tcp://10.0.0.5:8786")
    ] = None,
    force: Annotated[
        bool, typer.Option(help="Recompute experiments whose inputs are unchanged")
    ] = False,
    cross_validate: Annotated[
        bool,
        typer.Option(help="Fit each model to the other experiments of its rig (N² state fits)"),
    ] = True,
    allow_outside: Annotated[
        bool,
        typer.Option(
            help="Accept input files outside FOLDER named in experiments.toml (listed in the index)"
        ),
    ] = False,
    dashboard: Annotated[
        bool, typer.Option(help="Start Dask's HTTP dashboard on 127.0.0.1 (local runs)")
    ] = False,
) -> None:
    """Discover, track, synchronize and identify every experiment; write reports + index.

    Exit status: 0 every experiment reported, 1 an experiment failed or was invalid (or
    none was found to report), 2 a command-line or input error, 3 another run holds --out,
    4 an OS error such as a full disk (finished reports are kept), 5 every experiment
    reported but some fit's verdict is "poor fit" or "not converged".
    """
    from physid.rigs.pipeline.outputs import OutputBusy
    from physid.rigs.pipeline.process import (
        EXIT_BUSY,
        EXIT_UNTRUSTED,
        ProcessOptions,
        exit_status,
        load_index,
        process_folder,
        untrusted,
    )

    if jobs < 1:
        raise UserError(f"--jobs {jobs}: give at least 1")
    LIBRARY_LOG.write_to(Path(out) / "physid.log")
    LIBRARY_LOG.adopt("distributed")  # imported with process.py: its own stderr handler
    options = ProcessOptions(jobs, scheduler, force, cross_validate, allow_outside, dashboard)
    try:
        index = process_folder(folder, out, options, console)
    except OutputBusy as exc:
        console.print(error_line("error", str(exc)))
        raise typer.Exit(EXIT_BUSY) from None
    console.print(f"[green]wrote[/green] {index}")
    print(index)
    summaries = load_index(out)
    status = exit_status(summaries)
    if status == EXIT_UNTRUSTED:
        doubtful = [f"{s['experiment']} ({why})" for s in summaries if (why := untrusted(s))]
        _say_untrusted(f"{', '.join(doubtful)}: read their reports' verdicts", EXIT_UNTRUSTED)
    if status:
        raise typer.Exit(status)


def _register_plugins() -> None:
    if "calibrate" in {c.name for c in app.registered_commands}:
        return  # registered by an earlier run() in this process
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(app)


def main() -> None:
    """Console-script entry point: ``run`` the command line, exit with its status; other
    libraries' warnings and logs go to a log file (``rigs.cli_output.LibraryLog``)."""
    from physid.rigs.pipeline.allocator import tune_this_process

    tune_this_process()
    LIBRARY_LOG.install()
    try:
        status = run(sys.argv[1:])
    finally:
        logged = LIBRARY_LOG.flush_to_file()
        if logged is not None:
            console.print(f"(warnings of other libraries: {logged})", style="dim", markup=False)
    sys.exit(status)


def run(args: list[str]) -> int:
    """Run one ``physid`` command line; returns the exit status: 0, 1 (a run failed), 2 (bad
    input or usage: one line on stderr that says what to do), 3 (another run holds --out), 4
    (an OS error such as a full disk: one line naming the file), 130 (interrupted)."""
    from physid.errors import InputError

    _register_plugins()
    try:
        app(args=list(args), prog_name="physid")
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except (UserError, InputError, FileNotFoundError) as exc:
        return _fail(str(exc), 2)
    except IdentifyFailed as exc:
        return _fail(str(exc), 2 if exc.input_error else 1)
    except OSError as exc:
        return _fail(os_error_text(exc), EXIT_OS)
    except KeyboardInterrupt:
        console.print("[yellow]interrupted[/yellow]")
        return 130
    return 0


# Exit status of an OS error outside the experiments: a full disk, a folder not writable.
EXIT_OS = 4


def _fail(message: str, status: int) -> int:
    console.print(error_line("error", message), highlight=False, soft_wrap=True)
    return status


def os_error_text(exc: OSError) -> str:
    """One line for an OS error: the file, the reason, and what to do for a full disk."""
    import errno

    where = f"{exc.filename}: " if exc.filename else ""
    text = f"{where}{exc.strerror or exc}"
    if exc.errno == errno.ENOSPC:
        text += "; free space and run again (finished results are kept)"
    return text


def _library_log():
    from physid.rigs.cli_output import LibraryLog

    return LibraryLog(console)


LIBRARY_LOG = _library_log()
