"""Which module simulates and identifies each rig model named in a spec's ``[rig] model``.

Each kind module exposes::

    simulate(spec: RigSpec, options: SimulateOptions, console) -> dict[str, Path]
    identify(spec: RigSpec, data: list[Path], out: Path, console) -> Estimate
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from physid.spec import RigSpec, SpecError
from physid.suggest import did_you_mean

KIND_MODULES = {
    "pendulum": "physid.rigs.models.pendulum",
    "furuta": "physid.rigs.models.furuta",
    "ellipse_drop": "physid.rigs.models.ellipse_drop",
    "tree": "physid.rigs.models.tree.kind",
    "loop": "physid.rigs.models.identify_loop",
}


@dataclass(frozen=True)
class SimulateOptions:
    """Command-line options of ``physid simulate``; None means the spec's scenario default."""

    out: Path
    duration: float | None = None
    dt: float | None = None
    noise: float | None = None
    seed: int = 0
    control: Path | None = None
    engine: str | None = None  # pendulum, furuta: "tree" or "spook" (None: the spec's)
    extra: dict[str, str] = field(default_factory=dict)


def kind_module(spec: RigSpec) -> ModuleType:
    """The module that implements ``spec.model``; a clear error for unknown models."""
    name = KIND_MODULES.get(spec.model)
    if name is None:
        raise SpecError(
            f"{spec.path}: [rig] model = {spec.model!r} is not a known model"
            f"{did_you_mean(spec.model, KIND_MODULES)}; known: {', '.join(sorted(KIND_MODULES))}"
        )
    return importlib.import_module(name)
