"""Does the reported std cover the truth? (issue 24) 50 synthetic pendulum datasets with
independent noise (0.5 mrad) and a known model error (``rigs.pipeline.coverage.PENDULUM``:
data at h = 0.1 ms, the estimator at 2 ms); ``benchmarks/bench_std_coverage.py`` prints the
same table. Slow: 50 identifications, each with its h/2 refit (1289 s in all on the shared
2-core machine).

Measured 2026-11-25 (docs/validation.md): the reported std puts 100 % of the inertia errors
within 2 std, where (3.31) as printed put none, but the 1-std fraction is 4 %: the step's
bias of J is the same in every dataset and about 1.2 reported std, so nearly every error lies
just beyond 1 std. The issue's full criterion is therefore recorded as an expected failure
(strict: it must be revisited the day it passes)."""

import pytest

from physid.rigs.pipeline.coverage import PENDULUM, coverage, run_case

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def rows():
    return run_case(PENDULUM, range(50))


def test_reported_std_covers_the_model_error_within_two_std(rows):
    assert all(r["converged"] for r in rows)
    reported, printed = coverage(rows), coverage(rows, "std_white")
    # The step's bias of J is 5 std of (3.31) as printed (none within 2 std); the h/2 refit
    # brings every one within 2 reported std.
    assert printed["inertia"]["within_2_std"] < 0.1
    assert reported["inertia"]["within_2_std"] >= 0.95
    for cls, c in reported.items():  # never worse than (3.31) as printed
        assert c["within_2_std"] >= printed[cls]["within_2_std"], cls


@pytest.mark.xfail(
    strict=True,
    reason="measured: J 4 % within 1 std (a common bias of ~1.2 std), mu 80 % within 2 std",
)
def test_reported_std_is_calibrated_per_parameter_class(rows):
    for cls, c in coverage(rows).items():
        # 68 % and 95 % for a calibrated std; with 50 datasets the binomial spread of the
        # 1-std fraction is ±6.6 %, so the 60–76 % band is about ±1.2 of it.
        assert 0.60 <= c["within_1_std"] <= 0.76, (cls, c)
        assert c["within_2_std"] >= 0.95, (cls, c)
