"""Does the ellipse drop's std cover the truth? (issue 24) Repeated identifications of one
simulated throw with independent tracking noise, and the fraction of errors within 1 and 2
std per parameter class: for what the drop path reports, and for the NLP's own values with
its linearized std and with the parametric bootstrap's.

The throw is the Section 6.1 one (``ellipse_drop.toml``'s ``[simulation]``), simulated once
by IRC (``dynamics.planar_contact``, 1/1200 s; ``DropCase.truth_h``: sub-stepped finer)
without noise; each dataset adds white Gaussian noise (``noise`` m on x and y, ``noise`` rad
on theta, as ``physid simulate``) from its own seed. The fit is the drop path's
(``ellipse_drop._solve``: multi-start IPOPT, the linearized covariance with batch means, mu
held where nothing slides), with the true noise as the stated noise. Then:

- **reported** (``values_reported``, ``std_reported``; with ``draws`` > 0):
  ``ellipse_drop.reported_values``, the function the drop path's ``build_estimate``
  calls, with its default covariance: the output-error refinement
  (``drop_checks.output_error``) where its free run follows the frames, else the NLP's
  values corrected by the parametric bootstrap's bias with its spread as the std (J/m's
  and mu's widened by the NLP's model error, ``model_error_allowance``), and the frames'
  restitution; ``*_reported_linearized`` the same under ``[method] covariance =
  "linearized"``; ``output_error`` its s^2 and whether it was kept.
- the NLP's J/m and mu with the linearized std and (``draws`` > 0) the bootstrap's, as
  fitted and bias-corrected; restitution the frames' estimate (``drop_checks.restitution``,
  the NLP has none) with its own std, and its bootstrap applies that estimator to the same
  re-noised copies of the fit's prediction.

With ``DropCase.probes``, IRC runs at each fit's values (``drop_checks.irc_frames``) are
fitted as the drop path fits data (``model_error_rows``): the NLP's model error against
IRC, noise-free, or its whole error with noise ("fine-noisy"); the noise-free "fine" one is
what the drop path's ``model_error_allowance`` computes.

Used by ``benchmarks/bench_drop_coverage.py`` (prints the tables) and the slow test
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
from physid.dynamics.planar_contact_scan import rollout
from physid.estimation.bootstrap import (
    contact_bootstrap,
    model_error_probe,
    parametric_bootstrap,
)
from physid.rigs.models import drop_checks
from physid.rigs.models.ellipse_drop import (
    BOOTSTRAP_DRAWS,
    _sim_vector,
    _solve,
    bootstrap_noise_scale,
    contact_geometry,
    fit_slides,
    friction_report,
    ipopt_settings,
    reported_values,
    rig_geometry,
)
from physid.rigs.pipeline.coverage import coverage
from physid.spec import load_spec, with_overrides

QUIET = Console(quiet=True)


@dataclass(frozen=True)
class DropCase:
    """One study: the throw's true mu, the camera rate (Hz), the window (s), the tracking
    noise (m and rad), the bootstrap's refits per dataset (0: no bootstrap; the reported
    numbers need none where the output error is accepted) and ``truth_h`` (s): the IRC
    step of the truth, as sub-steps of the spec's 1/1200 s grid (None: that grid itself,
    the paper's Section 6.1 simulation; IRC there is far from its converged motion,
    docs/validation.md); ``probes``: names of ``PROBES`` whose noise-free IRC runs at the
    fitted values are fitted per dataset (``model_error_rows``; ``warm_probes``: also
    refitted warm); ``throws``: each dataset thrown from its own initial state
    (``THROW_SPREAD``), so that the NLP's model error and its bias under noise differ
    between datasets as between a user's throws (one throw has one model error, which a
    study of noise draws alone cannot vary)."""

    mu: float = 0.3
    fps: float = 120.0
    duration: float = 0.4
    noise: float = 1e-3
    draws: int = BOOTSTRAP_DRAWS
    truth_h: float | None = None
    probes: tuple[str, ...] = ()
    warm_probes: bool = False
    throws: bool = False


# The spread of ``DropCase.throws``: half-widths of the uniform draws added to the Section 6.1
# initial state (x m, y m, theta rad; vx, vy m/s, omega rad/s): throws that land on the bar
# and bounce two or three times within 0.4 s, the NLP's fit sliding in 99 of 100 (seeds
# 0-49, IRC truth at 1/1200 s and at 1/24000 s); their impacts, hence the NLP's model
# error and its bias under noise, differ from throw to throw as a user's throws do.
THROW_SPREAD = (np.array([0.02, 0.02, 0.3]), np.array([0.5, 0.5, 5.0]))
THROW_SEED_OFFSET = 7 * 10**6  # the throw's generator: the dataset's seed + this


SLIDING = DropCase(mu=0.3)  # the first impact slides: mu identified
NO_SLIP = DropCase(mu=0.9)  # nothing slides: mu only bounded below; J/m from the spin jumps


def case_spec(case: DropCase):
    """The ellipse-drop spec of the case (its true mu and camera rate), the same for every
    throw of it."""
    return with_overrides(load_spec("ellipse_drop"), {"mu": str(case.mu), "fps": str(case.fps)})


def throw(case: DropCase, seed: int | None = None):
    """(spec, geometry, frame times [n], true poses [n, 3], truth dict) of the case; with
    ``case.throws`` and a ``seed``, from the Section 6.1 initial state moved by a uniform
    draw within ``THROW_SPREAD`` (its own generator, seeded ``seed + THROW_SEED_OFFSET``)."""
    spec = case_spec(case)
    ellipse, ground = rig_geometry(spec)
    geometry = contact_geometry(spec, ground)
    eps = spec.value("restitution", "1", nonnegative=True)
    h = spec.section_value("simulation", "h", "s", 1.0 / 1200)
    steps = int(round(case.duration / h))
    q0, v0 = _sim_vector(spec, "q0"), _sim_vector(spec, "v0")
    if case.throws and seed is not None:
        rng = np.random.default_rng(seed + THROW_SEED_OFFSET)
        q0 = q0 + rng.uniform(-1.0, 1.0, 3) * THROW_SPREAD[0]
        v0 = v0 + rng.uniform(-1.0, 1.0, 3) * THROW_SPREAD[1]
    if case.truth_h is None:
        traj = simulate_irc(q0, v0, h, steps, ellipse, ground, case.mu, eps)
        t, q = traj.t, traj.q
    else:  # the same IRC step, compiled and sub-stepped (bit for bit the loop's at h)
        substeps = max(1, int(round(h / case.truth_h)))
        q, _ = rollout(
            q0[None], v0[None], h, ellipse.j_over_m, case.mu, eps, geometry.a, geometry.b,
            geometry.surfaces(), steps=steps, substeps=substeps, segmented=geometry.segmented,
        )  # fmt: skip
        t, q = np.arange(steps + 1) * h, np.asarray(q)[0]
    frames = np.unique(np.rint(np.arange(0.0, t[-1] + 1e-12, 1.0 / case.fps) / h).astype(int))
    truth = {"J_over_m": ellipse.j_over_m, "mu": case.mu, "restitution": eps}
    return spec, geometry, t[frames], q[frames], truth


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
    sigma = np.array([case.noise, case.noise, case.noise])
    settings = ipopt_settings(case_spec(case), (case.noise, case.noise))
    fixed = None if case.throws else throw(case)  # (varied throws: each seed's own, below)
    rows = []
    for seed in seeds:
        t0, c0 = time.perf_counter(), time.process_time()
        _, geometry, t_m, q_true, truth = throw(case, seed) if case.throws else fixed
        q_m = q_true + np.random.default_rng(seed).standard_normal(q_true.shape) * sigma
        found = drop_checks.impact_consistency(t_m, q_m, geometry, *drop_checks.frame_noise(q_m))
        fit, _, cov, starts = _solve(f"seed {seed}", t_m, q_m, geometry, settings, found, QUIET)
        fit_s = (time.perf_counter() - t0, time.process_time() - c0)
        # What the drop path reports with ``covariance = "linearized"`` (output error where
        # accepted, else the NLP's linearized std): the same function as
        # ``ellipse_drop.build_estimate``; the default's (the bootstrap) in _bootstrap_rows.
        t0, c0 = time.perf_counter(), time.process_time()
        rep = reported_values(fit, t_m, q_m, geometry, settings, cov, found, starts)
        oe_s = (time.perf_counter() - t0, time.process_time() - c0)
        slides = fit_slides(fit, settings)
        mu_known = friction_report(fit, settings, float(cov["std"][1]))["identifiable"]
        values = {"J_over_m": fit.j_over_m, "mu": fit.mu, "restitution": rep.eps["value"]}

        row = {
            "seed": int(seed),
            "values": {k: v for k, v in values.items() if v is not None},
            "truth": truth,
            "std_linearized": {
                "J_over_m": finite(cov["std"][0]),
                "mu": finite(cov["std"][1], mu_known),
                "restitution": finite(rep.eps["std"]),
            },
            **_reported_row(rep, "_linearized"),
            "output_error": {
                "accepted": rep.accepted,
                "residual_variance_factor": rep.oe.residual_variance_factor,
                "chi2": rep.oe.chi2,
                "chi2_at_nlp_values": rep.oe.chi2_start,
                "n_obs": rep.oe.n_obs,
                "iterations": rep.oe.iterations,
                "values": dict(rep.oe.values),
                "std": {k: finite(v) for k, v in rep.oe.std.items()},
                "wall_s": oe_s[0],
                "cpu_s": oe_s[1],
            },
            "model_error_allowance": rep.allowance,
            # each impact's restitution source, with the landing fits tried (their mu too)
            "impacts": rep.eps["impacts"],
            "objective": drop_checks.objective_point(fit, settings)["objective"],
            "chi2": fit.cost_fit,
            "gamma": fit.cost_gamma,
            "starts": starts,
            "basins_linearized": rep.competing,
            "slides": slides,
            "status": fit.status,
            "draws": case.draws,
            "fit_wall_s": fit_s[0],
            "fit_cpu_s": fit_s[1],
        }
        if case.probes:
            row |= model_error_rows(fit, rep, geometry, settings, sigma, case.probes,
                                    case.warm_probes, seed)  # fmt: skip
        if case.draws > 0:
            data = (t_m, q_m, geometry, settings, found, starts)
            row |= _bootstrap_rows(fit, cov, rep, data, sigma, case.draws, seed, mu_known)
        rows.append(row)
        if on_row is not None:
            on_row(row)
        if progress is not None:
            progress(_summary(row))
    return rows


# The IRC runs of the model-error probes: name -> (sub-step s, grid s or None for the fit's
# own). "path": the drop path's prediction sub-step for the frames' noise and the fit's
# speeds (``drop_checks.substep_for``: ~67 us at 1 mm on the Section 6.1 throw; 333 us,
# the 1 m/s step, in the study of docs/validation.md); "irc1200": the Section 6.1 truth's own
# 1/1200 s step (not known to the drop path: a diagnosis); "fine": 1/24000 s, near IRC's
# converged motion (docs/validation.md).
# "fine-noisy", "fine-noisy2" ... "fine-noisy8": the "fine" run with noise of the frames'
# std added (its own generator, seeded from the dataset's seed + k 10^6 for the k-th),
# fitted once each: draws of the estimator's whole error (model error, bias and spread
# under noise) on a throw like this one, an IRC-based bootstrap with cold refits.
PROBES = {
    "path": (None, None),
    "irc1200": (1.0 / 1200, 1.0 / 1200),
    "fine": (1.0 / 24000, None),
    "fine-noisy": (1.0 / 24000, None),
    **{f"fine-noisy{k}": (1.0 / 24000, None) for k in range(2, 9)},
}


def model_error_rows(fit, rep, geometry, settings, sigma, probes, warm: bool = False,
                     seed: int = 0) -> dict:  # fmt: skip
    """The NLP's model error against IRC at its fitted values: per named ``PROBES`` IRC run
    (from the NLP's first state, with the fit's J/m and mu and the frames' restitution;
    ``drop_checks.irc_frames``), the noise-free frames fitted cold as the drop path fits
    data (``drop_checks.fit_frames``: its J/m and mu less the fit's) and, with
    ``warm``, refitted from the fit's solution (``bootstrap.model_error_probe``); the run's
    RMS distance from the fit's prediction (noise std; theta over the first third of the
    frames alone). {} where the frames give no restitution."""
    eps = rep.eps["value"]
    if eps is None:
        return {}
    values = {"J_over_m": fit.j_over_m, "mu": fit.mu, "restitution": eps}
    own = fit.q[fit.frame_index]
    t_m = fit.t[fit.frame_index]
    out = {}
    for name in probes:
        sub, h = PROBES[name]
        if sub is None:
            speed = drop_checks.fastest_point_speed(fit, geometry)
            sub = drop_checks.substep_for(settings.sigma_pos, speed)
        frames = drop_checks.irc_frames(fit, geometry, values, sub, h)
        if "-noisy" in name:
            k = int(name.split("-noisy")[1] or 1)
            rng = np.random.default_rng(seed + k * 10**6)
            frames = frames + rng.standard_normal(frames.shape) * sigma
        c0 = time.process_time()
        cold = drop_checks.fit_frames(t_m, frames, geometry, settings)
        out[name] = {
            "rms_from_fit": float(np.sqrt(np.mean(((frames - own) / sigma) ** 2))),
            "rms_theta_first_third": float(
                np.sqrt(np.mean(((frames - own)[: len(own) // 3, 2] / sigma[2]) ** 2))
            ),
            "cold_bias": {"J_over_m": cold.j_over_m - fit.j_over_m, "mu": cold.mu - fit.mu},
            "cold_status": cold.status,
            "cold_cpu_s": time.process_time() - c0,
        }
        if warm:
            probe = model_error_probe(fit, frames)
            out[name] |= {
                "bias": dict(zip(("J_over_m", "mu"), map(finite, probe["bias"]), strict=True)),
                "success": probe["success"],
                "iterations": probe["iterations"],
                "cpu_s": probe["cpu_s"],
            }
    return {"model_error": out}


def finite(v, keep=True):
    """float(v), or None where it is not finite or not ``keep`` (JSON has no inf)."""
    return float(v) if keep and v is not None and np.isfinite(v) else None


def _reported_row(rep, suffix: str) -> dict:
    """``values_reported{suffix}``, ``std_reported{suffix}`` and ``reported_source{suffix}``
    of a ``Reported``: what the drop path writes into estimate.json (mu's value where it
    is only a lower bound has no std: None)."""
    return {
        f"values_reported{suffix}": {k: v for k, v in rep.values.items() if v is not None},
        f"std_reported{suffix}": {k: finite(v) for k, v in rep.std.items()},
        f"reported_source{suffix}": rep.source,
    }


def _bootstrap_rows(fit, cov, rep, data, sigma, draws: int, seed: int, mu_known: bool) -> dict:
    """The parametric bootstrap's columns of a row: its std of the NLP's values, the
    bias-corrected values and std, and what the drop path reports with its default
    ``[method] covariance = "bootstrap"`` (``values_reported``, ``basins``: the
    linearized one's where the output error is accepted; the model-error allowance is
    ``rep``'s, not computed twice)."""
    t_m, q_m, geometry, settings, found, starts = data
    values = {"J_over_m": fit.j_over_m, "mu": fit.mu, "restitution": rep.eps["value"]}
    scale = bootstrap_noise_scale(fit, cov)
    slides = fit_slides(fit, settings)
    boot = contact_bootstrap(fit, sigma, draws, seed, scale, wall=slides)
    eps_boot = _restitution(fit, t_m, q_m, geometry, sigma * scale, draws, seed)
    with_boot = reported_values(fit, t_m, q_m, geometry, settings, cov, found, starts,
                                bootstrap=lambda: boot, oe=rep.oe,
                                allowance=rep.allowance, eps=rep.eps)  # fmt: skip
    corrected = dict(zip(("J_over_m", "mu"), boot.corrected.tolist(), strict=True))
    return {
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
        **_reported_row(with_boot, ""),
        "basins": with_boot.competing,
        "bootstrap_draws": boot.draws.tolist(),
        "bootstrap_success": boot.success.tolist(),
        "bootstrap_mean": {
            "J_over_m": finite(np.nanmean(boot.draws[boot.success, 0])),
            "mu": finite(np.nanmean(boot.draws[boot.success, 1])),
        },
        "mu_wall": boot.extra["mu_wall"].to_dict() if slides else None,
        "draws_succeeded": int(boot.success.sum()),
        "refit_iterations_median": float(np.median(boot.iterations)),
        "bootstrap_wall_s": boot.wall_s,
        "bootstrap_cpu_s": boot.cpu_s,
    }


def _summary(row: dict) -> str:
    """One line of a row for progress output (what the drop path reports by default where
    the row has it, else with the linearized std)."""
    suffix = "" if "values_reported" in row else "_linearized"
    v, r, s = row["values"], row["values_reported" + suffix], row["std_reported" + suffix]
    oe = row["output_error"]
    text = (
        f"seed {row['seed']}: NLP J/m {v['J_over_m'] * 1e6:.1f} mm^2, mu {v['mu']:.4f}; "
        f"reported ({row['reported_source' + suffix]}, s^2 "
        f"{oe['residual_variance_factor']:.2f}) J/m "
        f"{r['J_over_m'] * 1e6:.1f} +- {(s['J_over_m'] or math.inf) * 1e6:.1f} mm^2, mu "
        f"{r['mu']:.4f} +- {s['mu'] or math.inf:.4f}, restitution {r['restitution']:.3f} +- "
        f"{s['restitution'] or math.inf:.3f}; {len(row['basins' + suffix])} competing basins; fit "
        f"{row['fit_cpu_s']:.1f} s CPU, output error {oe['cpu_s']:.1f} s CPU"
    )
    if "values_corrected" in row:
        c, b = row["values_corrected"], row["std_bootstrap"]
        text += (
            f"; bootstrap corrected J/m {c['J_over_m'] * 1e6:.1f} (std "
            f"{(b['J_over_m'] or math.inf) * 1e6:.1f}), mu {c['mu']:.4f} (std "
            f"{b['mu'] or math.inf:.4f}), {row['bootstrap_cpu_s']:.1f} s CPU"
        )
    return text


def _restitution(fit, t_m, q_m, geometry, noise, draws: int, seed: int):
    """The bootstrap std of the frames' restitution estimate
    (``drop_checks.frames_restitution``) on the re-noised copies of the fit's prediction
    (the same noise draws as the NLP's bootstrap: same seed, same shape); None where the
    frames give no restitution."""

    def estimate(q):
        own = drop_checks.frame_noise(q)
        found = drop_checks.impact_consistency(t_m, q, geometry, *own)
        return drop_checks.frames_restitution(t_m, q, geometry, found, *own)

    if estimate(q_m)["value"] is None:
        return None

    def one(y):
        value = estimate(y)["value"]
        return np.array([np.nan if value is None else value]), value is not None, 0

    mean = fit.q[fit.frame_index]
    boot = parametric_bootstrap(mean, noise, one, ("restitution",), draws, seed)
    return float(boot.std[0])


CLASS_NAMES = {"inertia": "J/m (inertia)", "friction": "mu (friction)", "other": "restitution"}


def drop_coverage(rows: list[dict]) -> dict[str, dict[str, dict]]:
    """{"reported": per class, "reported (linearized)": ..., "linearized": ..., "bootstrap":
    ..., "bootstrap corrected": ...} (``coverage.coverage``: n, flagged, fractions within 1
    and 2 std, median |z|); the classes J/m, mu, restitution.

    "reported" is what the drop path writes into estimate.json by default
    (``ellipse_drop.reported_values``: the output-error fit's values and std where it is
    accepted, else the NLP's corrected by the bootstrap, the std of J/m and mu widened by
    the model-error allowance); "reported (linearized)" the same with ``[method] covariance =
    "linearized"``. "linearized", "bootstrap" and "bootstrap corrected" are the
    NLP's own values (J/m, mu; restitution the frames') with those stds: the fallback's
    numbers, measured on every dataset. Tables whose columns the rows lack (the bootstrap's
    where the study ran without refits) are left out."""
    out = {}
    tables = (
        ("reported", "values_reported", "std_reported"),
        ("reported (linearized)", "values_reported_linearized", "std_reported_linearized"),
        ("linearized", "values", "std_linearized"),
        ("bootstrap", "values", "std_bootstrap"),
        ("bootstrap corrected", "values_corrected", "std_bootstrap_corrected"),
    )
    for which, values, std in tables:
        if not rows or not all(values in r and std in r for r in rows):
            continue
        shifted = [r | {"values": r[values]} for r in rows]
        table = coverage(shifted, std, one_sided=False)
        out[which] = {CLASS_NAMES.get(k, k): v for k, v in table.items()}
    return out
