"""SPOOK benchmark (issue 2): Furuta forward steps per second with frictional hinges, and one
inverse-dynamics residual evaluation over n = 2000 steps.

Peers, in the same process: for the forward simulation, ``lax.scan`` over the cold step that
solves every LCP by Lemke (the implementation before the warm start) and the same cold step
jitted and driven by a Python loop (what one would write without ``lax.scan``); for the
residuals, the same per-step residual evaluated in a Python loop (without ``vmap``). Prints
medians of 5 runs (3 for the slow Python loops), the ratios and the load average.
"""

from __future__ import annotations

import os
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

import physid.dynamics  # noqa: F401
from physid.dynamics.spook import impulse_residual, simulate, step, trajectory_residuals
from physid.rigs.models.furuta import build
from physid.rigs.models.hinged import simulation_table, truth_values
from physid.spec import load_spec


def median_time(fn, repeats=5, clock=time.perf_counter):
    times = []
    for _ in range(repeats):
        start = clock()
        jax.block_until_ready(fn())
        times.append(clock() - start)
    return statistics.median(times)


def main() -> None:
    spec = load_spec("furuta")
    rig = build(spec)
    truth = truth_values(spec, rig.values, simulation_table(spec))
    params = rig.make_params({k: jnp.asarray(v) for k, v in truth.items()})
    q0 = rig.state_from_angles(jnp.array([0.0, np.pi - 0.03]))
    v0 = jnp.zeros((2, 6))
    h = 1e-4

    n_fwd = 20_000
    roll = jax.jit(lambda u: simulate(rig.system, params, q0, v0, u, h))
    u = jnp.zeros(n_fwd)
    jax.block_until_ready(roll(u))

    def cold_body(carry, u_k):
        res = step(rig.system, params, *carry, u_k, h)
        return (res.q, res.v), res.v

    cold = jax.jit(lambda u: lax.scan(cold_body, (q0, v0), u)[1])
    jax.block_until_ready(cold(u))
    one = jax.jit(lambda q, v: step(rig.system, params, q, v, 0.0, h)[:2])
    jax.block_until_ready(one(q0, v0))
    n_loop = 2000

    def python_loop():
        q, v = q0, v0
        for _ in range(n_loop):
            q, v = one(q, v)
        return v

    print(f"load average {os.getloadavg()[0]:.1f} (2 cores)")
    # Interleaved, so that a change of load hits both sides.
    t_scan, t_cold = [], []
    for _ in range(5):
        t_scan.append(median_time(lambda: roll(u), repeats=1))
        t_cold.append(median_time(lambda: cold(u), repeats=1))
    t_scan, t_cold = statistics.median(t_scan), statistics.median(t_cold)
    # CPU time of this process: what the step costs when it has a core to itself (the
    # machine is shared, so wall time also counts other people's jobs).
    c_scan = median_time(lambda: roll(u), clock=time.process_time)
    c_cold = median_time(lambda: cold(u), clock=time.process_time)
    t_loop = median_time(python_loop, repeats=3) * n_fwd / n_loop
    print(f"forward, Furuta with 2 frictional hinges, h = {h:g} s, {n_fwd} steps")
    print(f"  simulate (warm-started)   : {n_fwd / t_scan:10.0f} steps/s")
    print(
        f"  lax.scan, Lemke each step : {n_fwd / t_cold:10.0f} steps/s"
        f"   ratio {t_cold / t_scan:.1f}x"
    )
    print(
        f"  python loop, Lemke        : {n_fwd / t_loop:10.0f} steps/s"
        f"   ratio {t_loop / t_scan:.1f}x"
    )
    print(
        f"  per CPU second: simulate {n_fwd / c_scan:.0f}, Lemke each step {n_fwd / c_cold:.0f}"
        f" steps   ratio {c_cold / c_scan:.1f}x"
    )

    n = 2000
    (r, e), v = roll(jnp.zeros(n - 1))
    residual = jax.jit(
        lambda r, e, v: trajectory_residuals(rig.system, params, (r, e), v, u[: n - 1], h)
    )
    jax.block_until_ready(residual(r, e, v))
    t_vmap = median_time(lambda: residual(r, e, v), repeats=7)
    c_vmap = median_time(lambda: residual(r, e, v), repeats=7, clock=time.process_time)
    one_res = jax.jit(
        lambda rk, ek, vk, rk1, ek1, vk1: impulse_residual(
            rig.system, params, (rk, ek), vk, (rk1, ek1), vk1, 0.0, h
        )
    )
    jax.block_until_ready(one_res(r[0], e[0], v[0], r[1], e[1], v[1]))

    def residual_loop():
        out = None
        for k in range(n - 1):
            out = one_res(r[k], e[k], v[k], r[k + 1], e[k + 1], v[k + 1])
        return out

    t_res_loop = median_time(residual_loop, repeats=3)
    print(f"inverse-dynamics residuals, n = {n} steps")
    print(f"  vmap         : {t_vmap * 1e3:8.2f} ms")
    print(f"  python loop  : {t_res_loop * 1e3:8.2f} ms   loop/vmap = {t_res_loop / t_vmap:.0f}x")
    print(f"  vmap, CPU time of this process: {c_vmap * 1e3:.2f} ms")
    print(f"load average {os.getloadavg()[0]:.1f} (2 cores)")


if __name__ == "__main__":
    main()
