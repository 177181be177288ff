"""Our structured LM vs scipy.optimize.least_squares(method="trf", jac_sparsity=...) on the same
pendulum residuals (Marklund et al. (3.15)), start and box.

scipy works in a fixed chart: states X0 ⊞ δ with δ ∈ R^{n·d} (the release swing stays far from
rotations of π, so the chart is valid), parameters θ with the same scaling and box. It gets the
exact block sparsity pattern of the Jacobian and builds it by grouped finite differences; its
trust-region subproblem is solved by LSMR on the sparse Jacobian (memory linear in n).
Compilation is excluded for both (one warm-up evaluation each). We report wall time to the
final cost, and the time at which each first reaches the worse of the two final costs.

    .venv/bin/python benchmarks/bench_lm_vs_scipy.py [seconds of data, default 1.0]
"""

from __future__ import annotations

import sys
import time
import tracemalloc

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse as sp
from scipy.optimize import least_squares

from estimation.hinged_problem import HingedProblem
from estimation.initialize import initial_states, smooth_angles
from estimation.lm import LMSettings, levenberg_marquardt
from rigs import pendulum
from rigs.hinged import run_simulation
from rigs.spec import load_spec


def make_problem(duration: float):
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
    return prob, X0, init / scale


def sparsity(n: int, d: int, p: int, md: int, mo: int, m0: int) -> sp.csr_matrix:
    """Block pattern of ∂Δz/∂(δ, θ): dyn rows touch x_k, x_{k+1}, θ; obs rows x_k; init x_0, θ."""
    rows, cols = [], []
    for k in range(n - 1):
        r = k * md + np.arange(md)
        c = np.concatenate([k * d + np.arange(2 * d), n * d + np.arange(p)])
        rows.append(np.repeat(r, len(c))), cols.append(np.tile(c, md))
    off = (n - 1) * md
    for k in range(n):
        r = off + k * mo + np.arange(mo)
        c = k * d + np.arange(d)
        rows.append(np.repeat(r, d)), cols.append(np.tile(c, mo))
    off += n * mo
    r = off + np.arange(m0)
    c = np.concatenate([np.arange(d), n * d + np.arange(p)])
    rows.append(np.repeat(r, len(c))), cols.append(np.tile(c, m0))
    rows, cols = np.concatenate(rows), np.concatenate(cols)
    return sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(off + m0, n * d + p))


def main(duration: float) -> None:
    prob, X0, theta0 = make_problem(duration)
    n, d, p = prob.y.shape[0], prob.d, len(theta0)
    model, args = prob.model, prob._args

    @jax.jit
    def flat(z):
        dX = z[: n * d].reshape(n, d)
        dyn, obs, init = model._residuals(model._retract_fn(X0, dX), z[n * d :], args)
        return jnp.concatenate([dyn.ravel(), obs.ravel(), init.ravel()])

    z0 = np.concatenate([np.zeros(n * d), theta0])
    r0 = np.asarray(flat(z0))
    md, mo = 12 * prob.nb, prob.y.shape[1]
    pattern = sparsity(n, d, p, md, mo, len(r0) - (n - 1) * md - n * mo)
    lo = np.concatenate([np.full(n * d, -np.inf), prob.lower])
    hi = np.concatenate([np.full(n * d, np.inf), prob.upper])

    settings = LMSettings(tau=1e-9, max_iter=80)
    levenberg_marquardt(prob, X0, theta0, LMSettings(max_iter=1))  # compile
    tracemalloc.start()
    stamps = []
    t0 = time.perf_counter()
    ours = levenberg_marquardt(
        prob, X0, theta0, settings, lambda i, c, a, th: stamps.append((time.perf_counter() - t0, c))
    )
    t_ours = time.perf_counter() - t0
    mem_ours = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()

    trace = []

    def fun(z):
        r = np.asarray(flat(z))
        trace.append((time.perf_counter() - t1, float(r @ r)))
        return r

    tracemalloc.start()
    t1 = time.perf_counter()
    ref = least_squares(
        fun, z0, jac_sparsity=pattern, bounds=(lo, hi), method="trf", x_scale="jac",
        ftol=1e-12, xtol=1e-12, gtol=1e-12, max_nfev=200 * (2 * d + p),
    )  # fmt: skip
    t_scipy = time.perf_counter() - t1
    mem_scipy = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    cost_scipy = 2 * ref.cost  # scipy's cost is ½‖r‖²
    target = max(ours.cost, cost_scipy) * 1.01  # "the same final cost (±1 %)"
    t_ours_hit = next((t for t, c in stamps if c <= target), np.nan)
    t_scipy_hit = next((t for t, c in trace if c <= target), np.nan)
    print(f"n = {n} steps, d = {d}, p = {p}, unknowns = {n * d + p}, residuals = {len(r0)}")
    print(
        f"ours : cost {ours.cost:.6e} in {ours.iterations} it, {t_ours:.2f} s, "
        f"peak {mem_ours / 1e6:.1f} MB"
    )
    print(
        f"scipy: cost {cost_scipy:.6e} in {ref.nfev} evals, {t_scipy:.2f} s, "
        f"peak {mem_scipy / 1e6:.1f} MB"
    )
    print(f"time to reach {target:.6e}: ours {t_ours_hit:.2f} s, scipy {t_scipy_hit:.2f} s")
    print("ours θ  :", ours.theta * prob.scale)
    print("scipy θ :", ref.x[n * d :] * prob.scale)


if __name__ == "__main__":
    main(float(sys.argv[1]) if len(sys.argv) > 1 else 1.0)
