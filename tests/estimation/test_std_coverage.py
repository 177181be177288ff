"""Does the reported std cover the truth? (issue 24) Synthetic pendulum datasets with
independent noise (0.5 mrad) and a known model error (data at h = 0.1 ms, the estimator at
2 ms); ``benchmarks/bench_std_coverage.py`` prints the same tables.

The tree estimator (the default for hinged rigs; ``TREE_PENDULUM``, the tests named
``test_tree_*``): its std is (3.31) with overlapping batch means over windows of 1/10 of the
record, expanded by t_0.975(ν_eff)/1.96 (``estimation.uncertainty``; docs/validation.md, "The
tree estimator's coverage", where the numbers below are measured). The batch means make the
std an estimate with ~13 degrees of freedom, so err/std is Student-t-like and ±2 unexpanded
std covered ~93 %; the factor (≈ 1.06–1.10) makes ±2 std a 95 % interval. One motion
(released from 2 rad, 50 seeds) and many motions (``TREE_PENDULUM_MOTIONS``, each dataset
released from its own angle in 2 ± 0.5 rad, 100 seeds: the binomial sd of a fraction near
95 % is 2.2 % at 100 datasets, 3.1 % at 50). Run 2026-11-26 on the merged code (`-m slow -k
tree`): 9 passed, 3 strict xfails in 382 s wall, 179 s CPU; with the start guard
(``identify_tree.fit_guarded``, 2026-11-26 10:10 UTC) 9 passed, 3 xfailed in 232 s wall.
Per-parameter window rules (data-driven block lengths and lag windows, longer windows where
lower, lugsail, EWC, a kurtosis-corrected ν: ``benchmarks/coverage_meat.py --rules``) were
compared on the same fits and none is better on all three classes (docs/validation.md,
"Per-parameter window rules"), so the three strict xfails stand (re-run then: 9 passed, 3
xfailed, 236 s wall, 174 s CPU).

The SPOOK estimator (``PENDULUM``, the other tests): 50 identifications, each with its h/2
refit (1289 s in all on the shared 2-core machine).

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

from physid.rigs.pipeline.coverage import (
    PENDULUM,
    TREE_PENDULUM,
    TREE_PENDULUM_MOTIONS,
    at_step,
    coverage,
    run_case,
    run_tree_case,
    std_pieces,
    unexpanded,
)

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


# ---------------------------------------------------------------- the tree estimator (default)


@pytest.fixture(scope="module")
def tree_rows():
    """``TREE_PENDULUM``: the same study on the tree estimator with its defaults (data from
    its own integrator at 0.1 ms, identified at 2 ms). 50 fits of a few seconds each after
    one compilation (docs/validation.md)."""
    return run_tree_case(TREE_PENDULUM, range(50))


def test_tree_fits_converge_and_every_parameter_has_a_std(tree_rows):
    assert all(r["converged"] for r in tree_rows)
    assert all(r["verdict"] == "good fit" for r in tree_rows)
    for cls, c in coverage(tree_rows).items():
        # b's truth is 17 std above its bound 0 in this motion: no dataset is clipped, so
        # every class counts all 50 datasets two-sidedly.
        assert c["n"] == 50 and c["flagged"] == 0 and c["on_bound"] == 0, (cls, c)


ONE_MOTION_DAMPING_XFAIL = pytest.mark.xfail(
    strict=True,
    reason="measured: b 40 of 50 within 1 std (80 %, two datasets above the band; 78 % before "
    "the start guard), 49 of 50 within 2; before the coverage factor (1.099) 70 % / 98 %. "
    "For an expanded t_13.4 std the expected fraction is 71 %, with a binomial sd of 6.4 % at "
    "50 datasets",
)


@pytest.mark.parametrize(
    "cls", [pytest.param("damping", marks=ONE_MOTION_DAMPING_XFAIL), "friction"]
)
def test_tree_damping_and_friction_std_is_calibrated(tree_rows, cls):
    """The issue's band per class, as written: 60–76 % within 1 std, ≥ 95 % within 2 std.
    With 50 datasets a calibrated std's fraction within 1 std has a binomial sd of 6.6 %
    (68 % ± 1.2 sd is the band); the seeds are fixed, so the test is deterministic.
    Measured: damping 80 % / 98 %, friction 76 % / 98 % (before the tree's start guard,
    2026-11-26 10:00 UTC: 78 / 98, 74 / 98)."""
    c = coverage(tree_rows)[cls]
    assert 0.60 <= c["within_1_std"] <= 0.76, c
    assert c["within_2_std"] >= 0.95, c


def test_tree_std_varies_as_an_estimate_with_the_batch_means_dof(tree_rows):
    """The hypothesis behind the coverage factor, tested on one motion (where the errors'
    variance is the same in every dataset, so the reported variance's spread over the 50 is
    its own sampling noise): for b and μ the unexpanded variance varies as a variance
    estimate with ν̂ = 2 E[V]²/Var(V) of the order of the overlapping batch means'
    1.5 (B − 1) = 13.5 (the white std alone, ~1500 dof, would give ν̂ in the hundreds), and
    the factor applied is t_0.975(ν_eff)/1.96 with ν_eff just below 13.5 (1.098). The bounds
    are a factor 2 either side: ν̂ from 50 datasets has a sampling error of ~30 %."""
    from physid.estimation.uncertainty import batch_dof, coverage_factor

    pieces = std_pieces(tree_rows)
    nu = batch_dof(10, overlapping=True)
    for name in ("b", "mu"):
        c = pieces[name]
        assert nu / 2 <= c["dof_from_spread"] <= 2 * nu, (name, c)
        k_m = coverage_factor([nu])[0]  # ν_eff ≤ ν_M: k at least the batch means' own
        assert k_m - 1e-9 <= c["coverage_factor"] <= coverage_factor([nu / 2])[0], (name, c)
        assert 0.0 < c["excess_share"] < 1.0, (name, c)


def test_tree_inertia_bias_is_noise_not_model_error(tree_rows):
    """Before the split dry friction J's error was −7.6e-7 kg m² in every dataset (2.3
    reported std: 0 % within 1 std): the friction switched half a step early at every
    turning point. Now its mean error over the 50 is below a third of its spread (measured
    −2.5e-8 against 1.2e-7; a mean over 50 draws has an sd of 0.14 spread, so a third is
    2.3 of its sd) and every dataset is within 2 std."""
    import numpy as np

    err = np.array([r["values"]["J"] - r["truth"]["J"] for r in tree_rows])
    assert abs(err.mean()) < err.std() / 3, (err.mean(), err.std())
    assert coverage(tree_rows)["inertia"]["within_2_std"] >= 0.95


@pytest.mark.xfail(
    strict=True,
    reason="measured: on one motion J over-covers (100 % within 1 std, median |z| 0.21): its "
    "batch means count the step's model error in the dynamics rows (about 3/4 of its "
    "variance), which this motion's turning points happen to leave small; over motions "
    "(test_tree_motions_*) the same std gives 77 %; every per-parameter window rule "
    "compared offline leaves it at 92-100 % (benchmarks/coverage_meat.py --rules)",
)
def test_tree_inertia_std_is_calibrated(tree_rows):
    c = coverage(tree_rows)["inertia"]
    assert 0.60 <= c["within_1_std"] <= 0.76 and c["within_2_std"] >= 0.95, c


@pytest.fixture(scope="module")
def tree_motion_rows():
    """``TREE_PENDULUM_MOTIONS``: each dataset released from its own angle in 2 ± 0.5 rad, so
    the step's error (where the turning points fall between grid steps) differs between
    datasets as between a user's experiments. 100 datasets (at 50 the binomial sd of a
    fraction near 95 % is 3.1 %: too coarse to tell 92 % from 95 %)."""
    return run_tree_case(TREE_PENDULUM_MOTIONS, range(100))


def test_tree_motions_fits_converge_or_have_no_std(tree_motion_rows):
    """A fit that did not pass its convergence test reports no finite std (issue 24's flags;
    ``coverage`` counts it as ``flagged``, not as covered). Measured: none of 100 since the
    stalled fits' row-weight fallback (``tree_row_weight``; before it seed 50 stalled, J
    −1.7e-5 kg m² off, and now converges with |z| ≤ 0.86); at most 3 allowed."""
    stalled = [r for r in tree_motion_rows if not r["converged"]]
    assert len(stalled) <= 3, [r["seed"] for r in stalled]
    assert all(r["verdict"] == "good fit" for r in tree_motion_rows if r["converged"])
    for cls, c in coverage(tree_motion_rows).items():
        assert c["flagged"] == len(stalled) and c["n"] == 100 - len(stalled), (cls, c)


MOTIONS_INERTIA_XFAIL = pytest.mark.xfail(
    strict=True,
    reason="measured: J 77 of 100 within 1 std (one dataset above the band), 99 within 2: "
    "it over-covers (sd of z 0.77; its score's autocorrelation turns negative at 35–100 "
    "steps, so windows of 150 overstate its long-run variance), and the coverage factor "
    "(1.098) that brings b and μ to 97–98 % within 2 std lifts J's 1-std fraction 71 → 77 %. "
    "Of the per-parameter window rules compared offline only a flat-top window at n/10 puts "
    "J in the band (71 %), at half the dof, with b and μ 82 / 80 % on one motion and no "
    "better log score: not adopted (docs/validation.md, 'Per-parameter window rules')",
)


@pytest.mark.parametrize(
    "cls", [pytest.param("inertia", marks=MOTIONS_INERTIA_XFAIL), "damping", "friction"]
)
def test_tree_motions_std_is_calibrated(tree_motion_rows, cls):
    """The issue's band per class over 100 motions: 60–76 % within 1 std, ≥ 95 % within 2
    (binomial sd 4.7 % and 2.2 % at 100 datasets). Measured: inertia 77 % / 99 %, damping
    75 % / 98 %, friction 74 % / 97 % (before the start guard 70 / 98, 70 / 97; before the
    coverage factor 94 % within 2 std)."""
    c = coverage(tree_motion_rows)[cls]
    assert 0.60 <= c["within_1_std"] <= 0.76, c
    assert c["within_2_std"] >= 0.95, c


def test_tree_motions_coverage_factor_lifts_two_std_coverage(tree_motion_rows):
    """Before the factor the std's ±2 covered ~93 % for b and μ (the t-like tails of a
    ~13-dof variance estimate, P(|t_13.5| < 2) = 93.4 %); with it the fraction within 2 std
    rises by at least one dataset for damping and friction, and the 1-std fraction stays in
    the band."""
    plain, reported = coverage(unexpanded(tree_motion_rows)), coverage(tree_motion_rows)
    for cls in ("damping", "friction"):
        assert reported[cls]["within_2_std"] > plain[cls]["within_2_std"], (cls, plain, reported)
        assert 0.60 <= reported[cls]["within_1_std"] <= 0.76, (cls, reported[cls])


def test_tree_parameter_on_its_bound_has_no_std_and_a_one_sided_interval():
    """Issue 24's flags on the tree: J's box ending 0.5 % (60 std) below the truth. At
    the bound J is flagged, has no finite std and is not identifiable; its released std (the
    std with the bound released, the one-sided interval [bound − k std, bound]) is finite.
    The coverage study counts such a dataset one-sidedly (``coverage``)."""
    import math

    from physid.rigs.models.identify_tree import identify_tree_series, series_on_grid
    from physid.rigs.pipeline.coverage import tree_recording
    from physid.spec import with_parameters

    spec, rig, log, truth = tree_recording(TREE_PENDULUM)
    spec = with_parameters(spec, {"J": (0.0038, 1e-5, 0.00388)})
    h = spec.method_value("h", "s", 1e-3)
    est, _ = identify_tree_series(spec, rig, [series_on_grid(log, rig, h, "sim")])
    J = est.parameters["J"]
    assert J.at_bound == "upper" and J.value == pytest.approx(0.00388)
    assert not J.identifiable and J.std == math.inf
    assert J.released_std is not None and 0 < J.released_std < 1e-4, J
    for name in ("b", "mu"):  # the others keep a finite std, conditional on J held
        assert math.isfinite(est.parameters[name].std), (name, est.parameters[name])
