"""Ellipse drop rig (Gabiccini & Fusco, Section 6): simulate camera poses, identify J/m and mu.

``simulate`` runs the IRC time stepper (dynamics.planar_contact) from the initial conditions of
``[simulation]`` and writes camera-rate poses ``poses.csv`` (``t,x,y,theta``), the fine-grid
truth ``impulses.csv`` and ``truth.json``. ``identify`` reads a pose CSV (missing fields are
skipped, never invented), solves the IPOPT NLP (27) (estimation.ipopt_contact) and writes
``estimate.json`` and ``fit.png``.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from physid.dynamics.planar_contact import Ellipse, Ground
from physid.dynamics.planar_contact import simulate as simulate_irc
from physid.errors import InputError
from physid.estimation.bootstrap import MIN_DRAWS, contact_bootstrap
from physid.estimation.estimate import (
    Estimate,
    Result,
    Status,
    std_and_correlation,
    write_json_atomic,
)
from physid.estimation.figures import pyplot, save_figure
from physid.estimation.flags import bound_flags, flag_parameters
from physid.estimation.ipopt_contact import (
    WALL_RISE,
    ContactGeometry,
    IpoptSettings,
    NotIdentifiableError,
    contact_steps,
    identifiability,
    parameter_covariance,
    slip_noise,
)
from physid.estimation.validation import validation
from physid.files import atomic_open
from physid.rigs.models import drop_checks, drop_landings
from physid.spec import RigSpec
from physid.streams import Stream

POSE_CHANNELS = ("x", "y", "theta")
STD_CHANNELS = ("std_x", "std_y", "std_theta")


class NotIdentifiableInput(InputError):
    """Pose data from which J/m cannot be identified; the message says why."""


# ------------------------------------------------------------------------------ spec access


def contact_geometry(spec: RigSpec, ground: Ground, length: float | None = None):
    """The estimator's ``ContactGeometry``: the ellipse and the ground surface ``ground``,
    a segment of ``length`` (m; else ``[fixed] ground_length`` if the spec has it, else an
    infinite line), plus any further surfaces of ``[[ground.surface]]``."""
    a, b = spec.value("a", "m", positive=True), spec.value("b", "m", positive=True)
    if length is None and "ground_length" in spec.fixed:
        length = spec.value("ground_length", "m", positive=True)
    return ContactGeometry(
        a,
        b,
        ground.p0[0],
        ground.p0[1],
        ground.alpha,
        math.inf if length is None else float(length),
        extra_surfaces(spec),
    )


def extra_surfaces(spec: RigSpec) -> tuple:
    """``[[ground.surface]]`` tables: ``start = { value = [x, y], unit = "mm" }``,
    ``angle = { value = 0, unit = "rad" }``, ``length = { value = 600, unit = "mm" }``;
    as (x0, y0, alpha, length) tuples (SI)."""
    from physid.spec import _quantity

    table = spec.sections.get("ground", {})
    rows = table.get("surface", []) if isinstance(table, dict) else []
    if not isinstance(rows, list):
        raise spec.error("ground.surface", "expected [[ground.surface]] tables")
    out = []
    for i, row in enumerate(rows):
        where = f"ground.surface[{i}]"
        if not isinstance(row, dict) or not {"start", "angle", "length"} <= set(row):
            raise spec.error(where, "needs start = [x, y], angle and length, each with a unit")
        start = row["start"]
        if not isinstance(start, dict) or not isinstance(start.get("value"), list):
            raise spec.error(f"{where}.start", 'expected { value = [x, y], unit = "mm" }')
        xy = [
            _quantity(spec, f"{where}.start", {"value": v, "unit": start.get("unit", "")}, "m")
            for v in start["value"]
        ]
        if len(xy) != 2:
            raise spec.error(f"{where}.start", "expected two coordinates [x, y]")
        angle = _quantity(spec, f"{where}.angle", row["angle"], "rad")
        length = _quantity(spec, f"{where}.length", row["length"], "m")
        out.append((xy[0], xy[1], angle, length))
    return tuple(out)


def rig_geometry(spec: RigSpec) -> tuple[Ellipse, Ground]:
    """Ellipse (with the simulation-truth J) and ground line from ``[fixed]``."""
    m = spec.value("m", "kg", positive=True)
    ellipse = Ellipse(
        spec.value("a", "m", positive=True),
        spec.value("b", "m", positive=True),
        m,
        m * spec.value("j_over_m", "m^2", positive=True),
    )
    ground = Ground(
        (spec.value("ground_x0", "m"), spec.value("ground_y0", "m")),
        spec.value("ground_alpha", "rad"),
    )
    return ellipse, ground


def _sim_vector(spec: RigSpec, key: str) -> np.ndarray:
    raw = spec.sections.get("simulation", {}).get(key)
    if not isinstance(raw, list) or len(raw) != 3:
        raise spec.error(f"simulation.{key}", "expected a list of 3 numbers (x, y, theta)")
    return np.array(raw, dtype=float)


# The [method] keys of the ellipse drop (docs/planar-contact.md); any other is a typo.
METHOD_KEYS = (
    "h_max",
    "sigma_pos",
    "sigma_theta",
    "rho",
    "mu_pull",
    "max_iter",
    "covariance",
    "bootstrap_draws",
    "bootstrap_seed",
    "model_error",
)
COVARIANCES = ("linearized", "bootstrap")
# Refits of the parametric bootstrap by default: the std's own relative error is then
# 1/sqrt(2 (B - 1)) = 16 %, and on the 0.4 s, 120 fps throw each refit costs ~0.66 s of
# CPU (warm, ~56 iterations). The coverage of the default std was measured at this B
# (docs/validation.md, "The ellipse drop's std").
BOOTSTRAP_DRAWS = 20


@dataclass(frozen=True)
class CovarianceChoice:
    """``[method] covariance``: "bootstrap" (the default: ``estimation.bootstrap.
    contact_bootstrap``, ``draws`` refits of the fit's own prediction re-noised, from
    ``seed``, and the bias they show removed) or "linearized" (the NLP's
    implicit-function-theorem covariance: erratic on this complementarity-constrained NLP,
    see ``reported_values``); ``model_error``: widen the std of J/m and mu by the NLP's
    model error (``reported_values``; true by default, as the hinged rigs'
    ``model_error``)."""

    method: str = "bootstrap"
    draws: int = BOOTSTRAP_DRAWS
    seed: int = 0
    model_error: bool = True


def covariance_choice(spec: RigSpec) -> CovarianceChoice:
    """The drop's covariance method from ``[method]`` (``covariance``, ``bootstrap_draws``,
    ``bootstrap_seed``, ``model_error``), checked."""
    method = spec.method.get("covariance", CovarianceChoice.method)
    if method not in COVARIANCES:
        raise spec.error(
            "method.covariance", f"{method!r} is not a covariance; one of {', '.join(COVARIANCES)}"
        )
    draws = spec.method.get("bootstrap_draws", BOOTSTRAP_DRAWS)
    if isinstance(draws, bool) or not isinstance(draws, int | float) or draws != int(draws) \
            or draws < MIN_DRAWS:  # fmt: skip
        raise spec.error(
            "method.bootstrap_draws",
            f"expected a whole number of refits >= {MIN_DRAWS} (the spread of fewer is no "
            f"std), got {draws!r}",
        )
    seed = spec.method.get("bootstrap_seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise spec.error("method.bootstrap_seed", f"expected a whole number >= 0, got {seed!r}")
    model_error = spec.method.get("model_error", CovarianceChoice.model_error)
    if not isinstance(model_error, bool):
        raise spec.error("method.model_error", f"expected true or false, got {model_error!r}")
    return CovarianceChoice(str(method), int(draws), int(seed), model_error)


def ipopt_settings(spec: RigSpec, noise: tuple[float, float] | None = None) -> IpoptSettings:
    """Estimator settings from ``[method]`` and ``[parameters]`` (SI). The observation
    noise is ``[method] sigma_pos`` / ``sigma_theta`` where the spec gives them, else
    ``noise`` (sigma_pos m, sigma_theta rad: the tracker's, ``tracking_noise``), else
    1 mm / 1 mrad (the paper's simulation noise)."""
    spec.check_keys("method", METHOD_KEYS)
    ratio = spec.parameters.get("inertia_ratio")
    friction = spec.parameters.get("friction")
    kwargs = {}
    if ratio is not None:
        kwargs["j_over_m_initial"] = ratio.initial
        kwargs["j_over_m_bounds"] = (max(ratio.lower, 1e-12), ratio.upper)
    if friction is not None:
        kwargs["mu_initial"] = friction.initial
        kwargs["mu_bounds"] = (max(friction.lower, 0.0), friction.upper)
    return IpoptSettings(
        h_max=spec.method_value("h_max", "s", 1e-3),
        sigma_pos=spec.method_value("sigma_pos", "m", noise[0] if noise else 1e-3),
        sigma_theta=spec.method_value("sigma_theta", "rad", noise[1] if noise else 1e-3),
        rho=float(spec.method.get("rho", 10.0)),
        mu_pull=float(spec.method.get("mu_pull", 10.0)),
        max_iter=int(spec.method.get("max_iter", 500)),
        **kwargs,
    )


# ------------------------------------------------------------------------------ simulate


def simulate(spec: RigSpec, options, console) -> dict[str, Path]:
    """Simulate a throw with IRC and write camera-rate noisy poses, impulses and truth."""
    ellipse, ground = rig_geometry(spec)
    mu = spec.value("mu", "1", nonnegative=True)
    eps = spec.value("restitution", "1", nonnegative=True)
    fps = spec.value("fps", "Hz", positive=True)
    h = options.dt or spec.section_value("simulation", "h", "s", 1.0 / 1200)
    duration = options.duration or spec.section_value("simulation", "duration", "s", 1.0)
    noise = options.noise
    if noise is None:
        noise = spec.section_value("simulation", "noise", "m", 0.0)
    angle_per_m = spec.section_value("simulation", "angle_noise_per_m", "1", 1.0)
    q0, v0 = _sim_vector(spec, "q0"), _sim_vector(spec, "v0")
    steps = int(round(duration / h))
    console.print(f"simulating {duration:g} s of the ellipse drop with IRC, h = {h * 1e3:g} ms")
    traj = simulate_irc(q0, v0, h, steps, ellipse, ground, mu, eps)

    # Camera frames: the fine step nearest to each frame time (exact when h divides 1/fps).
    frame_times = np.arange(0.0, traj.t[-1] + 1e-12, 1.0 / fps)
    idx = np.unique(np.rint(frame_times / h).astype(int))
    rng = np.random.default_rng(options.seed)
    sigma = np.array([noise, noise, noise * angle_per_m])
    poses = traj.q[idx] + rng.normal(size=(len(idx), 3)) * sigma

    out = Path(options.out)
    out.mkdir(parents=True, exist_ok=True)
    written = {
        "poses": write_pose_csv(out / "poses.csv", traj.t[idx], poses),
        "true poses": write_pose_csv(out / "poses_true.csv", traj.t[idx], traj.q[idx]),
    }
    imp = out / "impulses.csv"
    with atomic_open(imp, newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["t", "cn", "ct", "lambda", "x", "y", "theta", "vx", "vy", "omega"])
        for k in range(steps):
            w.writerow(
                [
                    repr(float(traj.t[k + 1])),
                    repr(float(traj.cn[k])),
                    repr(float(traj.ct[k])),
                    repr(float(traj.lam[k])),
                    *map(repr, traj.q[k + 1].tolist()),
                    *map(repr, traj.v[k + 1].tolist()),
                ]
            )
    written["impulses"] = imp
    truth = {
        "rig": spec.name,
        "scheme": "IRC",
        "a": ellipse.a,
        "b": ellipse.b,
        "m": ellipse.m,
        "J": ellipse.J,
        "J_over_m": ellipse.j_over_m,
        "mu": mu,
        "restitution": eps,
        "fps": fps,
        "h": h,
        "noise_pos": noise,
        "noise_theta": noise * angle_per_m,
        "seed": options.seed,
        "q0": q0.tolist(),
        "v0": v0.tolist(),
        "ground": {"p0": list(ground.p0), "alpha": ground.alpha},
        "units": "SI (m, kg, s, rad; impulses N s)",
    }
    written["truth"] = write_json_atomic(out / "truth.json", truth)
    return written


def write_pose_csv(path: Path, t: np.ndarray, q: np.ndarray) -> Path:
    """Write ``t,x,y,theta`` with full precision (repr round-trips floats)."""
    with atomic_open(path, newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["t", *POSE_CHANNELS])
        for ti, qi in zip(t, q, strict=True):
            w.writerow([repr(float(ti)), *(repr(float(v)) for v in qi)])
    return path


def read_pose_csv(path: str | Path) -> Stream:
    """Read a pose CSV with columns ``t,x,y,theta`` (extra columns ignored).

    Empty or ``nan`` fields, and rows with ``valid = 0`` (``physid track``), mark missing
    samples (set in the Stream's mask). Errors name file and line.
    """
    path = Path(path)
    try:
        fh = open(path, newline="")
    except OSError as exc:
        raise InputError(f"{path}: cannot read pose CSV: {exc.strerror}") from None
    with fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if header is None:
            raise InputError(f"{path}: empty file; expected a header t,x,y,theta")
        header = [h.strip() for h in header]
        missing_cols = [c for c in ("t", *POSE_CHANNELS) if c not in header]
        if missing_cols:
            raise InputError(
                f"{path}:1: header {','.join(header)} lacks {', '.join(missing_cols)}; "
                "a pose CSV needs columns t,x,y,theta"
            )
        cols = [header.index(c) for c in ("t", *POSE_CHANNELS)]
        # ``physid track`` marks unmeasured frames with valid = 0 (and nan values).
        valid_col = header.index("valid") if "valid" in header else None
        t, values, missing = [], [], []
        for line, row in enumerate(reader, start=2):
            if not row or all(not f.strip() for f in row):
                continue
            fields = [row[c].strip() if c < len(row) else "" for c in cols]
            if not fields[0]:
                raise InputError(f"{path}:{line}: missing time stamp t")
            try:
                t.append(float(fields[0]))
                vals = [float(f) if f else math.nan for f in fields[1:]]
            except ValueError:
                raise InputError(f"{path}:{line}: not a number in {row}") from None
            values.append(vals)
            pairs = zip(fields[1:], vals, strict=True)
            invalid = valid_col is not None and _flag_is_zero(row, valid_col)
            missing.append([invalid or not f or not math.isfinite(v) for f, v in pairs])
    if not t:
        raise InputError(f"{path}: no pose samples after the header")
    return Stream(
        np.array(t),
        np.array(values),
        POSE_CHANNELS,
        ("m", "m", "rad"),
        np.array(missing),
        {"file": str(path)},
    )


def _flag_is_zero(row: list[str], col: int) -> bool:
    field = row[col].strip() if col < len(row) else ""
    try:
        return float(field) == 0.0
    except ValueError:
        return False


# ------------------------------------------------------------------------------ identify


def identify(
    spec: RigSpec, data: list[Path], out: Path, console, window: tuple | None = None
) -> Estimate:
    """Identify J/m and mu from pose CSVs with the IPOPT NLP (27).

    One CSV: one throw. Several CSVs: several throws of one object, each fitted, checked and
    then pooled (``identify_pooled``: one J/m, μ and restitution). A CSV may come from
    ``physid simulate ellipse-drop`` or ``physid track`` (extra columns ignored, ``nan``
    fields and ``valid = 0`` rows skipped). Where a ``physid track`` sidecar ``<csv>.json``
    holds the ground line measured from the video, it replaces the nominal ``[fixed]
    ground_*`` of the spec. ``window`` (start, end) in s from each file's first row: only
    those frames are fitted (an experiment's ``window`` in ``experiments.toml``).
    """
    if not data:
        raise InputError("ellipse drop: give at least one pose CSV")
    throws = [identify_throw(spec, Path(path), console, window) for path in data]
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    if len(throws) == 1:
        estimate = throws[0].estimate
    else:
        estimate = identify_pooled(spec, throws, console)
    estimate.write(out / "estimate.json")
    first = throws[0]
    plot_fit(out / "fit.png", first.t_m, first.q_m, first.fit, first.mass)
    jm, mu = estimate.parameters["J_over_m"], estimate.parameters["mu"]
    mu_text = (
        f"mu = {mu.value:.3f} +- {mu.std:.3f}"
        if mu.identifiable
        else f"mu >= {mu.value:.3f} (no sliding contact: only a lower bound)"
        if mu.lower_bound
        else f"mu = {mu.value:.3f}, not identifiable: {mu.reason}"
    )
    jm_text = (
        f"{jm.value * 1e6:.1f} +- {jm.std * 1e6:.1f} mm^2"
        if jm.identifiable
        else (f"{jm.value * 1e6:.1f} mm^2, not identifiable: {jm.reason}")
    )
    console.print(
        f"J/m = {jm_text}, {mu_text}; wrote {out / 'estimate.json'} and {out / 'fit.png'}"
    )
    console.print(f"verdict: {estimate.validation['summary']}")
    return estimate


@dataclass(frozen=True)
class Throw:
    """One pose file's fit: its ``Estimate`` and what pooling needs again."""

    estimate: Estimate
    fit: object
    t_m: np.ndarray
    q_m: np.ndarray
    geometry: ContactGeometry
    settings: IpoptSettings
    mass: float
    path: Path


def identify_throw(spec: RigSpec, path: Path, console, window: tuple | None = None) -> Throw:
    """One pose file: refuse impacts no rigid body makes, fit (multi-start on J/m; again with
    the noise the residuals show where they exceed the tracker's), check."""
    stream = read_pose_csv(path)
    stream = read_pose_csv(path)
    incomplete = stream.missing.any(axis=1)
    ok = ~incomplete
    inside = np.ones(len(ok), bool)
    if window is not None:
        rel = stream.t - stream.t[0]
        inside = (rel >= window[0]) & (rel <= window[1])
        if not inside.any():
            raise InputError(
                f"{path}: the window {window[0]:g}-{window[1]:g} s holds no frame of a "
                f"{rel[-1]:.3g} s pose file"
            )
        ok &= inside
    t_m, q_m = stream.t[ok], stream.values[ok]
    ellipse, ground = rig_geometry(spec)
    ground, ground_source, length = measured_ground(path, ground)
    geometry = contact_geometry(spec, ground, length)
    noise = tracking_noise(path, ok)
    settings = ipopt_settings(spec, noise)
    choice = covariance_choice(spec)
    noise_source = noise_origin(spec, noise)
    console.print(
        f"identifying J/m and mu from {len(t_m)} frames of {path} "
        f"({int(incomplete.sum())} incomplete frames skipped"
        + (f", {int((~inside).sum())} outside the window" if window is not None else "")
        + f"), IPOPT on a {settings.h_max * 1e3:g} ms grid, ground from {ground_source}, "
        f"noise {settings.sigma_pos * 1e3:.3g} mm / {settings.sigma_theta * 1e3:.3g} mrad "
        f"from {noise_source}"
    )
    found = drop_checks.impact_consistency(t_m, q_m, geometry, *drop_checks.frame_noise(q_m))
    refusal = drop_checks.inconsistency_message(path, found)
    if refusal is not None:
        raise NotIdentifiableInput(refusal)
    fit, ident, cov, starts = _solve(path, t_m, q_m, geometry, settings, found, console)
    tracker_noise = noise is not None and "tracker" in noise_source.split(";")[0]
    s2 = model_error_factor(fit.cost_fit, cov)
    if tracker_noise and s2 > MODEL_ERROR_LIMIT:
        # The frames miss the fit by more than the tracker's noise: the motion is not
        # rigid contact to that precision (the sample drop's IRC truth sinks 2.8 mm into
        # the bar; s^2 = 284 there, 1.4 on MuJoCo drops). Weights of sigma ~ tracking
        # noise then make the penalties stiff and the fit wrong (mu 0.76 for 0.3), so
        # solve once more with the noise the residuals show: sigma * sqrt(s^2).
        factor = math.sqrt(s2)
        settings = replace(
            settings,
            sigma_pos=settings.sigma_pos * factor,
            sigma_theta=settings.sigma_theta * factor,
        )
        noise_source += (
            f"; x{factor:.3g} after a first fit whose residuals were {factor:.3g}x the "
            "tracking noise (model error)"
        )
        console.print(
            f"the fit misses the frames by {factor:.3g}x the tracking noise: fitting again "
            f"with {settings.sigma_pos * 1e3:.3g} mm / {settings.sigma_theta * 1e3:.3g} mrad"
        )
        fit, ident, cov, starts = _solve(path, t_m, q_m, geometry, settings, found, console)
    context = {
        "path": path,
        "skipped": int(incomplete.sum()),
        "ground": ground_source,
        "noise": noise_source,
        "window": None if window is None else list(window),
        "ground_length": geometry.length if math.isfinite(geometry.length) else None,
        "impacts_seen": found,
        "starts": starts,
        "geometry": geometry,
        "bootstrap": _bootstrap_runner(choice, fit, settings, cov, console),
        "model_error": choice.model_error,
        "landing_progress": lambda done, total: console.print(
            f"  landing fit {done}/{total} (IRC over a landing the flights cannot read)"
        ),
    }
    estimate = build_estimate(spec, fit, ident, cov, ellipse, settings, (t_m, q_m), context)
    return Throw(estimate, fit, t_m, q_m, geometry, settings, ellipse.m, path)


def bootstrap_noise_scale(fit, cov: dict) -> float:
    """The factor on the stated noise that the bootstrap re-noises with: sqrt(s^2) where
    the fit's residual variance factor s^2 (``model_error_factor``) exceeds 1, else 1."""
    return math.sqrt(max(model_error_factor(fit.cost_fit, cov), 1.0))


def _bootstrap_runner(choice: CovarianceChoice, fit, settings, cov, console):
    """None for the linearized covariance; else a function that runs the parametric
    bootstrap of ``fit`` (called only where the NLP's values are the ones reported), with
    the stated noise scaled by the residuals' excess over it, sqrt(s^2) where s^2 > 1."""
    if choice.method != "bootstrap":
        return None

    def run():
        sigma = np.array([settings.sigma_pos, settings.sigma_pos, settings.sigma_theta])
        scale = bootstrap_noise_scale(fit, cov)
        console.print(
            f"parametric bootstrap: {choice.draws} refits of the fit's prediction re-noised "
            f"with {sigma[0] * scale * 1e3:.3g} mm / {sigma[2] * scale * 1e3:.3g} mrad"
        )
        step = max(1, choice.draws // 5)

        def progress(done, total):
            if done % step == 0 or done == total:
                console.print(f"  bootstrap {done}/{total}")

        wall = fit_slides(fit, settings)  # mu from the wall of its profile where it slides
        return contact_bootstrap(fit, sigma, choice.draws, choice.seed, scale, progress, wall)

    return run


def identify_pooled(spec: RigSpec, throws: list[Throw], console) -> Estimate:
    """One J/m, μ and restitution of one object from several throws: each throw's values
    pooled by inverse-variance weighting, the std scaled by the Birge ratio
    sqrt(χ²/(n − 1)) where the throws disagree more than their stds allow; μ a lower bound
    (the largest) where no throw slides; then every throw predicted by the pooled model.

    Not one joint NLP: each throw is fitted alone (its impacts checked, its multi-start run),
    so a throw the checks refuse never touches the others."""
    names = ("J_over_m", "mu", "restitution")
    pooled, report = {}, {}
    for name in names:
        ps = [t.estimate.parameters[name] for t in throws]
        pooled[name], report[name] = _pool(ps)
    statuses = [Status(Result(t.estimate.status["result"]), t.estimate.status["stop"],
                       t.estimate.status["test"]) for t in throws]  # fmt: skip
    bad = [st for st in statuses if not st.converged]
    status = (
        bad[0]
        if bad
        else Status(
            Result.successful, "every throw converged", "; ".join(st.test for st in statuses)
        )
    )
    values = {k: v["value"] for k, v in pooled.items()}
    predictions = []
    for t in throws:  # each from its own output-error fit's initial state, if kept
        oe = t.estimate.identifiability["output_error"]
        start = (np.asarray(oe["q0"]), np.asarray(oe["v0"])) if oe["accepted"] else None
        predictions += drop_checks.predictions(
            t.fit, t.t_m, t.q_m, t.geometry, t.settings, t.mass, values, t.path.name, start
        )
    units = {"J_over_m": "m^2", "mu": "1", "restitution": "1"}
    params = flag_parameters(
        names, [values[k] for k in names], [pooled[k]["std"] for k in names], units, status,
        lower_bound=[pooled[k]["lower_bound"] for k in names],
    )  # fmt: skip
    first = throws[0].estimate
    checked = validation(status, predictions, params, {}, _STD_COVERS + " Pooled over throws.")
    console.print(f"pooled over {len(throws)} throws: " + ", ".join(
        f"{k} {params[k].value:.4g}" for k in names))  # fmt: skip
    return Estimate(
        rig=spec.name,
        solver=first.solver + "; throws pooled by inverse-variance weighting",
        parameters=params,
        cost=float(np.mean([t.estimate.cost for t in throws])),
        iterations=sum(t.estimate.iterations for t in throws),
        converged=status.converged,
        history=[],
        settings={**first.settings, "data": [str(t.path) for t in throws]},
        covariance=None,
        identifiability={"pooled": report},
        extra={
            **first.extra,
            "throws": [
                {"data": str(t.path), **{k: vars(p) for k, p in t.estimate.parameters.items()}}
                for t in throws
            ],
            "prediction_series": [p.series() for p in predictions],
        },
        status=status.to_dict(),
        validation=checked,
    )


def _pool(ps: list) -> tuple[dict, dict]:
    """Inverse-variance mean of the throws' values with a finite std, the Birge ratio, and
    a lower bound (the largest) where no throw identifies the value but some bound it."""
    ok = [p for p in ps if p.identifiable]
    if ok:
        v = np.array([p.value for p in ok])
        w = 1.0 / np.array([p.std for p in ok]) ** 2
        mean = float(np.sum(w * v) / np.sum(w))
        std = float(1.0 / math.sqrt(np.sum(w)))
        chi2 = float(np.sum(w * (v - mean) ** 2))
        birge = math.sqrt(chi2 / (len(ok) - 1)) if len(ok) > 1 else 1.0
        std *= max(1.0, birge)
        entry = {"value": mean, "std": std, "lower_bound": False}
        return entry, {"throws": len(ok), "birge_ratio": birge, "chi2": chi2}
    bounds = [p.value for p in ps if p.lower_bound]
    if bounds:
        return {"value": max(bounds), "std": math.inf, "lower_bound": True}, {"throws": 0}
    return {"value": float(np.mean([p.value for p in ps])), "std": math.inf,
            "lower_bound": False}, {"throws": 0}  # fmt: skip


def measured_ground(path: Path, nominal: Ground) -> tuple[Ground, str, float | None]:
    """Ground line from a ``physid track`` sidecar ``<csv>.json`` if it has one, with its
    length (m; None where the sidecar has none: then the spec's)."""
    side = path.with_name(path.name + ".json")
    if not side.exists():
        return nominal, "the spec ([fixed] ground_*)", None
    try:
        meta = json.loads(side.read_text())
        p0 = [float(v) for v in meta["ground_p0"]]
        alpha = float(meta["ground_alpha"])
        length = meta.get("ground_length")
        length = None if length is None else float(length)
    except (KeyError, TypeError, ValueError, json.JSONDecodeError):
        return nominal, "the spec ([fixed] ground_*); the sidecar has no ground line", None
    if len(p0) != 2 or not all(map(math.isfinite, [*p0, alpha])):
        text = "the spec ([fixed] ground_*); the sidecar's ground line is not finite"
        return nominal, text, None
    what = f"the video ({side.name})"
    if length is not None:
        what += f", a {length * 1e3:.0f} mm segment"
    return Ground((p0[0], p0[1]), alpha), what, length


def tracking_noise(path: Path, rows: np.ndarray) -> tuple[float, float] | None:
    """(sigma_pos m, sigma_theta rad): the RMS over ``rows`` (a mask of the file's data
    rows) of the per-frame std the tracker wrote (``std_x``, ``std_y``, ``std_theta``);
    None if the file has no such columns (a simulated pose file)."""
    with open(path, newline="") as fh:
        reader = csv.reader(fh)
        header = [h.strip() for h in next(reader, [])]
        cols = [header.index(c) if c in header else None for c in STD_CHANNELS]
        if None in cols:
            return None
        values = []
        for row in reader:
            if not row or all(not f.strip() for f in row):
                continue
            try:
                values.append([float(row[c]) for c in cols])
            except (ValueError, IndexError):
                values.append([math.nan] * 3)
    std = np.array(values, dtype=float).reshape(-1, 3)
    if len(std) != len(rows):
        return None
    std = std[np.asarray(rows, bool)]
    std = std[np.all(np.isfinite(std) & (std > 0), axis=1)]
    if len(std) == 0:
        return None
    pos = float(np.sqrt(np.mean(std[:, :2] ** 2)))
    return pos, float(np.sqrt(np.mean(std[:, 2] ** 2)))


MODEL_ERROR_LIMIT = 4.0  # residual variance factor above which the noise is re-fitted


def model_error_factor(cost_fit: float, cov: dict) -> float:
    """Residual variance factor for the model-error check: chi^2 / (n_obs - n_eff) as in
    ``parameter_covariance``, but with n_eff (the linearization's effective parameter
    count) counted as at most half the observations. A drop's fit has two parameters and
    a few states per flight phase; an n_eff near n_obs is the barrier linearization's
    degenerate complementarity rows (docs/planar-contact.md, *Uncertainty*), and it
    jumps with round-off: on one Coulomb-like MuJoCo drop, poses whose times were rounded
    to 1 ns or 1 us gave n_eff 359 or 79 of 360 for the same fit (chi^2 410, mu 0.507),
    so s^2 411 (a refit, and mu then reported as unidentified) or 1.5. With the cap the
    factor is at most 2 chi^2 / n_obs, whose size does not depend on that count."""
    n_obs, n_eff = float(cov["n_obs"]), float(cov["n_eff"])
    if not math.isfinite(n_eff):
        return float(cov["residual_variance_factor"])
    return float(cost_fit) / max(n_obs - min(n_eff, 0.5 * n_obs), 1.0)


def _solve(path, t_m, q_m, geometry, settings, found, console):
    """IPOPT fit (multi-start on J/m, ``drop_checks.fit_multistart``), Section 5.2 analysis
    and covariance (with batch means over the frames); refusals as NotIdentifiableInput.
    Returns (fit, identifiability, covariance, the starts tried)."""
    try:
        fit, starts = drop_checks.fit_multistart(t_m, q_m, geometry, settings, found)
    except NotIdentifiableError as exc:
        raise NotIdentifiableInput(f"{path}: J/m cannot be identified: {exc}") from None
    if len(starts) > 1:
        console.print(
            "multi-start on J/m: "
            + ", ".join(f"{s['start'] * 1e6:.0f} mm^2 -> {s['j_over_m'] * 1e6:.1f}" for s in starts)
        )
    ident = identifiability(fit, geometry)
    if ident["contact_steps"] == 0:
        raise NotIdentifiableInput(
            f"{path}: J/m cannot be identified: the fitted motion has no contact impulse, so "
            "the data are explained by free flight, where J/m does not appear (Section 5.2.1)"
        )
    # Where nothing slides mu has only a lower bound; its flat direction is held fixed.
    slides = fit_slides(fit, settings)
    cov = parameter_covariance(
        fit, geometry, settings, pin_mu=not slides, q_m=q_m, batches=drop_checks.BATCHES
    )
    return fit, ident, cov, starts


def noise_origin(spec: RigSpec, noise) -> str:
    """Where the observation noise came from, for the console and ``estimate.json``."""
    own = [k for k in ("sigma_pos", "sigma_theta") if k in spec.method]
    if len(own) == 2:
        return "the spec's [method] sigma_pos, sigma_theta"
    text = (
        "the tracker's per-frame std (RMS of std_x, std_y, std_theta in the pose file)"
        if noise is not None
        else "the default 1 mm / 1 mrad (the pose file has no std columns)"
    )
    return text + (f"; [method] {own[0]} from the spec" if own else "")


def fit_steps(fit, settings: IpoptSettings):
    """``ContactSteps`` of a ``ContactFit`` (which steps touch, slide, are resolved)."""
    parts = {"pn": fit.pn, "pt": fit.pt, "ut": fit.ut, "mu": fit.mu}
    return contact_steps(parts, fit.t[fit.frame_index], settings)


def fit_slides(fit, settings: IpoptSettings) -> bool:
    """Whether any contact step of ``fit`` slides (``fit_steps``): where none does mu has
    only a lower bound, and no wall of its profile to read."""
    return bool(fit_steps(fit, settings).sliding.any())


def friction_report(fit, settings: IpoptSettings, mu_std: float) -> dict:
    """Is mu identified, and by which contact steps? (Section 6.1, Figure 19).

    mu enters the data only through steps that slide: there the cone is active,
    |c_t| = mu c_n, and the slip speed (lambda, eq. 18) is non-zero. A step counts as
    sliding when its impulse is a real one, it is on the cone and its slip exceeds 3 times
    the velocity noise of the frames (``ContactSteps``): a slower "slip" is
    indistinguishable from rolling. Where no step slides, any mu above max |c_t|/c_n fits
    as well: that lower bound is reported, not identified. It is taken over the impulses the
    frames resolve (``ContactSteps.resolved``; all contact steps if none is): the fit also
    spreads noise-level impulses over rolling contact, and their ratios, up to mu itself,
    bound nothing (mu = 0.6 at 240 fps: 1.00 over all steps, the truth never slides).
    """
    steps = fit_steps(fit, settings)
    contact, sliding, ratio = steps.contact, steps.sliding, steps.ratio
    if not contact.any():
        return {"value": fit.mu, "identifiable": False, "lower_bound": 0.0, "sliding_steps": 0}
    evidence = steps.resolved if steps.resolved.any() else contact
    bound = float(ratio[evidence].max())
    n_slide = int(sliding.sum())
    identifiable = n_slide > 0 and math.isfinite(mu_std)
    return {
        "value": fit.mu if identifiable else bound,
        "identifiable": identifiable,
        "lower_bound": bound,
        "sliding_steps": n_slide,
        "sliding_impulse_Ns_per_kg": float(fit.pn[sliding].sum()),
        "slip_noise_m_per_s": slip_noise(fit.t[fit.frame_index], settings.sigma_pos),
    }


_STD_COVERS = (
    "J/m, mu and restitution are refined by output error (the IRC model's free run against "
    "every frame, from the NLP's values); their std is that fit's Gauss-Newton covariance, "
    "scaled by the residual variance where it exceeds 1, plus batch means over blocks of "
    "frames (residuals correlated in time), and in quadrature its difference from the NLP's "
    "J/m and mu and the frames' restitution it started from (identifiability.output_error."
    "difference: the fit's own std is the width of the valley where it stopped, which need "
    "not be a minimum). It covers the frames' noise, not errors of the fixed geometry, the "
    "mass or the ground line."
)
_STD_COVERS_BOOT = (
    "The std is a parametric bootstrap: the spread of {draws} of {requested} refits of the "
    "NLP to its own prediction of the frames re-noised with the stated noise (scaled by the "
    "residuals' excess over it); J/m and mu are corrected by the bias the refits show (2 fit "
    "- their median; mu where it is not read at the wall, below). It covers the frames' noise "
    "through the nonlinear, complementarity-constrained fit where the refits keep the fit's "
    "contact mode, not errors "
    "of the fixed geometry, the mass or the ground line, nor residuals correlated in time, "
    "nor a contact that rigid impacts do not describe (the prediction checks show it). On "
    "simulated throws other than one well-fitted throw, the noise moves mu's fit between "
    "contact modes that the refits do not reach: mu's error exceeded 2 std in 39 % of 50 "
    "varied throws (mostly upwards, by 0.005-0.03: the NLP's 1 ms grid), J/m's in 12 % "
    "(docs/validation.md, 'mu at the wall'). Read mu's std as a lower bound on its "
    "uncertainty. (The output-error refinement was not kept: the IRC model's free run does "
    "not follow these frames.)"
)
_STD_COVERS_NLP = (
    "The std is linearized (implicit function theorem on IPOPT's KKT system) and covers the "
    "frames' noise (scaled by the fit's residual variance) and residuals correlated in time "
    "(batch means over blocks of frames). It does not cover errors of the fixed geometry, "
    "the mass or the ground line, nor the noise moving the fit between contact modes: over "
    "50 varied simulated throws mu's error exceeded 2 std in 28-31 % of them "
    "(docs/validation.md, 'Varied throws'). (The output-error refinement was not kept: the "
    "IRC model's free run does not follow these frames.)"
)

_STD_COVERS_WALL = (
    " mu is not the NLP's own (which the noise tilts upwards along the flat floor of its "
    "profile above the sliding impacts' wall) but the wall of the profile: the mu below the "
    "fit where twice the objective has risen by 1; its std is the spread of the refits' own "
    "walls (docs/validation.md, 'mu at the wall')."
)

_STD_COVERS_ALLOWANCE = (
    " The std of {which} also includes, in quadrature, the size of the NLP's model error "
    "against rigid contact: the RMS error of noise-free fits of the IRC model's own runs at "
    "the identified values, started at three phases of the NLP's time grid "
    "(extra.covariance.model_error_allowance)."
)


@dataclass(frozen=True)
class Reported:
    """What the drop path reports for one throw (:func:`reported_values`): ``values`` and
    ``std`` of J_over_m (m^2), mu and restitution (mu's value the lower bound and its std
    inf where it is not identified), ``source`` of the std ("output error", "bootstrap" or
    "linearized"), the output-error fit ``oe`` and whether it was ``accepted``,
    ``friction`` (:func:`friction_report`), ``jm_bound`` / ``mu_bound`` (the bound flags),
    the bootstrap ``boot`` and its ``correction`` where they were used, ``eps`` the frames'
    restitution, the competing basins (``competing``, ``far``) that widened the std, the
    model-error ``allowance`` that widened the NLP's std (bootstrap or linearized; None
    where none), ``oe_difference`` the kept output error's difference from its start that
    widened its std (None where it is not kept), and
    ``model`` the J/m, mu and restitution the IRC prediction check simulates with (mu the
    fitted one, also where only its lower bound is reported)."""

    values: dict
    std: dict
    model: dict
    source: str
    oe: drop_checks.OutputError
    accepted: bool
    friction: dict
    jm_bound: str
    mu_bound: str
    boot: object
    correction: dict | None
    eps: dict
    competing: list
    far: np.ndarray
    allowance: dict | None = None
    wall: object = None
    oe_difference: dict | None = None


def reported_values(fit, t_m, q_m, geometry, settings, cov, found, starts, bootstrap=None,
                    oe=None, model_error=CovarianceChoice.model_error,
                    allowance=None, eps=None, progress=None) -> Reported:  # fmt: skip
    """The values and std the drop path reports for a fit (``_solve``'s fit and
    linearized ``cov``; ``found`` the frames' impacts, ``starts`` the multi-start's): the
    rule in one place, so that ``build_estimate`` and the coverage study
    (``rigs.pipeline.drop_coverage``) report the same numbers.

    1. The NLP's J/m and mu and the frames' restitution (``drop_checks.restitution``)
       start an output-error fit of the IRC model (``drop_checks.output_error``; passed
       in as ``oe`` where already run). Where its free run explains the frames to their
       stated noise (s^2 within chi^2's own scatter: ``oe.kept``,
       ``drop_checks.output_error_limit``) its values are reported, their std widened in
       quadrature by their difference from the NLP's J/m and mu and the frames'
       restitution (``output_error_difference``).
    2. Else, where ``bootstrap`` (a callable returning ``contact_bootstrap``'s result; the
       default ``[method] covariance``) is given, the bootstrap's bias-corrected values
       and std (``bias_correction``), else the NLP's values with the linearized std;
       restitution the frames' own. With ``model_error`` true, the std of J/m and (where
       it is identified) mu is widened in quadrature by the NLP's model error
       (``drop_checks.model_error_allowance``).
    3. Competing basins of the multi-start widen the std of J/m and mu
       (``drop_checks.basins``, ``basin_spread``).

    ``oe``, ``allowance`` and ``eps``: the output-error fit, the model-error allowance and
    the frames' restitution where already computed for this fit (another ``Reported``'s),
    so a second rule costs none of them again. ``progress(done, total)``: called as each
    landing fit is done (``drop_landings.landings_restitution``)."""
    std_jm, std_mu = (float(v) for v in cov["std"])
    friction = friction_report(fit, settings, std_mu)
    given_eps = eps
    if eps is None:
        eps = drop_checks.frames_restitution(t_m, q_m, geometry, found,
                                             *drop_checks.frame_noise(q_m))  # fmt: skip
    lo, hi = settings.j_over_m_bounds
    jm_bound = str(bound_flags([fit.j_over_m], [lo], [hi], [settings.j_over_m_initial])[0])
    mu_bound = str(bound_flags([fit.mu], [settings.mu_bounds[0]], [settings.mu_bounds[1]],
                               [settings.mu_initial])[0])  # fmt: skip
    eps_value = eps["value"] if eps["value"] is not None else 0.0
    hold_mu = friction["sliding_steps"] == 0
    # The NLP's J/m and mu and the frames' restitution start an output-error fit of the IRC
    # model (drop_checks.output_error): the values reported, and the free run's start.
    start_values = {"J_over_m": fit.j_over_m, "mu": fit.mu, "restitution": eps_value}
    if oe is None:
        oe = drop_checks.output_error(fit, t_m, q_m, geometry, settings, start_values, hold_mu)
    # Kept only where the IRC model's free run explains the frames to their stated noise
    # (s^2 below chi^2's 99.9 % point, ``drop_checks.output_error_limit``): on a drop the
    # model cannot follow over the whole record (MuJoCo's soft contact rolling off the bar:
    # s^2 2393 after 15 iterations, J/m pulled from 755.9 to 825 mm^2 for a truth of 756)
    # the NLP's values and covariance stand, and the free run says how far the model is off.
    # A smaller model error, s^2 2-3 (the mu = 0.9 throw's IRC frames at 1/1200 s), left
    # restitution 8-40 of its std off under the former limit 4 (MODEL_ERROR_LIMIT, which
    # tolerates a stated noise off by 2x and still decides the NLP's refit).
    accepted = oe.kept
    oe_difference = None
    if accepted:
        values = oe.values
        std_jm, std_eps = oe.std["J_over_m"], oe.std["restitution"]
        if not hold_mu:
            std_mu = oe.std["mu"]
            friction = friction | {"value": values["mu"]}
        # The kept fit's std widened in quadrature by its difference from the estimators it
        # started from, which other model errors bias (the NLP's J/m and mu on its 1 ms
        # grid, the frames' restitution): its Gauss-Newton std is the width of the valley
        # where its LM stopped, and that stop need not be a minimum (varied throw 1: J/m,
        # mu and restitution z +6.6, +11.6 and -17.9 with it; +0.51, +1.87, -1.33 widened
        # and with a competing basin's spread; docs/validation.md, "The output error on
        # varied throw 1").
        oe_difference = output_error_difference(values, start_values, eps["value"] is not None)
        std_jm = math.hypot(std_jm, oe_difference["J_over_m"])
        std_eps = math.hypot(std_eps, oe_difference["restitution"])
        if not hold_mu:
            std_mu = math.hypot(std_mu, oe_difference["mu"])
    else:
        # The frames' restitution is reported: where the flights cannot read a landing (two
        # contacts within a frame interval or two) a fit of the IRC model over its frames
        # replaces the frame difference (drop_landings; over 50 varied sliding throws the
        # error's sd 0.052 -> 0.015, its median |error| 0.024 -> 0.003). Not where the
        # output error is kept: its restitution is reported, and the flights' start serves it.
        if given_eps is None:
            contact = {"J_over_m": fit.j_over_m, "mu": fit.mu}
            eps = drop_landings.landings_restitution(t_m, q_m, geometry, found, contact,
                                                     progress)  # fmt: skip
        values = start_values | {"restitution": eps["value"] if eps["value"] is not None else 0.0}
        std_eps = eps["std"] if eps["std"] is not None else math.inf
    boot, correction, wall = None, None, None
    if not accepted and bootstrap is not None:
        # The NLP's values are reported: their std is the refits' spread (J/m, mu), and
        # their bias as the refits show it is removed (``bias_correction``).
        boot = bootstrap()
        std_jm, std_mu = (float(v) for v in boot.std)
        friction = friction_report(fit, settings, std_mu)
        correction = bias_correction(boot, jm_bound == "", friction["identifiable"])
        values = values | correction["values"]
        std_jm, std_mu = correction["std"]
        wall = boot.extra.get("mu_wall")
        if not (friction["identifiable"] and wall_usable(wall)):
            wall = None
        if wall is not None:
            # mu at the wall of the profile, its std the refits' walls' spread
            # (``bootstrap.WallDraws``): the fit's own mu and its bias correction follow the
            # noise's tilt of the floor above the wall (docs/validation.md, "mu at the wall":
            # on the Section 6.1 throw the error's RMS 0.0051 -> 0.0027).
            values = values | {"mu": wall.value}
            std_mu = wall.std
        if friction["identifiable"]:
            friction = friction | {"value": values["mu"]}
    given, allowance = allowance, None
    if not accepted and model_error:
        # J/m's and mu's std widened by the size of the NLP's model error against rigid
        # contact (``drop_checks.model_error_allowance``), which neither the refits of the
        # NLP's own prediction nor its linearization see. Over 100 noise draws of the
        # Section 6.1 throw (seeds 0-99) the bias-corrected bootstrap puts J/m within 1 / 2
        # std in 64 / 92 % without it and 77 / 95 % with it, mu 62 / 91 % and 66 / 95 %;
        # where nothing slides (mu = 0.9, 20 draws) J/m 60 / 90 % and 60 / 95 %
        # (docs/validation.md, "The ellipse drop's std"). mu's only where it slides: else
        # it is a lower bound with no std.
        allowance = given or drop_checks.model_error_allowance(
            fit, geometry, settings, start_values
        )
        if allowance is not None:
            std_jm = math.hypot(std_jm, allowance["J_over_m"])
            if friction["identifiable"]:
                std_mu = math.hypot(std_mu, allowance["mu"])
    # Competing local minima of the multi-start: widen the std to cover them, and name them.
    best = drop_checks.objective_point(fit, settings)
    own_std = [std_jm, std_mu if friction["identifiable"] else math.inf]
    competing = drop_checks.basins(starts, best, own_std)
    (std_jm, std_mu), far = drop_checks.basin_spread([fit.j_over_m, fit.mu], own_std, competing)
    if wall is not None:
        # mu read at the wall, the lowest mu the data accept: a competing minimum below the
        # fit would put its own wall about as far below (each wall lies 0.002-0.01 below its
        # minimum), one above it cannot lower it (the MuJoCo drop3, mu = 0.3: the fit 0.3038,
        # a second start 0.3079, the wall 0.3000), so only those below widen mu's std.
        below = [b for b in competing if b["mu"] < fit.mu]
        (_, std_mu), far_mu = drop_checks.basin_spread([fit.j_over_m, fit.mu], own_std, below)
        far = np.array([far[0], far_mu[1]])
    source = "output error" if accepted else "bootstrap" if boot else "linearized"
    return Reported(
        values={
            "J_over_m": values["J_over_m"],
            "mu": friction["value"],
            "restitution": values["restitution"],
        },
        std={
            "J_over_m": float(std_jm),
            "mu": float(std_mu) if friction["identifiable"] else math.inf,
            "restitution": float(std_eps),
        },
        model=dict(values),
        source=source,
        oe=oe,
        accepted=bool(accepted),
        friction=friction,
        jm_bound=jm_bound,
        mu_bound=mu_bound,
        boot=boot,
        correction=correction,
        eps=eps,
        competing=competing,
        far=far,
        allowance=allowance,
        wall=wall,
        oe_difference=oe_difference,
    )


def output_error_difference(values: dict, start: dict, frames_eps: bool) -> dict:
    """|``values`` − ``start``| per parameter (J_over_m m², mu, restitution): a kept output
    error's difference from the NLP's J/m and mu and the frames' restitution it started
    from (0 for the restitution where the frames give none, ``frames_eps`` false)."""
    difference = {k: abs(float(values[k]) - float(start[k])) for k in ("J_over_m", "mu")}
    difference["restitution"] = (
        abs(float(values["restitution"]) - float(start["restitution"])) if frames_eps else 0.0
    )
    return difference


def wall_usable(wall) -> bool:
    """Whether a bootstrap's wall of the profile in mu (``bootstrap.WallDraws``, or None)
    gives mu and its std: the fit's profile rose by the wall's rise and enough refits' did."""
    return wall is not None and wall.value is not None and math.isfinite(wall.std)


def _oe_refusal(oe) -> str:
    """Why the output-error fit's numbers are not the reported ones."""
    if oe.on_bound:
        return (
            f"not used: {', '.join(oe.on_bound)} ended on its box (no std there); the NLP's "
            "values and covariance are reported"
        )
    return (
        f"not used: its residual variance factor {oe.residual_variance_factor:.3g} exceeds "
        f"{oe.s2_limit:.3g}, chi^2's {100 * (1 - drop_checks.OE_MODEL_ERROR_P):g} % point for "
        f"{oe.n_obs} observations at the stated noise (the IRC model's free run does not "
        "follow these frames to their noise: a model error, or frames noisier than stated); "
        "the NLP's values and covariance are reported"
    )


def build_estimate(spec, fit, ident, cov, ellipse, settings, frames, context) -> Estimate:
    """``Estimate`` with the values and std of :func:`reported_values`, the run's status, the
    parameters' flags (``estimation.flags``), the prediction checks by IRC and plain-list
    ``extra``."""
    m = ellipse.m
    t_m, q_m = frames
    geometry = context["geometry"]
    status = drop_checks.ipopt_status(fit)
    excited = bool(ident.get("identifiable", False))
    model_error = context.get("model_error", CovarianceChoice.model_error)
    rep = reported_values(fit, t_m, q_m, geometry, settings, cov,
                          context.get("impacts_seen", []), context.get("starts", []),
                          context.get("bootstrap"), model_error=model_error,
                          progress=context.get("landing_progress"))  # fmt: skip
    values, friction, eps, oe = rep.model, rep.friction, rep.eps, rep.oe
    accepted, boot, correction, competing = rep.accepted, rep.boot, rep.correction, rep.competing
    jm_bound, mu_bound = rep.jm_bound, rep.mu_bound
    start = (oe.q0, oe.v0) if accepted else None
    params = flag_parameters(
        ("J_over_m", "mu", "restitution"),
        [rep.values["J_over_m"], rep.values["mu"], rep.values["restitution"]],
        [rep.std["J_over_m"], rep.std["mu"], rep.std["restitution"]],
        {"J_over_m": "m^2", "mu": "1", "restitution": "1"},
        status,
        at_bound=[jm_bound, "" if friction["sliding_steps"] == 0 else mu_bound, ""],
        lower_bound=[False, friction["sliding_steps"] == 0, False],
        unexcited={} if excited else {"J_over_m": "no angular velocity jump at any contact"},
    )
    params = multimodal_flags(params, rep.far, competing)
    ident = dict(ident)
    ident["basins"] = {
        "multimodal": bool(competing),
        "competing": competing,
        "threshold_delta_chi2": drop_checks.BASIN_CHI2,
        "solutions": sum(len(s.get("solutions", [])) for s in context.get("starts", [])),
        "note": "converged solutions of the multi-start (J/m and mu) whose objective lies "
        "within threshold / 2 of the fit's (chi^2 with 2 degrees of freedom at 95 %) and "
        "whose J/m or mu differs by more than a std: the std is widened to cover them "
        "(sqrt(std^2 + (d/2)^2)), and a parameter they move by more than 2 std is not "
        "identifiable",
    }
    ident["mu"] = friction | {
        "note": "identified from sliding contact steps"
        if friction["identifiable"]
        else "no contact step slides: mu is only bounded below by max |c_t|/c_n",
    }
    if rep.wall is not None:
        ident["mu"] |= {
            "nlp_value": fit.mu,
            "wall": rep.wall.to_dict() | {"rise": WALL_RISE},
            "note": "identified from sliding contact steps; the value is the wall of the "
            f"NLP's profile in mu (twice the objective risen by {WALL_RISE:g} below the fit), "
            "the std the spread of the bootstrap refits' own walls",
        }
    ident["restitution"] = eps | {
        "note": "each impact's from the ballistic flights either side of it at the impact "
        "instant where they meet, else (where the output error is not kept) from a fit of "
        "the IRC model over the landing's frames where it follows them to their noise, else "
        "from frame differences across it (each impact's 'source'); pooled"
    }
    ident["output_error"] = oe.to_dict() | {
        "accepted": accepted,
        "difference": rep.oe_difference,
        "note": "the reported values and std" if accepted else _oe_refusal(oe),
    }
    checked = (True, friction["identifiable"])  # a bound-only mu has no std to trust
    ident["covariance"] = covariance_report(
        cov, ("J_over_m", "mu"), (fit.j_over_m, fit.mu), checked
    )
    ident["covariance"]["note"] = "the NLP's linearized covariance (its values: nlp_values)"
    covariance_used = rep.source
    if boot is not None:
        ident["covariance"]["bootstrap"] = boot.to_dict()
    ident["covariance_source"] = {  # the report's sentence under the correlation matrix
        "output error": "the output-error fit's covariance (Gauss-Newton, with batch means)",
        "bootstrap": f"the spread of the parametric bootstrap's "
        f"{int(boot.success.sum()) if boot else 0} refits of the NLP",
        "linearized": "the NLP's linearized covariance (implicit function theorem)",
    }[covariance_used]
    ident["nlp_values"] = {"J_over_m": fit.j_over_m, "mu": fit.mu}
    ident["impacts_seen_in_frames"] = context.get("impacts_seen", [])
    n_frames = len(fit.frame_index)
    predictions = drop_checks.predictions(
        fit, t_m, q_m, geometry, settings, m, values, Path(str(context["path"])).name, start
    )
    covers = _STD_COVERS if accepted else _STD_COVERS_BOOT if boot else _STD_COVERS_NLP
    if boot is not None:
        covers = covers.format(draws=int(boot.success.sum()), requested=len(boot.success))
    if rep.wall is not None:
        covers += _STD_COVERS_WALL
    if rep.allowance is not None:
        which = "J/m and mu" if friction["identifiable"] else "J/m"
        covers += _STD_COVERS_ALLOWANCE.format(which=which)
    checked_fit = validation(status, predictions, params, {}, covers)
    return Estimate(
        rig=spec.name,
        solver="ipopt (casadi) NLP (27), l1 complementarity penalty",
        parameters=params,
        cost=fit.cost_fit / max(n_frames, 1),
        iterations=fit.iterations,
        converged=status.converged,
        history=[],
        settings={
            "h_max": settings.h_max,
            "sigma_pos": settings.sigma_pos,
            "sigma_theta": settings.sigma_theta,
            "rho": settings.rho,
            "mu_pull": settings.mu_pull,
            "friction_raise": settings.friction_raise,
            "mass_fixed": m,
            "frames": n_frames,
            "frames_skipped_missing": context["skipped"],
            "data": str(context["path"]),
            "ground": context["ground"],
            "ground_length": context.get("ground_length"),
            "noise_from": context.get("noise", "the spec [method]"),
            "window_s": context.get("window"),
            "ipopt_status": fit.status,
            "wall_s": fit.wall_s,
            "j_over_m_starts": context.get("starts", []),
            **fit.stats,
        },
        covariance=reported_covariance(
            oe.covariance[:2, :2]
            if accepted
            else _draws_covariance(boot, rep.wall)
            if boot is not None
            else cov["covariance"],
            [params["J_over_m"].std, params["mu"].std],
        ).tolist(),
        identifiability=ident,
        extra={
            **fit_extra(fit, m, t_m, q_m),
            "covariance": covariance_summary(covariance_used, boot, context.get("bootstrap"))
            | ({"bias_correction": correction} if correction is not None else {})
            | ({"model_error_allowance": rep.allowance} if rep.allowance is not None else {}),
            "prediction_series": [p.series() for p in predictions],
        },
        status=status.to_dict(),
        validation=checked_fit,
    )


def multimodal_flags(params: dict, far, competing: list[dict]) -> dict:
    """``params`` with J/m and mu not identifiable where a competing basin
    (``drop_checks.basins``) moves them by more than 2 std (``far`` [2], from
    ``drop_checks.basin_spread``); the reason names the other values."""
    out = dict(params)
    for name, is_far in zip(("J_over_m", "mu"), far, strict=True):
        if is_far and out[name].identifiable:
            scale, unit = (1e6, " mm^2") if name == "J_over_m" else (1.0, "")
            alt = ", ".join(f"{b[name.lower()] * scale:.4g}" for b in competing)
            out[name] = replace(
                out[name],
                identifiable=False,
                reason=f"multimodal: another local minimum ({alt}{unit}) fits the frames as "
                f"well (twice the objective within {drop_checks.BASIN_CHI2:g} of the fit's)",
            )
    return out


def bias_correction(boot, jm_inside: bool, mu_identified: bool) -> dict:
    """The bootstrap's bias-corrected J/m and mu (``Bootstrap.corrected``: 2 fit − median
    of the refits) with their std (``std_corrected``), for ``extra.covariance``: {values,
    std, uncorrected, bias, applied}. J/m is corrected only inside its box, mu only where it
    is identified (where nothing slides its value is a lower bound, no estimate). Why: over
    20 noise draws of the mu = 0.3 throw the refits repeat the NLP's own bias under noise
    (docs/validation.md, "The ellipse drop's std")."""
    applied = (jm_inside, mu_identified)
    corrected, std = boot.corrected, boot.std_corrected
    names = ("J_over_m", "mu")
    ok = [bool(a and np.isfinite(corrected[i])) for i, a in enumerate(applied)]
    return {
        "values": {n: float(corrected[i]) for i, n in enumerate(names) if ok[i]},
        "std": tuple(float(std[i] if ok[i] else boot.std[i]) for i in range(2)),
        "uncorrected": {n: float(boot.center[i]) for i, n in enumerate(names)},
        "bias": {
            n: float(b) if np.isfinite(b) else None for n, b in zip(names, boot.bias, strict=True)
        },
        "applied": dict(zip(names, ok, strict=True)),
        "method": "value = 2 fit - median of the refits; std = the refits' spread "
        "x sqrt(1 + pi / (2 n)) (the median's Monte Carlo error)",
    }


def reported_covariance(cov, std) -> np.ndarray:
    """``cov`` [2, 2] of J/m (m^2) and mu (the output error's, the refits' or the NLP's:
    the std's source) rescaled to the reported ``std`` [2], its correlation kept: the
    reported std is that source's widened (the model-error allowance, competing basins, a
    kept output error's difference from its start, the bias correction's Monte Carlo
    error), and estimate.json's covariance must not give a user another std. A parameter
    with no finite std (mu a lower bound) has an infinite variance and no covariance
    (NaN: null in estimate.json); so has a pair whose source has no finite correlation."""
    std = np.asarray(std, float)
    _, corr = std_and_correlation(cov)
    np.fill_diagonal(corr, 1.0)
    scaled = corr * np.outer(std, std)
    scaled[~np.isfinite(scaled)] = np.nan
    diagonal = np.diag_indices_from(scaled)
    scaled[diagonal] = std**2
    return scaled


def _draws_covariance(boot, wall=None) -> np.ndarray:
    """Sample covariance [2, 2] of the successful bootstrap refits (J/m, mu): mu the refits'
    walls of the profile in mu where the reported mu is the wall (``wall``, a
    ``bootstrap.WallDraws``)."""
    draws = boot.draws if wall is None else np.column_stack([boot.draws[:, 0], wall.draws])
    good = draws[boot.success & np.all(np.isfinite(draws), axis=1)]
    if len(good) < MIN_DRAWS:
        return np.full((2, 2), np.inf)
    return np.cov(good, rowvar=False, ddof=1)


def covariance_summary(used: str, boot, requested) -> dict:
    """Which covariance gave the reported std (``extra["covariance"]``): "output error",
    "bootstrap" or "linearized", and for the bootstrap its draws and their spread."""
    out = {"used": used, "bootstrap_requested": requested is not None}
    if boot is not None:
        out |= {
            "draws": int(len(boot.success)),
            "draws_succeeded": int(boot.success.sum()),
            "seed": boot.seed,
            "std": [float(v) for v in boot.std],
            "interval_95": boot.interval.tolist(),
            "wall_s": boot.wall_s,
            "cpu_s": boot.cpu_s,
        }
    elif requested is not None:
        out["note"] = "not run: the output-error values and std are reported"
    return out


def covariance_report(cov: dict, names, values, checked) -> dict:
    """SVD of the parameter correlation matrix, std and the residual variance factor.

    ``std_reliable`` is false where the std of an identified parameter (``checked``)
    exceeds its value: the linearization then met degenerate complementarity rows (seen at
    30 fps in the Table 1 sweep, with J/m itself within 2 %), and the std is no confidence
    interval (docs/planar-contact.md).
    """
    std, corr = std_and_correlation(cov["covariance"])
    finite = bool(np.all(np.isfinite(corr)))
    sv = np.linalg.svd(corr, compute_uv=False).tolist() if finite else None
    mask = np.asarray(checked, bool)
    ok = np.isfinite(std) & (std < np.abs(np.asarray(values, float)))
    reliable = bool(np.all(ok[mask]))
    return {
        "parameters": list(names),
        "std": std.tolist(),
        "std_reliable": reliable,
        "correlation": corr.tolist() if finite else None,
        "correlation_singular_values": sv,
        "residual_variance_factor": cov["residual_variance_factor"],
        "n_eff": cov["n_eff"],
        "n_obs": cov["n_obs"],
        "method": "linearized (implicit function theorem on IPOPT's KKT system), "
        "scaled by chi^2 / (n_obs - n_eff)",
    }


def fit_extra(fit, m: float, t_m, q_m) -> dict:
    """What a report plots, as plain lists: fine grid, fitted poses, impulses, frames."""
    return {
        "t": fit.t.tolist(),
        "x": fit.q[:, 0].tolist(),
        "y": fit.q[:, 1].tolist(),
        "theta": fit.q[:, 2].tolist(),
        "vx": fit.v[:, 0].tolist(),
        "vy": fit.v[:, 1].tolist(),
        "omega": fit.v[:, 2].tolist(),
        "impulse_t": fit.t[1:].tolist(),
        "cn": (fit.pn * m).tolist(),
        "ct": (fit.pt * m).tolist(),
        "lambda": fit.lam.tolist(),
        "frame_t": np.asarray(t_m).tolist(),
        "frame_x": np.asarray(q_m)[:, 0].tolist(),
        "frame_y": np.asarray(q_m)[:, 1].tolist(),
        "frame_theta": np.asarray(q_m)[:, 2].tolist(),
        "units": {
            "t": "s",
            "x": "m",
            "y": "m",
            "theta": "rad",
            "vx": "m/s",
            "vy": "m/s",
            "omega": "rad/s",
            "cn": "N s (impulse over (t[k], t[k+1]], at impulse_t = t[k+1]; mass fixed at m)",
            "ct": "N s, along the ground tangent d+",
            "lambda": "m/s (slip speed, eq. 18)",
        },
        "cost_gamma": fit.cost_gamma,
        "J": fit.j_over_m * m,
    }


def plot_fit(path: Path, t_m, q_m, fit, m: float) -> Path:
    """Measured vs fitted poses and the identified impulses."""
    fig, axes = pyplot().subplots(4, 1, figsize=(8, 10), sharex=True)
    for j, (name, unit) in enumerate(zip(POSE_CHANNELS, ("m", "m", "rad"), strict=True)):
        axes[j].plot(t_m, q_m[:, j], ".", ms=3, label="measured")
        axes[j].plot(fit.t, fit.q[:, j], "-", lw=1, label="fitted")
        axes[j].set_ylabel(f"{name} ({unit})")
    axes[0].legend()
    axes[3].plot(fit.t[1:], fit.pn * m, label="c_n")
    axes[3].plot(fit.t[1:], fit.pt * m, label="c_t")
    axes[3].set_ylabel("impulse (N s)")
    axes[3].set_xlabel("t (s)")
    axes[3].legend()
    title = f"J/m = {fit.j_over_m * 1e6:.1f} mm^2, mu = {fit.mu:.3f}"
    return save_figure(fig, path, title, dpi=90)
