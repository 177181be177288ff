"""The frames' restitution of the ellipse drop (issue 24): frame differences across each
impact (``drop_checks.restitution`` alone, the estimator before) against the same pooled with
the ballistic flights at the impact instant (``drop_checks.frames_restitution``, what the
drop path's start of the output error), on the same noise draws, no fit; with
``--landings N``, also the same with a fit of the IRC model over each landing the flights
cannot read (``drop_landings.landings_restitution``, what the drop path reports where the
output error is not kept) on the first N datasets of each case, from J/m and mu off by what
the NLP's fit is off on varied throws (+1.5 %, +0.01; the landing fit refits them). Prints,
per case, the error's mean and sd, the fraction within 1 / 2 of its own std (issue 24's
band: 60-76 % / >= 95 %), how many impacts the flights gave, and the CPU time of each
estimator (median of the per-draw times) and their ratio.

    python benchmarks/bench_restitution.py [--draws 400] [--throws 150] [--landings 40]
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import replace

import numpy as np

from physid.rigs.models import drop_checks
from physid.rigs.models.drop_landings import landings_restitution
from physid.rigs.pipeline.drop_coverage import NO_SLIP, SLIDING, throw

CONVERGED = 1.0 / 24000  # s, the IRC truth's converged step (docs/validation.md)
NLP_ERROR = (1.015, 0.01)  # J/m factor and mu offset of the landing fits' start


def cases(draws: int, throws: int):
    """(label, case, seeds, varied) of each study: the Section 6.1 throw's noise draws and
    varied throws, sliding (mu 0.3) and not (mu 0.9), IRC truth at 1/1200 s and converged."""
    yield "6.1 throw, mu 0.3, IRC 1/1200 s", SLIDING, range(draws), False
    converged = replace(SLIDING, truth_h=CONVERGED)
    yield "6.1 throw, mu 0.3, IRC converged", converged, range(draws), False
    yield "6.1 throw, mu 0.9, IRC 1/1200 s", NO_SLIP, range(draws), False
    for mu_case, name in ((SLIDING, "mu 0.3"), (NO_SLIP, "mu 0.9")):
        for h, h_name in ((None, "1/1200 s"), (CONVERGED, "converged")):
            case = replace(mu_case, throws=True, truth_h=h)
            yield f"varied throws, {name}, IRC {h_name}", case, range(throws), True


def study(case, seeds, varied: bool, landings: int = 0) -> dict:
    """Per estimator: errors, |z| and CPU s per draw; and the flights' impact count. With
    ``landings``, the first that many datasets only, each estimator also with landing
    fits."""
    out = {"frame differences": ([], [], []), "with flights": ([], [], [])}
    if landings:
        out["with landing fits"] = ([], [], [])
        seeds = seeds[:landings]
    sources = []
    fixed = None if varied else throw(case)
    for seed in seeds:
        _, geometry, t_m, q_true, truth = throw(case, seed) if varied else fixed
        q_m = q_true + np.random.default_rng(seed).standard_normal(q_true.shape) * case.noise
        own = drop_checks.frame_noise(q_m)
        found = drop_checks.impact_consistency(t_m, q_m, geometry, *own)
        dt = float(np.median(np.diff(t_m)))
        runs = {
            "frame differences": (drop_checks.restitution, (found, own[0], dt)),
            "with flights": (drop_checks.frames_restitution, (t_m, q_m, geometry, found, *own)),
        }
        if landings:
            contact = {"J_over_m": truth["J_over_m"] * NLP_ERROR[0],
                       "mu": truth["mu"] + NLP_ERROR[1]}  # fmt: skip
            runs["with landing fits"] = (landings_restitution,
                                         (t_m, q_m, geometry, found, contact))  # fmt: skip
        for name, (estimator, inputs) in runs.items():
            c0 = time.process_time()
            eps = estimator(*inputs)
            cpu = time.process_time() - c0
            if eps["value"] is None:
                continue
            err, z, cpus = out[name]
            err.append(eps["value"] - truth["restitution"])
            z.append(abs(err[-1]) / eps["std"])
            cpus.append(cpu)
            if name == "with flights":
                sources += [i["source"] for i in eps["impacts"]]
    return {"rows": out, "flights": sources.count("flights"), "impacts": len(sources)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=400)
    parser.add_argument("--throws", type=int, default=150)
    parser.add_argument("--landings", type=int, default=0, help="datasets per case with "
                        "landing fits too (~20 s CPU each on varied throws)")  # fmt: skip
    args = parser.parse_args()
    for label, case, seeds, varied in cases(args.draws, args.throws):
        result = study(case, seeds, varied, args.landings)
        print(f"{label} ({len(seeds)} datasets; impacts from flights "
              f"{result['flights']} of {result['impacts']}):")  # fmt: skip
        cpu = {}
        for name, (err, z, cpus) in result["rows"].items():
            err, z = np.array(err), np.array(z)
            cpu[name] = statistics.median(cpus)
            print(
                f"  {name:18s} n {len(z):3d}  error {err.mean():+.4f} +- {err.std():.4f}  "
                f"within 1 / 2 std {100 * np.mean(z <= 1):4.1f} / {100 * np.mean(z <= 2):5.1f} %"
                f"  CPU {1e3 * cpu[name]:.2f} ms"
            )
        print(f"  CPU ratio (with flights / frame differences): "
              f"{cpu['with flights'] / cpu['frame differences']:.0f}x")  # fmt: skip
        if args.landings:
            print(f"  CPU ratio (with landing fits / with flights): "
                  f"{cpu['with landing fits'] / cpu['with flights']:.0f}x")  # fmt: skip


if __name__ == "__main__":
    main()
