"""Discrete mechanics of a kinematic tree: the midpoint variational integrator in generalized
coordinates (Caldwell, Coleman & Correll, Section II.B, eqs. 2–5).

The discrete Lagrangian approximates the action over one step of length h by the midpoint rule
(eq. 2),

    L_d(q₀, q₁) = h · L((q₀ + q₁)/2, (q₁ − q₀)/h),    L = T − V,

with T the tree's kinetic energy (bodies and rotor armature) and V its potential energy
(gravity and joint springs). Forces that are not in V — actuators and joint friction — enter
as discrete left and right forces, the midpoint quadrature of their impulse split in halves:

    F⁻(q₀, q₁) = F⁺(q₀, q₁) = (h/2) · F_c((q₀ + q₁)/2, (q₁ − q₀)/h, u).

Departure from eq. 16, which puts the whole impulse in F⁻ (F⁺ = 0): the DEL equation at q_k
then sees the forces of the interval after t_k only, a half-step shift that makes the scheme
first order in the forces. The even split (Marsden & West's choice) balances the impulse
around t_k and keeps the integrator second order with forcing (tested against DOP853).

The state of a step is x_k = (q_k, p_k), with p_k the discrete momentum of eq. 4. The forced
discrete Euler–Lagrange equations in this position–momentum form (eq. 5) are

    p_k + D₁L_d(q_k, q_{k+1}) + F⁻ = 0          (implicit in q_{k+1})
    p_{k+1} = D₂L_d(q_k, q_{k+1}) + F⁺.

``step_residual`` writes both rows as one residual of (x_k, x_{k+1}): it couples only two
consecutive states, which is what keeps a joint state and parameter estimator banded (the
three-configuration form, eq. 3, would couple q_{k−1}, q_k and q_{k+1}). ``step`` solves the
first row for q_{k+1} by Newton's method. Holonomic constraints and point loads: ``constrained``.

Units: q in rad (revolute) or m (prismatic), p in N m s or N s, h in s.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from physid.dynamics import actuators, newton_euler, spatial
from physid.dynamics.tree import Tree, TreeParams
from physid.dynamics.variational.kinematics import world_poses

# Newton's method on the first row of eq. 5 stops when the correction is below this many
# units of q (rad or m): a few ulps of the angles of a rig, so the residual left is round-off.
NEWTON_TOLERANCE = 1e-12
NEWTON_MAX_ITERATIONS = 20


def lagrangian(tree: Tree, params: TreeParams, q, qd):
    """L(q, q̇) = T − V (J), from the world poses of the bodies and their rates.

    One forward-mode pass through the world poses (``kinematics.world_poses``) gives every
    body's pose (R, p) and its rate (Ṙ, ṗ) along q̇; then T = Σ ½ m |Ṙ c + ṗ|² + ½ ωᵀ I_c ω
    with [ω] = Rᵀ Ṙ (body frame), plus the rotors' ½ armature q̇², and V = −Σ m gᵀ(R c + p)
    + the springs. The values are ``newton_euler``'s (tested against it); this form shares one
    pose recursion between T and V, and its second derivatives, which every Newton step of
    the integrator takes, are cheaper than those of the twist recursion.
    """
    (R, p), (dR, dp) = jax.jvp(lambda x: world_poses(tree, params, x), (q,), (qd,))
    b = params.bodies
    v_com = spatial.matvec(dR, b.com) + dp
    W = spatial.matmul(spatial.transpose(R), dR)  # [ω] in the body frame
    omega = jnp.stack([W[:, 2, 1], W[:, 0, 2], W[:, 1, 0]], axis=-1)
    kinetic = 0.5 * jnp.sum(b.mass * jnp.sum(v_com**2, axis=-1))
    kinetic += 0.5 * jnp.sum(omega * spatial.matvec(b.inertia, omega))
    kinetic += 0.5 * jnp.sum(params.dofs.armature * qd**2)
    x_com = spatial.matvec(R, b.com) + p
    gravity = -jnp.sum(b.mass * jnp.sum(x_com * params.gravity, axis=-1))
    return kinetic - gravity - newton_euler.spring_energy(params, q)


def discrete_lagrangian(tree: Tree, params: TreeParams, q0, q1, h):
    """L_d(q₀, q₁) = h L((q₀ + q₁)/2, (q₁ − q₀)/h) (J s), the midpoint rule of eq. 2."""
    return h * lagrangian(tree, params, 0.5 * (q0 + q1), (q1 - q0) / h)


def slot_derivatives(tree: Tree, params: TreeParams, q0, q1, h):
    """(D₁L_d, D₂L_d)(q₀, q₁), each [n] (N m s or N s)."""
    return jax.grad(discrete_lagrangian, argnums=(2, 3))(tree, params, q0, q1, h)


def nonconservative_forces(tree: Tree, params: TreeParams, q, qd, u):
    """Generalized forces that are not in V: actuators driven by u and joint friction. Springs
    are conservative and belong to V (``newton_euler.spring_energy``), so they are left out."""
    del q  # friction and actuators depend on the rates only
    return actuators.actuator_forces(tree, params, qd, u) + actuators.friction_forces(params, qd)


def discrete_forces(tree: Tree, params: TreeParams, q0, q1, u, h):
    """(F⁻, F⁺)(q₀, q₁) (N m s or N s): half the midpoint impulse of the forces outside V each,
    with the input u held over the step."""
    half = 0.5 * h * nonconservative_forces(tree, params, 0.5 * (q0 + q1), (q1 - q0) / h, u)
    return half, half


def step_residual(tree: Tree, params: TreeParams, q0, p0, q1, p1, u, h):
    """The forced DEL equations of eq. 5 for one step, [2n]: zero when (q₁, p₁) follows
    (q₀, p₀) under input u. Rows: p₀ + D₁L_d + F⁻, then p₁ − D₂L_d − F⁺ (N m s or N s)."""
    D1, D2 = slot_derivatives(tree, params, q0, q1, h)
    Fm, Fp = discrete_forces(tree, params, q0, q1, u, h)
    return jnp.concatenate([p0 + D1 + Fm, p1 - D2 - Fp])


def momentum(tree: Tree, params: TreeParams, q, qd):
    """∂L/∂q̇ = M(q) q̇ (N m s or N s): the continuous momentum, the usual start p₀ of a run
    that begins from a position and a velocity."""
    return jax.grad(lagrangian, argnums=3)(tree, params, q, qd)


def step(tree: Tree, params: TreeParams, q0, p0, u, h):
    """One step of the integrator: (q₁, p₁) from (q₀, p₀) under input u (eq. 5).

    q₁ is the root of p₀ + D₁L_d(q₀, q₁) + F⁻(q₀, q₁) = 0, found by Newton's method from the
    explicit guess q₀ + h M(q₀)⁻¹ p₀; its Jacobian is M_{k+1} = D₂D₁L_d + D₂F⁻ (the matrix the
    paper assumes nonsingular), by forward-mode differentiation.
    """

    def first_row(q1):
        D1, _ = slot_derivatives(tree, params, q0, q1, h)
        Fm, _ = discrete_forces(tree, params, q0, q1, u, h)
        return p0 + D1 + Fm

    def not_done(state):
        _, correction, k = state
        return (jnp.max(jnp.abs(correction)) > NEWTON_TOLERANCE) & (k < NEWTON_MAX_ITERATIONS)

    def newton(state):
        q1, _, k = state
        correction = jnp.linalg.solve(jax.jacfwd(first_row)(q1), first_row(q1))
        return q1 - correction, correction, k + 1

    guess = q0 + h * jnp.linalg.solve(newton_euler.crba(tree, params, q0), p0)
    start = (guess, jnp.full_like(q0, jnp.inf), 0)
    q1, _, _ = jax.lax.while_loop(not_done, newton, start)
    _, D2 = slot_derivatives(tree, params, q0, q1, h)
    _, Fp = discrete_forces(tree, params, q0, q1, u, h)
    return q1, D2 + Fp


def rollout(tree: Tree, params: TreeParams, q0, qd0, u, h):
    """The integrator from (q₀, q̇₀) under inputs u [N, n_actuators] (one row per step, held
    over it): q, p [N + 1, n]. The start momentum is M(q₀) q̇₀."""
    return rollout_from_momentum(tree, params, q0, momentum(tree, params, q0, qd0), u, h)


def rollout_from_momentum(tree: Tree, params: TreeParams, q0, p0, u, h):
    """The integrator from (q₀, p₀) under inputs u [N, n_actuators]: q, p [N + 1, n]. Long runs
    can be chained from the last row without a change of start momentum."""

    def one(carry, uk):
        q1, p1 = step(tree, params, *carry, uk, h)
        return (q1, p1), (q1, p1)

    _, (q, p) = jax.lax.scan(one, (q0, p0), u)
    return jnp.concatenate([q0[None], q]), jnp.concatenate([p0[None], p])
