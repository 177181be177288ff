"""Actuator and joint-friction models of Lutter et al., Section 3, as generalized forces, and
the forward dynamics of a tree driven by its inputs.

Every model that can only dissipate is written with absolute values of its coefficients, so
that q̇ᵀ τ ≤ 0 at zero input for *every* parameter value (not only inside a box):

- viscous:  −|b| q̇
- Coulomb:  −|f_c| σ(q̇),   σ(x) = tanh(x / v_ε) (sign(x) for v_ε = 0), odd and increasing
- Stribeck: −|f_d| exp(−q̇² / v_s²) σ(q̇)   (the paper's f_d exp(−ν_s q̇²) with ν_s = 1/v_s²)
- back-EMF of a DC motor: −gear² k_m² q̇ / |R_m|

Why |b| rather than b = θ² (the Appendix's device for the mass): τ stays *linear* in b on the
physical half-line b ≥ 0, so NEA keeps a linear regression with b ≥ 0 as a linear constraint,
and the derivative of τ with respect to b does not vanish at b = 0 (θ² has zero slope there,
which stalls a gradient fit of a joint without friction). The kink at b = 0 is harmless: a
fit that reaches it reports b = 0.

Springs −k (q − q_ref) conserve energy (their energy is in ``newton_euler.spring_energy``).
Actuators: a ``motor`` applies gear · u (MJCF <motor>, u in the actuator's unit); a
``dc_motor`` (voltage input) applies gear k_m (u − gear k_m q̇)/|R_m|, the armature model of the
Quanser rigs (τ = k_m (u − k_m q̇)/R_m for gear 1).
"""

from __future__ import annotations

import jax.numpy as jnp

from physid.dynamics import newton_euler
from physid.dynamics.tree import DC_MOTOR, Tree, TreeParams


def smooth_sign(x, v_eps):
    """σ(x) = tanh(x / v_ε), or sign(x) where v_ε = 0 (NaN-free gradients in both cases)."""
    safe = jnp.where(v_eps > 0, v_eps, 1.0)
    return jnp.where(v_eps > 0, jnp.tanh(x / safe), jnp.sign(x))


def friction_forces(params: TreeParams, qd):
    """Viscous + Coulomb + Stribeck friction per degree of freedom (N m or N), ≤ 0 along q̇."""
    d = params.dofs
    sigma = smooth_sign(qd, jnp.abs(d.friction_velocity))
    vs2 = d.stribeck_velocity**2
    stribeck = jnp.abs(d.stribeck) * jnp.exp(-(qd**2) / jnp.where(vs2 > 0, vs2, 1.0))
    stribeck = jnp.where(vs2 > 0, stribeck, 0.0)
    return -jnp.abs(d.damping) * qd - (jnp.abs(d.frictionloss) + stribeck) * sigma


def spring_forces(params: TreeParams, q):
    """−k (q − q_ref) per degree of freedom."""
    d = params.dofs
    return -d.stiffness * (q - d.springref)


def passive_forces(params: TreeParams, q, qd):
    """Friction plus springs (MuJoCo's qfrc_passive, with Coulomb friction as a force)."""
    return friction_forces(params, qd) + spring_forces(params, q)


def actuator_forces(tree: Tree, params: TreeParams, qd, u):
    """Generalized forces [n] of the actuators driven by inputs u [n_actuators]."""
    tau = jnp.zeros(tree.n_dof)
    a = params.actuators
    for k, (kind, dof) in enumerate(zip(tree.actuator_kinds, tree.actuator_dofs, strict=True)):
        if kind == DC_MOTOR:
            ratio = a.gear[k] * a.km[k]
            Rm = jnp.abs(a.Rm[k])
            force = ratio * u[k] / Rm - ratio**2 * qd[dof] / Rm
        else:
            force = a.gear[k] * u[k]
        tau = tau.at[dof].add(force)
    return tau


def generalized_forces(tree: Tree, params: TreeParams, q, qd, u):
    """Everything but the rigid bodies: actuators, friction and springs."""
    return actuator_forces(tree, params, qd, u) + passive_forces(params, q, qd)


def forward_dynamics(tree: Tree, params: TreeParams, q, qd, u):
    """q̈ of the tree driven by inputs u (ABA on the actuator and passive forces)."""
    return newton_euler.aba(tree, params, q, qd, generalized_forces(tree, params, q, qd, u))


def inverse_dynamics_residual(tree: Tree, params: TreeParams, q, qd, qdd, u):
    """rnea(q, q̇, q̈) − actuator − passive forces: zero on a trajectory of the model."""
    return newton_euler.rnea(tree, params, q, qd, qdd) - generalized_forces(tree, params, q, qd, u)


def dissipated_power(tree: Tree, params: TreeParams, q, qd):
    """q̇ᵀ τ at zero input (W): the rate of change of the total energy; ≤ 0 for every
    parameter value (springs do no net work: their energy is part of the total)."""
    u0 = jnp.zeros(tree.n_actuators)
    return qd @ (actuator_forces(tree, params, qd, u0) + friction_forces(params, qd))
