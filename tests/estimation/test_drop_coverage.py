"""Does the ellipse drop's std cover the truth? (issue 24) The Section 6.1 throw with μ = 0.3
(0.4 s at 120 fps, IRC truth at the paper's 1/1200 s; the first impact slides, so J/m, μ
and restitution are all identified) fitted from 50 independent noise draws (1 mm, 1 mrad;
the issue's 50 datasets) by the drop path (``rigs.pipeline.drop_coverage``;
``benchmarks/bench_drop_coverage.py`` prints the same tables; docs/validation.md, "The
ellipse drop's std"):

- **reported**: what estimate.json holds (``ellipse_drop.reported_values``, the drop path's
  own rule): the output-error fit's values and std where its free run follows the frames,
  else the NLP's values corrected by the parametric bootstrap's bias with the refits'
  spread as the std (default; μ, where it slides, read at the wall of the NLP's profile in
  μ with the spread of the refits' own walls), J/m's and μ's widened by the NLP's model
  error; or the NLP's values with the linearized std (``covariance = "linearized"``). On
  this throw the output error is never kept, so the reported numbers are the NLP's.
- the NLP's values with its linearized std and with the parametric bootstrap (20 refits),
  as fitted and bias-corrected (2 fit − median of the refits).

Measured 2026-11-26 and, with μ at the wall, 2026-11-27 (seeds 0-49, Intel Xeon; numbers
in the assertions' comments and xfail reasons; with the allowance's three phases, seeds
0-11 only: J/m 92 %, μ 100 % within 1 std): every fit within 0.02 of the truth's μ; the
reported (default) J/m, μ and restitution above the issue's band at 1 std (82 %, 92 % and
82 %; J/m and restitution over seeds 0-99 77 % and 78 %; restitution's own 400-draw test
below is in it), μ's error half the bias-corrected one's; the linearized std erratic (in
``test_bootstrap_std_is_stable...``). The frames' restitution std is also checked over 400
draws and over 150 varied throws of each kind (default run, ~25 s; the sliding ones a strict
xfail), and the probe of mu that found seed 140's basin (held-out
seeds 100-149; default run, ~10 s). `-m slow`: 8 passed, 5 strict xfails, ~30 min wall on
two worker processes (the study 28 min: the bootstrap's walls cost 3-4 warm solves a refit,
47 s CPU a dataset against ~20 s without; the probe moved no fit of seeds 0-49). Not rerun
whole since the allowance's three phases (2026-11-27), which cost ~3 min CPU a dataset in
all: expect ~75 min wall.

Throws other than the Section 6.1 one (``DropCase.throws``, ten throws from their own
initial states, converged IRC truth; the last tests): 9 of 10 of J/m and of mu within 2
std since the model-error allowance runs at three phases of the NLP's grid (2026-11-27;
before, 2 strict xfails; ~10 min wall on two processes; docs/validation.md, "Varied
throws", "The allowance's phases"), mu 10 of 10 by the study's rows since the second probe
of mu (throw 2; passed 2026-11-27 19:35-19:58 UTC, AMD EPYC, beside a slow MuJoCo test).
Also: the second probe on varied throw 2 (default run, ~10 s) and the allowance of a throw
that lands within its first frame interval (varied throw 16; slow, ~1 min).
"""

from dataclasses import replace

import numpy as np
import pytest

from physid.rigs.models import drop_checks
from physid.rigs.models.drop_checks import BASIN_CHI2
from physid.rigs.pipeline.drop_coverage import (
    NO_SLIP,
    SLIDING,
    DropCase,
    case_spec,
    drop_coverage,
    run_drop_case,
    throw,
)

SEEDS = range(50)


def _restitution_z(case, seeds, throws: bool) -> np.ndarray:
    """|error| / std of the frames' restitution (``drop_checks.frames_restitution``, what
    the drop path reports where the output error is not kept; no fit) over noise draws of
    ``case``'s throw, or over its varied throws (``throws``), one per seed."""
    fixed = None if throws else throw(case)
    z = []
    for seed in seeds:
        _, geometry, t_m, q_true, truth = throw(case, seed) if throws else fixed
        q_m = q_true + np.random.default_rng(seed).standard_normal(q_true.shape) * case.noise
        own = drop_checks.frame_noise(q_m)
        found = drop_checks.impact_consistency(t_m, q_m, geometry, *own)
        eps = drop_checks.frames_restitution(t_m, q_m, geometry, found, *own)
        if eps["value"] is not None:
            z.append(abs(eps["value"] - truth["restitution"]) / eps["std"])
    return np.array(z)


def _assert_in_band(z: np.ndarray, datasets: int) -> None:
    """At least ``datasets`` values of |z|, in the issue's band: 60-76 % within 1 std and at
    least 95 % within 2."""
    assert len(z) >= datasets
    assert 0.60 <= np.mean(z <= 1) <= 0.76 and np.mean(z <= 2) >= 0.95, (
        np.mean(z <= 1),
        np.mean(z <= 2),
    )


def test_the_frames_restitution_std_covers_its_error_over_400_draws():
    # 400 noise draws of the throw's frames in ~3 s. Measured 2026-11-26 with the flights at
    # the impact instant (``drop_flights``; 66 of the 683 impacts, the rest frame
    # differences): 399 of 400 draws resolve a bounce; 74.4 / 97.5 % within 1 / 2 std,
    # median |z| 0.58 (frame differences alone 72 / 97 %; 75 / 97 % before the impacts'
    # spread was taken only where significant; with the former sqrt(2) in place of
    # sqrt(1 + eps^2): 87 / 99 %, over-covering). With 400 draws a fraction near 0.68 is
    # known to +-0.05 (2 binomial sd), so the band's edges are a real test; the seeds are
    # fixed, so it is deterministic.
    _assert_in_band(_restitution_z(SLIDING, range(400), throws=False), 390)


def test_the_frames_restitution_std_covers_its_error_on_varied_no_slip_throws():
    # 150 throws from their own initial states (``DropCase.throws``, converged IRC truth,
    # mu = 0.9: nothing slides, so the bounces are clean), ~5 s. Measured 2026-11-26: all
    # 150 give a restitution; 72.7 / 98.0 % within 1 / 2 std, error +0.0011 +- 0.0098 (mean,
    # sd). The frame differences alone: 144 of 150, 65 / 97 %, -0.017 +- 0.050: they read
    # the lever arm at a frame while the landing ellipse spins up within the interval.
    case = replace(NO_SLIP, throws=True, truth_h=1 / 24000)
    _assert_in_band(_restitution_z(case, range(150), throws=True), 145)


@pytest.mark.xfail(
    strict=True,
    raises=AssertionError,
    reason="varied sliding throws: 57 / 85 % within 1 / 2 std (143 of 150; frame "
    "differences alone 58 / 87 %): most of their first landings are two or three contacts "
    "in consecutive frame intervals, which no two flights meet across, and the frame "
    "differences' std does not see their error (docs/validation.md, 'Varied throws'). "
    "The drop path fits those landings by IRC where the output error is not kept "
    "(drop_landings, not in this estimator): 74 / 89 % over 50 throws, 'Landing fits: "
    "the retry, and the step error'; 74 / 91 % since a kept output error's std is widened "
    "by its difference from its start (throw 1)",
)
def test_the_frames_restitution_std_covers_its_error_on_varied_sliding_throws():
    case = replace(SLIDING, throws=True, truth_h=1 / 24000)
    _assert_in_band(_restitution_z(case, range(150), throws=True), 140)


@pytest.fixture(scope="module")
def rows():
    # two processes: the study costs ~25 min CPU
    return run_drop_case(SLIDING, SEEDS, workers=2)


def _column(rows, key, name):
    return np.array([r[key][name] for r in rows], dtype=float)


def _errors(rows, key, name):
    return np.array([r[key][name] - r["truth"][name] for r in rows])


@pytest.mark.slow
def test_every_fit_slides_and_every_refit_converges(rows):
    assert len(rows) == len(SEEDS) and all(r["slides"] for r in rows)
    assert sum(r["draws_succeeded"] for r in rows) == sum(r["draws"] for r in rows)


@pytest.mark.slow
def test_the_multistart_on_mu_keeps_every_fit_in_the_truths_basin(rows):
    # Before the second initial mu (0.2), seeds 4 and 8 ended at mu 0.365 (error 0.065,
    # 10-20 bootstrap std); now every error is below 0.012 (measured largest 0.0110, seed 6;
    # the spread over seeds is 0.0033), and a solution of the multi-start within the
    # chi^2(2) 95 % threshold of the best lies less than 1.5 of the reported std away (the
    # same basin, its std widened by basin_spread): measured one of 50, seed 48, 1.02 std.
    # (With the linearized std, erratic, seeds 12 and 15 had one 1.005 and 1.03 std away on
    # the Intel Xeon of 2026-11-26, none on the AMD EPYC of the first study.)
    mu_err = _errors(rows, "values", "mu")
    assert np.abs(mu_err).max() < 0.02, mu_err
    far = [(r["seed"], b) for r in rows for b in r["basins"] if b["distance_std"] >= 1.5]
    assert far == [], far
    # seed 4: the first start's 0.365 is recorded and rejected (twice the objective 24.5
    # above the fit's, against a threshold of 5.99)
    seed4 = next(r for r in rows if r["seed"] == 4)
    others = [s for st in seed4["starts"] for s in st["solutions"] if abs(s["mu"] - 0.365) < 0.01]
    assert others and min(2 * (s["objective"] - seed4["objective"]) for s in others) > BASIN_CHI2


@pytest.mark.slow
def test_bootstrap_std_is_stable_and_matches_the_spread_over_datasets(rows):
    err = _errors(rows, "values_corrected", "J_over_m")
    boot = _column(rows, "std_bootstrap", "J_over_m")
    lin = _column(rows, "std_linearized", "J_over_m")
    # The refits' spread is a smooth function of the data (measured 3.8-11.7 mm^2 over the
    # 50 draws, where B = 20 refits alone scatter a std by +-30 % at 95 %); the linearized
    # std ranged over seven orders of magnitude (2.4 mm^2 to 1.5e13 mm^2 over 100 draws:
    # IPOPT's barrier KKT matrix at degenerate complementarity rows, docs/validation.md).
    assert boot.max() / boot.min() < 6.0
    assert lin.max() / lin.min() > 1e2
    # The median bootstrap std matches the spread of the corrected J/m over the datasets
    # (measured 6.9 vs 6.9 mm^2); 50 datasets estimate that spread to +-20 % at 95 %; the
    # factor 1.5 leaves room for the machine (20 draws of the first study: 6.8 vs 7.3).
    assert 1 / 1.5 < np.median(boot) / np.std(err, ddof=1) < 1.5


@pytest.mark.slow
def test_the_bias_correction_brings_both_parameters_closer_to_the_truth(rows):
    # RMS error over the 50 datasets, corrected vs fitted (measured: J/m 7.3 vs 8.1 mm^2,
    # mu 0.0051 vs 0.0061); the mean error shrinks by more than a third (measured: J/m
    # -6.2 -> -2.5 mm^2, mu +0.0052 -> +0.0029)
    for name in ("J_over_m", "mu"):
        fitted, fixed = _errors(rows, "values", name), _errors(rows, "values_corrected", name)
        assert np.sqrt(np.mean(fixed**2)) < np.sqrt(np.mean(fitted**2)), name
        assert abs(fixed.mean()) < 2 / 3 * abs(fitted.mean()), name


@pytest.mark.slow
def test_corrected_inertia_is_in_the_issues_band(rows):
    c = drop_coverage(rows)["bootstrap corrected"]["J/m (inertia)"]
    # issue 24's band: 60-76 % within 1 std, >= 95 % within 2 (measured: 68 / 98 %, median
    # |z| 0.80; on 20 draws 60 / 100 %). (Restitution: the frames' own, below.)
    assert c["n"] == len(SEEDS) and c["flagged"] == 0, c
    assert 0.60 <= c["within_1_std"] <= 0.76 and c["within_2_std"] >= 0.95, c


@pytest.mark.slow
def test_the_wall_of_the_profile_is_mus_reported_value_and_halves_its_error(rows):
    # Every draw slides, so mu is reported at the wall of the NLP's profile in mu
    # (``ipopt_contact.mu_wall``). Measured over the 50 draws: error mean -0.0001 and RMS
    # 0.0027, against +0.0029 and 0.0051 for the bias-corrected mu (and +0.0052 and 0.0061
    # for the NLP's own). Bounds: the RMS below 0.7 of the corrected one's (the two are
    # errors of the same draws, so the ratio scatters far less than each RMS), and the
    # mean within 0.001 of the truth (2.5 x its standard error, 0.0027 / sqrt(50)).
    wall = _errors(rows, "values_reported", "mu")
    assert all(r["mu_wall"]["value"] == r["values_reported"]["mu"] for r in rows)
    corrected = _errors(rows, "values_corrected", "mu")
    rms = [float(np.sqrt(np.mean(e**2))) for e in (wall, corrected)]
    assert rms[0] < 0.7 * rms[1], rms
    assert abs(wall.mean()) < 0.001, wall.mean()


@pytest.mark.slow
@pytest.mark.xfail(
    strict=True,
    reason="mu's bias-corrected value is still biased (+0.0029 against a median std of "
    "0.0045): the refits see about half of the fitted mu's +0.0052 bias, and a noise-free "
    "fit of the IRC throw is +0.0013 off by itself (the NLP's model error against IRC, which "
    "refits of the NLP's own prediction cannot see; the drop path adds it to mu's std, "
    "test_reported_std_is_in_the_issues_band). Measured 62 / 94 % within 1 / 2 std without "
    "it (uncorrected 34 / 86 %); on 20 draws 55 / 90 %.",
)
def test_corrected_friction_is_in_the_issues_band(rows):
    c = drop_coverage(rows)["bootstrap corrected"]["mu (friction)"]
    assert 0.60 <= c["within_1_std"] <= 0.76 and c["within_2_std"] >= 0.95, c


@pytest.mark.slow
def test_the_study_reports_what_the_drop_path_reports(rows):
    # ``reported_values`` is the rule ``ellipse_drop.build_estimate`` applies: where the
    # output error is not kept, the NLP's values corrected by the bootstrap's bias with its
    # spread as the std (default; mu, which slides on every draw, the wall of the profile
    # in mu with the spread of the refits' walls: ``bootstrap.WallDraws``), or the NLP's
    # values with the linearized std (covariance = "linearized"); restitution is the
    # frames' own estimate either way (with the landing fits, drop_landings). J/m's and mu's
    # std are widened in quadrature by the NLP's model error
    # (drop_checks.model_error_allowance) under both. A competing basin widens them further
    # (drop_checks.basin_spread; mu read at the wall only by a basin below the fit).
    for r in rows:
        accepted = r["output_error"]["accepted"]
        assert r["reported_source"] == ("output error" if accepted else "bootstrap")
        assert r["reported_source_linearized"] == ("output error" if accepted else "linearized")
        if accepted:
            continue
        # the allowance's three phases (drop_checks.ALLOWANCE_PHASES): over seeds 0-6, mu's
        # 0.014-0.023 and J/m's 13-22 mm^2 (measured 2026-11-27); bounds about twice those
        allowance = r["model_error_allowance"]
        assert allowance is not None and 0.0 <= allowance["mu"] < 0.05, allowance
        assert 0.0 <= allowance["J_over_m"] < 50e-6, allowance
        wall = r["mu_wall"]
        assert wall is not None and wall["value"] is not None and wall["std"] is not None
        for std, values, basins, suffix in (
            ("std_linearized", "values", "basins_linearized", "_linearized"),
            ("std_bootstrap_corrected", "values_corrected", "basins", ""),
        ):
            expected = {n: float(np.hypot(r[std][n], allowance[n])) for n in ("J_over_m", "mu")}
            own = {n: r[values][n] for n in ("J_over_m", "mu")}
            if suffix == "":  # the bootstrap's mu is the wall of the profile, its refits' walls
                own["mu"] = wall["value"]
                expected["mu"] = float(np.hypot(wall["std"], allowance["mu"]))
            widened = {"J_over_m": bool(r[basins]), "mu": bool(r[basins])}
            if suffix == "":  # mu at the wall: only a basin below the fit widens it
                widened["mu"] = any(b["mu"] < r["values"]["mu"] for b in r[basins])
            for name in ("J_over_m", "mu"):
                assert r["values_reported" + suffix][name] == own[name]
                if widened[name]:
                    assert r["std_reported" + suffix][name] > expected[name]
                else:
                    assert r["std_reported" + suffix][name] == pytest.approx(expected[name])
            assert r["values_reported" + suffix]["restitution"] == r["values"]["restitution"]
            assert r["std_reported" + suffix]["restitution"] == pytest.approx(
                r["std_linearized"]["restitution"]
            )


@pytest.mark.slow
@pytest.mark.xfail(
    strict=True,
    reason="the output-error refinement is rejected in 20 of 20 datasets (s^2 1.4e3 to "
    "5.9e5 against chi^2's 99.9 % point 1.41; 228 to 4.6e5 with the former 333 us "
    "sub-step): the frames are IRC at the paper's 1/1200 s, which after the "
    "first impact (0.0125 s) spins ~10 rad/s off IRC converged in its step (theta 1100 "
    "noise std RMS apart over 0.4 s), and the output error's sub-stepped free run (~57 us, "
    "from the fastest point's speed) follows the converged motion. On converged-IRC frames "
    "(truth_h 1/240000 s) it was rejected too (20 of 20, s^2 14 to 4.7e5, at 333 us: that "
    "step sank ~1.7 mm at this throw's 5 m/s impacts), and from the NLP's start LM ends "
    "after 2-12 iterations (with 42-67 us sub-steps s^2 5 to 1630 on seeds 0 and 1).",
)
def test_the_output_error_refinement_is_kept_on_the_throw(rows):
    assert sum(r["output_error"]["accepted"] for r in rows) >= len(rows) // 2


@pytest.mark.slow
@pytest.mark.parametrize(
    "cls",
    [
        pytest.param(
            "J/m (inertia)",
            marks=pytest.mark.xfail(
                strict=True,
                reason="J/m over-covers at 1 std on these 50 draws: the bootstrap's "
                "bias-corrected J/m (mean error -2.5 mm^2, spread 6.9) with the refits' "
                "spread (median 6.9 mm^2) and the model-error allowance (median 6.0 mm^2) "
                "in quadrature: 82 / 100 % within 1 / 2 std on seeds 0-49 (41 of 50; the "
                "band's 76 % is 38; 80 % on 2026-11-26, the allowance since refined), "
                "74 / 90 % on seeds 50-99, 77 / 95 % over 0-99, 77 / 96 % "
                "over 0-149. "
                "Without the allowance 68 / 98 % here but 60 / 86 % on 50-99 (64 / 92 % over "
                "100); with the linearized std (erratic: 2.4 mm^2 to 1.5e13 mm^2) 68 / 91 % "
                "over 100 (docs/validation.md, 'The ellipse drop's std'). Since the "
                "allowance runs at three phases of the NLP's grid (2026-11-27 17:00 UTC) "
                "92 / 100 % on seeds 0-11, median std 17.8 mm^2 (12.5 before; 16.8 since the "
                "second probe of mu, 2026-11-27 20:20 UTC): the allowance "
                "measures the NLP against converged IRC, this truth is IRC at 1/1200 s "
                "(docs/validation.md, 'The allowance's phases').",
            ),
        ),
        pytest.param(
            "mu (friction)",
            marks=pytest.mark.xfail(
                strict=True,
                reason="mu over-covers at 1 std: the wall of the profile (error mean "
                "-0.0001, spread 0.0027) with the spread of the refits' walls (median "
                "0.0037; the refits scatter 1.4x more than fits of the IRC frames do, "
                "their fitted mu too: 0.0045 against 0.0033, at a noise scale of 1) and the "
                "model-error allowance (median 0.0017) in quadrature: 92 / 98 % within "
                "1 / 2 std, median |z| 0.34 (88 / 96 % without the allowance). The rule it "
                "replaced, the bias-corrected mu (error +0.0029, spread 0.0042), was in the "
                "band here (64 / 98 %) with twice the RMS error, 0.0051 against 0.0027, "
                "and covered varied throws less (docs/validation.md, 'mu at the wall'). "
                "Since the allowance runs at three phases of the NLP's grid (2026-11-27 "
                "17:00 UTC): 100 / 100 % on seeds 0-11, median std 0.0213 for an RMS error "
                "of 0.0031 (0.0047 before; 0.0184 and 0.0033 since the second probe of mu, "
                "2026-11-27 20:20 UTC): the allowance measures the NLP against "
                "converged IRC, this truth is IRC at 1/1200 s (docs/validation.md, 'The "
                "allowance's phases').",
            ),
        ),
        pytest.param(
            "restitution",
            marks=pytest.mark.xfail(
                strict=True,
                reason="the frames' restitution with its propagated std, with the landing "
                "fits (drop_landings) since 2026-11-27 (their retry and step error since "
                "11:00 UTC): 78 / 100 % within 1 / 2 std on seeds 0-49 (39 of 50, the band's "
                "76 % is 38; binomial sd of the fraction at 50 draws ~6.6 %; error sd 0.019, "
                "median |error| 0.013). Without the retry and step error 78 / 96 %; before "
                "the landing fits 82 / 100 % "
                "(error sd 0.026, median |error| 0.021), 78 / 99 % over seeds 0-99, 75 / 99 % "
                "over 0-149; over 400 draws 74 / 97 % (the default test above). Frame "
                "differences alone, before the flights at the impact instant: 80 / 100 % "
                "here, 75 / 99 % over 0-99; before the spread's significance gate 82 / 100 %; "
                "before the propagated std 85 / 100 % on 20.",
            ),
        ),
    ],
)
def test_reported_std_is_in_the_issues_band(rows, cls):
    c = drop_coverage(rows)["reported"][cls]
    assert c["n"] == len(SEEDS) and c["flagged"] == 0, c
    assert 0.60 <= c["within_1_std"] <= 0.76 and c["within_2_std"] >= 0.95, c


def _state_only_fit(q0, v0, own: float, t_frames):
    """A ``ContactFit`` holding only a first state (q0, v0 the mean velocity over a step
    of ``own`` s, the NLP's convention) on a grid of ``own`` s with the frames ``t_frames``
    on its nodes: what ``drop_checks.irc_frames`` reads of a fit."""
    from physid.estimation.ipopt_contact import ContactFit

    n = int(round(t_frames[-1] / own))
    t = np.arange(n + 1) * own
    q, v = np.zeros((n + 1, 3)), np.zeros((n + 1, 3))
    q[0], v[0] = q0, v0
    pn, pt, lam, ut = (np.zeros(n) for _ in range(4))
    index = np.rint(np.asarray(t_frames) / own).astype(int)
    return ContactFit(0.0, 0.0, t, q, v, pn, pt, lam, ut, index, 0.0, 0.0, 0, True, "", 0.0)


def test_irc_frames_from_the_truths_state_reproduce_the_truths_frames():
    # The Section 6.1 truth is IRC at 1/1200 s from (q0, v0) (``throw``, the compiled
    # roll-out); irc_frames from the same state and values on that grid must give the same
    # frames, whether the state is held on that grid or on a grid half as long (where the
    # NLP's mean velocity over its step, v(t0) + g own / 2 upwards, differs by g h / 4:
    # 2 mm/s, which is 0.8 mm after 0.4 s, so a wrong sign of the conversion fails the
    # 1e-6 m tolerance by far). Round-off only: IRC is sensitive to its state at impacts,
    # but not at the 1e-16 level over 48 frames (measured max difference 0 and 1e-12 m).
    from physid.dynamics.planar_contact import GRAVITY
    from physid.rigs.models.ellipse_drop import _sim_vector

    case = DropCase(truth_h=1.0 / 1200)
    spec, geometry, t_m, q_true, truth = throw(case)
    q0, v0 = _sim_vector(spec, "q0"), _sim_vector(spec, "v0")
    values = truth
    h = 1.0 / 1200
    same = _state_only_fit(q0, v0, h, t_m)
    np.testing.assert_allclose(drop_checks.irc_frames(same, geometry, values, h), q_true,
                               rtol=0, atol=1e-9)  # fmt: skip
    own = h / 2
    half = _state_only_fit(q0, v0 - np.array([0.0, GRAVITY, 0.0]) * (h - own) / 2, own, t_m)
    np.testing.assert_allclose(drop_checks.irc_frames(half, geometry, values, h, h), q_true,
                               rtol=0, atol=1e-6)  # fmt: skip
    # read one frame interval (10 steps of 1/1200 s) later, the run's frames are the
    # truth's next ones: the allowance's phases move the run along its own motion
    later = drop_checks.irc_frames(same, geometry, values, h, h, offset=10 * h)
    np.testing.assert_allclose(later[:-1], q_true[1:], rtol=0, atol=1e-9)
    with pytest.raises(ValueError, match="pass h"):
        drop_checks.irc_frames(same, geometry, values, h, offset=h)
    # run from the state at the second frame (node 10; the first impact comes at 0.0125 s,
    # so this is flight: the mean velocity over the step ending there is v0 + 10 h g), the
    # run's frames are the truth's from the second on
    node = int(same.frame_index[1])
    same.q[node] = q_true[1]
    same.v[node] = v0 + node * h * np.array([0.0, -GRAVITY, 0.0])
    from_second = drop_checks.irc_frames(same, geometry, values, h, first=1)
    np.testing.assert_allclose(from_second, q_true[1:], rtol=0, atol=1e-9)


def test_the_allowance_starts_after_an_impact_in_the_first_frame_interval():
    # drop_checks.observed_start: frame 0 unless the NLP has contact (a normal impulse
    # above 1 % of its largest) before the second frame; then frame 1, whose state the
    # frames around it determine, where only frame 0 saw the motion before that impact.
    spec, geometry, t_m, q_true, _ = throw(SLIDING)
    fit = _state_only_fit(q_true[0], np.zeros(3), 1.0 / 1200, t_m)
    assert drop_checks.observed_start(fit) == 0  # no contact at all
    node = int(fit.frame_index[1])
    fit.pn[node] = 1.0  # the first impact at the second frame: seen from both sides
    fit.pn[node + 5] = 2.0
    assert drop_checks.observed_start(fit) == 0
    fit.pn[node - 1] = 0.03  # 1.5 % of the largest impulse, within the first interval
    assert drop_checks.observed_start(fit) == 1
    fit.pn[node - 1] = 0.01  # 0.5 %: the NLP's numerical floor, not contact
    assert drop_checks.observed_start(fit) == 0


def test_the_model_error_key_is_a_flag_and_on_by_default():
    from dataclasses import replace

    from physid.errors import InputError
    from physid.rigs.models.ellipse_drop import covariance_choice
    from physid.spec import load_spec

    base = load_spec("ellipse_drop")
    assert covariance_choice(base).model_error is True
    off = replace(base, method={**base.method, "model_error": False})
    assert covariance_choice(off).model_error is False
    with pytest.raises(InputError, match="method.model_error"):
        covariance_choice(replace(base, method={**base.method, "model_error": "yes"}))


@pytest.mark.slow
def test_the_model_error_allowance_widens_the_std_of_j_over_m_and_mu():
    # One noise draw of the mu = 0.3 throw (seed 1; the output error is not kept there):
    # the drop path's std of J/m and mu is its own (the linearized or the bootstrap's) and
    # the allowance in quadrature, the allowance the RMS error of noise-free fits of IRC's
    # own runs at the fitted values, one at each of three phases of the NLP's grid step
    # (over seeds 0-6 mu's 0.014-0.023: 0.05 is twice the largest; with one run from the
    # fit's own state, the rule before 2026-11-27 17:00 UTC, 0.00002-0.005 over 100 draws).
    # On seed 1 the linearized std of mu is 0.0026 for an error of +0.0034 and the
    # allowance 0.0147 (measured; 0.0035 with the one run): the std grows by 5.7x;
    # restitution keeps its own, and model_error = false gives the linearized std.
    # The bootstrap (6 refits, the fewest a std is taken from, to keep the test short) gets
    # the same allowance; with the walls of the profile in mu (the first impact slides), mu
    # is the fit's wall and its std the refits' walls' spread, widened by the allowance.
    from physid.estimation.bootstrap import contact_bootstrap
    from physid.rigs.models.ellipse_drop import _solve, ipopt_settings, reported_values
    from physid.rigs.pipeline.drop_coverage import QUIET

    spec, geometry, t_m, q_true, _ = throw(SLIDING)
    q_m = q_true + np.random.default_rng(1).standard_normal(q_true.shape) * SLIDING.noise
    settings = ipopt_settings(spec, (SLIDING.noise, SLIDING.noise))
    found = drop_checks.impact_consistency(t_m, q_m, geometry, *drop_checks.frame_noise(q_m))
    fit, _, cov, starts = _solve("seed 1", t_m, q_m, geometry, settings, found, QUIET)
    args = (fit, t_m, q_m, geometry, settings, cov, found, starts)
    plain = reported_values(*args, model_error=False)
    assert not plain.accepted and plain.allowance is None
    widened = reported_values(*args, oe=plain.oe)
    allowance = widened.allowance
    assert allowance is not None and 0.005 < allowance["mu"] < 0.05, allowance
    assert allowance["substep_s"] == pytest.approx(1.0 / 24000)
    assert [p["phase"] for p in allowance["phases"]] == list(drop_checks.ALLOWANCE_PHASES)
    assert widened.std["mu"] == pytest.approx(np.hypot(plain.std["mu"], allowance["mu"]))
    assert widened.std["mu"] > 1.3 * plain.std["mu"]
    assert widened.std["J_over_m"] == pytest.approx(
        np.hypot(plain.std["J_over_m"], allowance["J_over_m"])
    )
    assert widened.std["restitution"] == plain.std["restitution"]
    assert widened.values == plain.values
    sigma = np.array([SLIDING.noise, SLIDING.noise, SLIDING.noise])
    boot = contact_bootstrap(fit, sigma, 6, 0, 1.0, wall=True)
    with_boot = reported_values(*args, bootstrap=lambda: boot, oe=plain.oe, allowance=allowance)
    assert with_boot.source == "bootstrap" and with_boot.allowance == allowance
    wall = boot.extra["mu_wall"]
    assert with_boot.wall is wall and with_boot.values["mu"] == wall.value < fit.mu
    assert with_boot.std["mu"] == pytest.approx(np.hypot(wall.std, allowance["mu"]))
    corrected = with_boot.correction["std"]
    assert with_boot.std["J_over_m"] == pytest.approx(np.hypot(corrected[0], allowance["J_over_m"]))
    without = contact_bootstrap(fit, sigma, 6, 0, 1.0)  # the same refits, no walls: the fit's mu
    corrected_only = reported_values(*args, bootstrap=lambda: without, oe=plain.oe,
                                     allowance=allowance)  # fmt: skip
    assert corrected_only.wall is None
    assert corrected_only.values["mu"] == with_boot.correction["values"]["mu"]
    assert corrected_only.std["mu"] == pytest.approx(np.hypot(corrected[1], allowance["mu"]))


def test_a_probe_of_mu_finds_the_basin_that_no_start_reaches():
    # Seed 140 of the throw (the held-out seeds 100-149 of 2026-11-26): IPOPT from mu0 = 0.1,
    # 0.2, 0.3, 0.35 and 0.5 ended at mu 0.3765 (objective 80.8; the bootstrap's std 0.006,
    # so 14 std from the truth 0.3), and mu boxed below 0.355 ended inside its box at 0.310
    # with objective 71.4: a better local minimum of the unboxed NLP. The probe below the
    # solution (``ipopt_contact._probe_mu``) finds it. 0.02 is the bound the slow test puts
    # on every error of seeds 0-49 (test_the_multistart_on_mu_keeps_every_fit_in_the_...).
    from dataclasses import replace

    from physid.estimation.ipopt_contact import identify_contact
    from physid.rigs.models.ellipse_drop import ipopt_settings

    spec, geometry, t_m, q_true, truth = throw(SLIDING)
    q_m = q_true + np.random.default_rng(140).standard_normal(q_true.shape) * SLIDING.noise
    settings = ipopt_settings(spec, (SLIDING.noise, SLIDING.noise))
    without = identify_contact(t_m, q_m, geometry, replace(settings, mu_probe_gaps=()))
    assert without.mu - truth["mu"] > 0.05
    fit = identify_contact(t_m, q_m, geometry, settings)
    assert abs(fit.mu - truth["mu"]) < 0.02
    kept = [r for r in fit.stats["restarts"] if r["kept"] == "restart"]
    assert [r["reason"] for r in kept] == ["mu probe"]
    assert kept[0]["objective"] < kept[0]["first"] - 0.5 * BASIN_CHI2
    assert kept[0]["box"][0] < fit.mu < kept[0]["box"][1]


# ---------------------------------------------------------------- throws other than 6.1's

VARIED = DropCase(mu=0.3, throws=True, truth_h=1.0 / 24000)


def _varied_fit(seed: int):
    """(geometry, frame times, noisy frames, truth, settings, the NLP's fit as the drop
    path fits) of varied throw ``seed``, its noise drawn from the same seed."""
    from physid.rigs.models.ellipse_drop import ipopt_settings

    _, geometry, t_m, q_true, truth = throw(VARIED, seed)
    q_m = q_true + np.random.default_rng(seed).standard_normal(q_true.shape) * VARIED.noise
    settings = ipopt_settings(case_spec(VARIED), (VARIED.noise, VARIED.noise))
    return geometry, t_m, q_m, truth, settings, drop_checks.fit_frames(t_m, q_m, geometry, settings)


def test_varied_throws_are_reproducible_distinct_and_bounce_on_the_bar():
    # The study's premise: each seed's throw is its own (so its model error is), the same
    # on every run (the seed fixes it), and a drop the path can fit (two or more impacts
    # that the frames resolve within the 0.4 s window, as the Section 6.1 throw's two).
    first = [throw(VARIED, seed)[3] for seed in (0, 1)]
    assert np.array_equal(first[0], throw(VARIED, 0)[3])
    assert np.max(np.abs(first[0] - first[1])) > 0.01  # m or rad: distinct throws
    _, geometry, t_m, q_true, _ = throw(VARIED, 0)
    assert len(drop_checks.impact_consistency(t_m, q_true, geometry, 1e-3, 1e-3)) >= 2


@pytest.fixture(scope="module")
def varied_rows():
    # ten throws from their own initial states (DropCase.throws), converged IRC as the
    # truth (1/24000 s); ~2.5 min CPU each with the default bootstrap and its walls, the
    # output error, the allowance's three fits and the landing fits, on two processes
    return run_drop_case(VARIED, range(10), workers=2)


# Measured 2026-11-27 17:10 UTC on seeds 0-9, the allowance at three phases of the NLP's
# grid (drop_checks.ALLOWANCE_PHASES): J/m 9 of 10 within 2 std (throw 6 at z -4.9, 63 mm^2
# low), mu 9 of 10 (throw 2 at z +5.2, +0.023 at the wall: a basin the probe of
# mu missed; since the second probe, 19:30 UTC, at z +0.26, so mu 10 of 10 by the study's
# rows, docs/validation.md "Probes of mu at two gaps"). Before the phases (one allowance
# run from the fit's own first state) 8 of 10 each, and 7 of 10 before a kept output
# error's std was widened (throw 1); a strict xfail until then (docs/validation.md, "The
# allowance's phases", "Varied throws").
@pytest.mark.slow
@pytest.mark.parametrize("cls", ["J/m (inertia)", "mu (friction)"])
def test_reported_std_covers_the_truth_on_varied_throws(varied_rows, cls):
    # With a calibrated std 9 or 10 of 10 errors lie within 2 std with probability 0.91.
    c = drop_coverage(varied_rows)["reported"][cls]
    assert c["n"] == 10 and c["within_2_std"] >= 0.9, c


def test_the_second_probe_of_mu_finds_the_basin_just_below_the_fit():
    # Varied throw 2: every start and the probe below 0.9 mu (0.293) end at mu 0.3251
    # (objective 63.63; its wall 0.3227, 5.2 std above the truth 0.3), while mu = 0.30
    # held gives a lower objective; the probe below 0.97 mu ends inside its box at 0.3029
    # with objective 59.39 (measured 2026-11-27; of throws 0-29 only 2 and 18 move, 18
    # from 0.3495 to 0.3111). 0.01: well inside the 0.022 the two fits lie apart.
    geometry, t_m, q_m, truth, settings, fit = _varied_fit(2)
    assert abs(fit.mu - truth["mu"]) < 0.01
    probes = [r for r in fit.stats["restarts"] if r["reason"] == "mu probe"]
    assert [(r["gap"], r["kept"]) for r in probes] == [(0.1, "first"), (0.03, "restart")]
    # what the first probe left: the fit 0.02 or more above the truth, which the second
    # replaced by a lower objective on the starts' terms
    before = probes[1]["solutions"]["first"]
    assert before["mu"] - truth["mu"] > 0.02
    assert probes[1]["objective"] < probes[1]["first"] - 0.5 * BASIN_CHI2


@pytest.mark.slow
def test_the_allowance_of_a_throw_that_lands_before_its_second_frame():
    # Varied throw 16 lands within its first frame interval, where only the first frame
    # sees it before the impact: the NLP's velocity there was [7.2, -14.6] m/s for a throw
    # of about [3, -5], the allowance's IRC runs from it missed the frames by 0.31 m RMS,
    # and their fits put the allowance of J/m at 3000 mm^2 (4 x J/m). Started at the
    # second frame (drop_checks.observed_start) it is 8.8 mm^2 (measured 2026-11-27; the
    # other throws' 4-30 mm^2: 50 bounds it).
    geometry, t_m, q_m, _, settings, fit = _varied_fit(16)
    assert drop_checks.observed_start(fit) == 1
    values = {"J_over_m": fit.j_over_m, "mu": fit.mu, "restitution": 0.2}
    allowance = drop_checks.model_error_allowance(fit, geometry, settings, values)
    assert allowance is not None and allowance["first_frame"] == 1, allowance
    assert allowance["J_over_m"] < 50e-6, allowance


def test_a_kept_output_errors_std_covers_its_difference_from_the_nlp_and_the_frames():
    """Varied throw 1, the one throw of 100 studied whose output error is kept (s^2 0.99):
    its LM stops short of a minimum in a rugged chi^2 (docs/validation.md, "The output error
    on varied throw 1"), and its Gauss-Newton std, the width of the valley it stopped in,
    put J/m, mu and restitution at z +6.6, +11.6 and -17.9 (+3.3, +8.3 and -17.9 with J/m's
    and mu's widened by a competing basin of the multi-start; measured 2026-11-27). Widened
    in quadrature by the fit's difference from the NLP's J/m and mu and the frames'
    restitution it started from, they read z +0.51, +1.87 and -1.33: each within 2 std
    (the band's tolerance for one throw is 3; 2 asks that the widening does more than
    scrape by). Default run: one fit and its output error, ~30 s."""
    row = run_drop_case(replace(VARIED, draws=0), [1])[0]
    assert row["output_error"]["accepted"], row["output_error"]
    truth, values = row["truth"], row["values_reported_linearized"]
    std, own = row["std_reported_linearized"], row["output_error"]["std"]
    for name in ("J_over_m", "mu", "restitution"):
        error = values[name] - truth[name]
        assert abs(error) <= 2 * std[name], (name, error, std[name])
    # what the widening mends: the output error's own std, mu and restitution > 5 std off
    for name in ("mu", "restitution"):
        assert abs(values[name] - truth[name]) > 5 * own[name], (name, own)


@pytest.mark.slow
def test_the_verdict_of_a_vigorous_throw_knows_what_a_correct_model_scores():
    # Varied throw 2 (1 mm, 1 mrad): its bounces amplify the state's noise, so even the
    # true parameters predict theta to 15 x (k-step) and 19 x (free run) the noise, where
    # the model's own motion re-noised scores 23 x and 66 x (measured 2026-11-27). Every one
    # of 30 varied throws read "poor fit" at its true parameters against 3 x the noise;
    # against 3 x what a correct model scores, 25 of 30 read good, and 25 of 30 with
    # restitution 0.3 for 0.2 and 26 of 30 with J/m 10 % high read poor (docs/validation.md,
    # "Prediction checks of vigorous throws"). Here: the truth good, both wrong models poor.
    geometry, t_m, q_m, truth, settings, fit = _varied_fit(2)

    def checks(**wrong):
        values = truth | wrong
        return drop_checks.predictions(fit, t_m, q_m, geometry, settings, 1.0, values, "2")

    right = checks()
    assert not any(p.poor for p in right), [(p.ratio, p.expected) for p in right]
    assert max(p.ratio[2] for p in right) > 3.0  # theta: 3 x the noise alone would fail it
    for wrong in ({"restitution": 0.3}, {"J_over_m": 1.1 * truth["J_over_m"]}):
        assert any(p.poor for p in checks(**wrong)), wrong
