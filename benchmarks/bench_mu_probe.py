"""The price of the probes of mu (``IpoptSettings.mu_probe_gaps``, issue 24): the drop path's
fit (``drop_checks.fit_multistart``) of noise draws of the Section 6.1 throw with and
without the probes, alternated in one process; prints the CPU time of each (median over the
repeats), their ratio, and the fit's mu both ways (a probe that was kept moves it).

    python benchmarks/bench_mu_probe.py [--seeds 0,1,140] [--repeats 3] [--mu 0.3]
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import replace

import numpy as np

from physid.rigs.models import drop_checks
from physid.rigs.models.ellipse_drop import ipopt_settings
from physid.rigs.pipeline.drop_coverage import SLIDING, throw


def timed_fit(t_m, q_m, geometry, settings) -> tuple[float, float]:
    """(CPU s, fitted mu) of one fit as the drop path fits frames (``fit_frames``: the
    frames' impacts, then ``fit_multistart``)."""
    c0 = time.process_time()
    fit = drop_checks.fit_frames(t_m, q_m, geometry, settings)
    return time.process_time() - c0, fit.mu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,140")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--mu", type=float, default=SLIDING.mu)
    args = parser.parse_args()
    case = replace(SLIDING, mu=args.mu)
    spec, geometry, t_m, q_true, truth = throw(case)
    probed = ipopt_settings(spec, (case.noise, case.noise))
    plain = replace(probed, mu_probe_gaps=())
    print(f"mu = {args.mu}, {len(t_m)} frames, {args.repeats} repeats (CPU s, medians)")
    ratios = []
    for seed in (int(s) for s in args.seeds.split(",")):
        q_m = q_true + np.random.default_rng(seed).standard_normal(q_true.shape) * case.noise
        runs = {"without": [], "with": []}
        for _ in range(args.repeats):  # alternated, so load drifts hit both alike
            runs["without"].append(timed_fit(t_m, q_m, geometry, plain))
            runs["with"].append(timed_fit(t_m, q_m, geometry, probed))
        cpu = {k: statistics.median(c for c, _ in v) for k, v in runs.items()}
        mu = {k: v[0][1] for k, v in runs.items()}
        ratios.append(cpu["with"] / cpu["without"])
        print(f"seed {seed}: without probes {cpu['without']:.2f} s (mu {mu['without']:.4f}), "
              f"with {cpu['with']:.2f} s (mu {mu['with']:.4f}): x{ratios[-1]:.2f}")  # fmt: skip
    print(f"median ratio x{statistics.median(ratios):.2f}")


if __name__ == "__main__":
    main()
