"""Our structured LM vs scipy.optimize.least_squares(method="trf", jac_sparsity=...) on the same
residuals (Marklund et al. (3.15)), start and box (issue 3's benchmark).

Problems:
- ``pendulum``: 1 s release of the Section 4.2 pendulum, J, b, rμ free (self-consistent data).
- ``furuta13``: the Section 4.6 Furuta identification — gain, five inertias, four friction
  coefficients, tilt — on the 2 s simulated swing-up of ``rigs.pipeline.sample.SWING_UP`` (h = 1e-4
  truth, 4096-count encoders, estimator h = 1e-3: n = 2001 steps), Table 1 initial values.

scipy works in a fixed chart: states X0 ⊞ δ with δ ∈ R^{n·d}, parameters θ with the same
scaling and box. It gets the exact block sparsity pattern of the Jacobian and builds it by
grouped finite differences; its trust-region subproblem is solved by LSMR on the sparse
Jacobian (memory linear in n). Compilation is excluded for both (one warm-up run each). We
report the median over ``--repeats`` runs of our wall time to the common cost (the worse of
the two final costs, +1 %), and scipy's (one run; it is stopped after ``--scipy-limit`` s).

``--memory`` instead runs our LM alone on the furuta13 problem at n = 2000, 8000 and 32000
steps, each in a fresh process, and prints peak resident memory and time per iteration.

    .venv/bin/python benchmarks/bench_lm_vs_scipy.py [--problem pendulum|furuta13]
        [--repeats 5] [--scipy-limit 600] [--memory]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import replace

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse as sp
from scipy.optimize import least_squares

from physid.estimation.hinged_problem import HingedProblem
from physid.estimation.initialize import initial_states, smooth_angles
from physid.estimation.lm import LMSettings, levenberg_marquardt
from physid.rigs.models import pendulum
from physid.rigs.models.hinged import run_simulation
from physid.rigs.models.identify_hinged import enable_compilation_cache
from physid.spec import load_spec


def pendulum_problem(duration: float = 1.0):
    spec = load_spec("pendulum")
    rig = pendulum.build(spec)
    h = 1e-3
    n = int(round(duration / h))
    truth = dict(rig.values, J=0.0039, b=2e-4, mu=1.8e-3)
    _, _, ang = run_simulation(rig, truth, [2.0], np.zeros(n), h)
    y = ang + np.random.default_rng(0).normal(0, 1e-5, ang.shape)
    names = ("J", "b", "mu")
    ps = spec.parameters
    init = np.array([ps[k].initial for k in names])
    scale = np.abs(init)
    lo = np.array([ps[k].lower for k in names]) / scale
    hi = np.array([ps[k].upper for k in names]) / scale
    prob = HingedProblem(rig, names, scale, lo, hi, y, np.ones_like(y), np.zeros(n), h, 100.0)
    X0 = initial_states(rig, smooth_angles(np.arange(n + 1) * h, y), h)
    return prob, X0, init / scale, LMSettings(tau=1e-9, max_iter=80)


def furuta13_recording(duration: float = 2.0):
    """The simulated swing-up of Section 4.6 (``rigs.pipeline.synthetic.Recording``, with
    its truth)."""
    from physid.rigs.pipeline.sample import SWING_UP
    from physid.rigs.pipeline.synthetic import FURUTA_SECTION_4_6_TRUTH, quantizer, record

    scenario = replace(SWING_UP, duration=duration)
    return record(load_spec("furuta"), scenario, quantizer(4096), FURUTA_SECTION_4_6_TRUTH)


def furuta13_problem(duration: float = 2.0, rec=None, fixed=None, method=None):
    """(problem, X0, θ0, settings) of the 13-parameter fit of ``rec`` (default: a new
    recording of ``duration`` s); ``fixed`` replaces fixed values as ``physid --set`` does
    ({"eps_lin1": "1e-5"}), ``method`` adds [method] settings."""
    from physid.rigs.pipeline.synthetic import (
        FURUTA_SECTION_4_6,
        FURUTA_SECTION_4_6_METHOD,
        recording_problem,
    )
    from physid.spec import with_overrides, with_parameters

    rec = furuta13_recording(duration) if rec is None else rec
    spec = with_overrides(with_parameters(rec.spec, FURUTA_SECTION_4_6), fixed or {})
    return recording_problem(spec, rec.log, {**FURUTA_SECTION_4_6_METHOD, **(method or {})})


def sparsity(n: int, d: int, p: int, md: int, mo: int, m0: int) -> sp.csr_matrix:
    """Block pattern of ∂Δz/∂(δ, θ): dyn rows touch x_k, x_{k+1}, θ; obs rows x_k; init x_0, θ."""
    k = np.arange(n - 1)[:, None, None]
    dyn_r = k * md + np.arange(md)[None, :, None]
    dyn_c = np.concatenate(
        [k * d + np.arange(2 * d), np.broadcast_to(n * d + np.arange(p), (n - 1, 1, p))], axis=2
    )
    dyn_r, dyn_c = np.broadcast_arrays(dyn_r, dyn_c)
    off = (n - 1) * md
    k = np.arange(n)[:, None, None]
    obs_r, obs_c = np.broadcast_arrays(
        off + k * mo + np.arange(mo)[None, :, None], k * d + np.arange(d)[None, None, :]
    )
    off += n * mo
    init_r, init_c = np.broadcast_arrays(
        off + np.arange(m0)[:, None], np.concatenate([np.arange(d), n * d + np.arange(p)])[None]
    )
    rows = np.concatenate([a.ravel() for a in (dyn_r, obs_r, init_r)])
    cols = np.concatenate([a.ravel() for a in (dyn_c, obs_c, init_c)])
    return sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(off + m0, n * d + p))


class _TimeUp(Exception):
    pass


def run_ours(prob, X0, theta0, settings):
    """(result, [(seconds, cost) after each iteration], total seconds)."""
    stamps = []
    t0 = time.perf_counter()
    res = levenberg_marquardt(
        prob, X0, theta0, settings, lambda i, c, a, th: stamps.append((time.perf_counter() - t0, c))
    )
    return res, stamps, time.perf_counter() - t0


def run_scipy(prob, X0, theta0, limit: float):
    """scipy's final cost, [(seconds, cost) per residual evaluation], θ, finished flag."""
    n, d, p = prob.y.shape[0], prob.d, len(theta0)
    model, args = prob.model, prob._args

    @jax.jit
    def flat(z):
        dX = z[: n * d].reshape(n, d)
        dyn, obs, init = model._residuals(model._retract_fn(X0, dX), z[n * d :], args)
        return jnp.concatenate([dyn.ravel(), obs.ravel(), init.ravel()])

    z0 = np.concatenate([np.zeros(n * d), theta0])
    r0 = np.asarray(flat(z0))
    dyn_rows, obs_rows = 12 * prob.nb, prob.y.shape[1]
    m0 = len(r0) - (n - 1) * dyn_rows - n * obs_rows
    pattern = sparsity(n, d, p, dyn_rows, obs_rows, m0)
    lo = np.concatenate([np.full(n * d, -np.inf), prob.lower])
    hi = np.concatenate([np.full(n * d, np.inf), prob.upper])
    trace = []
    t1 = time.perf_counter()

    def fun(z):
        r = np.asarray(flat(z))
        trace.append((time.perf_counter() - t1, float(r @ r)))
        if trace[-1][0] > limit:
            raise _TimeUp
        return r

    try:
        ref = least_squares(
            fun, z0, jac_sparsity=pattern, bounds=(lo, hi), method="trf", x_scale="jac",
            ftol=1e-12, xtol=1e-12, gtol=1e-12, max_nfev=200 * (2 * d + p),
        )  # fmt: skip
        return 2 * ref.cost, trace, ref.x[n * d :], True  # scipy's cost is ½‖r‖²
    except _TimeUp:
        return min(c for _, c in trace), trace, None, False


def compare(problem: str, repeats: int, limit: float) -> None:
    prob, X0, theta0, settings = pendulum_problem() if problem == "pendulum" else furuta13_problem()
    n, d, p = prob.y.shape[0], prob.d, len(theta0)
    print(f"{problem}: n = {n} steps, d = {d}, p = {p}, unknowns = {n * d + p}", flush=True)
    run_ours(prob, X0, theta0, replace(settings, max_iter=1))  # compile
    runs = []
    for i in range(repeats):
        res, stamps, total = run_ours(prob, X0, theta0, settings)
        runs.append((res, stamps, total))
        print(
            f"ours run {i + 1}: cost {res.cost:.6e}, {res.iterations} it "
            f"(+{res.warmup_iterations} states-only), {total:.2f} s, {res.reason}",
            flush=True,
        )
    ours = runs[0][0]
    cost_scipy, trace, theta_scipy, finished = run_scipy(prob, X0, theta0, limit)
    status = "finished" if finished else f"stopped at the {limit:g} s limit"
    print(
        f"scipy: cost {cost_scipy:.6e} after {len(trace)} evaluations, "
        f"{trace[-1][0]:.1f} s, {status}"
    )
    target = max(ours.cost, cost_scipy) * 1.01  # "the same final cost (±1 %)"
    ours_hit = [next((t for t, c in s if c <= target), np.nan) for _, s, _ in runs]
    t_ours = statistics.median(ours_hit)
    t_scipy = next((t for t, c in trace if c <= target), np.nan)
    print(
        f"time to cost {target:.6e}: ours median {t_ours:.2f} s "
        f"(runs {', '.join(f'{t:.2f}' for t in ours_hit)}), scipy {t_scipy:.2f} s"
    )
    if np.isfinite(t_scipy):
        print(f"ratio scipy / ours: {t_scipy / t_ours:.1f}x")
    else:
        print(f"scipy never reached it: ratio > {trace[-1][0] / t_ours:.1f}x")
    print(f"ours total median: {statistics.median(t for _, _, t in runs):.2f} s")
    print("ours θ  :", np.array2string(ours.theta * prob.scale, precision=5))
    if theta_scipy is not None:
        print("scipy θ :", np.array2string(theta_scipy * prob.scale, precision=5))


def memory_one(n_steps: int) -> None:
    """Child process: 3 LM iterations of furuta13 at n_steps; prints a JSON line."""
    prob, X0, theta0, settings = furuta13_problem(n_steps / 1000.0)
    levenberg_marquardt(prob, X0, theta0, replace(settings, max_iter=1, warmup_iter=0))
    t0 = time.perf_counter()
    res = levenberg_marquardt(prob, X0, theta0, replace(settings, max_iter=3, warmup_iter=0))
    per_it = (time.perf_counter() - t0) / max(res.iterations, 1)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kB → MB on Linux
    print(json.dumps({"n": int(prob.y.shape[0]), "peak_rss_mb": rss, "s_per_iteration": per_it}))


def memory(sizes=(2000, 8000, 32000)) -> None:
    print("furuta13, our LM alone, fresh process per size (peak RSS includes JAX and XLA)")
    for n in sizes:
        out = subprocess.run(
            [sys.executable, __file__, "--memory-child", str(n)],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        row = json.loads(out.stdout.strip().splitlines()[-1])
        print(
            f"n = {row['n']:6d}: peak RSS {row['peak_rss_mb']:8.0f} MB, "
            f"{row['s_per_iteration']:.2f} s per iteration",
            flush=True,
        )


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problem", choices=["pendulum", "furuta13"], default="pendulum")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--scipy-limit", type=float, default=600.0)
    ap.add_argument("--memory", action="store_true")
    ap.add_argument("--memory-child", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()
    enable_compilation_cache()
    if a.memory_child:
        memory_one(a.memory_child)
    elif a.memory:
        memory()
    else:
        compare(a.problem, a.repeats, a.scipy_limit)
