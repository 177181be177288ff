"""Hexagon loop stiffness identification (issue 23): our single-shooting Levenberg–Marquardt
(Jacobians by forward sensitivities through the implicit-function theorem) against the
draft's steepest descent with Armijo (α = β = 0.4, adjoint gradients, stop at ‖∇J‖ < 1e-3),
both from κ = [10, 25] on noise-free end-effector positions of a κ = [20, 20] simulation over
the spec's 1 s horizon, both after compilation, in one process.

    .venv/bin/python benchmarks/hexagon_identification.py [--repeats 3] [--sd-repeats 1]
        [--skip-sd]

Times are wall (perf_counter) and, in brackets, this process's CPU time (process_time): on a
machine shared with other jobs the CPU time is the closer measure of what the work costs on an
idle core (it counts every thread of the process). It also prints the time of one
rollout (the spec's 100 steps) and of one residual + Jacobian
(2 tangents), medians of ``--repeats`` calls after compilation.
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

import physid.dynamics  # noqa: F401 (float64)
from physid.dynamics.variational import adjoint, constrained
from physid.estimation.shooting import levenberg_marquardt, steepest_descent_armijo
from physid.rigs.models.loop import end_effector, load_loop
from physid.spec import load_spec


def problem(rig):
    q0, p0 = rig.start()
    u = rig.inputs()
    h = rig.h

    def positions(kappa):
        q, _, _ = constrained.rollout(rig.system, rig.params(kappa), q0, p0, u, h)
        return end_effector(rig, rig.params(kappa), q[1:])

    measured = positions(jnp.asarray(rig.true_kappa()))

    @jax.jit
    def residual(kappa):
        return (positions(kappa) - measured).ravel()

    @jax.jit
    def residual_jacobian(kappa):
        J, r = jax.jacfwd(lambda k: (residual(k), residual(k)), has_aux=True)(kappa)
        return r, J

    def running(q, p, k, theta):
        w = constrained.load_points(rig.system, rig.params(theta), q)[0]
        return 0.5 * jnp.sum((w - measured[k - 1]) ** 2)

    @jax.jit
    def cost_gradient(kappa):
        return adjoint.adjoint_gradient(rig.system, rig.params, kappa, q0, p0, u, h, running)

    @jax.jit
    def cost(kappa):
        r = residual(kappa)
        return 0.5 * r @ r

    return residual, residual_jacobian, cost, cost_gradient


def _since(t0: float, c0: float) -> str:
    return f"{time.perf_counter() - t0:.1f} s [CPU {time.process_time() - c0:.1f} s]"


def _compile(label: str, fns, start) -> None:
    """Compile ``fns`` by calling each once at ``start``; print the time it took."""
    t0, c0 = time.perf_counter(), time.process_time()
    for f in fns:
        jax.block_until_ready(f(jnp.asarray(start)))
    print(f"compilation ({label}: {len(fns)} functions): {_since(t0, c0)}", flush=True)


def _timed(run, repeats: int):
    """``run()`` ``repeats`` times: its last result and the median wall and CPU seconds."""
    walls, cpus = [], []
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        result = run()
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    return result, float(np.median(walls)), float(np.median(cpus))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--sd-repeats", type=int, default=1)
    ap.add_argument("--skip-sd", action="store_true")
    args = ap.parse_args()
    rig = load_loop(load_spec("hexagon_loop"))
    residual, residual_jacobian, cost, cost_gradient = problem(rig)
    start = np.array([10.0, 25.0])
    _compile("LM", (residual, residual_jacobian), start)
    for name, f in (("rollout + residual", residual), ("residual + Jacobian", residual_jacobian)):
        _, wall, cpu = _timed(
            lambda f=f: jax.block_until_ready(f(jnp.asarray(start))), max(args.repeats, 3)
        )
        ms, cms = 1e3 * wall, 1e3 * cpu
        print(
            f"{name}: {ms:.1f} ms [CPU {cms:.1f} ms] per {rig.steps} steps "
            f"({ms / rig.steps:.2f} ms [CPU {cms / rig.steps:.2f} ms] per step)",
            flush=True,
        )
    truth = rig.true_kappa()
    lm, lm_wall, lm_cpu = _timed(
        lambda: levenberg_marquardt(residual_jacobian, residual, start, 0.5, 500.0), args.repeats
    )
    err = np.max(np.abs(lm.theta / truth - 1))
    print(
        f"LM: kappa = {lm.theta}, max rel error {err:.2e}, {lm.iterations} iterations, "
        f"{lm.evaluations} evaluations, median {lm_wall:.2f} s [CPU {lm_cpu:.2f} s] "
        f"({lm.reason})",
        flush=True,
    )
    if args.skip_sd:
        return
    _compile("SD", (cost, cost_gradient), start)
    sd, sd_wall, sd_cpu = _timed(
        lambda: steepest_descent_armijo(cost_gradient, cost, start), args.sd_repeats
    )
    err_sd = np.max(np.abs(sd.theta / truth - 1))
    print(
        f"SD-Armijo: kappa = {sd.theta}, max rel error {err_sd:.2e}, {sd.iterations} "
        f"iterations, {sd.evaluations} evaluations, median {sd_wall:.2f} s "
        f"[CPU {sd_cpu:.2f} s] ({sd.reason})"
    )
    print(
        f"ratios SD/LM: iterations {sd.iterations / max(lm.iterations, 1):.1f}, "
        f"time {sd_wall / lm_wall:.1f} (CPU {sd_cpu / lm_cpu:.1f})"
    )


if __name__ == "__main__":
    main()
