"""The IPOPT identification NLP (27): recovery of J/m and mu, structure, degenerate input."""

import functools

import numpy as np
import pytest

from dynamics.planar_contact import Ellipse, Ground, simulate
from estimation.ipopt_contact import (
    ContactGeometry,
    IpoptSettings,
    NotIdentifiableError,
    build_nlp,
    fine_grid,
    identifiability,
    identify_contact,
    parameter_covariance,
)

# Section 6 plywood ellipse, J/m = 756 mm^2, thrown with the initial conditions of 6.1.
ELLIPSE = Ellipse(0.05, 0.025, 0.064, 0.064 * 756e-6)
GEOMETRY = ContactGeometry(0.05, 0.025)
H_SIM = 1 / 1200


def camera(mu, fps, duration, noise=1e-3, seed=0, q0=(0, 0.1, -0.785), v0=(3, -5, 0)):
    tr = simulate(q0, v0, H_SIM, int(round(duration / H_SIM)), ELLIPSE, Ground(), mu, 0.2)
    idx = np.arange(0, len(tr.t), int(round(1 / (fps * H_SIM))))
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
