"""How the hinge compliance ε sets the iteration count of the 13-parameter Furuta fit, and two
ways of starting the fit nearer its end that do not shorten it (issue 3's < 2 s target).

The problem is ``bench_lm_vs_scipy.py --problem furuta13`` (the simulated swing-up, n = 2001
steps at h = 1e-3 s). Its estimator uses the simulation's hinge compliance, ε_lin = ε_rot =
1e-6 (m/N, rad/N m). SPOOK's inverse dynamics turns a constraint violation into an impulse
with the gain 1/Σ, Σ = 4εγ/h² (2.10), so the impulse residuals bend at a rate ∝ 1/ε along the
states' constrained directions. That curvature is what Gauss–Newton leaves out.

1. **ε sweep.** The same data fitted with the estimator's ε = 1e-6, 1e-5 and 1e-4: warm-up +
   joint iterations, final cost, wall time and each parameter's error against the truth.
2. **ε continuation.** Fit with ε = 1e-4 first, then from its (X, θ) with ε = 1e-6.
3. **Coarse-grid start** (``--coarse H``). Fit on a grid of step H first, interpolate its states
   to h (positions and velocities linearly, quaternions by normalized linear interpolation,
   velocities at the mid-step times (4.3) refers them to), then fit on h from there with the
   coarse θ (which is in h's parameter units: both problems share one scale).

    .venv/bin/python benchmarks/bench_lm_compliance.py [--eps 1e-6 1e-5 1e-4] [--coarse 4e-3]

Each fit runs twice in one process; the second run is timed (compilation excluded).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

from bench_lm_vs_scipy import furuta13_problem, furuta13_recording  # noqa: E402

from physid.estimation.lm import levenberg_marquardt  # noqa: E402


def problem(rec, eps: float, h: float | None = None):
    """(problem, X0, θ0, settings) with the estimator's hinge compliance ε (both rows, both
    hinges) and, optionally, another step h (s)."""
    fixed = {f"eps_{k}{i}": str(eps) for k in ("lin", "rot") for i in (1, 2)}
    method = {} if h is None else {"h": {"value": h, "unit": "s"}}
    return furuta13_problem(rec=rec, fixed=fixed, method=method)


def fit(prob, X, theta, settings):
    """(result, seconds) of the second of two identical runs."""
    levenberg_marquardt(prob, X, theta, settings)
    t0 = time.perf_counter()
    res = levenberg_marquardt(prob, X, theta, settings)
    return res, time.perf_counter() - t0


def summary(label: str, prob, res, seconds: float, truth: dict) -> None:
    chi = res.theta * prob.scale
    errors = " ".join(
        f"{k} {100 * (v / truth[k] - 1):+.1f}%" for k, v in zip(prob.names, chi, strict=True)
    )
    print(
        f"{label}: {res.warmup_iterations} + {res.iterations} iterations, cost {res.cost:.6e}, "
        f"{seconds:.2f} s ({res.reason})\n    {errors}",
        flush=True,
    )


def two_stages(label: str, first, states, prob, settings, truth: dict) -> None:
    """Fit ``first`` = (problem, X0, θ0, settings), then ``prob`` from ``states`` of its X
    and its θ; print the second stage's summary and the first stage's iterations."""
    res1, sec1 = fit(*first)
    res, sec2 = fit(prob, states(res1.X), res1.theta, settings)
    summary(label, prob, res, sec1 + sec2, truth)
    print(f"    first stage {res1.warmup_iterations} + {res1.iterations} iterations, {sec1:.2f} s")


def refined(X, h_coarse: float, h: float, n: int):
    """States of a grid of step ``h_coarse`` interpolated to n steps of ``h``."""
    r, e, v = (np.asarray(a) for a in X)
    t = np.arange(n) * h

    def weights(s, size):
        i = np.clip(np.floor(s).astype(int), 0, size - 2)
        return i, np.clip(s - i, 0.0, 1.0)[:, None, None]

    i, w = weights(t / h_coarse, len(r))
    r_f = (1 - w) * r[i] + w * r[i + 1]
    e1 = e[i + 1] * np.sign(np.sum(e[i] * e[i + 1], axis=-1, keepdims=True))
    e_f = (1 - w) * e[i] + w * e1
    e_f /= np.linalg.norm(e_f, axis=-1, keepdims=True)
    # v_k is the velocity of the step into q_k (4.3): it belongs to the time (k − ½) h.
    j, wv = weights((t - 0.5 * h) / h_coarse + 0.5, len(v))
    v_f = (1 - wv) * v[j] + wv * v[j + 1]
    return tuple(jnp.asarray(a) for a in (r_f, e_f, v_f))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--eps", type=float, nargs="+", default=[1e-6, 1e-5, 1e-4])
    ap.add_argument("--soft", type=float, default=1e-4, help="first ε of the continuation")
    ap.add_argument("--coarse", type=float, default=4e-3, help="step of the coarse grid (s)")
    args = ap.parse_args()
    rec = furuta13_recording()
    truth = rec.truth
    exact = truth["eps_lin1"]  # the simulation's compliance (all four are equal)
    assert all(truth[f"eps_{k}{i}"] == exact for k in ("lin", "rot") for i in (1, 2))
    for eps in args.eps:
        prob, X0, th0, st = problem(rec, eps)
        res, sec = fit(prob, X0, th0, st)
        summary(f"ε = {eps:g}", prob, res, sec, truth)

    prob, _, _, st = problem(rec, exact)
    soft = problem(rec, args.soft)
    two_stages(f"ε = {args.soft:g}, then {exact:g}", soft, lambda X: X, prob, st, truth)
    n = np.shape(prob.y)[0]
    coarse = problem(rec, exact, args.coarse)
    refine = lambda X: refined(X, args.coarse, prob.h, n)  # noqa: E731
    two_stages(f"h = {args.coarse:g} s, then {prob.h:g} s", coarse, refine, prob, st, truth)


if __name__ == "__main__":
    main()
