"""Does the reported std cover the truth? (issue 24) 50 synthetic pendulum datasets with
independent noise (0.5 mrad) and a known model error (``rigs.pipeline.coverage.PENDULUM``:
data at h = 0.1 ms, the estimator at 2 ms); ``benchmarks/bench_std_coverage.py`` prints the
same table. Slow: 50 identifications, each with its h/2 refit (1289 s in all on the shared
2-core machine).

The study runs with ``[method] step_extrapolation = true`` (``PENDULUM``; off by default, see
docs/validation.md). Measured 2026-11-25 (before the observation-only white meat and the
extrapolation's own noise): with the step's bias removed by the h/2 refit (Richardson) and
b's bound released, within 1 / 2 reported std: inertia 72 % / 100 %, damping 84 % / 98 %
(11 on the bound, counted one-sidedly), friction 80 % / 96 %. With this code, on the 14
seeds re-fitted in its session (0–6, 25–31; the full 50 are not re-run): 79 / 100 %,
86 / 100 %, 86 / 100 % (the code before on the same seeds: 79 / 100, 86 / 93, 79 / 86 %),
docs/validation.md. Damping and friction over-cover (more than 76 % within 1 std): the box
b ≥ 0 clips 22 % of the datasets and narrows b's and μ's spread below the unconstrained
linearized one, which the fits inside the box match (correlation 0.999). The issue's
60–76 % band is recorded for them as an expected failure (strict: it must be revisited
the day it passes).
"""

import pytest

from physid.rigs.pipeline.coverage import PENDULUM, at_step, coverage, run_case

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def rows():
    return run_case(PENDULUM, range(50))


def test_reported_std_covers_every_class_within_two_std(rows):
    assert all(r["converged"] for r in rows)
    reported, printed = coverage(rows), coverage(at_step(rows, "white"))
    # The step's bias of J is 5 std of (3.31) as printed at h (none within 2 std) …
    assert printed["inertia"]["within_2_std"] < 0.1
    for cls, c in reported.items():
        # … and every class is within 2 reported std in at least 95 % of the datasets (the
        # issue's figure; 50 datasets: a calibrated std misses it by chance in 24 % of
        # studies, so the margin is the measured 98–100 %).
        assert c["within_2_std"] >= 0.95, (cls, c)
        assert c["n"] + c["flagged"] == 50 and c["flagged"] == 0, (cls, c)  # none left out


def test_inertia_std_is_calibrated(rows):
    """The bias removed, J's error is no longer the same 1.2 std in every dataset: 60–76 %
    within 1 std (68 % for a calibrated std; with 50 datasets the binomial spread of the
    fraction is ±6.6 %, so the band is about ±1.2 of it)."""
    c = coverage(rows)["inertia"]
    assert 0.60 <= c["within_1_std"] <= 0.76, c


@pytest.mark.xfail(
    strict=True,
    reason="measured: damping and friction over-cover (more than 76 % within 1 std)",
)
def test_reported_std_is_calibrated_per_parameter_class(rows):
    for cls, c in coverage(rows).items():
        assert 0.60 <= c["within_1_std"] <= 0.76, (cls, c)
        assert c["within_2_std"] >= 0.95, (cls, c)
