"""``physid simulate pendulum|furuta``: the tree engine (the default since 2026-11-26, rigid
joints, ``hinged.rollout_tree``) against the SPOOK engine (``hinged.run_simulation``) on the
specs' own scenarios, in one process.

For each rig and engine: the first call as ``physid simulate`` makes it (compilation
included; the persistent compilation cache is off for this process), then the median of 3
calls of the compiled rollout alone (wall and CPU). Prints the ratios SPOOK / tree and the
load average (the machine may be shared: compare the ratios, both sides ran under the same
load).

    .venv/bin/python benchmarks/bench_simulate.py [--duration S]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("PHYSID_JAX_CACHE", "off")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import physid.dynamics  # noqa: E402, F401  (float64)
from physid.dynamics.spook import simulate as spook_simulate  # noqa: E402
from physid.rigs.models import furuta, pendulum  # noqa: E402
from physid.rigs.models.hinged import (  # noqa: E402
    rollout_tree,
    run_simulation,
    simulation_table,
    truth_values,
)
from physid.spec import load_spec  # noqa: E402


def timed(fn):
    wall, cpu = time.perf_counter(), time.process_time()
    jax.block_until_ready(fn())
    return time.perf_counter() - wall, time.process_time() - cpu


def median_of(fn, repeats=3):
    runs = [timed(fn) for _ in range(repeats)]
    return statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)


def scenario(module, duration):
    spec = load_spec(module.__name__.rsplit(".", 1)[1])
    h = spec.section_value("simulation", "h", "s")
    duration = duration or spec.section_value("simulation", "duration", "s")
    keys = ("theta0",) if module is pendulum else ("theta1", "theta2")
    angles0 = [spec.section_value("simulation", k, "rad") for k in keys]
    # The Furuta driven as the sample is (3 V at its swing frequency); the pendulum has no
    # actuator.
    t = np.arange(int(round(duration / h))) * h
    u = 3.0 * np.cos(2 * np.pi * 1.1 * t) if module is furuta else np.zeros_like(t)
    return spec, h, angles0, u


def bench(module, duration):
    spec, h, angles0, u = scenario(module, duration)
    tree_rig, spook_rig = module.tree_rig(spec), module.build(spec)
    table = simulation_table(spec)
    tree_truth = truth_values(spec, tree_rig.values, table)
    spook_truth = truth_values(spec, spook_rig.values, table)
    rows = {}
    rows["tree first"] = timed(lambda: rollout_tree(tree_rig, tree_truth, angles0, u, h))
    rows["tree run"] = median_of(lambda: rollout_tree(tree_rig, tree_truth, angles0, u, h))
    rows["spook first"] = timed(lambda: run_simulation(spook_rig, spook_truth, angles0, u, h)[2])
    # SPOOK's rollout compiled once, then called (run_simulation compiles on every call).
    params = spook_rig.make_params({k: jnp.asarray(v) for k, v in spook_truth.items()})
    q0 = spook_rig.state_from_angles(jnp.asarray(angles0, float))
    v0 = jnp.zeros((spook_rig.system.n_bodies, 6))
    roll = jax.jit(lambda p, uu: spook_simulate(spook_rig.system, p, q0, v0, uu, h))
    jax.block_until_ready(roll(params, jnp.asarray(u)))
    rows["spook run"] = median_of(lambda: roll(params, jnp.asarray(u)))
    name = spec.name
    print(f"{name}: {len(u)} steps of {h:g} s ({len(u) * h:g} s simulated)")
    for key, (wall, cpu) in rows.items():
        print(f"  {key:12s} {wall:8.3f} s wall {cpu:8.3f} s CPU")
    for part in ("first", "run"):
        (tw, tc), (sw, sc) = rows[f"tree {part}"], rows[f"spook {part}"]
        print(f"  spook / tree, {part}: {sw / tw:.2f}x wall, {sc / tc:.2f}x CPU")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--duration", type=float, help="simulated time (s); default the spec's")
    args = parser.parse_args()
    print("load average:", " ".join(f"{x:.2f}" for x in os.getloadavg()))
    for module in (pendulum, furuta):
        bench(module, args.duration)
    print("load average:", " ".join(f"{x:.2f}" for x in os.getloadavg()))


if __name__ == "__main__":
    main()
