"""The ``Estimate`` type shared by every estimator, and its ``estimate.json`` serialization."""

from __future__ import annotations

import enum
import html
import json
import math
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from physid.files import atomic_open


class Result(enum.Enum):
    """Why an estimator stopped, as an enumerated result (after Optimistix's ``RESULTS``).

    Only ``successful`` means that a convergence test passed; ``Status.test`` then names it.
    Every other value is a stop without one, and its estimate is never called converged."""

    successful = "successful"  # a convergence test passed at the returned point
    max_steps_reached = "max_steps_reached"  # the iteration limit, no test passed
    stalled = "stalled"  # no step lowers the cost, yet no convergence test passed
    solver_failed = "solver_failed"  # the solver gave up (infeasible, numerical failure)


@dataclass(frozen=True)
class Status:
    """How an estimator's run ended: ``result``, the convergence ``test`` that passed (None
    unless successful) and ``stop``, the solver's own stop message, as it printed it."""

    result: Result
    stop: str
    test: str | None = None

    def __post_init__(self):
        if (self.result is Result.successful) != (self.test is not None):
            raise ValueError("a successful status names its passed test; no other status has one")

    @property
    def converged(self) -> bool:
        return self.result is Result.successful

    def to_dict(self) -> dict:
        return {"result": self.result.value, "stop": self.stop, "test": self.test}


@dataclass(frozen=True)
class ParameterEstimate:
    """One identified parameter in SI units (``unit`` is the SI unit it is expressed in).

    ``at_bound`` is "lower" or "upper" when the estimator left it on that bound of its box,
    or "consistency" on the boundary of physical consistency (the data push it further: not
    a measurement, so it is never identifiable and its std is not finite). ``lower_bound``:
    the data bound the parameter only from below and ``value`` is that bound (a friction
    coefficient of a contact that never slides). ``reason`` says why a parameter is not
    identifiable (None when it is).

    ``released_std``, for a parameter on a box bound only: its std with the bound released
    (the covariance not conditioned on it). It is no std of ``value`` (the bound) but a
    one-sided interval: the truth lies in [bound, bound + k·released_std] (lower bound;
    mirrored for an upper one) about as often as within k std of an interior value."""

    value: float
    std: float
    unit: str
    identifiable: bool
    at_bound: str | None = None
    lower_bound: bool = False
    reason: str | None = None
    released_std: float | None = None

    def __post_init__(self):
        std = math.inf if self.std is None else float(self.std)
        object.__setattr__(self, "std", std)
        if self.identifiable and (self.at_bound or self.lower_bound or not math.isfinite(std)):
            raise ValueError(
                "a parameter at a bound, only bounded below or without a finite std is never "
                "identifiable"
            )
        if (self.at_bound or self.lower_bound) and math.isfinite(std):
            raise ValueError("a parameter at a bound or only bounded below has no finite std")
        if self.released_std is not None and self.at_bound not in ("lower", "upper"):
            raise ValueError("only a parameter on a box bound has a one-sided (released) std")

    @property
    def flags(self) -> str:
        """What a reader must know about this value, in words ('' if nothing)."""
        notes = [f"at {self.at_bound} bound"] if self.at_bound else []
        if self.lower_bound:
            notes.append("a lower bound only")
        if not self.identifiable:
            notes.append(f"not identifiable ({self.reason})" if self.reason else "not identifiable")
        return ", ".join(notes)


@dataclass(frozen=True)
class Estimate:
    """What an estimator returns: parameters with uncertainty, fit quality and provenance.

    ``cost`` and ``cv_cost`` are mean squared errors per time step (Section 4.5 of Marklund et
    al.); ``history`` is the cost after each iteration; ``identifiability`` holds the SVD of the
    parameter covariance (singular values and the directions the data do not excite);
    ``extra`` holds estimator-specific results (impulses, fitted states) as plain lists.
    ``status`` is ``Status.to_dict()``: why the run stopped and which convergence test passed
    (``converged`` is true exactly when one did). ``validation`` holds the checks of the fit
    by prediction and residuals and their ``verdict`` (``estimation.validation``).
    """

    rig: str
    solver: str
    parameters: dict[str, ParameterEstimate]
    cost: float
    iterations: int
    converged: bool
    history: list[float]
    settings: dict[str, Any]
    cv_cost: float | None = None
    covariance: list[list[float]] | None = None
    identifiability: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    version: str = field(default_factory=lambda: physid_version())
    status: dict[str, Any] = field(default_factory=dict)
    validation: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        result = self.status.get("result")
        if result is not None and self.converged != (result == Result.successful.value):
            raise ValueError(f"converged = {self.converged} contradicts status {result!r}")
        if not self.converged and any(p.identifiable for p in self.parameters.values()):
            raise ValueError("a fit that did not converge identifies no parameter")

    @property
    def verdict(self) -> str | None:
        """ "good fit", "poor fit" or "not converged" (None where no check was run)."""
        return self.validation.get("verdict")

    def to_dict(self) -> dict[str, Any]:
        """Everything, JSON-safe (what ``estimate.json`` holds)."""
        return _plain(asdict(self))

    @property
    def values(self) -> dict[str, float]:
        """Identified values by name (SI)."""
        return {k: p.value for k, p in self.parameters.items()}

    def table(self) -> dict[str, list]:
        """The parameters as columns of plain lists: ``parameter``, ``value``, ``std``,
        ``unit`` (SI), ``identifiable``, ``flags``. A dict, no DataFrame needed (pandas takes
        it as it is: ``pandas.DataFrame(estimate.table())``). A std that is not finite is
        None, as in estimate.json."""
        ps = self.parameters
        return {
            "parameter": list(ps),
            "value": [p.value for p in ps.values()],
            "std": [p.std if math.isfinite(p.std) else None for p in ps.values()],
            "unit": [p.unit for p in ps.values()],
            "identifiable": [p.identifiable for p in ps.values()],
            "flags": [p.flags for p in ps.values()],
        }

    def __repr__(self) -> str:
        shown = "; ".join(
            f"{k} = {_num(p.value, '.6g')} ± {_num(p.std, '.2g')} {p.unit}".rstrip()
            + (f" ({p.flags})" if p.flags else "")
            for k, p in self.parameters.items()
        )
        state = "converged" if self.converged else "not converged"
        return (
            f"Estimate({self.rig!r}, {state}, {self.iterations} iterations, cost/step "
            f"{self.cost:.4g}: {shown})"
        )

    def _repr_html_(self) -> str:
        """The parameter table a notebook shows for an Estimate."""
        e = html.escape
        rows = "".join(
            f"<tr><td style='text-align:left'>{e(k)}</td><td>{_num(p.value, '.6g')}</td>"
            f"<td>{_num(p.std, '.2g')}</td><td style='text-align:left'>{e(p.unit)}</td>"
            f"<td style='text-align:left'>{e(p.flags)}</td></tr>"
            for k, p in self.parameters.items()
        )
        state = "converged" if self.converged else "<b>not converged</b>"
        caption = (
            f"{e(self.rig)}: {e(self.solver)}, {state} after {self.iterations} iterations, "
            f"cost per step {self.cost:.4g}"
            + (f", cross-validation {self.cv_cost:.4g}" if self.cv_cost is not None else "")
        )
        head = "".join(f"<th>{h}</th>" for h in ("parameter", "value", "std", "unit (SI)", "flags"))
        return (
            f"<table><caption style='text-align:left'>{caption}</caption>"
            f"<thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"
        )

    def write(self, path: str | Path) -> Path:
        """Write ``estimate.json`` atomically, so a crash never leaves half a file."""
        return write_json_atomic(path, self.to_dict())

    @staticmethod
    def read(path: str | Path) -> Estimate:
        data = json.loads(Path(path).read_text())
        data["parameters"] = {k: ParameterEstimate(**v) for k, v in data["parameters"].items()}
        return Estimate(**data)


def std_and_correlation(cov) -> tuple[np.ndarray, np.ndarray]:
    """(std, correlation) of a covariance matrix (``Estimate.covariance``'s, None entries
    read as NaN): the std the square root of its diagonal (negative round-off clipped to 0),
    the correlation NaN or inf where a std is 0 or not finite."""
    c = np.array([[np.nan if v is None else v for v in row] for row in cov], float)
    std = np.sqrt(np.clip(np.diag(c), 0.0, None))
    with np.errstate(invalid="ignore", divide="ignore"):
        return std, c / np.outer(std, std)


def _num(value, spec: str) -> str:
    """A number for display; '—' where there is none (non-finite values read back as None)."""
    return "—" if value is None or not math.isfinite(value) else format(value, spec)


def physid_version() -> str:
    try:
        return metadata.version("physid")
    except metadata.PackageNotFoundError:
        return "unknown"


def _plain(obj: Any) -> Any:
    """JSON-safe copy: NumPy to lists and floats, non-finite floats to None."""
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_plain(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return _plain(obj.tolist())
    if isinstance(obj, np.generic):
        return _plain(obj.item())
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def write_json_atomic(path: str | Path, data: Any) -> Path:
    """Write JSON to ``path`` through ``atomic_open``: whole, with the umask's mode, or not at
    all (``path`` untouched on any error)."""
    with atomic_open(path) as fh:
        json.dump(_plain(data), fh, indent=2)
        fh.write("\n")
    return Path(path)
