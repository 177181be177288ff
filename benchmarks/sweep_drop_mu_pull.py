"""The drop NLP's error against the pull on mu (issue 24): the Section 6.1 throw fitted as the
drop path fits it (``drop_checks.fit_frames``: the multi-start, no covariance) from
independent noise draws, with ``[method] mu_pull`` replaced; prints the mean and sd of the
errors of J/m and mu per pull. docs/validation.md ("The pull on mu is a lever on its bias").

    python benchmarks/sweep_drop_mu_pull.py [--pulls 10,300] [--seeds 20] [--noise 1e-3]
        [--mu 0.3] [--workers 2]
"""

from __future__ import annotations

import argparse
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from multiprocessing import get_context

import numpy as np


def fit_errors(pull: float, seed: int, noise: float, mu: float) -> tuple[float, float]:
    """(J/m error m^2, mu error) of one noise draw fitted with the pull ``pull``."""
    from physid.rigs.models import drop_checks
    from physid.rigs.models.ellipse_drop import ipopt_settings
    from physid.rigs.pipeline.drop_coverage import SLIDING, throw

    spec, geometry, t_m, q_true, truth = throw(replace(SLIDING, mu=mu, noise=noise))
    q_m = q_true + np.random.default_rng(seed).standard_normal(q_true.shape) * noise
    settings = replace(ipopt_settings(spec, (noise, noise)), mu_pull=pull)
    fit = drop_checks.fit_frames(t_m, q_m, geometry, settings)
    return fit.j_over_m - truth["J_over_m"], fit.mu - truth["mu"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pulls", default="10,300", help="comma-separated mu_pull values")
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--noise", type=float, default=1e-3, help="m and rad")
    parser.add_argument("--mu", type=float, default=0.3, help="the throw's true mu")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    pulls = [float(p) for p in args.pulls.split(",")]
    jobs = [(p, s, args.noise, args.mu) for p in pulls for s in range(args.seeds)]
    with ProcessPoolExecutor(args.workers, mp_context=get_context("spawn")) as pool:
        errors = list(pool.map(fit_errors, *zip(*jobs, strict=True)))
    print(f"mu {args.mu:g}, noise {args.noise:g}, seeds 0-{args.seeds - 1}")
    for pull in pulls:
        e = np.array([err for job, err in zip(jobs, errors, strict=True) if job[0] == pull])
        print(f"pull {pull:g}: J/m error mean {e[:, 0].mean() * 1e6:+.2f} sd "
              f"{e[:, 0].std(ddof=1) * 1e6:.2f} mm^2; mu error mean {e[:, 1].mean():+.4f} sd "
              f"{e[:, 1].std(ddof=1):.4f}, RMS {np.sqrt(np.mean(e[:, 1] ** 2)):.4f}")  # fmt: skip


if __name__ == "__main__":
    main()
