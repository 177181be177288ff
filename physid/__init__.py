"""physid: identify the physical parameters of real mechanisms from video and encoder logs.

Installed, physid is this one import namespace. The repository keeps one folder per role and
``pyproject.toml`` maps each under ``physid``:

- ``physid`` (this folder): the vocabulary every package shares — ``errors`` (the base of
  every bad-input error), ``units`` (unit strings to SI), ``streams`` (time-stamped samples),
  ``spec`` (rig spec files). It imports nothing from the packages below.
- ``physid.dynamics``: pure, differentiable models and integrators (JAX, float64).
- ``physid.estimation``: estimation problems, solvers and their results.
- ``physid.vision``: camera models, calibration, fiducial detection, tracking.
- ``physid.rigs``: rig models built from specs (``rigs.models``), the encoder board
  (``rigs.encoders``), the batch pipeline (``rigs.pipeline.run``) and the command line
  (``rigs.cli``).
"""
