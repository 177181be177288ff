"""What the ``physid`` command line shows, and what it keeps out of the terminal (the plain-text
console itself is ``physid.terminal``).

- ``LibraryLog``: warnings and log records of other libraries (JAX, Dask, Matplotlib...) go to
  a log file, not the terminal; physid's own warnings (a truncated capture) stay visible.
- ``parameter_table``: an ``Estimate``'s parameters as a rich table (value ± std, unit, flags).
- ``clock``: a spinner with a running clock for work that reports no progress of its own.
"""

from __future__ import annotations

import logging
import os
import time
import warnings
from contextlib import contextmanager
from pathlib import Path

from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

# Loggers that install their own stderr handlers on import: routed to the log file instead.
NOISY_LOGGERS = ("distributed", "tornado", "asyncio", "jax", "absl", "matplotlib")


def default_log_path() -> Path:
    """``$PHYSID_LOG``, or ``physid.log`` in the user's cache folder."""
    if os.environ.get("PHYSID_LOG"):
        return Path(os.environ["PHYSID_LOG"])
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "physid" / "physid.log"


class LibraryLog(logging.Handler):
    """Collects other libraries' warnings and log records (WARNING and above) in memory and
    writes them to a log file at the end of the command: the output folder's ``physid.log``
    when the command has one (``write_to``), else ``default_log_path()``."""

    def __init__(self, console: Console):
        super().__init__(logging.WARNING)
        self.console = console
        self.lines: list[str] = []
        self.path: Path | None = None
        self.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s: %(message)s"))

    def install(self) -> None:
        """Take over ``warnings.showwarning`` and the root logger's output."""
        warnings.showwarning = self._show_warning
        root = logging.getLogger()
        for handler in list(root.handlers):
            root.removeHandler(handler)
        root.addHandler(self)
        root.setLevel(logging.WARNING)
        for name in NOISY_LOGGERS:
            self.adopt(name)

    def adopt(self, name: str) -> None:
        """Send logger ``name`` (and its children) here only, e.g. after a library that
        configures its own stderr handler on import (Dask's ``distributed``) is imported."""
        logger = logging.getLogger(name)
        for handler in list(logger.handlers):
            logger.removeHandler(handler)
        logger.addHandler(self)
        logger.propagate = False

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))

    def write_to(self, path: Path) -> None:
        """Write the log to ``path`` (an output folder's ``physid.log``) at the end."""
        self.path = Path(path)

    def _show_warning(self, message, category, filename, lineno, file=None, line=None):
        logged = library_warning_line(message, category, filename, lineno, line)
        if logged is None:
            self.console.print(f"warning: {message}", markup=False, highlight=False)
            return
        self.lines.append(logged)

    def flush_to_file(self) -> Path | None:
        """Append the collected lines to the log file; its path, or None if nothing came."""
        if not self.lines:
            return None
        path = self.path or default_log_path()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "a", encoding="utf-8") as fh:
                fh.write("\n".join(self.lines) + "\n")
        except OSError:
            return None
        self.lines = []
        return path


def library_warning_line(
    message, category, filename, lineno, line=None, where: str = ""
) -> str | None:
    """The log-file line of another library's warning (``warnings.showwarning``'s
    arguments; ``where`` e.g. " (worker 123)" after the level), or None for physid's own
    warnings, which belong on the terminal."""
    if category.__module__.startswith("physid"):
        return None
    text = warnings.formatwarning(message, category, filename, lineno, line).rstrip()
    return f"{time.strftime('%Y-%m-%d %H:%M:%S')} py.warnings WARNING{where}: {text}"


def parameter_table(estimate, title: str | None = None) -> Table:
    """The parameters of ``estimate``: value ± std, SI unit and what to know about each."""
    table = Table(title=title, title_justify="left")
    table.add_column("parameter")
    table.add_column("value ± std", justify="right")
    table.add_column("unit")
    table.add_column("flags")
    for name, p in estimate.parameters.items():
        std = "—" if p.std is None else f"{p.std:.2g}"
        relative = f" ({100 * abs(p.std / p.value):.2g} %)" if p.std and p.value else ""
        table.add_row(name, f"{p.value:.6g} ± {std}{relative}", p.unit, p.flags)
    return table


@contextmanager
def clock(console: Console, what: str):
    """A spinner, ``what`` and the elapsed time, kept moving while the block runs."""
    progress = Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    )
    with progress:
        progress.add_task(what, total=None)
        yield
