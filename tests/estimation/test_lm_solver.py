"""The structured LM pieces against dense references: banded arrow solve, exact box QP,
model decrease, and LM on a small nonlinear arrow problem with an active bound."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from physid.estimation.lm import (
    Linearization,
    LMSettings,
    _acceleration,
    _box_qp,
    _rescaled,
    _scale_lin,
    banded_upper,
    factor_damped,
    levenberg_marquardt,
    model_decrease,
    normal_equations,
    solve_damped,
    solve_factored,
)


def _random_lin(rng, n=6, d=3, p=2, md=4, mo=2, m0=3) -> Linearization:
    return Linearization(
        rng.normal(size=(n - 1, md)),
        rng.normal(size=(n - 1, md, d)),
        rng.normal(size=(n - 1, md, d)),
        rng.normal(size=(n - 1, md, p)),
        rng.normal(size=(n, mo)),
        rng.normal(size=(n, mo, d)),
        rng.normal(size=m0),
        rng.normal(size=(m0, d)),
        rng.normal(size=(m0, p)),
    )


def _dense(lin: Linearization):
    """Dense J and r of the same residual blocks (test reference only)."""
    n, _, d = lin.obs_A.shape
    p = lin.dyn_C.shape[2]
    rows, res = [], []
    for k in range(n - 1):
        J = np.zeros((lin.dyn_r.shape[1], n * d + p))
        J[:, k * d : (k + 1) * d] = lin.dyn_A[k]
        J[:, (k + 1) * d : (k + 2) * d] = lin.dyn_B[k]
        J[:, n * d :] = lin.dyn_C[k]
        rows.append(J), res.append(lin.dyn_r[k])
    for k in range(n):
        J = np.zeros((lin.obs_r.shape[1], n * d + p))
        J[:, k * d : (k + 1) * d] = lin.obs_A[k]
        rows.append(J), res.append(lin.obs_r[k])
    J = np.zeros((len(lin.init_r), n * d + p))
    J[:, :d], J[:, n * d :] = lin.init_A, lin.init_C
    rows.append(J), res.append(lin.init_r)
    return np.concatenate(rows), np.concatenate(res)


def test_arrow_solve_equals_dense_damped_normal_equations():
    rng = np.random.default_rng(0)
    lin = _random_lin(rng)
    J, r = _dense(lin)
    alpha = 0.3
    dx, dth = solve_damped(normal_equations(lin), alpha, np.full(2, -np.inf), np.full(2, np.inf))
    ref = np.linalg.solve(J.T @ J + alpha * np.eye(J.shape[1]), -J.T @ r)
    np.testing.assert_allclose(np.concatenate([dx.ravel(), dth]), ref, rtol=1e-10, atol=1e-12)
    delta = np.concatenate([dx.ravel(), dth])
    assert model_decrease(lin, dx, dth) == pytest.approx(r @ r - np.sum((r + J @ delta) ** 2))


@pytest.mark.parametrize("n, d", [(1, 3), (2, 1), (5, 3)])
def test_banded_upper_holds_the_dense_upper_band(n, d):
    """LAPACK upper band storage: ab[u + i − j, j] = A[i, j] for j − u ≤ i ≤ j (u = 2d − 1),
    zero elsewhere; exact copies, so compared exactly."""
    rng = np.random.default_rng(n * 10 + d)
    D, U = rng.normal(size=(n, d, d)), rng.normal(size=(n - 1, d, d))
    A = np.zeros((n * d, n * d))
    for k in range(n):
        A[k * d : (k + 1) * d, k * d : (k + 1) * d] = D[k]
    for k in range(n - 1):
        A[k * d : (k + 1) * d, (k + 1) * d : (k + 2) * d] = U[k]
    u = 2 * d - 1
    ref = np.zeros((2 * d, n * d))
    for j in range(n * d):
        for i in range(max(0, j - u), j + 1):
            ref[u + i - j, j] = A[i, j]
    np.testing.assert_array_equal(banded_upper(D, U), ref)


def test_states_only_solve_equals_dense():
    """With no parameters (p = 0: the states-only warm-up, cross-validation) the factored
    solve is the dense damped Gauss–Newton step (round-off of the dense solve)."""
    rng = np.random.default_rng(7)
    lin = _random_lin(rng, p=0)
    alpha = 0.3
    ne = normal_equations(lin)
    dx, dth = solve_damped(ne, alpha, np.zeros(0), np.zeros(0))
    J, r = _dense(lin)
    ref = np.linalg.solve(J.T @ J + alpha * np.eye(J.shape[1]), -J.T @ r)
    assert dth.shape == (0,)
    np.testing.assert_allclose(dx.ravel(), ref, rtol=1e-10, atol=1e-12)


def test_box_qp_equals_enumeration_of_active_sets():
    rng = np.random.default_rng(1)
    for _ in range(30):
        A = rng.normal(size=(6, 4))
        S, s = A.T @ A + 0.1 * np.eye(4), 3 * rng.normal(size=4)
        lo, hi = -rng.uniform(0, 1, 4), rng.uniform(0, 1, 4)
        best = None
        for pattern in itertools.product((-1, 0, 1), repeat=4):  # every active set
            x = np.where(np.array(pattern) < 0, lo, np.where(np.array(pattern) > 0, hi, 0.0))
            free = np.array(pattern) == 0
            if free.any():
                rhs = -(s + S @ x)[free]
                x[free] = np.linalg.solve(S[np.ix_(free, free)], rhs)
            if np.all(x >= lo - 1e-12) and np.all(x <= hi + 1e-12):
                f = 0.5 * x @ S @ x + s @ x
                if best is None or f < best[0]:
                    best = (f, x)
        np.testing.assert_allclose(_box_qp(S, s, lo, hi), best[1], atol=1e-10)


class _Curve:
    """States x_k ∈ R (n of them), parameter θ ∈ [lo, hi]: x_{k+1} − x_k − θ x_k² h ≈ 0,
    observations y_k ≈ x_k. The true θ lies outside the box, so the bound must be active."""

    def __init__(self, y, h, lower, upper):
        self.y, self.h = y, h
        self.lower, self.upper = np.array([lower]), np.array([upper])

    def _res(self, x, th):
        dyn = (x[1:] - x[:-1] - th[0] * x[:-1] ** 2 * self.h)[:, None] * 10.0
        return dyn, (x - self.y)[:, None], np.array([0.0])

    def linearize(self, x, th):
        dyn, obs, init = self._res(x, th)
        n = len(x)
        A = (-1.0 - 2 * th[0] * x[:-1] * self.h)[:, None, None] * 10.0
        B = np.full((n - 1, 1, 1), 10.0)
        C = (-(x[:-1] ** 2) * self.h)[:, None, None] * 10.0
        return Linearization(
            dyn, A, B, C, obs, np.ones((n, 1, 1)), init, np.zeros((1, 1)), np.zeros((1, 1))
        )

    def cost(self, x, th):
        return float(sum(np.sum(a**2) for a in self._res(x, th)))

    def retract(self, x, dx):
        return x + dx[:, 0]

    def residuals(self, x, th):
        return self._res(x, th)


def _curve_data(h: float = 0.01, n: int = 60, theta: float = 0.8) -> np.ndarray:
    """Noise-free _Curve states x_{k+1} = x_k + θ x_k² h from x_0 = 1."""
    x = [1.0]
    for _ in range(n - 1):
        x.append(x[-1] + theta * x[-1] ** 2 * h)
    return np.array(x)


def test_lm_recovers_parameter_and_respects_box():
    h, y = 0.01, _curve_data()
    free = levenberg_marquardt(_Curve(y, h, 0.0, 5.0), y * 0.0 + 1.0, np.array([0.1]))
    assert free.converged and free.theta[0] == pytest.approx(0.8, rel=1e-6)
    boxed = levenberg_marquardt(_Curve(y, h, 0.0, 0.5), y * 0.0 + 1.0, np.array([0.1]))
    assert boxed.theta[0] == 0.5  # exactly on the bound, not beyond it
    assert boxed.cost > free.cost
    assert all(b <= a for a, b in zip(boxed.history[:-1], boxed.history[1:], strict=True))
    assert LMSettings().tau == 1e-6  # Algorithm 1's initial damping factor


def test_geodesic_acceleration_equals_dense_second_order_correction():
    """a = −(JᵀJ + αI)⁻¹ Jᵀ r_vv (Transtrum & Sethna) with r_vv of the _Curve residuals along
    the step written out by hand: d²/dt² of −10 h (θ + t δθ)(x + t δx)² is
    −10 h (2θ δx² + 4 x δx δθ), the third derivative −60 h δθ δx²; obs and init rows are
    linear. The residual is cubic along the step, so the forward difference at t equals
    r_vv + (t/3) r_vvv exactly; the tolerance is round-off of the dense solve."""
    h, n = 0.01, 40
    rng = np.random.default_rng(3)
    y = 1.0 + 0.1 * rng.normal(size=n)
    prob = _Curve(y, h, -10.0, 10.0)
    x, th = y + 0.05 * rng.normal(size=n), np.array([0.3])
    lin = prob.linearize(x, th)
    ne = normal_equations(lin)
    damped = factor_damped(ne, 1e-3)
    inf = np.full(1, np.inf)
    dx, dth = solve_factored(damped, ne.gx, ne.gp, -inf, inf)
    t = 0.1
    ax, ath = _acceleration(prob, x, th, lin, damped, (dx, dth), np.ones(1), -inf, inf, t=t)
    J, _ = _dense(lin)
    d, dt = dx[:-1, 0], dth[0]
    second = -10 * h * (2 * th[0] * d**2 + 4 * x[:-1] * d * dt)
    rvv = np.concatenate([second + t / 3 * (-60 * h * dt * d**2), np.zeros(n + 1)])
    ref = np.linalg.solve(J.T @ J + 1e-3 * np.eye(n + 1), -J.T @ rvv)
    np.testing.assert_allclose(np.concatenate([ax[:, 0], ath]), ref, rtol=1e-8, atol=1e-12)


def test_geodesic_and_plain_lm_reach_the_same_minimum():
    """The acceleration changes the path, not the answer: both stop at θ = 0.8 (1e-6)."""
    h, y = 0.01, _curve_data()
    for ratio in (None, 0.75):
        res = levenberg_marquardt(
            _Curve(y, h, 0.0, 5.0), y * 0.0 + 1.0, np.array([0.1]), LMSettings(geodesic_ratio=ratio)
        )
        assert res.converged and res.theta[0] == pytest.approx(0.8, rel=1e-6), ratio


@pytest.mark.parametrize(
    "settings",
    [LMSettings(), LMSettings(max_iter=2), LMSettings(eps_f=0.0, eps_g=1e3)],
    ids=["eps_f stop", "iteration limit", "gradient stop"],
)
def test_result_linearization_is_taken_at_the_solution(settings):
    """The covariance is computed from ``result.lin``: it must be the linearization at the
    returned (X, θ), however the run stopped (LM skips linearizing after the last step and
    takes it afterwards). Compared with a fresh linearization to round-off (the θ columns go
    through the parameter scaling and back)."""
    h, y = 0.01, _curve_data()
    prob = _Curve(y, h, 0.0, 5.0)
    res = levenberg_marquardt(prob, y * 0.0 + 1.0, np.array([0.1]), settings)
    assert res.iterations >= 1
    fresh = prob.linearize(res.X, res.theta)
    for name in ("dyn_r", "dyn_A", "dyn_C", "obs_r"):
        np.testing.assert_allclose(getattr(res.lin, name), getattr(fresh, name), rtol=1e-12)


def test_zero_iterations_return_the_start_point():
    """max_iter = 0 is a valid request (the start point's cost and linearization), not an
    UnboundLocalError: θ, X and cost are the start's, and ``lin`` is the start's to round-off."""
    h, y = 0.01, _curve_data()
    prob, x0, th0 = _Curve(y, h, 0.0, 5.0), y * 0.0 + 1.0, np.array([0.1])
    res = levenberg_marquardt(prob, x0, th0, LMSettings(max_iter=0, warmup_iter=0))
    assert (res.iterations, res.converged, res.reason) == (0, False, "iteration limit")
    np.testing.assert_array_equal(res.X, x0)
    assert res.theta[0] == pytest.approx(0.1, rel=1e-15)  # through the scaling and back
    assert res.history == [res.cost] and res.cost == pytest.approx(prob.cost(x0, th0), rel=1e-15)
    fresh = prob.linearize(x0, th0)
    for name in ("dyn_r", "dyn_A", "dyn_C", "obs_r"):
        np.testing.assert_allclose(getattr(res.lin, name), getattr(fresh, name), rtol=1e-12)


def test_rescaled_normal_equations_equal_those_of_scaled_blocks():
    """LM scales the unscaled normal equations (``_rescaled``) instead of assembling them again
    from the scaled blocks: both must agree, band included. Tolerance: round-off of products
    taken in another order."""
    rng = np.random.default_rng(7)
    lin = _random_lin(rng)
    sx, sc = rng.uniform(0.1, 10.0, 3), rng.uniform(0.1, 10.0, 2)
    got = _rescaled(normal_equations(lin), sx, sc)
    ref = normal_equations(_scale_lin(lin, sc), sx, band=True)
    for name in ("D", "U", "F", "P", "gx", "gp", "band"):
        np.testing.assert_allclose(getattr(got, name), getattr(ref, name), rtol=1e-12, atol=1e-12)
