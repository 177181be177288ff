"""Kinematic trees closed by holonomic constraints and loaded by point forces: the constrained
midpoint variational integrator (Caldwell, Coleman & Correll, eqs. 3–8, 15).

A closed chain (a loop) is a tree cut open at one joint plus holonomic constraints h(q) = 0
that close it again. Here each constraint keeps a point fixed on one body on a point — or a
line — of another body or of the world (``PointClosure``): positions with w = 1 in the
paper's homogeneous notation, never directions (w = 0), whose rows lose rank (eq. 13 of the
draft constrains only the orientation of the end frame; docs/variational.md).

The constrained forced DEL equations in position–momentum form (eq. 5), for the unknowns
(q_{k+1}, λ_k) of one step:

    G₁ = p_k + D₁L_d(q_k, q_{k+1}) + F⁻(q_k, q_{k+1}) − Dh(q_k)ᵀ λ_k = 0
    G₂ = h(q_{k+1}) = 0
    p_{k+1} = D₂L_d(q_k, q_{k+1}) + F⁺(q_k, q_{k+1})

with L_d the midpoint discrete Lagrangian (eq. 15, ``midpoint.discrete_lagrangian``) and F∓
half the midpoint impulse of the forces outside V each (``midpoint`` explains the even split,
a departure from eq. 16). The constraint enters at configuration level: q_{k+1} satisfies
h = 0 to Newton's tolerance at every step, so closure does not drift (contrast eq. 1, whose
acceleration-level constraint does).

``solve_step`` runs Newton's method on (G₁, G₂) until the correction of q_{k+1} is below
1e-12 (rad or m). Its derivatives do not trace Newton's iterations: a custom JVP applies the
implicit-function theorem at the converged point — with K = ∂G/∂(q_{k+1}, λ_k), the KKT
matrix [[M_{k+1}, −Dh(q_k)ᵀ], [Dh(q_{k+1}), 0]] (M_{k+1} = D₂D₁L_d + D₂F⁻ of the paper),

    d(q_{k+1}, λ_k) = −K⁻¹ ∂G/∂a · da,    dp_{k+1} = ∂P/∂q_{k+1} dq_{k+1} + ∂P/∂a · da,

for a = (q_k, p_k, parameters, input, h). These are eqs. 6–8 (A_k and B_k) in matrix-free
form; ``step_jvp`` and ``step_vjp`` apply them and their transpose to stored solutions, and
JAX's forward and reverse modes go through the same rule.

Units: q in rad or m, p in N m s or N s, λ in N s (the impulse of the constraint force over a
step), h in s, forces in N.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from physid.dynamics import newton_euler
from physid.dynamics.tree import WORLD, Tree, TreeParams
from physid.dynamics.variational import midpoint
from physid.dynamics.variational import slots as slot_forms
from physid.dynamics.variational.kinematics import world_poses

# Newton stops when the correction of q_{k+1} is below this (rad or m): round-off of the
# configuration, so h(q_{k+1}) is left at ~1e-15 m and the DEL residual at round-off.
NEWTON_TOLERANCE = 1e-12
NEWTON_MAX_ITERATIONS = 30
WORLD_FRAME, BODY_FRAME = "world", "body"


@dataclass(frozen=True)
class PointClosure:
    """h rows that keep ``point`` (m, frame of ``body``) on ``target`` (m, frame of ``other``,
    the world by default): three rows, the gap's components in ``other``'s frame; or, with
    ``free_axis`` (a direction in ``other``'s frame), two rows — the point may slide along the
    line through ``target`` in that direction."""

    body: int
    point: tuple[float, float, float]
    other: int = WORLD
    target: tuple[float, float, float] = (0.0, 0.0, 0.0)
    free_axis: tuple[float, float, float] | None = None
    name: str = ""

    @property
    def axes(self) -> np.ndarray:
        """[2 or 3, 3]: the unit directions (``other``'s frame) along which the gap is held."""
        if self.free_axis is None:
            return np.eye(3)
        a = np.asarray(self.free_axis, float)
        a = a / np.linalg.norm(a)
        # The two right singular vectors orthogonal to a span its normal plane.
        return np.linalg.svd(a[None, :])[2][1:]

    @property
    def rows(self) -> int:
        return 3 if self.free_axis is None else 2


@dataclass(frozen=True)
class PointLoad:
    """A force applied at ``point`` (m, frame of ``body``), given as three input components
    (N) in the world frame (``frame = "world"``) or in the body's frame (``"body"``, a
    follower force)."""

    body: int
    point: tuple[float, float, float]
    frame: str = WORLD_FRAME
    name: str = ""

    def __post_init__(self) -> None:
        if self.frame not in (WORLD_FRAME, BODY_FRAME):
            raise ValueError(f"PointLoad {self.name!r}: frame {self.frame!r} is not world or body")


@dataclass(frozen=True)
class ClosedTree:
    """A tree, the closures that close its loops and the point loads on it (static, hashable).

    The input vector u of a step is [the tree's actuator inputs, then 3 force components (N)
    per load], held over the step.
    """

    tree: Tree
    closures: tuple[PointClosure, ...] = ()
    loads: tuple[PointLoad, ...] = ()

    @property
    def n_dof(self) -> int:
        return self.tree.n_dof

    @property
    def n_constraints(self) -> int:
        return sum(c.rows for c in self.closures)

    @property
    def n_inputs(self) -> int:
        return self.tree.n_actuators + 3 * len(self.loads)


# --- constraints and loads ------------------------------------------------------------------


def constraints(system: ClosedTree, params: TreeParams, q):
    """h(q) [n_constraints] (m): each closure's gap along its held axes."""
    if not system.closures:
        return jnp.zeros(0, q.dtype)
    R, p = world_poses(system.tree, params, q)
    rows = []
    for c in system.closures:
        x_a = R[c.body] @ jnp.asarray(c.point) + p[c.body]
        if c.other == WORLD:
            R_b, x_b = jnp.eye(3), jnp.asarray(c.target)
        else:
            R_b = R[c.other]
            x_b = R_b @ jnp.asarray(c.target) + p[c.other]
        rows.append(jnp.asarray(c.axes) @ (R_b.T @ (x_a - x_b)))
    return jnp.concatenate(rows)


def constraint_jacobian(system: ClosedTree, params: TreeParams, q):
    """Dh(q) [n_constraints, n] (m per rad or m/m)."""
    return jax.jacfwd(constraints, argnums=2)(system, params, q)


def load_points(system: ClosedTree, params: TreeParams, q):
    """World positions [n_loads, 3] (m) of the loads' points of application."""
    R, p = world_poses(system.tree, params, q)
    return _points_on(system.loads, R, p)


def _points_on(items, R, p):
    return jnp.stack([R[it.body] @ jnp.asarray(it.point) + p[it.body] for it in items])


def split_input(system: ClosedTree, u):
    """(actuator inputs [n_actuators], load forces [n_loads, 3] in the loads' frames)."""
    na = system.tree.n_actuators
    return u[:na], u[na:].reshape(len(system.loads), 3)


def world_forces(system: ClosedTree, params: TreeParams, q, u):
    """The loads' forces [n_loads, 3] (N) in the world frame at configuration q."""
    _, f = split_input(system, u)
    if all(ld.frame == WORLD_FRAME for ld in system.loads):
        return f
    R, _ = world_poses(system.tree, params, q)
    return jnp.stack(
        [R[ld.body] @ f[i] if ld.frame == BODY_FRAME else f[i] for i, ld in enumerate(system.loads)]
    )


def load_forces(system: ClosedTree, params: TreeParams, q, u):
    """Generalized forces [n] of the point loads of input u: Σ J_pᵀ F_world (N m or N)."""
    if not system.loads:
        return jnp.zeros(system.n_dof, q.dtype)
    _, pullback = jax.vjp(lambda x: load_points(system, params, x), q)
    return pullback(world_forces(system, params, q, u))[0]


def generalized_forces(system: ClosedTree, params: TreeParams, q, qd, u):
    """Forces outside V [n]: actuators, joint friction and point loads."""
    ua, _ = split_input(system, u)
    joint = midpoint.nonconservative_forces(system.tree, params, q, qd, ua)
    return joint + load_forces(system, params, q, u)


def discrete_forces(system: ClosedTree, params: TreeParams, q0, q1, u, h):
    """(F⁻, F⁺) [n] (N m s or N s): half the midpoint impulse each (see ``midpoint``)."""
    qm, v = 0.5 * (q0 + q1), (q1 - q0) / h
    half = 0.5 * h * generalized_forces(system, params, qm, v, u)
    return half, half


def slots(system: ClosedTree, params: TreeParams, q0, q1, u, h):
    """(D₁L_d + F⁻, D₂L_d + F⁺) [n] each, in closed form (``variational.slots``).

    The impulse of a point load, (h/2) J_p(q̄)ᵀ F (q̄ = (q₀ + q₁)/2), enters as the world
    wrench (F, x_p × F) of the force at its point at q̄, with F in the world frame at q̄ (a
    body-frame load turns with its body). Joint forces (actuators, friction) are added as
    (h/2) F_c. First derivatives only: the KKT matrix (eqs. 7–8) is one forward-mode pass.
    """
    ua, _ = split_input(system, u)
    wrenches_of = None
    if system.loads:
        bodies = tuple(ld.body for ld in system.loads)

        def wrenches_of(qm):
            R, p = world_poses(system.tree, params, qm)
            x = _points_on(system.loads, R, p)
            return slot_forms.load_wrenches(
                system.tree, bodies, x, world_forces(system, params, qm, u)
            )

    return slot_forms.slot_derivatives(system.tree, params, q0, q1, h, wrenches_of, ua)


# --- the step ------------------------------------------------------------------------------


def del_residual(system: ClosedTree, params: TreeParams, q0, p0, q1, lam, u, h):
    """(G₁, G₂) of eq. 5 as one vector [n + n_constraints]: zero when (q₁, λ) is the step
    from (q₀, p₀) under u."""
    first, _ = slots(system, params, q0, q1, u, h)
    _, pullback = jax.vjp(lambda q: constraints(system, params, q), q0)
    G1 = p0 + first - pullback(lam)[0]
    return jnp.concatenate([G1, constraints(system, params, q1)])


def momentum_out(system: ClosedTree, params: TreeParams, q0, q1, u, h):
    """p_{k+1} = D₂L_d(q_k, q_{k+1}) + F⁺ (eqs. 4–5) [n]."""
    return slots(system, params, q0, q1, u, h)[1]


def step_residual(system: ClosedTree, params: TreeParams, q0, p0, q1, p1, lam, u, h):
    """The whole constrained step as a residual [2n + n_constraints] of (x_k, x_{k+1}, λ_k):
    G₁, G₂ and p₁ − D₂L_d − F⁺. Couples two consecutive states only (a banded estimator's
    dynamics row; ``midpoint.step_residual`` is the unconstrained one)."""
    first, second = slots(system, params, q0, q1, u, h)
    _, pullback = jax.vjp(lambda q: constraints(system, params, q), q0)
    return jnp.concatenate(
        [p0 + first - pullback(lam)[0], constraints(system, params, q1), p1 - second]
    )


def _q1_rows(system: ClosedTree, params: TreeParams, q0, q1, u, h):
    """(D₁L_d + F⁻, h(q₁)): the parts of (G₁, G₂) that depend on q₁."""
    first, _ = slots(system, params, q0, q1, u, h)
    return jnp.concatenate([first, constraints(system, params, q1)])


def _rows_and_jacobian(system: ClosedTree, params: TreeParams, q0, q1, u, h):
    """``_q1_rows`` and its Jacobian in q₁ [n + m, n] from one forward-mode pass."""

    def rows(x):
        value = _q1_rows(system, params, q0, x, u, h)
        return value, value

    jac, value = jax.jacfwd(rows, has_aux=True)(q1)
    return value, jac


def _kkt(jac, H0):
    """K = [[M_{k+1}, −Dh(q₀)ᵀ], [Dh(q₁), 0]] from the q₁-Jacobian of ``_q1_rows``."""
    n = H0.shape[1]
    m = H0.shape[0]
    zero = jnp.zeros((m, m), jac.dtype)
    return jnp.block([[jac[:n], -H0.T], [jac[n:], zero]])


def kkt_matrix(system: ClosedTree, params: TreeParams, q0, q1, u, h):
    """K = ∂(G₁, G₂)/∂(q₁, λ) = [[M_{k+1}, −Dh(q₀)ᵀ], [Dh(q₁), 0]] (G is linear in λ)."""
    _, jac = _rows_and_jacobian(system, params, q0, q1, u, h)
    return _kkt(jac, constraint_jacobian(system, params, q0))


def _guess(system: ClosedTree, params: TreeParams, q0, p0, H0, h):
    """q₀ + h v with v the velocity of momentum p₀ tangent to the constraints: the KKT solve
    [[M, Dhᵀ], [Dh, 0]] (v, μ) = (p₀, 0). M alone may be singular (a massless end frame of a
    cut loop); with the constraint rows it is not."""
    n, m = system.n_dof, system.n_constraints
    M = newton_euler.crba(system.tree, params, q0)
    K = jnp.block([[M, H0.T], [H0, jnp.zeros((m, m), M.dtype)]])
    v = jnp.linalg.solve(K, jnp.concatenate([p0, jnp.zeros(m, p0.dtype)]))[:n]
    return q0 + h * v


def _newton(system: ClosedTree, params: TreeParams, q0, p0, u, h):
    """(q₁, λ, last correction, K) by Newton's method on (G₁, G₂) from ``_guess`` and λ = 0,
    with K the KKT matrix of the last iteration.

    Full Newton: the KKT matrix is formed at every iterate (one forward-mode pass over the
    closed-form slots gives the rows and their q₁-Jacobian). A simplified Newton with the
    matrix frozen at the guess was tried first and measured: for the hexagon under the draft's
    20 N force (corners bending by over 1 rad) it stalled at ‖h‖ ~ 1e-3 after 30 iterations,
    while full Newton converges quadratically in 3–5. Dh(q₀) is computed once: G is linear in
    λ with that fixed matrix.

    The returned K was formed at the iterate before the last correction (below 1e-12): it is
    the Jacobian at the solution to ~1e-12 relative, which is what the implicit-function
    derivatives need (``solve_step``'s JVP reuses it instead of forming it again)."""
    n, m = system.n_dof, system.n_constraints
    H0 = constraint_jacobian(system, params, q0)
    q_start = _guess(system, params, q0, p0, H0, h)

    def not_done(state):
        *_, correction, k, _ = state
        return (correction > NEWTON_TOLERANCE) & (k < NEWTON_MAX_ITERATIONS)

    def iterate(state):
        q1, lam, _, k, _ = state
        rows, jac = _rows_and_jacobian(system, params, q0, q1, u, h)
        G = jnp.concatenate([p0 + rows[:n] - H0.T @ lam, rows[n:]])
        K = _kkt(jac, H0)
        dz = jnp.linalg.solve(K, G)
        q1, lam = q1 - dz[:n], lam - dz[n:]
        return q1, lam, jnp.max(jnp.abs(dz[:n])), k + 1, K

    K0 = jnp.zeros((n + m, n + m), q0.dtype)
    start = (q_start, jnp.zeros(m, q0.dtype), jnp.inf, 0, K0)
    q1, lam, correction, _, K = jax.lax.while_loop(not_done, iterate, start)
    return q1, lam, correction, K


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def solve_step(system: ClosedTree, params: TreeParams, q0, p0, u, h):
    """One step (eq. 5): (q₁, p₁, λ₀) from (q₀, p₀) under input u over a step of h (s).
    Differentiable in every argument but ``system`` through the implicit-function theorem
    (``step_jvp``), never through Newton's iterations."""
    q1, lam, _, _ = _newton(system, params, q0, p0, u, h)
    return q1, momentum_out(system, params, q0, q1, u, h), lam


def step_jvp(system: ClosedTree, params, q0, p0, u, h, q1, lam, tangents, K=None):
    """(dq₁, dp₁, dλ) of the step at its solution (q₁, λ) for ``tangents`` = (dparams, dq₀,
    dp₀, du, dh) — eqs. 6–8 without forming A_k or B_k. K: the KKT matrix at the solution
    if the caller has it (formed here otherwise)."""
    primals = (params, q0, p0, u, h)

    def G(params, q0, p0, u, h):
        return del_residual(system, params, q0, p0, q1, lam, u, h)

    _, dG = jax.jvp(G, primals, tangents)
    if K is None:
        K = kkt_matrix(system, params, q0, q1, u, h)
    dz = -jnp.linalg.solve(K, dG)
    n = system.n_dof
    dq1, dlam = dz[:n], dz[n:]
    dparams, dq0, _, du, dh = tangents

    def P(params, q0, q1, u, h):
        return momentum_out(system, params, q0, q1, u, h)

    _, dp1 = jax.jvp(P, (params, q0, q1, u, h), (dparams, dq0, dq1, du, dh))
    return dq1, dp1, dlam


@solve_step.defjvp
def _solve_step_jvp(system, primals, tangents):
    params, q0, p0, u, h = primals
    q1, lam, _, K = _newton(system, params, q0, p0, u, h)
    p1 = momentum_out(system, params, q0, q1, u, h)
    dq1, dp1, dlam = step_jvp(system, params, q0, p0, u, h, q1, lam, tangents, K)
    return (q1, p1, lam), (dq1, dp1, dlam)


def step_vjp(system: ClosedTree, params, q0, p0, u, h, q1, lam, q1_bar, p1_bar):
    """The transpose of ``step_jvp``: cotangents (params̄, q̄₀, p̄₀, ū) of the step's inputs
    from cotangents (q̄₁, p̄₁) of its outputs, at the stored solution (q₁, λ); no Newton.

    With P = D₂L_d + F⁺ and w = K⁻ᵀ (q̄₁ + (∂P/∂q₁)ᵀ p̄₁, 0): ā = (∂P/∂a)ᵀ p̄₁ − (∂G/∂a)ᵀ w —
    one transposed KKT solve per step, the row λ_{k+1} A_k and λ_{k+1} B_k of Lemma 1."""
    _, P_pull = jax.vjp(
        lambda params, q0, q1, u: momentum_out(system, params, q0, q1, u, h), params, q0, q1, u
    )
    P_params, P_q0, P_q1, P_u = P_pull(p1_bar)
    rhs = jnp.concatenate([q1_bar + P_q1, jnp.zeros(system.n_constraints, q1.dtype)])
    w = jnp.linalg.solve(kkt_matrix(system, params, q0, q1, u, h).T, rhs)
    _, G_pull = jax.vjp(
        lambda params, q0, p0, u: del_residual(system, params, q0, p0, q1, lam, u, h),
        params,
        q0,
        p0,
        u,
    )
    G_params, G_q0, G_p0, G_u = G_pull(w)
    params_bar = jax.tree.map(lambda a, b: a - b, P_params, G_params)
    return params_bar, P_q0 - G_q0, -G_p0, P_u - G_u


# --- trajectories ----------------------------------------------------------------------------


def rollout(system: ClosedTree, params: TreeParams, q0, p0, u, h):
    """The integrator from (q₀, p₀) under inputs u [N, n_inputs] (row k held over step k):
    q, p [N + 1, n] and the multipliers λ [N, n_constraints]."""

    def one(carry, uk):
        q1, p1, lam = solve_step(system, params, *carry, uk, h)
        return (q1, p1), (q1, p1, lam)

    _, (q, p, lam) = jax.lax.scan(one, (q0, p0), u)
    return jnp.concatenate([q0[None], q]), jnp.concatenate([p0[None], p]), lam


def residuals_along(system: ClosedTree, params: TreeParams, q, p, lam, u, h):
    """Every step's ``step_residual`` [N, 2n + n_constraints] of a rollout (a check that the
    steps were solved: Newton's result is not trusted blindly)."""
    return jax.vmap(
        lambda q0, p0, q1, p1, lam, uk: step_residual(system, params, q0, p0, q1, p1, lam, uk, h)
    )(q[:-1], p[:-1], q[1:], p[1:], lam, u)


def step_energy(system: ClosedTree, params: TreeParams, q0, q1, h):
    """T + V (J) at the midpoint of a step, with the step's velocity (q₁ − q₀)/h: the energy
    the midpoint Lagrangian sees (oscillates at O(h²) around the true energy, no drift)."""
    return newton_euler.total_energy(system.tree, params, 0.5 * (q0 + q1), (q1 - q0) / h)


def momentum(system: ClosedTree, params: TreeParams, q, qd):
    """M(q) q̇: the start momentum of a run from a configuration and a velocity."""
    return midpoint.momentum(system.tree, params, q, qd)
