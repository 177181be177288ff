"""A start for the tree estimator's parameters from the dynamics alone: filtered inverse
dynamics on the encoder angles (issue 22's 13-parameter Furuta in ≤ 15 iterations).

Given positions q_k on the estimator grid (the encoder samples themselves), the forced
discrete Euler–Lagrange equation at q_k (Caldwell et al. eq. 3, three points, with the exact
dry friction of ``dynamics.variational_friction``) is a residual in θ alone:

    e_k(θ) = p_k(θ) + D₁L_d(q_k, q_{k+1}) + (h/2) F_k + αλ_k,
    p_k(θ) = D₂L_d(q_{k−1}, q_k) + (h/2) F_{k−1} + (1 − α)λ_{k−1}      (row 2 of step k − 1),

λ_k the natural map's friction impulse, α its share in the first row
(``variational_friction.FRICTION_ROW_WEIGHT``). It is linear in the inertias, the gains and the
viscous and Coulomb coefficients (on each sliding step) and smooth in the rest (a tilt of
gravity, a back-EMF), so a few damped Gauss–Newton steps in θ, in the box and physically
consistent, reach the minimum of Σ_k ‖L(w e)_k‖². Each step evaluates the problem's own
compiled residuals and linearization (``TreeProblem``; nothing new to compile):

- p_k(θ) = −(row 2 of step k − 1 at p = 0), unweighted;
- ∂e_k/∂θ = C¹_k + (∂row¹_k/∂p_k) ∂p_k/∂θ = C¹_k − K_k C²_{k−1} / w_{k−1}, with C the
  linearization's weighted θ blocks and K_k = ∂row¹_k/∂p_k its (weighted, diagonal) p block.

L is a zero-phase low-pass along time (Butterworth, ``sosfiltfilt``), applied to the residuals
and to their θ columns alike, per log: the *equation* is filtered, not the angles. e_k holds
the second difference of q over h², which turns a 4096-count encoder's quantization
(4.4e-4 rad) into ~1e3 rad/s² of white noise; L removes it above its cutoff while the
rigid-body terms, the inputs and the friction all pass through the same filter, so their
relation stays that of the model. Low-passing the angles first instead (as the LM's start
states are) does not commute with the dynamics: measured on the Furuta swing-up, the fit on
10 Hz-filtered angles put J_Azz on its lower bound and the gain 27 % low, even from the
noise-free angles, while the filtered equation on the quantized angles gave J_Azz +0.6 %, the
gain +0.0 %, J_Byy +0.1 % (the friction and the tilt, which the quantized velocities blur,
within a factor of 2–3; LM settles them).

The weights are the dynamics rows' (√2/σ_w per joint); a row whose step or the step before
crosses a log boundary (weight 0) is left out.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from scipy.signal import butter, sosfiltfilt

from physid.estimation.consistency import constrained_step
from physid.estimation.lm import _box_qp
from physid.estimation.tree_problem import TreeProblem

# Cutoff of the equation's low-pass (Hz): that of the LM's start states
# (``estimation.initialize.CUTOFF_HZ``), above the rigs' swings (~1 Hz) and their input
# pulses' first harmonics. Measured on the Furuta swing-up (2 s, 4096 counts): 5 and 10 Hz
# both led LM to the same minimum in 6 iterations (21 from Table 1's values).
CUTOFF_HZ = 10.0
# Butterworth order of the low-pass (doubled by the forward-backward pass).
ORDER = 2
# Rows left out at each end of a log, in periods of the cutoff (1.5: 150 rows at 10 Hz and
# 1 kHz). The forward-backward pass starts its state from a few edge rows, and these rows are
# mostly encoder noise (second differences of quantized angles: ±5e3 per row against ~1
# after the filter), so its start-up transient decays over ~0.15 s from ~1e3 times the
# interior level (RMS of the first 25 rows 772 against 0.6). On a 1.5 s pendulum release from
# 2.0 rad those rows held 99.99 % of the regression's cost at the truth and put J at -66 %
# (0.00133 against 0.0039), from which LM stalled; left out, J -0.2 % and LM converges in 4
# iterations (docs/validation.md, "The diagonal, and the stalled fits ...").
EDGE_PERIODS = 1.5
# Marquardt damping of the first step, relative to each column's diagonal of JᵀJ; divided by
# 10 after a step that lowers the cost, multiplied by 10 after one that does not.
DAMPING = 1e-3
# A column whose diagonal is below this fraction of the largest is a parameter the dynamics
# does not see (J_Axx of a Furuta arm that turns about z only): it is damped as if it were this
# size, so it stays near its start instead of taking an arbitrary value.
SMALLEST_DIAGONAL = 1e-10
# Stop when a step lowers the cost by less than this fraction of it.
RELATIVE_DECREASE = 1e-4
# Gauss–Newton steps of the LM's start (``tree_start``): the rows are linear in every
# parameter but a tilt (and the friction's pattern of sliding and sticking steps), so one step
# is most of the way, and LM does the rest jointly with the states. Measured on the Furuta
# swing-up (2 s): LM took 6 iterations after 1, 2 or 8 steps (the regression's cost stopped
# falling after 3); one step costs one linearization and two residual evaluations.
START_STEPS = 1


@dataclass(frozen=True)
class WarmStart:
    """θ (scaled, as ``TreeProblem``'s); the regression's cost Σ ‖L(w e)‖² (dimensionless)
    at the start and at θ; the Gauss–Newton steps tried."""

    theta: np.ndarray
    cost0: float
    cost: float
    steps: int


def momenta(problem: TreeProblem, q, theta) -> np.ndarray:
    """p_k = D₂L_d(q_{k−1}, q_k) + (h/2) F_{k−1} + λ_{k−1}/2 [N, n] (N m s or N s): the momentum
    that closes row 2 of step k − 1 (its friction λ_{k−1} at p_{k−1}); each log's first p
    closes row 1 of its first step without friction (``TreeProblem`` ``chained_momenta``)."""
    return problem.chained_momenta(q, theta)


def _segments(valid: np.ndarray) -> list[slice]:
    """Runs of consecutive True in valid [M]."""
    edges = np.flatnonzero(np.diff(np.r_[0, valid.astype(int), 0]))
    return [slice(a, b) for a, b in zip(edges[::2], edges[1::2], strict=True)]


def _rows(problem: TreeProblem, q, theta, sos, jacobian: bool = True, edge: int = 0):
    """(L(w e) [M], ∂/∂θ [M, p] or None): the weighted, filtered three-point residuals of
    the interior steps of every log, flattened (M = (N − 2) n; rows outside a log, and the
    ``edge`` filtered rows at each end of one, are 0). Without ``jacobian`` only the
    residuals are evaluated (no linearization)."""
    n = problem.structure.n
    # NumPy: an eager jnp.concatenate compiles a program per shape
    X = np.concatenate([np.asarray(q, float), np.asarray(momenta(problem, q, theta))], axis=1)
    wd = np.asarray(problem.dyn_weight)
    valid = (wd[1:, 0] > 0) & (wd[:-1, 0] > 0)
    if not jacobian:
        e = np.where(valid[:, None], problem.residuals(X, theta)[0][1:, :n], 0.0)
        return _filtered(e, valid, sos, edge).reshape(-1), None
    lin = problem.linearize(X, theta)
    e = np.asarray(lin.dyn_r)[1:, :n]  # row 1 of steps 1 … N − 2 at p_k(θ)
    C = np.asarray(lin.dyn_C)
    A = np.asarray(lin.dyn_A)
    K = np.einsum("kii->ki", A[1:, :n, n:])  # ∂row¹_k/∂p_k, weighted
    J = C[1:, :n] + K[:, :, None] * _momentum_derivatives(A, C, wd, n)[1:-1]
    e, J = np.where(valid[:, None], e, 0.0), np.where(valid[:, None, None], J, 0.0)
    J = _filtered(J, valid, sos, edge)
    return _filtered(e, valid, sos, edge).reshape(-1), J.reshape(-1, J.shape[-1])


def _momentum_derivatives(A, C, wd, n: int) -> np.ndarray:
    """∂p_k/∂θ [N, n, p] of ``momenta``: p_{k+1} closes row 2 of step k, whose weighted
    derivatives are C²_k (θ) and diag(w (1 − keep)(1 − α)/α) (p_k: a sticking joint's friction is
    read off p_k), so ∂p_{k+1} = −(C²_k + A²_k ∂p_k)/w (a scan); 0 at each log's start."""
    w2 = wd[:, n:]
    ok = w2 > 0
    g = -np.divide(C[:, n:], w2[:, :, None], out=np.zeros_like(C[:, n:]), where=ok[:, :, None])
    s = -np.divide(np.einsum("kii->ki", A[:, n:, n:]), w2, out=np.zeros_like(w2), where=ok)
    rest = np.asarray(_chain(g, s))
    return np.concatenate([np.zeros((1, *C.shape[1:]))[:, n:], rest])


@jax.jit
def _chain(g, s):
    """dp [N − 1, n, p]: dp_k = g_k + s_k dp_{k−1} from dp = 0, a scan over the steps; jitted
    once per shape here (an eager ``lax.scan`` of a closure compiled again at every call,
    0.05–0.15 s each: helper warmfast's profile, 2026-11-26)."""

    def one(dp, x):
        gk, sk = x
        nxt = gk + sk[:, None] * dp
        return nxt, nxt

    return jax.lax.scan(one, jnp.zeros(g.shape[1:]), (g, s))[1]


def _filtered(rows: np.ndarray, valid: np.ndarray, sos, edge: int = 0) -> np.ndarray:
    """rows [M, ...] low-passed along M per run of valid rows (unchanged without ``sos``),
    the filter's start-up transient, ``edge`` rows at each end of a run (at most a quarter
    of it), set to 0."""
    if sos is None:
        return rows
    rows = rows.copy()
    for seg in _segments(valid):
        n = seg.stop - seg.start
        if n > 3 * 2 * len(sos):  # long enough to pad (as filtfilt)
            out = sosfiltfilt(sos, rows[seg], axis=0)
            cut = min(edge, n // 4)
            out[:cut] = 0.0
            out[n - cut :] = 0.0
            rows[seg] = out
    return rows


def warm_start(
    problem: TreeProblem,
    q,
    theta0,
    cutoff: float | None = CUTOFF_HZ,
    max_steps: int = 8,
    edge_periods: float = EDGE_PERIODS,
) -> WarmStart:
    """θ minimizing the low-passed (``cutoff`` Hz; None: unfiltered), weighted three-point DEL
    residuals of the positions q [N, n] (every joint; rad or m, unwrapped: the encoder
    samples), from θ0 (scaled), in the problem's box and, where it has one, its
    physical-consistency LMI: damped Gauss–Newton, each step an exact box QP.
    ``edge_periods``: filtered rows left out at each end of a log, in cutoff periods
    (``EDGE_PERIODS``; 0 keeps them, as before 2026-11-26)."""
    fs = 1.0 / problem.structure.h
    sos, edge = None, 0
    if cutoff is not None and cutoff < 0.5 * fs:
        sos = butter(ORDER, cutoff, fs=fs, output="sos")
        edge = int(np.ceil(edge_periods * fs / cutoff))
    theta = np.clip(np.asarray(theta0, float), problem.lower, problem.upper)
    lmi = problem.consistency
    r, J = _rows(problem, q, theta, sos, edge=edge)
    cost0 = cost = float(r @ r)
    damping, steps = DAMPING, 0
    while steps < max_steps:
        steps += 1
        if J is None:
            _, J = _rows(problem, q, theta, sos, edge=edge)
        S = J.T @ J
        diag = np.maximum(np.diag(S), SMALLEST_DIAGONAL * max(float(np.max(np.diag(S))), 1e-300))
        H, g = S + damping * np.diag(diag), J.T @ r
        lo, hi = problem.lower - theta, problem.upper - theta
        step = _box_qp(H, g, lo, hi)
        if lmi is not None and not lmi.feasible(theta + step, 1e-12):
            try:
                step = constrained_step(H, g, lo, hi, lmi, theta)
            except Exception:  # noqa: BLE001  (cvxpy's SolverError: failed numerically)
                damping *= 10.0  # a shorter step is an easier conic problem
                continue
        trial = theta + step
        r_t, _ = _rows(problem, q, trial, sos, jacobian=False, edge=edge)
        cost_t = float(r_t @ r_t)
        if not cost_t < cost:
            damping *= 10.0
            continue
        small = cost - cost_t <= RELATIVE_DECREASE * cost
        theta, r, J, cost = trial, r_t, None, cost_t  # J at the new θ when a step follows
        damping = max(damping / 10.0, 1e-12)
        if small:
            break
    return WarmStart(theta, cost0, cost, steps)


def encoder_positions(problem: TreeProblem) -> np.ndarray | None:
    """q [N, n]: the encoder samples of every joint on the grid, unwrapped, with missing
    samples linearly interpolated (per log); None if a joint has no encoder or a log has
    fewer than two samples of one (the start then needs the LM's filtered states)."""
    n, observed = problem.structure.n, list(problem.structure.observed)
    if sorted(observed) != list(range(n)):
        return None
    y, present = np.asarray(problem.y, float), np.asarray(problem.obs_weight) > 0
    wraps = problem.structure.wraps
    q = np.zeros((len(y), n))
    bounds = np.r_[np.flatnonzero(log_starts(problem)), len(y)]
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        k = np.arange(b - a)
        for i, j in enumerate(observed):
            ok = present[a:b, i]
            if ok.sum() < 2:
                return None
            v = y[a:b, i][ok]
            v = np.unwrap(v) if wraps[i] else v
            q[a:b, j] = np.interp(k, k[ok], v)
    return q


def log_starts(problem: TreeProblem) -> np.ndarray:
    """[N] bool: the first step of each log (a dynamics row of weight 0 joins two logs)."""
    wd = np.asarray(problem.dyn_weight)
    return np.r_[True, np.all(wd == 0, axis=1)]


@dataclass(frozen=True)
class TreeStart:
    """The LM's start: θ (scaled) and the states X [N, 2n]; ``regression`` the warm start's
    fit (None where it could not run), ``used`` whether it replaced the given start (it must
    lower the problem's own cost), and the problem's cost at the given and the warm start."""

    theta: np.ndarray
    X: jnp.ndarray
    used: bool
    regression: WarmStart | None
    cost_given: float
    cost_warm: float


def tree_start(
    problem: TreeProblem,
    X0,
    theta0,
    cutoff: float | None = CUTOFF_HZ,
    steps: int = START_STEPS,
    edge_periods: float = EDGE_PERIODS,
) -> TreeStart:
    """``warm_start`` (``steps`` Gauss–Newton steps) on the encoder samples, and the states
    from the LM's start positions (X0's) with the momenta at the new θ; kept only where the
    problem's cost (dynamics and observation rows together) is lower there than at
    (X0, θ0)."""
    theta0 = np.asarray(theta0, float)
    cost_given = problem.cost(X0, theta0)
    q = encoder_positions(problem)
    if q is None or not len(theta0):
        return TreeStart(theta0, X0, False, None, cost_given, np.nan)
    reg = warm_start(problem, q, theta0, cutoff, steps, edge_periods)
    X = problem.initial_states(problem.positions(X0), reg.theta, log_starts(problem))
    cost = problem.cost(X, reg.theta)
    if not cost < cost_given:
        return TreeStart(theta0, X0, False, reg, cost_given, cost)
    return TreeStart(reg.theta, X, True, reg, cost_given, cost)
