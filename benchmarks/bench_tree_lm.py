"""The generalized-coordinate LM (``[method] estimator = "tree"``) on the 13-parameter Furuta
identification of Marklund et al., Section 4.6, next to the SPOOK LM and
``scipy.optimize.least_squares(method="trf", jac_sparsity=…)`` (issue 22's benchmark).

Data (``--problem``), the same recording for all three; parameters, start values and box of
``rigs.pipeline.synthetic.FURUTA_SECTION_4_6``:

- ``furuta13`` (default): the simulated 2 s swing-up of ``bench_lm_vs_scipy.
  furuta13_recording`` (SPOOK at h = 1e-4 s with Table G.5's compliant hinges and
  load-dependent dry friction, 4096-count encoders, 1 kHz): outside the tree's model;
- ``furuta13-tree``: the same swing-up simulated by the tree estimator's own integrator at
  1e-4 s (``tests/estimation/tree_furuta13.py``): the model-consistent case, encoder σ_y =
  the quantization.

- tree: ``rigs.models.identify_tree`` (states (q, p) per step, d = 4), estimator h = 1e-3 s,
  default process noise, the default warm start (``estimation.tree_warm_start.tree_start``,
  timed with the fit) and LM to its own stop; ``--no-warm-start``: LM from Table 1's values;
- spook: the SPOOK LM of ``bench_lm_vs_scipy.furuta13_problem`` (d = 24) to its own stop;
- scipy: TRF on the tree problem's residuals (same box and weights), from the tree LM's own
  start (after the warm start: scipy is spared that part, which only favours it), the exact
  block sparsity pattern, grouped finite differences, LSMR; stopped after ``--scipy-limit``
  s of wall time. Its time is the time to reach the tree LM's final cost (+1 %), or, where
  it never does, the limit: then the ratio printed is a lower bound (">"). Wall and process
  CPU time both.

Compilation is excluded (one warm-up run of each before the timed ones); medians over
``--repeats`` runs. ``--memory`` runs the tree LM alone at n = 2000, 8000 and 32000 steps
(each in a fresh process): peak RSS and time per iteration. ``--scaling``: the
linearization's time per step at n and 4n steps of identical work (see ``scaling``). The last
line reads ``<problem>: tree <s> s, spook <s> s, ratio <r>`` (wall-clock medians; the line
before it gives the CPU-time medians, which a loaded machine inflates far less).

    .venv/bin/python benchmarks/bench_tree_lm.py [--problem furuta13] [--repeats 5]
        [--scipy-limit 120] [--no-spook] [--no-warm-start] [--memory] [--scaling]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse as sp
from scipy.optimize import least_squares

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "tests" / "estimation"))
from bench_lm_vs_scipy import furuta13_problem, furuta13_recording  # noqa: E402

from physid.estimation.lm import levenberg_marquardt  # noqa: E402
from physid.estimation.tree_warm_start import tree_start  # noqa: E402
from physid.rigs.models.furuta import tree_rig  # noqa: E402
from physid.rigs.models.identify_hinged import enable_compilation_cache  # noqa: E402
from physid.rigs.models.identify_tree import (  # noqa: E402
    build_problem,
    problem_lm_settings,
    series_on_grid,
    tree_settings,
)
from physid.rigs.pipeline.synthetic import FURUTA_SECTION_4_6  # noqa: E402
from physid.spec import with_parameters  # noqa: E402


def _load() -> str:
    """The 1-minute load average (other processes on the machine)."""
    return f"{os.getloadavg()[0]:.1f}"


def tree_problem(rec):
    """(problem, X0, θ0, LMSettings, names, truth) of the tree fit of the recording."""
    spec = with_parameters(rec.spec, FURUTA_SECTION_4_6)
    spec = replace(spec, method={**spec.method, "estimator": "tree"})
    rig = tree_rig(spec)
    settings = tree_settings(spec)
    series = series_on_grid(rec.log, rig, settings["h"], "furuta13")
    names = list(spec.parameters)
    problem, X0, theta0, _ = build_problem(rig, spec, names, [series], settings)
    theta0 = np.clip(theta0, problem.lower, problem.upper)
    return problem, X0, theta0, problem_lm_settings(problem, settings, theta0)


def timed(prob, X0, theta0, settings, warm: bool = False):
    """(result, [(s, cost)] per iteration, wall s, process CPU s) of one LM run; ``warm``:
    from ``tree_start`` (the tree estimator's default warm start), timed with it."""
    stamps = []
    t0, c0 = time.perf_counter(), time.process_time()
    if warm:
        start = tree_start(prob, X0, theta0)
        X0, theta0 = start.X, start.theta
    res = levenberg_marquardt(
        prob, X0, theta0, settings, lambda i, c, a, th: stamps.append((time.perf_counter() - t0, c))
    )
    return res, stamps, time.perf_counter() - t0, time.process_time() - c0


def run_scipy(prob, X0, theta0, limit: float):
    """scipy's [(wall s, CPU s, cost)] per residual evaluation, and its final θ (None if
    stopped at ``limit`` s of wall time)."""
    n, d, p = prob.y.shape[0], prob.d, len(theta0)
    model, args = prob.model, prob._args

    @jax.jit
    def flat(z):
        dyn, obs, _ = model._residuals(X0 + z[: n * d].reshape(n, d), z[n * d :], args)
        return jnp.concatenate([dyn.ravel(), obs.ravel()])

    z0 = np.concatenate([np.zeros(n * d), theta0])
    np.asarray(flat(z0))  # compile
    md, mo = d, prob.y.shape[1]
    k = np.arange(n - 1)[:, None, None]
    dyn_r, dyn_c = np.broadcast_arrays(
        k * md + np.arange(md)[None, :, None],
        np.concatenate(
            [k * d + np.arange(2 * d), np.broadcast_to(n * d + np.arange(p), (n - 1, 1, p))], 2
        ),
    )
    k = np.arange(n)[:, None, None]
    obs_r, obs_c = np.broadcast_arrays(
        (n - 1) * md + k * mo + np.arange(mo)[None, :, None], k * d + np.arange(d)[None, None, :]
    )
    rows = np.concatenate([dyn_r.ravel(), obs_r.ravel()])
    cols = np.concatenate([dyn_c.ravel(), obs_c.ravel()])
    shape = ((n - 1) * md + n * mo, n * d + p)
    pattern = sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=shape)
    lo = np.concatenate([np.full(n * d, -np.inf), prob.lower])
    hi = np.concatenate([np.full(n * d, np.inf), prob.upper])
    trace, t1, c1 = [], time.perf_counter(), time.process_time()

    class TimeUp(Exception):
        pass

    def fun(z):
        r = np.asarray(flat(z))
        trace.append((time.perf_counter() - t1, time.process_time() - c1, float(r @ r)))
        if trace[-1][0] > limit:
            raise TimeUp
        return r

    try:
        out = least_squares(
            fun, z0, jac_sparsity=pattern, bounds=(lo, hi), method="trf", x_scale="jac",
            ftol=1e-12, xtol=1e-12, gtol=1e-12, max_nfev=200 * (2 * d + p),
        )  # fmt: skip
        return trace, out.x[n * d :]
    except TimeUp:
        return trace, None


PROBLEMS = ("furuta13", "furuta13-tree")


def recording(problem: str, duration: float = 2.0):
    """The swing-up recording of ``problem``: "furuta13", SPOOK's simulation (compliant
    hinges, load-dependent friction); "furuta13-tree", the tree integrator's own (sub-stepped,
    the model the tree estimator fits; ``tests/estimation/tree_furuta13.py``)."""
    if problem == "furuta13-tree":
        from tree_furuta13 import consistent_recording

        return consistent_recording(duration)
    return furuta13_recording(duration)


def _medians(runs) -> tuple[float, float]:
    return statistics.median(r[2] for r in runs), statistics.median(r[3] for r in runs)


def compare(problem: str, repeats: int, limit: float, spook: bool, warm: bool = True) -> None:
    enable_compilation_cache()
    rec = recording(problem)
    truth = rec.truth
    prob, X0, theta0, settings = tree_problem(rec)
    n, d, p = prob.y.shape[0], prob.d, len(theta0)
    print(f"{problem} tree: n = {n} steps, d = {d}, p = {p}, unknowns = {n * d + p}, warm "
          f"start {'on' if warm else 'off'}; load {_load()}", flush=True)  # fmt: skip
    timed(prob, X0, theta0, replace(settings, max_iter=1), warm)  # compile
    runs = [timed(prob, X0, theta0, settings, warm) for _ in range(repeats)]
    for i, (res, _, total, cpu) in enumerate(runs):
        print(f"tree run {i + 1}: cost {res.cost:.6e}, {res.iterations} it, {total:.3f} s wall, "
              f"{cpu:.3f} s CPU, {res.reason}; load {_load()}", flush=True)  # fmt: skip
    t_tree, c_tree = _medians(runs)
    res = runs[0][0]
    values = res.theta * prob.scale
    print("tree values vs truth:")
    for k, v in zip(prob.names, values, strict=True):
        tv = truth[k]
        rel = f"{(v - tv) / tv:+.2%}" if tv else f"{v - tv:+.3g} (abs)"
        print(f"  {k:7s} {v:.6g} (truth {tv:.6g}): {rel}")
    t_spook = c_spook = float("nan")
    if spook:
        sprob, sX0, stheta0, ssettings = furuta13_problem(rec=rec)
        timed(sprob, sX0, stheta0, replace(ssettings, max_iter=1, warmup_iter=0))  # compile
        sruns = [timed(sprob, sX0, stheta0, ssettings) for _ in range(repeats)]
        for i, (r, _, total, cpu) in enumerate(sruns):
            print(f"spook run {i + 1}: cost {r.cost:.6e}, {r.iterations} it "
                  f"(+{r.warmup_iterations} states-only), {total:.3f} s wall, {cpu:.3f} s CPU; "
                  f"load {_load()}", flush=True)  # fmt: skip
        t_spook, c_spook = _medians(sruns)
    if limit > 0:
        sX, stheta = X0, theta0
        if warm:
            start = tree_start(prob, X0, theta0)
            sX, stheta = start.X, start.theta
        trace, _ = run_scipy(prob, sX, stheta, limit)
        target = res.cost * 1.01
        hit = next(((t, c) for t, c, f in trace if f <= target), None)
        best = min(f for _, _, f in trace)
        if hit is None:
            wall, cpu = trace[-1][:2]
            print(f"scipy TRF: best cost {best:.6e} after {len(trace)} evaluations in "
                  f"{wall:.1f} s wall / {cpu:.1f} s CPU, never reached {target:.6e}: ratio > "
                  f"{wall / t_tree:.0f}x (wall), > {cpu / c_tree:.0f}x (CPU); "
                  f"load {_load()}")  # fmt: skip
        else:
            print(f"scipy TRF: reached {target:.6e} at {hit[0]:.1f} s wall / {hit[1]:.1f} s CPU: "
                  f"ratio {hit[0] / t_tree:.0f}x (wall), {hit[1] / c_tree:.0f}x (CPU); "
                  f"load {_load()}")  # fmt: skip
    print(f"medians of {repeats}, CPU: tree {c_tree:.3f} s, spook {c_spook:.3f} s, "
          f"ratio {c_spook / c_tree:.1f}")  # fmt: skip
    print(f"{problem}: tree {t_tree:.3f} s, spook {t_spook:.3f} s, ratio {t_spook / t_tree:.1f}")


def memory_one(n_steps: int) -> None:
    rec = furuta13_recording(n_steps / 1000.0)
    prob, X0, theta0, settings = tree_problem(rec)
    timed(prob, X0, theta0, replace(settings, max_iter=1))
    res, _, total, cpu = timed(prob, X0, theta0, replace(settings, max_iter=3))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    it = max(res.iterations, 1)
    print(json.dumps({"n": int(prob.y.shape[0]), "peak_rss_mb": rss, "iterations": it,
                      "s_per_iteration": total / it, "cpu_s_per_iteration": cpu / it}))  # fmt: skip


def scaling(reps=(1, 4), repeats: int = 5) -> None:
    """Time per step of the linearization at n and 4n steps of IDENTICAL work: the 2 s
    recording given 1× and 4× as separate logs (one chain, segments), so nothing but n
    changes. One vmap over all steps against chunks of ``LINEARIZE_CHUNK`` steps, in one
    process, interleaved; wall and process CPU time (min of ``repeats``; the CPU time is what
    a loaded machine does not inflate)."""
    from physid.estimation.tree_problem import LINEARIZE_CHUNK, _Model

    enable_compilation_cache()
    rec = furuta13_recording()
    spec = with_parameters(rec.spec, FURUTA_SECTION_4_6)
    spec = replace(spec, method={**spec.method, "estimator": "tree"})
    rig, settings = tree_rig(spec), tree_settings(spec)
    series = series_on_grid(rec.log, rig, settings["h"], "furuta13")
    probs = []
    for r in reps:
        prob, X0, th0, _ = build_problem(rig, spec, list(spec.parameters), [series] * r, settings)
        th0 = np.clip(th0, prob.lower, prob.upper)
        probs.append((prob, jnp.asarray(X0), jnp.asarray(th0)))
    structure = probs[0][0].structure
    models = {
        "one vmap": _Model(structure, None),
        f"chunks of {LINEARIZE_CHUNK}": _Model(structure, LINEARIZE_CHUNK, vmap_up_to=0),
    }
    for m in models.values():
        for prob, X0, th0 in probs:
            jax.block_until_ready(m.linearize(X0, th0, prob._args))  # compile
    for label, m in models.items():
        for prob, X0, th0 in probs:
            wall, cpu = [], []
            for _ in range(repeats):
                t, c = time.perf_counter(), time.process_time()
                jax.block_until_ready(m.linearize(X0, th0, prob._args))
                wall.append(time.perf_counter() - t)
                cpu.append(time.process_time() - c)
            n = prob.y.shape[0]
            per = 1e3 * min(cpu) / n
            print(f"{label:14s} n = {n:6d}: linearization wall {min(wall):.3f} s, CPU "
                  f"{min(cpu):.3f} s, CPU per 1000 steps {per:.4f} s", flush=True)  # fmt: skip


def memory(sizes=(2000, 8000, 32000)) -> None:
    print("furuta13 tree LM alone, fresh process per size (peak RSS includes JAX and XLA)")
    for n in sizes:
        out = subprocess.run(
            [sys.executable, __file__, "--memory-child", str(n)],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        row = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"n = {row['n']:6d}: peak RSS {row['peak_rss_mb']:8.0f} MB, "
              f"{row['s_per_iteration']:.3f} s wall, {row['cpu_s_per_iteration']:.3f} s CPU "
              f"per iteration ({row['iterations']} iterations), load {_load()}",
              flush=True)  # fmt: skip


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problem", choices=PROBLEMS, default="furuta13")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--scipy-limit", type=float, default=120.0)
    ap.add_argument("--no-spook", action="store_true")
    ap.add_argument("--no-warm-start", action="store_true")
    ap.add_argument("--memory", action="store_true")
    ap.add_argument("--memory-child", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--scaling", action="store_true")
    a = ap.parse_args()
    if a.scaling:
        scaling(repeats=a.repeats)
    elif a.memory_child:
        memory_one(a.memory_child)
    elif a.memory:
        memory()
    else:
        compare(a.problem, a.repeats, a.scipy_limit, not a.no_spook, not a.no_warm_start)
