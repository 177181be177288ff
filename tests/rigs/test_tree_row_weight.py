"""The extrapolation in the dry friction's row weight α (``rigs.models.tree_row_weight``):
exact on a bias linear in α, the box and held parameters respected, and the noise increment
equal to the sampled spread of the extrapolated value."""

import numpy as np

from physid.rigs.models.tree_row_weight import ALPHAS, MODEL_ALPHA, extrapolate, noise_increment


def test_a_bias_linear_in_alpha_is_removed_exactly():
    truth = np.array([3.9e-3, 2.0e-4, 7.5e-3])
    slope = np.array([-7.4e-7, 1.0e-7, -2.0e-6])  # per unit of α, the coverage pendulum's sizes

    def at(alpha):
        return truth + slope * (alpha - MODEL_ALPHA)

    lower, upper = np.zeros(3), np.full(3, 1.0)
    values, std, inside = extrapolate(at(ALPHAS[0]), at(ALPHAS[1]), lower, upper, np.zeros(3, bool))
    # Linear in α: the line through the two fits meets the truth to round-off (1e-15 relative
    # of values ~1e-3).
    np.testing.assert_allclose(values, truth, rtol=1e-12)
    assert inside.all()
    # The remainder's std is the correction's size over √3 (a rectangular bound).
    correction = np.abs(at(ALPHAS[0]) - truth)
    np.testing.assert_allclose(std, correction / np.sqrt(3.0), rtol=1e-9)


def test_a_value_the_line_would_take_out_of_the_box_or_a_held_one_keeps_its_fit():
    v0, v1 = np.array([1e-5, 0.5, 0.5]), np.array([3e-5, 0.4, 0.4])
    lower, upper = np.zeros(3), np.ones(3)
    held = np.array([False, False, True])
    values, std, inside = extrapolate(v0, v1, lower, upper, held)
    # The damping's line ends below 0: it keeps its fit at α₀ with the whole correction as std.
    assert values[0] == v0[0] and not inside[0]
    np.testing.assert_allclose(std[0], 2e-5, rtol=1e-12)
    assert inside[1] and np.isclose(values[1], 0.6)
    # Held on a bound: the bound is not a measurement, nothing is extrapolated or added.
    assert values[2] == v0[2] and std[2] == 0.0 and not inside[2]


def test_noise_increment_is_the_sampled_spread_of_the_extrapolated_value():
    rng = np.random.default_rng(0)
    n, p, m = 40, 3, 2
    g0 = rng.normal(size=(n, p, m))
    g1 = g0 + 0.3 * rng.normal(size=(n, p, m))  # the second fit responds a little differently
    draws = 20000
    eps = rng.normal(size=(draws, n, m))
    chi0 = np.einsum("kpm,dkm->dp", g0, eps)
    chi1 = np.einsum("kpm,dkm->dp", g1, eps)
    r = (ALPHAS[0] - MODEL_ALPHA) / (ALPHAS[1] - ALPHAS[0])
    sampled = np.cov((chi0 + r * (chi0 - chi1)).T) - np.cov(chi0.T)
    predicted = noise_increment(g0, g1)
    # 20 000 draws: a variance's sampling error is ~√(2/20000) = 1 % of Cov(χ₀) (~40 here);
    # the tolerance is 4 % of it.
    scale = np.trace(np.einsum("kpm,kqm->pq", g0, g0)) / p
    np.testing.assert_allclose(predicted, sampled, atol=0.04 * scale)
