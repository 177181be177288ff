"""The forced discrete Euler–Lagrange step of a kinematic tree with joint dry friction as an
exact complementarity (Caldwell, Coleman & Correll, eqs. 2–5; the midpoint rule of
``dynamics.variational``), written for joint state and parameter estimation.

State of a step: x_k = (q_k, p_k), p_k the discrete momentum of eq. 4, so that one step's
residual couples only x_k and x_{k+1}. With q̄ = (q₀ + q₁)/2 and v̄ = (q₁ − q₀)/h,

    D₁L_d = (h/2) ∂L/∂q(q̄, v̄) − ∂L/∂q̇(q̄, v̄),   D₂L_d = (h/2) ∂L/∂q(q̄, v̄) + ∂L/∂q̇(q̄, v̄)

(L_d = h L(q̄, v̄), eq. 2), so the residual and its Jacobian need the gradient and the Hessian
of L at one point per step, not the nested derivatives of L_d. ``lagrangian_jet`` computes
them with ∂L/∂q̇ = M(q) q̇ and ∂²L/∂q̇² = M(q) from the composite-rigid-body algorithm and only
the q-derivatives by forward mode (21 instead of 57 ms for 2000 Furuta steps, one core).

Forces outside V:

- smooth ones (actuators with their back-EMF, viscous damping −|b| q̇) enter as the discrete
  left and right forces F⁻ = F⁺ = (h/2) F(q̄, v̄, u), as in ``dynamics.variational``;
- dry friction (Coulomb −|f_c| sign(q̇) plus Stribeck −|f_d| exp(−q̇²/v_s²) sign(q̇)) enters as
  one impulse λ per joint and step, split over the step's two rows like the smooth forces
  (F⁻ = αλ, F⁺ = (1 − α)λ with α = ``FRICTION_ROW_WEIGHT`` = ½), with the complementarity of
  Coulomb's law

      λ ∈ −h f(v̄) ∂|v̄|,   f(v̄) = |f_c| + |f_d| exp(−v̄²/v_s²):

  λ = −h f sign(v̄) while the joint moves over the step, |λ| ≤ h f while it sticks (v̄ = 0).
  That is the implicit (Moreau) treatment: friction over a step opposes the step's own
  velocity and holds the joint when it can. No tanh or other smoothing: the joint's
  ``friction_velocity`` is not used.

Why halves: the three-point equation at q_k holds (1 − α)λ_{k−1} + αλ_k, for α = ½ the
friction of the dual cell [t_k − h/2, t_k + h/2] by the trapezoidal rule, as the smooth
forces' midpoint rule does. With the whole λ_k in the first row (α = 1, before 2026-11-26)
node k took the sign of the velocity half a step after it, so each turning point switched the
friction h/2 early on average: an O(h) error per reversal, not the step's O(h²), and linear
in α − ½ between. Measured on a swinging pendulum (viscous + Coulomb, noise-free data at
0.1 ms fitted at h = 2 ms), J's error: −0.6, −4.3, −7.9, −19e-5 relative at α = 0.5, 0.6,
0.7, 1 (with the Coulomb term off: −1.4e-5 at 2 ms, −3.4e-6 at 1 ms, the midpoint rule's h²);
that first-order part was the tree's inertia bias in issue 24's coverage study.

The price of halves is the trapezoidal rule's on a set-valued force: while a joint sticks the
node balances fix only (λ_{k−1} + λ_k)/2, so consecutive λ can alternate about their mean
without moving any position (the positions stay exactly put). At a stop the impulse of the
last sliding step (on the bound h f) is answered by one of 2τh − h f (τ the torque friction
holds), then h f again: every other step sits on the stick threshold for as long as the joint
sticks. The integrator does not mind; an estimator does (the residual's piece switches at the
threshold, and the alternation is a nearly free direction of the states): on a log that ends
at rest LM stalls. With α > ½ the stuck balance (1 − α)λ_{k−1} + αλ_k = τh has λ = τh as an
attracting fixed point (a deviation shrinks by (1 − α)/α per step), and LM converges from
α ≈ 0.7. The ``alpha`` argument of the step functions serves
``rigs.models.tree_row_weight``, which fits such logs at α = 0.7 and 0.9 and extrapolates the
bias, linear in α, to α = ½.

In inverse dynamics the states are given and λ must be read off. The first row without
friction, r₁ = p₀ + D₁L_d + F⁻, asks friction for r₁/α's worth of impulse over the step (its
share α lands in this row); the residual is (r₁ + αλ, r₂ − (1 − α)λ) with

    λ = P_[−h f, h f](−r₁/α − c v̄)                                                 (natural map)

the projection onto the friction bound. The natural map is the standard equation form of a
complementarity (λ ∈ −h f ∂|v̄| ⇔ λ = P(λ − c v̄) for any c > 0): where the states satisfy the
dynamics (λ = −r₁/α) the residual is zero exactly when Coulomb's law holds, for every c. Away
from that set its first row is −αc v̄ while the joint should stick (the impulse of stopping
it) and r₁ ∓ αh f while it slides (Coulomb's torque opposing the motion). ``c`` (kg m², N m s
per rad/s) is a fixed inertia per joint chosen by the caller (e.g. the joint's diagonal of M).

Why not the plain projection of −r₁ onto the bound (a soft threshold of r₁): it lets friction
push a sliding joint forward, and its cost falls monotonically with f_c, so an estimator
would drive f_c to its upper bound.

Units: q in rad (revolute) or m (prismatic), p in N m s or N s, h in s.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from physid.dynamics import actuators, newton_euler
from physid.dynamics.tree import Tree, TreeParams

# Semismooth Newton on the first row of eq. 5 with friction (``step``): stop when the
# correction is below this (rad or m), a few ulps of a rig's angles.
NEWTON_TOLERANCE = 1e-12
NEWTON_MAX_ITERATIONS = 30

# α: the share of a step's friction impulse in its first row (node k); 1 − α goes into the
# second (node k + 1). ½: the trapezoidal rule over the dual cell, no first-order timing error
# at a reversal (module docstring).
FRICTION_ROW_WEIGHT = 0.5


def lagrangian(tree: Tree, params: TreeParams, q, qd):
    """L = T − V (J): bodies and rotor armature, gravity and springs."""
    return newton_euler.kinetic_energy(tree, params, q, qd) - newton_euler.potential_energy(
        tree, params, q
    )


def lagrangian_jet(tree: Tree, params: TreeParams, q, qd):
    """Gradient and Hessian of L at (q, q̇): (L_q [n], L_q̇ [n], L_qq [n, n], L_q̇q [n, n],
    M [n, n]), with L_q̇ = M q̇, L_q̇q̇ = M and L_q̇q = ∂(M q̇)/∂q by the composite-rigid-body
    algorithm (L is quadratic in q̇), and L_q, L_qq by forward mode over q alone."""

    def energy_gradient(x):
        g = jax.jacfwd(lagrangian, argnums=2)(tree, params, x, qd)
        return g, g

    def momentum(x):
        M = newton_euler.crba(tree, params, x)
        return M @ qd, M

    L_qq, L_q = jax.jacfwd(energy_gradient, has_aux=True)(q)
    L_vq, M = jax.jacfwd(momentum, has_aux=True)(q)
    return L_q, M @ qd, L_qq, L_vq, M


def slot_derivatives(tree: Tree, params: TreeParams, q0, q1, h):
    """(D₁L_d, D₂L_d)(q₀, q₁) of the midpoint rule, [n] each: the same numbers as
    ``dynamics.variational.slot_derivatives``, from the gradient of L at the midpoint."""
    qm, v = 0.5 * (q0 + q1), (q1 - q0) / h
    L_q = jax.jacfwd(lagrangian, argnums=2)(tree, params, qm, v)
    L_v = newton_euler.crba(tree, params, qm) @ v
    return 0.5 * h * L_q - L_v, 0.5 * h * L_q + L_v


def smooth_forces(tree: Tree, params: TreeParams, qd, u):
    """Generalized forces outside V that are smooth in q̇ (N m or N): actuators driven by u
    (a DC motor with its back-EMF) and viscous damping −|b| q̇. Dissipative at u = 0 for
    every parameter value."""
    return actuators.actuator_forces(tree, params, qd, u) - jnp.abs(params.dofs.damping) * qd


def dry_friction_limit(params: TreeParams, qd):
    """f(q̇) = |f_c| + |f_d| exp(−q̇²/v_s²) ≥ 0 (N m or N): the largest dry-friction force of
    each joint at rate q̇, Coulomb plus Stribeck (Lutter et al., Section 3)."""
    d = params.dofs
    vs2 = d.stribeck_velocity**2
    stribeck = jnp.abs(d.stribeck) * jnp.exp(-(qd**2) / jnp.where(vs2 > 0, vs2, 1.0))
    return jnp.abs(d.frictionloss) + jnp.where(vs2 > 0, stribeck, 0.0)


def dry_impulse(needed, v, limit, c):
    """λ = P_[−limit, limit](needed − c v): the dry-friction impulse of a step (natural map of
    the complementarity λ ∈ −limit ∂|v|), ``needed`` the impulse whose half would close the
    step's first row, ``limit`` = h f(v̄), ``c`` the fixed inertia of the map (see the module)."""
    return jnp.clip(needed - c * v, -limit, limit)


def step_impulse(params: TreeParams, r1, v, h, c, alpha=FRICTION_ROW_WEIGHT):
    """λ [n] of one step (N m s or N s): the natural map P_[−h f, h f](−r₁/α − c v̄) of
    ``step_residual`` from the step's frictionless first row ``r1`` and velocity ``v`` (v̄);
    α λ goes into the first row, (1 − α) λ into the second (``alpha``)."""
    return dry_impulse(-r1 / alpha, v, h * dry_friction_limit(params, v), c)


def frictionless_rows(tree: Tree, params: TreeParams, q0, p0, q1, p1, u, h):
    """Eq. 5 without dry friction, (r₁, r₂) [n] each (N m s or N s): r₁ = p₀ + D₁L_d + F⁻,
    r₂ = p₁ − D₂L_d − F⁺, smooth forces split in halves."""
    D1, D2 = slot_derivatives(tree, params, q0, q1, h)
    half = 0.5 * h * smooth_forces(tree, params, (q1 - q0) / h, u)
    return p0 + D1 + half, p1 - D2 - half


def step_residual(
    tree: Tree, params: TreeParams, q0, p0, q1, p1, u, h, c, alpha=FRICTION_ROW_WEIGHT
):
    """The forced DEL equations of one step with exact dry friction, [2n]: zero when (q₁, p₁)
    follows (q₀, p₀) under input u. Rows r₁ + αλ and r₂ − (1 − α)λ (N m s or N s); ``c`` [n]
    the fixed inertia of the natural map (kg m² or kg), ``alpha`` the first row's share α."""
    a = alpha
    r1, r2 = frictionless_rows(tree, params, q0, p0, q1, p1, u, h)
    v = (q1 - q0) / h
    lam = step_impulse(params, r1, v, h, c, a)
    return jnp.concatenate([r1 + a * lam, r2 - (1.0 - a) * lam])


class StepJacobians(NamedTuple):
    """``step_residual`` of one step and its Jacobians (2n rows): w.r.t. x_k = (q₀, p₀)
    (``A`` [2n, 2n]) and x_{k+1} (``B``); ``keep`` [n] is 1 where the joint slides or has no
    dry friction (λ on its bound) and 0 where it sticks (λ = −r₁/α − c v̄), and ``side`` [n]
    the sign of the friction bound in force (0 while sticking): what a caller needs to
    differentiate the friction with respect to its own parameters (rows r₁ + αλ,
    r₂ − (1 − α)λ)."""

    value: jnp.ndarray
    A: jnp.ndarray
    B: jnp.ndarray
    keep: jnp.ndarray
    side: jnp.ndarray


def step_jacobians(
    tree: Tree, params: TreeParams, q0, p0, q1, p1, u, h, c, alpha=FRICTION_ROW_WEIGHT
) -> StepJacobians:
    """``step_residual`` and its Jacobians w.r.t. the two states by the chain rule of the
    midpoint rule, from the gradient and Hessian of L at (q̄, v̄) (``lagrangian_jet``): the
    kinematics is differentiated twice in n directions, not through 4n tangents of
    ``step_residual``. Same numbers as ``jax.jacfwd(step_residual)`` to round-off."""
    n = q0.shape[0]
    qm, v = 0.5 * (q0 + q1), (q1 - q0) / h
    L_q, L_v, L_qq, L_vq, M = lagrangian_jet(tree, params, qm, v)
    f, f_v = jax.linearize(lambda x: smooth_forces(tree, params, x, u), v)
    f_v = jax.vmap(f_v)(jnp.eye(n)).T  # ∂F/∂v̄ [n, n]
    r1 = p0 + 0.5 * h * L_q - L_v + 0.5 * h * f
    r2 = p1 - 0.5 * h * L_q - L_v - 0.5 * h * f
    # The rows' derivatives in (q̄, v̄); L_q̇q = L_qq̇ᵀ.
    r1_q, r1_v = 0.5 * h * L_qq - L_vq, 0.5 * h * L_vq.T - M + 0.5 * h * f_v
    r2_q, r2_v = -0.5 * h * L_qq - L_vq, -0.5 * h * L_vq.T - M - 0.5 * h * f_v
    # Dry friction λ = clip(arg, ±lim), arg = −r₁/α − c v̄, lim = h f(v̄) (diagonal in v̄).
    a = alpha
    ratio = (1.0 - a) / a  # row 2 holds this times row 1's share of λ
    lim, lim_v = jax.jvp(lambda x: h * dry_friction_limit(params, x), (v,), (jnp.ones_like(v),))
    arg = -r1 / a - c * v
    stick = jnp.abs(arg) < lim
    side = jnp.where(arg >= lim, 1.0, jnp.where(arg <= -lim, -1.0, 0.0))
    keep = jnp.where(stick, 0.0, 1.0)
    share = a * jnp.clip(arg, -lim, lim)  # αλ
    # ∂(αλ) = sticking: −∂r₁ − αc ∂v̄; sliding: α side ∂lim. The v̄-diagonal part:
    D = jnp.diag(jnp.where(stick, -a * c, a * side * lim_v))
    drop = ratio * (1.0 - keep)[:, None]  # sticking: αλ cancels r₁ in row 1, row 2 gets ratio r₁
    w1_q, w1_v = keep[:, None] * r1_q, keep[:, None] * r1_v + D
    w2_q, w2_v = r2_q + drop * r1_q, r2_v + drop * r1_v - ratio * D
    zero, eye = jnp.zeros((n, n)), jnp.eye(n)
    # ∂(q̄, v̄)/∂q₀ = (½, −1/h), ∂(q̄, v̄)/∂q₁ = (½, 1/h); ∂r₁/∂p₀ = I, ∂r₂/∂p₁ = I.
    A = jnp.block(
        [
            [0.5 * w1_q - w1_v / h, jnp.diag(keep)],
            [0.5 * w2_q - w2_v / h, jnp.diag(ratio * (1.0 - keep))],
        ]
    )
    B = jnp.block(
        [
            [0.5 * w1_q + w1_v / h, zero],
            [0.5 * w2_q + w2_v / h, eye],
        ]
    )
    return StepJacobians(jnp.concatenate([r1 + share, r2 - ratio * share]), A, B, keep, side)


def step(tree: Tree, params: TreeParams, q0, p0, u, h, c, alpha=FRICTION_ROW_WEIGHT):
    """One step of the integrator with exact dry friction: (q₁, p₁) from (q₀, p₀) under u.

    q₁ solves φ(q₁) = r₁(q₁) + λ(q₁)/2 = 0 (the first row of ``step_residual``, piecewise
    smooth) by semismooth Newton from the explicit guess q₀ + h M(q₀)⁻¹ p₀: each iteration
    linearizes the piece the current q₁ lies on (sticking joints: φ_j = −c_j v̄_j/2, sliding
    ones: r₁ ∓ h f/2), so a joint that should stick lands on q₁ = q₀ exactly. p₁ closes the
    second row with the same λ."""
    zero = jnp.zeros_like(p0)

    n = q0.shape[0]

    def not_done(state):
        _, correction, k = state
        return (jnp.max(jnp.abs(correction)) > NEWTON_TOLERANCE) & (k < NEWTON_MAX_ITERATIONS)

    def newton(state):
        q1, _, k = state
        jac = step_jacobians(tree, params, q0, p0, q1, zero, u, h, c, alpha)
        correction = jnp.linalg.solve(jac.B[:n, :n], jac.value[:n])
        return q1 - correction, correction, k + 1

    guess = q0 + h * jnp.linalg.solve(newton_euler.crba(tree, params, q0), p0)
    q1, _, _ = jax.lax.while_loop(not_done, newton, (guess, jnp.full_like(q0, jnp.inf), 0))
    r1, r2 = frictionless_rows(tree, params, q0, p0, q1, zero, u, h)
    lam = step_impulse(params, r1, (q1 - q0) / h, h, c, alpha)
    return q1, (1.0 - alpha) * lam - r2


def rollout(tree: Tree, params: TreeParams, q0, qd0, u, h, c):
    """The integrator from (q₀, q̇₀) under inputs u [N, n_actuators] (held over each step):
    q, p [N + 1, n]. The start momentum is M(q₀) q̇₀."""
    p0 = newton_euler.crba(tree, params, q0) @ qd0

    def one(carry, uk):
        q1, p1 = step(tree, params, *carry, uk, h, c)
        return (q1, p1), (q1, p1)

    _, (q, p) = jax.lax.scan(one, (q0, p0), u)
    return jnp.concatenate([q0[None], q]), jnp.concatenate([p0[None], p])
