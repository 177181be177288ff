"""The estimator's step as a known model error, removed by Richardson extrapolation (issue 24).

The identified values are shadow parameters of the discrete model at the step h (Marklund et
al. Section 4.7): χ(h) = χ* + a h + O(h²), a bias the linearized covariance knows nothing
about and the same in every dataset of one motion. A refit at h/2 measures the first-order
term: d = χ(h) − χ(h/2) ≈ a h/2, so

    χ_R = 2 χ(h/2) − χ(h) = χ(h/2) − d                                   (Richardson)

has no first-order bias. What it may still miss is the second-order term, −c h²/2 for
χ(h) = χ* + a h + c h², while d = a h/2 + 3 c h²/4. With h in the asymptotic range (the
second-order term at h at most 0.4 of the first, |c| h ≤ 0.4 |a|) the remainder is at most
|d| (equal at c h = −0.4 a); the remainder of J measured below is 0.5 |d|. Only this bound is
known, so the remainder counts as a rectangular distribution on ±|d|, standard uncertainty
|d|/√3 (GUM, JCGM 100:2008, 4.3.7), added in quadrature to the linearized std.

Measured over 50 pendulum datasets (docs/validation.md): J's step bias at h = 2 ms is −0.29 %
(1.2 reported std of χ(h)), d = −0.115 %, and the extrapolated J's error is −0.06 % ± 0.04 %
with a reported std of 0.09 %: 72 % within 1 std, 100 % within 2.

A corrected value that would leave the parameter's box (a damping extrapolated below 0: its d
is mostly noise) is not extrapolated: the value at h is kept with 2|d|, the whole first-order
bias, as its model-error std (first order in h: χ(h) − χ* ≈ 2 d).

A scheme of order p (``order``): χ(h) = χ* + a h^p + …, d ≈ a h^p (1 − 2^−p), so
χ_R = χ(h/2) − d/(2^p − 1), the remainder bounded by that correction |d|/(2^p − 1), and the
whole bias of χ(h) is 2^p |d|/(2^p − 1). The tree estimator's midpoint rule is symmetric, its
error a series in h² (p = 2): χ(h) = χ* + a h² + c h⁴ gives χ_R − χ* = −c h⁴/4, within |d|/3
while |c| h² ≤ 0.4 |a| (d ≥ (3/4 − 0.375) |a| h²). For p = 1 these are the formulas above.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

# The standard deviation of a rectangular distribution on ±1 (GUM 4.3.7): the remainder of
# the extrapolation is bounded by |d|, nothing more is known about it.
RECTANGULAR = 1.0 / np.sqrt(3.0)


@dataclass(frozen=True)
class StepCorrection:
    """Per parameter (SI): the value to report, the std of the step's error it still carries
    (to add in quadrature to the linearized std), whether it was extrapolated, and the
    measured first-order change d = χ(h) − χ(h/2)."""

    values: np.ndarray
    std: np.ndarray
    extrapolated: np.ndarray
    change: np.ndarray


def richardson(
    values_h, values_half, lower, upper, held=None, allowed=None, order: int = 1
) -> StepCorrection:
    """χ(h) corrected by the refit at h/2 (SI values ``values_h``, ``values_half``; the box
    ``lower``, ``upper``). ``held`` marks parameters on a bound (their value is the bound,
    not a measurement: kept as it is, with no step std); ``allowed`` (default all) the
    parameters that may be extrapolated (the others keep χ(h) and 2|d|, as outside the box:
    a caller's own constraint, such as physical consistency, ruled the extrapolation out).
    ``order``: the scheme's order p in h (1: SPOOK, 2: the tree's midpoint rule)."""
    values_h, values_half, lower, upper = (
        np.asarray(a, float) for a in (values_h, values_half, lower, upper)
    )
    held = np.zeros(len(values_h), bool) if held is None else np.asarray(held, bool)
    d = values_h - values_half
    r = 2.0**order - 1.0
    extrapolated_values = values_half - d / r
    inside = (extrapolated_values >= lower) & (extrapolated_values <= upper) & ~held
    if allowed is not None:
        inside &= np.asarray(allowed, bool)
    values = np.where(inside, extrapolated_values, values_h)
    std = np.where(inside, RECTANGULAR * np.abs(d) / r, (r + 1.0) / r * np.abs(d))
    std = np.where(held, 0.0, std)
    return StepCorrection(values, std, inside, d)


def extrapolation_noise_increment(influence_h, influence_half, order: int = 1) -> np.ndarray:
    """Cov(2χ(h/2) − χ(h)) − Cov(χ(h)) of the data noise (SI, [p, p]), from each fit's noise
    influence G[n, p, mo] (``estimation.uncertainty.noise_influence`` times the scale) on the
    same samples: the refit's grid has 2n − 1 steps, its observations on the even ones.

    Why: the two fits see the same noise, so the extrapolated value's noise is
    Σ_k (2G'_k − G_k) (2G'_k − G_k)ᵀ, not χ(h)'s. The refit at h/2 responds more to the noise
    than the fit at h (its states absorb less), and the extrapolation doubles that
    response: over the 50 coverage pendulums, J's spread 0.88e-6 at h, 1.39e-6 extrapolated;
    μ's 2.25e-4 and 2.94e-4 (docs/validation.md). The linearized std at h would under-cover
    the extrapolated value by that much. ``order`` p: the combination is
    (2^p χ(h/2) − χ(h))/(2^p − 1) (``richardson``)."""
    g = np.asarray(influence_h, float)
    g_half = np.asarray(influence_half, float)[::2]
    if g_half.shape != g.shape:
        raise ValueError(f"refit influence {g_half.shape} does not match the fit's {g.shape}")
    r = 2.0**order - 1.0
    return noise_covariance_increment(((r + 1.0) * g_half - g) / r, g)


def noise_covariance_increment(combined, base) -> np.ndarray:
    """Σ_k C_k C_kᵀ − Σ_k G_k G_kᵀ (SI, [p, p]): the data-noise covariance a combination of
    fits on the same samples has beyond the reported fit's, from the noise influence
    ``combined`` of the combination and ``base`` of that fit ([n, p, mo] each: δθ = Σ_k G_k
    ε_k). Used by the step's extrapolation here and the friction row weight's
    (``rigs.models.tree_row_weight``)."""
    c, g = np.asarray(combined, float), np.asarray(base, float)
    return np.einsum("kpm,kqm->pq", c, c) - np.einsum("kpm,kqm->pq", g, g)


def halve_series(series: dict, fitted_angles: np.ndarray) -> dict:
    """``series`` (a log on the estimator's grid: ``grid`` s, ``y``, ``present``, ``u``) on
    the grid of half its step, for the refit at h/2: observations on the even steps (weight 0
    on the odd ones), inputs held over both halves (any number of columns), ``fitted_angles``
    [n, k] interpolated as the initial angles. Used by the SPOOK and the tree estimators."""
    grid = series["grid"]
    n = len(grid)
    fine = np.linspace(grid[0], grid[-1], 2 * n - 1)
    y = np.zeros((2 * n - 1, series["y"].shape[1]))
    y[::2] = series["y"]
    present = np.zeros(y.shape, bool)
    present[::2] = series["present"]
    init = np.column_stack([np.interp(fine, grid, a) for a in np.asarray(fitted_angles).T])
    u = np.repeat(np.asarray(series["u"]), 2, axis=0)
    return {"grid": fine, "y": y, "present": present, "init": init, "u": u}


def halve_markers(markers):
    """Marker observations (None, one ``estimation.markers.MarkerObservations`` or a list of
    them, one per series) on the grid of half the step, as ``halve_series`` puts the encoder
    samples: grid step k becomes step 2k, the odd steps carry weight 0 (the refit at h/2
    must see the fit's pixel rows, or its noise response cannot be compared with the fit's)."""

    def halve(mk):
        if mk is None:
            return None
        n, m = mk.weight.shape
        uv = np.zeros((2 * n - 1, m, 2))
        uv[::2] = mk.uv
        weight = np.zeros((2 * n - 1, m))
        weight[::2] = mk.weight
        return replace(mk, uv=uv, weight=weight)

    if markers is None or not isinstance(markers, list | tuple):
        return halve(markers)
    return [halve(mk) for mk in markers]
