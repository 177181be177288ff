"""The ``Estimate`` type shared by every estimator, and its ``estimate.json`` serialization."""

from __future__ import annotations

import json
import math
import os
import tempfile
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from physid.files import follow_umask, naming


@dataclass(frozen=True)
class ParameterEstimate:
    """One identified parameter in SI units (``unit`` is the SI unit it is expressed in).

    ``at_bound`` is "lower" or "upper" when the estimator left it on that bound of its box
    (the data push it further: not a measurement, so it is never identifiable)."""

    value: float
    std: float
    unit: str
    identifiable: bool
    at_bound: str | None = None


@dataclass(frozen=True)
class Estimate:
    """What an estimator returns: parameters with uncertainty, fit quality and provenance.

    ``cost`` and ``cv_cost`` are mean squared errors per time step (Section 4.5 of Marklund et
    al.); ``history`` is the cost after each iteration; ``identifiability`` holds the SVD of the
    parameter covariance (singular values and the directions the data do not excite);
    ``extra`` holds estimator-specific results (impulses, fitted states) as plain lists.
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

    def to_dict(self) -> dict[str, Any]:
        return _plain(asdict(self))

    def write(self, path: str | Path) -> Path:
        """Write ``estimate.json`` atomically, so a crash never leaves half a file."""
        return write_json_atomic(path, self.to_dict())

    @staticmethod
    def read(path: str | Path) -> Estimate:
        data = json.loads(Path(path).read_text())
        data["parameters"] = {k: ParameterEstimate(**v) for k, v in data["parameters"].items()}
        return Estimate(**data)


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
    """Write JSON to a temporary file in the same folder and rename it into place. The file
    gets the mode the user's umask gives (``mkstemp`` alone would make it 0600); on any
    error, a full disk included, the temporary file is removed and ``path`` is untouched."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        follow_umask(fd)
        with naming(path), os.fdopen(fd, "w") as fh:
            json.dump(_plain(data), fh, indent=2)
            fh.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
