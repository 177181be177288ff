"""Meat estimators of the tree's std compared on the same fits (issue 24): reads the
per-seed pieces of ``benchmarks/coverage_pieces.py`` and prints, per estimator and parameter
class, the fraction within 1 and 2 std, and per parameter the std's own spread over the
datasets as degrees of freedom (one motion: the errors' variance is the same in every
dataset, so ν̂ = 2 E[V]² / Var(V) of the reported variance V is the variance estimate's
degrees of freedom).

    python benchmarks/coverage_meat.py DIR [DIR ...]
    python benchmarks/coverage_meat.py --rules DIR [DIR ...]

``--rules`` compares the reported (expanded) std of the current rule with per-parameter
window rules on the same fits: each parameter's long-run variance from its own projected
score u_i,k = ((TᵀT)⁻¹ s_k)_i, with a data-driven or bias-corrected window and the degrees of
freedom that window implies (docs/validation.md, "Per-parameter window rules").
"""

from __future__ import annotations

import glob
import os
import sys

import numpy as np
from scipy import stats

from physid.estimation.uncertainty import (
    batch_dof,
    batch_means,
    coverage_factor,
    effective_dof,
    overlapping_batch_means,
    positive_part,
)


def load(folder):
    rows = []
    for path in sorted(glob.glob(os.path.join(folder, "seed*.npz"))):
        d = dict(np.load(path))
        d["inv"] = np.linalg.pinv(d["TT"])
        d["score"] = d["s_obs"] + d["s_dyn"]
        rows.append(d)
    stalled = [i for i, r in enumerate(rows) if not r["converged"]]
    if stalled:  # the pipeline voids their std (``estimation.flags``): left out, as there
        print(f"{folder}: {len(stalled)} not converged (left out): seeds {stalled}")
    return [r for r in rows if r["converged"]]


def bartlett(score, lags):
    """Newey–West: Γ0 + Σ_j (1 − j/(L+1)) (Γj + Γjᵀ) of the score's sum."""
    s = score - score.mean(axis=0)
    out = s.T @ s
    for j in range(1, lags + 1):
        g = s[j:].T @ s[:-j]
        out += (1 - j / (lags + 1)) * (g + g.T)
    return out


def variants():
    out = {"white": lambda d: d["W"]}
    for B in (5, 10, 20, 30, 50):
        out[f"bm{B}"] = lambda d, B=B: d["W"] + positive_part(batch_means(d["score"], B) - d["W"])
    for B in (5, 10, 20, 30):
        out[f"obm{B}"] = lambda d, B=B: (
            d["W"] + positive_part(overlapping_batch_means(d["score"], B) - d["W"])
        )
    for L in (25, 50, 75, 150, 300):
        out[f"nw{L}"] = lambda d, L=L: d["W"] + positive_part(bartlett(d["score"], L) - d["W"])
    out["bm10 raw"] = lambda d: batch_means(d["score"], 10)
    out["obm10 raw"] = lambda d: overlapping_batch_means(d["score"], 10)
    return out


def table(rows, label):
    n = len(rows[0]["score"])
    names = [str(x) for x in rows[0]["names"]]
    err = np.array([r["values"] - r["truth"] for r in rows])
    print(f"\n== {label}: {len(rows)} datasets, n = {n} steps")
    print("errors: mean " + ", ".join(f"{x:.3g}" for x in err.mean(0))
          + "; sd " + ", ".join(f"{x:.3g}" for x in err.std(0, ddof=1)))  # fmt: skip
    hdr = "  ".join(f"{nm:>32}" for nm in names)
    print(
        f"{'estimator':12} {hdr}   (within 1 / 2 std, median std / sd of errors, ν̂; "
        "mean z², log score)"
    )
    for key, meat in variants().items():
        var = np.array([np.diag(r["inv"] @ meat(r) @ r["inv"]) * r["scale"] ** 2 for r in rows])
        std = np.sqrt(var)
        z = np.abs(err) / std
        nu = 2 * var.mean(0) ** 2 / var.var(0, ddof=1)
        z2 = np.mean(z**2, axis=0)
        # the log score of N(0, std²) at the error (a proper scoring rule; higher is better),
        # per parameter relative to its sd of errors so the units cancel
        logs = np.mean(-0.5 * (np.log(var / err.var(0)) + z**2), axis=0)
        cells = [
            f"{100 * np.mean(z[:, i] <= 1):3.0f}/{100 * np.mean(z[:, i] <= 2):3.0f} "
            f"{np.median(std[:, i]) / err[:, i].std(ddof=1):4.2f} {nu[i]:5.1f} "
            f"{z2[i]:4.2f} {logs[i]:+5.2f}"
            for i in range(len(names))
        ]
        print(f"{key:12} " + "  ".join(f"{c:>32}" for c in cells))
    return err


def pieces(rows):
    """Per parameter: the white meat's and the batch-means excess's share of the reported
    variance, and the GUM (Welch–Satterthwaite) degrees of freedom of their sum."""
    names = [str(x) for x in rows[0]["names"]]
    W = np.array([np.diag(r["inv"] @ r["W"] @ r["inv"]) * r["scale"] ** 2 for r in rows])
    E = np.array(
        [
            np.diag(r["inv"] @ positive_part(batch_means(r["score"], 10) - r["W"]) @ r["inv"])
            * r["scale"] ** 2
            for r in rows
        ]
    )
    V = W + E
    nu_w = len(rows[0]["score"])
    nu = V**2 / (W**2 / nu_w + E**2 / 9)
    share = E / V
    for i, nm in enumerate(names):
        print(
            f"{nm:4}: excess share median {np.median(share[:, i]):.2f} (quartiles "
            f"{np.quantile(share[:, i], 0.25):.2f}–{np.quantile(share[:, i], 0.75):.2f}; zero in "
            f"{np.mean(share[:, i] < 1e-3) * 100:.0f} %); "
            f"ν_eff (WS) median {np.median(nu[:, i]):.1f}"
        )
    return nu


def tails(rows, nu_nominal=9):
    """z of the reported (bm10) std against N(0,1) and t_ν."""
    names = [str(x) for x in rows[0]["names"]]
    z = np.array([(r["values"] - r["truth"]) / r["std"] for r in rows])
    for i, nm in enumerate(names):
        zi = z[:, i]
        ks_n = stats.kstest(zi, "norm").pvalue
        ks_t = stats.kstest(zi, stats.t(nu_nominal).cdf).pvalue
        # ν of a t fitted to z with unit scale (maximum likelihood)
        grid = np.linspace(1, 200, 400)
        ll = [stats.t(v).logpdf(zi).sum() for v in grid]
        print(
            f"{nm:4}: sd(z) {zi.std(ddof=1):.2f}, kurtosis {stats.kurtosis(zi):+.2f}, "
            f"KS p N(0,1) {ks_n:.2f}, t_{nu_nominal} {ks_t:.2f}; "
            f"ML ν of t(ν) {grid[np.argmax(ll)]:.0f}"
        )


# --- per-parameter window rules (``--rules``) ----------------------------------------------


def autocovariance(u: np.ndarray, lags: int) -> np.ndarray:
    """γ̂_0 … γ̂_lags of the series u (1/n normalization, as in Politis & White 2004)."""
    u = u - u.mean()
    f = np.fft.rfft(u, 2 * len(u))
    return np.fft.irfft(f * np.conj(f))[: lags + 1] / len(u)


def politis_lag(g: np.ndarray, n: int, c: float = 2.0, kn: int = 5) -> int:
    """Politis (2003)'s m̂: the smallest m after which kn consecutive autocorrelations lie
    inside ±c √(log10 n / n) (the implied hypothesis test of Politis & White 2004)."""
    rho = g / g[0]
    band = c * np.sqrt(np.log10(n) / n)
    for m in range(len(rho) - kn - 1):
        if np.all(np.abs(rho[m + 1 : m + 1 + kn]) < band):
            return m
    return len(rho) - kn - 1


def lag_window(k: np.ndarray, M: float, kind: str) -> np.ndarray:
    """λ(k/M): "flat" the trapezoid flat-top of Politis & Romano (1995), "bartlett" 1 − |x|."""
    x = np.abs(k) / M
    if kind == "flat":
        return np.where(x <= 0.5, 1.0, np.clip(2 * (1 - x), 0.0, None))
    return np.clip(1 - x, 0.0, None)


# ∫_{-1}^{1} λ(x)² dx: a lag-window variance with truncation M has ν = n / (M ∫λ²)
# (Priestley 1981, 6.2.3; for the Bartlett window 1.5 n / M, the overlapping batch means' ν).
WINDOW_L2 = {"flat": 4 / 3, "bartlett": 2 / 3}


def white_bias(n: int, M: float, kind: str) -> float:
    """E[estimate] / σ² of a lag-window variance of n white scores (γ̂_k with 1/n and the
    mean removed: E γ̂_0 = σ² (n − 1)/n, E γ̂_k ≈ −σ² (n − k)/n²): 0.85 for the flat-top at
    M = n/10, 0.80 for Bartlett at n/5. Overlapping batch means carry their own correction
    (n²L / ((n − L + 1)(n − L))); a lag window without it reads a white score low."""
    k = np.arange(1, n // 2 + 1)
    return (n - 1) / n - 2 * np.sum(lag_window(k, M, kind) * (n - k)) / n**2


def rule_lag(kind: str, fraction=None, unbiased=True):
    """The variance of u's sum by the lag window ``kind`` with truncation M = ``fraction`` of
    the record (None: Politis's automatic M = 2 m̂), divided by ``white_bias`` when
    ``unbiased``, and its ν."""

    def rule(u):
        n = len(u)
        g = autocovariance(u, n // 2)
        m = min(max(2 * politis_lag(g, n), 1), n // 2) if fraction is None else int(fraction * n)
        lam = lag_window(np.arange(len(g)), m, kind)
        v = n * (g[0] + 2 * np.sum(lam[1:] * g[1:]))
        return v / (white_bias(n, m, kind) if unbiased else 1.0), n / (m * WINDOW_L2[kind]), m

    return rule


def rule_andrews(u):
    """Bartlett with Andrews (1991)'s AR(1) plug-in bandwidth M = 1.1447 (α̂ n)^{1/3},
    α̂ = 4ρ̂² / ((1 − ρ̂)² (1 + ρ̂)²), ρ̂ the lag-1 autocorrelation."""
    n = len(u)
    g = autocovariance(u, n // 2)
    rho = g[1] / g[0]
    M = max(1.1447 * (4 * rho**2 / ((1 - rho) ** 2 * (1 + rho) ** 2) * n) ** (1 / 3), 1.0)
    lam = lag_window(np.arange(len(g)), M, "bartlett")
    v = n * (g[0] + 2 * np.sum(lam[1:] * g[1:])) / white_bias(n, M, "bartlett")
    return v, n / (M * WINDOW_L2["bartlett"]), M


def rule_pw_obm(u):
    """Overlapping batch means with the MSE-optimal batch length of Politis & White (2004,
    corrected by Patton, Politis & White 2009) for the circular block bootstrap, whose
    variance is the overlapping batch means': b = (2 Ĝ² / D̂)^{1/3} n^{1/3}, Ĝ = Σ λ(k/M)|k|γ̂_k,
    D̂ = 4/3 σ̂⁴, from the flat-top pilot with M = 2 m̂."""
    n = len(u)
    g = autocovariance(u, n // 2)
    M = min(max(2 * politis_lag(g, n), 1), n // 2)
    k = np.arange(len(g))
    lam = lag_window(k, M, "flat")
    sigma2 = max(g[0] + 2 * np.sum(lam[1:] * g[1:]), 1e-3 * g[0])
    G = 2 * np.sum(lam[1:] * k[1:] * g[1:])
    b = int(np.clip(round((1.5 * G**2 * n / sigma2**2) ** (1 / 3)), 1, n // 3))
    return overlapping_batch_means(u[:, None], n // b)[0, 0], batch_dof(n // b, True), b


def rule_obm(batches, kurtosis=False):
    """Overlapping batch means over windows of n / ``batches`` steps, ν = 1.5 (B − 1); with
    ``kurtosis`` ν corrected for the window sums' excess kurtosis κ̂, as the variance of a
    sample variance is σ⁴ (2/ν + κ/B)."""

    def rule(u):
        n, L = len(u), len(u) // batches
        nu = batch_dof(batches, True)
        if kurtosis:
            c = np.concatenate([[0.0], np.cumsum(u)])
            s = c[L:] - c[:-L] - L * c[-1] / n
            kappa = np.mean(s**4) / np.mean(s**2) ** 2 - 3
            # κ̂ of ~B independent sums is noisy (sd ≈ √(24/B)) and biased low: measured, this
            # mostly moves ν at random (docs/validation.md); ν is left infinite where the
            # linear-process formula turns negative (κ̂ < −4B/(3(B−1))).
            denom = 2 / nu + kappa / batches
            nu = 2 / denom if denom > 0 else np.inf
        return overlapping_batch_means(u[:, None], batches)[0, 0], nu, L

    return rule


def rule_longer_if_lower(batches):
    """The brief's candidate (b): the long windows' (n / (B/2)) variance and ν where it is
    below the short windows' (the score's autocorrelation turns negative between them)."""

    def rule(u):
        short, long = rule_obm(batches)(u), rule_obm(batches // 2)(u)
        return long if long[0] < short[0] else short

    return rule


def equal_weighted_cosine(score: np.ndarray, B: int) -> np.ndarray:
    """The covariance of the score's sum from its projections on the B lowest cosines,
    n/B Σ_j Λ_j Λ_jᵀ, Λ_j = √(2/n) Σ_t cos(π j (t − ½)/n) s_t (Müller 2007; the "EWC"
    estimator of Lazarus, Lewis, Stock & Watson 2018): positive semidefinite, and for a
    Gaussian score exactly a Wishart with B degrees of freedom, so ν_M = B."""
    n = len(score)
    t = np.arange(n) + 0.5
    basis = np.sqrt(2.0 / n) * np.cos(np.pi * np.outer(np.arange(1, B + 1), t) / n)
    lam = basis @ np.asarray(score, float).reshape(n, -1)
    return n * (lam.T @ lam) / B


def per_parameter(r, rule):
    """Each parameter's variance max(M_i, W_i) from its own projected score and window, and
    ν_eff (``effective_dof``) with the window's ν."""
    n = len(r["score"])
    u = r["score"] @ r["inv"]
    W = np.diag(r["inv"] @ r["W"] @ r["inv"])
    out = [rule(u[:, i]) for i in range(u.shape[1])]
    M = np.array([o[0] for o in out])
    V = np.maximum(M, W)
    nu = np.array([effective_dof(V[i], W[i], o[1], n) for i, o in enumerate(out)])
    return V * r["scale"] ** 2, nu, np.array([o[2] for o in out])


def matrix_rule(meat):
    """The reported form: V = (TᵀT)⁻¹ (W + (M − W)₊) (TᵀT)⁻¹, M = ``meat(score)`` a matrix
    estimate with ν_M = ``meat.nu``."""

    def est(r):
        n = len(r["score"])
        M, nu_m = meat(r["score"])
        inv = r["inv"]
        V = np.diag(inv @ (r["W"] + positive_part(M - r["W"])) @ inv)
        nu = effective_dof(V, np.diag(inv @ r["W"] @ inv), nu_m, n)
        return V * r["scale"] ** 2, nu, np.full(len(V), n // 10)

    return est


RULES = {
    "current: OBM n/10, (M−W)₊": matrix_rule(
        lambda s: (overlapping_batch_means(s, 10), batch_dof(10, True))
    ),
    "OBM n/10 per parameter": lambda r: per_parameter(r, rule_obm(10)),
    "OBM n/10, ν for κ̂": lambda r: per_parameter(r, rule_obm(10, kurtosis=True)),
    "OBM n/5 per parameter": lambda r: per_parameter(r, rule_obm(5)),
    "(b) n/5 where lower": lambda r: per_parameter(r, rule_longer_if_lower(10)),
    "flat-top, auto 2m̂": lambda r: per_parameter(r, rule_lag("flat")),
    "PW(PPW) OBM b*": lambda r: per_parameter(r, rule_pw_obm),
    "Andrews AR(1) Bartlett": lambda r: per_parameter(r, rule_andrews),
    "flat-top M = n/10": lambda r: per_parameter(r, rule_lag("flat", 0.1)),
    "Bartlett M = n/5": lambda r: per_parameter(r, rule_lag("bartlett", 0.2)),
    "flat-top M = n/10, no white correction": lambda r: per_parameter(
        r, rule_lag("flat", 0.1, unbiased=False)
    ),
    "Bartlett M = n/5, no white correction": lambda r: per_parameter(
        r, rule_lag("bartlett", 0.2, unbiased=False)
    ),
    "EWC, B = 10, (M−W)₊": matrix_rule(lambda s: (equal_weighted_cosine(s, 10), 10.0)),
    "EWC, B = 10 per parameter": lambda r: per_parameter(
        r, lambda u: (equal_weighted_cosine(u, 10)[0, 0], 10.0, 10)
    ),
    "lugsail 2·OBM(n/10) − OBM(n/20), (M−W)₊": matrix_rule(
        lambda s: (
            2 * overlapping_batch_means(s, 10) - overlapping_batch_means(s, 20),
            0.5 * batch_dof(10, True),
        )
    ),
}


def rules(rows, label):
    """Within 1 / 2 reported (expanded) std per class, median |z|, and the log score of
    N(0, std²) at the error per dataset minus the current rule's (mean ± its standard error
    over the datasets), median ν_eff and window length."""
    err = np.array([r["values"] - r["truth"] for r in rows])
    names = [str(x) for x in rows[0]["names"]]
    print(f"\n== {label}: {len(rows)} datasets (within 1 / 2 std, median |z|, Δ log score, ν, L)")
    base = None
    for key, est in RULES.items():
        out = [est(r) for r in rows]
        V, nu, L = (np.array([o[j] for o in out]) for j in range(3))
        std = np.sqrt(V) * coverage_factor(nu)
        z = np.abs(err) / std
        logs = -0.5 * (np.log(std**2 / err.var(0)) + z**2)
        base = logs if base is None else base
        d = logs - base
        se = d.std(0, ddof=1) / np.sqrt(len(d))
        cells = [
            f"{100 * np.mean(z[:, i] <= 1):3.0f}/{100 * np.mean(z[:, i] <= 2):3.0f} "
            f"{np.median(z[:, i]):.2f} {d[:, i].mean():+.3f}±{se[i]:.3f}"
            f" ν{np.median(nu[:, i]):4.0f} L{np.median(L[:, i]):4.0f}"
            for i in range(len(names))
        ]
        print(f"{key:42} " + " | ".join(cells))


if __name__ == "__main__":
    if sys.argv[1] == "--rules":
        for folder in sys.argv[2:]:
            rules(load(folder), folder)
        sys.exit()
    for folder in sys.argv[1:]:
        rows = load(folder)
        table(rows, folder)
        pieces(rows)
        tails(rows)
