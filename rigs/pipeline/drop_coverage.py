"""Does the ellipse drop's std cover the truth? (issue 24) Repeated identifications of one
simulated throw with independent tracking noise, and the fraction of errors within 1 and 2
std per parameter class, for the NLP's linearized std and the parametric bootstrap's.

The throw is the Section 6.1 one (``ellipse_drop.toml``'s ``[simulation]``), simulated once
by IRC (``dynamics.planar_contact``, 1/1200 s) without noise; each dataset adds white
Gaussian noise (``noise`` m on x and y, ``noise`` rad on theta, as ``physid simulate``) from
its own seed. The fit is the drop path's (``ellipse_drop._solve``: multi-start IPOPT, the
linearized covariance with batch means, mu held where nothing slides), with the true noise
as the stated noise. J/m and mu are the NLP's values; restitution is the frames' estimate
(``drop_checks.restitution``, the NLP has none) with its own std, and its bootstrap applies
that estimator to the same re-noised copies of the fit's prediction.

Not measured here: the output-error refinement (``drop_checks.output_error``), whose values
and std the drop path reports instead where the IRC model's free run follows the frames.

Used by ``benchmarks/bench_drop_coverage.py`` (prints the table) and the slow test
``tests/estimation/test_drop_coverage.py``; no file I/O.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_context

import numpy as np
from rich.console import Console

from physid.dynamics.planar_contact import simulate as simulate_irc
from physid.estimation.bootstrap import contact_bootstrap, parametric_bootstrap
from physid.rigs.models import drop_checks
from physid.rigs.models.ellipse_drop import (
    _sim_vector,
    _solve,
    contact_geometry,
    fit_steps,
    friction_report,
    ipopt_settings,
    model_error_factor,
    rig_geometry,
)
from physid.rigs.pipeline.coverage import coverage
from physid.spec import load_spec, with_overrides

QUIET = Console(quiet=True)


@dataclass(frozen=True)
class DropCase:
    """One study: the throw's true mu, the camera rate (Hz), the window (s), the tracking
    noise (m and rad) and the bootstrap's refits per dataset."""

    mu: float = 0.3
    fps: float = 120.0
    duration: float = 0.4
    noise: float = 1e-3
    draws: int = 20


SLIDING = DropCase(mu=0.3)  # the first impact slides: mu identified
NO_SLIP = DropCase(mu=0.9)  # nothing slides: mu only bounded below; J/m from the spin jumps


def throw(case: DropCase):
    """(spec, geometry, frame times [n], true poses [n, 3], truth dict) of the case."""
    spec = with_overrides(load_spec("ellipse_drop"), {"mu": str(case.mu), "fps": str(case.fps)})
    ellipse, ground = rig_geometry(spec)
    eps = spec.value("restitution", "1", nonnegative=True)
    h = spec.section_value("simulation", "h", "s", 1.0 / 1200)
    steps = int(round(case.duration / h))
    traj = simulate_irc(
        _sim_vector(spec, "q0"), _sim_vector(spec, "v0"), h, steps, ellipse, ground, case.mu, eps
    )
    frames = np.unique(np.rint(np.arange(0.0, traj.t[-1] + 1e-12, 1.0 / case.fps) / h).astype(int))
    truth = {"J_over_m": ellipse.j_over_m, "mu": case.mu, "restitution": eps}
    return spec, contact_geometry(spec, ground), traj.t[frames], traj.q[frames], truth


def run_drop_case(
    case: DropCase,
    seeds,
    progress: Callable[[str], None] | None = None,
    workers: int = 1,
    on_row: Callable[[dict], None] | None = None,
) -> list[dict]:
    """One row per seed: ``values``, ``truth``, ``std_linearized`` and ``std_bootstrap``
    per parameter (None where the parameter is not identified: mu where nothing slides, a
    restitution no impact resolves), the NLP's status, the bootstrap's refits and costs.
    ``workers`` > 1: the seeds are shared among that many processes (spawned: each imports
    and compiles afresh), the rows in the order of ``seeds`` all the same. ``on_row(row)``
    is called as each row is done (to save it)."""
    if workers > 1:
        with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
            jobs = [pool.submit(run_drop_case, case, [seed]) for seed in seeds]
            rows = []
            for job in jobs:
                rows += job.result()
                if on_row is not None:
                    on_row(rows[-1])
                if progress is not None:
                    progress(_summary(rows[-1]))
            return rows
    spec, geometry, t_m, q_true, truth = throw(case)
    sigma = np.array([case.noise, case.noise, case.noise])
    settings = ipopt_settings(spec, (case.noise, case.noise))
    rows = []
    for seed in seeds:
        t0, c0 = time.perf_counter(), time.process_time()
        q_m = q_true + np.random.default_rng(seed).standard_normal(q_true.shape) * sigma
        found = drop_checks.impact_consistency(t_m, q_m, geometry, *drop_checks.frame_noise(q_m))
        fit, _, cov, starts = _solve(f"seed {seed}", t_m, q_m, geometry, settings, found, QUIET)
        fit_s = (time.perf_counter() - t0, time.process_time() - c0)
        scale = math.sqrt(max(model_error_factor(fit.cost_fit, cov), 1.0))
        boot = contact_bootstrap(fit, sigma, case.draws, seed, scale)
        slides = bool(fit_steps(fit, settings).sliding.any())
        mu_known = friction_report(fit, settings, float(cov["std"][1]))["identifiable"]
        eps, eps_boot = _restitution(fit, t_m, q_m, geometry, sigma * scale, case.draws, seed)
        values = {"J_over_m": fit.j_over_m, "mu": fit.mu, "restitution": eps["value"]}
        corrected = dict(zip(("J_over_m", "mu"), boot.corrected.tolist(), strict=True))
        best = drop_checks.objective_point(fit, settings)
        competing = drop_checks.basins(starts, best, boot.std)

        def finite(v, keep=True):
            return float(v) if keep and v is not None and np.isfinite(v) else None

        row = {
            "seed": int(seed),
            "values": {k: v for k, v in values.items() if v is not None},
            "truth": truth,
            "std_linearized": {
                "J_over_m": finite(cov["std"][0]),
                "mu": finite(cov["std"][1], mu_known),
                "restitution": finite(eps["std"]),
            },
            "std_bootstrap": {
                "J_over_m": finite(boot.std[0]),
                "mu": finite(boot.std[1], mu_known),
                "restitution": finite(eps_boot),
            },
            # the bootstrap's bias correction (2 fit - median of the refits) and its std;
            # restitution is the frames' estimate, not corrected
            "values_corrected": {k: v for k, v in (values | corrected).items() if v is not None},
            "std_bootstrap_corrected": {
                "J_over_m": finite(boot.std_corrected[0]),
                "mu": finite(boot.std_corrected[1], mu_known),
                "restitution": finite(eps_boot),
            },
            "bootstrap_draws": boot.draws.tolist(),
            "bootstrap_success": boot.success.tolist(),
            "objective": best["objective"],
            "chi2": fit.cost_fit,
            "gamma": fit.cost_gamma,
            "starts": starts,
            "basins": competing,
            "slides": slides,
            "status": fit.status,
            "bootstrap_mean": {
                "J_over_m": finite(np.nanmean(boot.draws[boot.success, 0])),
                "mu": finite(np.nanmean(boot.draws[boot.success, 1])),
            },
            "draws_succeeded": int(boot.success.sum()),
            "draws": case.draws,
            "refit_iterations_median": float(np.median(boot.iterations)),
            "fit_wall_s": fit_s[0],
            "fit_cpu_s": fit_s[1],
            "bootstrap_wall_s": boot.wall_s,
            "bootstrap_cpu_s": boot.cpu_s,
        }
        rows.append(row)
        if on_row is not None:
            on_row(row)
        if progress is not None:
            progress(_summary(row))
    return rows


def _summary(row: dict) -> str:
    """One line of a row for progress output."""
    v, c, b, lin = (row[k] for k in ("values", "values_corrected", "std_bootstrap",
                                     "std_linearized"))  # fmt: skip
    return (
        f"seed {row['seed']}: J/m {v['J_over_m'] * 1e6:.1f} mm^2 (lin std "
        f"{(lin['J_over_m'] or math.inf) * 1e6:.1f}, boot {(b['J_over_m'] or math.inf) * 1e6:.1f}"
        f", corrected {c['J_over_m'] * 1e6:.1f}), mu {v['mu']:.4f} (corrected {c['mu']:.4f}, "
        f"std {b['mu'] or math.inf:.4f}); {len(row['basins'])} competing basins; fit "
        f"{row['fit_cpu_s']:.1f} s CPU, bootstrap {row['bootstrap_cpu_s']:.1f} s CPU"
    )


def _restitution(fit, t_m, q_m, geometry, noise, draws: int, seed: int):
    """The frames' restitution estimate and std (``drop_checks.restitution``), and the
    bootstrap std of that estimator on the re-noised copies of the fit's prediction (the
    same noise draws as the NLP's bootstrap: same seed, same shape)."""
    dt = float(np.median(np.diff(t_m)))

    def estimate(q):
        found = drop_checks.impact_consistency(t_m, q, geometry, *drop_checks.frame_noise(q))
        return drop_checks.restitution(found, drop_checks.frame_noise(q)[0], dt)

    eps = estimate(q_m)
    if eps["value"] is None:
        return eps, None

    def one(y):
        value = estimate(y)["value"]
        return np.array([np.nan if value is None else value]), value is not None, 0

    mean = fit.q[fit.frame_index]
    boot = parametric_bootstrap(mean, noise, one, ("restitution",), draws, seed)
    return eps, float(boot.std[0])


CLASS_NAMES = {"inertia": "J/m (inertia)", "friction": "mu (friction)", "other": "restitution"}


def drop_coverage(rows: list[dict]) -> dict[str, dict[str, dict]]:
    """{"linearized": per class, "bootstrap": per class, "bootstrap corrected": per class}
    (``coverage.coverage``: n, flagged, fractions within 1 and 2 std, median |z|); the
    classes J/m, mu, restitution. "bootstrap corrected" is the bias-corrected value
    (``Bootstrap.corrected``) with its std (``std_corrected``), where the rows have it."""
    out = {}
    for which in ("linearized", "bootstrap"):
        table = coverage(rows, f"std_{which}", one_sided=False)
        out[which] = {CLASS_NAMES.get(k, k): v for k, v in table.items()}
    if rows and all("values_corrected" in r for r in rows):
        shifted = [r | {"values": r["values_corrected"]} for r in rows]
        table = coverage(shifted, "std_bootstrap_corrected", one_sided=False)
        out["bootstrap corrected"] = {CLASS_NAMES.get(k, k): v for k, v in table.items()}
    return out
