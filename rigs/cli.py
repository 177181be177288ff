"""The ``physid`` command line: one entry point, one sub-command per job."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Annotated

import typer

from physid.terminal import Console, error_line

# Help texts are plain text (rich_markup_mode=None): "[method]", "[scene] and [markers]" in
# them are spec tables, not markup.
app = typer.Typer(
    name="physid",
    help="Identify physical parameters of mechanisms from video and encoder logs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
console = Console(stderr=True)

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


@app.command()
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
    from physid.spec import load_spec, with_overrides

    spec = with_overrides(load_spec(rig), _parse_sets(set_ or []))
    options = SimulateOptions(out, duration, dt, noise, seed, control)
    written = kind_module(spec).simulate(spec, options, console)
    for label, path in written.items():
        console.print(f"[green]wrote[/green] {label}: {path}")


@app.command()
def identify(
    rig: Annotated[str, typer.Argument(help="Rig spec TOML, or a built-in rig name")],
    data: Annotated[list[Path], typer.Argument(help="Encoder logs (.csv, .bin) or pose CSVs")],
    out: Annotated[Path, typer.Option(help="Output folder for estimate.json and plots")],
    model_error: Annotated[
        bool,
        typer.Option(
            help="Encoder rigs: refit at half the time step and add the discretization error "
            "to each std (about doubles the run time; same as [method] model_error = true)"
        ),
    ] = False,
) -> None:
    """Identify the rig's parameters from recorded data and write estimate.json."""
    from dataclasses import replace

    from physid.rigs.models.kinds import kind_module
    from physid.spec import load_spec

    spec = load_spec(rig)
    if model_error:
        spec = replace(spec, method={**spec.method, "model_error": True})
    for path in data:
        if not path.exists():
            raise UserError(f"{path}: no such file")
    module = kind_module(spec)
    if not hasattr(module, "identify"):
        raise UserError(f"no estimator for model {spec.model!r} yet (see the open issues)")
    module.identify(spec, data, out, console)
    console.print(f"[green]wrote[/green] {out / 'estimate.json'}")


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
    4 an OS error such as a full disk (finished reports are kept).
    """
    from physid.rigs.pipeline.outputs import OutputBusy
    from physid.rigs.pipeline.process import (
        EXIT_BUSY,
        ProcessOptions,
        exit_status,
        load_index,
        process_folder,
    )

    if jobs < 1:
        raise UserError(f"--jobs {jobs}: give at least 1")
    options = ProcessOptions(jobs, scheduler, force, cross_validate, allow_outside, dashboard)
    try:
        index = process_folder(folder, out, options, console)
    except OutputBusy as exc:
        console.print(error_line("error", str(exc)))
        raise typer.Exit(EXIT_BUSY) from None
    console.print(f"[green]wrote[/green] {index}")
    print(index)
    status = exit_status(load_index(out))
    if status:
        raise typer.Exit(status)


def _register_plugins() -> None:
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(app)


# Exit status of an OS error outside the experiments: a full disk, a folder not writable.
EXIT_OS = 4


def main() -> None:
    """Console-script entry point: user errors print one clear line and exit with status 2;
    OS errors (a full disk, permissions) one line naming the file, status 4."""
    from physid.errors import InputError
    from physid.rigs.pipeline.allocator import tune_this_process

    tune_this_process()
    _register_plugins()
    try:
        app()
    except (UserError, InputError, FileNotFoundError) as exc:
        console.print(error_line("error", str(exc)))
        sys.exit(2)
    except OSError as exc:
        console.print(error_line("error", os_error_text(exc)))
        sys.exit(EXIT_OS)
    except KeyboardInterrupt:
        console.print("[yellow]interrupted[/yellow]")
        sys.exit(130)


def os_error_text(exc: OSError) -> str:
    """One line for an OS error: the file, the reason, and what to do for a full disk."""
    import errno

    where = f"{exc.filename}: " if exc.filename else ""
    text = f"{where}{exc.strerror or exc}"
    if exc.errno == errno.ENOSPC:
        text += "; free space and run again (finished results are kept)"
    return text
