"""Box-constrained, on-manifold Levenberg–Marquardt for arrow-structured least squares
(Marklund et al., Algorithm 1, (3.18–3.22), Appendix C).

The unknowns are a trajectory of states x_0..x_{n−1} (each with a d-dimensional tangent
space) and a small parameter vector θ in a box. Every residual block touches at most two
consecutive states and θ, so the Gauss–Newton matrix JᵀWJ is an *arrow*: block-tridiagonal in
the states (n blocks of d×d) bordered by a dense p-column parameter block.

Structured solve (never a dense n×n matrix): the states are eliminated with a banded Cholesky
factorization of the block-tridiagonal part (LAPACK ``pbtrf/pbtrs`` through
``scipy.linalg.solveh_banded``; bandwidth 2d−1, so O(n d³) time and O(n d²) memory), applied to
the gradient and the p parameter columns at once. What remains is a dense p×p Schur complement;
the box on θ is imposed on that reduced quadratic *exactly* by a primal active-set method (the
states are unconstrained, so eliminating them first is exact). This is equivalent to the MLCP
of Appendix C.

Residuals come already weighted (W^{1/2} applied), linearized by the problem object.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

import numpy as np
from scipy.linalg import solveh_banded


class Linearization(NamedTuple):
    """Weighted residual blocks and their Jacobians (tangent coordinates).

    dyn_r[n−1, md] depends on x_k (dyn_A[n−1, md, d]), x_{k+1} (dyn_B) and θ (dyn_C[.., p]);
    obs_r[n, mo] on x_k (obs_A) only; init_r[m0] on x_0 (init_A[m0, d]) and θ (init_C[m0, p]).
    """

    dyn_r: np.ndarray
    dyn_A: np.ndarray
    dyn_B: np.ndarray
    dyn_C: np.ndarray
    obs_r: np.ndarray
    obs_A: np.ndarray
    init_r: np.ndarray
    init_A: np.ndarray
    init_C: np.ndarray


class ArrowProblem(Protocol):
    """What the solver needs from a problem: linearize, cost, retraction (⊞) and the box."""

    lower: np.ndarray  # box on θ (scaled units)
    upper: np.ndarray

    def linearize(self, X: Any, theta: np.ndarray) -> Linearization: ...

    def cost(self, X: Any, theta: np.ndarray) -> float: ...

    def retract(self, X: Any, dX: np.ndarray) -> Any: ...


@dataclass(frozen=True)
class LMSettings:
    """Algorithm 1 settings: gradient and step tolerances, iteration limit, α bounds."""

    eps_g: float = 1e-10
    eps_delta: float = 1e-9
    max_iter: int = 50
    tau: float = 1e-6  # initial damping α = τ · max diag(JᵀWJ) (Algorithm 1: 10⁻⁶)
    eps_f: float = 1e-8  # relative cost decrease (an addition to Algorithm 1: stops the
    # tail of iterations that only move states by round-off once the parameters have settled)
    alpha_max: float = 2.0**32
    # Change of coordinates θ = s ⊙ φ fixed at the start so that every parameter's diagonal
    # of JᵀWJ equals the largest one: the single damping αI of Algorithm 1 then does not
    # freeze parameters whose residual sensitivity is orders below the stiff constraint rows.
    scale_parameters: bool = True


@dataclass
class LMResult:
    X: Any
    theta: np.ndarray
    cost: float  # ‖Δz‖²_W at the solution
    iterations: int
    converged: bool
    reason: str
    history: list[float] = field(default_factory=list)
    lin: Linearization | None = None


# ---------------------------------------------------------------- normal equations (arrow)


class Normal(NamedTuple):
    """JᵀWJ as arrow blocks: D[n, d, d] diagonal, U[n−1, d, d] (block k, k+1), F[n, d, p],
    P[p, p]; gradient JᵀW Δz as gx[n, d], gp[p]."""

    D: np.ndarray
    U: np.ndarray
    F: np.ndarray
    P: np.ndarray
    gx: np.ndarray
    gp: np.ndarray


def normal_equations(lin: Linearization) -> Normal:
    """Assemble the arrow blocks of JᵀWJ and JᵀWΔz from the residual blocks (vectorized)."""
    A, B, C, r = lin.dyn_A, lin.dyn_B, lin.dyn_C, lin.dyn_r
    O, o = lin.obs_A, lin.obs_r
    n, _, d = O.shape
    D = np.einsum("kmi,kmj->kij", O, O)
    D[:-1] += np.einsum("kmi,kmj->kij", A, A)
    D[1:] += np.einsum("kmi,kmj->kij", B, B)
    D[0] += lin.init_A.T @ lin.init_A
    U = np.einsum("kmi,kmj->kij", A, B)
    F = np.zeros((n, d, C.shape[2]))
    F[:-1] += np.einsum("kmi,kmp->kip", A, C)
    F[1:] += np.einsum("kmi,kmp->kip", B, C)
    F[0] += lin.init_A.T @ lin.init_C
    P = np.einsum("kmp,kmq->pq", C, C) + lin.init_C.T @ lin.init_C
    gx = np.einsum("kmi,km->ki", O, o)
    gx[:-1] += np.einsum("kmi,km->ki", A, r)
    gx[1:] += np.einsum("kmi,km->ki", B, r)
    gx[0] += lin.init_A.T @ lin.init_r
    gp = np.einsum("kmp,km->p", C, r) + lin.init_C.T @ lin.init_r
    return Normal(D, U, F, P, gx, gp)


def _banded_upper(D: np.ndarray, U: np.ndarray, alpha: float) -> np.ndarray:
    """LAPACK upper banded storage (bandwidth 2d−1) of the block-tridiagonal state matrix."""
    n, d, _ = D.shape
    u = 2 * d - 1
    ab = np.zeros((u + 1, n * d))
    a, b = np.triu_indices(d)  # diagonal blocks: i = kd+a ≤ j = kd+b
    k = np.arange(n)[:, None]
    rows = np.broadcast_to(u + a - b, (n, len(a)))
    ab[rows.ravel(), (k * d + b).ravel()] = (D[:, a, b] + alpha * (a == b)).ravel()
    a, b = np.indices((d, d)).reshape(2, -1)  # upper blocks: i = kd+a < j = (k+1)d+b
    k = np.arange(n - 1)[:, None]
    rows = np.broadcast_to(u + a - b - d, (n - 1, len(a)))
    ab[rows.ravel(), ((k + 1) * d + b).ravel()] = U[:, a, b].ravel()
    return ab


def _box_qp(S: np.ndarray, s: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Exact minimizer of ½xᵀSx + sᵀx on lo ≤ x ≤ hi (S positive definite), by the primal
    active-set method (Nocedal & Wright, Alg. 16.3): finite, no tolerance on optimality."""
    p = len(s)
    x = np.clip(np.zeros(p), lo, hi)
    work = np.zeros(p, dtype=int)  # 0 free, −1 at lower, +1 at upper
    for _ in range(10 * p + 10):
        free = work == 0
        step = np.zeros(p)
        if free.any():
            grad = S @ x + s
            step[free] = np.linalg.solve(S[np.ix_(free, free)], -grad[free])
        if np.linalg.norm(step) <= 1e-14 * (1.0 + np.linalg.norm(x)):
            grad = S @ x + s
            lam = np.where(work == -1, grad, np.where(work == 1, -grad, np.inf))
            i = int(np.argmin(lam))
            if lam[i] >= 0.0:
                return x
            work[i] = 0
            continue
        with np.errstate(divide="ignore", invalid="ignore"):
            room = np.where(step < 0, (lo - x) / step, np.where(step > 0, (hi - x) / step, np.inf))
        room = np.where(free, np.maximum(room, 0.0), np.inf)
        i = int(np.argmin(room))
        t = min(1.0, room[i])
        x = x + t * step
        if t < 1.0:
            x[i] = lo[i] if step[i] < 0 else hi[i]
            work[i] = -1 if step[i] < 0 else 1
    return np.clip(x, lo, hi)


def solve_damped(
    ne: Normal, alpha: float, lo: np.ndarray, hi: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(δx[n, d], δθ[p]) minimizing the damped model (3.21) with lo ≤ δθ ≤ hi (C.1).

    Schur complement onto θ: T = D + αI (banded), S = P + αI − Fᵀ T⁻¹ F, reduced gradient
    gp − Fᵀ T⁻¹ gx; then δx = −T⁻¹ (gx + F δθ).
    """
    n, d, p = ne.F.shape
    ab = _banded_upper(ne.D, ne.U, alpha)
    rhs = np.concatenate([ne.gx.reshape(n * d, 1), ne.F.reshape(n * d, p)], axis=1)
    sol = solveh_banded(ab, rhs, lower=False, check_finite=False)
    Yg, YF = sol[:, 0], sol[:, 1:]
    Ff = ne.F.reshape(n * d, p)
    S = ne.P + alpha * np.eye(p) - Ff.T @ YF
    S = 0.5 * (S + S.T)
    s = ne.gp - Ff.T @ Yg
    dtheta = _box_qp(S, s, lo, hi) if p else np.zeros(0)
    dx = -(Yg + YF @ dtheta)
    return dx.reshape(n, d), dtheta


def model_decrease(lin: Linearization, dx: np.ndarray, dtheta: np.ndarray) -> float:
    """‖Δz‖² − ‖Δz + J δ‖², the decrease the linear model predicts (denominator of ρ)."""
    jd_dyn = (
        np.einsum("kmi,ki->km", lin.dyn_A, dx[:-1])
        + np.einsum("kmi,ki->km", lin.dyn_B, dx[1:])
        + lin.dyn_C @ dtheta
    )
    jd_obs = np.einsum("kmi,ki->km", lin.obs_A, dx)
    jd_init = lin.init_A @ dx[0] + lin.init_C @ dtheta
    return -float(
        np.sum(2 * lin.dyn_r * jd_dyn + jd_dyn**2)
        + np.sum(2 * lin.obs_r * jd_obs + jd_obs**2)
        + np.sum(2 * lin.init_r * jd_init + jd_init**2)
    )


# ---------------------------------------------------------------- Algorithm 1


def levenberg_marquardt(
    problem: ArrowProblem,
    X0: Any,
    theta0: np.ndarray,
    settings: LMSettings = LMSettings(),
    progress: Callable[[int, float, float, np.ndarray], None] | None = None,
) -> LMResult:
    """Algorithm 1 of Marklund et al. with on-manifold states and a box on θ.

    ρ is the usual gain ratio (actual over predicted decrease; Algorithm 1 prints the
    numerator with the opposite sign). ``progress(iteration, cost, alpha, theta)`` is called
    after every accepted step.
    """
    lo, hi = np.asarray(problem.lower, float), np.asarray(problem.upper, float)
    X, theta = X0, np.clip(np.asarray(theta0, float), lo, hi)
    lin = problem.linearize(X, theta)
    ne = normal_equations(lin)
    top = float(np.max(np.einsum("kii->ki", ne.D)))
    sc = np.ones(len(theta))
    if settings.scale_parameters and len(theta):
        sc = np.sqrt(top / np.maximum(np.diag(ne.P), 1e-12 * top))
    scaled = _Scaled(problem, sc)
    lo, hi, theta = lo / sc, hi / sc, theta / sc
    lin = _scale_lin(lin, sc)
    ne = normal_equations(lin)
    problem = scaled
    cost = problem.cost(X, theta)
    diag = np.concatenate([np.einsum("kii->ki", ne.D).ravel(), np.diag(ne.P)])
    alpha = float(np.max(diag)) * settings.tau
    history = [cost]
    reason, converged = "iteration limit", False
    for it in range(1, settings.max_iter + 1):
        nu, rho = 2.0, 0.0
        while True:
            dx, dth = solve_damped(ne, alpha, lo - theta, hi - theta)
            theta_p = np.clip(theta + dth, lo, hi)
            X_p = problem.retract(X, dx)
            cost_p = problem.cost(X_p, theta_p)
            pred = model_decrease(lin, dx, dth)
            rho = (cost - cost_p) / pred if pred > 0 else -1.0
            if not np.isfinite(cost_p):
                rho = -1.0
            if rho > 0 or alpha >= settings.alpha_max:
                break
            nu = min(2 * nu, settings.alpha_max)
            alpha = min(nu * alpha, settings.alpha_max)
        step_norm = float(np.sqrt(np.sum(dx**2) + np.sum(dth**2)))
        grad_norm = float(
            np.sqrt(np.sum(ne.gx**2) + np.sum(ne.gp[(lo < theta) & (theta < hi)] ** 2))
        )
        if rho <= 0:
            reason, converged = "no decrease at maximal damping", grad_norm <= settings.eps_g
            it -= 1
            break
        small = cost - cost_p <= settings.eps_f * cost
        X, theta, cost = X_p, theta_p, cost_p
        history.append(cost)
        if progress is not None:
            progress(it, cost, alpha, theta * sc)
        lin = problem.linearize(X, theta)
        ne = normal_equations(lin)
        alpha *= max(1.0 / 3.0, 1.0 - (2.0 * rho - 1.0) ** 3)
        if grad_norm <= settings.eps_g:
            reason, converged = "gradient below eps_g", True
            break
        if small:
            reason, converged = "relative cost decrease below eps_f", True
            break
        if step_norm <= settings.eps_delta:
            reason, converged = "step below eps_delta", True
            break
    lin = _scale_lin(lin, 1.0 / sc)
    return LMResult(X, theta * sc, cost, it, converged, reason, history, lin)


def _scale_lin(lin: Linearization, sc: np.ndarray) -> Linearization:
    return lin._replace(dyn_C=lin.dyn_C * sc, init_C=lin.init_C * sc)


class _Scaled:
    """The problem in the coordinates φ = θ / s (see LMSettings.scale_parameters)."""

    def __init__(self, problem, sc):
        self.problem, self.sc = problem, sc

    def linearize(self, X, phi):
        return _scale_lin(self.problem.linearize(X, phi * self.sc), self.sc)

    def cost(self, X, phi):
        return self.problem.cost(X, phi * self.sc)

    def retract(self, X, dX):
        return self.problem.retract(X, dX)
