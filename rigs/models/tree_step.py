"""The tree estimator's step as a known model error (issue 24): a refit at h/2 on the same
samples and the Richardson extrapolation of order 2 (``estimation.step_bias``).

The tree's residual is the midpoint rule's discrete Euler–Lagrange equation, a symmetric
scheme: its values at h are shadow parameters χ(h) = χ* + a h² + O(h⁴), a bias the same in
every dataset of one motion that no residual-based std sees (at the fit the score sums to
zero whatever the model error). On the coverage pendulum (docs/validation.md) J's bias at
h = 2 ms is −7.5e-7 kg m² without noise, eight times the spread of J over 50 noise draws.
The refit at h/2 measures it: d = χ(h) − χ(h/2) ≈ (3/4) a h².

Used by ``identify_tree.identify_tree_series`` with ``[method] step_extrapolation = true``;
no file I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from physid.estimation.residuals import data_noise
from physid.estimation.step_bias import (
    extrapolation_noise_increment,
    halve_series,
    richardson,
)
from physid.estimation.uncertainty import noise_influence

ORDER = 2  # the midpoint rule's order in h (symmetric: its error is a series in h²)


@dataclass(frozen=True)
class StepRefit:
    """Per parameter (SI): the reported ``values`` (extrapolated where allowed), the std to
    add in quadrature for the step (the remainder's, or the whole bias where not
    extrapolated), the extrapolated value's extra noise variance over χ(h)'s, the values at
    h/2 and the refit's ``Status``."""

    values: np.ndarray
    step_std: np.ndarray
    noise_increment: np.ndarray
    values_at_half_step: np.ndarray
    extrapolated: np.ndarray
    status: object


def refit_at_half_step(rig, problem, result, series_list, fits, settings, held, refit_with, say):
    """χ at h/2 from the fit at h (``identify_tree`` problem, LM result, its per-series
    ``fits``), the extrapolation and its noise. ``held``: parameters on a bound or a
    consistency face (not extrapolated). ``refit_with(series, settings, values)`` builds and
    fits the tree problem on the halved series: ``(problem, result, status)`` (passed in by
    ``identify_tree``, which this module must not import: one floor, no circle)."""
    names = list(problem.structure.names)
    values = result.theta * problem.scale
    half_settings = {**settings, "h": settings["h"] / 2}
    halved = [halve_series(s, f["angles"]) for s, f in zip(series_list, fits, strict=True)]
    refit, res, status = refit_with(halved, half_settings, dict(zip(names, values, strict=True)))
    half = res.theta * refit.scale
    lower, upper = problem.lower * problem.scale, problem.upper * problem.scale
    allowed = np.ones(len(names), bool) if status.converged else np.zeros(len(names), bool)
    step = richardson(values, half, lower, upper, held, allowed=allowed, order=ORDER)
    noise = np.ones(np.asarray(result.lin.obs_r).shape[1])
    if len(noise) == len(rig.channels):  # encoder rows only (no marker pixels)
        noise = observation_noise(series_list, rig)
    influence = noise_influence(result.lin, noise) * problem.scale[None, :, None]
    influence_half = noise_influence(res.lin, noise) * refit.scale[None, :, None]
    increment = extrapolation_noise_increment(influence, influence_half, order=ORDER)
    amplified = np.where(step.extrapolated, np.maximum(np.diag(increment), 0.0), 0.0)
    say(
        "  refit at h/2: "
        + ", ".join(f"{k}={v:.6g}" for k, v in zip(names, half, strict=True))
        + ("" if status.converged else " (its convergence test failed: not extrapolated)")
    )
    return StepRefit(step.values, step.std, amplified, half, step.extrapolated, status)


def observation_noise(series_list, rig) -> np.ndarray:
    """Per encoder channel, the data's own noise in the observation rows' weighted units
    (``residuals.data_noise`` over the stated σ_y; the stated noise where it cannot be
    measured), pooled over the series by the largest."""
    out = np.ones(len(rig.channels))
    for i, sigma in enumerate(np.asarray(rig.sensor_noise, float)):
        measured = [data_noise(s["y"][:, i], s["present"][:, i]) for s in series_list]
        measured = [m for m in measured if np.isfinite(m)]
        if measured:
            out[i] = max(measured) / sigma
    return out
