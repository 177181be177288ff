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
