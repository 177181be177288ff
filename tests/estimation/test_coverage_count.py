"""How the coverage studies count (``rigs.pipeline.coverage.coverage``): fractions within 1
and 2 std per parameter class, one-sided intervals at a bound, flagged parameters apart."""

import math
import warnings

from physid.rigs.pipeline.coverage import coverage


def _row(j, j_std, mu, mu_std, one_sided=None):
    return {
        "values": {"J": j, "mu": mu},
        "truth": {"J": 1.0, "mu": 0.3},
        "std": {"J": j_std, "mu": mu_std},
        "one_sided": one_sided or {},
    }


def test_fractions_within_1_and_2_std_per_class():
    # |z| of J: 0.5, 1.5, 2.5, 0.1 -> 2 of 4 within 1 std, 3 of 4 within 2.
    rows = [_row(1.5, 1.0, 0.3, 0.1), _row(0.7, 0.2, 0.3, 0.1), _row(3.5, 1.0, 0.3, 0.1),
            _row(1.01, 0.1, 0.3, 0.1)]  # fmt: skip
    c = coverage(rows)["inertia"]
    assert (c["n"], c["within_1_std"], c["within_2_std"]) == (4, 0.5, 0.75)
    assert c["median_abs_z"] == (0.5 + 1.5) / 2


def test_a_bound_counts_one_sidedly_and_a_flagged_parameter_not_at_all():
    # mu on its lower bound 0.25 with released std 0.04: the truth 0.3 lies 1.25 std above.
    bound = {"mu": {"side": "lower", "std": 0.04}}
    rows = [_row(1.0, 0.1, 0.25, math.inf, bound), _row(1.0, 0.1, 0.3, math.inf)]
    c = coverage(rows)["friction"]
    assert (c["n"], c["on_bound"], c["flagged"]) == (1, 1, 1)
    assert (c["within_1_std"], c["within_2_std"]) == (0.0, 1.0)


def test_a_class_with_nothing_to_count_is_nan_without_a_warning():
    # mu a lower bound with no std in every dataset (nothing slides: the no-slip throw)
    rows = [_row(1.0, 0.1, 0.9, math.inf), _row(1.05, 0.1, 0.9, math.inf)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # NumPy's "Mean of empty slice" would raise here
        c = coverage(rows)["friction"]
    assert c["n"] == 0 and c["flagged"] == 2 and math.isnan(c["within_1_std"])
