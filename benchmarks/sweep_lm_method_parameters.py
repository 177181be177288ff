"""Method-parameter sweeps of Marklund, Servin & Larson, Section 4.7 (Figures 6 and 7), for our
Levenberg–Marquardt estimator.

Synthetic "release" scenario: the Furuta pendulum released from θ1 = 0, θ2 = π − 0.03 rad,
simulated with the Table G.5 truth at h = 1e-4 s (``[simulation]`` of ``rigs/specs/furuta.toml``),
logged at 1 kHz with 0.001 rad Gaussian noise on both joint angles. J_Azz, J_Byy, b1 and b2 are
identified from their Table 1 initial values; every other value is the simulation's. The
recording is simulated once and every sweep point refits it:

- Figure 6, left (``--sweep h``): estimator time step h, with ε = 1e-4 and κ = 100;
- Figure 6, right (``--sweep eps``): hinge compliance ε (eps_lin1 = eps_lin2 = ε m/N,
  eps_rot1 = eps_rot2 = ε rad/(N m)) at h = 1e-2 s, κ = 100;
- Figure 7 (``--sweep kappa``): state error weight κ at h = 1e-2 s, ε = 1e-4.

Each point prints one line (identified values over truth, iterations, converged, wall time)
and the figures plot, against the swept value on a log axis, the four parameters over their
truth and the cost split per time step: observation MSE Σ‖obs‖²/n (rad²) and state (dynamics)
MSE Σ‖dyn‖²/n without the κ weight (impulse units²), plus κ × that, the state term as it
enters the cost. Points where LM stopped without converging are marked with a red ring.

    python benchmarks/sweep_lm_method_parameters.py [--sweep all] [--duration 10] [--quick]

Outputs in ``--out`` (default ``benchmarks/out/sweeps``, ``.../sweeps-quick`` with --quick):
``sweep_<name>.json`` per sweep, ``sweeps.csv`` with every point of the sweeps found there, and
``fig6_h_eps.png`` / ``fig7_kappa.png`` (figure 6 draws whichever of its columns exist, so
sweeps run by separate invocations into one folder end up in one figure).

Cost, measured 2026-11-23 on a 2-core CPU shared with another job (10 s recording, defaults):
truth simulation 4–20 s; a fit at h = 1e-2 (1000 steps) 15–40 s; ``--sweep kappa`` 7 min,
``--sweep eps`` 5 min, ``--sweep h`` 9.5 min (the h = 2e-3 point alone 3.2 min, h = 5e-3
2 min, each new h also compiles once), so ``--sweep all`` ≈ 22 min. h = 1e-3 (10000 steps;
estimated 6+ min, twice the 2e-3 point) is left out of the default points; add it with
``--h-values``. ``--quick`` (3 s recording, three or four points per sweep) is a smoke run of
about 5 minutes with a cold compilation cache, less with a warm one. ``--base-h``,
``--base-eps`` and ``--base-kappa`` move the fixed values (e.g. to run the h sweep on our own
κ/ε plateau); write such runs to another ``--out``.
"""

from __future__ import annotations

import argparse
import csv
import json
import time
from pathlib import Path

import matplotlib
import numpy as np

matplotlib.use("Agg")  # files only: no display on the benchmark machines
from matplotlib.ticker import NullFormatter

from physid.rigs.models.identify_hinged import enable_compilation_cache
from physid.rigs.pipeline.sample import EncoderScenario
from physid.rigs.pipeline.synthetic import identify_recording, record
from physid.spec import load_spec, with_overrides

PARAMETERS = ("J_Azz", "J_Byy", "b1", "b2")
COMPLIANCES = {"eps_lin1": "m/N", "eps_lin2": "m/N", "eps_rot1": "rad/N m", "eps_rot2": "rad/N m"}
BASE = {"h": 1e-2, "eps": 1e-4, "kappa": 100.0}  # the paper's fixed values while another sweeps
LABELS = {"h": "time step h (s)", "eps": "compliance ε (m/N, rad/N m)", "kappa": "state weight κ"}

# Default points: the paper's ranges. h stops at 2e-3: a 10 s fit at 1e-3 (an estimated 6+ min
# here) would push --sweep all past the ~30 min budget (see the docstring).
POINTS = {
    "h": [2e-3, 5e-3, 1e-2, 1.5e-2, 2e-2, 3e-2, 5e-2],
    "eps": [1e-7, 3e-7, 1e-6, 3e-6, 1e-5, 3e-5, 1e-4, 3e-4, 1e-3, 3e-3, 1e-2],
    "kappa": [float(k) for k in np.logspace(-2, 5, 15)],
}
QUICK_POINTS = {"h": [5e-3, 1e-2, 2e-2, 5e-2], "eps": [1e-6, 1e-4, 1e-2], "kappa": [0.1, 10, 1e3]}
QUICK_DURATION = 3.0


def simulate_release(duration: float, seed: int):
    """The Section 4.7 recording: release from π − 0.03 rad, 1e-3 rad Gaussian angle noise."""
    rng = np.random.default_rng(seed)
    scenario = EncoderScenario(duration=duration, angles0=(0.0, np.pi - 0.03))
    return record(load_spec("furuta"), scenario, lambda a: a + rng.normal(0.0, 1e-3, a.shape))


def point_settings(base: dict, sweep: str, value: float) -> dict:
    """h, ε, κ of one sweep point: the swept one set to ``value``, the others at ``base``."""
    return {**base, sweep: float(value)}


def fit_point(recording, settings: dict, max_iter: int, verbose: bool) -> dict:
    """Identify the four parameters at one (h, ε, κ); returns the row of numbers to report."""
    # The estimator's compliance replaces the simulation's 1e-6 (the recording's spec carries
    # the truth as fixed values); τ and everything else stay the truth.
    spec = with_overrides(
        recording.spec, {k: f"{settings['eps']!r} {u}" for k, u in COMPLIANCES.items()}
    )
    method = {
        "h": {"value": settings["h"], "unit": "s"},
        "kappa": settings["kappa"],
        "max_iter": float(max_iter),
    }
    row = dict(settings)
    t0 = time.perf_counter()
    try:
        res, values, problem = identify_recording(
            spec, recording.log, method, print_iteration if verbose else None
        )
    except Exception as exc:  # a failed point is a result of the sweep, not a reason to stop
        row.update(error=f"{type(exc).__name__}: {exc}", converged=False, iterations=0)
        row["wall_s"] = time.perf_counter() - t0
        return row
    row["wall_s"] = time.perf_counter() - t0
    row.update(cost_split(problem, res, settings["kappa"]))
    for name in PARAMETERS:
        row[name] = values[name]
        row[f"{name}_rel"] = values[name] / recording.truth[name]
    row.update(
        iterations=res.iterations,
        warmup_iterations=res.warmup_iterations,
        converged=bool(res.converged),
        reason=res.reason,
        cost=res.cost,
    )
    return row


def print_iteration(i, cost, alpha, theta) -> None:
    print(f"    it {i:3d} cost {cost:.4e} alpha {alpha:.1e}", flush=True)


def cost_split(problem, res, kappa: float) -> dict:
    """Per-step MSEs of the fitted residual blocks. The dynamics rows carry √κ, so the state
    MSE is divided by κ to compare fits made with different κ; ``state_mse_weighted`` is its
    share of the cost."""
    dyn, obs, init = problem.residuals(res.X, res.theta)
    n = len(problem.y)
    state = float(np.sum(dyn**2)) / n
    return {
        "n": n,
        "obs_mse": float(np.sum(obs**2)) / n,
        "state_mse": state / kappa,
        "state_mse_weighted": state,
        "init_cost": float(np.sum(init**2)),
    }


def print_header(sweep: str, base: dict) -> None:
    cols = "".join(f"{p + '/true':>12}" for p in PARAMETERS)
    others = ", ".join(f"{k} = {v:g}" for k, v in base.items() if k != sweep)
    print(f"\n--- sweep {sweep} ({others})", flush=True)
    print(f"{sweep:>9}{cols}{'obs MSE':>11}{'state MSE':>11}{'it':>5} conv {'wall s':>8}")


def print_row(sweep: str, row: dict) -> None:
    if "error" in row:
        print(f"{row[sweep]:9.3g}  failed after {row['wall_s']:.1f} s: {row['error']}")
        return
    rel = "".join(f"{row[f'{p}_rel']:12.4f}" for p in PARAMETERS)
    print(
        f"{row[sweep]:9.3g}{rel}{row['obs_mse']:11.3e}{row['state_mse']:11.3e}"
        f"{row['iterations']:5d} {'yes ' if row['converged'] else 'NO  '}{row['wall_s']:8.1f}",
        flush=True,
    )


def run_sweep(sweep: str, values, recording, args, base: dict, duration: float) -> list[dict]:
    print_header(sweep, base)
    rows = []
    for value in values:
        settings = point_settings(base, sweep, value)
        row = fit_point(recording, settings, args.max_iter, args.verbose)
        row.update(sweep=sweep, duration=duration)
        print_row(sweep, row)
        rows.append(row)
    return rows


# ---------------------------------------------------------------------------- outputs


def load_sweeps(out: Path) -> dict[str, list[dict]]:
    """Every sweep saved in ``out`` (also those of earlier invocations)."""
    found = {}
    for sweep in POINTS:
        path = out / f"sweep_{sweep}.json"
        if path.exists():
            found[sweep] = json.loads(path.read_text())["points"]
    return found


def write_csv(path: Path, sweeps: dict[str, list[dict]]) -> None:
    rows = [row for rows in sweeps.values() for row in rows]
    fields = list(dict.fromkeys(key for row in rows for key in row))
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fields)
        writer.writeheader()
        writer.writerows(rows)


def plot_column(axes, sweep: str, rows: list[dict]) -> None:
    """One column of a figure against ``sweep``: inertias and dampers over their truth (the
    dampers move by factors, the inertias by percent, hence two panels) and the MSEs."""
    ax_j, ax_b, ax_err = axes
    x = np.array([r[sweep] for r in rows])

    def col(key):
        return np.array([r.get(key, np.nan) for r in rows], float)

    for ax, names in ((ax_j, PARAMETERS[:2]), (ax_b, PARAMETERS[2:])):
        for name in names:
            ax.plot(x, col(f"{name}_rel"), "o-", ms=4, label=name)
        ax.axhline(1.0, color="0.6", lw=0.8)
        ax.set_ylabel("identified / truth")
    ax_err.plot(x, col("obs_mse"), "o-", ms=4, label="observation MSE (rad²)")
    ax_err.plot(x, col("state_mse"), "s-", ms=4, label="state MSE, unweighted")
    ax_err.plot(x, col("state_mse_weighted"), "s:", ms=3, color="0.5", label="κ × state MSE")
    # Non-converged points: a red ring around every curve's marker at that x.
    bad = np.array([not r["converged"] and "error" not in r for r in rows])
    for ax, keys in (
        (ax_j, [f"{p}_rel" for p in PARAMETERS[:2]]),
        (ax_b, [f"{p}_rel" for p in PARAMETERS[2:]]),
        (ax_err, ["obs_mse", "state_mse"]),
    ):
        for key in keys:
            ax.plot(x[bad], col(key)[bad], "o", ms=10, mfc="none", mec="red", mew=1.5)
        for r in rows:  # failed fits leave a gap: mark where
            if "error" in r:
                ax.axvline(r[sweep], color="red", ls=":", lw=1)
    ax_j.plot([], [], "o", ms=10, mfc="none", mec="red", label="not converged")
    for ax in axes:
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())  # 2x10^-2, 3x10^-2 ... collide
        ax.grid(True, which="both", alpha=0.3)
    if x.max() < 1e3 * x.min():  # under three decades (h): label the points themselves
        ax_err.set_xticks(x, [f"{v:g}" for v in x], rotation=45)
    ax_err.set_yscale("log")
    ax_err.set_ylabel("MSE per time step")
    ax_err.set_xlabel(LABELS[sweep])
    fixed = ", ".join(f"{k} = {rows[0][k]:g}" for k in BASE if k != sweep)
    ax_j.set_title(f"{sweep} sweep ({fixed})", fontsize=10)


def plot_figure(path: Path, sweeps: dict[str, list[dict]], columns, title: str) -> None:
    import matplotlib.pyplot as plt

    present = [c for c in columns if c in sweeps]
    if not present:
        return
    fig, axes = plt.subplots(
        3, len(present), figsize=(5.5 * len(present), 9), sharex="col", squeeze=False
    )
    for j, sweep in enumerate(present):
        plot_column(axes[:, j], sweep, sweeps[sweep])
    for ax in axes[:, 0]:
        ax.legend(fontsize=8)
    duration = sweeps[present[0]][0]["duration"]
    fig.suptitle(f"{title} — Furuta release, {duration:.3g} s recording", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_outputs(out: Path) -> None:
    sweeps = load_sweeps(out)
    write_csv(out / "sweeps.csv", sweeps)
    plot_figure(out / "fig6_h_eps.png", sweeps, ("h", "eps"), "Figure 6")
    plot_figure(out / "fig7_kappa.png", sweeps, ("kappa",), "Figure 7")


# ---------------------------------------------------------------------------- main


def parse_values(text: str | None) -> list[float] | None:
    return None if text is None else [float(v) for v in text.split(",")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="output folder (default benchmarks/out/sweeps)")
    ap.add_argument("--duration", type=float, help="recording length in s (default 10)")
    ap.add_argument("--quick", action="store_true", help="3 s recording, 3–4 points per sweep")
    ap.add_argument("--sweep", choices=("h", "eps", "kappa", "all"), default="all")
    ap.add_argument("--h-values", help="comma-separated h points (s) instead of the defaults")
    ap.add_argument("--eps-values", help="comma-separated ε points instead of the defaults")
    ap.add_argument("--kappa-values", help="comma-separated κ points instead of the defaults")
    for key in BASE:  # the paper's fixed values; a plateau elsewhere may call for others
        ap.add_argument(f"--base-{key}", type=float, help=f"{key} while another sweeps")
    ap.add_argument("--max-iter", type=int, default=50, help="LM iteration limit (default 50)")
    ap.add_argument("--seed", type=int, default=0, help="noise seed")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every LM iteration")
    args = ap.parse_args()

    points = QUICK_POINTS if args.quick else POINTS
    duration = args.duration or (QUICK_DURATION if args.quick else 10.0)
    out = args.out or Path("benchmarks/out/sweeps-quick" if args.quick else "benchmarks/out/sweeps")
    out.mkdir(parents=True, exist_ok=True)
    sweeps = list(POINTS) if args.sweep == "all" else [args.sweep]
    overrides = {"h": args.h_values, "eps": args.eps_values, "kappa": args.kappa_values}
    given = {"h": args.base_h, "eps": args.base_eps, "kappa": args.base_kappa}
    base = {k: BASE[k] if given[k] is None else given[k] for k in BASE}

    enable_compilation_cache()
    t0 = time.perf_counter()
    recording = simulate_release(duration, args.seed)
    print(f"simulated {duration:g} s release at h = 1e-4 in {time.perf_counter() - t0:.1f} s")
    for sweep in sweeps:
        values = parse_values(overrides[sweep]) or points[sweep]
        t1 = time.perf_counter()
        rows = run_sweep(sweep, values, recording, args, base, duration)
        meta = {"duration": duration, "seed": args.seed, "max_iter": args.max_iter, "base": base}
        path = out / f"sweep_{sweep}.json"
        path.write_text(json.dumps({"meta": meta, "points": rows}, indent=1))
        print(f"sweep {sweep}: {time.perf_counter() - t1:.0f} s wall")
        write_outputs(out)  # after each sweep, so an interrupted run keeps what it has
    print(f"total {time.perf_counter() - t0:.0f} s wall; outputs in {out}")


if __name__ == "__main__":
    main()
