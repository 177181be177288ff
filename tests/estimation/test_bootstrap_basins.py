"""Competing local minima of the drop's multi-start (``drop_checks.basins``) and the std that
covers them (``drop_checks.basin_spread``), on hand-made solution lists: which solutions
count as another basin that the data cannot reject, and how far the std widens."""

import numpy as np
import pytest

from physid.rigs.models.drop_checks import BASIN_CHI2, basin_spread, basins

BEST = {"objective": 52.31, "j_over_m": 744.3e-6, "mu": 0.3065}
STD = [11.6e-6, 0.0049]


def _solution(objective, jm_mm2, mu, success=True):
    return {"objective": objective, "j_over_m": jm_mm2 * 1e-6, "mu": mu, "success": success}


def test_the_chi2_threshold_is_the_95_percent_quantile_for_two_parameters():
    # P(chi2_2 <= x) = 1 - exp(-x / 2)
    assert 1 - np.exp(-BASIN_CHI2 / 2) == pytest.approx(0.95, abs=1e-4)


def test_only_distinct_solutions_within_the_threshold_compete():
    starts = [
        {
            "solutions": [
                _solution(64.63, 735.6, 0.3653),  # seed 4's other basin: 2 x 12.3 > 5.99
                _solution(52.37, 744.3, 0.3065),  # the fit itself
                _solution(52.40, 746.0, 0.3070),  # same basin: within one std
            ]
        },
        {
            "solutions": [
                _solution(53.50, 700.0, 0.3300),  # 2 x 1.19 = 2.4 < 5.99: 3.8 / 4.8 std off
                _solution(53.60, 701.0, 0.3310),  # the same other basin again
                _solution(50.00, 600.0, 0.5, success=False),  # no convergence test passed
            ]
        },
    ]
    found = basins(starts, BEST, STD)
    assert len(found) == 1
    assert found[0]["j_over_m"] == pytest.approx(700e-6)
    assert found[0]["delta_chi2"] == pytest.approx(2 * (53.50 - 52.31))
    # the larger of J/m's 3.8 and mu's 4.8 std
    assert found[0]["distance_std"] == pytest.approx((0.3300 - 0.3065) / 0.0049)
    # a single-start fit (one solution, the fit's own) has no competitor
    assert basins([{"solutions": [_solution(52.31, 744.3, 0.3065)]}], BEST, STD) == []
    # mu without a std (only a lower bound) does not make a basin distinct
    near_jm = [{"solutions": [_solution(53.0, 746.0, 0.9)]}]
    assert basins(near_jm, BEST, [11.6e-6, np.inf]) == []


def test_the_widened_std_covers_the_competing_basin_and_flags_a_far_one():
    values = [BEST["j_over_m"], BEST["mu"]]
    near = {"j_over_m": values[0] + 15e-6, "mu": values[1]}  # 1.3 std away in J/m
    far = {"j_over_m": values[0], "mu": values[1] + 0.03}  # 6 std away in mu
    std, flagged = basin_spread(values, STD, [near, far])
    # the std of an equal mixture of the two basins: sqrt(std^2 + (d/2)^2)
    np.testing.assert_allclose(std, np.hypot(STD, [7.5e-6, 0.015]))
    assert list(flagged) == [False, True]
    # each basin is within 2 widened std of the reported value
    assert 15e-6 <= 2 * std[0] and 0.03 <= 2 * std[1]
    same, none = basin_spread(values, STD, [])
    np.testing.assert_allclose(same, STD) and not none.any()


def test_a_far_competing_basin_makes_the_parameter_not_identifiable():
    from physid.estimation.estimate import ParameterEstimate
    from physid.rigs.models.ellipse_drop import multimodal_flags

    params = {
        "J_over_m": ParameterEstimate(744.3e-6, 13e-6, "m^2", True),
        "mu": ParameterEstimate(0.3065, 0.016, "1", True),
        "restitution": ParameterEstimate(0.19, 0.03, "1", True),
    }
    competing = [{"j_over_m": 759.3e-6, "mu": 0.3365}]
    out = multimodal_flags(params, [False, True], competing)
    assert out["J_over_m"] is params["J_over_m"] and out["restitution"].identifiable
    mu = out["mu"]
    assert not mu.identifiable and mu.reason.startswith("multimodal")
    assert "0.3365" in mu.reason and mu.value == 0.3065 and mu.std == 0.016
    # nothing far: nothing changes
    assert multimodal_flags(params, [False, False], competing) == params
