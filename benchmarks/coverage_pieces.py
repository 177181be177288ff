"""The tree coverage study's sandwich pieces per dataset (issue 24): for each seed, the fit
of ``identify_tree_series`` (the same calls: consistent start, warm start, LM) and, at its
solution, the bread (TᵀT)⁻¹, the white meat TᵀĈT and the per-step score t_kᵀ z_k (θ units,
dynamics and observation rows apart), saved to one .npz per seed. Every meat estimator
(batch means with any B, overlapping batch means, lag windows) is then evaluated on the
same fits offline (``benchmarks/coverage_meat.py``). A fit that fails its convergence test
is saved as it stopped (``converged`` false; the analysis leaves it out): the estimator's
fallback for those (fits at the friction's row weights 0.7 and 0.9,
``rigs.models.tree_row_weight``) is not run here.

    python benchmarks/coverage_pieces.py OUTDIR [--motions] [--seeds 100] [--first-seed 0]
"""

from __future__ import annotations

import argparse
import os
import resource
import time
from dataclasses import replace

import numpy as np

from physid.estimation.lm import Linearization, normal_equations
from physid.estimation.uncertainty import _projected_blocks, _sample_cov, _white_meat
from physid.rigs.models import identify_tree as it
from physid.rigs.models.identify_hinged import enable_compilation_cache
from physid.rigs.pipeline.coverage import TREE_PENDULUM, TREE_PENDULUM_MOTIONS, tree_recording


def pieces(problem, res) -> dict:
    lin = Linearization(*(None if a is None else np.asarray(a) for a in res.lin))
    ne = normal_equations(res.lin)
    t_dyn, t_obs, t_init = _projected_blocks(lin, ne)
    TT = np.einsum("kmp,kmq->pq", t_dyn, t_dyn) + np.einsum("kmp,kmq->pq", t_obs, t_obs)
    TT += t_init.T @ t_init
    C_dyn, C_obs = _sample_cov(lin.dyn_r), _sample_cov(lin.obs_r, lin.obs_present)
    W = _white_meat(t_dyn, t_obs, t_init, C_dyn, C_obs)
    W_obs = _white_meat(t_dyn * 0, t_obs, t_init[:0], C_dyn, C_obs)
    s_obs = np.einsum("kmp,km->kp", t_obs, lin.obs_r)
    s_dyn = np.zeros_like(s_obs)
    s_dyn[:-1] = np.einsum("kmp,km->kp", t_dyn, lin.dyn_r)
    if len(t_init):
        s_dyn[0] += t_init.T @ lin.init_r
    return {"TT": TT, "W": W, "W_obs": W_obs, "s_obs": s_obs, "s_dyn": s_dyn}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--motions", action="store_true")
    ap.add_argument("--seeds", type=int, default=100)
    ap.add_argument("--first-seed", type=int, default=0)
    args = ap.parse_args()
    enable_compilation_cache()
    os.makedirs(args.out, exist_ok=True)
    case = TREE_PENDULUM_MOTIONS if args.motions else TREE_PENDULUM
    spec, rig, clean, truth = tree_recording(case)
    settings = it.tree_settings(spec)
    h = settings["h"]
    names = list(spec.parameters)
    k = len(rig.channels)
    start = time.perf_counter()
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        rng = np.random.default_rng(seed)  # the same draws as coverage.run_tree_case
        if case.angle_spread:
            shift = rng.uniform(-case.angle_spread, case.angle_spread, len(case.scenario.angles0))
            clean = tree_recording(case, np.asarray(case.scenario.angles0) + shift)[2]
        noisy = clean.values.copy()
        noisy[:, :k] += rng.normal(0.0, case.noise, noisy[:, :k].shape)
        series = it.series_on_grid(replace(clean, values=noisy), rig, h, "sim")
        problem, X0, theta0, _ = it.build_problem(rig, spec, names, [series], settings)
        quiet = lambda _line: None  # noqa: E731
        theta0 = it._consistent_start(spec, problem, theta0, quiet)
        if settings["warm_start"]:
            X0, theta0 = it._warm_start(problem, X0, theta0, names, len(problem.y), quiet)
        res = it.fit(problem, X0, theta0, settings, names, len(problem.y), quiet)
        cov = it.fitted_covariance(problem, res, settings["covariance_batches"])
        white = it.fitted_covariance(problem, res)
        status = it.tree_fit_status(problem, res, white)
        bounds = it.parameter_bounds(problem, res.theta)
        np.savez(
            os.path.join(args.out, f"seed{seed:03d}.npz"),
            names=np.array(names),
            values=res.theta * problem.scale,
            truth=np.array([truth[n] for n in names]),
            scale=problem.scale,
            std=cov.std,
            std_white=white.std,
            converged=status.converged,
            at_bound=np.array(bounds),
            **pieces(problem, res),
        )
        z = (res.theta * problem.scale - np.array([truth[n] for n in names])) / cov.std
        cpu = resource.getrusage(resource.RUSAGE_SELF)
        print(
            f"seed {seed}: z " + " ".join(f"{v:+.2f}" for v in z)
            + f" converged {status.converged}  {time.perf_counter() - start:.0f} s wall, "
            f"{cpu.ru_utime + cpu.ru_stime:.0f} s CPU, load {os.getloadavg()[0]:.1f}",
            flush=True,
        )  # fmt: skip


if __name__ == "__main__":
    main()
