"""``physid identify`` with ``[method] estimator = "tree"``: joint state and parameter
estimation on generalized coordinates (docs/tree-estimator.md).

Every log of the command line is fitted jointly: one parameter set, states per log, no
dynamics row across a log boundary (Marklund et al., Section 4.5's several time series of one
rig). The weights are the noise levels in physical units: each encoder's σ_y (rad, from the
spec's sensor noise or its quantization) and each joint's process noise σ_w (N m s per step),
by default the impulse per step that moves the joint by σ_y at ``noise_bandwidth`` Hz (see
``default_process_noise``). No κ.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from physid.dynamics import variational_friction as vf
from physid.dynamics.tree import REVOLUTE
from physid.errors import InputError
from physid.estimation.consistency import inertia_lmi
from physid.estimation.estimate import Estimate, Result, Status
from physid.estimation.flags import (
    bound_flags,
    flag_parameters,
    unexcited_by_parameter,
    unexcited_directions,
)
from physid.estimation.initialize import resample, smooth_angles
from physid.estimation.lm import LMSettings, gauss_newton_test, levenberg_marquardt
from physid.estimation.prediction import (
    Channel,
    InitialState,
    Observations,
    free_run,
    k_step_ahead,
)
from physid.estimation.tree_problem import TreeProblem, TreeStructure, compiled
from physid.estimation.uncertainty import parameter_covariance
from physid.estimation.validation import validation
from physid.rigs.models.identify_hinged import (
    BATCHES,
    GN_STEP_STD,
    _consistency_report,
    _consistent_start,
    _flag,
    _prediction_line,
    _status_line,
    check_grid_size,
    fit_status,
    parameter_bounds,
)
from physid.rigs.models.tree_row_weight import ALPHAS, has_dry_friction, refit_at_row_weights
from physid.rigs.models.validate_hinged import FREE_RUN_HORIZON, PREDICTION_HORIZON
from physid.spec import RigSpec
from physid.streams import Stream, held_index

# The default process noise moves a joint by its encoder noise at this frequency (Hz). It is
# the crossover of the estimator read as a smoother (``default_process_noise``): the states
# follow the model below it and the data above it. The fitted values depend on nothing else
# in the default (σ_w ∝ σ_y, so the encoder's noise scales every weight alike). 3 Hz, about
# three times the swing frequencies of the rigs (~1 Hz): measured on data the model
# describes (docs/tree-estimator.md), 10 Hz let the process noise absorb the dampers'
# torque (pendulum b +1.7e-3 with 1e-5 rad noise; 13-parameter Furuta b1 −65 %, not
# identified), while 1 Hz left the step's discretization error at h = 1e-3 s nowhere to go
# (cost per step 2.5× its expectation, J_Azz +3.9 %); at 3 Hz the cost per step is that of
# 10 Hz and every parameter is within a few % (Furuta) and 3e-4 (pendulum).
NOISE_BANDWIDTH_HZ = 3.0


METHOD_KEYS = (
    "estimator", "h", "process_noise", "noise_bandwidth", "max_iter", "eps_g", "eps_delta",
    "eps_f", "lm_tau", "alpha_shrink", "warmup_iter", "physical_consistency",
    "covariance_batches", "prediction_horizon", "free_run_horizon", "step_extrapolation",
    "warm_start",
)  # fmt: skip


def tree_settings(spec: RigSpec) -> dict:
    """[method] settings of the tree estimator (SI): h, the process noise (None: the
    default), its bandwidth, LM tolerances and the iteration limit."""
    from physid.rigs.models.identify_hinged import METHOD_KEYS as SPOOK_KEYS

    # The SPOOK estimator's keys (kappa, eps_fric ...) are accepted and unused, so that a
    # spec switches estimator by one line.
    spec.check_keys("method", (*METHOD_KEYS, *SPOOK_KEYS))
    h = spec.method_value("h", "s", 1e-3)
    if not h > 0:
        raise spec.error("method.h", f"must be positive, got {h:g}")
    bandwidth = spec.method_value("noise_bandwidth", "Hz", NOISE_BANDWIDTH_HZ)
    if not bandwidth > 0:
        raise spec.error("method.noise_bandwidth", f"must be positive, got {bandwidth:g}")
    return {
        "h": h,
        "process_noise": _process_noise_setting(spec),
        "noise_bandwidth": bandwidth,
        "eps_g": spec.method_value("eps_g", "1", LMSettings.eps_g),
        "eps_delta": spec.method_value("eps_delta", "1", LMSettings.eps_delta),
        "eps_f": spec.method_value("eps_f", "1", LMSettings.eps_f),
        "max_iter": int(spec.method_value("max_iter", "1", LMSettings.max_iter)),
        "lm_tau": spec.method_value("lm_tau", "1", 1e-8),
        "alpha_shrink": spec.method_value("alpha_shrink", "1", 0.1),
        "warmup_iter": int(spec.method_value("warmup_iter", "1", 0)),
        "physical_consistency": _flag(spec, "physical_consistency", True),
        # θ0 from the filtered inverse dynamics of the encoder samples
        # (``estimation.tree_warm_start``): 21 → 6 iterations on the 13-parameter Furuta.
        "warm_start": _flag(spec, "warm_start", True),
        "covariance_batches": int(spec.method_value("covariance_batches", "1", BATCHES)),
        # Refit at h/2 and report the order-2 Richardson value (``rigs.models.tree_step``).
        "step_extrapolation": _flag(spec, "step_extrapolation", False),
        "prediction_horizon": spec.method_value("prediction_horizon", "s", PREDICTION_HORIZON),
        "free_run_horizon": spec.method_value("free_run_horizon", "s", FREE_RUN_HORIZON),
    }


def _process_noise_setting(spec: RigSpec):
    """``[method] process_noise``: one value for every joint, or a table by joint name, in
    N m s (N s for a prismatic joint) per step; None when absent (the default)."""
    raw = spec.method.get("process_noise")
    if raw is None:
        return None
    if isinstance(raw, dict) and "value" not in raw:
        return {k: spec.section_value("method", f"process_noise.{k}", "N m s") for k in raw}
    return spec.method_value("process_noise", "N m s", 0.0)


def lm_settings(settings: dict) -> LMSettings:
    return LMSettings(
        eps_g=settings["eps_g"],
        eps_delta=settings["eps_delta"],
        max_iter=settings["max_iter"],
        tau=settings["lm_tau"],
        eps_f=settings["eps_f"],
        alpha_shrink=settings["alpha_shrink"],
        warmup_iter=settings["warmup_iter"],
    )


def problem_lm_settings(problem: TreeProblem, settings: dict, theta0) -> LMSettings:
    """``lm_settings`` for this problem: without the geodesic acceleration where a joint has
    dry friction (at θ0, or once its free parameters move off zero).

    The acceleration's r_vv is a finite difference of the residuals along the step; a step
    across a kink of the friction's natural map (a swing's turning point) makes it huge, so
    every trial is refused and α climbs: on two MuJoCo swings LM crawled for 50 iterations
    (cost/step 1.34, damping +54 %) where the plain Gauss–Newton step at the stop still
    delivered 94 % of the decrease it promised. The acceleration serves SPOOK's stiff
    compliant hinges (curvature 1/ε); the tree has none."""
    base = lm_settings(settings)
    theta0 = np.asarray(theta0, float)
    probes = (theta0, theta0 + 1.0)  # θ is scaled (χ = scale·θ): 1 is a typical size
    limits = [
        vf.dry_friction_limit(problem.params(th), jnp.zeros(problem.structure.n)) for th in probes
    ]
    if any(bool(jnp.any(lim > 0)) for lim in limits):
        return replace(base, geodesic_ratio=None)
    return base


# ------------------------------------------------------------------ data on the grid


def series_on_grid(stream: Stream, rig, h: float, path) -> dict:
    """One log on the estimator grid t_0 + k h: observations y[n, k] (the sample nearest each
    grid point within h/2, else weight 0), filtered angles for the initial states, and the
    inputs u[n−1, n_act] held from the last sample at or before each step. A log with a
    non-zero input for a rig without actuators is refused."""
    for c in rig.channels:
        if c not in stream.channels:
            raise InputError(
                f"{path}: no channel {c!r} for the rig's encoder (has {', '.join(stream.channels)})"
            )
    t = np.asarray(stream.t, float)
    cols = [stream.channels.index(c) for c in rig.channels]
    angles = np.asarray(stream.values[:, cols], float)
    missing = np.asarray(stream.missing[:, cols], bool) | ~np.isfinite(angles)
    n = int(np.floor((t[-1] - t[0]) / h + 1e-9)) + 1
    if n < 3:
        raise InputError(f"{path}: {t[-1] - t[0]:.3g} s of data is too short for h = {h:g} s")
    # The SPOOK path's bound, before anything is allocated (a sanity bound against absurd
    # grids: the tree needs less per step, docs/tree-estimator.md, "Measured").
    check_grid_size(n, h, t[-1] - t[0], len(rig.channels), path)
    grid = t[0] + h * np.arange(n)
    idx = np.clip(np.searchsorted(t, grid), 1, len(t) - 1)
    idx = np.where(np.abs(t[idx - 1] - grid) <= np.abs(t[idx] - grid), idx - 1, idx)
    near = np.abs(t[idx] - grid) <= 0.5 * h + 1e-12
    present = near[:, None] & ~missing[idx]
    filled = angles.copy()
    for i in range(angles.shape[1]):
        ok = ~missing[:, i]
        if ok.sum() < 2:
            raise InputError(f"{path}: channel {rig.channels[i]!r} has fewer than two samples")
        filled[:, i] = np.interp(t, t[ok], angles[ok, i])
    smooth = resample(t, smooth_angles(t, np.unwrap(filled, axis=0)), grid)
    hold = held_index(t, grid[:-1])
    u = np.zeros((n - 1, len(rig.inputs)))
    for k, column in enumerate(rig.inputs):
        if column not in stream.channels:
            raise InputError(
                f"{path}: no input column {column!r} for actuator "
                f"{rig.tree.actuator_names[k]!r} (has {', '.join(stream.channels)})"
            )
        values = np.nan_to_num(np.asarray(stream.values[:, stream.channels.index(column)], float))
        u[:, k] = values[hold]
    if not rig.inputs and "u" in stream.channels:
        values = np.nan_to_num(np.asarray(stream.values[:, stream.channels.index("u")], float))
        if np.any(values != 0):
            first = int(np.flatnonzero(values)[0])
            raise InputError(
                f"{path}: column 'u' is {values[first]:g} at t = {t[first]:.6g} s, but the rig "
                "has no actuator to take an input; describe the actuator in the rig (or log "
                "u = 0 for an undriven rig)"
            )
    y = np.where(present, angles[idx], 0.0)
    return {"grid": grid, "y": y, "present": present, "init": smooth, "u": u}


# ------------------------------------------------------------------ the problem


def default_process_noise(c: np.ndarray, sigma_y: float, h: float, bandwidth: float):
    """σ_w [n] (N m s per step): the impulse per step h of the torque c (2π f)² σ_y that moves
    a joint of inertia c (its diagonal of M) by the encoder noise σ_y at f = ``bandwidth``.

    Read as a smoother (a free inertia c, a random impulse of std σ_w per step, positions
    measured with std σ_y): its crossover is ω = (σ_w / (c σ_y h))^½ = 2π f, the frequency
    below which the estimated states follow the model and above which they follow the data.
    The encoder's noise scales the dynamics and the observation weights alike, so the fitted
    values depend on f only (and the reported std on σ_y)."""
    return (2 * np.pi * bandwidth) ** 2 * np.asarray(c) * sigma_y * h


def parameter_scale(spec: RigSpec, names) -> np.ndarray:
    from physid.rigs.models.identify_hinged import parameter_scale as scale

    return scale(spec, names)


def build_problem(
    rig, spec: RigSpec, names, series_list, settings, values=None, markers=None, weights=None
):
    """The ``TreeProblem`` of the logs ``series_list`` (one chain, segments per log), its
    initial states, θ0, and what the weights were made of (dict). ``markers``: None, or one
    ``MarkerObservations`` (or None) per series, on that series' grid: pixel rows fused with
    the encoders (a marker video of some of the logs). ``weights``: None (σ_w and the
    natural map's inertia c from ``values``, as an identification makes them), or an
    identification's record of them (``recorded_weights``), used as they are."""
    names = tuple(names)
    h = settings["h"]
    vals = dict(rig.values)
    vals.update(values or {})
    ps = spec.parameters
    scale = parameter_scale(spec, names) if names else np.zeros(0)
    lower = np.array([ps[k].lower for k in names]) / scale if names else np.zeros(0)
    upper = np.array([ps[k].upper for k in names]) / scale if names else np.zeros(0)
    theta0 = np.array([vals[k] for k in names]) / scale if names else np.zeros(0)
    chain_markers = _chain_markers(markers, series_list)
    cam = None if chain_markers is None else (chain_markers.model, chain_markers.body)
    structure = TreeStructure(rig.tree, rig.make_params, names, float(h), rig.observed, cam)
    q0 = np.concatenate([_initial_positions(rig, s) for s in series_list])
    starts = np.zeros(len(q0), bool)
    starts[np.cumsum([0] + [len(s["grid"]) for s in series_list[:-1]])] = True
    if weights is None:
        c = joint_inertia(structure, vals, q0)
        sigma_y = float(np.min(rig.sensor_noise))
        sigma_w = _process_noise(rig, settings, c, sigma_y, h)
    else:
        c, sigma_w = _given_weights(rig, weights)
    wd = np.tile(np.sqrt(2.0) / np.concatenate([sigma_w, sigma_w]), (len(q0) - 1, 1))
    wd[starts[1:]] = 0.0  # no dynamics across a log boundary
    y = np.concatenate([s["y"] for s in series_list])
    wo = np.concatenate([s["present"] for s in series_list]) / rig.sensor_noise[None, :]
    u = np.concatenate(
        [np.concatenate([s["u"], np.zeros((1, s["u"].shape[1]))]) for s in series_list]
    )[:-1]
    lmi = None
    if rig.bodies is not None and names and settings["physical_consistency"]:
        try:
            lmi = inertia_lmi(rig.bodies, vals, names, scale, theta0)
        except ValueError:
            lmi = None  # a free mass or centre of mass: P is not affine in θ (not enforced)
    fixed = {k: v for k, v in vals.items() if k not in names}
    problem = TreeProblem(
        structure, fixed, scale, lower, upper, y, wo, u, wd, c, lmi, chain_markers
    )
    X0 = problem.initial_states(q0, np.clip(theta0, lower, upper), starts)
    info = {
        "process_noise": dict(zip(rig.tree.dof_names, sigma_w.tolist(), strict=True)),
        "process_noise_default": settings["process_noise"] is None and weights is None,
        "sensor_noise": dict(zip(rig.channels, rig.sensor_noise.tolist(), strict=True)),
        "natural_map_inertia": dict(zip(rig.tree.dof_names, c.tolist(), strict=True)),
        "segments": [int(len(s["grid"])) for s in series_list],
    }
    if chain_markers is not None:
        info["marker_noise_px"] = float(1 / np.sqrt(np.max(chain_markers.weight)))
    return problem, X0, theta0, info


def _chain_markers(markers, series_list):
    """One ``MarkerObservations`` over the chain of logs (weight 0 on the logs without), or
    None when no log has markers."""
    from physid.estimation.markers import MarkerObservations

    if markers is None:
        return None
    if isinstance(markers, MarkerObservations):
        markers = [markers] + [None] * (len(series_list) - 1)
    if len(markers) != len(series_list):
        raise ValueError(f"{len(markers)} marker sets for {len(series_list)} logs")
    given = [mk for mk in markers if mk is not None]
    if not given:
        return None
    first = given[0]
    if any((mk.model, mk.body) != (first.model, first.body) for mk in given):
        raise ValueError("the logs' marker observations differ in camera model or markers")
    if any(
        not (np.array_equal(mk.R_cw, first.R_cw) and np.array_equal(mk.t_cw, first.t_cw))
        for mk in given
    ):
        raise ValueError("the tree estimator fuses one camera pose; the logs' poses differ")
    uv, weight = [], []
    for mk, s in zip(markers, series_list, strict=True):
        n = len(s["grid"])
        if mk is None:
            uv.append(np.zeros((n, first.m, 2)))
            weight.append(np.zeros((n, first.m)))
        elif mk.uv.shape[0] != n:
            raise ValueError(f"markers cover {mk.uv.shape[0]} grid steps, the log {n}")
        else:
            uv.append(mk.uv)
            weight.append(mk.weight)
    return MarkerObservations(
        first.body, first.points, first.K, first.D, first.R_cw, first.t_cw,
        np.concatenate(uv), np.concatenate(weight), first.model,
    )  # fmt: skip


def joint_inertia(structure: TreeStructure, values: dict, q: np.ndarray) -> np.ndarray:
    """Median over the positions q [N, n] of each joint's diagonal of M at ``values`` (kg m²
    or kg): the natural map's inertia and the scale of the default process noise."""
    import jax.numpy as jnp

    args = {"values": {k: jnp.asarray(float(v)) for k, v in values.items()},
            "scale": jnp.ones(len(structure.names))}  # fmt: skip
    theta = jnp.asarray([float(values[k]) for k in structure.names])
    return np.asarray(compiled(structure).joint_inertia(jnp.asarray(q, float), theta, args))


def _initial_positions(rig, series: dict) -> np.ndarray:
    """q [n, n_dof] of a log: the filtered angles for observed joints, 0 for the others."""
    q = np.zeros((len(series["grid"]), rig.tree.n_dof))
    for i, j in enumerate(rig.observed):
        q[:, j] = series["init"][:, i]
    return q


def recorded_weights(settings: dict, extra: dict) -> dict | None:
    """What a tree identification weighted its rows with, from its estimate.json's
    ``settings`` and ``extra``: {"process_noise": σ_w, "natural_map_inertia": c}, each by
    joint name; None for an estimate that records no σ_w (another estimator's)."""
    if "process_noise" not in settings or "natural_map_inertia" not in extra:
        return None
    return {
        "process_noise": dict(settings["process_noise"]),
        "natural_map_inertia": dict(extra["natural_map_inertia"]),
    }


def _given_weights(rig, weights: dict) -> tuple[np.ndarray, np.ndarray]:
    """(c, σ_w) [n] in the rig's joint order from ``recorded_weights``' record."""
    names = rig.tree.dof_names
    out = []
    for key in ("natural_map_inertia", "process_noise"):
        given = weights[key]
        if set(given) != set(names):
            raise ValueError(
                f"the recorded {key} names joints {sorted(given)}, the rig {sorted(names)}"
            )
        out.append(np.array([float(given[k]) for k in names]))
    return out[0], out[1]


def _process_noise(rig, settings, c, sigma_y, h) -> np.ndarray:
    given = settings["process_noise"]
    if given is None:
        return default_process_noise(c, sigma_y, h, settings["noise_bandwidth"])
    if isinstance(given, dict):
        names = rig.tree.dof_names
        unknown = set(given) - set(names)
        if unknown:
            raise InputError(
                f"[method] process_noise names {sorted(unknown)}, not joints of the rig; "
                f"joints: {', '.join(names)}"
            )
        default = default_process_noise(c, sigma_y, h, settings["noise_bandwidth"])
        return np.array([given.get(k, default[j]) for j, k in enumerate(names)])
    if not given > 0:
        raise InputError(f"[method] process_noise must be positive, got {given:g}")
    return np.full(rig.tree.n_dof, float(given))


# ------------------------------------------------------------------ identify

ESTIMATORS = ("tree", "spook")


def tree_rig_of(spec: RigSpec):
    """The ``FitRig`` of a spec: a ``model = "tree"`` rig, or the pendulum / Furuta on rigid
    joints."""
    if spec.model == "tree":
        from physid.rigs.models.tree.rig import load_tree_rig
        from physid.rigs.models.tree_rig import from_tree_rig

        return from_tree_rig(load_tree_rig(spec))
    from physid.rigs.models.kinds import kind_module

    return kind_module(spec).tree_rig(spec)


def estimator(spec: RigSpec) -> str:
    """``[method] estimator``: "tree" (generalized coordinates: the default of every hinged
    rig, the pendulum and Furuta specs included, and the only one of a ``model = "tree"``
    rig) or "spook" (Marklund et al.'s LM on maximal coordinates, the paper's reference,
    chosen per spec)."""
    value = spec.method.get("estimator", "tree")
    if spec.model == "tree" and value != "tree":
        raise spec.error(
            "method.estimator", 'a model = "tree" rig is identified by estimator = "tree" only'
        )
    if value not in ESTIMATORS:
        raise spec.error(
            "method.estimator", f"{value!r} is not an estimator; one of {', '.join(ESTIMATORS)}"
        )
    return str(value)


def identify_tree_series(
    spec: RigSpec,
    rig,
    series_list: list[dict],
    progress: Callable[[str], None] | None = None,
    labels: list[str] | None = None,
    markers=None,
) -> tuple[Estimate, list[dict]]:
    """Identify ``spec.parameters`` from every series jointly. No file I/O. Returns the
    ``Estimate`` (with its fit status, parameter flags, prediction checks and verdict) and
    per series a dict with ``grid`` (s), fitted ``angles[n, k]``, ``states``, ``cost``
    (weighted squared residual per step of that series) and, where the series has markers,
    the fitted ``pixels[n, m, 2]``. ``markers``: None, one ``MarkerObservations`` for the
    first series, or one (or None) per series (``build_problem``)."""
    say = progress or (lambda _line: None)
    settings = tree_settings(spec)
    names = list(spec.parameters)
    labels = labels or [f"series {i}" for i in range(len(series_list))]
    start = time.perf_counter()
    problem, X0, theta0, info = build_problem(
        rig, spec, names, series_list, settings, markers=markers
    )
    n_total = len(problem.y)
    say(
        f"identifying {', '.join(names)} from {len(series_list)} log(s), {n_total} steps of "
        f"{settings['h']:g} s"
    )
    kind = "default" if info["process_noise_default"] else "[method] process_noise"
    say(
        f"  process noise σ_w per step ({kind}): "
        + ", ".join(f"{k} {v:.3g} N m s" for k, v in info["process_noise"].items())
        + "; encoder noise "
        + ", ".join(f"{k} {v:.3g} rad" for k, v in info["sensor_noise"].items())
        + (
            f"; markers {info['marker_noise_px']:.3g} px"
            f" ({int(np.sum(problem.markers.weight > 0))} marker samples)"
            if "marker_noise_px" in info
            else ""
        )
    )
    theta0 = _consistent_start(spec, problem, theta0, say)
    cold = X0, theta0

    def start_of(p, say=say):
        """(X0, θ0) of the problem p: the warm start's where it is on."""
        if settings["warm_start"]:
            return _warm_start(p, *cold, names, n_total, say)
        return cold

    starts = [("warm start", *start_of(problem))]
    if settings["warm_start"]:
        quiet = lambda _: None  # noqa: E731
        kept_edges = _warm_start(problem, *cold, names, n_total, quiet, edge_periods=0.0)
        starts += [("spec values", *cold), ("warm start with its edge rows", *kept_edges)]
    res, theta0, guard, (white, status) = fit_guarded(
        problem, starts, settings, names, n_total, say
    )
    values = res.theta * problem.scale
    say(f"LM {res.reason} after {res.iterations} iterations, {time.perf_counter() - start:.1f} s")
    say(f"  {_status_line(status)}")
    row_weight, row_extra = None, {}
    if not status.converged and names and has_dry_friction(problem, res.theta):
        say(f"  the dry friction at α = ½ did not converge: fits at α = {ALPHAS}, extrapolated")
        row_weight = refit_at_row_weights(
            rig, problem, series_list, lambda p: start_of(p, lambda _: None),
            lambda p, r: np.asarray(parameter_bounds(p, r.theta)) != "",
            lambda p, X, th: fit(p, X, th, settings, names, n_total, lambda _: None),
            lambda p, r: tree_fit_status(p, r, fitted_covariance(p, r)),
            say,
        )  # fmt: skip
    if row_weight is not None:
        row_extra = _row_weight_extra(names, res, status, values, row_weight)
        problem, res, status = row_weight.problem, row_weight.result, row_weight.status
        values = row_weight.values
        white = fitted_covariance(problem, res)
        say(f"  {_status_line(status)}")
    cov = fitted_covariance(problem, res, settings["covariance_batches"])
    directions = unexcited_directions(names, cov.directions, cov.singular_values)
    bounds = parameter_bounds(problem, res.theta)
    box = np.isin(bounds, ("lower", "upper"))
    released = (
        fitted_covariance(problem, res, settings["covariance_batches"], hold_bounds=False).std
        if box.any()
        else np.full(len(names), np.nan)
    )
    reported, std, step_extra = values, cov.std, {}
    if row_weight is not None:
        std = np.sqrt(cov.std**2 + row_weight.noise_increment + row_weight.remainder_std**2)
    if settings["step_extrapolation"] and names and status.converged and row_weight is None:
        from physid.rigs.models.tree_step import refit_at_half_step

        def refit_with(halved, half_settings, start):
            from physid.estimation.step_bias import halve_markers

            refit, X0, theta0, _ = build_problem(
                rig, spec, names, halved, half_settings, values=start,
                markers=halve_markers(markers),
            )  # fmt: skip
            refit_res = fit(refit, X0, theta0, half_settings, names, len(refit.y), lambda _: None)
            return (
                refit,
                refit_res,
                tree_fit_status(refit, refit_res, fitted_covariance(refit, refit_res)),
            )

        step = refit_at_half_step(
            rig, problem, res, series_list, _segment_fits(problem, res, series_list),
            settings, np.asarray(bounds) != "", refit_with, say,
        )  # fmt: skip
        reported = step.values
        std = np.sqrt(cov.std**2 + step.noise_increment + step.step_std**2)
        step_extra = {
            key: dict(zip(names, np.asarray(a, float).tolist(), strict=True))
            for key, a in (
                ("values_at_step", values),
                ("values_at_half_step", step.values_at_half_step),
                ("discretization_error", step.step_std),
                ("extrapolation_noise", np.sqrt(step.noise_increment)),
                ("std_linearized", cov.std),
            )
        }
        step_extra["step_extrapolated"] = dict(zip(names, step.extrapolated.tolist(), strict=True))
        step_extra["half_step_status"] = step.status.to_dict()
    parameters = flag_parameters(
        names, reported, std, rig.parameter_units, status,
        magnitude=np.maximum(np.abs(reported), np.abs(problem.scale)),
        at_bound=bounds,
        unexcited=unexcited_by_parameter(directions),
        released_std=np.where(box, released, np.nan),
    )  # fmt: skip
    fits = _segment_fits(problem, res, series_list)
    fitted = {k: float(values[i]) for i, k in enumerate(names)}
    predictions, origins = [], []
    for label, s, f in zip(labels, series_list, fits, strict=True):
        more = predict(rig, fitted, s, f["states"], settings, label, problem.c)
        predictions += more
        origins += [float(s["grid"][0])] * len(more)
    for p in predictions:
        say(f"  {_prediction_line(p)}")
    covers = (
        "The std is linearized (Marklund et al. (3.31)) with the residuals' own covariance and "
        f"overlapping batch means over windows of 1/{settings['covariance_batches']} of the "
        "record, which count residuals correlated in time, as the step's model error "
        f"(h = {settings['h']:g} s) leaves them, expanded by t_0.975(ν_eff)/1.96 for the batch "
        "means' degrees of freedom (std_dof), so that ±2 std is a 95 % interval (calibrated on "
        "simulated rigs fitted at a coarser step than their data: docs/validation.md). "
    )
    if row_extra:
        covers += (
            "The fit at the dry friction's row weight α = ½ did not converge (a joint that "
            "sticks), so the values are extrapolated linearly in α from converged fits at "
            f"α = {ALPHAS[0]:g} and {ALPHAS[1]:g}, with the extrapolation's noise and its "
            "remainder in the std. "
        )
    if step_extra:
        covers += (
            "The values are extrapolated from a refit at h/2 (Richardson, order 2), with the "
            "extrapolation's noise and its remainder in the std. "
        )
    covers += (
        "It does not cover errors of the fixed values, or of the model's form beyond what the "
        "residuals show."
    )
    residuals = encoder_residual_report(rig, series_list[0], fits[0])
    checked = validation(status, predictions, parameters, residuals, covers)
    say(f"verdict: {checked['summary']}")
    estimate = Estimate(
        rig=spec.name,
        solver=(
            "levenberg-marquardt on generalized coordinates (forced discrete Euler–Lagrange "
            "residuals, exact dry friction, banded arrow solve)"
        ),
        parameters=parameters,
        cost=res.cost / n_total,
        iterations=res.iterations,
        converged=status.converged,
        history=[c / n_total for c in res.history],
        settings={
            **{k: v for k, v in settings.items() if k != "process_noise"},
            "estimator": "tree",
            "logs": list(labels),
            "process_noise": info["process_noise"],
            "process_noise_default": info["process_noise_default"],
            "sensor_noise": info["sensor_noise"],
            **({"marker_noise_px": info["marker_noise_px"]} if "marker_noise_px" in info else {}),
        },
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
            "warmup_iterations": res.warmup_iterations,
            **({"start_guard": guard} if guard else {}),
            "natural_map_inertia": info["natural_map_inertia"],
            "segments": info["segments"],
            "costs_per_log": [f["cost"] for f in fits],
            "consistency": _consistency_report(problem, res, cov, theta0),
            "std_linearized_white": dict(zip(names, white.std.tolist(), strict=True)),
            "std_dof": dict(zip(names, cov.dof.tolist(), strict=True)),
            "std_coverage_factor": dict(zip(names, cov.coverage_factor.tolist(), strict=True)),
            **step_extra,
            **row_extra,
            "prediction_series": [p.series(t0) for p, t0 in zip(predictions, origins, strict=True)],
        },
        status=status.to_dict(),
        validation=checked,
    )
    return estimate, fits


def _row_weight_extra(names, res, status, values, row_weight) -> dict:
    """estimate.json's record of the extrapolation in the friction's row weight α: why (the
    fit at α = ½ and its status), the values at each α, what the std adds."""

    def per(a):
        return dict(zip(names, np.asarray(a, float).tolist(), strict=True))

    return {
        "friction_row_weight": {
            "reason": f"the fit at α = 0.5 did not converge ({status.result.value})",
            "status_at_half": status.to_dict(),
            "iterations_at_half": res.iterations,
            "values_at_half": per(values),
            "alphas": list(ALPHAS),
            "values_at": [per(v) for v in row_weight.values_at],
            "extrapolated": dict(zip(names, row_weight.extrapolated.tolist(), strict=True)),
            "remainder_std": per(row_weight.remainder_std),
            "extrapolation_noise": per(np.sqrt(row_weight.noise_increment)),
        }
    }


def fit_guarded(problem: TreeProblem, starts, settings: dict, names, n_total: int, say):
    """(LMResult, θ0 it started from, record or None, (white covariance, Status) of the kept
    fit: ``fitted_covariance`` and ``tree_fit_status``, computed once per fit): LM from each
    distinct start of
    ``starts`` [(label, X0, θ0)], the first one's iterations said; kept: the converged fit of
    lowest cost (the earliest on a tie within ``GUARD_TIE``; the first fit if none converged).
    The starts: the warm start, the spec's values (momenta chained there), and the warm start
    with the low-pass's edge rows kept (the start before 2026-11-26); one that was not used
    is the spec's values again and runs once.

    Why several: the cost is piecewise smooth (a joint's dry friction slides or sticks at
    each step), and the start's states fix which steps stick. The warm start's momenta,
    chained at its θ, can make a swing's turning point stick, and LM then settles at the
    local minimum in which that step sticks: 2 of 50 one-motion and 19 of 100 motions
    coverage datasets, up to 4 % of the cost above the minimum another start reaches (seed
    44: one step, 836 of 1501, sticking; on the straight line between the two ends the cost
    rises 1.7 % above the higher one, so these are separate minima, not a stall). No one
    start was best on every dataset (docs/validation.md, "The diagonal, and the stalled fits
    ..."): with all three the fit is never worse than from the start used before, and the
    extra LM runs reuse the compiled problem (docs/benchmarks.md: their CPU cost)."""
    distinct = []
    for label, X, theta in starts:
        if not any(np.array_equal(theta, t) and X is x for _, x, t in distinct):
            distinct.append((label, X, theta))
    first = fit(problem, *distinct[0][1:], settings, names, n_total, say)
    fits = [first] + [
        fit(problem, X, theta, settings, names, n_total, lambda _: None)
        for _, X, theta in distinct[1:]
    ]
    whites = [fitted_covariance(problem, r) for r in fits]
    checked = [(w, tree_fit_status(problem, r, w)) for r, w in zip(fits, whites, strict=True)]
    if len(distinct) == 1:
        return first, distinct[0][2], None, checked[0]
    converged = [status.converged for _, status in checked]
    best = 0
    if any(converged):
        low = min(r.cost for r, ok in zip(fits, converged, strict=True) if ok)
        best = next(
            i for i, (r, ok) in enumerate(zip(fits, converged, strict=True))
            if ok and r.cost <= low * (1 + GUARD_TIE)
        )  # fmt: skip
    said = "; ".join(
        f"{label} {r.cost / n_total:.6g} ({r.iterations} it{'' if ok else ', not converged'})"
        for (label, _, _), r, ok in zip(distinct, fits, converged, strict=True)
    )
    kept = distinct[best][0]
    say(f"  guard: LM from {len(fits)} starts, cost/step {said}: kept the fit from the {kept}")
    record = {
        "kept": kept,
        "starts": [
            {"start": label, "cost": r.cost / n_total, "iterations": r.iterations,
             "converged": ok}
            for (label, _, _), r, ok in zip(distinct, fits, converged, strict=True)
        ],
    }  # fmt: skip
    return fits[best], distinct[best][2], record, checked[best]


# Relative cost difference below which two LM ends count as the same minimum (``fit_guarded``).
GUARD_TIE = 1e-9


def _warm_start(problem: TreeProblem, X0, theta0, names, n_total: int, say, **options):
    """(X0, θ0) from ``estimation.tree_warm_start.tree_start`` (``options``: its own), said
    in one line."""
    from physid.estimation.tree_warm_start import tree_start

    start = tree_start(problem, X0, theta0, **options)
    if start.regression is None:
        say("  warm start: skipped (a joint without encoder samples in every log)")
        return X0, theta0
    shown = ", ".join(
        f"{k}={v:.4g}" for k, v in zip(names, start.theta * problem.scale, strict=True)
    )
    costs = f"cost/step {start.cost_given / n_total:.4e} → {start.cost_warm / n_total:.4e}"
    if not start.used:
        say(f"  warm start (filtered inverse dynamics) not used: {costs}")
        return X0, theta0
    say(f"  warm start (filtered inverse dynamics): {costs}; {shown}")
    return start.X, start.theta


def estimate_states(spec: RigSpec, rig, series: dict, values: dict, weights: dict | None = None):
    """Cross-validation (Marklund et al., Section 4.5) on the tree: only the states of
    ``series`` are estimated, every parameter held at ``values`` (SI, tuned on another
    experiment). Returns (problem, LMResult); the cost per step is ``result.cost / len(grid)``.

    ``weights``: the log's own identification's σ_w and c (``recorded_weights``), so that
    its rows weigh what they weighed there. The default σ_w and c scale with the joint's
    inertia at the values a problem is built at: the spec's initial values in an
    identification, ``values`` here without a record. On the pipeline tests' 1.5 s
    pendulum (J initial 0.005, fitted 0.0039: c 0.00862 against 0.00752) its own
    parameters re-estimated its states at a cost per step 0.085 % above its
    identification's with c at ``values``, and equal to it (0.000 %) with the record."""
    settings = tree_settings(spec)
    problem, X0, theta0, _ = build_problem(
        rig, spec, (), [series], settings, values=values, weights=weights
    )
    lm = problem_lm_settings(problem, settings, theta0)
    return problem, levenberg_marquardt(problem, X0, theta0, lm)


def encoder_residual_report(rig, series: dict, fit: dict) -> dict:
    """``estimation.residuals.residual_checks`` of the first log's encoder rows (measured −
    fitted angle, wrapped at a turn) against the data's own noise, as the SPOOK path reports
    them (the report's residual table; the verdict does not read it). The dynamics rows are
    left out: their level is the process noise the fit assumed, not a measured one."""
    from physid.estimation.residuals import residual_checks

    chans = channels(rig)
    resid = np.asarray(series["y"], float) - np.asarray(fit["angles"], float)
    for i, c in enumerate(chans):
        if c.period:
            resid[:, i] = (resid[:, i] + 0.5 * c.period) % c.period - 0.5 * c.period
    return residual_checks(resid, series["present"], series["y"], chans)


def fit(problem: TreeProblem, X0, theta0, settings: dict, names, n_total: int, say):
    """The LM run (``estimation.lm``) with one progress line per iteration."""
    scale = problem.scale

    def on_iteration(it, cost, alpha, theta):
        shown = ", ".join(f"{k}={v:.6g}" for k, v in zip(names, theta * scale, strict=True))
        say(f"  iteration {it:3d}  cost/step {cost / n_total:.4e}  α {alpha:.2e}  {shown}")

    return levenberg_marquardt(
        problem, X0, theta0, problem_lm_settings(problem, settings, theta0), on_iteration
    )


# Fractions of the Gauss–Newton step tried on the actual cost by ``tree_fit_status``.
GN_LINE_SEARCH = 0.5 ** np.arange(11)


def tree_fit_status(problem: TreeProblem, result, cov) -> Status:
    """``identify_hinged.fit_status``, with the Gauss–Newton step checked on the actual cost
    where its linear model fails the test.

    The residual is piecewise smooth: a joint's dry friction switches between sliding and
    sticking where a step's v̄ crosses the natural map's kink (the turning points of a swing).
    At a minimum that lies on such a kink the linearization of one side promises a decrease
    that no step delivers: LM raises α until the relative decrease falls below ε_f, and the
    plain test would call that point stalled although no direction the test proposes lowers
    the cost. So the step is tried on the cost at t = 1, ½, … 2⁻¹⁰; the test is then what the
    best of these steps really moves (none that lowers the cost: 0). A smooth problem near its
    minimum realizes the full step (t = 1) and is judged exactly as before."""
    status = fit_status(problem, result, cov)
    if status.converged or not len(result.theta):
        return status
    gn = gauss_newton_test(problem, result.X, result.theta, result.lin)
    cost0 = problem.cost(result.X, result.theta)
    best_t, best = 0.0, cost0
    for t in GN_LINE_SEARCH:
        theta = np.clip(result.theta + t * gn.dtheta, problem.lower, problem.upper)
        cost = problem.cost(problem.retract(result.X, t * gn.dX), theta)
        # A decrease below 1e-12 of the cost is round-off of the sum, not a step.
        if cost < best and cost < cost0 * (1 - 1e-12):
            best_t, best = float(t), cost
    step = best_t * np.abs(gn.dtheta * problem.scale)
    ok = np.isfinite(cov.std) & (cov.std > 0)
    worst = float(np.max(step[ok] / cov.std[ok], initial=0.0))
    if worst > GN_STEP_STD:
        return status
    test = (
        f"Gauss–Newton test on the actual cost: its linear model promises "
        f"{gn.decrease / max(cost0, 1e-300):.2g} of the cost, a kink of the dry friction's "
        f"natural map; tried at ½ⁱ of its length, the best step (t = {best_t:.3g}) lowers the "
        f"cost by {(cost0 - best) / max(cost0, 1e-300):.2g} of itself and moves no parameter "
        f"by more than {worst:.2g} of its std (passes at ≤ {GN_STEP_STD:g})"
    )
    return Status(Result.successful, result.reason, test)


def _segment_fits(problem: TreeProblem, res, series_list) -> list[dict]:
    fits, offset = [], 0
    X = np.asarray(res.X)
    n = problem.structure.n
    observed = list(problem.structure.observed)
    dyn, obs, _ = problem.residuals(res.X, res.theta)
    pixels = problem.marker_pixels(res.X, res.theta)
    for s in series_list:
        m = len(s["grid"])
        cost = float(np.sum(obs[offset : offset + m] ** 2))
        cost += float(np.sum(dyn[offset : offset + m - 1] ** 2))
        states = X[offset : offset + m]
        fits.append(
            {"grid": s["grid"], "angles": states[:, :n][:, observed], "states": states,
             "cost": cost / m}
        )  # fmt: skip
        if pixels is not None and np.any(problem.markers.weight[offset : offset + m] > 0):
            fits[-1]["pixels"] = pixels[offset : offset + m]
        offset += m
    return fits


def fitted_covariance(
    problem: TreeProblem, result, batches: int | None = None, hold_bounds: bool = True
):
    """(3.31) at the solution, conditional on the box bounds and the consistency faces it
    lies on (as ``identify_hinged.fitted_covariance``). ``hold_bounds=False``: the box bounds
    released (a parameter on its bound gets the std it would have inside: the one-sided
    interval [bound, bound + k std] of ``ParameterEstimate.released_std``)."""
    bounds = bound_flags(result.theta, problem.lower, problem.upper, np.ones(len(result.theta)))
    if not hold_bounds:
        bounds = np.full(len(result.theta), "")
    lmi, values = problem.consistency, result.theta * problem.scale
    # Overlapping batch means, the std expanded by t_0.975(ν_eff)/1.96 (issue 24's coverage
    # study, docs/validation.md); without batches ν_eff is infinite and nothing changes.
    kw = {"batches": batches, "overlapping": True, "expanded": True}
    if lmi is None:
        return parameter_covariance(result.lin, problem.scale, values, bounds, **kw)
    rows = lmi.active_rows(result.theta)
    cov = parameter_covariance(result.lin, problem.scale, values, bounds, rows, **kw)
    return replace(cov, on_consistency_face=lmi.on_face(result.theta))


# ------------------------------------------------------------------ prediction checks


def channels(rig) -> tuple[Channel, ...]:
    """The encoder channels for the prediction checks (angles wrap at a turn)."""
    wraps = [rig.tree.joint_types[rig.tree.dof_bodies[j]] == REVOLUTE for j in rig.observed]
    return tuple(
        Channel(c, "rad" if w else "m", float(s), 2 * np.pi if w else None)
        for c, s, w in zip(rig.channels, rig.sensor_noise, wraps, strict=True)
    )


def predict(rig, values: dict, series: dict, states, settings: dict, label: str, c) -> list:
    """k-step-ahead and free-run checks (``estimation.prediction``) of the rig with the SI
    ``values`` on ``series``, from the estimated states [n, 2 n_dof] (``c``: the natural
    map's inertia per joint, as in the fit): the identified model
    simulated by the integrator the estimator's residual is the equation of
    (``variational_friction.rollout``), with the recorded inputs."""
    h = settings["h"]
    chans = channels(rig)
    obs = Observations(series["grid"], series["y"], series["present"])
    n = len(obs.t)
    k = max(1, min(int(round(settings.get("prediction_horizon", PREDICTION_HORIZON) / h)), n - 1))
    sim, start_state = simulator(rig, values, h, series["u"], c)
    states = np.asarray(states)
    ahead = k_step_ahead(sim, lambda steps: states[steps], obs, chans, k, label)
    horizon = int(round(settings.get("free_run_horizon", FREE_RUN_HORIZON) / h))
    q01 = states[:2, : rig.tree.n_dof].reshape(-1)
    initial = InitialState(q01, start_state, step=1e-7)
    free = free_run(sim, initial, obs, chans, 2 * k, label, horizon)
    return [ahead, free]


# The prediction checks simulate through ONE compiled program of a fixed shape: a batch of
# ROLLOUT_BATCH states advanced ROLLOUT_CHUNK steps. A longer window carries its state from
# chunk to chunk, a larger batch is split, a smaller one padded with copies of its first
# state (which converge in the same Newton iterations). The k-step windows, the free run's
# initial-state refinement and the free run itself share it: with one program per padded
# shape they traced the vmapped scan of the Newton step four times (and ``start`` twice),
# ~10 s CPU each even where JAX's persistent cache held the compiled code, and compiled it
# four times on a cold cache (~35 s CPU each; MuJoCo Furuta capture, docs/benchmarks.md).
# 8 × 128: the batch of the refinement (p + 1 = 5 states for two joints) in one call, and a
# k-step window of 0.1 s at h = 1 ms in one chunk; the 10 s free run takes 79 calls.
ROLLOUT_BATCH = 8
ROLLOUT_CHUNK = 128


@functools.lru_cache(maxsize=8)
def _rollout(tree, make_params, observed: tuple, h: float):
    """Jitted batched rollout of ``ROLLOUT_CHUNK`` steps: (values, x0[B, 2n],
    u[B, ROLLOUT_CHUNK, n_act], c) → (q_obs[B, ROLLOUT_CHUNK + 1, n_obs], x_last[B, 2n]);
    and the jitted batched start (values, z[B, 2n], c) → x0[B, 2n]."""
    from physid.dynamics import variational_friction as vf

    n, obs = tree.n_dof, np.asarray(observed, int)

    def one(values, x0, u, c):
        params = make_params(values)

        def step(x, uk):
            q1, p1 = vf.step(tree, params, x[:n], x[n:], uk, h, c)
            x1 = jnp.concatenate([q1, p1])
            return x1, x1

        last, xs = jax.lax.scan(step, x0, u)
        return jnp.concatenate([x0[None], xs])[:, obs], last

    def start(values, z, c):
        """(q₀, p₀) from the positions of the first two steps: p₀ = −D₁L_d − (h/2) F."""
        params = make_params(values)
        q0, q1 = z[:n], z[n:]
        D1, _ = vf.slot_derivatives(tree, params, q0, q1, h)
        force = vf.smooth_forces(tree, params, (q1 - q0) / h, jnp.zeros(len(tree.actuator_names)))
        return jnp.concatenate([q0, -D1 - 0.5 * h * force])

    batched = jax.vmap(one, in_axes=(None, 0, 0, None))
    return jax.jit(batched), jax.jit(jax.vmap(start, in_axes=(None, 0, None)))


def simulator(rig, values: dict, h: float, u: np.ndarray, c):
    """The ``estimation.prediction.Simulate`` of the rig with the SI ``values`` and the inputs
    u[n−1, n_act] of a series, and the map from the first two steps' positions to a state.
    Both run the fixed-shape programs of ``_rollout`` (see ``ROLLOUT_BATCH``)."""
    merged = {k: jnp.asarray(float(v)) for k, v in {**rig.values, **values}.items()}
    roll, start = _rollout(rig.tree, rig.make_params, tuple(rig.observed), float(h))
    obs = np.asarray(rig.observed, int)
    c = jnp.asarray(c, float)
    u = np.asarray(u, float).reshape(len(u), -1)
    # Steps past the record run with the last input (a chunk's tail beyond the window).
    u = np.concatenate([u, np.repeat(u[-1:] if len(u) else np.zeros((1, u.shape[1])), 2, 0)])
    chunk = np.arange(ROLLOUT_CHUNK)

    def simulate(x0, first, steps):
        x0, first = np.asarray(x0, float), np.asarray(first, int)
        out = np.empty((len(first), steps + 1, len(obs)))
        out[:, 0] = x0[:, obs]
        for rows, m in _batches(len(first)):
            x = jnp.asarray(x0[rows])
            for s in range(0, steps, ROLLOUT_CHUNK):
                idx = np.minimum(first[rows][:, None] + s + chunk[None, :], len(u) - 1)
                q, x = roll(merged, x, jnp.asarray(u[idx]), c)
                take = min(ROLLOUT_CHUNK, steps - s)
                out[rows[:m], s + 1 : s + take + 1] = np.asarray(q)[:m, 1 : take + 1]
        return out

    def start_state(z):
        z = np.asarray(z, float)
        out = np.empty_like(z)
        for rows, m in _batches(len(z)):
            out[rows[:m]] = np.asarray(start(merged, jnp.asarray(z[rows]), c))[:m]
        return out

    return simulate, start_state


def _batches(b: int):
    """(rows, m) covering rows 0 … b−1 in index arrays of ``ROLLOUT_BATCH``: the first m
    entries are real rows, the rest copies of the first (padding)."""
    for lo in range(0, b, ROLLOUT_BATCH):
        real = np.arange(lo, min(lo + ROLLOUT_BATCH, b))
        yield np.r_[real, np.full(ROLLOUT_BATCH - len(real), lo)], len(real)


def identify_tree(spec: RigSpec, rig, data: list[Path], out: Path, console) -> Estimate:
    """``physid identify`` with the tree estimator: read the logs, fit them jointly, write
    estimate.json and fit.png."""
    from physid.rigs.encoders import read_log
    from physid.rigs.models.identify_hinged import (
        _plot,
        enable_compilation_cache,
        refuse_long_gaps,
    )

    enable_compilation_cache()
    h = tree_settings(spec)["h"]
    series = []
    for p in data:
        stream = read_log(p, spec)
        refuse_long_gaps(stream, spec, p)  # [method] max_gap: not bridged by the fit
        series.append(series_on_grid(stream, rig, h, p))
    estimate, fits = identify_tree_series(
        spec, rig, series, progress=console.print, labels=[str(p) for p in data]
    )
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    _plot(out / "fit.png", series[0], fits[0]["angles"], rig.channels, spec.name)
    estimate.write(out / "estimate.json")
    return estimate
