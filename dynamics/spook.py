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

from physid.dynamics.lcp import solve_lcp
from physid.dynamics.multibody import (
    Hinge,
    HingeParams,
    Params,
    System,
    applied_forces,
    boxplus_config,
    hinge_kinematics,
    mass_matrix_blocks,
)
from physid.dynamics.quaternion import boxminus


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
    g, G, Gbar = hinge_kinematics(q, hinge, n)
    gamma = 1.0 / (1.0 + 4.0 * hp.tau / h)  # (2.9)
    eps = jnp.concatenate([jnp.full(3, hp.eps_lin), jnp.full(2, hp.eps_rot)])
    sigma = 4.0 / h**2 * eps * gamma  # (2.10)
    a = 4.0 / h * gamma * g - gamma * (G @ v.reshape(-1))  # (2.18), second block row
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
    force = applied_forces(params, blocks, v).reshape(-1)
    rows = _all_hinge_rows(system, params, q, v, u, h)
    v_next = _mlcp_velocity(system, params, blocks, force, rows, v, h)
    return _finish_step(system, q, v, v_next, blocks, force, h)


def _all_hinge_rows(system: System, params: Params, q, v, u, h) -> list[HingeRows]:
    return [
        _hinge_rows(system, hg, hp, q, v, u, h)
        for hg, hp in zip(system.hinges, params.hinges, strict=True)
    ]


def _block_product(blocks, x) -> jnp.ndarray:
    """M x [nb*6] for M = diag(blocks) and x [nb, 6], block by block (no 12 × 12 product
    that is mostly zeros)."""
    return jnp.einsum("bij,bj->bi", blocks, x).reshape(-1)


def _finish_step(system: System, q, v, v_next, blocks, force, h) -> StepResult:
    """(2.16) and the constraint impulses M(v_{k+1} − v_k) − h f that made the step."""
    v_next = v_next.reshape(system.n_bodies, 6)
    impulse = _block_product(blocks, v_next - v) - h * force
    q_next = boxplus_config(q, h * v_next)
    return StepResult(q_next, v_next, impulse.reshape(system.n_bodies, 6))


def _mlcp_velocity(system: System, params: Params, blocks, force, rows, v, h) -> jnp.ndarray:
    """v_{k+1} [nb*6] from the MLCP (2.26–2.28): Schur complement onto the multipliers,
    elimination of the equality block (block LDLᵀ, Appendix A), Lemke on the rest."""
    Minv = jax.scipy.linalg.block_diag(*jnp.linalg.inv(blocks))
    v_free = v.reshape(-1) + h * Minv @ force
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
    return v_free + Minv @ impulse


class Piece(NamedTuple):
    """Which linear piece of the dry-friction law holds at a step, per dry hinge: the signs
    (±1) of the hinge multipliers λ_h [nd, 5] and the friction mode [nd]: 0 sticking,
    ±1 sliding with λ_t = ±U·|λ_h| (F.4)."""

    sign: jnp.ndarray
    mode: jnp.ndarray


def _dry_multipliers(dry_rows: list[HingeRows], vn):
    """Per dry hinge [nd, …]: the signed hinge multipliers λ_h = λ⁺ − λ⁻ [nd, 5], the friction
    multiplier before the bound, −Ḡv/Σ_t [nd], and the bound U·|λ_h| [nd] for velocity vn
    (2.24, F.4)."""
    G = jnp.stack([hr.G for hr in dry_rows])
    a = jnp.stack([hr.a for hr in dry_rows])
    sigma = jnp.stack([hr.sigma for hr in dry_rows])
    Gbar = jnp.stack([hr.Gbar for hr in dry_rows])
    sigma_t = jnp.stack([hr.sigma_t for hr in dry_rows])
    U = jnp.stack([hr.U for hr in dry_rows])
    lam_h = -(G @ vn + a) / sigma
    return lam_h, -(Gbar @ vn) / sigma_t, jnp.sum(U * jnp.abs(lam_h), axis=1)


def _piece_of(lam_h, lam_t, bound) -> Piece:
    """The piece that multipliers (from :func:`_dry_multipliers`) lie on."""
    mode = jnp.where(lam_t > bound, 1.0, jnp.where(lam_t < -bound, -1.0, 0.0))
    return Piece(jnp.where(lam_h >= 0.0, 1.0, -1.0), mode)


def _on_piece(lam_h, lam_t, bound, piece: Piece) -> jnp.ndarray:
    """True if the multipliers lie on ``piece``: then the affine λ(v) of the piece is the
    λ(v) of (2.24), and the velocity solves the MLCP exactly. Boundaries (λ_h = 0,
    λ_t = ±bound) belong to both neighbouring pieces."""
    signs_ok = jnp.all(piece.sign * lam_h >= 0.0)
    mode = piece.mode
    friction_ok = jnp.where(mode == 0.0, jnp.abs(lam_t) <= bound, mode * lam_t >= bound)
    return signs_ok & jnp.all(friction_ok)


def _small_solve(A: jnp.ndarray, b: jnp.ndarray) -> jnp.ndarray:
    """A⁻¹ b for the k × k capacitance matrix (k = number of dry hinges): closed form for
    k ≤ 2 (Cramer), which avoids an LU call and its pivot loop in every step."""
    k = A.shape[0]
    if k == 1:
        return b / A[0, 0]
    if k == 2:
        det = A[0, 0] * A[1, 1] - A[0, 1] * A[1, 0]
        return jnp.stack([A[1, 1] * b[0] - A[0, 1] * b[1], A[0, 0] * b[1] - A[1, 0] * b[0]]) / det
    return jnp.linalg.solve(A, b)


def _piece_velocity(system: System, params: Params, M, rhs, rows, piece: Piece, h):
    """v_{k+1} [nb*6] on one piece of the dry-friction law, and whether the solve is sound.

    Every multiplier is affine in v_{k+1} (as in inverse dynamics, 2.30–2.31): equality rows
    λ = −(V v + c)/Σ, hinge rows λ_h = −(G v + a)/σ, and per dry hinge the friction multiplier
    λ_t = −Ḡv/Σ_t (sticking) or ±U·(s ⊙ λ_h) (sliding). Momentum, M(v − v_k) − h f = Σ Fᵀλ,
    becomes (N + Ḡᵀ P) v = r with N = M + F_Aᵀ Σ_A⁻¹ V_A + Σ Gᵀ σ⁻¹ G symmetric positive
    definite (V_A is F_A scaled by b h or J_shaft ≥ 0) and the friction rows' rank-k term
    Ḡᵀ P, k = number of dry hinges. One 12 × 12 Cholesky and the Woodbury identity (k × k)
    replace the Schur complement, the equality elimination and Lemke's pivoting.
    """
    FA, VA, SA, cA = _equality_rows(system, rows, params, h)
    dry = [hr for hg, hr in zip(system.hinges, rows, strict=True) if hg.dry]
    # All symmetric rows in one product: N = M + Fᵀ W, r = rhs − Fᵀ c/Σ.
    F = jnp.concatenate([FA] + [hr.G for hr in dry])
    W = jnp.concatenate([VA / SA[:, None]] + [hr.G / hr.sigma[:, None] for hr in dry])
    c = jnp.concatenate([cA / SA] + [hr.a / hr.sigma for hr in dry])
    NW = F.T @ jnp.concatenate([W, c[:, None]], axis=1)
    N = M + NW[:, :-1]
    # Friction: λ_t = −(p·v + p0); sticking p = Ḡ/Σ_t, sliding λ_t = mode·U·(s ⊙ λ_h).
    Gb = jnp.stack([hr.Gbar for hr in dry])
    w = jnp.stack([hr.U / hr.sigma for hr in dry]) * piece.sign
    G = jnp.stack([hr.G for hr in dry])
    sliding = piece.mode[:, None] * jnp.einsum("dj,djn->dn", w, G)
    sticking = Gb / jnp.stack([hr.sigma_t for hr in dry])[:, None]
    P = jnp.where(piece.mode[:, None] == 0.0, sticking, sliding)
    p0 = piece.mode * jnp.sum(w * jnp.stack([hr.a for hr in dry]), axis=1)
    r = rhs - NW[:, -1] - Gb.T @ p0
    chol = jax.scipy.linalg.cho_factor(N, lower=True)
    YZ = jax.scipy.linalg.cho_solve(chol, jnp.concatenate([r[:, None], Gb.T], axis=1))
    y, Z = YZ[:, 0], YZ[:, 1:]
    vn = y - Z @ _small_solve(jnp.eye(len(dry)) + P @ Z, P @ y)
    # Guard against a (near-)singular piece: the Woodbury step must reproduce r.
    residual = N @ vn + Gb.T @ (P @ vn) - r
    sound = jnp.all(jnp.abs(residual) <= 1e-9 * jnp.abs(r).max())
    return vn, sound


def _step_on_piece(system: System, params: Params, q, v, u, h: float, piece: Piece):
    """:func:`step` trying the dry-friction piece of the previous step first.

    The piece's linear solve is accepted only when its multipliers stay on the piece; the
    velocity then solves the MLCP (2.24–2.28) exactly (the regularized problem has a unique
    solution, so it is the one Lemke finds, without Lemke's rounding). Otherwise — at
    stick/slip transitions and sign changes of a hinge force, a few steps in a thousand —
    the step falls back to Schur complement + Lemke, whose answer names the new piece.
    Returns the step and its piece.
    """
    blocks = mass_matrix_blocks(params, q[1])
    force = applied_forces(params, blocks, v).reshape(-1)
    rows = _all_hinge_rows(system, params, q, v, u, h)
    dry_rows = [hr for hg, hr in zip(system.hinges, rows, strict=True) if hg.dry]
    M = jax.scipy.linalg.block_diag(*blocks)
    rhs = _block_product(blocks, v) + h * force
    vn, sound = _piece_velocity(system, params, M, rhs, rows, piece, h)
    multipliers = _dry_multipliers(dry_rows, vn)
    accepted = sound & _on_piece(*multipliers, piece)

    def lemke_step():
        # Lemke finds the new piece; one solve on that piece then removes the digits that
        # pivoting on the Schur complement loses (up to 1e-3 of a stiff hinge impulse).
        v_lemke = _mlcp_velocity(system, params, blocks, force, rows, v, h)
        found = _piece_of(*_dry_multipliers(dry_rows, v_lemke))
        v_piece, sound = _piece_velocity(system, params, M, rhs, rows, found, h)
        multipliers = _dry_multipliers(dry_rows, v_piece)
        polished = sound & _on_piece(*multipliers, found)
        v_next = jnp.where(polished, v_piece, v_lemke)
        return v_next, _piece_of(*_dry_multipliers(dry_rows, v_next))

    v_next, piece = lax.cond(accepted, lambda: (vn, _piece_of(*multipliers)), lemke_step)
    return _finish_step(system, q, v, v_next, blocks, force, h), piece


def simulate(system: System, params: Params, q0, v0, u: jnp.ndarray, h: float):
    """Roll out ``len(u)`` SPOOK steps with ``lax.scan``; returns q[N+1], v[N+1] (incl. start).

    With dry hinges each step first tries the friction piece of the previous step
    (:func:`_step_on_piece`); the result is the MLCP solution either way.
    """
    n_dry = sum(hinge.dry for hinge in system.hinges)

    def plain(carry, u_k):
        q, v = carry
        res = step(system, params, q, v, u_k, h)
        return (res.q, res.v), (res.q, res.v)

    def warm(carry, u_k):
        q, v, piece = carry
        res, piece = _step_on_piece(system, params, q, v, u_k, h, piece)
        return (res.q, res.v, piece), (res.q, res.v)

    if n_dry:
        # Start sticking with positive multipliers; a wrong start costs one Lemke solve.
        start = (q0, v0, Piece(jnp.ones((n_dry, 5)), jnp.zeros(n_dry)))
        _, (qs, vs) = lax.scan(warm, start, u)
    else:
        _, (qs, vs) = lax.scan(plain, (q0, v0), u)
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
    force = applied_forces(params, blocks, v).reshape(-1)
    impulse = _step_impulses(system, params, q, v, v_next, u, h)

    dp_u = _block_product(blocks, v_next - v) - impulse - h * force
    dp_q = _block_product(blocks, configuration_velocity(q, q_next, h) - v) - impulse - h * force
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
