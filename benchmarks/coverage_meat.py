"""Meat estimators of the tree's std compared on the same fits (issue 24): reads the
per-seed pieces of ``benchmarks/coverage_pieces.py`` and prints, per estimator and parameter
class, the fraction within 1 and 2 std, and per parameter the std's own spread over the
datasets as degrees of freedom (one motion: the errors' variance is the same in every
dataset, so ν̂ = 2 E[V]² / Var(V) of the reported variance V is the variance estimate's
degrees of freedom).

    python benchmarks/coverage_meat.py DIR [DIR ...]
"""

from __future__ import annotations

import glob
import os
import sys

import numpy as np
from scipy import stats

from physid.estimation.uncertainty import batch_means, positive_part


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


def obm(score, length):
    """Overlapping batch means of the score's sum, windows of ``length`` steps."""
    n = len(score)
    c = np.concatenate([np.zeros((1, score.shape[1])), np.cumsum(score, axis=0)])
    sums = c[length:] - c[:-length]  # n − L + 1 windows
    centred = sums / length - c[-1] / n
    return n**2 * length / ((n - length + 1) * (n - length)) * centred.T @ centred


def bartlett(score, lags):
    """Newey–West: Γ0 + Σ_j (1 − j/(L+1)) (Γj + Γjᵀ) of the score's sum."""
    s = score - score.mean(axis=0)
    out = s.T @ s
    for j in range(1, lags + 1):
        g = s[j:].T @ s[:-j]
        out += (1 - j / (lags + 1)) * (g + g.T)
    return out


def variants(n):
    out = {"white": lambda d: d["W"]}
    for B in (5, 10, 20, 30, 50):
        out[f"bm{B}"] = lambda d, B=B: d["W"] + positive_part(batch_means(d["score"], B) - d["W"])
    for B in (5, 10, 20, 30):
        out[f"obm{B}"] = lambda d, B=B: d["W"] + positive_part(obm(d["score"], n // B) - d["W"])
    for L in (25, 50, 75, 150, 300):
        out[f"nw{L}"] = lambda d, L=L: d["W"] + positive_part(bartlett(d["score"], L) - d["W"])
    out["bm10 raw"] = lambda d: batch_means(d["score"], 10)
    out["obm10 raw"] = lambda d: obm(d["score"], n // 10)
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
    for key, meat in variants(n).items():
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


if __name__ == "__main__":
    for folder in sys.argv[1:]:
        rows = load(folder)
        table(rows, folder)
        pieces(rows)
        tails(rows)
