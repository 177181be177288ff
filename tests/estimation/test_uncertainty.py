"""Linearized parameter covariance (3.26–3.32) against a dense reference built from the full
Jacobian, and the handling of a parameter held on a bound of its box."""

from __future__ import annotations

import numpy as np
import pytest

from physid.estimation.lm import Linearization
from physid.estimation.uncertainty import (
    batch_dof,
    batch_means,
    bound_flags,
    coverage_factor,
    noise_influence,
    overlapping_batch_means,
    parameter_covariance,
)

N, D, P, MD, MO = 12, 2, 3, 2, 1  # steps, state dims, parameters, dynamics and obs rows


def _random_linearization(seed: int = 0) -> Linearization:
    rng = np.random.default_rng(seed)
    return Linearization(
        dyn_r=rng.normal(size=(N - 1, MD)),
        dyn_A=rng.normal(size=(N - 1, MD, D)),
        dyn_B=rng.normal(size=(N - 1, MD, D)),
        dyn_C=rng.normal(size=(N - 1, MD, P)),
        obs_r=rng.normal(size=(N, MO)),
        obs_A=rng.normal(size=(N, MO, D)),
        init_r=rng.normal(size=MD),
        init_A=rng.normal(size=(MD, D)),
        init_C=rng.normal(size=(MD, P)),
    )


def _dense_covariance(lin: Linearization, keep, dynamics_noise: bool = True, c_obs=None):
    """(TᵀT)⁻¹ TᵀĈT (TᵀT)⁻¹ with T = (I − J_x J_x⁺) J_θ from the dense Jacobian, over the
    parameters ``keep`` (the others held) or, if ``keep`` is a P×k matrix, over the
    coordinates z of θ = keep z; Ĉ block-diagonal from the residual samples."""
    rows_x, rows_p, blocks = [], [], []
    for k in range(N - 1):
        jx = np.zeros((MD, N * D))
        jx[:, k * D : (k + 1) * D], jx[:, (k + 1) * D : (k + 2) * D] = lin.dyn_A[k], lin.dyn_B[k]
        rows_x.append(jx), rows_p.append(lin.dyn_C[k]), blocks.append("dyn")
    for k in range(N):
        jx = np.zeros((MO, N * D))
        jx[:, k * D : (k + 1) * D] = lin.obs_A[k]
        rows_x.append(jx), rows_p.append(np.zeros((MO, P))), blocks.append("obs")
    jx = np.zeros((MD, N * D))
    jx[:, :D] = lin.init_A
    rows_x.append(jx), rows_p.append(lin.init_C), blocks.append("dyn")
    basis = np.eye(P)[:, keep] if np.ndim(keep) == 1 else keep
    Jx, Jp = np.vstack(rows_x), np.vstack(rows_p) @ basis
    T = Jp - Jx @ np.linalg.lstsq(Jx, Jp, rcond=None)[0]
    c_dyn = lin.dyn_r.T @ lin.dyn_r / (N - 2) * dynamics_noise
    c_obs = lin.obs_r.T @ lin.obs_r / (N - 1) if c_obs is None else c_obs
    C = np.zeros((len(Jx), len(Jx)))
    at = 0
    for kind in blocks:
        m = MD if kind == "dyn" else MO
        C[at : at + m, at : at + m] = c_dyn if kind == "dyn" else c_obs
        at += m
    inv = np.linalg.inv(T.T @ T)
    return inv @ T.T @ C @ T @ inv


def test_covariance_equals_dense_reference():
    lin = _random_linearization()
    cov = parameter_covariance(lin, np.ones(P), np.ones(P))
    # The banded solve is regularized by 1e-12 of each diagonal entry: agreement to 1e-8.
    np.testing.assert_allclose(cov.cov, _dense_covariance(lin, [0, 1, 2]), rtol=1e-8)
    assert np.all(cov.at_bound == "")


def test_covariance_ignores_the_scale_of_state_components():
    # Scaling a state component's Jacobian columns (a stiff hinge row at large κ is ~10⁸ times
    # the free rotation's) changes neither the range of J_x nor T, so neither may it change
    # Λ. A regularization relative to the largest diagonal entry was 87 % off here; relative
    # to each row's own it holds to 1e-7 (the dense reference's lstsq on columns 10⁸ apart
    # loses about that much).
    lin = _random_linearization(1)
    stiff = np.array([1e8, 1.0])
    lin = lin._replace(
        dyn_A=lin.dyn_A * stiff, dyn_B=lin.dyn_B * stiff, obs_A=lin.obs_A * stiff,
        init_A=lin.init_A * stiff,
    )  # fmt: skip
    cov = parameter_covariance(lin, np.ones(P), np.ones(P))
    np.testing.assert_allclose(cov.cov, _dense_covariance(lin, [0, 1, 2]), rtol=1e-7)


def test_parameter_on_its_bound_is_held_and_flagged():
    lin = _random_linearization(1)
    values, lower, upper = np.array([1.0, 0.5, 2.0]), np.zeros(3), np.array([3.0, 0.5, 3.0])
    flags = bound_flags(values, lower, upper)
    assert list(flags) == ["", "upper", ""]
    cov = parameter_covariance(lin, np.ones(P), values, flags)
    # The others' covariance is the one conditional on the held parameter …
    np.testing.assert_allclose(
        cov.cov[np.ix_([0, 2], [0, 2])], _dense_covariance(lin, [0, 2]), rtol=1e-8
    )
    # … and the held one is not a measurement, whatever its linearized sensitivity.
    assert np.isinf(cov.std[1]) and not cov.identifiable[1]
    assert np.all(np.isfinite(cov.std[[0, 2]]))
    assert any(abs(cov.directions[1, i]) == pytest.approx(1.0) for i in cov.unexcited)


def test_covariance_conditional_on_a_linear_constraint():
    # A face of the consistency LMI holds a·δθ = 0: with θ = N z (N spanning a's null space),
    # Λ_θ = N Λ_z Nᵀ, Λ_z from the dense reference with T N. Agreement to 1e-8 as above.
    lin = _random_linearization(2)
    a = np.array([[1.0, 1.0, -1.0]])
    cov = parameter_covariance(lin, np.ones(P), np.ones(P), None, a)
    N = np.linalg.svd(a)[2][1:].T
    np.testing.assert_allclose(cov.cov, N @ _dense_covariance(lin, N) @ N.T, atol=1e-10)
    assert (a @ cov.cov @ a.T).item() == pytest.approx(0.0, abs=1e-10)
    assert np.all(np.isfinite(cov.std)) and np.all(cov.at_bound == "")


def test_observation_rows_alone_as_the_random_input():
    """``dynamics_noise=False``: the meat is the observation rows' (the dynamics block of Ĉ
    zero), with each row's variance at least the data's noise; the same as the dense
    reference built that way, and as the sum of the noise influences G_k G_kᵀ (the form
    the step's extrapolation combines) once that noise is above the residuals' variance."""
    lin = _random_linearization(3)
    sigma = np.array([2.0])  # above the residuals' sample std (≈ 1): the floor is active
    cov = parameter_covariance(lin, np.ones(P), np.ones(P), obs_noise=sigma, dynamics_noise=False)
    dense = _dense_covariance(lin, [0, 1, 2], dynamics_noise=False, c_obs=np.diag(sigma**2))
    np.testing.assert_allclose(cov.cov, dense, rtol=1e-8)
    g = noise_influence(lin, sigma)
    np.testing.assert_allclose(np.einsum("kpm,kqm->pq", g, g), cov.cov, rtol=1e-8)
    # Counting the dynamics rows as noise only adds (their meat is positive semidefinite).
    full = parameter_covariance(lin, np.ones(P), np.ones(P), obs_noise=sigma)
    assert np.all(np.linalg.eigvalsh(full.cov - cov.cov) > -1e-12)


# ------------------------------------------------- batch means, degrees of freedom, expansion


def _ar1_sums(rng, reps: int, n: int, rho: float) -> np.ndarray:
    """``reps`` series of n steps of a unit-innovation AR(1) with coefficient rho, started
    stationary: a score correlated over ~(1 + rho)/(1 − rho) steps."""
    x = np.empty((reps, n))
    x[:, 0] = rng.normal(size=reps) / np.sqrt(1 - rho**2)
    e = rng.normal(size=(reps, n))
    for k in range(1, n):  # a test fixture, not a hot path: 600 vectorized steps
        x[:, k] = rho * x[:, k - 1] + e[:, k]
    return x


@pytest.fixture(scope="module")
def ar1():
    """3000 AR(1) series (rho = 0.5, n = 600): the known answer of the batch-means checks.
    Batches of 60 steps are 20 correlation times long, so both estimators' bias (O(τ/L),
    about 5 %) is below the Monte Carlo error of the checks."""
    rng = np.random.default_rng(7)
    rho, n = 0.5, 600
    x = _ar1_sums(rng, 3000, n, rho)
    # Var(Σ x_k) = Σ_ij γ(|i − j|), γ(h) = rho^h / (1 − rho²): about 4 n here
    lag = np.arange(1, n)
    omega = (n + 2 * np.sum((n - lag) * rho**lag)) / (1 - rho**2)
    return x, omega


def test_overlapping_batch_means_estimate_the_sums_variance_with_more_dof(ar1):
    """Both batch-means estimators of Var(Σ x_k) are unbiased to the O(τ/L) of a correlated
    series, and the overlapping one's variance is about 2/3 of the disjoint one's at the same
    batch length (Meketon & Schmeiser): its degrees of freedom, 2 E[V]²/Var(V), about
    1.5 (B − 1) = 13.5 against 9 (``batch_dof``)."""
    x, omega = ar1
    bm = np.array([batch_means(s[:, None], 10)[0, 0] for s in x])
    obm = np.array([overlapping_batch_means(s[:, None], 10)[0, 0] for s in x])
    # Means over 3000 replicates: 1 % Monte Carlo error (9 dof: sd 47 % / √3000); the bias
    # of L = 60 steps against τ = 3 is about −5 % (−2τ/L·(1 − …)): 10 % covers both.
    assert bm.mean() == pytest.approx(omega, rel=0.1)
    assert obm.mean() == pytest.approx(omega, rel=0.1)
    dof_bm, dof_obm = (2 * v.mean() ** 2 / v.var() for v in (bm, obm))
    # The measured dof has a Monte Carlo error of ~4 % (3000 replicates) and the estimators'
    # finite-sample non-normality: 20 % around the nominal values.
    assert dof_bm == pytest.approx(batch_dof(10), rel=0.2), dof_bm
    assert dof_obm == pytest.approx(batch_dof(10, overlapping=True), rel=0.2), dof_obm
    assert dof_obm > 1.3 * dof_bm


def test_coverage_factor_makes_two_std_a_95_percent_interval(ar1):
    """The error Σ x_k over a std from 10 overlapping batches is t-like with ~13.5 dof: ±2 std
    covers 93–94 %, ±2 k std 95 % (k = t_0.975(13.5)/1.96 = 1.10), ±1 k std about 71 %."""
    x, _ = ar1
    err = x.sum(axis=1)
    std = np.sqrt([overlapping_batch_means(s[:, None], 10)[0, 0] for s in x])
    k = coverage_factor([batch_dof(10, overlapping=True)])[0]
    assert k == pytest.approx(1.098, abs=0.002)
    z = np.abs(err) / std
    # 3000 replicates: the binomial sd of a fraction near 95 % is 0.4 %; ±1.2 % is 3 sd.
    assert np.mean(z <= 2) < 0.945
    assert np.mean(z <= 2 * k) == pytest.approx(0.95, abs=0.012)
    assert np.mean(z <= k) == pytest.approx(0.71, abs=0.03)
    assert coverage_factor([np.inf])[0] == 1.0


def test_expanded_covariance_carries_each_parameters_coverage_factor():
    """``expanded=True`` scales Λ by D = diag(k): std by k, correlations unchanged; the
    effective dof (Welch–Satterthwaite) is finite with batch means, and without them the
    std is (3.31)'s, k = 1."""
    lin = _random_linearization(4)
    plain = parameter_covariance(lin, np.ones(P), np.ones(P), batches=4, overlapping=True)
    wide = parameter_covariance(
        lin, np.ones(P), np.ones(P), batches=4, overlapping=True, expanded=True
    )
    assert wide.expanded and not plain.expanded
    np.testing.assert_allclose(plain.dof, wide.dof)
    # ν_eff = 1 / (1/ν_M + (W/V)²/ν_W) with W ≤ V per parameter (V = W + (M − W)₊): between
    # the two pieces' harmonic sum and the batch means' own ν_M
    nu_m, nu_w = batch_dof(4, overlapping=True), N - 1
    assert np.all(plain.dof >= 1 / (1 / nu_m + 1 / nu_w) - 1e-9), plain.dof
    assert np.all(plain.dof <= nu_m + 1e-9), plain.dof
    np.testing.assert_allclose(wide.coverage_factor, coverage_factor(plain.dof))
    k = wide.coverage_factor
    np.testing.assert_allclose(wide.std, plain.std * k, rtol=1e-12)
    np.testing.assert_allclose(wide.cov, plain.cov * np.outer(k, k), rtol=1e-12)
    white = parameter_covariance(lin, np.ones(P), np.ones(P), expanded=True)
    assert np.all(np.isinf(white.dof)) and np.all(white.coverage_factor == 1.0)
    np.testing.assert_allclose(white.cov, _dense_covariance(lin, [0, 1, 2]), rtol=1e-8)
