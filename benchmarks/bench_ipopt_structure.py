"""IPOPT identification of the ellipse drop: step-wise (sparse) NLP vs the same NLP dense.

Both NLPs are (27) with the same variables, weights and warm start. "stepwise" keeps every
fine-grid state as a decision variable, so each constraint touches one step and the
Jacobian and Hessian have O(N) non-zeros. "dense" eliminates the states by single shooting
(q^k, v^k as recursive expressions of the impulses), the usual way such a problem is
written without regard to structure: its Jacobian and Hessian fill in, O(N^2).

    python benchmarks/bench_ipopt_structure.py [--repeats 3] [--baseline REV]

Prints build and IPOPT times (median of the repeats; wall and process CPU, since the
machine is shared and wall time depends on the load), iterations, non-zeros and the
ratio. The dense build is run on short windows only (it grows quadratically).
It also times one whole identification (``identify_contact``: build, first solve and any
restart) of the 1 s case, which is what a user waits for: the single solve above is only
its largest part. ``--baseline REV`` also runs the 1 s problem and the whole
identification with ``estimation/ipopt_contact.py`` as of git revision REV (e.g. 24ba501,
before the issue-6 speed work) for a before/after.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

import physid.estimation.ipopt_contact as current  # noqa: E402
from physid.dynamics.planar_contact import Ellipse, Ground, simulate  # noqa: E402

ELLIPSE = Ellipse(0.05, 0.025, 0.064, 0.064 * 756e-6)
GEOMETRY = current.ContactGeometry(0.05, 0.025)
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


def run(duration: float, structure: str, repeats: int, max_iter: int = 500, module=current):
    t_m, q_m = data(duration)
    settings = module.IpoptSettings(structure=structure, max_iter=max_iter)
    geometry = module.ContactGeometry(0.05, 0.025)
    builds, solves, cpus, result = [], [], [], {}
    for _ in range(repeats):
        t0 = time.perf_counter()
        p = module.build_nlp(t_m, q_m, geometry, settings)
        t1, c1 = time.perf_counter(), time.process_time()
        # the step-wise NLP takes the poses as its parameter (since issue 24's bootstrap)
        data_p = getattr(p, "p", None)
        data_p = [] if data_p is None else data_p
        sol = p.solver(x0=p.x0, p=data_p, lbx=p.lbx, ubx=p.ubx, lbg=p.lbg, ubg=p.ubg)
        t2, c2 = time.perf_counter(), time.process_time()
        builds.append(t1 - t0)
        solves.append(t2 - t1)
        cpus.append(c2 - c1)
        st = p.solver.stats()
        result = {
            "iterations": st["iter_count"],
            "status": st["return_status"],
            "j_over_m_mm2": float(sol["x"][0]) * GEOMETRY.a**2 * 1e6,
            "mu": float(sol["x"][1]),
            "steps": len(p.t) - 1,
            "variables": p.x0.size,
            **p.sparsity,
        }
    result["build_s"] = statistics.median(builds)
    result["ipopt_s"] = statistics.median(solves)
    result["ipopt_cpu_s"] = statistics.median(cpus)
    return result


def identify(duration: float, repeats: int, module=current) -> dict:
    """Time whole ``identify_contact`` calls on the benchmark case (median of the repeats)."""
    t_m, q_m = data(duration)
    settings = module.IpoptSettings()
    geometry = module.ContactGeometry(0.05, 0.025)
    walls, cpus = [], []
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        fit = module.identify_contact(t_m, q_m, geometry, settings)
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    restarts = fit.stats["restarts"]
    first = fit.iterations - sum(r["iterations"] for r in restarts)
    return {
        "wall_s": statistics.median(walls),
        "cpu_s": statistics.median(cpus),
        "build_s": fit.stats["build_s"],
        "ipopt_s": fit.wall_s,
        "iterations": [first] + [r["iterations"] for r in restarts],
        "restarts": [
            f"{r['reason']} ({'kept' if r['objective'] < r['first'] else 'not kept'})"
            for r in restarts
        ],
        "j_over_m_mm2": fit.j_over_m * 1e6,
        "mu": fit.mu,
        "status": fit.status,
    }


def show_identify(label: str, r: dict) -> None:
    its = " + ".join(map(str, r["iterations"]))
    print(
        f"{label:<28} whole identification {r['wall_s']:6.2f} s wall {r['cpu_s']:6.2f} s CPU "
        f"(build {r['build_s']:.2f} s, IPOPT {r['ipopt_s']:.2f} s)  {its} it  "
        f"restart: {', '.join(r['restarts']) or 'none'}  "
        f"J/m {r['j_over_m_mm2']:6.1f} mm^2  mu {r['mu']:.3f}  {r['status']}",
        flush=True,
    )


def baseline_module(rev: str):
    """``estimation/ipopt_contact.py`` as of git revision ``rev``, imported from a temp file."""
    root = Path(__file__).resolve().parents[1]
    src = subprocess.run(
        ["git", "show", f"{rev}:estimation/ipopt_contact.py"],
        cwd=root,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    path = Path(tempfile.mkdtemp()) / f"ipopt_contact_{rev}.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module


def show(label: str, r: dict) -> None:
    print(
        f"{label:<28} N={r['steps']:5d} vars={r['variables']:6d} "
        f"jac nnz={r['jacobian_nnz']:9d} hess nnz={r['hessian_nnz']:9d} "
        f"build {r['build_s']:6.2f} s  IPOPT {r['ipopt_s']:7.2f} s wall "
        f"{r['ipopt_cpu_s']:7.2f} s CPU  {r['iterations']:4d} it  "
        f"J/m {r['j_over_m_mm2']:6.1f} mm^2  mu {r['mu']:.3f}  {r['status']}",
        flush=True,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--short", type=float, nargs="*", default=[0.1, 0.2])
    ap.add_argument("--baseline", help="git revision of ipopt_contact.py to compare with")
    args = ap.parse_args()
    print("Target: 1 s window at 240 fps, h <= 1 ms, IPOPT <= 10 s")
    full = run(1.0, "stepwise", args.repeats)
    show("stepwise, 1 s", full)
    show_identify("stepwise, 1 s", identify(1.0, args.repeats))
    if args.baseline:
        before = baseline_module(args.baseline)
        show(f"stepwise, 1 s @{args.baseline}", run(1.0, "stepwise", 1, module=before))
        show_identify(f"stepwise, 1 s @{args.baseline}", identify(1.0, 1, module=before))
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
