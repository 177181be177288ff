"""Richardson extrapolation of the step's bias (``estimation.step_bias``): known answers for a
scheme whose error is a polynomial in h."""

import numpy as np
import pytest

from physid.estimation.step_bias import (
    RECTANGULAR,
    extrapolation_noise_increment,
    richardson,
)


def shadow(truth, a, c, h):
    """χ(h) = χ* + a h + c h²: a first-order scheme's shadow parameter."""
    return truth + a * h + c * h**2


def test_a_first_order_bias_is_removed_exactly():
    truth, a, h = np.array([3.9e-3, 2e-4]), np.array([-5e-3, 1e-2]), 2e-3
    step = richardson(shadow(truth, a, 0, h), shadow(truth, a, 0, h / 2), [0, 0], [1, 1])
    np.testing.assert_allclose(step.values, truth, rtol=1e-12)
    assert step.extrapolated.all()
    np.testing.assert_allclose(step.change, a * h / 2, rtol=1e-9)


@pytest.mark.parametrize("c_ratio", [-0.4, -0.2, 0.2, 0.4])
def test_the_second_order_remainder_lies_within_the_bound_its_std_stands_for(c_ratio):
    """|c| h ≤ 0.4 |a| (the second-order term at h at most 0.4 of the first): the remainder
    −c h²/2 is within ±|d|, the bound whose rectangular std is |d|/√3 (at −0.4 exactly on
    it: d = a h/2 − 0.3 a h = a h/5, remainder a h/5)."""
    truth, a, h = 1.0, 0.1, 0.01
    c = c_ratio * a / h
    step = richardson([shadow(truth, a, c, h)], [shadow(truth, a, c, h / 2)], [0], [2])
    remainder = step.values[0] - truth
    assert remainder == pytest.approx(-c * h**2 / 2, rel=1e-9)
    assert abs(remainder) <= abs(step.change[0]) * (1 + 1e-9)
    assert step.std[0] == pytest.approx(RECTANGULAR * abs(step.change[0]))


def test_a_correction_that_leaves_the_box_keeps_the_value_at_h_and_its_whole_bias():
    """A damping whose d is noise: 2χ(h/2) − χ(h) < 0 is no damping; χ(h) is kept with 2|d|
    (its first-order bias) as the step's std."""
    step = richardson([2e-4], [0.5e-4], [0.0], [np.inf])  # 2χ(h/2) − χ(h) = −1e-4
    assert not step.extrapolated[0]
    assert step.values[0] == 2e-4
    assert step.std[0] == pytest.approx(3e-4)


def test_a_parameter_held_on_its_bound_stays_there():
    step = richardson([0.0, 1.0], [1e-5, 1.1], [0.0, 0.0], [1.0, 2.0], held=[True, False])
    assert step.values[0] == 0.0 and step.std[0] == 0.0 and not step.extrapolated[0]
    assert step.values[1] == pytest.approx(1.2)


def test_the_extrapolated_noise_is_the_two_fits_response_to_the_same_samples():
    """δχ(h) = Σ_k G_k ε_k and δχ(h/2) = Σ_k G'_2k ε_k for the same white samples ε_k
    (the refit's odd steps carry none): the increment is Cov(2δχ(h/2) − δχ(h)) −
    Cov(δχ(h)), checked against 200 000 draws (Monte Carlo: the sample covariance is within
    3 % of the exact one at that size; 5 % allowed)."""
    rng = np.random.default_rng(0)
    n, p, mo = 6, 2, 1
    g = rng.normal(size=(n, p, mo))
    g_half = np.zeros((2 * n - 1, p, mo))
    g_half[::2] = 1.3 * g + 0.4 * rng.normal(size=(n, p, mo))
    g_half[1::2] = rng.normal(size=(n - 1, p, mo))  # no sample there: must not count
    increment = extrapolation_noise_increment(g, g_half)
    eps = rng.normal(size=(200_000, n, mo))
    d_h = np.einsum("kpm,skm->sp", g, eps)
    d_r = 2 * np.einsum("kpm,skm->sp", g_half[::2], eps) - d_h
    np.testing.assert_allclose(increment, np.cov(d_r.T) - np.cov(d_h.T), rtol=0.05, atol=0.05)
    # A refit that responds to the noise as the fit does adds nothing: 2G − G = G.
    same = np.zeros_like(g_half)
    same[::2] = g
    np.testing.assert_allclose(extrapolation_noise_increment(g, same), 0.0, atol=1e-12)


def test_the_two_fits_must_see_the_same_samples():
    with pytest.raises(ValueError, match="does not match"):
        extrapolation_noise_increment(np.zeros((4, 2, 1)), np.zeros((9, 2, 1)))


def test_a_second_order_bias_is_removed_and_the_h4_remainder_lies_within_the_bound():
    """The tree's midpoint rule (order 2): χ(h) = χ* + a h² + c h⁴. The h² term is removed
    exactly, the remainder is −c h⁴/4, within |d|/3 (the rectangular bound) for
    |c| h² ≤ 0.4 |a|; outside the box χ(h) keeps its whole bias 4|d|/3."""
    truth, a, h = 1.0, 3.0, 0.01
    for c_ratio in (0.0, -0.4, 0.4):
        c = c_ratio * a / h**2

        def chi(step, c=c):
            return truth + a * step**2 + c * step**4

        step = richardson([chi(h)], [chi(h / 2)], [0], [2], order=2)
        assert step.values[0] - truth == pytest.approx(-c * h**4 / 4, abs=1e-15)
        assert abs(step.values[0] - truth) <= abs(step.change[0]) / 3 * (1 + 1e-9)
        assert step.std[0] == pytest.approx(RECTANGULAR * abs(step.change[0]) / 3)
    inside = richardson([1e-5], [4e-5], [0.0], [1.0], order=2)  # (16e-5 − 1e-5)/3 = 5e-5
    assert inside.extrapolated[0] and inside.values[0] == pytest.approx(5e-5)
    low = richardson([4e-5], [0.5e-5], [0.0], [1.0], order=2)  # (2e-5 − 4e-5)/3 < 0: out
    assert not low.extrapolated[0] and low.values[0] == 4e-5
    assert low.std[0] == pytest.approx(4 / 3 * 3.5e-5)


def test_the_second_order_noise_increment_weighs_the_two_fits_4_3_and_minus_1_3():
    rng = np.random.default_rng(1)
    g = rng.normal(size=(5, 2, 1))
    g_half = np.zeros((9, 2, 1))
    g_half[::2] = rng.normal(size=(5, 2, 1))
    combined = (4 * g_half[::2] - g) / 3
    expected = np.einsum("kpm,kqm->pq", combined, combined) - np.einsum("kpm,kqm->pq", g, g)
    np.testing.assert_allclose(extrapolation_noise_increment(g, g_half, order=2), expected)


def test_the_tree_series_at_half_step_keeps_the_samples_on_the_even_steps():
    """``step_bias.halve_series``: the refit sees the fit's samples and no others (odd steps
    weight 0), the inputs held over both halves (also with no actuator: u[n−1, 0]), the
    fitted angles as the start."""
    from physid.estimation.step_bias import halve_series

    n = 5
    grid = 0.002 * np.arange(n)
    y = np.arange(n, dtype=float)[:, None]
    series = {"grid": grid, "y": y, "present": np.ones((n, 1), bool), "init": y,
              "u": np.zeros((n - 1, 0))}  # fmt: skip
    half = halve_series(series, 2 * y)
    assert half["grid"] == pytest.approx(0.001 * np.arange(2 * n - 1))
    assert np.array_equal(half["y"][::2], y) and not half["present"][1::2].any()
    assert half["present"][::2].all() and half["u"].shape == (2 * n - 2, 0)
    assert half["init"][1:, 0] == pytest.approx(np.arange(1, 2 * n - 1, dtype=float))
    driven = halve_series({**series, "u": np.arange(n - 1, dtype=float)[:, None]}, y)
    assert driven["u"][:, 0].tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
