"""Table 1 of Gabiccini & Fusco (Section 6.1) for our IPOPT estimator.

For mu = 0.1 ... 0.9 and 30, 60, 120, 200, 240 fps: simulate the Section 6.1 throw (IRC,
eps = 0.2, 1 mm / 1 mrad noise, 1 s) with ``physid simulate``'s code path, identify with
``physid identify``'s code path (same spec, same weights for every cell: no per-cell tuning),
and print the percentage error of J/m (truth 756 mm^2) and the identified mu.

    python benchmarks/sweep_ellipse_table1.py [--mu 0.1,0.5] [--fps 120,240] [--seed 0]
        [--truth-h 1/12000]

The truth is simulated with IRC at ``--truth-h`` (default 1/12000 s), ten times finer than
``physid simulate``'s default 1/1200 s: at 1/1200 s the IRC truth sinks 2.8 mm into the
ground at the first impact and 2.3 mm over 1 s of rolling (IRC acts on velocities only,
Section 3.2), a discretization artifact three noise levels deep that no rigid-contact model
can follow; at 1/12000 s it is ten times smaller (docs/planar-contact.md).

Takes several minutes (one IPOPT solve of ~1000 fine steps per cell).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

# One BLAS/OpenMP thread: the machine is shared and IPOPT's MUMPS gains nothing from more.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
from rich.console import Console  # noqa: E402

from physid.rigs.models.ellipse_drop import NotIdentifiableInput, identify, simulate  # noqa: E402
from physid.rigs.models.kinds import SimulateOptions  # noqa: E402
from physid.spec import load_spec, with_overrides  # noqa: E402

MUS = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]
FPS = [30, 60, 120, 200, 240]
TRUTH = 756e-6
TRUTH_H = 1.0 / 12000  # s; divides every frame interval 1/30 ... 1/240 s


def _seconds(text: str) -> float:
    """'1/12000' or '8.3e-5' (s)."""
    num, _, den = text.partition("/")
    return float(num) / float(den or 1)


def run_cell(mu: float, fps: int, seed: int, work: Path, truth_h: float = TRUTH_H) -> dict:
    spec = with_overrides(load_spec("ellipse_drop"), {"mu": str(mu), "fps": str(fps)})
    quiet = Console(quiet=True)
    sim_dir = work / f"mu{mu}_fps{fps}"
    simulate(spec, SimulateOptions(sim_dir, dt=truth_h, seed=seed), quiet)
    imp = np.loadtxt(sim_dir / "impulses.csv", delimiter=",", skiprows=1)
    # Truth slides in a step with a normal impulse and a positive friction multiplier
    # (lambda = slip speed, eq. 18).
    slide_steps = int(np.sum((imp[:, 1] > 0) & (imp[:, 3] > 1e-6)))
    t0, c0 = time.perf_counter(), time.process_time()
    try:
        est = identify(load_spec("ellipse_drop"), [sim_dir / "poses.csv"], sim_dir / "id", quiet)
    except NotIdentifiableInput as exc:
        return {"mu": mu, "fps": fps, "error": str(exc), "truth_slide_steps": slide_steps}
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    jm, mu_est = est.parameters["J_over_m"], est.parameters["mu"]
    return {
        "mu": mu,
        "fps": fps,
        "j_over_m": jm.value,
        "j_over_m_std": jm.std,
        "err_pct": 100 * (jm.value / TRUTH - 1),
        "mu_hat": mu_est.value,
        "mu_std": mu_est.std,
        "mu_sliding": mu_est.identifiable,
        "iterations": est.iterations,
        "status": est.settings["ipopt_status"],
        "wall_s": wall,
        "cpu_s": cpu,
        "ipopt_s": est.settings["ipopt_s"],
        "truth_slide_steps": slide_steps,
        # Second solves from the tighter initial cone: why they ran and whether their
        # solution (the lower objective) was kept.
        "restarts": [
            {"reason": r["reason"], "kept": r["objective"] < r["first"]}
            for r in est.settings.get("restarts", [])
        ],
    }


def _restart_text(c: dict) -> str:
    runs = [f"{r['reason']} restart {'kept' if r['kept'] else 'not kept'}" for r in c["restarts"]]
    return ", ".join(runs) if runs else "no restart"


def _jm_cell(c: dict) -> str:
    if "error" in c:
        return "//"
    return f"{c['err_pct']:+.1f} ± {100 * c['j_over_m_std'] / TRUTH:.1f}"


def _mu_cell(c: dict) -> str:
    if "error" in c:
        return "//"
    if not c["mu_sliding"]:
        return f"≥{c['mu_hat']:.2f}"
    return f"{c['mu_hat']:.2f} ± {c['mu_std']:.2f}*"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mu", default=",".join(map(str, MUS)))
    ap.add_argument("--fps", default=",".join(map(str, FPS)))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--truth-h", type=_seconds, default=TRUTH_H, help="IRC step of the truth (s)")
    ap.add_argument("--json", type=Path, help="also write the cells as JSON here")
    args = ap.parse_args()
    mus = [float(x) for x in args.mu.split(",")]
    fpss = [int(x) for x in args.fps.split(",")]
    cells = {}
    with tempfile.TemporaryDirectory() as tmp:
        for mu in mus:
            for fps in fpss:
                cell = run_cell(mu, fps, args.seed, Path(tmp), args.truth_h)
                cells[mu, fps] = cell
                if "error" in cell:
                    print(f"mu={mu} fps={fps}: not identifiable: {cell['error']}", flush=True)
                else:
                    print(
                        f"mu={mu} fps={fps}: J/m {cell['j_over_m'] * 1e6:7.1f} "
                        f"+- {cell['j_over_m_std'] * 1e6:.1f} mm^2 ({cell['err_pct']:+.1f} %), "
                        f"mu {cell['mu_hat']:.3f} +- {cell['mu_std']:.3f}"
                        f"{'' if cell['mu_sliding'] else ' (no slip: lower bound)'}, "
                        f"{cell['iterations']} it, IPOPT {cell['ipopt_s']:.1f} s, "
                        f"cell {cell['wall_s']:.1f} s wall / {cell['cpu_s']:.1f} s CPU, "
                        f"{cell['status']}, {_restart_text(cell)}",
                        flush=True,
                    )
    print()
    print(f"truth: IRC at h = {args.truth_h:.3g} s, seed {args.seed}")
    print("J/m error (%) +- reported std (%), truth 756 mm^2, eps = 0.2, 1 mm noise")
    print("| mu | " + " | ".join(f"{f} fps" for f in fpss) + " |")
    print("|---|" + "---|" * len(fpss))
    for mu in mus:
        row = [cells[mu, f] for f in fpss]
        print(f"| {mu} | " + " | ".join(_jm_cell(c) for c in row) + " |")
    print()
    print("identified mu +- std (* = sliding seen, mu identified; otherwise lower bound)")
    print("| mu | truth sliding steps | " + " | ".join(f"{f} fps" for f in fpss) + " |")
    print("|---|---|" + "---|" * len(fpss))
    for mu in mus:
        row = [cells[mu, f] for f in fpss]
        print(
            f"| {mu} | {row[0]['truth_slide_steps']} | "
            + " | ".join(_mu_cell(c) for c in row)
            + " |"
        )
    for key, label in (("wall_s", "wall"), ("cpu_s", "CPU"), ("iterations", "iterations")):
        vals = sorted(c[key] for c in cells.values() if key in c)
        if vals:
            print(
                f"{label} per identification: median {vals[len(vals) // 2]:.1f}, max {vals[-1]:.1f}"
            )
    if args.json:
        args.json.write_text(json.dumps([c for c in cells.values()], indent=1))


if __name__ == "__main__":
    main()
