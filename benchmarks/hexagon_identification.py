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
from physid.estimation.multiple_shooting import (
    ClosedTreeStates,
    MultipleShooting,
    closed_tree_flow,
)
from physid.estimation.shooting import levenberg_marquardt, steepest_descent_armijo
from physid.rigs.models.loop import end_effector, load_loop
from physid.spec import load_spec


def problem(rig, steps: int | None = None):
    """Single shooting over ``steps`` (the spec's horizon by default): residual, residual +
    Jacobian, cost and adjoint cost + gradient, jitted."""
    q0, p0 = rig.start()
    u = rig.inputs(steps)
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


# Multiple shooting: the observations weighted by 1/σ with σ = 1 mm (the noise of the
# acceptance's noisy fits), the continuity gaps by 1/σ_c with σ_c = 1 µrad on the independent
# angles and 1e-8 N m s on their momenta (~2.5 µrad/s of a link's 4e-3 kg m² inertia): the
# segments meet far inside the noise, so the optimum is single shooting's.
OBS_SIGMA = 1e-3
CONTINUITY_SIGMA = (1e-6, 1e-8)
SEGMENT_STEPS = 25


def ms_problem(rig, steps: int, segment_steps: int = SEGMENT_STEPS) -> MultipleShooting:
    """The multiple-shooting problem over ``steps`` in segments of ``segment_steps``, on
    noise-free end-effector positions of the true κ."""
    q0, p0 = rig.start()
    truth = jnp.asarray(rig.true_kappa())
    space = ClosedTreeStates.partitioned_at(rig.system, rig.params(truth), q0)
    flow = _flow(rig)
    u = rig.inputs(steps)
    q, _, _ = constrained.rollout(rig.system, rig.params(truth), q0, p0, u, rig.h)
    measured = end_effector(rig, rig.params(truth), q[1:])
    S = steps // segment_steps
    k = len(space.independent)
    wc = np.concatenate([np.full(k, 1 / CONTINUITY_SIGMA[0]), np.full(k, 1 / CONTINUITY_SIGMA[1])])
    return MultipleShooting(
        flow, space, space.start(q0, p0), u.reshape(S, segment_steps, -1),
        measured.reshape(S, segment_steps, 3), np.full(3, 1 / OBS_SIGMA), wc, [0.5, 0.5],
        [500.0, 500.0],
    )  # fmt: skip


_FLOWS: dict = {}


def _flow(rig):
    """One flow per rig (the compiled multiple-shooting functions are cached per flow)."""
    if id(rig) not in _FLOWS:
        _FLOWS[id(rig)] = (rig, closed_tree_flow(rig.system, rig.params, rig.h))
    return _FLOWS[id(rig)][1]


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


def _lm_rows(rig, start, repeats: int):
    """The 1 s single-shooting LM: per-call times, then the fit ``repeats`` times (plain, and
    with the Jacobian at each trial); returns (fit, median wall, median CPU) of the plain one."""
    residual, residual_jacobian, _, _ = problem(rig)
    _compile("LM", (residual, residual_jacobian), start)
    for name, f in (("rollout + residual", residual), ("residual + Jacobian", residual_jacobian)):
        _, wall, cpu = _timed(
            lambda f=f: jax.block_until_ready(f(jnp.asarray(start))), max(repeats, 3)
        )
        ms, cms = 1e3 * wall, 1e3 * cpu
        print(
            f"{name}: {ms:.1f} ms [CPU {cms:.1f} ms] per {rig.steps} steps "
            f"({ms / rig.steps:.2f} ms [CPU {cms / rig.steps:.2f} ms] per step)",
            flush=True,
        )
    truth = rig.true_kappa()
    lm, lm_wall, lm_cpu = _timed(
        lambda: levenberg_marquardt(residual_jacobian, residual, start, 0.5, 500.0), repeats
    )
    err = np.max(np.abs(lm.theta / truth - 1))
    print(
        f"LM: kappa = {lm.theta}, max rel error {err:.2e}, {lm.iterations} iterations, "
        f"{lm.evaluations} evaluations, median {lm_wall:.2f} s [CPU {lm_cpu:.2f} s] "
        f"({lm.reason})",
        flush=True,
    )
    ahead, ahead_wall, ahead_cpu = _timed(
        lambda: levenberg_marquardt(
            residual_jacobian, residual, start, 0.5, 500.0, jacobian_at_trial=True
        ),
        repeats,
    )
    _report("LM, Jacobian at each trial", ahead, truth, ahead_wall, ahead_cpu,
            f", {ahead.evaluations} evaluations")  # fmt: skip
    return lm, lm_wall, lm_cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--sd-repeats", type=int, default=1)
    ap.add_argument("--skip-sd", action="store_true")
    ap.add_argument("--skip-lm", action="store_true", help="no 1 s single-shooting rows")
    ap.add_argument(
        "--horizons", type=float, nargs="*", default=[1.0, 3.0],
        help="horizons (s) of the multiple-shooting rows (and single shooting beside them)",
    )  # fmt: skip
    ap.add_argument("--ms-repeats", type=int, default=1)
    args = ap.parse_args()
    rig = load_loop(load_spec("hexagon_loop"))
    start = np.array([10.0, 25.0])
    truth = rig.true_kappa()
    lm = None if args.skip_lm else _lm_rows(rig, start, args.repeats)
    for seconds in args.horizons:
        steps = int(round(seconds / rig.h))
        if steps != rig.steps:
            _single_shooting_row(rig, steps, start, args.ms_repeats)
        _multiple_shooting_row(rig, steps, start, args.ms_repeats)
    if args.skip_sd:
        return
    _, _, cost, cost_gradient = problem(rig)
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
    if lm is not None:
        fit, lm_wall, lm_cpu = lm
        print(
            f"ratios SD/LM: iterations {sd.iterations / max(fit.iterations, 1):.1f}, "
            f"time {sd_wall / lm_wall:.1f} (CPU {sd_cpu / lm_cpu:.1f})"
        )


def _report(label: str, fit, truth, wall: float, cpu: float, extra: str = "") -> None:
    err = np.max(np.abs(np.asarray(fit.theta) / truth - 1))
    print(
        f"{label}: kappa = {np.asarray(fit.theta)}, max rel error {err:.2e}, "
        f"{fit.iterations} iterations{extra}, median {wall:.2f} s [CPU {cpu:.2f} s] "
        f"({fit.reason}; converged {fit.converged})",
        flush=True,
    )


def _single_shooting_row(rig, steps: int, start, repeats: int) -> None:
    residual, residual_jacobian, _, _ = problem(rig, steps)
    _compile(f"single shooting, {steps} steps", (residual, residual_jacobian), start)
    fit, wall, cpu = _timed(
        lambda: levenberg_marquardt(
            residual_jacobian, residual, start, 0.5, 500.0, max_iter=100, jacobian_at_trial=True
        ),
        repeats,
    )
    _report(f"single shooting {steps} steps", fit, rig.true_kappa(), wall, cpu,
            f", {fit.evaluations} evaluations")  # fmt: skip


def _multiple_shooting_row(rig, steps: int, start, repeats: int) -> None:
    prob = ms_problem(rig, steps)
    t0, c0 = time.perf_counter(), time.process_time()
    X = prob.initial_states(start)
    prob.linearize(X, start)
    prob.cost(X, start)
    prob.retract(X, np.zeros((X.shape[0], prob.space.dim)))
    print(
        f"compilation (multiple shooting, {prob.segments} segments of {SEGMENT_STEPS} steps): "
        f"{_since(t0, c0)}",
        flush=True,
    )
    fit, wall, cpu = _timed(lambda: prob.fit(start), repeats)
    print(f"  final weighted cost {fit.cost:.3e}; cost history {np.array(fit.history)}")
    _report(
        f"multiple shooting {steps} steps ({prob.segments} x {SEGMENT_STEPS})", fit,
        rig.true_kappa(), wall, cpu, f" (+{fit.warmup_iterations} states-only)",
    )  # fmt: skip


if __name__ == "__main__":
    main()
