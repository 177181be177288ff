"""Multiple-shooting identification of a few global parameters θ of a simulated trajectory,
solved by the arrow-structured Levenberg–Marquardt of ``estimation.lm``.

The horizon of S·L steps is cut into S segments of L steps. Segment 0 starts at the known
start x₀ (as single shooting does); segments 1..S−1 start at unknown states s₁..s_{S−1} (the
LM's states), and θ is global. Each segment is simulated by the caller's ``flow``, all S
segments at once (``jax.vmap``: they run in parallel; the time steps inside one ``lax.scan``).
The weighted residuals are

    o_j = w_y ⊙ (y_j(s_j, θ) − ȳ_j)            [L·n_y]   the observations of segment j,
    c_j = w_c ⊙ gap(s_{j+1}, x_end,j(s_j, θ))    [n_c]     continuity, j = 0..S−2,

with ``gap`` the state space's difference (next segment's start minus this one's end). On
noise-free data of the model every residual vanishes at the truth, so the optimum is single
shooting's; with noise the continuity rows are a penalty (not an equality) and the weights w_c
set how far the segments may part (large w_c: single shooting's optimum, to O(1/w_c²)).

Arrow layout (``estimation.lm.Linearization``), states x_k = s_{k+1}, k = 0..S−2:
the init block [o₀; c₀; o₁] on x₀ and θ (o₀ depends on θ only: segment 0's start is known);
dyn block k = 0..S−3: [c_{k+1}; o_{k+2}] on x_k (c_{k+1} through segment k+1's end), x_{k+1}
and θ. JᵀJ is block-tridiagonal in the segment states with a dense θ border: the LM factors
it banded (O(S d³)), never a dense matrix growing with S².

Jacobians by forward sensitivities: per segment, one ``jax.jacfwd`` through the flow along
the d tangent directions of its start and the p parameters (the variational integrator's steps
differentiate by the implicit-function theorem), vmapped over segments.

Segment starts live on a manifold (``StateSpace``: tangent basis, retraction after a step,
continuity gap). ``Euclidean`` is the plain one; ``ClosedTreeStates`` keeps the starts of a
closed tree (``dynamics.variational.constrained``) on h(q) = 0 by coordinate partitioning.

Arrays in, arrays out; nothing here prints or reads files.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol

import jax
import jax.numpy as jnp
import numpy as np
import scipy.linalg

import physid.dynamics  # noqa: F401 (float64)
from physid.dynamics.tree import TreeParams
from physid.dynamics.variational import constrained
from physid.dynamics.variational.constrained import ClosedTree
from physid.estimation import lm

# flow(x₀ [n_x], θ [p], u [L, n_u]) -> (x_end [n_x], y [L, n_y]): one segment's end state and
# its predicted observations at its steps 1..L.
Flow = Callable[[jnp.ndarray, jnp.ndarray, jnp.ndarray], tuple[jnp.ndarray, jnp.ndarray]]


class StateSpace(Protocol):
    """Where segment starts live: ``dim`` tangent coordinates, a basis of the tangent space at
    x ([n_x, dim]: a step δ moves x by basis(x) δ to first order), the retraction x ⊞ δ, and
    the continuity gap between two states (zero iff they are the same state)."""

    dim: int

    def basis(self, x: jnp.ndarray) -> jnp.ndarray: ...

    def retract(self, x: jnp.ndarray, delta: jnp.ndarray) -> jnp.ndarray: ...

    def gap(self, x_next: jnp.ndarray, x_end: jnp.ndarray) -> jnp.ndarray: ...


@dataclass(frozen=True)
class Euclidean:
    """Unconstrained states in R^dim: basis I, x ⊞ δ = x + δ, gap x_next − x_end."""

    dim: int

    def basis(self, x):
        return jnp.eye(self.dim, dtype=x.dtype)

    def retract(self, x, delta):
        return x + delta

    def gap(self, x_next, x_end):
        return x_next - x_end


# The projection of a configuration onto h(q) = 0 stops when the dependent coordinates'
# correction is below this (rad or m): the integrator's own Newton tolerance, so a segment start
# is as closed as any state of a rollout.
PROJECTION_TOLERANCE = constrained.NEWTON_TOLERANCE
PROJECTION_MAX_ITERATIONS = 20


@dataclass(frozen=True, eq=False)  # hashed by identity: it holds arrays
class ClosedTreeStates:
    """Position–momentum states x = (q, p) [2n] of a closed tree, kept on the constraint
    manifold by coordinate partitioning (Wehage & Haug): the n coordinates are split once into
    n − m independent ones and m dependent ones, the columns a column-pivoted QR of Dh(q_ref)
    picks as the best-conditioned m × m block.

    - Configuration: the tangent directions are N(q) (N_i = I, N_d = −Dh_d⁻¹ Dh_i); x ⊞ δ
      moves the independent coordinates by δ and solves h(q) = 0 for the dependent ones by
      Newton, so every segment start is closed to the integrator's tolerance and the
      retraction's derivative at δ = 0 is N exactly.
    - Momentum: the constrained step (``constrained.solve_step``) is unchanged by
      p → p + Dh(q)ᵀμ (the step's multiplier absorbs it), so a momentum is a class modulo the
      constraint normals. Its representative here has p_d = 0 (add Dh(q)ᵀμ with
      Dh_dᵀμ = −p_d); the tangent directions are the independent unit vectors, and the
      retraction re-canonicalizes.
    - Gap: the independent components of q_next − q_end and of the two canonical momenta,
      2(n − m) rows, zero iff the states are the same (while Dh_d stays invertible).

    ``params``: the tree's parameters for the constraint geometry, which must not depend on
    the identified θ (stiffnesses do not move the closures)."""

    system: ClosedTree
    params: TreeParams
    independent: tuple[int, ...]
    dependent: tuple[int, ...]

    @classmethod
    def partitioned_at(cls, system: ClosedTree, params: TreeParams, q_ref) -> ClosedTreeStates:
        """The partition from a column-pivoted QR of Dh(q_ref): its first m pivots are the
        dependent coordinates."""
        Dh = np.asarray(constrained.constraint_jacobian(system, params, jnp.asarray(q_ref)))
        m = Dh.shape[0]
        _, _, piv = scipy.linalg.qr(Dh, pivoting=True, mode="economic")
        dep = tuple(sorted(int(i) for i in piv[:m]))
        ind = tuple(i for i in range(system.n_dof) if i not in dep)
        return cls(system, params, ind, dep)

    @property
    def dim(self) -> int:
        return 2 * len(self.independent)

    def _split(self, x):
        n = self.system.n_dof
        return x[:n], x[n:]

    def _dh(self, q):
        return constrained.constraint_jacobian(self.system, self.params, q)

    def basis(self, x):
        q, _ = self._split(x)
        n, k = self.system.n_dof, len(self.independent)
        ind, dep = jnp.asarray(self.independent), jnp.asarray(self.dependent)
        Dh = self._dh(q)
        eye = jnp.eye(k, dtype=x.dtype)
        N = jnp.zeros((n, k), x.dtype).at[ind].set(eye)
        N = N.at[dep].set(-jnp.linalg.solve(Dh[:, dep], Dh[:, ind]))
        E = jnp.zeros((n, k), x.dtype).at[ind].set(eye)
        zero = jnp.zeros((n, k), x.dtype)
        return jnp.block([[N, zero], [zero, E]])

    def project(self, q):
        """q with its dependent coordinates solved from h(q) = 0 (Newton)."""
        dep = jnp.asarray(self.dependent)

        def not_done(state):
            _, correction, k = state
            return (correction > PROJECTION_TOLERANCE) & (k < PROJECTION_MAX_ITERATIONS)

        def iterate(state):
            q, _, k = state
            h = constrained.constraints(self.system, self.params, q)
            dq = jnp.linalg.solve(self._dh(q)[:, dep], h)
            return q.at[dep].add(-dq), jnp.max(jnp.abs(dq)), k + 1

        q, _, _ = jax.lax.while_loop(not_done, iterate, (q, jnp.inf, 0))
        return q

    def canonical(self, q, p):
        """The representative of p's class at q with zero dependent components."""
        dep = jnp.asarray(self.dependent)
        Dh = self._dh(q)
        mu = jnp.linalg.solve(Dh[:, dep].T, -p[dep])
        return (p + Dh.T @ mu).at[dep].set(0.0)

    def retract(self, x, delta):
        q, p = self._split(x)
        k = len(self.independent)
        ind = jnp.asarray(self.independent)
        q = self.project(q.at[ind].add(delta[:k]))
        return jnp.concatenate([q, self.canonical(q, p.at[ind].add(delta[k:]))])

    def gap(self, x_next, x_end):
        ind = jnp.asarray(self.independent)
        q1, p1 = self._split(x_next)
        q0, p0 = self._split(x_end)
        dp = self.canonical(q1, p1) - self.canonical(q0, p0)
        return jnp.concatenate([(q1 - q0)[ind], dp[ind]])

    def start(self, q, p):
        """The state (q, p) [2n] with p canonical (q must already be closed)."""
        return jnp.concatenate([q, self.canonical(q, p)])


def closed_tree_flow(system: ClosedTree, params_of, h: float) -> Flow:
    """The flow of the constrained midpoint integrator over one segment: from x₀ = (q₀, p₀)
    under inputs u [L, n_u], the end state (q_L, p_L) and the loads' points [L, 3 n_loads] (m)
    at steps 1..L (where a manipulator pushes, and measures)."""

    def flow(x0, theta, u):
        n = system.n_dof
        params = params_of(theta)
        q, p, _ = constrained.rollout(system, params, x0[:n], x0[n:], u, h)
        points = jax.vmap(lambda x: constrained.load_points(system, params, x).ravel())(q[1:])
        return jnp.concatenate([q[-1], p[-1]]), points

    return flow


# The arrow LM's settings for shooting: no gradient test (eps_g = 0: the weighted gradient's
# scale is the caller's) and a relative cost decrease of 1e-12 (noise-free fits run to
# round-off: the cost falls by orders per iteration there). The geodesic acceleration stays
# on (LMSettings' default): it costs one residual (a multiple-shooting run) per trial, and on
# the hexagon's 1 s horizon it cut the iterations from 47 (+1 states-only) to 17 (+6) and the
# CPU time from 92 s to 69 s: steps of the segment starts follow the curved valley.
SETTINGS = lm.LMSettings(eps_f=1e-12, eps_g=0.0, eps_delta=1e-12)

# Factors on the continuity weights, one LM run each (a penalty continuation). With the
# final weights at once (σ_c far below the observations' σ), the linearized continuity rows
# of a trial step are off by O(δ²) times a large weight, the gain ratio is poor and LM crawls
# with large damping (measured on the test pendulum, w_c = 1e6: 50 iterations, or stuck, where
# w_c = 1e3 needs 6–12). Raising the weights 10× per stage starts every stage near its
# optimum: the four stages take 11–17 iterations in all there (the hexagon, 1 s: 47, most of
# them in the first stage; docs/variational.md).
CONTINUATION = (1e-3, 1e-2, 1e-1, 1.0)

# A returned point whose (nearly undamped) Gauss–Newton step would lower the weighted cost
# ‖r‖² by less than this is a minimum: with residuals in units of their σ, a decrease of 1e-8
# in χ² is a move of ~1e-4 of a standard deviation.
GN_DECREASE = 1e-8


@dataclass(eq=False)
class MultipleShooting:
    """The multiple-shooting least-squares problem in the form ``estimation.lm`` solves
    (``linearize``, ``cost``, ``residuals``, ``retract``, the box ``lower``/``upper`` on θ).

    ``x0`` [n_x]: segment 0's known start; ``u`` [S, L, n_u]: each segment's inputs;
    ``measured`` [S, L, n_y]: the observations at each segment's steps 1..L;
    ``obs_weight`` [n_y] (1/σ_y) and ``continuity_weight`` [n_c] (1/σ of the gap's rows).
    States X [S − 1, n_x]: the starts of segments 1..S−1 (ambient coordinates)."""

    flow: Flow
    space: StateSpace
    x0: jnp.ndarray
    u: jnp.ndarray
    measured: jnp.ndarray
    obs_weight: np.ndarray
    continuity_weight: np.ndarray
    lower: np.ndarray
    upper: np.ndarray

    def __post_init__(self) -> None:
        S = self.u.shape[0]
        if S < 2:
            raise ValueError(f"multiple shooting needs at least 2 segments, got {S}")
        if self.measured.shape[:2] != self.u.shape[:2]:
            raise ValueError(
                f"measured {self.measured.shape[:2]} and inputs {self.u.shape[:2]} "
                "must both be [segments, steps per segment]"
            )
        self.lower = np.asarray(self.lower, float)
        self.upper = np.asarray(self.upper, float)
        self._lin, self._res, self._retract, self._chain = _compiled(self.flow, self.space)
        self._data = (
            jnp.asarray(self.x0),
            jnp.asarray(self.u),
            jnp.asarray(self.measured),
            jnp.asarray(self.obs_weight, float),
            jnp.asarray(self.continuity_weight, float),
        )

    @property
    def segments(self) -> int:
        return self.u.shape[0]

    def linearize(self, X, theta) -> lm.Linearization:
        out = self._lin(jnp.asarray(X), jnp.asarray(theta, float), *self._data)
        return lm.Linearization(*(np.asarray(a) for a in out))

    def residuals(self, X, theta) -> tuple:
        """(dyn, obs, init) weighted residual blocks (the layout of the module docstring)."""
        out = self._res(jnp.asarray(X), jnp.asarray(theta, float), *self._data)
        return tuple(np.asarray(a) for a in out)

    def cost(self, X, theta) -> float:
        """‖r‖² (``estimation.lm``'s cost: no ½)."""
        return float(sum(np.sum(r**2) for r in self.residuals(X, theta)))

    def retract(self, X, dX):
        return self._retract(jnp.asarray(X), jnp.asarray(dX))

    def initial_states(self, theta) -> jnp.ndarray:
        """X [S − 1, n_x]: the segment starts of one run from x₀ under θ (every continuity gap
        zero: where single shooting starts)."""
        return self._chain(jnp.asarray(theta, float), self._data[0], self._data[1])

    def fit(
        self,
        theta0,
        settings: lm.LMSettings | None = None,
        X0=None,
        continuation: tuple[float, ...] = CONTINUATION,
    ) -> lm.LMResult:
        """``estimation.lm.levenberg_marquardt`` from θ₀ and X0 (default: ``initial_states``),
        once per factor of ``continuation`` on the continuity weights, each stage from the
        last one's solution; the last factor should be 1 (the problem's own weights). The
        result is the last stage's, with the iterations and cost history of all stages."""
        settings = settings or SETTINGS
        X = self.initial_states(theta0) if X0 is None else X0
        theta = np.asarray(theta0, float)
        iterations, history, warm = 0, [], 0
        for i, factor in enumerate(continuation):
            stage = replace(self, continuity_weight=factor * np.asarray(self.continuity_weight))
            res = lm.levenberg_marquardt(
                stage, X, theta, settings if i == 0 else replace(settings, warmup_iter=0)
            )
            X, theta = res.X, res.theta
            iterations, warm = iterations + res.iterations, warm + res.warmup_iterations
            history += res.history
        converged, reason = res.converged, res.reason
        if not converged and res.lin is not None:
            # A stop that is no convergence test (e.g. no decrease at maximal damping, which
            # noise-free data reach at round-off of the cost) is judged by what one more
            # Gauss–Newton step would still gain: below GN_DECREASE, a minimum.
            gain = lm.gauss_newton_test(stage, X, theta, res.lin).decrease
            converged = bool(gain <= GN_DECREASE)
            reason = f"{reason}; a Gauss–Newton step would gain {gain:.1e}"
        return replace(
            res, iterations=iterations, history=history, warmup_iterations=warm,
            converged=converged, reason=reason,
        )  # fmt: skip


_COMPILED: dict = {}


def _compiled(flow: Flow, space: StateSpace):
    """The jitted linearization, residuals, retraction and chained run of (flow, space): one
    compilation per pair, shared by every problem built on it (the data are arguments)."""
    key = (id(flow), id(space))  # the entry keeps both alive, so the ids stay theirs
    if key not in _COMPILED:
        _COMPILED[key] = (flow, space) + (
            jax.jit(lambda X, th, *data: _linearize(flow, space, X, th, *data)),
            jax.jit(lambda X, th, *data: _residuals(flow, space, X, th, *data)),
            jax.jit(jax.vmap(space.retract)),
            jax.jit(lambda th, x0, u: _chain(flow, space, th, x0, u)),
        )
    return _COMPILED[key][2:]


def _segment_derivatives(flow, space, x, theta, u):
    """(x_end, y) of one segment and their derivatives in (δ, θ): [n_x, d + p] and
    [L, n_y, d + p], by forward mode along the start's tangent basis and the parameters."""
    T = space.basis(x)
    d = T.shape[1]

    def f(z):
        out = flow(x + T @ z[:d], z[d:], u)
        return out, out

    z0 = jnp.concatenate([jnp.zeros(d, x.dtype), theta])
    (Jx, Jy), (x_end, y) = jax.jacfwd(f, has_aux=True)(z0)
    return x_end, y, Jx, Jy


def _linearize(flow, space, X, theta, x0, u, measured, wy, wc):
    S, L = u.shape[:2]
    d = space.dim
    starts = jnp.concatenate([x0[None], X])
    x_end, y, Jx, Jy = jax.vmap(
        lambda x, uj: _segment_derivatives(flow, space, x, theta, uj)
    )(starts, u)  # fmt: skip
    o = (wy * (y - measured)).reshape(S, -1)
    Jo = (wy[:, None] * Jy).reshape(S, L * y.shape[2], -1)  # [S, L n_y, d + p]
    c = wc * jax.vmap(space.gap)(X, x_end[:-1])
    G_next, G_end = jax.vmap(jax.jacfwd(space.gap, argnums=(0, 1)))(X, x_end[:-1])
    T_next = jax.vmap(space.basis)(X)
    dc_next = wc[:, None] * jnp.einsum("sca,sad->scd", G_next, T_next)  # [S−1, n_c, d]
    dc_prev = wc[:, None] * jnp.einsum("sca,saz->scz", G_end, Jx[:-1])  # [S−1, n_c, d + p]
    zero_o = jnp.zeros((Jo.shape[1], d), X.dtype)
    init_r = jnp.concatenate([o[0], c[0], o[1]])
    init_A = jnp.concatenate([zero_o, dc_next[0], Jo[1, :, :d]])
    init_C = jnp.concatenate([Jo[0, :, d:], dc_prev[0, :, d:], Jo[1, :, d:]])
    dyn_r = jnp.concatenate([c[1:], o[2:]], axis=1)
    zeros_dyn = jnp.broadcast_to(zero_o, (S - 2, *zero_o.shape))
    dyn_A = jnp.concatenate([dc_prev[1:, :, :d], zeros_dyn], axis=1)
    dyn_B = jnp.concatenate([dc_next[1:], Jo[2:, :, :d]], axis=1)
    dyn_C = jnp.concatenate([dc_prev[1:, :, d:], Jo[2:, :, d:]], axis=1)
    obs_r = jnp.zeros((S - 1, 0), X.dtype)
    obs_A = jnp.zeros((S - 1, 0, d), X.dtype)
    return dyn_r, dyn_A, dyn_B, dyn_C, obs_r, obs_A, init_r, init_A, init_C


def _residuals(flow, space, X, theta, x0, u, measured, wy, wc):
    """(dyn, obs, init) residual blocks in the layout of ``_linearize``."""
    S = u.shape[0]
    starts = jnp.concatenate([x0[None], X])
    x_end, y = jax.vmap(lambda x, uj: flow(x, theta, uj))(starts, u)
    o = (wy * (y - measured)).reshape(S, -1)
    c = wc * jax.vmap(space.gap)(X, x_end[:-1])
    dyn = jnp.concatenate([c[1:], o[2:]], axis=1)
    return dyn, jnp.zeros((S - 1, 0), X.dtype), jnp.concatenate([o[0], c[0], o[1]])


def _chain(flow, space, theta, x0, u):
    """The ends of segments 0..S−2 of one run from x₀, each put in the space's form (the
    retraction by δ = 0: on the manifold, canonical momentum)."""

    def one(x, uj):
        x_end, _ = flow(x, theta, uj)
        return x_end, x_end

    _, ends = jax.lax.scan(one, x0, u[:-1])
    return jax.vmap(space.retract)(ends, jnp.zeros((ends.shape[0], space.dim), ends.dtype))
