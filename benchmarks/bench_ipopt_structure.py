"""IPOPT identification of the ellipse drop: step-wise (sparse) NLP vs the same NLP dense.

Both NLPs are (27) with the same variables, weights and warm start. "stepwise" keeps every
fine-grid state as a decision variable, so each constraint touches one step and the
Jacobian and Hessian have O(N) non-zeros. "dense" eliminates the states by single shooting
(q^k, v^k as recursive expressions of the impulses), the usual way such a problem is
written without regard to structure: its Jacobian and Hessian fill in, O(N^2).

    python benchmarks/bench_ipopt_structure.py [--repeats 3]

Prints build and IPOPT wall times (median of the repeats), iterations, non-zeros and the
ratio. The dense build is run on short windows only (it grows quadratically).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from dynamics.planar_contact import Ellipse, Ground, simulate  # noqa: E402
from estimation.ipopt_contact import ContactGeometry, IpoptSettings, build_nlp  # noqa: E402

ELLIPSE = Ellipse(0.05, 0.025, 0.064, 0.064 * 756e-6)
GEOMETRY = ContactGeometry(0.05, 0.025)
H_SIM = 1 / 1200


def data(duration: float, fps: int = 240, mu: float = 0.3, seed: int = 0):
    tr = simulate(
        [0, 0.1, -0.785],
        [3, -5, 0],
        H_SIM,
        int(round(duration / H_SIM)),
        ELLIPSE,
        Ground(),
        mu,
        0.2,
    )
    idx = np.arange(0, len(tr.t), int(round(1 / (fps * H_SIM))))
    rng = np.random.default_rng(seed)
    return tr.t[idx], tr.q[idx] + rng.normal(0, 1e-3, (len(idx), 3))


def run(duration: float, structure: str, repeats: int, max_iter: int = 500) -> dict:
    t_m, q_m = data(duration)
    settings = IpoptSettings(structure=structure, max_iter=max_iter)
    builds, solves, result = [], [], {}
    for _ in range(repeats):
        t0 = time.perf_counter()
        p = build_nlp(t_m, q_m, GEOMETRY, settings)
        t1 = time.perf_counter()
        sol = p.solver(x0=p.x0, lbx=p.lbx, ubx=p.ubx, lbg=p.lbg, ubg=p.ubg)
        t2 = time.perf_counter()
        builds.append(t1 - t0)
        solves.append(t2 - t1)
        st = p.solver.stats()
        result = {
            "iterations": st["iter_count"],
            "status": st["return_status"],
            "j_over_m_mm2": float(sol["x"][0]) * GEOMETRY.a**2 * 1e6,
            "steps": len(p.t) - 1,
            "variables": p.x0.size,
            **p.sparsity,
        }
    result["build_s"] = statistics.median(builds)
    result["ipopt_s"] = statistics.median(solves)
    return result


def show(label: str, r: dict) -> None:
    print(
        f"{label:<28} N={r['steps']:5d} vars={r['variables']:6d} "
        f"jac nnz={r['jacobian_nnz']:9d} hess nnz={r['hessian_nnz']:9d} "
        f"build {r['build_s']:6.2f} s  IPOPT {r['ipopt_s']:7.2f} s  {r['iterations']:4d} it  "
        f"J/m {r['j_over_m_mm2']:6.1f} mm^2  {r['status']}",
        flush=True,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--short", type=float, nargs="+", default=[0.1, 0.2])
    args = ap.parse_args()
    print("Target: 1 s window at 240 fps, h <= 1 ms, IPOPT <= 10 s")
    full = run(1.0, "stepwise", args.repeats)
    show("stepwise, 1 s", full)
    for duration in args.short:
        s = run(duration, "stepwise", args.repeats)
        d = run(duration, "dense", args.repeats)
        show(f"stepwise, {duration:g} s", s)
        show(f"dense,    {duration:g} s", d)
        print(
            f"  dense / stepwise at {duration:g} s: IPOPT time x{d['ipopt_s'] / s['ipopt_s']:.1f}, "
            f"build x{d['build_s'] / s['build_s']:.1f}, "
            f"Hessian nnz x{d['hessian_nnz'] / s['hessian_nnz']:.1f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
