"""Time integration of a tree's equations of motion: classical RK4 (the roll-outs of Lutter et
al., Section 4) and the implicit midpoint rule in canonical coordinates, a symplectic step for
conservative trees (energy error bounded, no drift).

States are (q, q̇); inputs are held constant over a step (zero-order hold). ``lax.scan`` runs
the steps: no Python loop over time.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from physid.dynamics import actuators, newton_euler
from physid.dynamics.tree import Tree, TreeParams


def rk4_step(tree: Tree, params: TreeParams, q, qd, u, h):
    """One classical Runge–Kutta step of size h (s) for q̈ = forward_dynamics(q, q̇, u)."""

    def f(x):
        n = tree.n_dof
        return jnp.concatenate([x[n:], actuators.forward_dynamics(tree, params, x[:n], x[n:], u)])

    x = jnp.concatenate([q, qd])
    k1 = f(x)
    k2 = f(x + 0.5 * h * k1)
    k3 = f(x + 0.5 * h * k2)
    k4 = f(x + h * k3)
    x1 = x + (h / 6.0) * (k1 + 2 * k2 + 2 * k3 + k4)
    return x1[: tree.n_dof], x1[tree.n_dof :]


def rollout_rk4(tree: Tree, params: TreeParams, q0, qd0, u, h):
    """RK4 from (q0, q̇0) under inputs u [N, n_actuators] (one row per step): q, q̇ [N + 1, n]."""

    def step(carry, uk):
        q, qd = rk4_step(tree, params, *carry, uk, h)
        return (q, qd), (q, qd)

    _, (q, qd) = jax.lax.scan(step, (q0, qd0), u)
    return jnp.concatenate([q0[None], q]), jnp.concatenate([qd0[None], qd])


def hamiltonian(tree: Tree, params: TreeParams, q, p):
    """H(q, p) = ½ pᵀ M(q)⁻¹ p + V(q) (J), p = M(q) q̇ the generalized momentum."""
    M = newton_euler.crba(tree, params, q)
    return 0.5 * p @ jnp.linalg.solve(M, p) + newton_euler.potential_energy(tree, params, q)


def midpoint_step(tree: Tree, params: TreeParams, q, p, h, newton_iterations: int = 6):
    """Implicit midpoint rule on Hamilton's equations, x₁ = x₀ + h J∇H((x₀ + x₁)/2): symplectic
    and symmetric. Solved by Newton's method from an explicit Euler guess; six iterations
    reach round-off at the step sizes used (a convergence test would make the step's cost
    data-dependent under vmap)."""
    n = tree.n_dof
    dH = jax.grad(lambda x: hamiltonian(tree, params, x[:n], x[n:]))

    def flow(x):
        g = dH(x)
        return jnp.concatenate([g[n:], -g[:n]])

    x0 = jnp.concatenate([q, p])

    def residual(x1):
        return x1 - x0 - h * flow(0.5 * (x0 + x1))

    def newton(_, x1):
        return x1 - jnp.linalg.solve(jax.jacfwd(residual)(x1), residual(x1))

    x1 = jax.lax.fori_loop(0, newton_iterations, newton, x0 + h * flow(x0))
    return x1[:n], x1[n:]


def rollout_midpoint(tree: Tree, params: TreeParams, q0, qd0, h, n_steps: int):
    """Implicit midpoint from (q0, q̇0) without input or dissipation: q, p [n_steps + 1, n]."""
    p0 = newton_euler.crba(tree, params, q0) @ qd0

    def step(carry, _):
        q, p = midpoint_step(tree, params, *carry, h)
        return (q, p), (q, p)

    _, (q, p) = jax.lax.scan(step, (q0, p0), None, length=n_steps)
    return jnp.concatenate([q0[None], q]), jnp.concatenate([p0[None], p])
