"""The tree estimator's start guard (issue 24), against the start it replaced, on the
coverage studies' datasets: per dataset the final cost per step, the iterations, whether
it converged and the CPU time of the identification, for

- ``before``: the warm start with the low-pass's edge rows kept and LM from it alone (main
  before the guard; one LM run), and
- ``guarded``: LM from the warm start with the edge rows left out
  (``estimation.tree_warm_start.EDGE_PERIODS``), from the spec's values and from the start
  before, the converged fit of lowest cost kept (``rigs.models.identify_tree.fit_guarded``),

both in this process on the same datasets, alternating per seed (so that load affects both).
It prints the datasets where the guarded fit ends higher than before (beyond 1e-9 of the
cost: round-off), which start won, the CPU ratio, and each side's coverage.

    python benchmarks/bench_tree_start_guard.py [--motions] [--seeds 50] [--jsonl rows.jsonl]
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import replace

from physid.rigs.models import identify_tree
from physid.rigs.models.identify_hinged import enable_compilation_cache
from physid.rigs.pipeline.coverage import (
    TREE_PENDULUM,
    TREE_PENDULUM_MOTIONS,
    coverage,
    run_tree_case,
)

GUARDED = identify_tree.fit_guarded


def unguarded(problem, starts, settings, names, n_total, say):
    """``fit_guarded`` before the guard: LM from the warm start with its edge rows kept (the
    last of ``starts``, which is the spec's values where that start was not used), alone."""
    label, X, theta = starts[-1]
    res = identify_tree.fit(problem, X, theta, settings, names, n_total, say)
    white = identify_tree.fitted_covariance(problem, res)
    return res, theta, None, (white, identify_tree.tree_fit_status(problem, res, white))


def mode(name: str) -> None:
    identify_tree.fit_guarded = unguarded if name == "before" else GUARDED


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--motions", action="store_true", help="the 2 ± 0.5 rad releases")
    parser.add_argument("--seeds", type=int, default=50)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--jsonl", help="append each seed's comparison to this file")
    args = parser.parse_args()
    enable_compilation_cache()
    case = TREE_PENDULUM
    if args.motions:
        case = replace(case, angle_spread=TREE_PENDULUM_MOTIONS.angle_spread)
    identify = identify_tree.identify_tree_series
    last = {}

    def capture(*a, **k):
        last["est"], fits = identify(*a, **k)
        return last["est"], fits

    identify_tree.identify_tree_series = capture  # run_tree_case imports it when called
    rows = {"before": [], "guarded": []}
    cpu = {"before": 0.0, "guarded": 0.0}
    worse, won, out = [], {}, []
    start = time.perf_counter()
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        one = {"seed": seed}
        for name in ("before", "guarded"):
            mode(name)
            t = time.process_time()
            rows[name] += run_tree_case(case, [seed])
            spent = time.process_time() - t
            if seed > args.first_seed:  # the first seed compiles
                cpu[name] += spent
            est = last["est"]
            one[name] = {
                "cost": est.cost,
                "iterations": est.iterations,
                "converged": est.converged,
                "cpu_s": spent,
                "start_guard": est.extra.get("start_guard"),
            }
        b, g = one["before"], one["guarded"]
        kept = (g["start_guard"] or {}).get("kept", "-")
        won[kept] = won.get(kept, 0) + 1
        if g["cost"] > b["cost"] * (1 + identify_tree.GUARD_TIE):
            worse.append(seed)
        print(
            f"seed {seed}: cost/step before {b['cost']:.10g} ({b['iterations']} it, "
            f"{'conv' if b['converged'] else 'NOT conv'}), guarded {g['cost']:.10g} "
            f"({g['iterations']} it, {'conv' if g['converged'] else 'NOT conv'}, kept {kept}), "
            f"Δ {g['cost'] / b['cost'] - 1:+.2e}",
            flush=True,
        )
        out.append(one)
        if args.jsonl:
            with open(args.jsonl, "a") as fh:
                fh.write(json.dumps(one) + "\n")
    mode("guarded")
    n = len(out)
    print(
        f"\n{n} datasets in {time.perf_counter() - start:.0f} s wall "
        f"(load average {os.getloadavg()[0]:.1f}); guarded higher than before (> 1e-9): "
        f"{worse or 'none'}; lower by > 1e-9: "
        f"{[o['seed'] for o in out if o['guarded']['cost'] < o['before']['cost'] * (1 - 1e-9)]}"
    )
    for name in ("before", "guarded"):
        conv = sum(o[name]["converged"] for o in out)
        print(f"{name}: converged {conv}/{n}; CPU {cpu[name]:.1f} s (seeds after the first)")
    print(f"guarded/before CPU: {cpu['guarded'] / max(cpu['before'], 1e-9):.2f}; kept: {won}")
    for name in ("before", "guarded"):
        table = coverage(rows[name])
        print(
            f"{name} coverage (within 1 / 2 std): "
            + "; ".join(
                f"{k} {100 * v['within_1_std']:.0f} / {100 * v['within_2_std']:.0f} %"
                for k, v in table.items()
            )
        )


if __name__ == "__main__":
    main()
