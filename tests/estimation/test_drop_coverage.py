"""Does the ellipse drop's std cover the truth? (issue 24) The Section 6.1 throw with μ = 0.3
(0.4 s at 120 fps, IRC truth; the first impact slides, so J/m, μ and restitution are all
identified) fitted from 20 independent noise draws (1 mm, 1 mrad), with the NLP's
linearized std and the parametric bootstrap's (20 refits each);
``benchmarks/bench_drop_coverage.py`` prints the same table (``rigs.pipeline.drop_coverage``).

Measured 2026-11-26 (`-m slow`: 3 passed, 1 xfailed in 2205 s wall, 674 s CPU at load
9-12; the benchmark's seeds 0-19 gave the same table): within 1 / 2 std, bootstrap J/m
65 / 95 %, restitution 75 / 100 %
(both in the issue's band), μ 35 / 65 % (not: two fits in another basin and a +0.005 bias);
linearized J/m 80 / 95 %, μ 55 / 85 %, its J/m std from 2.8 mm² to 10.8 m² over the 20
datasets. docs/validation.md, "The ellipse drop's std".
"""

import numpy as np
import pytest

from physid.rigs.pipeline.drop_coverage import SLIDING, drop_coverage, run_drop_case

pytestmark = pytest.mark.slow

SEEDS = range(20)


@pytest.fixture(scope="module")
def rows():
    return run_drop_case(SLIDING, SEEDS)


def _column(rows, key, name):
    return np.array([r[key][name] for r in rows], dtype=float)


def test_every_fit_slides_and_every_refit_converges(rows):
    assert len(rows) == len(SEEDS) and all(r["slides"] for r in rows)
    assert sum(r["draws_succeeded"] for r in rows) == sum(r["draws"] for r in rows)


def test_bootstrap_std_is_stable_and_matches_the_spread_over_datasets(rows):
    err = np.array([r["values"]["J_over_m"] - r["truth"]["J_over_m"] for r in rows])
    boot = _column(rows, "std_bootstrap", "J_over_m")
    lin = _column(rows, "std_linearized", "J_over_m")
    # The refits' spread is a smooth function of the data (measured 4.8-18.6 mm^2: 3.9x
    # over 20 draws, where B = 20 refits alone scatter a std by +-30 % at 95 %); the
    # linearized std ranged over six orders of magnitude (2.8 mm^2 to 10.8 m^2).
    assert boot.max() / boot.min() < 6.0
    assert lin.max() / lin.min() > 1e3
    # The median bootstrap std matches the spread of J/m over the datasets (measured 6.8 vs
    # 6.4 mm^2); 20 datasets estimate that spread to +-32 % at 95 %, hence the factor 1.5.
    assert 1 / 1.5 < np.median(boot) / np.std(err, ddof=1) < 1.5


def test_bootstrap_std_of_inertia_and_restitution_is_in_the_issues_band(rows):
    table = drop_coverage(rows)["bootstrap"]
    for cls in ("J/m (inertia)", "restitution"):
        c = table[cls]
        # issue 24's band: 60-76 % within 1 std, >= 95 % within 2 (measured 65 / 95 % and
        # 75 / 100 %: 19 of 20 J/m errors within 2 std, the band's edge)
        assert c["n"] == 20 and c["flagged"] == 0, (cls, c)
        assert 0.60 <= c["within_1_std"] <= 0.76 and c["within_2_std"] >= 0.95, (cls, c)


@pytest.mark.xfail(
    strict=True,
    reason="mu's bootstrap std covers the fits in the truth's basin (median 0.0045 against "
    "a spread of 0.0042 over 18 datasets) but not a +0.005 bias (on seeds 3-5 the refits' "
    "mean sits above the fit too: the NLP's own bias) nor two fits (seeds 4 and 8) that "
    "ended in another basin at mu 0.365 (error 0.065, 10-20 bootstrap std): refits "
    "warm-started from a fit stay in its basin. Measured 35 / 65 % within 1 / 2 std "
    "(linearized: 55 / 85 %).",
)
def test_bootstrap_std_of_friction_is_in_the_issues_band(rows):
    c = drop_coverage(rows)["bootstrap"]["mu (friction)"]
    assert 0.60 <= c["within_1_std"] <= 0.76 and c["within_2_std"] >= 0.95, c
