"""RNEA, ABA and the parameter Jacobian of RNEA over 10 000 states: physid (JAX, vmapped, one
call) against Pinocchio and MuJoCo called once per state from Python, in the same process.

Models: the Furuta (Quanser Qube, 2 joints) and the 7-joint arm of tests/data/trees, each read
from its MJCF file by all three. The parameter Jacobian is ∂τ/∂φ for the 10 standard inertial
parameters of every body: physid's closed-form regressor and, for comparison, jax.jacfwd of
RNEA through the same parameters; Pinocchio's computeJointTorqueRegressor; MuJoCo has none.

physid's batched kernels (dynamics/batched.py: structure of arrays, every spatial operation
written out on [batch] rows, recursions unrolled over bodies) run as one jitted call over
all states ("batched") and as lax.map over chunks of CHUNK states ("batched, chunks"). With
``--with-vmap`` also the single-state functions of dynamics/newton_euler.py, vmapped: one
vmap over all states, and lax.map over chunks of CHUNK states each vmapped, each with the
recursions as lax.scan or unrolled (the layouts measured before the batched kernels).

"fused" (dynamics/fused.py) is the same batched program compiled by LLVM (llvmlite) into one
loop that evaluates every output of four states per AVX2 instruction, parameters fixed at
build time, writing into one output array reused across calls (as Pinocchio writes into its
Data); "fused" lets the kernel choose its threads (one for these batches: their work is
below dynamics.fused.THREAD_MIN_WORK), "fused, all cores" splits the batch over every core.

On a shared machine the load changes within seconds, so every row times physid
and its peers interleaved (physid's batch, then PEER_CALLS calls of each peer, REPEATS
times): times are medians (wall clock), µs per state, and each ratio is the median of the
REPEATS ratios of neighbouring runs (peer's time over physid's; > 1: physid is faster), of
wall-clock times and of CPU times (time.process_time, all threads of the process).

    .venv/bin/python benchmarks/bench_newton_euler.py [--states N] [--chunk N] [--with-vmap]
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import os
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pinocchio as pin

import physid.dynamics  # noqa: F401
from physid.dynamics import batched as batched_kernels
from physid.dynamics import fused, newton_euler
from physid.dynamics.tree import BodyParams
from physid.rigs.models.tree.mjcf import read_model_file
from physid.rigs.models.tree.model import build_model

DATA = Path(__file__).parents[1] / "tests" / "data" / "trees"
REPEATS = 7
CHUNK = 500
PEER_CALLS = 2000  # per run: 10-60 ms, about one physid batch


def elapsed(fn) -> tuple[float, float]:
    """Wall-clock and CPU seconds (this process, all threads) of one call."""
    start, cpu = time.perf_counter(), time.process_time()
    jax.block_until_ready(fn())
    return time.perf_counter() - start, time.process_time() - cpu


def physid_functions(tree, params):
    """Single-state functions of (q, q̇, q̈) for each benchmarked quantity."""

    def rnea(q, qd, qdd):
        return newton_euler.rnea(tree, params, q, qd, qdd)

    def aba(q, qd, tau):
        return newton_euler.aba(tree, params, q, qd, tau)

    def regressor(q, qd, qdd):
        return newton_euler.regressor(tree, params, q, qd, qdd)

    def jacfwd(q, qd, qdd):
        phi = newton_euler.inertial_vector(params)

        def tau_of(phi):
            m, c, inertia = newton_euler.inertial_from_vector(phi)
            p = dataclasses.replace(params, bodies=BodyParams(m, c, inertia))
            return newton_euler.rnea(tree, p, q, qd, qdd)

        return jax.jacfwd(tau_of)(phi)

    return {"RNEA": rnea, "ABA": aba, "∂τ/∂φ regressor": regressor, "∂τ/∂φ jacfwd": jacfwd}


def batched_functions(tree, params):
    """The batched kernels as functions of (Q, Q̇, Q̈ or τ), params bound as jit arguments."""
    kernels = {
        "RNEA": batched_kernels.rnea_batch,
        "ABA": batched_kernels.aba_batch,
        "∂τ/∂φ regressor": batched_kernels.regressor_batch,
    }
    return {name: functools.partial(k, tree, params) for name, k in kernels.items()}


def fused_functions(tree, params):
    """The LLVM-fused kernels (dynamics/fused.py), built once per tree: calls on NumPy arrays."""
    return {
        "RNEA": fused.rnea_fused(tree, params),
        "ABA": fused.aba_fused(tree, params),
        "∂τ/∂φ regressor": fused.regressor_fused(tree, params),
    }


def batched_layout(fn, layout: str, chunk: int):
    """jit of a batched kernel over all states at once, or lax.map over chunks."""
    if layout == "batched":
        return jax.jit(fn)

    def chunked(*args):
        shaped = tuple(x.reshape(-1, chunk, *x.shape[1:]) for x in args)
        out = jax.lax.map(lambda a: fn(*a), shaped)
        return out.reshape(-1, *out.shape[2:])

    return jax.jit(chunked)


def batched(fn, layout: str):
    if layout == "vmap":
        return jax.jit(jax.vmap(fn))

    def chunked(*args):
        shaped = tuple(x.reshape(-1, CHUNK, *x.shape[1:]) for x in args)
        out = jax.lax.map(lambda a: jax.vmap(fn)(*a), shaped)
        return out.reshape(-1, *out.shape[2:])

    return jax.jit(chunked)


def pinocchio_calls(path: Path) -> dict:
    model = pin.buildModelFromMJCF(str(path))
    data = model.createData()
    return {
        "RNEA": lambda q, qd, x: pin.rnea(model, data, q, qd, x),
        "ABA": lambda q, qd, x: pin.aba(model, data, q, qd, x),
        "∂τ/∂φ regressor": lambda q, qd, x: pin.computeJointTorqueRegressor(model, data, q, qd, x),
    }


def mujoco_calls(path: Path) -> dict:
    m = mujoco.MjModel.from_xml_path(str(path))
    d = mujoco.MjData(m)
    tau = np.zeros(m.nv)

    def rne(q, qd, qdd):
        d.qpos[:], d.qvel[:], d.qacc[:] = q, qd, qdd
        mujoco.mj_fwdPosition(m, d)  # kinematics, composite inertias (what mj_rne needs)
        mujoco.mj_fwdVelocity(m, d)
        mujoco.mj_rne(m, d, 1, tau)

    def forward(q, qd, f):
        d.qpos[:], d.qvel[:], d.qfrc_applied[:] = q, qd, f
        mujoco.mj_forward(m, d)

    return {"RNEA": rne, "ABA": forward}


def peer_loop(call, Q, QD, X, n_calls: int):
    def loop():
        for k in range(n_calls):
            call(Q[k], QD[k], X[k])

    return loop


def paired_times(physid_call, n_states: int, peers: dict, n_calls: int):
    """physid's batch and each peer's loop timed in turn, REPEATS times: (physid µs per
    state, {peer: (µs per call, median ratio peer/physid of wall times, the same of CPU
    times)}). On a loaded machine the CPU-time ratio is the steadier one: a process that
    waits for a core is not charged for it."""
    runs = {"physid": [], **{name: [] for name in peers}}
    for _ in range(REPEATS):
        runs["physid"].append(np.asarray(elapsed(physid_call)) / n_states)
        for name, loop in peers.items():
            runs[name].append(np.asarray(elapsed(loop)) / n_calls)
    ours = np.asarray(runs["physid"])
    out = {}
    for name in peers:
        theirs = np.asarray(runs[name])
        ratio = np.median(theirs / ours, axis=0)
        out[name] = (float(np.median(theirs[:, 0])), float(ratio[0]), float(ratio[1]))
    return float(np.median(ours[:, 0])), out


def print_row(name, how, t, peer, peer_names):
    cells = [f"{peer[p][0] * 1e6:.3f}" if p in peer else "n/a" for p in peer_names]
    ratios = [f"{peer[p][1]:.2f}" if p in peer else "n/a" for p in peer_names]
    cpu = [f"{peer[p][2]:.2f}" if p in peer else "n/a" for p in peer_names]
    row = [name, how, f"{t * 1e6:.3f}", *cells, *ratios, *cpu]
    print("| " + " | ".join(row) + " |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--states", type=int, default=10_000)
    parser.add_argument("--peer-calls", type=int, default=PEER_CALLS)
    parser.add_argument("--chunk", type=int, default=CHUNK)
    parser.add_argument("--with-vmap", action="store_true", help="also the vmapped layouts")
    parser.add_argument("--models", nargs="+", default=["furuta", "arm7"])
    parser.add_argument(
        "--layouts",
        nargs="+",
        default=["fused", "batched"],
        help='any of "fused", "fused, all cores", "batched", "batched, chunks"',
    )
    args = parser.parse_args()
    n = args.states
    n_calls = min(n, args.peer_calls)
    print(f"{n} states; physid batched kernels (one call, chunks of {args.chunk}); peers per call")
    print(f"load average at start: {os.getloadavg()[0]:.1f}", flush=True)
    for label in args.models:
        path = DATA / f"{label}.xml"
        model = build_model(read_model_file(path))
        rng = np.random.default_rng(0)
        nv = model.tree.n_dof
        Q, QD, X = (rng.normal(size=(n, nv)) for _ in range(3))
        peer_calls = {"Pinocchio": pinocchio_calls(path), "MuJoCo": mujoco_calls(path)}
        args_j = tuple(jnp.asarray(x) for x in (Q, QD, X))

        def peers_of(key, peer_calls=peer_calls, Q=Q, QD=QD, X=X):
            return {
                p: peer_loop(calls[key], Q, QD, X, n_calls)
                for p, calls in peer_calls.items()
                if key in calls
            }

        print(f"\n### {label} ({nv} joints, {model.tree.n_bodies} bodies), µs per state")
        print(
            "| quantity | layout | physid | Pinocchio | MuJoCo | Pinocchio/physid | MuJoCo/physid"
            " | Pinocchio/physid (CPU) | MuJoCo/physid (CPU) |"
        )
        print("|---|---|---|---|---|---|---|---|---|", flush=True)
        fused_kernels = fused_functions(model.tree, model.params)
        for name, fn in batched_functions(model.tree, model.params).items():
            for layout in args.layouts:
                if layout.startswith("fused"):
                    threads = os.cpu_count() if layout == "fused, all cores" else None
                    out = fused_kernels[name](Q, QD, X)  # reused: Pinocchio reuses its Data
                    call = functools.partial(
                        fused_kernels[name], Q, QD, X, threads=threads, out=out
                    )
                else:
                    compiled = batched_layout(fn, layout, args.chunk).lower(*args_j).compile()
                    call = lambda c=compiled, a=args_j: c(*a)  # noqa: E731
                call()  # warm
                t, peer = paired_times(call, n, peers_of(name), n_calls)
                print_row(name, layout, t, peer, peer_calls)
        if not args.with_vmap:
            continue
        for unroll in (False, True):
            tree = dataclasses.replace(model.tree, unroll=unroll)
            for name, fn in physid_functions(tree, model.params).items():
                key = "∂τ/∂φ regressor" if name.startswith("∂τ/∂φ") else name
                for layout in ("vmap", "chunks"):
                    compiled = batched(fn, layout).lower(*args_j).compile()
                    call = lambda c=compiled, a=args_j: c(*a)  # noqa: E731
                    call()  # warm
                    t, peer = paired_times(call, n, peers_of(key), n_calls)
                    how = f"{layout}, {'unrolled' if unroll else 'scan'}"
                    print_row(name, how, t, peer, peer_calls)
    print(f"\nload average at end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
