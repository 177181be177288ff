"""The midpoint variational integrator on trees (Caldwell et al., eqs. 2–5): the known periods
of a double pendulum's normal modes, bounded energy error, second-order convergence to an
independent ODE solver, and a residual form that agrees with the step it describes."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.integrate import solve_ivp
from tree_cases import FAST_COMPILE

from physid.dynamics import actuators, newton_euler, variational
from physid.dynamics.tree import (
    DC_MOTOR,
    REVOLUTE,
    ActuatorParams,
    BodyParams,
    JointGeometry,
    Tree,
    TreeParams,
    default_dof_params,
)

G = 9.81


def _chain(n_links: int, length=0.3, mass=0.2, actuated=False, **dof_values):
    """A planar chain of ``n_links`` thin rods on hinges about y, hanging along −z."""
    names = tuple(f"link{i}" for i in range(n_links))
    tree = Tree(
        body_names=names,
        parents=tuple(range(-1, n_links - 1)),
        joint_names=tuple(f"hinge{i}" for i in range(n_links)),
        joint_types=(REVOLUTE,) * n_links,
        actuator_names=("motor",) if actuated else (),
        actuator_joints=(0,) if actuated else (),
        actuator_kinds=(DC_MOTOR,) if actuated else (),
    )
    rod = mass * length**2 / 12
    translation = np.zeros((n_links, 3))
    translation[1:, 2] = -length  # each hinge at the end of the link before it
    params = TreeParams(
        bodies=BodyParams(
            mass=jnp.full(n_links, mass),
            com=jnp.tile(jnp.array([0.0, 0.0, -length / 2]), (n_links, 1)),
            inertia=jnp.tile(jnp.diag(jnp.array([rod, rod, 1e-6])), (n_links, 1, 1)),
        ),
        joints=JointGeometry(
            rotation=jnp.tile(jnp.eye(3), (n_links, 1, 1)),
            translation=jnp.asarray(translation),
            axis=jnp.tile(jnp.array([0.0, 1.0, 0.0]), (n_links, 1)),
            anchor=jnp.zeros((n_links, 3)),
        ),
        dofs=default_dof_params(n_links, **dof_values),
        actuators=ActuatorParams(
            gear=jnp.ones(1 if actuated else 0),
            km=jnp.full(1 if actuated else 0, 0.042),
            Rm=jnp.full(1 if actuated else 0, 8.4),
        ),
        gravity=jnp.array([0.0, 0.0, -G]),
    )
    return tree, params


# Every two-link test runs this one actuated chain (damping, friction and input are traced
# parameters, so they share one compilation) in chunks of CHUNK steps; the energy of each state
# and the residual of each step come out of the same compiled function.
# Compiled without LLVM's optimizations (FAST_COMPILE: float64, no fast-math; the order of
# operations may differ, which moves results at rounding level only, far below every
# tolerance here): the file's CPU 33.9 -> 25.6 s on an empty cache, the rollouts no slower
# to notice. (Tests whose bound is the rounding floor itself, as test_spook_warm.py's, keep
# XLA's default: there the floor moved 3×.)
CHAIN = _chain(2, actuated=True)[0]
CHUNK = 125


def _energy(params, q, p):
    qd = jnp.linalg.solve(newton_euler.crba(CHAIN, params, q), p)
    return newton_euler.total_energy(CHAIN, params, q, qd)


@functools.partial(jax.jit, compiler_options=FAST_COMPILE)
def _chunk(params, q0, p0, u, h):
    q, p = variational.rollout_from_momentum(CHAIN, params, q0, p0, u, h)
    energy = jax.vmap(lambda a, b: _energy(params, a, b))(q[1:], p[1:])
    residual = jax.vmap(
        lambda a, b, c, d, e: variational.step_residual(CHAIN, params, a, b, c, d, e, h)
    )(q[:-1], p[:-1], q[1:], p[1:], u)
    return q[1:], p[1:], energy, residual


def _run(params, q0, qd0, u, h):
    """The chain from (q₀, q̇₀) under u [k·CHUNK, 1]: q, p [k·CHUNK + 1, 2], the energy after
    each step [k·CHUNK] and each step's residual [k·CHUNK, 4]."""
    # Strongly typed float64 arrays: a weakly typed one (jnp.full of a Python float) would be
    # another signature for the jit cache, and another ~15 s compilation.
    params = jax.tree.map(lambda x: jnp.asarray(x, dtype=jnp.float64), params)
    q0, qd0 = (jnp.asarray(x, dtype=jnp.float64) for x in (q0, qd0))
    p0 = _momentum(params, q0, qd0)
    q, p, energy, residual = [np.asarray(q0)[None]], [np.asarray(p0)[None]], [], []
    # Split and joined in NumPy: jnp.split and jnp.concatenate compile once per chunk count.
    for chunk in np.split(np.asarray(u, dtype=np.float64), len(u) // CHUNK):
        out = _chunk(params, q[-1][-1], p[-1][-1], chunk, h)
        for store, value in zip((q, p, energy, residual), out, strict=True):
            store.append(np.asarray(value))
    return tuple(np.concatenate(x) for x in (q, p, energy, residual))


@functools.partial(jax.jit, compiler_options=FAST_COMPILE)
def _momentum(params, q, qd):
    return variational.momentum(CHAIN, params, q, qd)


def _chain_params(**dof_values):
    return _chain(2, actuated=True, **dof_values)[1]


def _free_chain_params():
    """The two-link chain without friction, and its motor without back-EMF (k_m = 0): no
    force but gravity acts when its input is zero."""
    params = _chain_params()
    return params.__class__(
        params.bodies,
        params.joints,
        params.dofs,
        params.actuators.__class__(params.actuators.gear, jnp.zeros(1), params.actuators.Rm),
        params.gravity,
    )


@pytest.mark.parametrize(
    ("mode", "h", "chunks"), [(0, 4e-3, 8), (1, 2e-3, 6)], ids=["in-phase", "anti-phase"]
)
def test_small_swings_have_the_double_pendulums_normal_mode_periods(mode, h, chunks):
    """Released from rest on a normal mode of its linearization, the chain swings at that
    mode's period. Known answer by hand, in absolute link angles a: two uniform rods of mass m
    and length l, M = m l² [[4/3, 1/2], [1/2, 1/3]] and K = m g l diag(3/2, 1/2), so ω² are
    the eigenvalues of M⁻¹K (4.89 and 13.12 rad/s for these rods). The midpoint rule on that
    linear system swings at ω_h = (2/h) atan(ωh/2), exactly: the period checked."""
    length, mass = 0.3, 0.2
    M = mass * length**2 * np.array([[4 / 3, 1 / 2], [1 / 2, 1 / 3]])
    K = mass * G * length * np.diag([3 / 2, 1 / 2])
    omega2, shapes = np.linalg.eig(np.linalg.solve(M, K))
    order = np.argsort(omega2)
    omega, shape = np.sqrt(omega2[order[mode]]), shapes[:, order[mode]]
    relative = np.array([shape[0], shape[1] - shape[0]])  # the hinges' angles: a₁, a₂ − a₁
    q0 = 0.005 * relative / np.abs(relative).max()
    steps = chunks * CHUNK  # 3 periods of the mode
    q, *_ = _run(_free_chain_params(), jnp.asarray(q0), jnp.zeros(2), jnp.zeros((steps, 1)), h)
    angle = np.asarray(q[:, 0])
    up = np.flatnonzero((angle[:-1] < 0) & (angle[1:] >= 0))
    crossings = (up + angle[up] / (angle[up] - angle[up + 1])) * h
    measured = np.mean(np.diff(crossings))
    omega_h = 2 / h * np.arctan(omega * h / 2)  # the midpoint rule's (ωh)²/12 ≈ 3e-5 longer
    # The 5 mrad amplitude's nonlinear shift is ≲ 1e-5 and the linear interpolation of a
    # crossing (where the curvature vanishes) is O((ωh)³): 1e-4 leaves room for both, and a
    # wrong inertia, lever arm or coupling between the links (≥ 1 %, a 5e-3 change of ω) fails.
    assert measured == pytest.approx(2 * np.pi / omega_h, rel=1e-4)


# 40 s on CI's cores (a long chaotic run): with -m slow. The default run keeps the energy
# behaviour of the symplectic tree step over 1000 periods (test_tree_physics.py).
@pytest.mark.slow
def test_energy_error_stays_bounded_on_a_chaotic_double_pendulum():
    params = _free_chain_params()  # the motor's input is zero
    h, steps = 2e-3, 160 * CHUNK  # 40 s: about 40 swings of a chaotic motion
    q0, qd0 = jnp.array([2.0, -1.0]), jnp.zeros(2)
    _, _, energy, _ = _run(params, q0, qd0, jnp.zeros((steps, 1)), h)
    error = np.abs(np.asarray(energy) - float(newton_euler.total_energy(CHAIN, params, q0, qd0)))
    scale = float(params.bodies.mass.sum()) * G * 0.6  # potential energy range of the chain
    half = steps // 2
    # A symplectic integrator's energy error oscillates without a trend: the second half's
    # worst error is not larger than the first half's by more than the chaos allows (1.5×),
    # and it stays at the O(h²) level (1e-3 of the energy scale at h = 2 ms).
    assert error[half:].max() <= 1.5 * error[:half].max()
    assert error.max() < 1e-3 * scale


def _reference(params, q0, qd0, u, T):
    """q(T) by an independent integrator: scipy's DOP853 on ABA's accelerations."""
    acc = jax.jit(lambda q, qd: actuators.forward_dynamics(CHAIN, params, q, qd, u))

    def f(_, x):
        return np.concatenate([x[2:], np.asarray(acc(x[:2], x[2:]))])

    x0 = np.concatenate([q0, qd0])
    sol = solve_ivp(f, (0.0, T), x0, method="DOP853", rtol=1e-12, atol=1e-12)
    return sol.y[:2, -1]


def test_converges_at_second_order_to_an_independent_ode_solver():
    """Damped, motor-driven double pendulum: the VI's error at T quarters per halving of h
    (order 2), against DOP853 on the same forces."""
    params = _chain_params(damping=jnp.array([2e-3, 1e-3]))
    q0, qd0, u, T = np.array([0.8, -0.4]), np.array([0.0, 1.0]), jnp.array([2.0]), 0.5
    reference = _reference(params, q0, qd0, u, T)
    errors = []
    for chunks in (1, 2, 4):
        steps = chunks * CHUNK
        q, *_ = _run(params, jnp.asarray(q0), jnp.asarray(qd0), jnp.tile(u, (steps, 1)), T / steps)
        errors.append(np.linalg.norm(np.asarray(q[-1]) - reference))
    ratios = np.array(errors[:-1]) / np.array(errors[1:])
    # Second order: ratio 4 as h → 0; [3, 5] allows the higher-order terms at these steps and
    # rejects first order (2) or a wrong force (no convergence at all).
    assert np.all((ratios > 3.0) & (ratios < 5.0)), (errors, ratios)


def test_the_step_residual_vanishes_on_the_steps_it_describes():
    params = _chain_params(damping=jnp.array([1e-3, 5e-4]), frictionloss=jnp.array([2e-3, 0.0]))
    h, steps = 1e-3, 4 * CHUNK
    u = jnp.sin(jnp.arange(steps) * h * 7.0)[:, None] * 3.0
    *_, residual = _run(params, jnp.array([0.3, 0.2]), jnp.zeros(2), u, h)
    # The step solves the first row to 1e-12 rad in q (Newton's stop), which leaves a momentum
    # residual of ~|M_{k+1}| · 1e-12 ≈ 1e-14 N m s; 1e-11 is round-off with margin.
    assert float(np.max(np.abs(residual))) < 1e-11
