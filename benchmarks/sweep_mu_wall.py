"""mu read from the wall of the NLP's profile, against the fit's mu (issue 24; the study
behind the rule's rise T). Where the ellipse slides, the profile of the NLP's objective in
mu is one-sided (``ipopt_contact.profile_mu``): a wall below the fit, where the sliding impacts
need more friction than mu allows, and a floor above, where a wider cone leaves the
penalized impulses freer to absorb the noise, which pushes the fit up. This fits noise
draws of the Section 6.1 throw (IRC truth at 1/1200 s, as the drop coverage study) and of
varied throws (``DropCase.throws``, converged IRC truth), solves the profile at fixed
offsets from each fit, and reads the wall's mu where 2 x the objective has risen by T
above the fit's (linear between the profile's points). Prints the error of the fit's mu
and of the wall's for each T: mean, sd, RMS and median |error| over the draws
(docs/validation.md, "The wall of the profile in μ"). The drop path reads the wall at
T = 1 (``ipopt_contact.mu_wall``, bracketed by its own offsets) where the NLP's values are
reported; ``bench_drop_coverage.py`` measures that rule's coverage.

    python benchmarks/sweep_mu_wall.py [--seeds 50] [--workers 2] [--case fixed|varied|both]
"""

from __future__ import annotations

import argparse
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace

import numpy as np

from physid.estimation.ipopt_contact import converged_fit, profile_mu, wall_crossing
from physid.rigs.models import drop_checks
from physid.rigs.models.ellipse_drop import ipopt_settings
from physid.rigs.pipeline.drop_coverage import SLIDING, throw

OFFSETS = (-0.03, -0.02, -0.015, -0.01, -0.005, 0.005, 0.01)  # mu - the fit's, profiled
RISES = (1.0, 2.0, 4.0)  # T: 2 x the objective above the fit's, where the wall is read
CASES = {"fixed": SLIDING, "varied": replace(SLIDING, throws=True, truth_h=1 / 24000)}


def wall(points: list[tuple[float, float]], rise: float) -> float:
    """``ipopt_contact.wall_crossing`` of the profile's (mu, 2 x objective rise) ``points``
    (the fit's (mu, 0) the highest mu), or the lowest mu profiled where none rose by
    ``rise``."""
    found = wall_crossing(points, rise)
    return min(mu for mu, _ in points) if found is None else found


def one(job: tuple[str, int]) -> dict:
    """The fit's mu, the wall's for each of ``RISES`` and the truth of one noise draw."""
    name, seed = job
    case = CASES[name]
    spec, geometry, t_m, q_true, truth = throw(case, seed) if case.throws else throw(case)
    settings = ipopt_settings(spec, (case.noise, case.noise))
    q_m = q_true + np.random.default_rng(seed).standard_normal(q_true.shape) * case.noise
    # the rise is read from the NLP's minimum, the fit solved on to IPOPT's convergence
    fit = converged_fit(drop_checks.fit_frames(t_m, q_m, geometry, settings))
    profile = profile_mu(fit, [fit.mu + d for d in OFFSETS])
    # the wall is read below the fit; the offsets above it profile the floor
    below = [(p["mu"], 2.0 * (p["objective"] - fit.objective)) for p in profile if p["mu"] < fit.mu]
    points = [(fit.mu, 0.0), *below]
    return {"case": name, "truth": truth["mu"], "fit": fit.mu,
            "wall": [wall(points, rise) for rise in RISES]}  # fmt: skip


def summary(errors: np.ndarray) -> str:
    return (
        f"{errors.mean():+.4f}  {errors.std():.4f}  {np.sqrt(np.mean(errors**2)):.4f}"
        f"  {np.median(np.abs(errors)):.4f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=50)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--case", choices=("fixed", "varied", "both"), default="both")
    args = parser.parse_args()
    names = list(CASES) if args.case == "both" else [args.case]
    jobs = [(name, seed) for name in names for seed in range(args.seeds)]
    with ProcessPoolExecutor(args.workers) as pool:
        rows = list(pool.map(one, jobs))
    print("mu's error over the draws: mean, sd, RMS, median |error|")
    for name in names:
        mine = [r for r in rows if r["case"] == name]
        truth = np.array([r["truth"] for r in mine])
        print(f"{name} ({len(mine)} draws)")
        print(f"  the fit's mu         {summary(np.array([r['fit'] for r in mine]) - truth)}")
        for i, rise in enumerate(RISES):
            walls = np.array([r["wall"][i] for r in mine])
            print(f"  the wall at T = {rise:g}    {summary(walls - truth)}")


if __name__ == "__main__":
    main()
