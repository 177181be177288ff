"""Linearized parameter covariance and identifiability (Marklund et al. (3.26–3.32)).

With weighted residuals z = W^{1/2} Δz and Jacobians J = [J_θ  J_x], the variable-projection
Jacobian (3.32) is T = (I − J_x (J_xᵀJ_x)⁻¹ J_xᵀ) J_θ: the parameter sensitivity left after the
states have re-fitted. The parameter estimate moves by δθ = −(TᵀT)⁻¹Tᵀz, so

    Λ_θθ = (TᵀT)⁻¹ Tᵀ Ĉ T (TᵀT)⁻¹                                                   (3.31)

with Ĉ the block-diagonal sample covariance of the residuals, (3.26–3.27), taken of the
weighted residuals (so the weights cancel and Ĉ⁻¹ plays the role of Ŵ of (3.28)).

T is formed block by block: (J_xᵀJ_x)⁻¹ J_xᵀJ_θ is the banded arrow solve of ``estimation.lm``
with p right-hand sides (slightly regularized, as the paper does), so this is O(n) as well.
Directions in which TᵀT is numerically singular are not excited by the data: their variance is
infinite and the parameters that make them up are flagged.

A parameter the LM left on a bound of its box is not a measurement: the cost still falls
beyond the bound, so the linearization describes the box, not the data (Table 4 of the paper
prints such parameters as "0 (200.0)"). It is flagged, its std is infinite, and the others'
covariance is the one conditional on it (its column of T is dropped) — on the Furuta swing-up,
J_Axx and J_Ayy end at their lower bound because a massless wobble of the arm absorbs the
discretization error, with a linearized std of 3e-8 that would have called them identified.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.linalg import null_space, solveh_banded

from physid.estimation.flags import (
    REL_STD_LIMIT,
    bound_flags,  # noqa: F401  (re-exported)
)
from physid.estimation.lm import Linearization, banded_upper, normal_equations, single_threaded_blas

RCOND = 1e-10  # singular values of TᵀT below RCOND · largest count as "not excited"


@dataclass(frozen=True)
class Covariance:
    """Λ_χχ in SI units, its SVD in relative units (Λ_ij / (s_i s_j), s = magnitude used to
    compare parameters of different units) and per-parameter std and identifiability."""

    cov: np.ndarray
    std: np.ndarray
    identifiable: np.ndarray
    singular_values: np.ndarray
    directions: np.ndarray  # columns: relative-unit directions, largest variance first
    unexcited: list[int]  # indices (into directions) of directions the data do not excite
    at_bound: np.ndarray  # per parameter: "lower", "upper" or "" (inside the box)
    on_consistency_face: tuple[str, ...] = ()  # bodies held on the boundary of P ⪰ 0
    # Per parameter: the effective degrees of freedom ν_eff of its variance estimate
    # (``effective_dof``; inf without batch means) and the coverage factor
    # k = t_0.975(ν_eff) / 1.96 (``coverage_factor``). Where the covariance was ``expanded``,
    # ``cov`` and ``std`` already carry k (±2 std is then a 95 % interval).
    dof: np.ndarray | None = None
    coverage_factor: np.ndarray | None = None
    expanded: bool = False


def _sample_cov(r: np.ndarray, present: np.ndarray | None = None) -> np.ndarray:
    """(3.26–3.27): 1/(n−1) Σ r_k r_kᵀ of residual blocks r[n, m]. With ``present[n, m]``,
    entry (i, j) is averaged over the N_ij steps where both rows carry a sample (a camera
    marker seen on 1 grid step in 30 must not have its variance diluted 30 times)."""
    r = np.asarray(r)
    if present is None:
        return r.T @ r / max(len(r) - 1, 1)
    pm = np.asarray(present, float)
    count = pm.T @ pm
    return (r.T @ r) / np.maximum(count - 1.0, 1.0)


def parameter_covariance(
    lin: Linearization,
    scale: np.ndarray,
    values: np.ndarray,
    at_bound=None,
    constraints=None,
    batches: int | None = None,
    obs_noise: np.ndarray | None = None,
    dynamics_noise: bool = True,
    overlapping: bool = False,
    expanded: bool = False,
) -> Covariance:
    """Λ_χχ of χ = scale·θ at the linearization ``lin`` (Jacobians w.r.t. θ), and flags.

    ``at_bound`` (from :func:`bound_flags`, optional) marks parameters held on a bound of
    their box: they get infinite std, are not identifiable, and the rest is conditional.
    ``constraints`` (optional, [m, p] in θ) are linear equations A δθ = 0 the solution is held
    to — the faces of the physical-consistency LMI it lies on
    (``estimation.consistency.InertiaLMI.active_rows``): the covariance is the one
    conditional on them, so that a combination the data do not excite within the face (the
    split of J_Axx + J_Ayy) is reported with infinite variance.

    ``batches`` (optional) turns (3.31)'s white "meat" TᵀĈT into one that also counts
    residuals correlated in time (model error), by batch means: the per-step score
    contributions s_k = t_kᵀ z_k summed over ``batches`` contiguous blocks of steps,
    M_BM = B/(B−1) Σ_b S_b S_bᵀ. Where the residuals are white, M_BM estimates the white meat;
    the correlated excess M_BM − TᵀĈT (its positive part) is added to it. ``obs_noise``
    (optional, [mo], in the weighted observation rows' units) is the data's own noise per
    observation row (``estimation.residuals.data_noise``): the fitted residuals are smaller
    than the noise where the states absorb part of it (κ = 100: b's std 1.5 times too
    small, docs/lm-estimator.md), so each row's variance in the white meat is at least it.

    ``dynamics_noise=False``: the white meat counts the observation rows only. The data's
    randomness is the sensor noise; the dynamics residuals are not measurements but a
    function of the states and θ, and a new dataset changes them only through the states,
    which T already accounts for. Their sample covariance is the model error (the step's, the
    same in every dataset of one motion) and the noise the states absorbed (counted again):
    on the coverage pendulum it put 2.0e-6 into J's std, whose measured spread over 50
    datasets is 0.9e-6 and the observation rows' meat alone 1.05e-6 (docs/validation.md).
    Correlated model error still enters through the batch means (their excess over this
    meat). Use it where the problem's random input is its observations (the hinged
    estimator); a problem whose dynamics rows carry stated process noise keeps them."""
    ne = normal_equations(lin)
    lin = Linearization(*(None if a is None else np.asarray(a) for a in lin))
    n, d, p = ne.F.shape
    t_dyn, t_obs, t_init = _projected_blocks(lin, ne)
    TT = np.einsum("kmp,kmq->pq", t_dyn, t_dyn) + np.einsum("kmp,kmq->pq", t_obs, t_obs)
    TT += t_init.T @ t_init
    C_dyn, C_obs = _sample_cov(lin.dyn_r), _sample_cov(lin.obs_r, lin.obs_present)
    if not dynamics_noise:
        C_dyn = np.zeros_like(C_dyn)
    TCT = _white_meat(t_dyn, t_obs, t_init, C_dyn, C_obs)
    meat = white = TCT
    if obs_noise is not None:
        meat = white = _white_meat(t_dyn, t_obs, t_init, C_dyn, _noise_floor(C_obs, obs_noise))
    bm = None
    if batches:
        bm = _batch_means(lin, t_dyn, t_obs, t_init, batches, overlapping)
        meat = meat + positive_part(bm - TCT)
    bound = np.full(p, "") if at_bound is None else np.asarray(at_bound, str)
    held = bound != ""
    # Pseudo-inverse of TᵀT over the directions left free by the box and the constraints
    # (conditional on the held ones): unexcited directions get infinite variance, not a huge
    # number.
    rows = (
        np.zeros((0, p)) if constraints is None else np.asarray(constraints, float).reshape(-1, p)
    )
    fixed = np.concatenate([np.eye(p)[held], rows])
    N = null_space(fixed) if len(fixed) else np.eye(p)
    w, V_free = np.linalg.eigh(N.T @ (0.5 * (TT + TT.T)) @ N)
    V = N @ V_free
    ok = w > RCOND * max(float(w.max(initial=0.0)), 1e-300)
    inv = (V[:, ok] / w[ok]) @ V[:, ok].T
    cov_theta = inv @ meat @ inv
    null = np.concatenate([V[:, ~ok], np.eye(p)[:, held]], axis=1)
    dof = np.full(p, np.inf)
    if bm is not None:
        dof = effective_dof(
            np.diag(cov_theta), np.diag(inv @ white @ inv), batch_dof(batches, overlapping), n
        )
    k = coverage_factor(dof)
    cov = cov_theta * np.outer(scale, scale)
    if expanded:
        cov = cov * np.outer(k, k)
    var = np.diag(cov).copy()
    mag = np.maximum(np.abs(values), np.abs(scale))
    # Parameters taking part in an unexcited direction, or held, have unbounded variance.
    in_null = np.any(np.abs(null) > 0.1, axis=1) if null.size else np.zeros(p, bool)
    var[in_null | held] = np.inf
    std = np.sqrt(np.maximum(var, 0.0))
    # SVD of the relative covariance; unexcited directions are reported with infinite variance.
    rel = cov / np.outer(mag, mag)
    U, s, _ = np.linalg.svd(rel)
    if null.size:
        U = np.concatenate([null, U[:, : p - null.shape[1]]], axis=1)
        s = np.concatenate([np.full(null.shape[1], np.inf), s[: p - null.shape[1]]])
    unexcited = [i for i in range(p) if not np.isfinite(s[i]) or np.sqrt(s[i]) > REL_STD_LIMIT]
    return Covariance(
        cov, std, identifiable(std, values, scale, held), s, U, unexcited, bound,
        dof=dof, coverage_factor=k, expanded=expanded,
    )  # fmt: skip


def batch_dof(batches: int, overlapping: bool = False) -> float:
    """Degrees of freedom of a batch-means variance over B = ``batches`` blocks: B − 1
    (disjoint), 1.5 (B − 1) (overlapping: Meketon & Schmeiser 1984, the variance of the
    estimate is 2/3 of the disjoint one's at the same batch length)."""
    b = max(int(batches), 2)
    return 1.5 * (b - 1) if overlapping else float(b - 1)


def effective_dof(var, var_white, nu_bm: float, n: int) -> np.ndarray:
    """Welch–Satterthwaite ν_eff = V² / (V²/ν_M + W²/ν_W) of a parameter's variance
    V = W + (M − W)₊ (per parameter, the diagonal of the bread times each meat): the
    batch-means estimate with ν_M = ``nu_bm`` degrees of freedom, counted at the variance's
    full size V, and the white meat W from the residuals' sample covariance over the n steps
    (ν_W = n − 1).

    Why V and not the excess's own size: (M − W)₊ carries the whole batch-means estimate's
    sampling noise. On 50 datasets of one motion of the coverage pendulum (docs/validation.md)
    the damping's reported variance varied as a 12–13 degree-of-freedom estimate (ν̂ = 2
    E[V]²/Var(V) = 12.4; ν_M = 13.5); counting the excess as a component of its own (GUM's
    textbook use, ν_eff ≈ 130 there) or M along the parameter (median 22) overstates it."""
    var, var_white = (np.asarray(a, float) for a in (var, var_white))
    with np.errstate(divide="ignore", invalid="ignore"):
        nu = 1.0 / (1.0 / nu_bm + (var_white / var) ** 2 / max(n - 1, 1))
    return np.where(np.isfinite(nu) & (nu > 0), nu, np.inf)


def coverage_factor(dof) -> np.ndarray:
    """k = t_0.975(ν) / 1.96 per parameter: the factor by which a std with ν degrees of
    freedom is expanded so that ±2 std covers 95 % (1 where ν is infinite)."""
    from scipy.stats import t as student_t

    nu = np.asarray(dof, float)
    finite = np.isfinite(nu) & (nu > 0)
    k = np.ones_like(nu)
    k[finite] = student_t.ppf(0.975, nu[finite]) / 1.959963984540054
    return k


def _noise_floor(C_obs: np.ndarray, obs_noise) -> np.ndarray:
    """C_obs with each row's variance at least its data noise squared."""
    C = np.array(C_obs, float)
    idx = np.arange(len(C))
    C[idx, idx] = np.maximum(np.diag(C), np.asarray(obs_noise, float) ** 2)
    return C


def noise_influence(lin: Linearization, obs_noise, constraints=None) -> np.ndarray:
    """G[n, p, mo]: how θ (the problem's units) moves per unit of white noise in each
    observation row, δθ = Σ_k G_k ε_k with ε_k ~ N(0, I): G_k = (TᵀT)⁺ t_obs,kᵀ diag(σ),
    σ = ``obs_noise`` (weighted units, ``parameter_covariance``), the pseudo-inverse over
    the null space of ``constraints`` (as there; no box bound held). Σ_k G_k G_kᵀ is the
    observation rows' meat in the sandwich; two fits of the same samples (h and h/2) combine
    theirs sample by sample (``estimation.step_bias.combined_noise_covariance``)."""
    ne = normal_equations(lin)
    lin = Linearization(*(None if a is None else np.asarray(a) for a in lin))
    p = ne.F.shape[2]
    t_dyn, t_obs, t_init = _projected_blocks(lin, ne)
    TT = np.einsum("kmp,kmq->pq", t_dyn, t_dyn) + np.einsum("kmp,kmq->pq", t_obs, t_obs)
    TT += t_init.T @ t_init
    rows = (
        np.zeros((0, p)) if constraints is None else np.asarray(constraints, float).reshape(-1, p)
    )
    N = null_space(rows) if len(rows) else np.eye(p)
    w, V_free = np.linalg.eigh(N.T @ (0.5 * (TT + TT.T)) @ N)
    V = N @ V_free
    ok = w > RCOND * max(float(w.max(initial=0.0)), 1e-300)
    inv = (V[:, ok] / w[ok]) @ V[:, ok].T
    return np.einsum("pq,kmq,m->kpm", inv, t_obs, np.asarray(obs_noise, float))


def _projected_blocks(lin: Linearization, ne) -> tuple:
    """The rows of T = (I − J_x (J_xᵀJ_x)⁻¹ J_xᵀ) J_θ (3.32), block by block: (t_dyn[n−1,
    md, p], t_obs[n, mo, p], t_init[m0, p])."""
    n, d, p = ne.F.shape
    ab = banded_upper(_regularized(ne.D), ne.U)
    with single_threaded_blas():
        Y = solveh_banded(ab, ne.F.reshape(n * d, p), lower=False, check_finite=False)
    Y = Y.reshape(n, d, p)
    t_dyn = lin.dyn_C - np.einsum("kmi,kip->kmp", lin.dyn_A, Y[:-1])
    t_dyn -= np.einsum("kmi,kip->kmp", lin.dyn_B, Y[1:])
    t_obs = -np.einsum("kmi,kip->kmp", lin.obs_A, Y)
    t_init = lin.init_C - lin.init_A @ Y[0]
    return t_dyn, t_obs, t_init


def _white_meat(t_dyn, t_obs, t_init, C_dyn, C_obs) -> np.ndarray:
    """TᵀCT for residuals white in time with the per-step covariances C_dyn, C_obs (3.31)."""
    TCT = np.einsum("kmp,mn,knq->pq", t_dyn, C_dyn, t_dyn)
    TCT += np.einsum("kmp,mn,knq->pq", t_obs, C_obs, t_obs)
    if len(t_init):  # a problem without an initial-state block (the tree's) has no rows
        TCT = TCT + t_init.T @ C_dyn @ t_init
    return TCT


def _batch_means(
    lin: Linearization, t_dyn, t_obs, t_init, batches: int, overlapping: bool = False
) -> np.ndarray:
    """``batch_means`` (or ``overlapping_batch_means``) of the score t_kᵀ z_k per step (the
    initial-state rows go with step 0)."""
    score = np.einsum("kmp,km->kp", t_obs, lin.obs_r)
    score[:-1] += np.einsum("kmp,km->kp", t_dyn, lin.dyn_r)
    score[0] += t_init.T @ lin.init_r
    return (overlapping_batch_means if overlapping else batch_means)(score, batches)


def batch_means(score: np.ndarray, batches: int) -> np.ndarray:
    """B/(B−1) Σ_b (S_b − S̄)(S_b − S̄)ᵀ for the sums S_b of ``score`` [n, p] (one row per
    step or frame) over B = ``batches`` contiguous blocks (at least 2, at most n): the
    covariance of the score's sum that residuals correlated within a block leave."""
    n = len(score)
    b = int(max(2, min(batches, n)))
    edges = np.linspace(0, n, b + 1).astype(int)
    sums = np.add.reduceat(score, edges[:-1], axis=0)
    centred = sums - sums.mean(axis=0)
    return b / (b - 1) * centred.T @ centred


def overlapping_batch_means(score: np.ndarray, batches: int) -> np.ndarray:
    """The covariance of the sum of ``score`` [n, p] by overlapping batch means (Meketon &
    Schmeiser 1984): the sums S_j over every window of L = n/B steps (``batches`` = B, at
    least 2), n² L / ((n − L + 1)(n − L)) Σ_j (S_j/L − S/n)(S_j/L − S/n)ᵀ. The same batch
    length, and so the same bias from correlation longer than a batch, as ``batch_means``
    over B blocks, from n − L + 1 windows instead of B: its variance is about 2/3 of theirs.
    O(n p²) through the cumulative sum."""
    score = np.asarray(score, float)
    n = len(score)
    length = max(1, min(n // max(int(batches), 2), n - 1))
    c = np.concatenate([np.zeros((1, score.shape[1])), np.cumsum(score, axis=0)])
    centred = (c[length:] - c[:-length]) / length - c[-1] / n
    return n**2 * length / ((n - length + 1) * (n - length)) * centred.T @ centred


def positive_part(M: np.ndarray) -> np.ndarray:
    """The positive semidefinite part of a symmetric matrix (negative eigenvalues dropped)."""
    w, V = np.linalg.eigh(0.5 * (M + M.T))
    return (V * np.maximum(w, 0.0)) @ V.T


def _regularized(D: np.ndarray, rel: float = 1e-12) -> np.ndarray:
    """D with rel times its own diagonal added to the diagonal (a singular J_xᵀJ_x stays
    solvable). Relative to each row, not to the largest entry: with a large κ the stiff hinge
    rows outweigh the free rotation by ~10¹⁶, and 1e-12 of the largest entry kept the
    states from re-fitting a parameter change — at κ = 1e8 that reported b's std 600 times
    below the Cramér–Rao bound (docs/lm-estimator.md)."""
    d = D.shape[1]
    diag = np.einsum("kii->ki", D)
    out = D.copy()
    out[:, np.arange(d), np.arange(d)] += rel * np.maximum(diag, 1e-300)
    return out


def identifiable(std, values, scale, held) -> np.ndarray:
    """Per parameter: a finite std at most REL_STD_LIMIT of max(|value|, |scale|), and not
    held on a bound of its box."""
    mag = np.maximum(np.abs(values), np.abs(scale))
    return np.isfinite(std) & (std <= REL_STD_LIMIT * mag) & ~np.asarray(held, bool)
