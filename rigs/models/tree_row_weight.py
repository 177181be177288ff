"""The tree estimator's dry friction where its fit cannot converge: two fits with the friction
impulse weighted α = 0.7 and 0.9 toward each step's first row, extrapolated linearly in α to
the model's α = ½ (issue 24).

Why (``dynamics.variational_friction``): with α = ½ a sticking joint's friction impulses can
alternate about their mean without changing any position, so while a joint sticks (a log
that ends at rest, or a creeping stop) every other step sits on the stick threshold, the
residual's piece switches there, and LM ends "stalled" near the answer: on MuJoCo's two-swing
friction pendulum (tests/estimation/test_tree_friction.py) LM at α = ½ stopped with b +58 %
from the default start, and even started from the α = 0.7 solution its Gauss–Newton test
failed (one more step "would lower the cost by 0.21 of itself"). With
α ≥ 0.7 the alternation decays by (1 − α)/α ≤ 0.43 per step and LM converges (J −0.004 %,
b −0.7 %, f_c +0.16 % at α = 0.7).

The price of α > ½ is a friction that switches (α − ½) h early at each reversal: a bias
linear in α. Measured on the coverage pendulum (noise-free, fitted at h = 2 ms), J's error
was −0.6, −4.3, −7.9 and −19e-5 relative at α = 0.5, 0.6, 0.7 and 1.0: linear to 3 % of the
span, so

    χ(½) = χ(α₀) + r (χ(α₀) − χ(α₁)),   r = (α₀ − ½)/(α₁ − α₀)  (= 1 for 0.7 and 0.9)

recovers the α = ½ value from two fits that converge. What the line may miss is counted as
in ``estimation.step_bias``: the remainder is bounded by the correction r |χ(α₀) − χ(α₁)|,
a rectangular distribution on that bound (GUM 4.3.7, std bound/√3). The two fits see the same
samples, so the extrapolated value's noise is Σ_k ((1 + r) G₀ − r G₁)_k (…)ᵀ (G the noise
influence of each fit), more than χ(α₀)'s alone: the increment is added to the std.

Used by ``identify_tree.identify_tree_series`` when its fit did not converge and the rig has
dry friction; no file I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from physid.estimation.step_bias import RECTANGULAR, noise_covariance_increment
from physid.estimation.uncertainty import noise_influence
from physid.rigs.models.tree_step import observation_noise

ALPHAS = (0.7, 0.9)  # the fits' first-row shares: both converge where ½ stalls (above)
MODEL_ALPHA = 0.5


@dataclass(frozen=True)
class RowWeightRefit:
    """Per parameter (SI): ``values`` extrapolated to α = ½ (kept at α₀ where the line would
    leave the box or the parameter is held), the std of the extrapolation's remainder
    (``remainder_std``) and its extra noise variance over χ(α₀)'s (``noise_increment``);
    ``values_at`` the two fits' values; ``problem``, ``result`` and ``status`` of the fit at
    α₀ (its states, covariance and convergence test stand for the report's)."""

    values: np.ndarray
    remainder_std: np.ndarray
    noise_increment: np.ndarray
    values_at: tuple[np.ndarray, np.ndarray]
    extrapolated: np.ndarray
    problem: object
    result: object
    status: object


def has_dry_friction(problem, theta) -> bool:
    """Whether any joint of the problem's rig has a dry-friction limit at θ (Coulomb or
    Stribeck), the only term whose row weight α matters."""
    dofs = problem.params(theta).dofs
    return bool(np.any(np.abs(np.asarray(dofs.frictionloss)) > 0)) or bool(
        np.any(np.abs(np.asarray(dofs.stribeck)) > 0)
    )


def extrapolate(values_0, values_1, lower, upper, held, alphas=ALPHAS):
    """(values, remainder std, extrapolated mask) of the line through χ(α₀) = ``values_0``
    and χ(α₁) = ``values_1`` at α = ½; a parameter ``held`` on a bound or whose extrapolated
    value leaves the box [lower, upper] keeps χ(α₀), with the whole correction as its std."""
    a0, a1 = alphas
    r = (a0 - MODEL_ALPHA) / (a1 - a0)
    values_0, values_1 = np.asarray(values_0, float), np.asarray(values_1, float)
    correction = r * (values_0 - values_1)
    line = values_0 + correction
    inside = (line >= lower) & (line <= upper) & ~np.asarray(held, bool)
    values = np.where(inside, line, values_0)
    std = np.where(inside, RECTANGULAR * np.abs(correction), np.abs(correction))
    return values, np.where(held, 0.0, std), inside


def noise_increment(influence_0, influence_1, alphas=ALPHAS) -> np.ndarray:
    """Cov(χ(½)) − Cov(χ(α₀)) of the data noise (SI, [p, p]) from the two fits' noise
    influence G[n, p, mo] on the same samples (``uncertainty.noise_influence`` times the
    scale)."""
    a0, a1 = alphas
    r = (a0 - MODEL_ALPHA) / (a1 - a0)
    g0, g1 = np.asarray(influence_0, float), np.asarray(influence_1, float)
    return noise_covariance_increment((1.0 + r) * g0 - r * g1, g0)


def refit_at_row_weights(rig, problem, series_list, start_of, held_of, fit_with, status_of, say):
    """The two fits at ``ALPHAS`` and their extrapolation to α = ½, or None when either fit's
    convergence test fails. The first starts from ``start_of(problem)`` (X0, θ0: the
    estimator's own start, momenta chained at that α), the second from the first's positions
    and θ with momenta chained at its own α (a sticking joint's momenta depend on α).
    ``fit_with(problem, X0, θ0)`` runs LM, ``status_of(problem, result)`` its ``Status``,
    ``held_of(problem, result)`` marks the parameters held on a bound or consistency face
    (passed in by ``identify_tree``, which this module must not import)."""
    names = list(problem.structure.names)
    fits = []
    for alpha in ALPHAS:
        weighted = replace(problem, friction_row_weight=alpha)
        if fits:
            theta = fits[-1][1].theta
            q = weighted.positions(fits[-1][1].X)
            X = np.concatenate([q, weighted.chained_momenta(q, theta)], axis=1)
        else:
            X, theta = start_of(weighted)
        result = fit_with(weighted, X, theta)
        status = status_of(weighted, result)
        shown = ", ".join(
            f"{k}={v:.6g}" for k, v in zip(names, result.theta * weighted.scale, strict=True)
        )
        say(f"  friction row weight α = {alpha:g}: {result.reason}; {shown}")
        if not status.converged:
            say(f"  α = {alpha:g} did not pass its convergence test either: not extrapolated")
            return None
        fits.append((weighted, result, status))
    (p0, r0, s0), (p1, r1, _) = fits
    lower, upper = problem.lower * problem.scale, problem.upper * problem.scale
    v0, v1 = r0.theta * p0.scale, r1.theta * p1.scale
    values, remainder, inside = extrapolate(v0, v1, lower, upper, held_of(p0, r0))
    noise = np.ones(np.asarray(r0.lin.obs_r).shape[1])
    if len(noise) == len(rig.channels):  # encoder rows only (no marker pixels)
        noise = observation_noise(series_list, rig)
    g0 = noise_influence(r0.lin, noise) * p0.scale[None, :, None]
    g1 = noise_influence(r1.lin, noise) * p1.scale[None, :, None]
    extra = np.where(inside, np.maximum(np.diag(noise_increment(g0, g1)), 0.0), 0.0)
    say(
        "  extrapolated to α = ½: "
        + ", ".join(f"{k}={v:.6g}" for k, v in zip(names, values, strict=True))
    )
    return RowWeightRefit(values, remainder, extra, (v0, v1), inside, p0, r0, s0)
