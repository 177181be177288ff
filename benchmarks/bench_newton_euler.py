"""RNEA, ABA and the parameter Jacobian of RNEA over 10 000 states: physid (JAX, vmapped, one
call) against Pinocchio and MuJoCo called once per state from Python, in the same process.

Models: the Furuta (Quanser Qube, 2 joints) and the 7-joint arm of tests/data/trees, each read
from its MJCF file by all three. The parameter Jacobian is ∂τ/∂φ for the 10 standard inertial
parameters of every body: physid's closed-form regressor and, for comparison, jax.jacfwd of
RNEA through the same parameters; Pinocchio's computeJointTorqueRegressor; MuJoCo has none.

physid runs in two layouts: one vmap over all states, and lax.map over chunks of CHUNK states
each vmapped (the chunk's intermediates stay in cache). Times are medians of REPEATS runs,
µs per state; ratios are the peer's time over physid's (> 1: physid is faster).

    .venv/bin/python benchmarks/bench_newton_euler.py [--states N]
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pinocchio as pin

import physid.dynamics  # noqa: F401
from physid.dynamics import newton_euler
from physid.dynamics.tree import BodyParams
from physid.rigs.models.tree.mjcf import read_model_file
from physid.rigs.models.tree.model import build_model

DATA = Path(__file__).parents[1] / "tests" / "data" / "trees"
REPEATS = 5
CHUNK = 500


def median_time(fn, repeats=REPEATS) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - start)
    return float(np.median(times))


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


def batched(fn, layout: str):
    if layout == "vmap":
        return jax.jit(jax.vmap(fn))

    def chunked(*args):
        shaped = tuple(x.reshape(-1, CHUNK, *x.shape[1:]) for x in args)
        out = jax.lax.map(lambda a: jax.vmap(fn)(*a), shaped)
        return out.reshape(-1, *out.shape[2:])

    return jax.jit(chunked)


def pinocchio_times(path: Path, Q, QD, X, n_calls: int) -> dict[str, float]:
    model = pin.buildModelFromMJCF(str(path))
    data = model.createData()
    calls = {
        "RNEA": lambda q, qd, x: pin.rnea(model, data, q, qd, x),
        "ABA": lambda q, qd, x: pin.aba(model, data, q, qd, x),
        "∂τ/∂φ regressor": lambda q, qd, x: pin.computeJointTorqueRegressor(model, data, q, qd, x),
    }
    out = {}
    for name, call in calls.items():

        def loop(call=call):
            for k in range(n_calls):
                call(Q[k], QD[k], X[k])

        out[name] = median_time(loop, 3) / n_calls
    return out


def mujoco_times(path: Path, Q, QD, X, n_calls: int) -> dict[str, float]:
    m = mujoco.MjModel.from_xml_path(str(path))
    d = mujoco.MjData(m)
    tau = np.zeros(m.nv)

    def rne(k):
        d.qpos[:], d.qvel[:], d.qacc[:] = Q[k], QD[k], X[k]
        mujoco.mj_fwdPosition(m, d)  # kinematics, composite inertias (what mj_rne needs)
        mujoco.mj_fwdVelocity(m, d)
        mujoco.mj_rne(m, d, 1, tau)

    def forward(k):
        d.qpos[:], d.qvel[:], d.qfrc_applied[:] = Q[k], QD[k], X[k]
        mujoco.mj_forward(m, d)

    out = {}
    for name, call in (("RNEA", rne), ("ABA", forward)):

        def loop(call=call):
            for k in range(n_calls):
                call(k)

        out[name] = median_time(loop, 3) / n_calls
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--states", type=int, default=10_000)
    parser.add_argument("--peer-calls", type=int, default=10_000)
    args = parser.parse_args()
    n = args.states
    print(f"{n} states; physid: jit(vmap) and lax.map over chunks of {CHUNK}; peers per call")
    for label in ("furuta", "arm7"):
        path = DATA / f"{label}.xml"
        model = build_model(read_model_file(path))
        rng = np.random.default_rng(0)
        nv = model.tree.n_dof
        Q, QD, X = (rng.normal(size=(n, nv)) for _ in range(3))
        peers = {
            "Pinocchio": pinocchio_times(path, Q, QD, X, min(n, args.peer_calls)),
            "MuJoCo": mujoco_times(path, Q, QD, X, min(n, args.peer_calls)),
        }
        args_j = tuple(jnp.asarray(x) for x in (Q, QD, X))
        print(f"\n### {label} ({nv} joints, {model.tree.n_bodies} bodies), µs per state")
        print(
            "| quantity | layout | physid | Pinocchio | MuJoCo | Pinocchio/physid | MuJoCo/physid |"
        )
        print("|---|---|---|---|---|---|---|")
        for unroll in (False, True):
            tree = dataclasses.replace(model.tree, unroll=unroll)
            for name, fn in physid_functions(tree, model.params).items():
                for layout in ("vmap", "chunks"):
                    compiled = batched(fn, layout).lower(*args_j).compile()
                    t = median_time(lambda c=compiled, a=args_j: c(*a)) / n
                    key = "∂τ/∂φ regressor" if name.startswith("∂τ/∂φ") else name
                    peer = [peers[p].get(key) for p in ("Pinocchio", "MuJoCo")]
                    cells = [f"{x * 1e6:.3f}" if x else "n/a" for x in peer]
                    ratios = [f"{x / t:.2f}" if x else "n/a" for x in peer]
                    how = f"{layout}, {'unrolled' if unroll else 'scan'}"
                    row = [name, how, f"{t * 1e6:.3f}", *cells, *ratios]
                    print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
