"""Box-constrained, on-manifold Levenberg–Marquardt for arrow-structured least squares
(Marklund et al., Algorithm 1, (3.18–3.22), Appendix C).

The unknowns are a trajectory of states x_0..x_{n−1} (each with a d-dimensional tangent
space) and a small parameter vector θ in a box. Every residual block touches at most two
consecutive states and θ, so the Gauss–Newton matrix JᵀWJ is an *arrow*: block-tridiagonal in
the states (n blocks of d×d) bordered by a dense p-column parameter block.

Structured solve (never a dense n×n matrix): the states are eliminated with a banded Cholesky
factorization of the block-tridiagonal part (LAPACK ``pbtrf`` through
``scipy.linalg.cholesky_banded``, triangular sweeps by ``tbtrs``; bandwidth 2d−1, so O(n d³)
time and O(n d²) memory), applied to the gradient and the p parameter columns. What remains is
a dense p×p Schur complement; the box on θ is imposed on that reduced quadratic *exactly* by a
primal active-set method (the states are unconstrained, so eliminating them first is exact).
This is equivalent to the MLCP of Appendix C. Steps carry a geodesic acceleration (see
``LMSettings.geodesic_ratio``).

Residuals come already weighted (W^{1/2} applied), linearized by the problem object.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple, Protocol

import jax
import jax.numpy as jnp
import numpy as np
from scipy.linalg import cholesky_banded
from scipy.linalg.lapack import dtbtrs

import physid.dynamics  # noqa: F401  (float64)
from physid.estimation.consistency import InertiaLMI, constrained_step, nearest_consistent


class Linearization(NamedTuple):
    """Weighted residual blocks and their Jacobians (tangent coordinates).

    dyn_r[n−1, md] depends on x_k (dyn_A[n−1, md, d]), x_{k+1} (dyn_B) and θ (dyn_C[.., p]);
    obs_r[n, mo] on x_k (obs_A) only; init_r[m0] on x_0 (init_A[m0, d]) and θ (init_C[m0, p]).
    ``obs_present[n, mo]`` (optional) marks observation rows that carry a sample (weight > 0);
    the covariance uses it to average each row's sample variance over its own samples.
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
    obs_present: np.ndarray | None = None


class ArrowProblem(Protocol):
    """What the solver needs from a problem: linearize, cost, residuals, retraction (⊞), box.
    Optionally ``linearize_states(X, θ)``: the linearization without the θ columns, for the
    states-only warm-up (otherwise they are computed and dropped)."""

    lower: np.ndarray  # box on θ (scaled units)
    upper: np.ndarray

    def linearize(self, X: Any, theta: np.ndarray) -> Linearization: ...

    def cost(self, X: Any, theta: np.ndarray) -> float: ...

    def retract(self, X: Any, dX: np.ndarray) -> Any: ...

    def residuals(self, X: Any, theta: np.ndarray) -> tuple:
        """Weighted residual blocks (dyn, obs, init); used by the geodesic acceleration."""
        ...


@dataclass(frozen=True)
class LMSettings:
    """Algorithm 1 settings: gradient and step tolerances, iteration limit, α bounds."""

    eps_g: float = 1e-10
    eps_delta: float = 1e-9
    max_iter: int = 50
    tau: float = 1e-6  # initial damping α = τ · max diag(JᵀWJ) (Algorithm 1: 10⁻⁶)
    eps_f: float = 1e-6  # relative cost decrease (an addition to Algorithm 1: stops the
    # tail of iterations that only move states by round-off once the parameters have settled)
    alpha_max: float = 2.0**32
    alpha_shrink: float = 1.0 / 3.0  # smallest factor α is multiplied by after a good step
    # Change of coordinates θ = s ⊙ φ fixed at the start so that every parameter's diagonal
    # of JᵀWJ equals the largest one: the single damping αI of Algorithm 1 then does not
    # freeze parameters whose residual sensitivity is orders below the stiff constraint rows.
    scale_parameters: bool = True
    # The same for the state tangent components (one scale per component, shared by all
    # steps, from the median diagonal): the translational rows of a hinge are ~10⁸ times
    # stiffer than its free rotation, so with one α the free directions — the ones the
    # observations move — started damped 50× more than Gauss–Newton and LM spent ~20
    # iterations letting α fall (pendulum, 5 s). Algorithm 1 is unchanged in these
    # coordinates; only αI acts like Marquardt's α·diag(JᵀWJ) with the diagonal fixed at x_0.
    scale_states: bool = True
    # States-only warm-up (θ held at θ_0) before the joint iterations, stopped at a relative
    # cost decrease below warmup_eps_f. The Section 4.4 states lie on the constraint manifold
    # with velocities tangent to it, so the hinge carries no force at all; the first joint
    # Gauss–Newton step then explains the missing constraint impulse with the parameters
    # (pendulum, 5 s: J 0.005 → 1e-5, the lower bound, then ~15 iterations to come back).
    warmup_iter: int = 20
    warmup_eps_f: float = 1e-2
    # Geodesic acceleration (Transtrum & Sethna 2012): add ½a, a = −(JᵀJ + αI)⁻¹ Jᵀ r_vv with
    # r_vv the residuals' second derivative along the step (one extra residual evaluation and
    # one extra banded solve per trial), and refuse steps whose 2‖a‖/‖δ‖ exceeds
    # geodesic_ratio. None turns it off (plain Algorithm 1).
    geodesic_ratio: float | None = 0.75


@dataclass
class LMResult:
    """``reason``: the stop rule of Algorithm 1 that ended the loop, as text; ``converged``:
    whether that rule is a convergence test (``result`` the enumerated outcome,
    ``estimation.estimate.Result``). :func:`gauss_newton_test` checks the returned point
    independently of how the loop ended."""

    X: Any
    theta: np.ndarray
    cost: float  # ‖Δz‖²_W at the solution
    iterations: int
    converged: bool
    reason: str
    history: list[float] = field(default_factory=list)
    lin: Linearization | None = None
    warmup_iterations: int = 0  # states-only iterations before the joint ones


# ---------------------------------------------------------------- normal equations (arrow)


class Normal(NamedTuple):
    """JᵀWJ as arrow blocks: D[n, d, d] diagonal, U[n−1, d, d] (block k, k+1), F[n, d, p],
    P[p, p]; gradient JᵀW Δz as gx[n, d], gp[p]; ``band``: (D, U) in LAPACK upper banded
    storage (:func:`banded_upper`) where it was asked for, else None."""

    D: np.ndarray
    U: np.ndarray
    F: np.ndarray
    P: np.ndarray
    gx: np.ndarray
    gp: np.ndarray
    band: np.ndarray | None


def _band(D, U):
    """LAPACK upper banded storage of the block-tridiagonal matrix (D, U), transposed: an
    [n d, 2d] array whose C order is the Fortran order of LAPACK's [2d, n d] (:func:`banded_upper`
    takes the transpose view), so neither XLA nor f2py has to transpose 2d·n·d numbers
    (3.5 instead of 10.9 ms at n = 2001, d = 24, and no copy inside ``cholesky_banded``).

    With u = 2d − 1, LAPACK's entry (t, j) holds A[j + t − u, j]. Column b of block k holds, from
    the top, d − 1 − b zeros, column b of U_{k−1} and the upper part of column b of D_k: with
    C_k = [0_{d−1}; U_{k−1}; D_k] ([3d − 1, d]), band[kd + b, t] = C_k[t + b, b] — row b of C_kᵀ
    from entry b on, done by padding each row to 4d entries and reading the flat layout in rows
    of 4d + 1 (a shear by reshape; no gather). Since t + b ≤ 3d − 2 reads at most row b of D_k,
    its strictly lower part is never read."""
    n, d, _ = D.shape
    up = jnp.concatenate([jnp.zeros((1, d, d)), U]).transpose(0, 2, 1)
    rows = [jnp.zeros((n, d, d - 1)), up, D.transpose(0, 2, 1), jnp.zeros((n, d, d + 1))]
    flat = jnp.pad(jnp.concatenate(rows, axis=2).reshape(n, 4 * d * d), ((0, 0), (0, d)))
    return flat.reshape(n, d, 4 * d + 1)[:, :, : 2 * d].reshape(n * d, 2 * d)


@functools.partial(jax.jit, static_argnames="with_band")
def _normal_jax(A, B, C, r, O, o, iA, iC, ir, sx, with_band):
    # Batched small matmuls in XLA: ~10× faster than NumPy's einsum on [n, 12, 12] blocks.
    D = jnp.einsum("kmi,kmj->kij", O, O)
    D = D.at[:-1].add(jnp.einsum("kmi,kmj->kij", A, A))
    D = D.at[1:].add(jnp.einsum("kmi,kmj->kij", B, B))
    D = D.at[0].add(iA.T @ iA)
    U = jnp.einsum("kmi,kmj->kij", A, B)
    F = jnp.zeros((O.shape[0], O.shape[2], C.shape[2]))
    F = F.at[:-1].add(jnp.einsum("kmi,kmp->kip", A, C))
    F = F.at[1:].add(jnp.einsum("kmi,kmp->kip", B, C))
    F = F.at[0].add(iA.T @ iC)
    P = jnp.einsum("kmp,kmq->pq", C, C) + iC.T @ iC
    gx, gp = _transpose_product(A, B, C, O, iA, iC, r, o, ir)
    D, U, F, gx = _in_state_coordinates(D, U, F, gx, sx)
    return D, U, F, P, gx, gp, _band(D, U) if with_band else None


def _in_state_coordinates(D, U, F, gx, sx):
    """(D, U, F, gx) in the coordinates ξ = x / sx of the state scale (LMSettings.scale_states);
    NumPy or JAX arrays."""
    ss = sx[:, None] * sx[None, :]
    return D * ss, U * ss, F * sx[:, None], gx * sx


def _transpose_product(A, B, C, O, iA, iC, r, o, ir):
    """Jᵀ z of residual-shaped blocks z = (r dyn, o obs, ir init), as (gx[n, d], gp[p])."""
    gx = jnp.einsum("kmi,km->ki", O, o)
    gx = gx.at[:-1].add(jnp.einsum("kmi,km->ki", A, r))
    gx = gx.at[1:].add(jnp.einsum("kmi,km->ki", B, r))
    gx = gx.at[0].add(iA.T @ ir)
    return gx, jnp.einsum("kmp,km->p", C, r) + iC.T @ ir


def _jacobian_product(A, B, C, O, iA, iC, dx, dtheta):
    """J δ as residual-shaped blocks (dyn[n−1, md], obs[n, mo], init[m0])."""
    jd_dyn = jnp.einsum("kmi,ki->km", A, dx[:-1]) + jnp.einsum("kmi,ki->km", B, dx[1:]) + C @ dtheta
    return jd_dyn, jnp.einsum("kmi,ki->km", O, dx), iA @ dx[0] + iC @ dtheta


_transpose_product_jax = jax.jit(_transpose_product)
_jacobian_product_jax = jax.jit(_jacobian_product)
_band_jax = jax.jit(_band)


def normal_equations(
    lin: Linearization, sx: np.ndarray | None = None, band: bool = False
) -> Normal:
    """Assemble the arrow blocks of JᵀWJ and JᵀWΔz from the residual blocks (vectorized), in
    the state coordinates ξ = x / ``sx`` (per tangent component; None: unscaled). ``band``:
    also write the banded storage, in the same XLA call, for a caller that factors it (LM,
    once per linearization for all its damping trials)."""
    d = lin.obs_A.shape[2]
    sx = np.ones(d) if sx is None else sx
    out = _normal_jax(
        lin.dyn_A, lin.dyn_B, lin.dyn_C, lin.dyn_r, lin.obs_A, lin.obs_r,
        lin.init_A, lin.init_C, lin.init_r, jnp.asarray(sx, float), band,
    )  # fmt: skip
    *blocks, band_t = (None if a is None else np.asarray(a) for a in out)
    return Normal(*blocks, None if band_t is None else band_t.T)


def banded_upper(D: np.ndarray, U: np.ndarray) -> np.ndarray:
    """LAPACK upper banded storage [2d, n d] (bandwidth 2d − 1, last row the diagonal) of the
    block-tridiagonal matrix with diagonal blocks D[n, d, d] and super-diagonal blocks
    U[n−1, d, d], in Fortran order as LAPACK reads it (a writable copy).
    ``normal_equations(..., band=True)`` returns it as ``Normal.band``."""
    return np.array(_band_jax(jnp.asarray(D), jnp.asarray(U))).T


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


@functools.cache
def _blas_thread_controls() -> tuple:
    """(get, set) thread-count functions of every OpenBLAS loaded in this process (NumPy's
    and SciPy's bundle their own), found through /proc/self/maps; empty where unavailable."""
    import ctypes

    try:
        with open("/proc/self/maps") as fh:
            paths = {ln.split()[-1] for ln in fh if "openblas" in ln.lower() and "/" in ln}
    except OSError:
        return ()
    found = []
    for path in sorted(paths):
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for name in ("scipy_openblas_{}_num_threads64_", "scipy_openblas_{}_num_threads",
                     "openblas_{}_num_threads64_", "openblas_{}_num_threads"):  # fmt: skip
            get = getattr(lib, name.format("get"), None)
            put = getattr(lib, name.format("set"), None)
            if get is not None and put is not None:
                found.append((get, put))
                break
    return tuple(found)


@contextlib.contextmanager
def single_threaded_blas():
    """Run LAPACK on one thread. The banded factorization (pbtrf, bandwidth 2d−1 ≤ 47) gains
    nothing from threads, and OpenBLAS's thread hand-offs on a busy 2-core machine made
    ``solveh_banded`` of n = 5000 pendulum steps take 4.5 s of CPU instead of 0.02 s."""
    controls = _blas_thread_controls()
    old = [get() for get, _ in controls]
    for _, put in controls:
        put(1)
    try:
        yield
    finally:
        for (_, put), n in zip(controls, old, strict=True):
            put(n)


class DampedSystem(NamedTuple):
    """JᵀWJ + αI factored for repeated right-hand sides: the banded Cholesky factor R of the
    state part T = D + αI = RᵀR, W = R⁻ᵀF and the p×p Schur complement
    S = P + αI − Fᵀ T⁻¹ F = P + αI − WᵀW."""

    chol: np.ndarray
    W: np.ndarray  # [n d, p]
    S: np.ndarray


def _triangular_banded(chol: np.ndarray, b: np.ndarray, transpose: bool) -> np.ndarray:
    """R⁻ᵀ b (``transpose``) or R⁻¹ b for the banded upper Cholesky factor R (LAPACK tbtrs).
    Forming Fᵀ T⁻¹ F as WᵀW with W = R⁻ᵀF takes one triangular sweep over the p columns
    instead of pbtrs' two (13.6 vs 23.6 ms for the 2001-step Furuta, p = 12)."""
    x, info = dtbtrs(chol, b, uplo="U", trans="T" if transpose else "N")
    if info != 0:
        raise np.linalg.LinAlgError(f"tbtrs: singular banded Cholesky factor (info {info})")
    return x


def factor_damped(ne: Normal, alpha: float) -> DampedSystem:
    """Factor T = D + αI (LAPACK pbtrf, bandwidth 2d − 1) and form the Schur complement."""
    n, d, p = ne.F.shape
    # A writable copy in Fortran order: pbtrf factors it in place, without a copy of its own.
    ab = banded_upper(ne.D, ne.U) if ne.band is None else np.array(ne.band, order="F")
    ab[-1] += alpha
    F = ne.F.reshape(n * d, p)
    with single_threaded_blas():
        chol = cholesky_banded(ab, lower=False, overwrite_ab=True, check_finite=False)
        W = _triangular_banded(chol, F, transpose=True) if p else F
    S = ne.P + alpha * np.eye(p) - W.T @ W
    return DampedSystem(chol, W, 0.5 * (S + S.T))


def solve_factored(
    sys: DampedSystem,
    gx: np.ndarray,
    gp: np.ndarray,
    lo: np.ndarray,
    hi: np.ndarray,
    lmi: InertiaLMI | None = None,
    theta: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(δx[n, d], δθ[p]) minimizing ½δᵀ(JᵀWJ + αI)δ + gᵀδ with lo ≤ δθ ≤ hi (C.1) and, with
    ``lmi``, physically consistent bodies at θ + δθ: δθ from the QP on the Schur complement,
    then δx = −T⁻¹ (gx + F δθ) = −R⁻¹ (R⁻ᵀgx + W δθ). The box QP is solved first; cvxpy only
    when its step leaves the consistent set (the states are unconstrained, so this is still
    exact)."""
    n, d = gx.shape
    with single_threaded_blas():
        y = _triangular_banded(sys.chol, gx.reshape(n * d), transpose=True)
    s = gp - sys.W.T @ y
    dtheta = _box_qp(sys.S, s, lo, hi) if len(gp) else np.zeros(0)
    # 1e-12: a θ left exactly on a face by the last step reads −1e-17 from round-off.
    if lmi is not None and not lmi.feasible(theta + dtheta, 1e-12):
        try:
            dtheta = constrained_step(sys.S, s, lo, hi, lmi, theta)
        except RuntimeError:
            # The conic solver failed (numerically): this trial moves the states only, so θ
            # stays consistent and the run goes on rather than ending in an exception.
            dtheta = np.zeros_like(dtheta)
    with single_threaded_blas():
        dx = -_triangular_banded(sys.chol, y + sys.W @ dtheta, transpose=False)
    return dx.reshape(n, d), dtheta


def solve_damped(
    ne: Normal, alpha: float, lo: np.ndarray, hi: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(δx[n, d], δθ[p]) minimizing the damped model (3.21) with lo ≤ δθ ≤ hi (C.1)."""
    return solve_factored(factor_damped(ne, alpha), ne.gx, ne.gp, lo, hi)


@jax.jit
def _model_decrease_jax(A, B, C, r, O, o, iA, iC, ir, dx, dtheta):
    jd_dyn, jd_obs, jd_init = _jacobian_product(A, B, C, O, iA, iC, dx, dtheta)
    # ‖Δz‖² − ‖Δz + Jδ‖² = −Σ (2 Δz·Jδ + (Jδ)²), summed without forming either norm.
    return -(
        jnp.sum(2 * r * jd_dyn + jd_dyn**2)
        + jnp.sum(2 * o * jd_obs + jd_obs**2)
        + jnp.sum(2 * ir * jd_init + jd_init**2)
    )


def model_decrease(lin: Linearization, dx: np.ndarray, dtheta: np.ndarray) -> float:
    """‖Δz‖² − ‖Δz + J δ‖², the decrease the linear model predicts (denominator of ρ)."""
    return float(
        _model_decrease_jax(
            lin.dyn_A,
            lin.dyn_B,
            lin.dyn_C,
            lin.dyn_r,
            lin.obs_A,
            lin.obs_r,
            lin.init_A,
            lin.init_C,
            lin.init_r,
            jnp.asarray(dx),
            jnp.asarray(dtheta),
        )  # fmt: skip
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

    OpenBLAS runs on one thread throughout, not only in the banded factorization: its threads
    gain nothing on the n d × p products of the Schur complement (p ≤ ~12) and their
    hand-offs cost the 13-parameter Furuta 7.2 s instead of 6.0 s on the idle 2-core machine.
    """
    with single_threaded_blas():
        return _levenberg_marquardt(problem, X0, theta0, settings, progress)


def fit_states(problem: ArrowProblem, X0: Any, theta: np.ndarray, settings: LMSettings) -> LMResult:
    """Algorithm 1 on the states alone, θ held (the states-only warm-up as a run of its own):
    the states of a record under parameters fitted elsewhere. It uses the problem's own
    compiled linearization (``linearize_states``), so a problem of the same structure and
    length as a fit needs no new compilation. The result's θ is ``theta``, its ``lin`` None."""
    theta = np.asarray(theta, float)
    with single_threaded_blas():
        res = _levenberg_marquardt(
            _StatesOnly(problem, theta), X0, np.zeros(0), replace(settings, warmup_iter=0),
            None, final_lin=False,
        )  # fmt: skip
    return replace(res, theta=theta)


def _levenberg_marquardt(
    problem, X0, theta0, settings, progress, final_lin: bool = True
) -> LMResult:
    """Algorithm 1 (see ``levenberg_marquardt``). ``final_lin=False``: the result carries no
    linearization at the solution (the warm-up's caller linearizes with θ anyway), which
    saves one linearization when the run stops after an accepted step."""
    lo, hi = np.asarray(problem.lower, float), np.asarray(problem.upper, float)
    lo0, hi0 = lo, hi
    X, theta = X0, np.clip(np.asarray(theta0, float), lo, hi)
    lmi = getattr(problem, "consistency", None)
    if lmi is not None and not lmi.feasible(theta):
        theta = nearest_consistent(theta, lo, hi, lmi)
    warm = 0
    if settings.warmup_iter > 0 and len(theta):
        held = theta
        pre = _levenberg_marquardt(
            _StatesOnly(problem, held),
            X,
            np.zeros(0),
            replace(
                settings, warmup_iter=0, max_iter=settings.warmup_iter, eps_f=settings.warmup_eps_f
            ),
            None if progress is None else (lambda i, c, a, _: progress(i, c, a, held)),
            final_lin=False,
        )
        X, warm = pre.X, pre.iterations
    lin = problem.linearize(X, theta)
    ne = normal_equations(lin)
    sx, target = _state_scale(ne, settings.scale_states)
    sc = np.ones(len(theta))
    if settings.scale_parameters and len(theta):
        sc = np.sqrt(target / np.maximum(np.diag(ne.P), 1e-12 * target))
    scaled = _Scaled(problem, sc)
    lmi = lmi.in_coordinates(sc) if lmi is not None else None
    lo, hi, theta = lo / sc, hi / sc, theta / sc
    lin = _scale_lin(lin, sc)
    ne = _rescaled(ne, sx, sc)
    problem = scaled
    cost = problem.cost(X, theta)
    diag = np.concatenate([np.einsum("kii->ki", ne.D).ravel(), np.diag(ne.P)])
    alpha = float(np.max(diag)) * settings.tau
    history = [cost]
    reason, converged, stale = "iteration limit", False, False
    it = 0  # max_iter = 0: the start point, evaluated and linearized (e.g. for its covariance)
    for it in range(1, settings.max_iter + 1):
        nu, rho, raised = 2.0, 0.0, False
        while True:
            damped = factor_damped(ne, alpha)
            dxi, dth = solve_factored(damped, ne.gx, ne.gp, lo - theta, hi - theta, lmi, theta)
            # ρ compares with the first-order model of the velocity step; ½a is second order.
            pred = model_decrease(lin, dxi * sx, dth)
            if settings.geodesic_ratio is not None:
                step = (dxi * sx, dth)
                acc = _acceleration(problem, X, theta, lin, damped, step, sx, lo, hi, lmi)
                ratio = 2 * np.sqrt(
                    (np.sum(acc[0] ** 2) + np.sum(acc[1] ** 2))
                    / max(np.sum(dxi**2) + np.sum(dth**2), 1e-300)
                )
                if ratio > settings.geodesic_ratio and alpha < settings.alpha_max:
                    nu = min(2 * nu, settings.alpha_max)
                    alpha, raised = min(nu * alpha, settings.alpha_max), True
                    continue
                dxi, dth = dxi + 0.5 * acc[0], dth + 0.5 * acc[1]
            dx = dxi * sx
            theta_p = np.clip(theta + dth, lo, hi)
            X_p = problem.retract(X, dx)
            cost_p = problem.cost(X_p, theta_p)
            rho = (cost - cost_p) / pred if pred > 0 else -1.0
            if not np.isfinite(cost_p):
                rho = -1.0
            if rho > 0 or alpha >= settings.alpha_max or pred < 1e-2 * settings.eps_f * cost:
                break
            nu = min(2 * nu, settings.alpha_max)
            alpha, raised = min(nu * alpha, settings.alpha_max), True
        step_norm = float(np.sqrt(np.sum(dxi**2) + np.sum(dth**2)))
        grad_norm = float(
            np.sqrt(np.sum(ne.gx**2) + np.sum(ne.gp[(lo < theta) & (theta < hi)] ** 2))
        )
        if rho <= 0 and pred < 1e-2 * settings.eps_f * cost and not raised:
            # The model itself promises (almost) nothing: at the noise floor of the cost.
            reason, converged = "predicted decrease below eps_f", True
            it -= 1
            break
        if rho <= 0 and pred < 1e-2 * settings.eps_f * cost:
            # The promise fell that low only because failed trials raised α: a stall, not a
            # minimum (e.g. κ = 1e6 straight from filtered data, the cost 10⁶ times the
            # noise floor).
            reason = "no decrease: damped steps promise less than eps_f"
            converged = grad_norm <= settings.eps_g
            it -= 1
            break
        if rho <= 0:
            reason, converged = "no decrease at maximal damping", grad_norm <= settings.eps_g
            it -= 1
            break
        small = cost - cost_p <= settings.eps_f * cost
        X, theta, cost = X_p, theta_p, cost_p
        history.append(cost)
        if progress is not None:
            progress(it, cost, alpha, theta * sc)
        alpha *= max(settings.alpha_shrink, 1.0 - (2.0 * rho - 1.0) ** 3)
        stale = True  # lin is still the one at the previous point
        if grad_norm <= settings.eps_g:
            reason, converged = "gradient below eps_g", True
            break
        if small:
            reason, converged = "relative cost decrease below eps_f", True
            break
        if step_norm <= settings.eps_delta:
            reason, converged = "step below eps_delta", True
            break
        lin = problem.linearize(X, theta)
        ne = normal_equations(lin, sx, band=True)
        stale = False
    if not final_lin:
        lin = None
    elif stale:
        lin = _scale_lin(problem.linearize(X, theta), 1.0 / sc)
    else:
        lin = _scale_lin(lin, 1.0 / sc)
    # A bound reached in the scaled coordinates is the bound itself, not its round-off image.
    theta = np.where(theta <= lo, lo0, np.where(theta >= hi, hi0, theta * sc))
    return LMResult(X, theta, cost, it, converged, reason, history, lin, warm)


class GaussNewtonTest(NamedTuple):
    """The (nearly) undamped Gauss–Newton step at a returned point: ``decrease`` the cost
    decrease its linear model predicts (‖Δz‖² − ‖Δz + Jδ‖², in cost units), ``dtheta`` its
    parameter part (θ units, within the box and, with an LMI, consistent)."""

    decrease: float
    dtheta: np.ndarray
    dX: np.ndarray | None = None  # its state part [n, d] (tangent, for ``problem.retract``)


# α of the Gauss–Newton test, in the solver's scaled coordinates (median state diagonal and
# every parameter diagonal of JᵀWJ equal to 1): small enough that the step is Gauss–Newton's
# in every direction the data determine, large enough that a singular direction (a parameter
# the data do not excite) moves by a bounded amount instead of an infinite one.
GN_TEST_ALPHA = 1e-8


def gauss_newton_test(problem, X, theta: np.ndarray, lin: Linearization) -> GaussNewtonTest:
    """What one more (nearly) undamped Gauss–Newton step would still gain at (X, θ), with
    ``lin`` the linearization there (``LMResult.lin``, in θ units).

    This is the convergence test of a returned point, whatever rule ended the loop: a stop
    on the iteration limit, or on a cost decrease below ε_f reached with large damping,
    leaves a point where Gauss–Newton still promises a decrease; at a minimum it promises
    (almost) nothing. The step obeys the box (and the physical-consistency LMI where the
    problem has one), so a minimum on a bound passes."""
    theta = np.asarray(theta, float)
    lo, hi = np.asarray(problem.lower, float), np.asarray(problem.upper, float)
    ne = normal_equations(lin)
    sx, target = _state_scale(ne, True)
    sc = np.ones(len(theta))
    if len(theta):
        sc = np.sqrt(target / np.maximum(np.diag(ne.P), 1e-12 * target))
    scaled = _rescaled(ne, sx, sc)
    lmi = getattr(problem, "consistency", None)
    lmi = lmi.in_coordinates(sc) if lmi is not None else None
    phi = theta / sc
    with single_threaded_blas():
        damped = factor_damped(scaled, GN_TEST_ALPHA)
        dxi, dphi = solve_factored(
            damped, scaled.gx, scaled.gp, lo / sc - phi, hi / sc - phi, lmi, phi
        )
    decrease = model_decrease(_scale_lin(lin, sc), dxi * sx, dphi)
    return GaussNewtonTest(float(decrease), dphi * sc, dxi * sx)


def _acceleration(problem, X, theta, lin, damped, step, sx, lo, hi, lmi=None, t=0.1):
    """(a_ξ, a_θ): geodesic acceleration of the step (dx, dth) in the solver's scaled
    coordinates, a = −(JᵀJ + αI)⁻¹ Jᵀ r_vv with the same factorization as the step; r_vv is
    the residuals' second directional derivative by a forward difference at t along the step
    (Transtrum & Sethna, 2012). Its θ part is constrained so that θ + δθ + a_θ/2 stays in the
    box and, with ``lmi``, physically consistent."""
    dx, dth = step
    r0 = (lin.dyn_r, lin.obs_r, lin.init_r)  # the residuals at (X, θ), already evaluated
    r1 = problem.residuals(problem.retract(X, t * dx), np.clip(theta + t * dth, lo, hi))
    blocks = (lin.dyn_A, lin.dyn_B, lin.dyn_C, lin.obs_A, lin.init_A, lin.init_C)
    jd = _jacobian_product_jax(*blocks, jnp.asarray(dx), jnp.asarray(dth))
    rvv = [2.0 / t * ((b - a) / t - np.asarray(j)) for a, b, j in zip(r0, r1, jd, strict=True)]
    gx, gp = _transpose_product_jax(*blocks, *(jnp.asarray(v) for v in rvv))
    gx = np.asarray(gx) * sx
    # A parameter the velocity step put on its bound stays there (no round-off image of it).
    v = theta + dth
    tol = 1e-12 * np.maximum(1.0, np.abs(v))
    on_bound = (v <= lo + tol) | (v >= hi - tol)
    a_lo = np.where(on_bound, 0.0, 2 * (lo - v))
    a_hi = np.where(on_bound, 0.0, 2 * (hi - v))
    # P(v + a/2) ⪰ 0 is the LMI in the coordinates a/2, at the point 2v.
    half = lmi.in_coordinates(np.full(len(v), 0.5)) if lmi is not None else None
    return solve_factored(damped, gx, np.asarray(gp), a_lo, a_hi, half, 2 * v)


def _state_scale(ne: Normal, on: bool) -> tuple[np.ndarray, float]:
    """Per-component state scale s (δx = s ⊙ δξ) making the median diagonal of JᵀWJ one, and
    the diagonal the parameters are scaled to (1 then; the largest state diagonal if off)."""
    d = ne.D.shape[1]
    diag = np.einsum("kii->ki", ne.D)
    top = float(np.max(diag))
    if not on:
        return np.ones(d), top
    med = np.median(diag, axis=0)
    return 1.0 / np.sqrt(np.maximum(med, 1e-12 * max(float(np.max(med)), 1e-300))), 1.0


def _rescaled(ne: Normal, sx: np.ndarray, sc: np.ndarray) -> Normal:
    """The normal equations of unscaled blocks (``normal_equations(lin)``) in the state
    coordinates ξ = x / ``sx`` and parameter coordinates φ = θ / ``sc``, with their band: the
    same as ``normal_equations(_scale_lin(lin, sc), sx, band=True)`` to round-off, without
    assembling the blocks a second time."""
    D, U, F, gx = _in_state_coordinates(ne.D, ne.U, ne.F * sc, ne.gx, sx)
    return Normal(D, U, F, ne.P * np.outer(sc, sc), gx, ne.gp * sc, banded_upper(D, U))


def _scale_lin(lin: Linearization, sc: np.ndarray) -> Linearization:
    return lin._replace(dyn_C=lin.dyn_C * sc, init_C=lin.init_C * sc)


class _StatesOnly:
    """The problem with θ held at θ_0 and taken out of the unknowns (an empty θ): the
    states-only warm-up. Its linearization has no θ columns (the problem's
    ``linearize_states`` where it has one), so neither their tangents nor the Schur
    complement are computed."""

    def __init__(self, problem, theta):
        self.problem, self.theta = problem, theta
        self.lower = self.upper = np.zeros(0)

    def linearize(self, X, _):
        states = getattr(self.problem, "linearize_states", None)
        if states is not None:
            return states(X, self.theta)
        lin = self.problem.linearize(X, self.theta)
        return lin._replace(dyn_C=lin.dyn_C[..., :0], init_C=lin.init_C[..., :0])

    def cost(self, X, _):
        return self.problem.cost(X, self.theta)

    def retract(self, X, dX):
        return self.problem.retract(X, dX)

    def residuals(self, X, _):
        return self.problem.residuals(X, self.theta)


class _Scaled:
    """The problem in the coordinates φ = θ / s (see LMSettings.scale_parameters)."""

    def __init__(self, problem, sc):
        self.problem, self.sc = problem, sc

    def linearize(self, X, phi):
        return _scale_lin(self.problem.linearize(X, phi * self.sc), self.sc)

    def cost(self, X, phi):
        return self.problem.cost(X, phi * self.sc)

    def residuals(self, X, phi):
        return self.problem.residuals(X, phi * self.sc)

    def retract(self, X, dX):
        return self.problem.retract(X, dX)
