"""Multiple shooting (``estimation.multiple_shooting``) against single shooting
(``estimation.shooting``) on a damped pendulum with a known answer (cheap to compile: the
default run), and the closed-tree state space on the hexagon loop's constraints (slow).

The pendulum x = (φ, φ̇) [rad, rad/s], φ̈ = −k sin φ − c φ̇ + u, is stepped by RK4 (h = 0.02 s);
θ = (k [1/s²], c [1/s]); the angle is observed at every step with σ = 1 mrad."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from physid.estimation import lm
from physid.estimation.multiple_shooting import (
    SETTINGS,
    ClosedTreeStates,
    Euclidean,
    MultipleShooting,
)
from physid.estimation.shooting import levenberg_marquardt

H = 0.02
TRUTH = np.array([9.0, 0.3])
START = np.array([9.0, 0.3]) * np.array([0.7, 3.0])  # k 30 % low, c 3× high
X0 = jnp.array([1.0, 0.0])
SIGMA = 1e-3  # rad


def _rk4(x, theta, u):
    def f(x):
        return jnp.array([x[1], -theta[0] * jnp.sin(x[0]) - theta[1] * x[1] + u])

    k1 = f(x)
    k2 = f(x + 0.5 * H * k1)
    k3 = f(x + 0.5 * H * k2)
    k4 = f(x + H * k3)
    return x + H / 6 * (k1 + 2 * k2 + 2 * k3 + k4)


def pendulum_flow(x0, theta, u):
    def one(x, uk):
        x1 = _rk4(x, theta, uk[0])
        return x1, x1[:1]

    x_end, y = jax.lax.scan(one, x0, u)
    return x_end, y


SPACE = Euclidean(2)


def _inputs(n):
    t = H * np.arange(n)
    return jnp.asarray(0.5 * np.sin(2.3 * t))[:, None]


@jax.jit
def _single_residual(theta, u, measured):
    _, y = pendulum_flow(X0, theta, u)
    return (y - measured).ravel() / SIGMA


@jax.jit
def _single_residual_jacobian(theta, u, measured):
    J, r = jax.jacfwd(lambda t: (_single_residual(t, u, measured),) * 2, has_aux=True)(theta)
    return r, J


def _data(segments, length, seed=None):
    u = _inputs(segments * length)
    _, y = pendulum_flow(X0, jnp.asarray(TRUTH), u)
    if seed is not None:
        y = y + SIGMA * jax.random.normal(jax.random.PRNGKey(seed), y.shape)
    return u, y


def _problem(u, y, segments, continuity_weight=1e6):
    shape = (segments, -1)
    return MultipleShooting(
        pendulum_flow, SPACE, X0, u.reshape(*shape, 1), y.reshape(*shape, 1),
        np.array([1 / SIGMA]), np.full(2, continuity_weight), [0.1, 0.0], [100.0, 10.0],
    )  # fmt: skip


def _single(u, y, start=START):
    return levenberg_marquardt(
        lambda t: _single_residual_jacobian(jnp.asarray(t), u, y),
        lambda t: _single_residual(jnp.asarray(t), u, y),
        start, [0.1, 0.0], [100.0, 10.0],
    )  # fmt: skip


def test_arrow_blocks_are_the_dense_jacobian():
    """The arrow layout against jax.jacfwd of the stacked residual vector (Euclidean states:
    tangent = ambient coordinates), at a point off the trajectory (gaps nonzero)."""
    u, y = _data(4, 10, seed=0)
    prob = _problem(u, y, 4, continuity_weight=30.0)
    X = prob.initial_states(START) + jnp.array([0.05, -0.1])
    theta = jnp.asarray(START)
    lin = prob.linearize(X, theta)

    def stacked(z):
        Xz = z[:6].reshape(3, 2)
        dyn, _, init = prob._res(Xz, z[6:], *prob._data)
        return jnp.concatenate([init, dyn.ravel()])

    # Jitted (as the estimator's own linearization is): run eagerly, the residual's scans
    # and their forward-mode derivative were dispatched op by op.
    z = jnp.concatenate([X.ravel(), theta])
    J, r = (np.asarray(x) for x in jax.jit(lambda z: (jax.jacfwd(stacked)(z), stacked(z)))(z))
    n0 = lin.init_r.size
    md = lin.dyn_r.shape[1]
    # Same function, forward mode both ways: equal to round-off of O(1e3) weighted entries.
    tol = 1e-9 * np.max(np.abs(J))
    np.testing.assert_allclose(lin.init_r, r[:n0], atol=1e-9)
    np.testing.assert_allclose(lin.init_A, J[:n0, 0:2], atol=tol)
    np.testing.assert_allclose(lin.init_C, J[:n0, 6:], atol=tol)
    assert np.all(J[:n0, 2:6] == 0)  # the init block touches x_0 (segment 1's start) only
    for k in range(2):
        rows = slice(n0 + k * md, n0 + (k + 1) * md)
        np.testing.assert_allclose(lin.dyn_r[k], r[rows], atol=1e-9)
        np.testing.assert_allclose(lin.dyn_A[k], J[rows, 2 * k : 2 * k + 2], atol=tol)
        np.testing.assert_allclose(lin.dyn_B[k], J[rows, 2 * k + 2 : 2 * k + 4], atol=tol)
        np.testing.assert_allclose(lin.dyn_C[k], J[rows, 6:], atol=tol)
        others = np.delete(J[rows, :6], np.s_[2 * k : 2 * k + 4], axis=1)
        assert np.all(others == 0)  # a dyn block touches two consecutive states only


def test_noise_free_optimum_is_single_shootings():
    u, y = _data(5, 40)
    fit = _problem(u, y, 5).fit(START)
    single = _single(u, y)
    # Noise-free data bring the cost to round-off; LM's own stop there ("no decrease at
    # maximal damping") is confirmed as a minimum by the Gauss–Newton test.
    assert fit.converged and single.converged, (fit.reason, single.reason)
    # Noise-free: both at the truth, to the round-off of RK4 trajectories (1e-10 relative).
    np.testing.assert_allclose(fit.theta, TRUTH, rtol=1e-10)
    np.testing.assert_allclose(fit.theta, single.theta, rtol=1e-8)


def test_noisy_optimum_approaches_single_shootings_with_the_continuity_weight():
    u, y = _data(5, 40, seed=3)
    single = _single(u, y)
    fit = _problem(u, y, 5, continuity_weight=1e6).fit(START)
    assert fit.converged, fit.reason
    # With noise the gaps are a penalty and the optimum moves from single shooting's by the
    # gaps' multipliers over w_c² (measured: 2e-5 relative at w_c = 1e4, 2e-9 at 1e6). 1e-7
    # at w_c = 1e6 per rad and rad/s is far below the parameters' std (~1e-4 relative here).
    np.testing.assert_allclose(fit.theta, single.theta, rtol=1e-7)
    loose = _problem(u, y, 5, continuity_weight=1.0).fit(START)
    # A weak weight (σ_c = 1 rad) lets the segments part: a visibly different optimum.
    assert np.max(np.abs(loose.theta / single.theta - 1)) > 1e-6


def test_one_segment_is_refused():
    u, y = _data(1, 10)
    with pytest.raises(ValueError, match="at least 2 segments"):
        _problem(u, y, 1)


@pytest.fixture(scope="module")
def loop_space():
    from physid.rigs.models.loop import load_loop
    from physid.spec import load_spec

    rig = load_loop(load_spec("hexagon_loop"))
    params = rig.params(jnp.array([20.0, 20.0]))
    return rig, ClosedTreeStates.partitioned_at(rig.system, params, jnp.zeros(13))


@pytest.mark.slow  # compiles the hexagon's kinematics several times: ~3 min of CPU here
def test_closed_tree_states_stay_on_the_constraints(loop_space):
    from physid.dynamics.variational import constrained

    rig, space = loop_space
    system, params = rig.system, space.params
    assert len(space.dependent) == 6 and space.dim == 14
    rng = np.random.default_rng(0)
    q0, _ = rig.start()
    p = jnp.asarray(rng.standard_normal(13))
    x = space.start(q0, p)
    delta = jnp.asarray(0.2 * rng.standard_normal(14))
    x1 = jax.jit(space.retract)(x, delta)
    q1, p1 = x1[:13], x1[13:]
    Dh = constrained.constraint_jacobian(system, params, q1)
    # Projection to the integrator's Newton tolerance (1e-12 rad) on O(1) m lever arms.
    assert float(jnp.max(jnp.abs(constrained.constraints(system, params, q1)))) < 1e-12
    np.testing.assert_allclose(q1[jnp.asarray(space.independent)] - delta[:7], 0.0, atol=1e-15)
    # Tangent directions: Dh N = 0 (round-off of an m × m solve, 1e-12).
    T = space.basis(x1)
    assert float(jnp.max(jnp.abs(Dh @ T[:13, :7]))) < 1e-12
    # A momentum's class: p + Dhᵀμ has the same representative; the gap of a state with itself
    # (written with another representative) is zero.
    mu = jnp.asarray(rng.standard_normal(6))
    np.testing.assert_allclose(space.canonical(q1, p1 + Dh.T @ mu), p1, atol=1e-12)
    other = jnp.concatenate([q1, p1 + Dh.T @ mu])
    assert float(jnp.max(jnp.abs(space.gap(x1, other)))) < 1e-12
    # Retraction at δ = 0 is the identity on a canonical state.
    np.testing.assert_allclose(space.retract(x1, jnp.zeros(14)), x1, atol=1e-13)


def test_settings_leave_the_arrow_lm_defaults_otherwise():
    # The shooting settings change only the stop rules.
    base = lm.LMSettings()
    assert SETTINGS.max_iter == base.max_iter and SETTINGS.tau == base.tau
    assert SETTINGS.geodesic_ratio == base.geodesic_ratio


@pytest.fixture(scope="module")
def hexagon():
    """The hexagon loop's multiple-shooting problem (1 s, 4 segments of 25 steps) and single
    shooting beside it, on noise-free end-effector positions (the benchmark's problems)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    import hexagon_identification as bench

    from physid.rigs.models.loop import load_loop
    from physid.spec import load_spec

    rig = load_loop(load_spec("hexagon_loop"))
    return rig, bench


@pytest.mark.slow
def test_hexagon_multiple_shooting_optimum_is_single_shootings(hexagon):
    rig, bench = hexagon
    start = np.array([10.0, 25.0])
    fit = bench.ms_problem(rig, rig.steps).fit(start)
    residual, residual_jacobian, _, _ = bench.problem(rig)
    single = levenberg_marquardt(residual_jacobian, residual, start, 0.5, 500.0)
    assert fit.converged, fit.reason
    # Noise-free positions and rollouts solved to 1e-12: both at the truth to round-off, so
    # within 1e-8 of each other (the acceptance's bar for "the same optimum").
    np.testing.assert_allclose(fit.theta, single.theta, rtol=1e-8)
    np.testing.assert_allclose(fit.theta, rig.true_kappa(), rtol=1e-8)


@pytest.mark.slow
def test_hexagon_multiple_shooting_over_three_seconds(hexagon):
    rig, bench = hexagon
    prob = bench.ms_problem(rig, 3 * rig.steps)
    fit = prob.fit(np.array([10.0, 25.0]))
    assert fit.converged, fit.reason
    np.testing.assert_allclose(fit.theta, rig.true_kappa(), rtol=1e-8)
    # Every segment start on the closure to the integrator's tolerance.
    from physid.dynamics.variational import constrained

    h = jax.vmap(lambda x: constrained.constraints(rig.system, prob.space.params, x[:13]))(fit.X)
    assert float(jnp.max(jnp.abs(h))) < 1e-11
