"""The constrained variational integrator (Caldwell et al., eqs. 3–10) on a four-bar linkage:
closure held at configuration level, energy without drift, the step's linearization (A_k,
B_k, eqs. 6–8) and its transpose against central differences, and the discrete adjoint of
Lemma 1 against forward mode and central differences.

One small loop (3 hinges, 2 closure rows, 1 degree of freedom) keeps the compilations cheap;
the hexagon of the draft is tested in test_hexagon_loop.py (slow).

All ``slow``: even this loop's constrained Newton step, its implicit-function JVP and the
adjoint scan take several compilations of tens of seconds each (measured: 261 s of CPU for
the first four tests on the shared machine), far over the default run's budget."""

from dataclasses import replace

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from physid.dynamics.tree import (
    REVOLUTE,
    ActuatorParams,
    BodyParams,
    JointGeometry,
    Tree,
    TreeParams,
    default_dof_params,
)
from physid.dynamics.variational import adjoint, constrained
from physid.dynamics.variational.constrained import ClosedTree, PointClosure, PointLoad

pytestmark = pytest.mark.slow

LENGTHS = (0.2, 0.4, 0.3)
MASS = 0.1
H = 0.005
Q_START = jnp.array([0.6, 1.2, 1.3])  # a closed configuration (the closure target is its tip)
REST = jnp.array([0.3, 1.0, 1.5])  # spring rest angles: the loop starts out of equilibrium

TREE = Tree(
    body_names=("crank", "coupler", "rocker"),
    parents=(-1, 0, 1),
    joint_names=("a", "b", "c"),
    joint_types=(REVOLUTE,) * 3,
)


def _params(stiffness, damping=0.0):
    n = 3
    rod = np.array([MASS * L**2 / 12 for L in LENGTHS])
    translation = np.zeros((n, 3))
    translation[1:, 2] = LENGTHS[:2]
    return TreeParams(
        bodies=BodyParams(
            mass=jnp.full(n, MASS),
            com=jnp.array([[0.0, 0.0, L / 2] for L in LENGTHS]),
            inertia=jnp.stack([jnp.diag(jnp.array([r, r, 1e-6])) for r in rod]),
        ),
        joints=JointGeometry(
            rotation=jnp.tile(jnp.eye(3), (n, 1, 1)),
            translation=jnp.asarray(translation),
            axis=jnp.tile(jnp.array([1.0, 0.0, 0.0]), (n, 1)),
            anchor=jnp.zeros((n, 3)),
        ),
        dofs=_dofs(stiffness, damping),
        actuators=ActuatorParams(gear=jnp.zeros(0), km=jnp.zeros(0), Rm=jnp.zeros(0)),
        gravity=jnp.array([0.0, 0.0, -9.81]),
    )


def _dofs(stiffness, damping):
    d = default_dof_params(3, springref=REST)
    ones = jnp.ones(3)
    return replace(d, stiffness=stiffness * ones, damping=damping * ones)


def _tip_target():
    open_tree = ClosedTree(TREE, (), (PointLoad(2, (0.0, 0.0, LENGTHS[2])),))
    return np.asarray(constrained.load_points(open_tree, _params(1.0), Q_START)[0])


# The tip of the rocker stays on its start point in the y–z plane (2 rows: the x row would be
# identically zero for this planar loop, a dependent row). A world-frame force pushes the
# coupler's end.
SYSTEM = ClosedTree(
    TREE,
    closures=(
        PointClosure(2, (0.0, 0.0, LENGTHS[2]), target=tuple(_tip_target()), free_axis=(1, 0, 0)),
    ),
    loads=(PointLoad(1, (0.0, 0.0, LENGTHS[1])),),
)


def params_of(theta):
    """θ = (stiffness shared by the three hinges (N m/rad), damping (N m s/rad))."""
    return _params(theta[0], theta[1])


THETA = jnp.array([0.8, 0.002])
P_START = jnp.zeros(3)


def _force(n, scale=1.0):
    t = H * (np.arange(n) + 0.5)
    return jnp.asarray(
        scale * np.stack([0 * t, 0.5 * np.sin(2 * np.pi * t / 0.4), 0.3 * np.cos(2 * np.pi * t)], 1)
    )


@jax.jit
def _run(theta, u):
    """A rollout with the check quantities: closure h(q_k), step residuals, energies. Every
    test runs N_RUN steps (one compilation), forced or not by ``u``."""
    params = params_of(theta)
    q, p, mult = constrained.rollout(SYSTEM, params, Q_START, P_START, u, H)
    closure = jax.vmap(lambda x: constrained.constraints(SYSTEM, params, x))(q)
    residual = constrained.residuals_along(SYSTEM, params, q, p, mult, u, H)
    energy = jax.vmap(lambda a, b: constrained.step_energy(SYSTEM, params, a, b, H))(q[:-1], q[1:])
    return q, p, closure, residual, energy


N_RUN = 4000  # 20 s, ~25 periods of the loop's swing


def test_closure_and_residual_stay_at_round_off_under_forcing():
    q, _, closure, residual, _ = _run(THETA, _force(N_RUN))
    assert float(jnp.ptp(q[:, 0])) > 0.2  # the loop moves (not a trivial pass)
    # Newton stops at corrections below 1e-12 rad; h is then at round-off of a 1 m scale.
    assert float(jnp.max(jnp.abs(closure))) < 1e-12
    # The DEL residual (N m s) of every stored step: round-off of momenta ~1e-2.
    assert float(jnp.max(jnp.abs(residual))) < 1e-12


def test_energy_does_not_drift_without_forcing_or_damping():
    _, _, closure, _, energy = _run(jnp.array([THETA[0], 0.0]), jnp.zeros((N_RUN, 3)))
    e = np.asarray(energy)
    swing = float(np.ptp(e[:200]))
    # The midpoint rule's energy oscillates at O(h²) without a trend: the mean over the last
    # tenth equals the mean over the first within a small fraction of the oscillation (a
    # first-order scheme drifts by many oscillation widths over 25 periods).
    drift = abs(e[-400:].mean() - e[:400].mean())
    assert drift < 0.05 * swing + 1e-12
    assert swing < 1e-3 * abs(e[0] - float(np.min(e))) + 1e-3
    assert float(jnp.max(jnp.abs(closure))) < 1e-12


# --- one step: A_k, B_k and the transpose, against central differences --------------------

U0 = jnp.array([0.0, 0.4, -0.2])


def _step_of(z):
    """x_{k+1} of one step as a function of z = (q_k, p_k, θ)."""
    q0, p0, theta = z[:3], z[3:6], z[6:]
    q1, p1, _ = constrained.solve_step(SYSTEM, params_of(theta), q0, p0, U0, H)
    return jnp.concatenate([q1, p1])


@jax.jit
def _step_jacobian(z):
    """(∂x_{k+1}/∂z = [A_k | B_k] by the implicit-function JVP, x_{k+1}): one compilation
    serves the Jacobian and the central differences."""
    return jax.jacfwd(lambda z: (_step_of(z),) * 2, has_aux=True)(z)


@pytest.fixture(scope="module")
def state_mid():
    """A state in the middle of a forced run (moving, off any symmetric configuration)."""
    q, p, *_ = _run(THETA, _force(N_RUN))
    return q[60], p[60]


def test_linearization_matches_central_differences(state_mid):
    q0, p0 = state_mid
    z = jnp.concatenate([q0, p0, THETA])
    AB, _ = _step_jacobian(z)  # eqs. 7a–d (A_k) and 8 (B_k) by the implicit-function theorem
    # Central differences with ε = 1e-5 (rad, N m s, N m/rad, N m s/rad: every input is of
    # order 1e-3..1): truncation O(ε²) ~ 1e-10 and the round-off of a step that Newton
    # converged quadratically (~1e-16/ε ~ 1e-11), so 1e-6 relative to each column's norm
    # is a strict test. (ε relative to the damping, 2e-8, was measured to leave 2e-6.)
    for i in range(z.shape[0]):
        e = jnp.zeros_like(z).at[i].set(1e-5)
        column = (_step_jacobian(z + e)[1] - _step_jacobian(z - e)[1]) / 2e-5
        assert float(jnp.linalg.norm(AB[:, i] - column)) < 1e-6 * float(
            jnp.linalg.norm(AB[:, i])
        ), i


@jax.jit
def _transpose_check(q0, p0, key):
    params = params_of(THETA)
    q1, _, mult = constrained.solve_step(SYSTEM, params, q0, p0, U0, H)
    key = jax.random.split(key, 4)
    dq0, dp0 = jax.random.normal(key[0], (3,)), jax.random.normal(key[1], (3,))
    du = jax.random.normal(key[2], (3,))
    dparams = jax.tree.map(lambda a: 0.1 * jnp.ones_like(a), params)
    dq1, dp1, _ = constrained.step_jvp(
        SYSTEM, params, q0, p0, U0, H, q1, mult, (dparams, dq0, dp0, du, 0.0)
    )
    wq, wp = jax.random.normal(key[3], (2, 3))
    pb, qb, pbar, ub = constrained.step_vjp(SYSTEM, params, q0, p0, U0, H, q1, mult, wq, wp)
    lhs = wq @ dq1 + wp @ dp1
    leaves = zip(jax.tree.leaves(pb), jax.tree.leaves(dparams), strict=True)
    params_dot = sum(jnp.sum(a * b) for a, b in leaves)
    return lhs, qb @ dq0 + pbar @ dp0 + ub @ du + params_dot


def test_step_vjp_is_the_transpose_of_the_jvp(state_mid):
    lhs, rhs = _transpose_check(*state_mid, jax.random.PRNGKey(3))
    # ⟨w, J v⟩ = ⟨Jᵀ w, v⟩ evaluated in two orders (all parameters, states and inputs
    # perturbed at once): equal to round-off.
    assert abs(float(lhs - rhs)) < 1e-10 * (abs(float(lhs)) + 1.0)


# --- Lemma 1: adjoint = forward mode = central differences -------------------------------

N_COST = 80
U_COST = _force(N_COST)


def _running(q, p, k, theta):
    """½‖x_tip − x_ref‖² of the coupler's end against a reference (m²), every step."""
    point = constrained.load_points(SYSTEM, params_of(theta), q)[0]
    return 0.5 * jnp.sum((point - jnp.array([0.0, 0.1, 0.3])) ** 2)


@jax.jit
def _adjoint(theta):
    return adjoint.adjoint_gradient(SYSTEM, params_of, theta, Q_START, P_START, U_COST, H, _running)


@jax.jit
def _forward_gradient(theta):
    """(J, DJ) by forward mode: two tangent rollouts through the implicit-function JVP."""

    def f(t):
        value = adjoint.cost(SYSTEM, params_of, t, Q_START, P_START, U_COST, H, _running)
        return value, value

    g, value = jax.jacfwd(f, has_aux=True)(theta)
    return value, g


def test_adjoint_gradient_equals_forward_mode_and_central_differences():
    value, g_adj = _adjoint(THETA)
    value_fwd, g_fwd = _forward_gradient(THETA)
    rel = 1e-5

    def cost(t):
        return _adjoint(t)[0]

    g_fd = jnp.array(
        [
            (cost(THETA.at[i].add(rel * THETA[i])) - cost(THETA.at[i].add(-rel * THETA[i])))
            / (2 * rel * THETA[i])
            for i in range(2)
        ]
    )
    assert abs(float(value - value_fwd)) < 1e-12 * abs(float(value))
    assert float(jnp.linalg.norm(g_fwd)) > 0
    # Adjoint and forward mode are the same derivative summed in two orders: round-off.
    for i in range(2):
        assert abs(float(g_adj[i] - g_fwd[i])) < 1e-9 * abs(float(g_fwd[i]))
        # Central differences: truncation O(rel²) ~ 1e-10 and Newton's 1e-12 over 2e-5
        # relative steps; the acceptance asks 1e-6 relative, per component.
        assert abs(float(g_adj[i] - g_fd[i])) < 1e-6 * abs(float(g_fd[i]))
