"""SPOOK time stepping and inverse-dynamics impulse residuals (Marklund et al. 2.8–2.31, 3.7–3.8).

Every constraint row i is written as ``V_i v_{k+1} + Σ_i λ_i + c_i = 0`` (equality rows, the
set A of (2.18)) or ``= w_i ≥ 0 ⟂ λ_i ≥ 0`` (complementarity rows, the set B of (2.24)), with
impulse ``F_iᵀ λ_i`` on the bodies. Holonomic rows have F = V = G and the SPOOK regularization
(2.9–2.11); the viscous row (F.2) is scaled by b·h and the motor row (F.3) by J_shaft so that
b = 0 is allowed. A hinge with dry friction enters B as the pair g ≥ 0, −g ≥ 0 plus the friction
rows and the bound multiplier σ (2.24, F.4).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from dynamics.lcp import solve_lcp
from dynamics.multibody import (
    Hinge,
    HingeParams,
    Params,
    System,
    applied_forces,
    boxplus_config,
    constraint_jacobian,
    hinge_angle_rate_row,
    hinge_violation,
    mass_matrix_blocks,
)
from dynamics.quaternion import boxminus


class HingeRows(NamedTuple):
    """Rows of one hinge at step k: holonomic G[5, n], a[5] (the constant part of (2.18)),
    Σ_h[5], friction/drag axis row Gbar[n], friction regularization Σ_t, friction bound
    weights U[5] (F.4), and the constant part of the motor row."""

    G: jnp.ndarray
    a: jnp.ndarray
    sigma: jnp.ndarray
    Gbar: jnp.ndarray
    sigma_t: jnp.ndarray
    U: jnp.ndarray
    motor_c: jnp.ndarray


def _hinge_rows(system: System, hinge: Hinge, hp: HingeParams, q, v, u, h) -> HingeRows:
    n = system.n_bodies
    g = hinge_violation(q, hinge)
    G = constraint_jacobian(lambda qq: hinge_violation(qq, hinge), q, n)
    gamma = 1.0 / (1.0 + 4.0 * hp.tau / h)  # (2.9)
    eps = jnp.concatenate([jnp.full(3, hp.eps_lin), jnp.full(2, hp.eps_rot)])
    sigma = 4.0 / h**2 * eps * gamma  # (2.10)
    a = 4.0 / h * gamma * g - gamma * (G @ v.reshape(-1))  # (2.18), second block row
    Gbar = hinge_angle_rate_row(q, hinge, n)
    omega = Gbar @ v.reshape(-1)
    mu = hp.mu + (hp.mu_delta * jnp.exp(-hp.zeta * omega**2) if hinge.stribeck else 0.0)  # (4.1)
    U = jnp.concatenate([jnp.full(3, hp.r * mu), jnp.full(2, mu)])
    # The friction rows are velocity constraints: Σ_t = eps_fric/h makes a held hinge creep at
    # eps_fric × torque (the SPOOK holonomic Σ would let it creep at 4εγ/h × torque, mrad/s).
    sigma_t = hp.eps_fric / h
    motor_c = -hp.J_shaft * omega - h * hp.K * u
    return HingeRows(G, a, sigma, Gbar, sigma_t, U, motor_c)


def _equality_rows(system: System, rows: list[HingeRows], params: Params, h):
    """(F, V, Σ, c) of the equality set A: rigid hinges, drag and motor rows."""
    F, V, S, c = [], [], [], []
    for hinge, hr, hp in zip(system.hinges, rows, params.hinges, strict=True):
        if not hinge.dry:
            F.append(hr.G), V.append(hr.G), S.append(hr.sigma), c.append(hr.a)
        if hinge.viscous:
            F.append(hr.Gbar[None]), V.append(hp.b * h * hr.Gbar[None])
            S.append(jnp.ones(1)), c.append(jnp.zeros(1))
        if hinge.motor:
            F.append(hr.Gbar[None]), V.append(hp.J_shaft * hr.Gbar[None])
            S.append(jnp.ones(1)), c.append(hr.motor_c[None])
    n = system.n_dof
    if not F:
        return jnp.zeros((0, n)), jnp.zeros((0, n)), jnp.zeros(0), jnp.zeros(0)
    return jnp.concatenate(F), jnp.concatenate(V), jnp.concatenate(S), jnp.concatenate(c)


def _complementarity_rows(system: System, rows: list[HingeRows]):
    """(F = V, S_BB, c) of the set B: per dry hinge [λ⁺(5), λ⁻(5), λ_t⁺, λ_t⁻, σ] (2.24)."""
    blocks = []
    for hinge, hr in zip(system.hinges, rows, strict=True):
        if not hinge.dry:
            continue
        zeros = jnp.zeros_like(hr.Gbar)[None]
        F = jnp.concatenate([hr.G, -hr.G, hr.Gbar[None], -hr.Gbar[None], zeros])
        S = jnp.zeros((13, 13))
        S = S.at[jnp.arange(5), jnp.arange(5)].set(hr.sigma)
        S = S.at[jnp.arange(5, 10), jnp.arange(5, 10)].set(hr.sigma)
        S = S.at[10, 10].set(hr.sigma_t).at[11, 11].set(hr.sigma_t)
        S = S.at[10, 12].set(1.0).at[11, 12].set(1.0)  # w_t± = ±Ḡv + Σ_t λ_t± + σ
        S = S.at[12, :5].set(hr.U).at[12, 5:10].set(hr.U)  # w_σ = U(λ⁺+λ⁻) − λ_t⁺ − λ_t⁻
        S = S.at[12, 10].set(-1.0).at[12, 11].set(-1.0)
        c = jnp.concatenate([hr.a, -hr.a, jnp.zeros(3)])
        blocks.append((F, S, c))
    if not blocks:
        return None
    F = jnp.concatenate([b[0] for b in blocks])
    S = jax.scipy.linalg.block_diag(*[b[1] for b in blocks])
    c = jnp.concatenate([b[2] for b in blocks])
    return F, S, c


class StepResult(NamedTuple):
    q: tuple
    v: jnp.ndarray
    impulses: jnp.ndarray  # constraint impulses Σ Fᵀλ on the bodies [nb, 6] (N s, N m s)


def step(system: System, params: Params, q, v, u, h: float) -> StepResult:
    """One SPOOK step (2.26–2.28, 2.16): (q_k, v_k, u_k) → (q_{k+1}, v_{k+1}).

    The MLCP is reduced by a Schur complement onto the multipliers, the equality block is
    eliminated (block LDLᵀ, Appendix A) and the remaining LCP solved by Lemke's algorithm.
    """
    blocks = mass_matrix_blocks(params, q[1])
    Minv = jax.scipy.linalg.block_diag(*jnp.linalg.inv(blocks))
    force = applied_forces(params, blocks, v).reshape(-1)
    v_free = v.reshape(-1) + h * Minv @ force
    rows = [
        _hinge_rows(system, hg, hp, q, v, u, h)
        for hg, hp in zip(system.hinges, params.hinges, strict=True)
    ]
    FA, VA, SA, cA = _equality_rows(system, rows, params, h)
    comp = _complementarity_rows(system, rows)
    SAA = VA @ Minv @ FA.T + jnp.diag(SA)
    qA = VA @ v_free + cA
    if comp is None:
        lamA = -jnp.linalg.solve(SAA, qA)
        impulse = FA.T @ lamA
    else:
        FB, SBB, cB = comp
        SAB = VA @ Minv @ FB.T
        SBA = FB @ Minv @ FA.T
        H = FB @ Minv @ FB.T + SBB - SBA @ jnp.linalg.solve(SAA, SAB)
        qB = FB @ v_free + cB - SBA @ jnp.linalg.solve(SAA, qA)
        lamB = solve_lcp(H, qB)
        lamA = -jnp.linalg.solve(SAA, qA + SAB @ lamB)
        impulse = FA.T @ lamA + FB.T @ lamB
    v_next = v_free + Minv @ impulse
    v_next = v_next.reshape(system.n_bodies, 6)
    q_next = boxplus_config(q, h * v_next)
    return StepResult(q_next, v_next, impulse.reshape(system.n_bodies, 6))


def simulate(system: System, params: Params, q0, v0, u: jnp.ndarray, h: float):
    """Roll out ``len(u)`` SPOOK steps with ``lax.scan``; returns q[N+1], v[N+1] (incl. start)."""

    def body(carry, u_k):
        q, v = carry
        res = step(system, params, q, v, u_k, h)
        return (res.q, res.v), (res.q, res.v)

    _, (qs, vs) = lax.scan(body, (q0, v0), u)
    r = jnp.concatenate([q0[0][None], qs[0]])
    e = jnp.concatenate([q0[1][None], qs[1]])
    return (r, e), jnp.concatenate([v0[None], vs])


def _step_impulses(system: System, params: Params, q, v, v_next, u, h) -> jnp.ndarray:
    """Constraint impulses Σ Fᵀλ needed for v_k → v_{k+1}, from (2.30–2.31) solved explicitly.

    Equality rows give λ = −(V v_{k+1} + c)/Σ. For a dry hinge the pair (λ⁺, λ⁻) collapses to
    the signed λ_h of the equality formula (exactly one of the pair is active), and the
    friction multiplier is −Ḡ v_{k+1}/Σ_t clipped to the bound U·|λ_h| — the unique solution of
    the friction rows of (2.24) for the given v_{k+1}, so no LCP is needed in inverse dynamics.
    """
    vn = v_next.reshape(-1)
    rows = [
        _hinge_rows(system, hg, hp, q, v, u, h)
        for hg, hp in zip(system.hinges, params.hinges, strict=True)
    ]
    FA, VA, SA, cA = _equality_rows(system, rows, params, h)
    impulse = FA.T @ (-(VA @ vn + cA) / SA)
    for hinge, hr in zip(system.hinges, rows, strict=True):
        if hinge.dry:
            lam_h = -(hr.G @ vn + hr.a) / hr.sigma
            bound = hr.U @ jnp.abs(lam_h)
            lam_t = jnp.clip(-(hr.Gbar @ vn) / hr.sigma_t, -bound, bound)
            impulse = impulse + hr.G.T @ lam_h + hr.Gbar * lam_t
    return impulse


def impulse_residual(system: System, params: Params, q, v, q_next, v_next, u, h):
    """Δp_u and Δp_q (3.7–3.8) of one step: the external impulses [nb*6] (N s, N m s) needed
    to go from v_k to v_{k+1} and from q_k to q_{k+1}."""
    blocks = mass_matrix_blocks(params, q[1])
    M = jax.scipy.linalg.block_diag(*blocks)
    force = applied_forces(params, blocks, v).reshape(-1)
    impulse = _step_impulses(system, params, q, v, v_next, u, h)
    vk = v.reshape(-1)
    dp_u = M @ (v_next.reshape(-1) - vk) - impulse - h * force
    v_from_q = configuration_velocity(q, q_next, h).reshape(-1)
    dp_q = M @ (v_from_q - vk) - impulse - h * force
    return dp_u, dp_q


def configuration_velocity(q, q_next, h: float) -> jnp.ndarray:
    """h⁻¹ (q_{k+1} ⊟ q_k) per body [nb, 6] (4.3)."""
    dr = (q_next[0] - q[0]) / h
    dpsi = jax.vmap(boxminus)(q_next[1], q[1]) / h
    return jnp.concatenate([dr, dpsi], axis=1)


def trajectory_residuals(system: System, params: Params, q, v, u, h: float):
    """Impulse residuals of a whole trajectory, vectorized over the n−1 steps (no Python loop).

    q = (r[n, nb, 3], e[n, nb, 4]), v[n, nb, 6], u[n−1] → (Δp_u, Δp_q), each [n−1, nb*6].
    """
    r, e = q

    def one(rk, ek, vk, rk1, ek1, vk1, uk):
        return impulse_residual(system, params, (rk, ek), vk, (rk1, ek1), vk1, uk, h)

    return jax.vmap(one)(r[:-1], e[:-1], v[:-1], r[1:], e[1:], v[1:], u)
