"""The IPOPT identification NLP (27): recovery of J/m and mu, structure, degenerate input."""

import functools
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from physid.dynamics.planar_contact import Ellipse, Ground, contact_geometry_sx, simulate
from physid.estimation.ipopt_contact import (
    ContactGeometry,
    IpoptSettings,
    NotIdentifiableError,
    _better,
    _impact_knots,
    _solve,
    build_nlp,
    contact_steps,
    converged_fit,
    fine_grid,
    identifiability,
    identify_contact,
    impacts,
    mu_wall,
    parameter_covariance,
    profile_mu,
    wall_crossing,
    warm_refit_solver,
)

# Section 6 plywood ellipse, J/m = 756 mm^2, thrown with the initial conditions of 6.1.
ELLIPSE = Ellipse(0.05, 0.025, 0.064, 0.064 * 756e-6)
GEOMETRY = ContactGeometry(0.05, 0.025)
H_SIM = 1 / 1200


def camera(mu, fps, duration, noise=1e-3, seed=0, q0=(0, 0.1, -0.785), v0=(3, -5, 0), h_sim=H_SIM):
    tr = simulate(q0, v0, h_sim, int(round(duration / h_sim)), ELLIPSE, Ground(), mu, 0.2)
    idx = np.arange(0, len(tr.t), int(round(1 / (fps * h_sim))))
    rng = np.random.default_rng(seed)
    return tr, tr.t[idx], tr.q[idx] + rng.normal(0, noise, (len(idx), 3))


def test_fine_grid_puts_every_frame_on_a_node():
    # Eq. (25) for uneven frames (a dropped frame doubles one interval).
    t_m = np.array([0.0, 1 / 30, 2 / 30, 4 / 30])
    t, index = fine_grid(t_m, 1e-3)
    np.testing.assert_allclose(t[index], t_m, atol=1e-15)
    assert np.diff(t).max() <= 1e-3 + 1e-15


def test_identifies_j_over_m_and_mu_from_noisy_sliding_throw():
    # 0.5 s at 120 fps, 1 mm noise, mu = 0.3: the object slides at its first impacts. The
    # issue's goals are 5 % on J/m and 0.05 on mu where the object slides; we measured
    # -0.3 % and 0.302 for this seed, so the bounds leave room for other noise draws.
    tr, t_m, q_m = camera(mu=0.3, fps=120, duration=0.5)
    settings = IpoptSettings(j_over_m_initial=4e-4)
    fit = identify_contact(t_m, q_m, GEOMETRY, settings)
    assert fit.j_over_m == pytest.approx(756e-6, rel=0.05)
    assert fit.mu == pytest.approx(0.3, abs=0.05)
    # The fitted trajectory stays within a few noise levels of the truth at the frames.
    err = fit.q[fit.frame_index, :2] - tr.q[:: int(round(1 / (120 * H_SIM))), :2]
    assert np.sqrt(np.mean(err**2)) < 2e-3
    # Section 5.2: A_{N_I} (29) has a one-dimensional null space and its null vector gives
    # the same J/m (the fitted motion is physically consistent, eq. 32).
    ident = identifiability(fit, GEOMETRY)
    assert ident["null_space_dim"] == 1
    assert ident["j_over_m_from_null_vector"] == pytest.approx(fit.j_over_m, rel=1e-6)
    # Linearized covariance: with the true noise level in the settings the residual
    # variance factor chi^2/(n_obs - n_eff) estimates 1 with a relative std of
    # sqrt(2/(n_obs - n_eff)) ~ 0.1 here, so [0.6, 1.6] fails only if the noise model or
    # n_eff is wrong. The truth lies within 4 reported std (a 1-in-15000 event if the std
    # is right), and the std is neither vanishing nor useless: 0.1 %-10 % of J/m (the
    # linearization errs on the safe side for some draws: 5.2 % here against an
    # empirical spread of 0.6 % over ten draws).
    cov = parameter_covariance(fit, GEOMETRY, settings)
    assert 0.6 < cov["residual_variance_factor"] < 1.6
    std_jm, std_mu = cov["std"]
    assert abs(fit.j_over_m - 756e-6) < 4 * std_jm
    assert 1e-3 * 756e-6 < std_jm < 0.10 * 756e-6
    assert abs(fit.mu - 0.3) < 4 * std_mu + 1e-3


@functools.lru_cache(maxsize=1)
def _ten_seed_spread() -> tuple[float, float]:
    """Empirical std of J/m over ten noise draws and the median reported std (m^2).

    Ten noise draws of the same throw (0.5 s, 120 fps, mu = 0.3). The empirical std s of
    ten estimates scatters around the true std by a chi distribution with 9 degrees of
    freedom: s / sigma lies in [0.55, 1.45] with 95 %, [0.48, 1.55] with 99 % probability.
    """
    estimates, stds = [], []
    tr, t_m, _ = camera(mu=0.3, fps=120, duration=0.5)
    idx = np.arange(0, len(tr.t), int(round(1 / (120 * H_SIM))))
    settings = IpoptSettings()
    for seed in range(10):
        rng = np.random.default_rng(100 + seed)
        q_m = tr.q[idx] + rng.normal(0, 1e-3, (len(idx), 3))
        fit = identify_contact(t_m, q_m, GEOMETRY, settings)
        cov = parameter_covariance(fit, GEOMETRY, settings)
        estimates.append(fit.j_over_m)
        stds.append(cov["std"][0])
    return float(np.std(estimates, ddof=1)), float(np.median(stds))


@pytest.mark.slow
def test_reported_std_is_not_overconfident():
    # The safety-critical direction: a reported std below half the empirical spread would
    # make users trust J/m more than the data allow. 0.5 is the 99 % lower chi bound
    # (0.48) of the empirical std over ten draws, so this fails by chance < 1 % of the time.
    empirical, reported = _ten_seed_spread()
    assert reported / empirical > 0.5, (empirical, reported)


@pytest.mark.slow
def test_reported_std_within_factor_two_of_spread_over_noise_seeds():
    # Calibration: within a factor 2 of the empirical spread. With the chi(9) scatter of the
    # empirical std ([0.48, 1.55] at 99 %), a factor 2 fails by chance well under 1 % of
    # the time and catches a covariance off by more than ~40 %. Measured 2026-11-24:
    # reported 7.5 mm², empirical 4.2 mm² (1.8×, conservative; it was marked xfail at 2.2×,
    # then passed unnoticed as an xpass).
    empirical, reported = _ten_seed_spread()
    assert 0.5 < reported / empirical < 2.0, (empirical, reported)


@functools.cache
def _noise_free_sliding_fit():
    """The NLP's fit of noise-free frames of the mu = 0.3 throw (120 fps, 0.4 s)."""
    _, t_m, q_m = camera(mu=0.3, fps=120, duration=0.4, noise=0.0)
    return identify_contact(t_m, q_m, GEOMETRY, IpoptSettings(j_over_m_initial=4e-4))


def test_the_wall_crossing_interpolates_the_nearest_rise_below_the_fit():
    # (mu, 2 x rise) points of a profile, the fit's (0.30, 0) the highest mu: the rise 1 is
    # crossed between 0.2975 (0.4) and 0.2950 (3.0), at 0.2975 - 0.0025 x 0.6 / 2.6.
    points = [(0.2950, 3.0), (0.30, 0.0), (0.2975, 0.4)]
    assert wall_crossing(points, 1.0) == pytest.approx(0.2975 - 0.0025 * 0.6 / 2.6, rel=1e-12)
    # the nearest crossing below the fit, not a lower one past a dip
    dip = [(0.30, 0.0), (0.298, 2.0), (0.296, 0.5), (0.294, 5.0)]
    assert wall_crossing(dip, 1.0) == pytest.approx(0.30 - 0.002 * 1.0 / 2.0, rel=1e-12)
    assert wall_crossing([(0.30, 0.0), (0.29, 0.8)], 1.0) is None  # never rose: no wall
    # a point above the fit (the floor's) is refused, not read as the wall's first rise
    with pytest.raises(ValueError, match="not the fit's"):
        wall_crossing([(0.305, 1.6), (0.30, 0.0), (0.2975, 0.4), (0.295, 3.0)], 1.0)


def test_the_wall_of_the_profile_lies_at_the_truths_mu_on_noise_free_frames():
    # The wall (``mu_wall``: where twice the objective has risen by 1 below the fit) is
    # where the sliding first impact's tangential impulse stops fitting: on noise-free
    # frames of the mu = 0.3 throw measured 0.2985 (the fit 0.3013), bracketed by the
    # offsets 0.0025 and 0.005 below the fit and one bisection (3 solves, ~3 s). 0.003
    # is about the wall's spread over noise draws at the NLP's stated 1 mm (0.0027 over 50,
    # docs/validation.md, "mu at the wall"), so a wall misplaced by more than a std fails.
    fit = _noise_free_sliding_fit()
    wall = mu_wall(fit)
    assert wall["value"] is not None and abs(wall["value"] - 0.3) < 0.003, wall
    assert wall["value"] < fit.mu
    risen = [d for mu, d in wall["points"] if mu < fit.mu]
    assert min(risen) <= 1.0 < max(risen) and wall["solves"] == len(risen)


def test_the_profile_in_mu_has_a_wall_below_and_a_floor_above():
    # Noise-free frames of the mu = 0.3 throw (120 fps, 0.4 s): its first impact slides,
    # so its tangential impulse is mu times the normal one. With mu held 10 % below the
    # truth no impulse in the cone gives it: measured, chi^2 rises from 1.7 to 151.5 (the
    # bound 50 leaves room for a fit elsewhere in the wall's foot). 0.02 above the fit the
    # cone only leaves the penalized impulses freer: chi^2 2.6, a rise of 0.9, where the
    # test allows a tenth of the rise below. The profile solved at the fit's own mu is the
    # fit: the warm start stays (objective 4e-5 off; 1 % is the parameter-settling stop's).
    fit = _noise_free_sliding_fit()
    objective = 0.5 * fit.cost_fit + fit.cost_gamma + IpoptSettings().mu_pull * fit.mu
    assert fit.objective == pytest.approx(objective, rel=1e-9)
    own, below, above = profile_mu(fit, [fit.mu, 0.27, fit.mu + 0.02])
    assert own["objective"] == pytest.approx(objective, rel=0.01)
    assert own["j_over_m"] == pytest.approx(fit.j_over_m, rel=1e-3)
    assert below["cost_fit"] - fit.cost_fit > 50.0
    assert above["cost_fit"] - fit.cost_fit < 0.1 * (below["cost_fit"] - fit.cost_fit)
    assert all(p["success"] for p in (own, below, above))


@functools.cache
def _mujoco_drop5c_fit():
    """The NLP's fit (no multi-start) of the poses tracked in the MuJoCo-simulated and
    -rendered drop5c clip (mu = 0.5, MuJoCo's friction made Coulomb's law;
    tests/vision/test_independent_drops.py), with the drop path's ground and noise (read
    back from the pose file as ``ellipse_drop.identify_throw`` reads them)."""
    import tempfile

    from physid.rigs.models import ellipse_drop
    from physid.spec import load_spec
    from physid.vision.camera import Camera
    from physid.vision.posefile import write_pose_csv
    from physid.vision.scene import scene_from_spec
    from physid.vision.tracking import track_video

    data = Path(__file__).parents[1] / "data" / "independent"
    spec = load_spec(data / "drop5c.toml")
    result = track_video(data / "drop5c.mp4", Camera.load(data / "drop5c.camera.json"),
                         scene_from_spec(spec))  # fmt: skip
    with tempfile.TemporaryDirectory() as folder:
        path = write_pose_csv(Path(folder) / "poses.csv", result.stream(), result.frame)
        stream = ellipse_drop.read_pose_csv(path)
        ok = ~stream.missing.any(axis=1)
        ground, _, length = ellipse_drop.measured_ground(path, ellipse_drop.rig_geometry(spec)[1])
        noise = ellipse_drop.tracking_noise(path, ok)
    geometry = ellipse_drop.contact_geometry(spec, ground, length)
    settings = ellipse_drop.ipopt_settings(spec, noise)
    return identify_contact(stream.t[ok], stream.values[ok], geometry, settings)


def test_the_profile_in_mu_is_solved_to_ipopts_convergence_not_the_settling_stop():
    # On the MuJoCo drop5c (mu = 0.5) the fit stops on J/m and mu settling, its objective
    # 0.006 above the NLP's minimum. Held solves stopped the same way (they "settle" as soon
    # as J/m does) read 2 x the objective 0.3-22.8 *below* the minimum at 0.0005-0.0075
    # below its mu, and the wall 0.4996; solved to IPOPT's convergence the profile rises
    # 0.30, 1.53, 4.02, 13.1 at 0.0005, 0.001, 0.0015, 0.0025 below, and the wall (rise 1,
    # one bisection) is 0.50667 (measured 2026-11-27). A held mu cannot beat the free
    # minimum: the tolerance 0.05 is 2 x the objective's change left at IPOPT's tol (the
    # converged free solve moved it by 0.012). The wall within 0.001 of 0.5067, the
    # linear reading's spread over 20 bootstrap refits being 0.0007.
    fit = _mujoco_drop5c_fit()
    top = converged_fit(fit)
    assert top.objective <= fit.objective
    below = profile_mu(top, [top.mu - d for d in (0.0005, 0.001, 0.0025)])
    rises = [2.0 * (p["objective"] - top.objective) for p in below]
    assert all(p["success"] and p["status"] != "Parameters_Settled" for p in below), below
    assert min(rises) > -0.05 and np.all(np.diff(rises) > 0), rises
    wall = mu_wall(fit)
    assert wall["value"] == pytest.approx(0.5067, abs=1e-3), wall
    assert all(d > -0.05 for _, d in wall["points"]), wall
    # a refit solver (the settling stop) is refused for a profile, not silently used
    with pytest.raises(ValueError, match="IPOPT's own convergence"):
        mu_wall(fit, warm_refit_solver(fit.problem))


@pytest.mark.parametrize("noise", [0.0, 1e-3])
def test_warm_start_puts_a_knot_at_a_bounce_between_frames(noise):
    # At 60 fps the Section 6.1 throw hits the ground at 12.1 ms, between the frames at 0
    # and 16.7 ms. The warm start must place the impact there (the straight line between
    # the frames touches the ground only at 16.7 ms, 4.6 ms late, and IPOPT stayed in that
    # local minimum). The knot follows the arc out of the bounce back to the ground; 1.5 ms
    # is 1.5 fine steps of the NLP grid (measured: 0.9 ms early, noise-free and at 1 mm).
    tr, t_m, q_m = camera(mu=0.5, fps=60, duration=0.3, noise=noise, h_sim=1 / 12000)
    t_k, q_k = _impact_knots(t_m, q_m, GEOMETRY, IpoptSettings())
    added = ~np.isin(t_k, t_m)
    t_impact = tr.t[1:][np.argmax(tr.cn > 0.1 * tr.cn.max())]
    assert abs(t_k[added][0] - t_impact) < 1.5e-3
    gap = [float(contact_geometry_sx(q, 0.05, 0.025, 0, 0, 0)[0]) for q in q_k[added]]
    np.testing.assert_allclose(gap, 0.0, atol=1e-9)
    # Every knot lies within a frame interval that holds a truth impulse of > 1 % of the
    # largest: no bounce is invented in flight or in rolling contact.
    hits = tr.t[1:][tr.cn > 0.01 * tr.cn.max()]
    for t in t_k[added]:
        i = np.searchsorted(t_m, t)
        assert np.any((hits > t_m[i - 1]) & (hits <= t_m[i])), t


def test_contact_steps_tell_coulomb_sliding_from_violations():
    # Frames at 120 fps with sigma = 1 mm: velocity noise sqrt(2) mm / 8.3 ms = 0.17 m/s,
    # so "visible" means above 0.51 m/s (slip and impulse per unit mass). Steps: (0) slides
    # with friction mu c_n against the slip; (1) slips visibly inside the cone; (2) friction
    # along the slip; (3) slips below the noise (not evidence either way); (4) a noise-level
    # impulse (not resolved); (5) no impulse.
    frame_t = np.arange(10) / 120
    parts = {
        "mu": 0.5,
        "pn": np.array([4.0, 4.0, 4.0, 4.0, 0.2, 0.0]),
        "pt": np.array([-2.0, -1.0, 2.0, -2.0, -0.1, 0.0]),
        "ut": np.array([1.0, 1.0, 1.0, 0.3, 1.0, 1.0]),
    }
    steps = contact_steps(parts, frame_t, IpoptSettings())
    np.testing.assert_array_equal(steps.contact, [1, 1, 1, 1, 1, 0])
    np.testing.assert_array_equal(steps.resolved, [1, 1, 1, 1, 0, 0])
    np.testing.assert_array_equal(steps.slipping, [1, 1, 1, 0, 1, 0])
    np.testing.assert_array_equal(steps.sliding, [1, 0, 0, 0, 1, 0])
    np.testing.assert_array_equal(steps.off_law, [0, 1, 1, 0, 0, 0])


def test_impacts_check_coulomb_on_whole_impacts_the_frames_resolve():
    # Frames at 120 fps, sigma = 1 mm: "visible" means above 3 x 0.17 = 0.51 m/s. Runs of
    # contact steps: (A, steps 0) at the window's start, slip before it unknown; (B, 2-3) an
    # impact split over two steps, the first 13 % inside the cone (a per-step violation),
    # 0.2 m/s in total: invisible; (C, 5-6) the pattern of the mu = 0.5, 240 fps, seed 1 local
    # minimum: it sticks in one step and friction pushes along the slip in the next, while
    # the impact enters and leaves slipping forward, so under Coulomb's law it slid
    # throughout and needed |c_t| = mu c_n = 2.2, not 0.8: a miss of 1.4 m/s; (D, 8) ends
    # sticking, (E, 10) reverses the slip: both may stay inside the cone.
    frame_t = np.arange(10) / 120
    parts = {
        "mu": 0.5,
        "pn": np.array([2.0, 0.0, 3.0, 1.0, 0.0, 4.0, 0.4, 0.0, 4.0, 0.0, 4.0]),
        "pt": np.array([0.0, 0.0, -1.3, -0.5, 0.0, -1.0, 0.2, 0.0, -1.0, 0.0, 1.0]),
        "ut": np.array([2.0, 1.0, 0.8, 0.6, 0.6, 0.0, 0.9, 0.9, 0.0, -1.0, 1.0]),
    }
    found = impacts(parts, frame_t, IpoptSettings())
    np.testing.assert_array_equal(found.first, [0, 2, 5, 8, 10])
    np.testing.assert_array_equal(found.last, [0, 3, 6, 8, 10])
    np.testing.assert_allclose(found.pn, [2.0, 4.0, 4.4, 4.0, 4.0])
    np.testing.assert_allclose(found.pt, [0.0, -1.8, -0.8, -1.0, 1.0])
    np.testing.assert_allclose(found.slip_before, [np.nan, 1.0, 0.6, 0.9, -1.0])
    np.testing.assert_array_equal(found.slides, [0, 1, 1, 0, 0])
    np.testing.assert_allclose(found.miss, [0.0, 0.2, 1.4, 0.0, 0.0], atol=1e-12)
    np.testing.assert_array_equal(found.off_law, [0, 0, 1, 0, 0])
    # The per-step test flags B's first step (and C's second): it cannot tell a split
    # impact from a violated one.
    assert contact_steps(parts, frame_t, IpoptSettings()).off_law[[2, 6]].all()


def test_restart_reuses_the_nlp_and_matches_a_fresh_build():
    # The restart from the tighter initial cone changes only the start point, so it reuses
    # the built NLP (saves ~1 s of build at 1 s, 240 fps). It must give exactly what a
    # fresh build from mu0 = 0.2 gives: same start, same iterations, same solution.
    _, t_m, q_m = camera(mu=0.3, fps=240, duration=0.1)
    settings = IpoptSettings()
    p = build_nlp(t_m, q_m, GEOMETRY, settings)
    first = _solve(p, p.x0)
    fresh = build_nlp(t_m, q_m, GEOMETRY, replace(settings, mu_initial=0.2))
    expected = _solve(fresh, fresh.x0)
    _, kept, record = _better(p, first, t_m, q_m, GEOMETRY, settings, "test")
    assert record["iterations"] == expected["iterations"]
    assert record["objective"] == expected["f"]
    best = expected if expected["f"] < first["f"] else first
    np.testing.assert_array_equal(kept["x"], best["x"])


@pytest.mark.slow
def test_benchmark_throw_identified_without_a_restart():
    # The benchmark case (bench_ipopt_structure.py: 1 s at 240 fps, mu = 0.3, eps = 0.2,
    # truth at 1/1200 s, 1 mm noise, seed 0). The per-step Coulomb test restarted it for a
    # first impact 12 % inside the cone in one fine step (0.16 m/s over the whole impact,
    # below the frames' 1.0 m/s) and kept the first solution: 104 + 121 iterations for one
    # answer. Judged by whole impacts nothing slips against (18) visibly, so one solve is
    # the identification; measured J/m -1.9 %, mu 0.308 (goals: 5 %, 0.05).
    _, t_m, q_m = camera(mu=0.3, fps=240, duration=1.0)
    fit = identify_contact(t_m, q_m, GEOMETRY, IpoptSettings())
    # (the probes of mu below the solution, one per gap, are solved and not kept)
    probes = [r for r in fit.stats["restarts"] if r["reason"] == "mu probe"]
    assert [r for r in fit.stats["restarts"] if r not in probes] == []
    assert [p["gap"] for p in probes] == list(IpoptSettings().mu_probe_gaps)
    assert all(p["kept"] == "first" for p in probes)
    assert fit.j_over_m == pytest.approx(756e-6, rel=0.05)
    assert fit.mu == pytest.approx(0.3, abs=0.05)


def test_no_knots_in_free_flight():
    _, t_m, q_m = camera(mu=0.3, fps=60, duration=0.3, q0=(0, 1.0, 0.3), v0=(1, 0, 2))
    t_k, _ = _impact_knots(t_m, q_m, GEOMETRY, IpoptSettings())
    np.testing.assert_array_equal(t_k, t_m)


# 14 s (a second frame rate of the same identification): with -m slow.
@pytest.mark.slow
def test_mu_at_60_fps_where_the_first_bounce_falls_between_frames():
    # Table 1 cell mu = 0.5, 60 fps (truth at 1/12000 s; the object slides only in its
    # first two impacts): with the corner-cutting warm start the fit kept the impact at the
    # 16.7 ms frame and reported mu = 0.579 (chi^2 123) for every one of six noise seeds.
    # With the impact knots it finds mu = 0.512, J/m -1.2 % (chi^2 89, the true poses 170).
    # The goals: mu within 0.05, J/m within 10 % at 60 fps.
    _, t_m, q_m = camera(mu=0.5, fps=60, duration=1.0, h_sim=1 / 12000)
    fit = identify_contact(t_m, q_m, GEOMETRY, IpoptSettings())
    assert fit.mu == pytest.approx(0.5, abs=0.05)
    assert fit.j_over_m == pytest.approx(756e-6, rel=0.10)


@pytest.mark.slow
def test_restart_when_a_step_slips_against_coulomb():
    # Table 1 cell mu = 0.5, 240 fps, noise seed 1 (truth at 1/12000 s): from mu0 = 0.5 IPOPT
    # ended with the first impact sticking at |c_t|/c_n = 0.63, friction along the slip in
    # the next step and mu = 1.61 (objective 249.5). The impact enters and leaves slipping
    # forward, so it slid throughout, yet its total ratio is 0.49: a miss of 5.7 m/s, far
    # above the frames' 1.0 m/s. That triggers the restart from mu0 = 0.2 (objective 232.5,
    # kept): measured mu = 0.531, J/m +0.6 %. Goals: mu within 0.05, J/m within 5 % at 240 fps.
    tr = simulate((0, 0.1, -0.785), (3, -5, 0), 1 / 12000, 12000, ELLIPSE, Ground(), 0.5, 0.2)
    idx = np.arange(0, len(tr.t), 50)
    q_m = tr.q[idx] + np.random.default_rng(1).normal(size=(len(idx), 3)) * 1e-3
    fit = identify_contact(tr.t[idx], q_m, GEOMETRY, IpoptSettings())
    assert fit.stats["restarts"] and fit.stats["restarts"][0]["reason"] == "coulomb"
    assert fit.mu == pytest.approx(0.5, abs=0.05)
    assert fit.j_over_m == pytest.approx(756e-6, rel=0.05)


def test_nlp_is_sparse_and_grows_linearly():
    # Step-wise building must give O(N) non-zeros: doubling the window doubles nnz (within
    # 10 %, the edges), and each Jacobian column has a bounded number of entries (measured
    # 5.3 per variable with v eliminated by (17); a dense or single-shooting build has O(N)
    # per column, ~90 at this size).
    sizes = []
    for duration in (0.1, 0.2):
        _, t_m, q_m = camera(mu=0.3, fps=240, duration=duration)
        p = build_nlp(t_m, q_m, GEOMETRY, IpoptSettings())
        rows, cols = p.sparsity["jacobian_shape"]
        assert p.sparsity["jacobian_nnz"] < 8 * cols
        sizes.append((p.sparsity["jacobian_nnz"], p.sparsity["hessian_nnz"], len(p.t)))
    (j1, h1, n1), (j2, h2, n2) = sizes
    assert j2 / j1 == pytest.approx(n2 / n1, rel=0.1)
    assert h2 / h1 == pytest.approx(n2 / n1, rel=0.1)


def test_free_flight_window_is_refused_with_reason():
    # Dropped from 1 m, the first 0.2 s never reach the ground: J/m is not in the equations.
    _, t_m, q_m = camera(mu=0.3, fps=120, duration=0.2, q0=(0, 1.0, 0.3), v0=(0, 0, 1))
    with pytest.raises(NotIdentifiableError, match="never touches the ground"):
        identify_contact(t_m, q_m, GEOMETRY)


def test_too_few_frames_is_refused_with_reason():
    _, t_m, q_m = camera(mu=0.3, fps=30, duration=0.15)
    with pytest.raises(NotIdentifiableError, match="valid frames"):
        identify_contact(t_m, q_m, GEOMETRY)
