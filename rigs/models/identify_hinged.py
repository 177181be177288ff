"""``physid identify`` for hinged rigs (pendulum, Furuta): encoder logs → estimate.json + plot.

Pipeline (Marklund et al. Sections 3, 4.4, 4.5): read each log, put it on the estimator grid
t_0 + k h, initialize states from the filtered angles, run the box-constrained LM on the first
log, compute the linearized covariance and identifiability, and cross-validate on every other
log by estimating only its states with the parameters fixed. ``cost`` and ``cv_cost`` are the
weighted squared residual per time step (mean over the n steps of a series).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import jax
import numpy as np

from physid.errors import InputError
from physid.estimation.consistency import inertia_lmi, nearest_consistent
from physid.estimation.estimate import Estimate, Result, Status
from physid.estimation.figures import pyplot, save_figure
from physid.estimation.flags import (
    bound_flags,
    flag_parameters,
    unexcited_by_parameter,
    unexcited_directions,
)
from physid.estimation.hinged_problem import HingedProblem
from physid.estimation.initialize import initial_states, resample, smooth_angles
from physid.estimation.lm import (
    LMSettings,
    fit_states,
    gauss_newton_test,
    levenberg_marquardt,
)
from physid.estimation.markers import MarkerObservations
from physid.estimation.step_bias import (
    extrapolation_noise_increment,
    halve_markers,
    halve_series,
    richardson,
)
from physid.estimation.uncertainty import Covariance, noise_influence, parameter_covariance
from physid.estimation.validation import validation
from physid.rigs.models import validate_hinged
from physid.rigs.models.validate_hinged import FREE_RUN_HORIZON, PREDICTION_HORIZON
from physid.spec import RigSpec
from physid.streams import held_index

# The [method] keys of the hinged rigs (docs/lm-estimator.md); any other is a typo.
METHOD_KEYS = (
    "h", "kappa", "kappa_final", "eps_g", "eps_delta", "max_iter", "eps_f", "lm_tau",
    "eps_fric", "alpha_shrink", "model_error", "physical_consistency", "max_gap",
    "model_error_iterations", "prediction_horizon", "free_run_horizon", "holdout",
    "covariance_batches", "step_extrapolation", "estimator",
)  # fmt: skip


def method_settings(spec: RigSpec) -> dict:
    """h (s), κ, LM tolerances and iteration limit from ``[method]`` (Section 4.4 defaults)."""
    spec.check_keys("method", METHOD_KEYS)
    kappa = spec.method_value("kappa", "1", 100.0)
    kappa_final = spec.method_value("kappa_final", "1", kappa)
    if not kappa > 0:
        raise spec.error("method.kappa", f"must be positive, got {kappa:g}")
    if not kappa_final >= kappa:
        raise spec.error(
            "method.kappa_final", f"must be at least kappa ({kappa:g}), got {kappa_final:g}"
        )
    return {
        "h": spec.method_value("h", "s", 1e-3),
        "kappa": kappa,
        "kappa_final": kappa_final,
        "eps_g": spec.method_value("eps_g", "1", LMSettings.eps_g),
        "eps_delta": spec.method_value("eps_delta", "1", LMSettings.eps_delta),
        "max_iter": int(spec.method_value("max_iter", "1", LMSettings.max_iter)),
        "eps_f": spec.method_value("eps_f", "1", LMSettings.eps_f),
        "lm_tau": spec.method_value("lm_tau", "1", LMSettings.tau),
        "eps_fric": spec.method_value("eps_fric", "rad/N m s", EPS_FRIC),
        "alpha_shrink": spec.method_value("alpha_shrink", "1", LMSettings.alpha_shrink),
        # The discretization error of h in the std (refit at h/2), on by default (issue 24:
        # the default std covers model error; without it the sample Furuta's J_Byy, b1, b2
        # were 6.8, 4.1, 4.8 std from the truth with (3.31)).
        "model_error": _flag(spec, "model_error", True),
        # Report the Richardson value 2χ(h/2) − χ(h) instead of χ(h) (estimation.step_bias).
        # Off by default: calibrated on the synthetic pendulum (J 72 % within 1 std, was
        # 6 %), but on the sample Furuta χ(h/2) lies further from the truth than χ(h) for
        # J_Azz and b1, and the extrapolation put them at z = −3.8 and +3.5 (docs/validation.md).
        "step_extrapolation": _flag(spec, "step_extrapolation", False),
        "model_error_iterations": int(
            spec.method_value("model_error_iterations", "1", LMSettings.max_iter)
        ),
        # Prediction checks (issue 24): k of the k-step-ahead check as a time, the fraction
        # of the first log held out at its end (predicted by a refit on the rest), and the
        # number of blocks of the batch-means covariance.
        "prediction_horizon": spec.method_value("prediction_horizon", "s", PREDICTION_HORIZON),
        "free_run_horizon": spec.method_value("free_run_horizon", "s", FREE_RUN_HORIZON),
        "holdout": spec.method_value("holdout", "1", HOLDOUT),
        "covariance_batches": int(spec.method_value("covariance_batches", "1", BATCHES)),
        # DESIGN: inertias are kept physically consistent; `false` shows the box-only fit
        # (to diagnose fixed values the data contradict).
        "physical_consistency": _flag(spec, "physical_consistency", True),
    }


# The last fifth of the first log is held out: the model refitted on the rest predicts it.
HOLDOUT = 0.2
# Blocks of the batch-means covariance (``estimation.uncertainty``): each block of a 6 s log
# is 0.6 s, longer than the residuals' correlation over a swing; 9 degrees of freedom make
# the std itself uncertain by ~25 %.
BATCHES = 10


def _flag(spec: RigSpec, key: str, default: bool = False) -> bool:
    value = spec.method.get(key, default)
    if not isinstance(value, bool):
        raise spec.error(f"method.{key}", f"expected true or false, got {value!r}")
    return value


# Velocity-level compliance of the friction rows in the estimator's inverse dynamics
# (rad/(N m s)); see ``estimation_values``.
EPS_FRIC = 10.0


def estimation_values(rig, names, settings: dict) -> dict:
    """Fixed values the estimator uses instead of the spec's: every ``eps_fric*`` that is not
    identified becomes ``[method] eps_fric`` (default ``EPS_FRIC``).

    Why: in inverse dynamics the friction impulse is clip(−Ḡv/Σ_t, ±bound) with Σ_t =
    eps_fric/h, so it saturates once |v| exceeds eps_fric × (friction torque). The spec's
    1e-6 rad/(N m s) makes that band ~1e-8 rad/s — sticking, as the simulator should — but
    fitted states follow 1e-3 rad encoder noise with ~2e-2 rad/s of velocity jitter, so at
    rest the fitted friction flips between ±bound at random and the cost grows with μ². On
    the 20 s pendulum release (stuck from ~15 s) that drove μ to −68 % and b to +620 %.
    With 10 rad/(N m s) the band is ~0.08 rad/s for the pendulum: at rest the friction can
    balance gravity smoothly, and a swing spends ~2 ms of each 0.45 s half-period inside it.
    """
    eps = settings["eps_fric"]
    return {k: eps for k in rig.values if k.startswith("eps_fric") and k not in names}


def channel_weights(spec: RigSpec, channels) -> np.ndarray:
    """Diagonal of R⁻¹ per encoder channel: ``[sensors.NAME] weight`` (default 1, Section 4.4)."""
    return np.array([float(spec.sensors.get(c, {}).get("weight", 1.0)) for c in channels])


def series_on_grid(stream, channels, h: float, path) -> dict:
    """Observations y[n, k] on the grid t_0 + k h (the log sample nearest each grid point, if
    within h/2; otherwise, or if missing, weight 0), smoothed initial angles and control u[n−1]."""
    for c in channels:
        if c not in stream.channels:
            raise InputError(f"{path}: no channel {c!r} (has {', '.join(stream.channels)})")
    t = np.asarray(stream.t, float)
    cols = [stream.channels.index(c) for c in channels]
    angles = np.asarray(stream.values[:, cols], float)
    missing = np.asarray(stream.missing[:, cols], bool) | ~np.isfinite(angles)
    n = int(np.floor((t[-1] - t[0]) / h + 1e-9)) + 1
    check_grid_size(n, h, t[-1] - t[0], len(channels), path)
    if n < 3:
        raise InputError(f"{path}: {t[-1] - t[0]:.3g} s of data is too short for h = {h:g} s")
    grid = t[0] + h * np.arange(n)
    idx = np.clip(np.searchsorted(t, grid), 1, len(t) - 1)
    idx = np.where(np.abs(t[idx - 1] - grid) <= np.abs(t[idx] - grid), idx - 1, idx)
    near = np.abs(t[idx] - grid) <= 0.5 * h + 1e-12
    y = angles[idx]
    present = near[:, None] & ~missing[idx]
    filled = angles.copy()
    for i in range(angles.shape[1]):  # interpolate over missing samples for the initial guess
        ok = ~missing[:, i]
        if ok.sum() < 2:
            raise InputError(f"{path}: channel {channels[i]!r} has fewer than two samples")
        filled[:, i] = np.interp(t, t[ok], angles[ok, i])
    smooth = resample(t, smooth_angles(t, filled), grid)
    if "u" in stream.channels:
        u_all = np.nan_to_num(np.asarray(stream.values[:, stream.channels.index("u")], float))
        hold = held_index(t, grid[:-1])
        u = u_all[hold]
    else:
        u = np.zeros(n - 1)
    return {
        "grid": grid,
        "y": np.where(present, y, 0.0),
        "present": present,
        "init": smooth,
        "u": u,
    }


# Memory the LM needs per grid step and encoder channel: peak RSS of `physid identify` grew
# by 39 and 63 kB per step from a 2 to a 4 and a 4 to an 8 s pendulum log (1 channel), and by
# 198 kB per step from a 2 to a 4 s Furuta log (2 channels; from 4 to 8 s its peak, 2.0 GB,
# did not grow: something else sets it there). The largest, 99 kB per channel, plus 20 %.
# A sanity bound against absurd grids; $PHYSID_MEMORY_BUDGET admits longer logs.
BYTES_PER_STEP = 120_000


def memory_budget() -> int:
    """Bytes one experiment's estimator may plan to use: ``$PHYSID_MEMORY_BUDGET`` (bytes,
    or with a suffix K, M, G), else half of this machine's physical memory."""
    import os

    raw = os.environ.get("PHYSID_MEMORY_BUDGET", "").strip().upper().removesuffix("B")
    if raw:
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(raw[-1:], 1)
        try:
            return int(float(raw.rstrip("KMG")) * scale)
        except ValueError:
            raise InputError(
                f"PHYSID_MEMORY_BUDGET={os.environ['PHYSID_MEMORY_BUDGET']!r}: give bytes, "
                "e.g. 8G or 500M"
            ) from None
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2


def check_grid_size(n: int, h: float, span: float, channels: int, path) -> None:
    """Refuse, before anything is allocated, an estimator grid whose memory would exceed
    ``memory_budget()``: the message names ``[method] h``, the grid size and the estimate."""
    need = n * BYTES_PER_STEP * max(channels, 1)
    budget = memory_budget()
    if need > budget:
        raise InputError(
            f"{path}: [method] h = {h:g} s over {span:.6g} s of data makes a grid of {n:,} "
            f"steps, about {need / 2**30:,.1f} GiB for the estimator, more than the "
            f"{budget / 2**30:,.1f} GiB budget (half this machine's memory, or "
            "$PHYSID_MEMORY_BUDGET); raise [method] h in the rig spec or shorten the log"
        )


def max_gap(spec: RigSpec) -> float:
    """``[method] max_gap`` (s): a log is split at longer gaps (``physid process``) or
    refused (``physid identify``)."""
    from physid.rigs.encoders.convert import MAX_GAP_S

    return spec.method_value("max_gap", "s", MAX_GAP_S)


def refuse_long_gaps(stream, spec: RigSpec, path) -> None:
    """An error naming the frames of the first gap longer than ``max_gap(spec)``."""
    from physid.rigs.encoders.convert import long_gaps

    limit = max_gap(spec)
    gaps = long_gaps(stream, limit)
    if gaps:
        raise InputError(
            f"{path}: {gaps[0].describe()}, longer than the {limit:g} s limit ([method] "
            f"max_gap; {len(gaps)} such gap(s)); cut the log there, or run physid process, "
            "which splits it into segments"
        )


def parameter_scale(spec: RigSpec, names) -> np.ndarray:
    """χ = scale · θ per parameter: its initial value, or its box width if that is zero."""
    return np.array([_scale(spec.parameters[k]) for k in names])


def _scale(p) -> float:
    if p.initial != 0:
        return abs(p.initial)
    width = p.upper - p.lower
    return width if np.isfinite(width) and width > 0 else 1.0


def build_problem(
    rig, spec, names, series, settings, values=None, markers=None, sigma_ref=1e-3
) -> tuple:
    """The ``HingedProblem`` of one series and its initial states (Section 4.4)."""
    weights = channel_weights(spec, rig.channels)
    rig = _with_values(rig, {**estimation_values(rig, names, settings), **(values or {})})
    ps = spec.parameters
    scale = parameter_scale(spec, names)
    lower = np.array([ps[k].lower for k in names]) / scale if names else np.zeros(0)
    upper = np.array([ps[k].upper for k in names]) / scale if names else np.zeros(0)
    obs_w = series["present"] * weights[None, :]
    lmi = None
    if rig.bodies is not None and names and settings["physical_consistency"]:
        reference = np.array([rig.values[k] for k in names]) / scale
        lmi = inertia_lmi(rig.bodies, rig.values, names, scale, reference)
    problem = HingedProblem(
        rig, tuple(names), scale, lower, upper, series["y"], obs_w.astype(float),
        series["u"], settings["h"], settings["kappa"], markers, sigma_ref, lmi,
    )  # fmt: skip
    X0 = initial_states(rig, series["init"], settings["h"])
    return problem, X0


def _with_values(rig, values: dict):
    merged = dict(rig.values)
    merged.update(values)
    return replace(rig, values=merged)


def enable_compilation_cache(path: str | Path | None = None) -> Path | None:
    """Turn on JAX's persistent compilation cache so that a new process reuses the compiled
    residuals and Jacobians (~5–10 s of XLA compilation per rig) instead of compiling again.

    ``path`` defaults to ``$PHYSID_JAX_CACHE`` or ``~/.cache/physid/jax``;
    ``PHYSID_JAX_CACHE=off`` leaves the cache off (nothing written, every process compiles).
    Safe to call more than once; returns the folder used (None: off)."""
    import os

    setting = os.environ.get("PHYSID_JAX_CACHE")
    if path is None and setting is not None and setting.strip().lower() == "off":
        return None
    folder = Path(path or setting or Path.home() / ".cache" / "physid" / "jax")
    folder.mkdir(parents=True, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", str(folder))
    # Cache every compilation: ours are many small ones plus a few large ones.
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    return folder


def reference_noise(spec: RigSpec, channels) -> float:
    """σ_ref (rad) that R⁻¹ = I stands for: the encoders' ``[sensors.X] noise`` divided by
    the square root of their weight, the smallest over channels (default 1e-3 rad)."""
    from physid.units import to_si

    sig = []
    for c in channels:
        entry = spec.sensors.get(c, {})
        noise = entry.get("noise")
        if isinstance(noise, dict) and "value" in noise:
            value = to_si(float(noise["value"]), str(noise.get("unit", "rad")))
        elif isinstance(noise, int | float):
            value = float(noise)
        else:
            continue
        sig.append(value / np.sqrt(float(entry.get("weight", 1.0))))
    return min(sig) if sig else 1e-3


KAPPA_STEP = 10.0  # factor between successive κ stages


def kappa_schedule(settings: dict) -> list[float]:
    """The κ values LM is solved at in turn: ``kappa``, then ten times more per stage up to
    ``kappa_final`` (just ``[kappa]`` when they are equal, the default).

    Why: κ weighs the dynamics against the observations. A large κ trusts the model, and
    with a model that is exact to the noise level the estimate approaches the output-error
    (Cramér–Rao) limit. The fit at κ = 100 lets the states follow the noise and has a
    spread in the pendulum's b 10–30 times larger (docs/lm-estimator.md). Started at a
    large κ directly, though, LM stalls far from the truth. The landscape is as nonconvex
    as single shooting. Raising κ a decade at a time from the soft fit keeps each stage's
    start within reach of its minimum."""
    kappa, final = settings["kappa"], settings["kappa_final"]
    stages = [kappa]
    while stages[-1] * KAPPA_STEP < final * (1 - 1e-9):
        stages.append(stages[-1] * KAPPA_STEP)
    if final > stages[-1] * (1 + 1e-9):
        stages.append(final)
    return stages


def solve_continued(
    make_problem, X0, theta0, lm: LMSettings, schedule, say=None, on_iteration=None
):
    """LM at each κ of ``schedule`` in turn (``make_problem(κ)`` builds that problem), each
    from the previous solution's states and θ. Returns the last problem, its LMResult, one
    dict per stage (kappa, iterations, cost, stop_reason) and the costs of every iterate of
    every stage in order (each stage's first is its start at its own κ)."""
    X, theta, stages, history = X0, theta0, [], []
    for i, kappa in enumerate(schedule):
        problem = make_problem(kappa)
        if i > 0 and say is not None:
            say(f"  κ = {kappa:g}, from the κ = {schedule[i - 1]:g} solution")
        # The warm-up (states only, θ held) is for the start from filtered data; later
        # stages start from a fit.
        stage_lm = lm if i == 0 else replace(lm, warmup_iter=0)
        res = levenberg_marquardt(problem, X, theta, stage_lm, on_iteration)
        X, theta = res.X, res.theta
        history += res.history
        stages.append(
            {
                "kappa": kappa,
                "iterations": res.iterations,
                "cost": res.cost,
                "stop_reason": res.reason,
            }
        )
    return problem, res, stages, history


def lm_settings(settings: dict) -> LMSettings:
    return LMSettings(
        eps_g=settings["eps_g"],
        eps_delta=settings["eps_delta"],
        max_iter=settings["max_iter"],
        tau=settings["lm_tau"],
        eps_f=settings["eps_f"],
        alpha_shrink=settings["alpha_shrink"],
    )


def identify_series(
    spec: RigSpec,
    rig,
    series_list: list[dict],
    markers=None,
    progress: Callable[[str], None] | None = None,
    labels: list[str] | None = None,
) -> tuple[Estimate, list[dict]]:
    """Identify ``spec.parameters`` from the first series; cross-validate on the others.

    No file I/O. ``series_list``: dicts from ``series_on_grid`` (one per log, same rig);
    ``markers``: None, one ``MarkerObservations`` for the first series, or a list with one
    entry (or None) per series, each on that series' grid; ``progress`` receives one line of
    text per LM iteration. Returns the ``Estimate`` and, per series, a dict with ``grid``
    (s), fitted ``angles[n, k]`` (rad), ``pixels[n, m, 2]`` (px, or None), ``states`` (r, e,
    v) and ``cost`` (weighted squared residual per step).
    """
    say = progress or (lambda _line: None)
    settings = method_settings(spec)
    h = settings["h"]
    names = list(spec.parameters)
    labels = labels or [f"series {i}" for i in range(len(series_list))]
    marks = _marker_list(markers, len(series_list))
    sigma_ref = reference_noise(spec, rig.channels)
    n = len(series_list[0]["grid"])
    say(f"identifying {', '.join(names)} from {labels[0]} ({n} steps of {h:g} s)")
    start = time.perf_counter()
    scale = parameter_scale(spec, names)  # the problems' scale, known before they are built

    # LM's warm-up fits the states alone (θ held), then states and θ together: the
    # iteration count starts again at 1, so a restart marks the joint run.
    runs = {"last": 0, "joint": not (names and lm_settings(settings).warmup_iter > 0)}

    def on_iteration(it, cost, alpha, theta):
        if it <= runs["last"]:
            runs["joint"] = True
        runs["last"] = it
        phase = "states+θ" if runs["joint"] else "states (θ held)"
        shown = ", ".join(f"{k}={v:.6g}" for k, v in zip(names, theta * scale, strict=True))
        say(f"  {phase} iteration {it:3d}  cost/step {cost / n:.4e}  α {alpha:.2e}  {shown}")

    def initial(problem):
        theta0 = np.array([spec.parameters[k].initial for k in names]) / problem.scale
        return _consistent_start(spec, problem, theta0, say)

    problem, res, stages, history, theta0 = _fit_series(
        rig, spec, names, series_list[0], settings, None, marks[0], sigma_ref, initial,
        say, on_iteration,
    )  # fmt: skip
    iterations = sum(s["iterations"] for s in stages)
    values = res.theta * problem.scale
    say(f"LM {res.reason} after {iterations} iterations, {time.perf_counter() - start:.1f} s")
    chans = validate_hinged.channels(spec, rig, marks[0])
    noise = validate_hinged.observation_noise(
        series_list[0], chans, channel_weights(spec, rig.channels), sigma_ref, marks[0]
    )
    cov = fitted_covariance(problem, res, settings["covariance_batches"], noise)
    white = fitted_covariance(problem, res)
    status = fit_status(problem, res, white)
    say(f"  {_status_line(status)}")
    for body in cov.on_consistency_face:
        say(
            f"  {body} is on the boundary of physical consistency (pseudo-inertia singular): "
            "the data push its inertias beyond what a body can have"
        )
    fits = [_fit(problem, res.X, series_list[0], res.cost)]
    bounds = parameter_bounds(problem, res.theta)
    box = np.isin(bounds, ("lower", "upper"))
    released = released_std(problem, res, cov, box, settings["covariance_batches"], noise)
    lin_std = np.where(box | ~np.isfinite(released), cov.std, released)
    std, extra = lin_std, {"std_linearized_white": _named(names, white.std)}
    reported = values
    if settings["model_error"] and names and status.converged:
        half, half_status, (refit, half_res) = refit_at_half_step(
            spec, rig, problem, res, series_list[0], marks[0]
        )
        lower, upper = problem.lower * problem.scale, problem.upper * problem.scale
        step = richardson(values, half, lower, upper, box)
        lmi = problem.consistency
        # The extrapolation trusts χ(h/2) as a minimum: a refit whose convergence test
        # failed, or extrapolated inertias no body can have, keep the values at h (with
        # their whole first-order bias 2|d| in the std).
        feasible = lmi is None or lmi.feasible(step.values / problem.scale)
        if not (settings["step_extrapolation"] and half_status.converged and feasible):
            step = richardson(values, half, lower, upper, box, allowed=np.zeros(len(names)))
        reported = step.values
        say(f"  refit at h/2: {_status_line(half_status)}")
        if step.extrapolated.any():
            say(f"  step bias removed (refit at h/2): {_show(names, reported - values)}")
        else:
            say(f"  model error (refit at h/2): {_show(names, step.std)}")
        # The extrapolated value's own noise (the two fits see the same samples); where the
        # extrapolation lowers it, the std at h is kept.
        amplified = np.where(
            step.extrapolated,
            np.maximum(np.diag(extrapolation_noise(problem, res, refit, half_res, noise)), 0.0),
            0.0,
        )
        std = np.sqrt(lin_std**2 + amplified + step.std**2)
        extra.update(
            values_at_step=_named(names, values),
            values_at_half_step=_named(names, half),
            step_extrapolated=dict(zip(names, step.extrapolated.tolist(), strict=True)),
            discretization_error=_named(names, step.std),
            extrapolation_noise=_named(names, np.sqrt(amplified)),
            std_linearized=_named(names, lin_std),
            half_step_status=half_status.to_dict(),
        )
    directions = unexcited_directions(names, cov.directions, cov.singular_values)
    parameters = flag_parameters(
        names, reported, std, rig.parameter_units, status,
        magnitude=np.maximum(np.abs(reported), np.abs(problem.scale)),
        at_bound=bounds,
        unexcited=unexcited_by_parameter(directions),
        released_std=np.where(box, released, np.nan),
    )  # fmt: skip

    fitted = {names[i]: float(values[i]) for i in range(len(names))}
    predictions = validate_hinged.predict(
        rig, fitted, series_list[0], res.X, problem.observed_angles(res.X), settings, chans,
        marks[0], labels[0],
    )  # fmt: skip
    holdout = held_out_tail(spec, rig, problem, res, series_list[0], marks[0], settings, say)
    if holdout is not None:
        predictions += holdout.pop("predictions")
    # Each plot's time origin: the first log's start for its fit and its held-out tail (they
    # share its time axis), each other log's own start.
    origins = [float(series_list[0]["grid"][0])] * len(predictions)
    cv_costs = []
    for label, series, mk in zip(labels[1:], series_list[1:], marks[1:], strict=True):
        cv_problem, cv = estimate_states(spec, rig, series, fitted, mk)
        cv_costs.append(cv.cost / len(series["grid"]))
        fits.append(_fit(cv_problem, cv.X, series, cv.cost))
        more = validate_hinged.predict(
            rig, fitted, series, cv.X, cv_problem.observed_angles(cv.X), settings,
            validate_hinged.channels(spec, rig, mk), mk, label,
        )  # fmt: skip
        predictions += more
        origins += [float(series["grid"][0])] * len(more)
        say(f"  cross-validation on {label}: cost/step {cv_costs[-1]:.4e}")
    for p in predictions:
        say(f"  {_prediction_line(p)}")
    residuals = validate_hinged.residual_report(
        problem, res.X, res.theta, series_list[0], chans, marks[0]
    )
    findings = list(residuals["findings"]) + _input_findings(rig, series_list, labels)
    residuals["findings"] = findings
    checked = validation(
        status, predictions, parameters, residuals, _std_covers(settings, noise, chans),
        {"held_out_tail": holdout} if holdout is not None else None,
    )  # fmt: skip
    say(f"verdict: {checked['summary']}")
    for finding in findings:
        say(f"  note: {finding}")

    estimate = Estimate(
        rig=spec.name,
        solver="levenberg-marquardt (joint states+parameters, banded arrow solve)",
        parameters=parameters,
        cost=res.cost / n,
        iterations=iterations,
        converged=status.converged,
        history=[c / n for c in history],
        settings={**settings, "logs": list(labels), "reference_noise": sigma_ref},
        cv_cost=float(np.mean(cv_costs)) if cv_costs else None,
        covariance=cov.cov.tolist(),
        identifiability={
            "singular_values": cov.singular_values.tolist(),
            "directions": cov.directions.tolist(),
            "unexcited_directions": cov.unexcited,
            "unexcited": directions,
            "relative_to": "max(|value|, |initial|) per parameter",
        },
        extra={
            "stop_reason": res.reason,
            "kappa_stages": [{**s, "cost": s["cost"] / n} for s in stages],
            "cv_costs": cv_costs,
            "tau": _taus(rig),
            "markers": [mk.m if mk is not None else 0 for mk in marks],
            "consistency": _consistency_report(problem, res, cov, theta0),
            "std_at_stop": _named(names, cov.std),
            "prediction_series": [p.series(t0) for p, t0 in zip(predictions, origins, strict=True)],
            **extra,
        },
        status=status.to_dict(),
        validation=checked,
    )
    return estimate, fits


def _named(names, numbers) -> dict[str, float]:
    return dict(zip(names, np.asarray(numbers, float).tolist(), strict=True))


# A converged fit's remaining Gauss–Newton step moves no parameter by more than this
# fraction of its (white, linearized) std: continuing could not change a reported number
# by a visible amount. At the sample pendulum's stop the largest is 1.2e-3.
GN_STEP_STD = 0.1


def fit_status(problem: HingedProblem, result, cov: Covariance) -> Status:
    """The enumerated outcome of an LM fit (``estimation.estimate.Status``): successful only
    when the Gauss–Newton test passes at the returned point (``lm.gauss_newton_test``), whatever
    stop rule ended the loop; otherwise ``max_steps_reached`` for the iteration limit and
    ``stalled`` for any other stop."""
    if not len(result.theta):
        return Status(Result.successful, result.reason, "no parameters: states only")
    gn = gauss_newton_test(problem, result.X, result.theta, result.lin)
    step = np.abs(gn.dtheta * problem.scale)
    ok = np.isfinite(cov.std) & (cov.std > 0)
    worst = float(np.max(step[ok] / cov.std[ok], initial=0.0))
    test = (
        f"Gauss–Newton test: one more step would move no parameter by more than {worst:.2g} "
        f"of its std (passes at ≤ {GN_STEP_STD:g}) and lower the cost by "
        f"{gn.decrease / max(result.cost, 1e-300):.2g} of itself"
    )
    if worst <= GN_STEP_STD:
        return Status(Result.successful, result.reason, test)
    failed = f"{result.reason}; {test}, which fails"
    if result.reason == "iteration limit":
        return Status(Result.max_steps_reached, failed)
    return Status(Result.stalled, failed)


def _status_line(status: Status) -> str:
    if status.converged:
        return f"converged ({status.stop}); {status.test}"
    return f"NOT CONVERGED ({status.result.value}): {status.stop}"


def _prediction_line(p) -> str:
    parts = ", ".join(
        f"{c.name} {r:.3g} {c.unit} ({r / c.noise:.2g} × noise)"
        for c, r in zip(p.channels, p.rms, strict=True)
    )
    text = f"{p.kind} ({p.horizon} steps) on {p.label}: RMS {parts}"
    if p.departs_at is not None:
        text += f"; departs from the data after {p.departs_at:.3g} s"
    return text


def _std_covers(settings: dict, noise, chans) -> str:
    """The sentence the report shows under the parameter table."""
    batches = settings["covariance_batches"]
    text = (
        "The std is linearized (Marklund et al. (3.31)) and covers the measurement noise "
        "(at least the data's own noise, estimated from the samples, through the observation "
        "rows) and residuals correlated in time (batch means over "
        f"{batches} blocks of the log)"
    )
    if settings["model_error"] and settings["step_extrapolation"]:
        text += (
            f". The values are corrected for the step h = {settings['h']:g} s by a refit at "
            "h/2 (Richardson: 2χ(h/2) − χ(h)) and the std covers the noise the correction "
            "adds and what it may miss (|χ(h) − χ(h/2)|/√3)"
        )
    elif settings["model_error"]:
        text += f", and the discretization error of h = {settings['h']:g} s (refit at h/2)"
    else:
        text += (
            f"; not the discretization error of h = {settings['h']:g} s ([method] "
            "model_error = true adds it)"
        )
    return text + (
        ". A parameter on a bound of its box has no std: its std with the bound released "
        "gives a one-sided interval. It does not cover errors of the fixed values or of the "
        "model's form."
    )


def _input_findings(rig, series_list, labels) -> list[str]:
    """A log whose control column is non-zero on a rig the input does not act on: the model
    ignores it (a torque-driven log identified with a rig without actuator: no hinge with a
    motor row)."""
    if any(h.motor for h in rig.system.hinges):
        return []
    out = []
    for label, series in zip(labels, series_list, strict=True):
        top = float(np.max(np.abs(series["u"]), initial=0.0))
        if top > 0:
            out.append(
                f"{label}: the control input u reaches {top:.3g} V but the rig has no actuator "
                "(no hinge with a motor): the model ignores the drive"
            )
    return out


def parameter_bounds(problem: HingedProblem, theta) -> list[str]:
    """Per parameter "lower"/"upper" (on its box bound), "consistency" (taking part in a face
    of the physical-consistency LMI the solution lies on) or ""."""
    flags = bound_flags(theta, problem.lower, problem.upper, np.ones(len(theta)))
    out = [str(f) for f in flags]
    lmi = problem.consistency
    if lmi is not None and len(theta):
        rows = lmi.active_rows(theta)
        if rows.size:
            involved = np.any(np.abs(rows) > 1e-9 * np.max(np.abs(rows)), axis=0)
            out = [
                f or ("consistency" if inv else "") for f, inv in zip(out, involved, strict=True)
            ]
    return out


def held_out_tail(spec, rig, problem, result, series: dict, markers, settings, say) -> dict | None:
    """The held-out check (issue 24): the parameters refitted on the first 1 − ``holdout`` of
    the log, the states of the whole log estimated with them held, and that model's
    predictions of the rest (k-step-ahead from those states, free run from the split).

    The refit is the same problem with the tail's observations weighted 0: its states there
    are free to follow the model, so they add nothing to the cost and the parameters see the
    head only; being the same length, it reuses the fit's compiled functions (a problem of
    another length would compile them anew, ~10 s). It starts from the full fit, at the last
    κ. Returns the refit's values and std, their difference from the full fit in combined std
    (the head is part of the whole, so the difference has variance std_head² − std_full²) and
    the predictions; None when the log is too short to hold a tail out."""
    frac = settings["holdout"]
    n = len(series["grid"])
    k = validate_hinged.horizon_steps(settings, n)
    n_head = int(round((1.0 - frac) * (n - 1))) + 1
    if frac <= 0 or n - n_head < 2 * k or not problem.names:
        return None
    names = list(problem.names)
    angles = np.unwrap(problem.observed_angles(result.X), axis=0)
    head = {**series, "init": angles, "present": series["present"].copy()}
    head["present"][n_head:] = False
    head_marks = None
    if markers is not None:
        weight = markers.weight.copy()
        weight[n_head:] = 0.0
        head_marks = replace(markers, weight=weight)
    final = {**settings, "kappa": settings["kappa_final"]}
    values = result.theta * problem.scale
    head_problem, head_res, *_ = _fit_series(
        rig, spec, names, head, final, None, head_marks, problem.reference_noise,
        lambda p: values / p.scale, warm=True,
    )  # fmt: skip
    head_values = head_res.theta * head_problem.scale
    head_cov = fitted_covariance(head_problem, head_res)
    full_cov = fitted_covariance(problem, result)
    with np.errstate(invalid="ignore", divide="ignore"):
        z = (head_values - values) / np.sqrt(np.maximum(head_cov.std**2 - full_cov.std**2, 0))
    t_split = float(series["grid"][n_head - 1] - series["grid"][0])
    say(
        f"  held-out tail after {t_split:.3g} s: refit on the rest gives "
        f"{_show(names, head_values)} ({head_res.reason})"
    )
    # The states of the whole log with the head's parameters held, from the full fit's.
    states = fit_states(problem, result.X, head_res.theta, lm_settings(final))
    tail = slice_series(series, n_head - 1, n)
    tail_marks = slice_markers(markers, n_head - 1, n)
    tail_X = tuple(np.asarray(a)[n_head - 1 :] for a in states.X)
    fixed = _named(names, head_values)
    predictions = validate_hinged.predict(
        rig, fixed, tail, tail_X, angles[n_head - 1 :], settings,
        validate_hinged.channels(spec, rig, tail_marks), tail_marks,
        f"held-out tail ({t_split:.3g} s on)",
    )  # fmt: skip
    return {
        "split_s": t_split,
        "values": fixed,
        "std": _named(names, head_cov.std),
        "stop_reason": head_res.reason,
        "z_vs_full": _named(names, z),
        "predictions": predictions,
    }


def slice_series(series: dict, a: int, b: int, init_angles=None) -> dict:
    """Steps a..b−1 of a series (its control too); ``init_angles`` [n, k] (the full fit's
    angles) replace the filtered initial angles, so a refit starts from the fit."""
    out = {
        "grid": series["grid"][a:b],
        "y": series["y"][a:b],
        "present": series["present"][a:b],
        "init": (series["init"] if init_angles is None else init_angles)[a:b],
        "u": series["u"][a : b - 1],
    }
    return out


def slice_markers(markers, a: int, b: int):
    if markers is None:
        return None
    return replace(markers, uv=markers.uv[a:b], weight=markers.weight[a:b])


def _consistent_start(spec: RigSpec, problem: HingedProblem, theta0, say) -> np.ndarray:
    """θ0 clipped to the box and, if that makes a body physically impossible, moved to the
    nearest consistent values (said); InputError if the fixed values leave none."""
    lmi, theta0 = problem.consistency, np.clip(theta0, problem.lower, problem.upper)
    if lmi is None or lmi.feasible(theta0):
        return theta0
    try:
        start = nearest_consistent(theta0, problem.lower, problem.upper, lmi)
    except ValueError:
        raise InputError(
            f"{spec.path}: {lmi.describe_violation(theta0, problem.scale)}, and no values of "
            f"{', '.join(problem.names)} within their bounds make it one: check the [fixed] "
            "inertias (each principal moment must be at most the sum of the other two)"
        ) from None
    say(
        f"  initial values: {lmi.describe_violation(theta0, problem.scale)}; starting from "
        + _show(problem.names, start * problem.scale)
    )
    return start


def _consistency_report(problem: HingedProblem, result, cov: Covariance, theta0) -> dict:
    """estimate.json's account of the physical-consistency constraint; ``theta0`` is the
    start LM was given (``_consistent_start``)."""
    lmi = problem.consistency
    if lmi is None:
        return {"enforced": False}
    return {
        "enforced": True,
        "method": "pseudo-inertia ⪰ 0 per body (Wensing et al. 2017), cvxpy",
        "bodies": list(lmi.labels),
        "min_eigenvalue": lmi.min_eigenvalues(result.theta).tolist(),
        "on_boundary": list(cov.on_consistency_face),
        # The values LM started from (the spec's initial values unless they were inconsistent)
        "start": dict(zip(problem.names, (theta0 * problem.scale).tolist(), strict=True)),
    }


def fitted_covariance(
    problem: HingedProblem, result, batches: int | None = None, obs_noise=None,
    hold_bounds: bool = True,
) -> Covariance:  # fmt: skip
    """(3.31) at the LM solution of ``problem``; parameters the LM left on a bound of the
    problem's box are held, and so are the faces of the physical-consistency LMI the solution
    lies on (``estimation.uncertainty``). ``batches`` and ``obs_noise``: the batch-means meat
    and the data's own noise (``parameter_covariance``); without them, (3.31) as printed.
    ``hold_bounds=False``: the box bounds released (``released_std``)."""
    bounds = bound_flags(result.theta, problem.lower, problem.upper, np.ones(len(result.theta)))
    if not hold_bounds:
        bounds = np.full(len(result.theta), "")
    lmi, values = problem.consistency, result.theta * problem.scale
    # With the data's noise given, the observation rows are the random input and the
    # dynamics rows' residuals are model error (``parameter_covariance``, dynamics_noise).
    kw = {"batches": batches, "obs_noise": obs_noise, "dynamics_noise": obs_noise is None}
    if lmi is None:
        return parameter_covariance(result.lin, problem.scale, values, bounds, **kw)
    rows = lmi.active_rows(result.theta)
    cov = parameter_covariance(result.lin, problem.scale, values, bounds, rows, **kw)
    return replace(cov, on_consistency_face=lmi.on_face(result.theta))


def released_std(problem, result, held_cov: Covariance, box, batches, noise) -> np.ndarray:
    """Per parameter, the std with the box bounds released (NaN where nothing is held).

    A parameter left on a bound of its box is not a measurement, and the covariance of the
    others is then conditional on it (``estimation.uncertainty``). But the bound is active
    exactly when the noise pushed that parameter beyond it, and the others took up its part:
    with b on its bound 0, μ's error was +11 % against a conditional std of 1 %, in 11 of 50
    pendulum datasets (docs/validation.md). The covariance with the bound released describes
    the others' error; the held parameter's own released std gives its one-sided interval
    [bound, bound + k·std]. Where releasing leaves a direction unexcited (the Furuta arm's
    J_Axx, J_Ayy on their bound), its std is infinite and the conditional one is kept."""
    if not np.any(box):
        return np.full(len(result.theta), np.nan)
    free = fitted_covariance(problem, result, batches, noise, hold_bounds=False)
    return np.where(np.isfinite(held_cov.std) | box, free.std, np.nan)


def refit_at_half_step(spec: RigSpec, rig, problem, result, series: dict, markers=None):
    """χ identified again at h/2 (SI values), started from the h solution: its parameters
    and its fitted angles (interpolated) as the initial states.

    Why: the estimator's h makes the identified values shadow parameters of the discrete
    model (Section 4.7), a bias the linearized covariance knows nothing about. The scheme is
    first order in h, so the bias at h is about twice the change from h to h/2; on the
    13-parameter swing-up that estimate is 0.9–1.7 times the true error of the inertias, b2,
    μ2 and tilt_z (docs/lm-estimator.md). Returns the values and the refit's ``Status``
    (the same Gauss–Newton test as the fit's: the extrapolation trusts χ(h/2) as a
    minimum) and the refit's problem and LM result (for its noise influence)."""
    settings = method_settings(spec)
    settings["h"] /= 2
    # From the h solution, at the last κ, without the states-only warm-up (the start is a
    # fit), for at most [method] model_error_iterations joint iterations.
    settings["kappa"] = settings["kappa_final"]
    settings["max_iter"] = settings["model_error_iterations"]
    names = list(problem.names)
    fitted = np.unwrap(problem.observed_angles(result.X), axis=0)
    half = halve_series(series, fitted)
    values = {k: float(v) for k, v in zip(names, result.theta * problem.scale, strict=True)}
    sigma_ref = reference_noise(spec, rig.channels)
    marks = halve_markers(markers)
    refit, res, *_ = _fit_series(
        rig, spec, names, half, settings, values, marks, sigma_ref,
        lambda p: np.array([values[k] for k in names]) / p.scale, warm=True,
    )  # fmt: skip
    status = fit_status(refit, res, fitted_covariance(refit, res))
    return res.theta * refit.scale, status, (refit, res)


def extrapolation_noise(problem, result, refit, refit_result, obs_noise) -> np.ndarray:
    """Cov(2χ(h/2) − χ(h)) − Cov(χ(h)) of the data noise, SI [p, p]
    (``estimation.step_bias.extrapolation_noise_increment``): the noise influence of the
    fit at h and of its refit at h/2 on the same samples (the refit's observation rows are
    the fit's, same weights, so ``obs_noise`` serves both), bounds released, conditional on
    the consistency faces each solution lies on."""

    def influence(prob, res):
        lmi = prob.consistency
        rows = None if lmi is None else lmi.active_rows(res.theta)
        return noise_influence(res.lin, obs_noise, rows) * prob.scale[None, :, None]

    return extrapolation_noise_increment(influence(problem, result), influence(refit, refit_result))


def _show(names, numbers) -> str:
    return ", ".join(f"{k}={v:.3g}" for k, v in zip(names, numbers, strict=True))


def estimate_states(spec: RigSpec, rig, series: dict, values: dict, markers=None) -> tuple:
    """Cross-validation (Section 4.5): only the states of ``series`` are estimated, every
    parameter held at ``values`` (those tuned on another series). Returns (problem, LMResult);
    the cost per step is ``result.cost / len(series["grid"])``."""
    settings = method_settings(spec)
    sigma_ref = reference_noise(spec, rig.channels)
    problem, res, *_ = _fit_series(
        rig, spec, [], series, settings, values, markers, sigma_ref, lambda _: np.zeros(0)
    )
    return problem, res


def _fit_series(
    rig, spec, names, series, settings, values, markers, sigma_ref, start, say=None,
    on_iteration=None, warm: bool = False,
):  # fmt: skip
    """LM on ``series`` through the κ schedule, from θ = ``start(problem)`` and the initial
    states of Section 4.4. Returns the problem at the last κ, its LMResult, the stages and
    cost history of ``solve_continued``, and the θ it started from. ``warm``: the start is
    a fit already (a refit): no states-only warm-up."""
    first, X0 = build_problem(rig, spec, names, series, settings, values, markers, sigma_ref)
    theta0 = start(first)

    def at_kappa(kappa):
        if kappa == settings["kappa"]:
            return first
        changed = {**settings, "kappa": kappa}
        return build_problem(rig, spec, names, series, changed, values, markers, sigma_ref)[0]

    schedule = kappa_schedule(settings)
    lm = lm_settings(settings)
    if warm:
        lm = replace(lm, warmup_iter=0)
    out = solve_continued(at_kappa, X0, theta0, lm, schedule, say, on_iteration)
    return (*out, theta0)


def _marker_list(markers, count: int) -> list:
    if markers is None or isinstance(markers, MarkerObservations):
        return [markers] + [None] * (count - 1)
    marks = list(markers)
    if len(marks) != count:
        raise ValueError(f"{len(marks)} marker sets for {count} series")
    return marks


def _fit(problem: HingedProblem, X, series: dict, cost: float) -> dict:
    return {
        "grid": series["grid"],
        "angles": problem.observed_angles(X),
        "pixels": problem.marker_pixels(X),
        "states": tuple(np.asarray(a) for a in X),
        "cost": cost / len(series["grid"]),
    }


def identify_hinged(spec: RigSpec, rig, data: list[Path], out: Path, console) -> Estimate:
    """``physid identify``: read the logs, ``identify_series``, write estimate.json and fit.png."""
    from physid.rigs.encoders import read_log

    enable_compilation_cache()
    h = method_settings(spec)["h"]
    all_series = []
    for p in data:
        stream = read_log(p, spec)
        refuse_long_gaps(stream, spec, p)
        all_series.append(series_on_grid(stream, rig.channels, h, p))
    estimate, fits = identify_series(
        spec, rig, all_series, progress=console.print, labels=[str(p) for p in data]
    )
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    _plot(out / "fit.png", all_series[0], fits[0]["angles"], rig.channels, spec.name)
    estimate.write(out / "estimate.json")
    return estimate


def _taus(rig) -> dict:
    return {k: v for k, v in rig.values.items() if k.startswith(("tau", "eps"))}


def _plot(path: Path, series, fit, channels, title) -> Path:
    plt = pyplot()
    t = series["grid"] - series["grid"][0]
    fig, axes = plt.subplots(len(channels), 1, figsize=(8, 2.4 * len(channels)), squeeze=False)
    for i, name in enumerate(channels):
        ok = series["present"][:, i]
        y = np.unwrap(series["y"][ok, i])
        f = fit[:, i] + 2 * np.pi * np.round((np.interp(t, t[ok], y) - fit[:, i]) / (2 * np.pi))
        axes[i, 0].plot(t[ok], y, ".", ms=1.5, label="measured")
        axes[i, 0].plot(t, f, lw=0.8, label="fitted")
        axes[i, 0].set_ylabel(f"{name} (rad)")
        axes[i, 0].legend(loc="upper right")
    axes[-1, 0].set_xlabel("t (s)")
    return save_figure(fig, path, f"{title}: measured vs fitted joint angles")
