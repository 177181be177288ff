"""physid: identify the physical parameters of real mechanisms from video and encoder logs.

The Python API (``physid.api``, loaded on first use so that ``import physid.errors`` stays
light)::

    import physid
    estimate = physid.identify("pendulum", "log.csv")   # -> physid.Estimate
    sim = physid.simulate("pendulum", duration=2.0)     # -> stream, truth
    reports = physid.process("videos/", "reports/")     # -> index.html + summaries
    stream = physid.read_log("run.bin", "furuta")       # -> physid.Stream
    spec = physid.load_spec("rigs/my_rig.toml")         # -> physid.RigSpec

Installed, physid is this one import namespace. The repository keeps one folder per role and
``pyproject.toml`` maps each under ``physid``:

- ``physid`` (this folder): the vocabulary every package shares — ``errors`` (the base of
  every bad-input error), ``units`` (unit strings to SI), ``streams`` (time-stamped samples),
  ``spec`` (rig spec files), ``suggest`` ("did you mean") — which imports nothing from the
  packages below; and ``api``, the public functions on top of them all.
- ``physid.dynamics``: pure, differentiable models and integrators (JAX, float64).
- ``physid.estimation``: estimation problems, solvers and their results.
- ``physid.vision``: camera models, calibration, fiducial detection, tracking.
- ``physid.rigs``: rig models built from specs (``rigs.models``), the encoder board
  (``rigs.encoders``), the batch pipeline (``rigs.pipeline.run``) and the command line
  (``rigs.cli``).
"""

import importlib

# Public names -> the module that defines them, imported when first asked for (PEP 562).
_LAZY = {
    "identify": "physid.api",
    "simulate": "physid.api",
    "process": "physid.api",
    "read_log": "physid.api",
    "load_spec": "physid.api",
    "Simulation": "physid.api",
    "Reports": "physid.api",
    "Estimate": "physid.estimation.estimate",
    "ParameterEstimate": "physid.estimation.estimate",
    "Stream": "physid.streams",
    "RigSpec": "physid.spec",
    "InputError": "physid.errors",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    if name == "__version__":
        from importlib import metadata

        try:
            return metadata.version("physid")
        except metadata.PackageNotFoundError:
            return "unknown"
    if name not in _LAZY:
        raise AttributeError(f"module 'physid' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY, "__version__"})
