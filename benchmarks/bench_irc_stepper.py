"""The compiled IRC stepper (``dynamics.planar_contact_scan``) against the reference Python
loop (``dynamics.planar_contact.simulate``), side by side in one process (issue 24).

The sample drop (rigs.pipeline.sample.DROP) for ``--seconds`` of motion at 1/2400 s: the
reference steps it once per run, the compiled roll-out at 1 and at 100 sub-steps (the
sample's truth and the prediction check's step, 1/240000 s). Median of ``--repeats`` runs
after one compiling call; prints the time per IRC step and the ratio.

    python benchmarks/bench_irc_stepper.py [--seconds 0.25] [--repeats 5]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import physid.dynamics  # noqa: F401 (float64)
from physid.dynamics.planar_contact import Ellipse, Ground, simulate
from physid.dynamics.planar_contact_scan import rollout

ELLIPSE = Ellipse(0.05, 0.025, 0.064, 0.064 * 756e-6)
GROUND = Ground((0.0634775, 0.0915612), -0.2510199)
Q0, V0, MU, EPS, H = (0.12, 0.19, 0.5), (0.3, 0.0, 3.0), 0.3, 0.2, 1.0 / 2400


def median_time(call, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=0.25)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    steps = int(round(args.seconds / H))
    surface = np.array([[*GROUND.p0, GROUND.alpha, np.inf]])

    def scan(substeps):
        q, _ = rollout(
            np.array([Q0]), np.array([V0]), H, ELLIPSE.j_over_m, MU, EPS, ELLIPSE.a,
            ELLIPSE.b, surface, steps=steps, substeps=substeps,
        )  # fmt: skip
        return np.asarray(q)

    scan(1)  # compile (the sub-step count is traced: one compilation)
    reference = median_time(lambda: simulate(Q0, V0, H, steps, ELLIPSE, GROUND, MU, EPS),
                            args.repeats)  # fmt: skip
    per_ref = reference / steps
    print(f"{steps} steps of 1/2400 s, median of {args.repeats}")
    print(f"reference loop      {reference:8.3f} s  {per_ref * 1e6:8.1f} us/step")
    for substeps in (1, 100):
        t = median_time(lambda s=substeps: scan(s), args.repeats)
        per = t / (steps * substeps)
        print(
            f"scan, {substeps:3d} sub-steps {t:8.3f} s  {per * 1e6:8.1f} us/step  "
            f"{per_ref / per:6.0f}x faster per step"
        )


if __name__ == "__main__":
    main()
