"""The generic parametric bootstrap loop (estimation.bootstrap) on a problem with a known
answer: the mean of n samples, whose std is sigma / sqrt(n)."""

import numpy as np
import pytest

from physid.estimation.bootstrap import MIN_DRAWS, parametric_bootstrap

N, SIGMA = 50, 0.2


def _mean_refit(y):
    return np.array([y[:, 0].mean(), y[:, 1].mean()]), True, 1


def test_bootstrap_std_of_a_mean_is_sigma_over_sqrt_n_and_reproducible():
    mean = np.zeros((N, 2))
    calls = []
    boot = parametric_bootstrap(
        mean, [SIGMA, 2 * SIGMA], _mean_refit, ("a", "b"), 400, seed=7,
        progress=lambda done, total: calls.append((done, total)),
    )  # fmt: skip
    # 400 draws: the sample std's relative error is 1/sqrt(2 * 399) = 3.5 %; 12 % is 3.4 of it.
    np.testing.assert_allclose(boot.std, [SIGMA, 2 * SIGMA] / np.sqrt(N), rtol=0.12)
    # the central 95 % interval of a normal spread is +- 1.96 std (15 %: percentiles of 400
    # draws scatter more than the std)
    np.testing.assert_allclose(
        np.diff(boot.interval, axis=1).ravel() / 2, 1.96 * boot.std, rtol=0.15
    )
    assert calls[0] == (1, 400) and calls[-1] == (400, 400) and len(calls) == 400
    again = parametric_bootstrap(mean, [SIGMA, 2 * SIGMA], _mean_refit, ("a", "b"), 400, seed=7)
    np.testing.assert_array_equal(again.draws, boot.draws)
    other = parametric_bootstrap(mean, [SIGMA, 2 * SIGMA], _mean_refit, ("a", "b"), 400, seed=8)
    assert not np.array_equal(other.draws, boot.draws)
    d = boot.to_dict()
    assert d["draws_requested"] == d["draws_succeeded"] == 400 and len(d["draws"]) == 400


def test_failed_refits_are_left_out_and_too_few_give_no_std():
    def half_fail(y):
        return np.array([y.mean()]), bool(y[0, 0] > 0), 3

    boot = parametric_bootstrap(np.zeros((N, 1)), SIGMA, half_fail, ("a",), 40, seed=1)
    assert 0 < boot.success.sum() < 40
    assert np.isfinite(boot.std[0])
    np.testing.assert_array_equal(np.isnan(boot.draws[:, 0]), False)  # kept, but not counted

    def never(y):
        return np.array([np.nan]), False, 3

    boot = parametric_bootstrap(np.zeros((N, 1)), SIGMA, never, ("a",), MIN_DRAWS + 2, seed=1)
    assert np.isinf(boot.std[0]) and boot.to_dict()["std"] == [None]
    with pytest.raises(ValueError, match="at least one draw"):
        parametric_bootstrap(np.zeros((N, 1)), SIGMA, never, ("a",), 0)


def test_bias_correction_removes_a_constant_bias_and_keeps_to_the_box():
    # Estimator with a known bias: theta_hat = mean(y) + BETA * var(y) for y ~ N(theta, 1),
    # n = 20, so E[theta_hat] = theta + BETA. The parametric bootstrap re-noises the fitted
    # model (y = theta_hat everywhere) and refits: the refits' median lies about
    # BETA * median(chi2_19 / 19) = 0.96 BETA above theta_hat, so 2 theta_hat - median
    # removes all but ~4 % of BETA. 200 datasets: the mean of the corrected values has a
    # standard error of sqrt(1/20 + 2 BETA^2/19) / sqrt(200) = 0.018; 0.06 is 3.3 of it
    # plus the 0.02 left over. The uncorrected mean is BETA +- 0.018.
    n, beta, rng = 20, 0.5, np.random.default_rng(3)

    def estimate(y):
        return np.array([y[:, 0].mean() + beta * y[:, 0].var(ddof=1)]), True, 1

    raw, fixed = [], []
    for _ in range(200):
        y = rng.standard_normal((n, 1))
        center = estimate(y)[0]
        boot = parametric_bootstrap(
            np.full((n, 1), center[0]), 1.0, estimate, ("theta",), 40,
            seed=int(rng.integers(1 << 30)), center=center,
        )  # fmt: skip
        raw.append(center[0])
        fixed.append(boot.corrected[0])
    assert abs(np.mean(raw) - beta) < 0.06
    assert abs(np.mean(fixed)) < 0.06
    # the corrected value's std adds the median's Monte Carlo error: (pi/2) std^2 / n
    np.testing.assert_allclose(boot.std_corrected, boot.std * np.sqrt(1 + np.pi / 80))
    d = boot.to_dict()
    assert d["corrected"] == [pytest.approx(boot.corrected[0])] and d["center"] == [center[0]]
    # a correction never leaves the parameter's box (a friction coefficient stays >= 0)
    boxed = parametric_bootstrap(
        np.full((n, 1), 0.01), 1.0, estimate, ("mu",), 20, seed=1, center=[0.01],
        bounds=[[0.0, 2.0]],
    )  # fmt: skip
    assert boxed.corrected[0] == 0.0 and boxed.bias[0] > 0.01
    # without a center there is nothing to correct
    plain = parametric_bootstrap(np.zeros((n, 1)), 1.0, estimate, ("theta",), 10, seed=1)
    assert np.isnan(plain.corrected[0]) and plain.to_dict()["corrected"] == [None]


def test_the_walls_draws_give_mus_column_of_the_draws_covariance():
    # Where mu is reported at the wall of the profile (``WallDraws``), the covariance of
    # the refits pairs J/m with the refits' walls, not their fitted mu; a refit whose wall
    # was not found (NaN) is left out of both columns. Known answer: the second column's
    # variance is the walls' sample variance over the refits that have one.
    from dataclasses import replace

    from physid.estimation.bootstrap import WallDraws
    from physid.rigs.models.ellipse_drop import _draws_covariance

    boot = parametric_bootstrap(np.zeros((N, 2)), [SIGMA, SIGMA], _mean_refit, ("a", "b"), 8)
    walls = np.array([0.30, 0.31, np.nan, 0.29, 0.30, 0.32, 0.28, 0.30])
    wall = WallDraws(0.3, walls, float(np.nanstd(walls, ddof=1)), 24)
    boot = replace(boot, extra={"mu_wall": wall})
    have = np.isfinite(walls)
    cov = _draws_covariance(boot, wall)
    assert cov[1, 1] == pytest.approx(np.var(walls[have], ddof=1), rel=1e-12)
    assert cov[0, 0] == pytest.approx(np.var(boot.draws[have, 0], ddof=1), rel=1e-12)
    np.testing.assert_allclose(_draws_covariance(boot), np.cov(boot.draws, rowvar=False))
    d = boot.to_dict()["mu_wall"]
    assert d["draws"][2] is None and d["value"] == 0.3 and d["solves"] == 24
