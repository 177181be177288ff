"""Feasibility measurement: one linearization with its normal equations (and band) of the
13-parameter Furuta (n = 2001), computed in one process, against the same work split over
two processes — this one on the first half of the steps, a spawned worker on the second —
each pinned to its own core.

Why: XLA runs the whole LM on one core (pinned to one core it takes the same time as on
two), and neither two XLA devices nor two independent loops in one program run at the same
time (docs/benchmarks.md). A second process is the remaining way to use the second core.

This measures the *work split* only: the worker reads its own copy of the start states (a
real split would pass X and θ through shared memory, ~0.5 MB per call), the halves' normal
equations are not stitched at the boundary step, and the initial-state block is left out of
both halves. The worker's blocks come back through shared memory (one copy, ~21 MB).

    .venv/bin/python benchmarks/bench_two_process_linearization.py [--calls 15]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import sys
import time
from multiprocessing import shared_memory
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))


def _half(core: int, a: int, b: int):
    """(problem, X0, θ0, f) with f(X, θ) the normal equations and band of steps a..b−1 (their
    dynamics blocks a..b−2 and observation blocks a..b−1), in a process pinned to ``core``."""
    os.sched_setaffinity(0, {core})
    import jax.numpy as jnp
    from bench_lm_vs_scipy import furuta13_problem

    from physid.estimation.lm import _normal_jax
    from physid.rigs.models.identify_hinged import enable_compilation_cache

    enable_compilation_cache()
    prob, X0, theta0, _ = furuta13_problem()
    args = dict(prob._args, y=prob._args["y"][a:b], w=prob._args["w"][a:b])
    args["u"] = prob._args["u"][a : b - 1]
    sx = jnp.ones(prob.d)

    def f(X, theta):
        dr, dA, dB, dC, orr, oA, ir, iA, iC = prob.model.lin(tuple(x[a:b] for x in X), theta, args)
        return _normal_jax(dA, dB, dC, dr, oA, orr, 0 * iA, 0 * iC, 0 * ir, sx, True)

    return prob, X0, jnp.asarray(theta0), f


def _worker(conn, a: int, b: int) -> None:
    _, X0, theta0, f = _half(1, a, b)
    outs = [np.asarray(o) for o in f(X0, theta0)]  # compile, and learn the shapes
    shms = [shared_memory.SharedMemory(create=True, size=o.nbytes) for o in outs]
    try:
        views = [np.ndarray(o.shape, np.float64, s.buf) for s, o in zip(shms, outs, strict=True)]
        conn.send([(s.name, o.shape) for s, o in zip(shms, outs, strict=True)])
        while conn.recv() is not None:
            for view, out in zip(views, f(X0, theta0), strict=True):
                np.copyto(view, np.asarray(out))
            conn.send(True)
    finally:
        for s in shms:
            s.close()
            s.unlink()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=15)
    args = ap.parse_args()
    if len(os.sched_getaffinity(0)) < 2:
        sys.exit("needs two cores")
    n = 2001
    m = n // 2
    here, there = mp.get_context("spawn").Pipe()
    worker = mp.get_context("spawn").Process(target=_worker, args=(there, m, n))
    worker.start()
    prob, X0, theta0, mine = _half(0, 0, m + 1)
    from physid.estimation.lm import Linearization, normal_equations

    [np.asarray(o) for o in mine(X0, theta0)]
    layout = here.recv()
    shms = [shared_memory.SharedMemory(name=name) for name, _ in layout]

    def one() -> float:
        t0 = time.perf_counter()
        lin = Linearization(*prob.model.lin(X0, theta0, prob._args), obs_present=None)
        normal_equations(lin, band=True)
        return time.perf_counter() - t0

    def two() -> float:
        t0 = time.perf_counter()
        here.send(True)
        [np.asarray(o) for o in mine(X0, theta0)]
        here.recv()
        return time.perf_counter() - t0

    try:
        one(), two()
        runs = {"one process": [], "two processes": []}
        for _ in range(args.calls):
            runs["one process"].append(one())
            runs["two processes"].append(two())
    finally:
        here.send(None)
        worker.join()
        for s in shms:
            s.close()
    base = statistics.median(runs["one process"])
    print(f"furuta13, n = {n}: linearization + normal equations + band, {args.calls} calls each")
    for k, r in runs.items():
        wall = statistics.median(r)
        print(
            f"  {k:13s} median {wall * 1e3:6.1f} ms  min {min(r) * 1e3:6.1f} ms  x{base / wall:.2f}"
        )


if __name__ == "__main__":
    main()
