"""Derivatives of a trajectory of the constrained variational integrator: forward
sensitivities (eq. 6 rolled forward) and the discrete adjoint (Lemma 1, eqs. 9–10).

The trajectory x_k = (q_k, p_k), k = 0..N, follows the one-step map of ``constrained``
from a fixed start x₀ under inputs u_k, with tree parameters params(θ) for a small
parameter vector θ (stiffnesses, say). The cost is

    J(θ) = Σ_{k=1}^{N} ℓ(q_k, p_k, k, θ)

(the terminal cost m_d of the draft is the k = N term of ℓ). Lemma 1 gives its gradient as

    λ_N = D₁ℓ(x_N),  λ_k = λ_{k+1} A_k + D₁ℓ(x_k),  DJ = Σ_{k=0}^{N−1} λ_{k+1} B_k + Σ D₂ℓ,

with A_k = ∂x_{k+1}/∂x_k and B_k = ∂x_{k+1}/∂θ of eq. 6. Here λ_{k+1} A_k and λ_{k+1} B_k
are row vector–matrix products taken without forming A_k or B_k: ``constrained.step_vjp``
does one transposed KKT solve per step at the stored solution (no Newton iterations in the
backward pass). In this module the adjoint covector is ``lam_q``, ``lam_p`` and the
constraint multipliers of the steps are ``mult`` (``constrained`` calls those ``lam``).

Cost: one rollout, then one backward scan of N transposed solves, independent of the number
of parameters — against one tangent rollout per parameter for forward sensitivities.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from physid.dynamics.variational import constrained
from physid.dynamics.variational.constrained import ClosedTree


def rollout(system: ClosedTree, params_of, theta, q0, p0, u, h):
    """q, p [N + 1, n] and multipliers [N, m] of the integrator with params = params_of(θ)."""
    return constrained.rollout(system, params_of(theta), q0, p0, u, h)


def cost(system: ClosedTree, params_of, theta, q0, p0, u, h, running):
    """J(θ) = Σ_{k≥1} running(q_k, p_k, k, θ): differentiable by JAX in either mode (the
    steps' derivatives go through the implicit-function theorem, ``constrained.solve_step``)."""
    q, p, _ = rollout(system, params_of, theta, q0, p0, u, h)
    k = jnp.arange(1, q.shape[0])
    return jnp.sum(jax.vmap(running, in_axes=(0, 0, 0, None))(q[1:], p[1:], k, theta))


def adjoint_gradient(system: ClosedTree, params_of, theta, q0, p0, u, h, running):
    """(J, DJ(θ)) by the discrete adjoint of Lemma 1 (eqs. 9–10): a forward rollout, then a
    backward scan of ``step_vjp`` from λ_N = D₁ℓ(x_N)."""
    params, params_pull = jax.vjp(params_of, theta)
    q, p, mult = constrained.rollout(system, params, q0, p0, u, h)
    k_all = jnp.arange(1, q.shape[0])
    value_and_grads = jax.vmap(
        jax.value_and_grad(running, argnums=(0, 1, 3)), in_axes=(0, 0, 0, None)
    )
    values, (lq, lp, ltheta) = value_and_grads(q[1:], p[1:], k_all, theta)

    def back(carry, xs):
        lam_q, lam_p, params_bar = carry  # λ_{k+1}
        qk, pk, q1, mk, uk, lqk, lpk = xs
        pb, qb, pbar, _ = constrained.step_vjp(system, params, qk, pk, uk, h, q1, mk, lam_q, lam_p)
        params_bar = jax.tree.map(jnp.add, params_bar, pb)
        # λ_k = λ_{k+1} A_k + D₁ℓ(x_k) (eq. 10); D₁ℓ(x_0) = 0: x_0 is not a cost term.
        return (qb + lqk, pbar + lpk, params_bar), None

    zero_params = jax.tree.map(jnp.zeros_like, params)
    # Step k maps x_k to x_{k+1}; the running terms D₁ℓ(x_k) enter for k = N−1 .. 0, with 0
    # for x_0 (not in the cost).
    lq_prev = jnp.concatenate([jnp.zeros_like(lq[:1]), lq[:-1]])
    lp_prev = jnp.concatenate([jnp.zeros_like(lp[:1]), lp[:-1]])
    xs = (q[:-1], p[:-1], q[1:], mult, u, lq_prev, lp_prev)
    (_, _, params_bar), _ = jax.lax.scan(back, (lq[-1], lp[-1], zero_params), xs, reverse=True)
    (theta_bar,) = params_pull(params_bar)
    return jnp.sum(values), theta_bar + jnp.sum(ltheta, axis=0)


def forward_sensitivities(system: ClosedTree, params_of, theta, q0, p0, u, h):
    """(q, p) [N + 1, n] and their θ-derivatives dq, dp [N + 1, n, n_θ]: z_{k+1} = A_k z_k +
    B_k (eq. 6) from z₀ = 0, by JAX's forward mode through the steps' implicit-function JVP
    (one tangent per parameter, the primal rollout once)."""

    def states(t):
        q, p, _ = rollout(system, params_of, t, q0, p0, u, h)
        return (q, p), (q, p)

    (dq, dp), (q, p) = jax.jacfwd(states, has_aux=True)(theta)
    return q, p, dq, dp
