"""The prediction checks' observer (issue 24): the free run's initial state refined over its
window (0.2 s) of a varied ellipse throw, by ``estimation.prediction.refine_initial_state``
(Levenberg–Marquardt over growing windows, as the drop's checks run it, and in one window)
and by ``scipy.optimize.least_squares`` (MINPACK's LM and the trust-region reflective
method) on the same residuals with the same batched forward-difference Jacobian, in one
process. Each starts where the drop's checks start: the NLP's state (``fit_frames``, the
drop path's fit) at the first frame the frames determine (``observed_start``), and is
judged by the RMS over the window in noise std (1 is the noise itself) at the true
parameters, and by its CPU time; prints medians over the throws and the ratios.

    python benchmarks/bench_prediction_observer.py [--seeds 0-9] [--noise 1e-3]
"""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import replace

import numpy as np
from scipy.optimize import least_squares

from physid.estimation.prediction import (
    InitialState,
    Observations,
    difference,
    refine_initial_state,
)
from physid.rigs.models import drop_checks
from physid.rigs.models.ellipse_drop import ipopt_settings
from physid.rigs.pipeline.drop_coverage import DropCase, throw

WINDOW_S = 0.2  # the free run's window (2 k, k = 0.1 s)


def problem(case: DropCase, seed: int):
    """(simulate at the true values, observations on the NLP's grid from its observed start,
    channels, window steps, the NLP's state there, settings) of varied throw ``seed`` with
    its noise drawn from the same seed."""
    spec, geometry, t_m, q_true, truth = throw(case, seed)
    settings = ipopt_settings(spec, (case.noise, case.noise))
    noisy = q_true + np.random.default_rng(seed).standard_normal(q_true.shape) * case.noise
    fit = drop_checks.fit_frames(t_m, noisy, geometry, settings)
    node = int(fit.frame_index[drop_checks.observed_start(fit)])
    states = drop_checks.GridStates.of(fit).from_node(node)
    y, present = np.zeros((len(states.t), 3)), np.zeros((len(states.t), 3), bool)
    y[states.frame_index] = noisy[-len(states.frame_index) :]
    present[states.frame_index] = True
    obs = Observations(states.t, y, present)
    h = float(np.median(np.diff(fit.t)))
    speed = drop_checks.fastest_point_speed(fit, geometry)
    sub = drop_checks.substep_for(settings.sigma_pos, speed)
    values = (truth["J_over_m"], truth["mu"], truth["restitution"])
    sim = drop_checks.simulator(geometry, 1.0, *values, h, sub)
    window = min(int(round(WINDOW_S / h)), len(states.t) - 1)
    z0 = np.concatenate([states.q[0], states.v[0]])
    return sim, obs, drop_checks.channels(settings), window, z0, settings


def ours(sim, obs, chans, window, z0, steps, stages):
    initial = InitialState(z0, lambda z: (z[:, :3], z[:, 3:]), steps, stages)
    return refine_initial_state(sim, initial, obs, chans, window)


def scipy_least_squares(sim, obs, chans, window, z0, steps, method, stages=1):
    """least_squares over the first ``window`` steps; with ``stages`` > 1 over the same
    growing windows as ``refine_initial_state`` (each roll-out ``window`` steps long)."""
    noise = np.array([c.noise for c in chans])
    windows = [window // 2**i for i in range(stages - 1, 0, -1)]
    windows = [w for w in windows if obs.present[: w + 1].sum() >= 1.5 * len(z0)] + [window]
    z = np.asarray(z0, float)
    for w in windows:
        y, present = obs.y[: w + 1], obs.present[: w + 1]

        def residuals(batch, y=y, present=present, w=w):
            pred = sim((batch[:, :3], batch[:, 3:]), np.zeros(len(batch), int), window)
            err = difference(np.asarray(pred)[:, : w + 1], y[None], chans) / noise
            return np.where(present[None], err, 0.0).reshape(len(batch), -1)

        def jacobian(z, residuals=residuals):  # refine_initial_state's batched differences
            both = residuals(np.concatenate([z[None], z[None] + np.diag(steps)]))
            return ((both[1:] - both[0]) / steps[:, None]).T

        sol = least_squares(lambda z, residuals=residuals: residuals(z[None])[0], z,
                            jac=jacobian, method=method, x_scale=steps)  # fmt: skip
        z = sol.x
    return z, float(np.sqrt(sol.fun @ sol.fun / max(int(present.sum()), 1)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0-9")
    parser.add_argument("--noise", type=float, default=1e-3)
    args = parser.parse_args()
    lo, _, hi = args.seeds.partition("-")
    seeds = range(int(lo), int(hi or lo) + 1)
    case = replace(DropCase(mu=0.3, throws=True, truth_h=1.0 / 24000), noise=args.noise)
    methods = {
        "ours, 5 growing windows": lambda *a: ours(*a, stages=5),
        "ours, one window": lambda *a: ours(*a, stages=1),
        "least_squares lm": lambda *a: scipy_least_squares(*a, method="lm"),
        "least_squares trf": lambda *a: scipy_least_squares(*a, method="trf"),
        "least_squares lm, 5 windows": lambda *a: scipy_least_squares(*a, "lm", stages=5),
    }
    rms = {m: [] for m in methods}
    cpu = {m: [] for m in methods}
    for seed in seeds:
        sim, obs, chans, window, z0, settings = problem(case, seed)
        steps = drop_checks.state_steps(chans)
        sim((z0[None, :3], z0[None, 3:]), np.zeros(1, int), window)  # compile outside timing
        row = []
        for name, run in methods.items():
            c0 = time.process_time()
            _, r = run(sim, obs, chans, window, z0, steps)
            cpu[name].append(time.process_time() - c0)
            rms[name].append(r)
            row.append(f"{r:.3g}")
        print(f"throw {seed}: window RMS / noise " + ", ".join(row), flush=True)
    base = statistics.median(cpu["ours, 5 growing windows"])
    print(f"{'method':<28} {'median RMS':>10} {'<= 2':>6} {'median CPU s':>12} {'CPU ratio':>9}")
    for name in methods:
        within = np.mean(np.array(rms[name]) <= 2.0)
        print(f"{name:<28} {statistics.median(rms[name]):>10.3g} {within:>6.0%} "
              f"{statistics.median(cpu[name]):>12.3g} "
              f"{statistics.median(cpu[name]) / base:>9.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
