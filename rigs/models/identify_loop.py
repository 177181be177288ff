"""``[rig] model = "loop"``: ``physid simulate`` and ``physid identify`` of a flexible loop
(``rigs.models.loop``) by single shooting (``estimation.shooting``).

The loop starts at rest in its closed rest shape (q = 0) at the first row of a log or the
first frame of a video, under the loads of the spec's ``[loads]`` table. Its stiffness groups
(``[groups]``, one κ each) are identified by a Levenberg–Marquardt fit of a rollout of the
variational integrator to the measurements, the Jacobian by forward sensitivities (the
implicit-function theorem per step, docs/variational.md):

- from a log (``physid simulate`` writes one): the measured point's world position (the
  first load's point, m) per row and the force applied over the step that starts at that row
  (N, world components): the recorded input;
- from a video (``identify_loop_video``): the tracked pixel centres of ArUco markers fixed on
  the loop's bodies (the spec's ``[video]`` table), against the projection of the markers'
  forward kinematics through the camera model (``estimation.markers.project``); the force is
  then the spec's waveform from the first frame on. The camera's pose is fitted with κ (its
  start from the first frame, where the shape is known: the rest shape).

Each residual is weighted by its measurement's std (``[method] sigma_pos`` for positions,
``[video] noise`` for pixels). The reported std is the Gauss–Newton covariance scaled by the
residuals' own variance s² = ‖r‖²/(m − p) (``ShootingResult.covariance``), so a misstated
noise level does not make it wrong.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import physid.dynamics  # noqa: F401  (float64)
from physid.dynamics.variational import constrained
from physid.dynamics.variational.kinematics import world_poses
from physid.errors import InputError
from physid.estimation.estimate import Estimate, Result, Status, write_json_atomic
from physid.estimation.flags import bound_flags, flag_parameters
from physid.estimation.markers import project
from physid.estimation.prediction import Channel, Prediction
from physid.estimation.shooting import ShootingResult, levenberg_marquardt
from physid.estimation.validation import validation
from physid.files import atomic_open
from physid.rigs.models.kinds import SimulateOptions
from physid.rigs.models.loop import LoopRig, end_effector, load_loop
from physid.spec import RigSpec

LOG_COLUMNS = ("t", "x", "y", "z", "Fx", "Fy", "Fz")
METHOD_KEYS = ("h", "sigma_pos", "max_iter")
SIGMA_POS = 1e-3  # m: default std of a logged position (a robot's end-effector reading)
MAX_ITER = 30  # LM iterations; the noise-free hexagon converges in 7 (docs/variational.md)
# A log's rows must lie on one grid: a spacing that differs from the first by more than this
# fraction is a dropped or repeated row, which the integrator's fixed step cannot follow.
GRID_TOL = 1e-6


# ------------------------------------------------------------------ settings and logs


def loop_settings(spec: RigSpec, rig: LoopRig) -> dict:
    """``[method]`` of a loop rig (SI): h (s, default the spec's ``[simulation] h``), sigma_pos
    (m, default 1 mm) and max_iter; a misspelled key is an error."""
    spec.check_keys("method", METHOD_KEYS)
    h = spec.method_value("h", "s", rig.h)
    sigma = spec.method_value("sigma_pos", "m", SIGMA_POS)
    max_iter = int(spec.method_value("max_iter", "1", MAX_ITER))
    for key, value in (("h", h), ("sigma_pos", sigma), ("max_iter", max_iter)):
        if not value > 0:
            raise spec.error(f"method.{key}", f"must be positive, got {value:g}")
    return {"h": h, "sigma_pos": sigma, "max_iter": max_iter}


def rig_of(spec: RigSpec) -> LoopRig:
    """The loop rig of ``spec``; its stiffness groups must each be a ``[parameters]`` entry
    (``load_loop`` checks) and ``[parameters]`` must hold nothing else (single shooting
    identifies the stiffnesses only)."""
    groups = spec.sections.get("groups", {})
    others = [k for k in spec.parameters if k not in groups]
    if others:
        raise spec.error(
            "parameters",
            f"{', '.join(others)}: a loop rig identifies its stiffness groups only "
            f"({', '.join(groups) or 'none in [groups]'}); move the others to [fixed]",
        )
    return load_loop(spec)


@dataclass(frozen=True)
class LoopLog:
    """A loop log: times t[n] (s), measured point positions[n, 3] (m, NaN where absent) and
    forces[n, 3] (N) applied over the step that starts at each row."""

    path: Path
    t: np.ndarray
    positions: np.ndarray
    forces: np.ndarray

    @property
    def h(self) -> float:
        return float(self.t[1] - self.t[0])


def write_loop_log(path: Path, t, positions, forces, note: str = "") -> Path:
    """CSV with the header ``t,x,y,z,Fx,Fy,Fz`` (s, m, N); ``note`` becomes # comment lines."""
    rows = np.column_stack([t, positions, forces])
    with atomic_open(path) as fh:
        for line in note.splitlines():
            fh.write(f"# {line}\n")
        fh.write(",".join(LOG_COLUMNS) + "\n")
        for row in rows:
            fh.write(",".join(repr(float(v)) for v in row) + "\n")
    return Path(path)


def read_loop_log(path: Path) -> LoopLog:
    """Read a loop log (``write_loop_log``'s format; ``#`` lines are comments, an empty
    position field is a missing sample). Errors name the file and line."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read the loop log: {exc}") from None
    body = [(i, s) for i, s in enumerate(lines, 1) if s.strip() and not s.startswith("#")]
    if not body:
        raise InputError(f"{path}: empty; a loop log has the header {','.join(LOG_COLUMNS)}")
    head_line, head = body[0][0], [c.strip() for c in body[0][1].split(",")]
    missing = [c for c in LOG_COLUMNS if c not in head]
    if missing:
        raise InputError(
            f"{path}: line {head_line}: no column {', '.join(missing)}; a loop log has the "
            f"columns {','.join(LOG_COLUMNS)} (s, m, N; from physid simulate of a loop rig)"
        )
    cols = [head.index(c) for c in LOG_COLUMNS]
    rows = []
    for lineno, line in body[1:]:
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != len(head):
            raise InputError(f"{path}: line {lineno}: {len(fields)} fields, header has {len(head)}")
        try:
            rows.append([float(fields[c]) if fields[c] else np.nan for c in cols])
        except ValueError:
            raise InputError(f"{path}: line {lineno}: not a row of numbers: {line!r}") from None
    if len(rows) < 3:
        raise InputError(f"{path}: {len(rows)} rows; a fit needs at least 3")
    data = np.array(rows)
    t = data[:, 0]
    if not np.all(np.isfinite(t)) or not np.all(np.isfinite(data[:-1, 4:])):
        bad = int(np.flatnonzero(~np.all(np.isfinite(data[:-1, [0, 4, 5, 6]]), axis=1))[0])
        raise InputError(f"{path}: line {body[bad + 1][0]}: t and the force must be numbers")
    dt = np.diff(t)
    off = np.flatnonzero(np.abs(dt - dt[0]) > GRID_TOL * abs(dt[0]))
    if not dt[0] > 0 or off.size:
        k = int(off[0]) if off.size else 0
        raise InputError(
            f"{path}: line {body[k + 2][0]}: time step {dt[k]:.9g} s where the first is "
            f"{dt[0]:.9g} s; a loop log is one row per integrator step (no gaps or repeats)"
        )
    return LoopLog(path, t, data[:, 1:4], data[:, 4:7])


# ------------------------------------------------------------------ single shooting


def shooting_problem(rig: LoopRig, h: float, observe, n_extra: int):
    """Jitted ``(residual(θ, data), residual_jacobian(θ, data))`` of single shooting.

    θ = [κ (one per group), extra (n_extra)]; the rollout from the rest state under
    ``data["u"]`` [N, n_inputs] gives q[N + 1]; ``observe(q_k, extra, d_k)`` is the weighted
    residual rows of step k (``d_k``: row k of each other array of ``data``). The Jacobian
    pushes one tangent per κ through the rollout (``jacfwd``: forward sensitivities) and takes
    the rows' own derivatives per step, so the extra parameters (a camera pose) cost no
    rollout tangent."""
    system = rig.system
    q0, p0 = rig.start()
    nk = len(rig.parameter_names)

    def trajectory(kappa, u):
        q, _, _ = constrained.rollout(system, rig.params(kappa), q0, p0, u, h)
        return q

    def rows(q, extra, d):
        return jax.vmap(lambda qk, dk: observe(qk, extra, dk))(q, d)

    @jax.jit
    def residual(theta, data):
        d = {k: v for k, v in data.items() if k != "u"}
        return rows(trajectory(theta[:nk], data["u"]), theta[nk:], d).ravel()

    @jax.jit
    def residual_jacobian(theta, data):
        kappa, extra = theta[:nk], theta[nk:]
        d = {k: v for k, v in data.items() if k != "u"}
        dq, q = jax.jacfwd(lambda k: (trajectory(k, data["u"]),) * 2, has_aux=True)(kappa)
        r = rows(q, extra, d)
        Jq = jax.vmap(jax.jacfwd(lambda qk, dk: observe(qk, extra, dk)))(q, d)
        Jk = jnp.einsum("krn,knp->krp", Jq, dq)
        if n_extra:
            Je = jax.vmap(jax.jacfwd(observe, argnums=1), in_axes=(0, None, 0))(q, extra, d)
            Jk = jnp.concatenate([Jk, Je], axis=2)
        return r.ravel(), Jk.reshape(-1, nk + n_extra)

    return residual, residual_jacobian


def fit_shooting(residual, residual_jacobian, data, theta0, lower, upper, max_iter, say):
    """``estimation.shooting.levenberg_marquardt`` on the jitted pair, with a progress line per
    accepted iteration (from its cost history)."""
    data = jax.tree_util.tree_map(jnp.asarray, data)
    calls = {"n": 0}

    def rj(theta):
        r, J = residual_jacobian(jnp.asarray(theta), data)
        calls["n"] += 1
        say(f"  iteration {calls['n'] - 1:3d}  cost {0.5 * float(r @ r):.6e}")
        return np.asarray(r), np.asarray(J)

    def res(theta):
        return np.asarray(residual(jnp.asarray(theta), data))

    return levenberg_marquardt(rj, res, theta0, lower, upper, max_iter=max_iter)


def shooting_status(result: ShootingResult) -> Status:
    """The fit's ``Status``: successful only when the Gauss–Newton test passed at the returned
    point (``estimation.shooting.gauss_newton_test``), whatever rule stopped the LM;
    otherwise ``max_steps_reached`` at the iteration limit and ``stalled`` for any other
    stop (e.g. no decrease at maximal damping away from a minimum), the failed test named."""
    if result.converged:
        return Status(Result.successful, result.reason, result.test)
    failed = f"{result.reason}; {result.test}, which fails"
    if result.reason == "iteration limit":
        return Status(Result.max_steps_reached, failed)
    return Status(Result.stalled, failed)


def kappa_estimate(spec, rig, result: ShootingResult, status: Status, cov_kappa: np.ndarray):
    """``ParameterEstimate`` per stiffness group (N m/rad), flagged by ``flag_parameters``."""
    names = list(rig.parameter_names)
    nk = len(names)
    values = np.asarray(result.theta[:nk])
    std = np.sqrt(np.clip(np.diag(cov_kappa), 0, None)) if cov_kappa is not None else None
    ps = spec.parameters
    lower = np.array([ps[k].lower for k in names])
    upper = np.array([ps[k].upper for k in names])
    units = {k: "N m/rad" for k in names}
    return flag_parameters(
        names, values, np.full(nk, np.inf) if std is None else std, units, status,
        at_bound=bound_flags(values, lower, upper),
    )  # fmt: skip


def _bounds(spec, rig):
    ps = spec.parameters
    names = rig.parameter_names
    theta0 = np.array([ps[k].initial for k in names], float)
    lower = np.array([ps[k].lower for k in names], float)
    upper = np.array([ps[k].upper for k in names], float)
    return theta0, lower, upper


@dataclass(frozen=True)
class Observed:
    """What a shooting fit is checked against: grid times t[n] (s), the measurements
    measured[n, ...] (NaN where absent), the residual's weight (same shape, 0 where absent:
    residual = weight · (model − measured)), one ``Channel`` per measured column in the order
    of measured.reshape(n, −1), and the data's label."""

    t: np.ndarray
    measured: np.ndarray
    weight: np.ndarray
    channels: tuple[Channel, ...]
    label: str


def fit_and_report(
    spec, rig, settings, problem, data, bounds, observed: Observed, say, extra=None
) -> Estimate:
    """The one sequence of a loop fit, from a log or a video: LM on the jitted ``problem``
    (``shooting_problem``'s pair) and ``data`` from ``bounds`` (θ₀, lower, upper); its
    ``Status``, flagged κ with the fit's covariance, the free run of the identified model
    against ``observed``, the verdict and the ``Estimate``. ``extra(result) -> dict`` adds
    the estimate's extra entries (the video's camera pose)."""
    residual, residual_jacobian = problem
    theta0, lower, upper = bounds
    start = time.perf_counter()
    result = fit_shooting(
        residual, residual_jacobian, data, theta0, lower, upper, settings["max_iter"], say
    )
    say(f"LM {result.reason} after {result.iterations} iterations, {_since(start)}")
    status = shooting_status(result)
    cov = result.covariance
    parameters = kappa_estimate(spec, rig, result, status, cov)
    n = len(observed.t)
    predicted = _unweighted(residual, result.theta, data, observed.measured, observed.weight)
    measured = observed.measured.reshape(n, -1)
    prediction = _free_run(
        observed.t, predicted.reshape(n, -1), measured, observed.channels, observed.label
    )
    ratio = prediction.rms / np.array([c.noise for c in observed.channels])
    worst = int(np.argmax(ratio))
    say(
        f"  free run: worst RMS {prediction.rms[worst]:.3g} {observed.channels[worst].unit} "
        f"({observed.channels[worst].name}, {ratio[worst]:.2g} × noise)"
    )
    checked = validation(status, [prediction], parameters, None, _covers(settings["h"]))
    say(f"verdict: {checked['summary']}")
    more = extra(result) if extra is not None else None
    return _estimate(spec, result, status, parameters, cov, checked, n, settings, prediction, more)


# ------------------------------------------------------------------ from a log


def identify_log_series(spec: RigSpec, log: LoopLog, say=lambda _l: None) -> Estimate:
    """Identify the stiffness groups from a loop log (measured point positions, recorded
    force). No file I/O beyond what the caller read."""
    rig = rig_of(spec)
    settings = loop_settings(spec, rig)
    h = log.h
    if abs(h - settings["h"]) > GRID_TOL * settings["h"] and "h" in spec.method:
        raise InputError(
            f"{log.path}: rows every {h:.9g} s, but [method] h = {settings['h']:g} s; the "
            "loop's integrator steps once per row: remove [method] h or resample the log"
        )
    if not rig.system.loads:
        raise spec.error("loads", "a loop rig needs a load: its point is the measured one")
    sigma = settings["sigma_pos"]
    y = np.nan_to_num(log.positions)
    w = np.where(np.isfinite(log.positions), 1.0 / sigma, 0.0)
    n = len(log.t)
    u = np.concatenate([np.zeros((n - 1, rig.system.tree.n_actuators)), log.forces[:-1]], axis=1)
    base = rig.closed.params

    def observe(qk, extra, d):
        point = constrained.load_points(rig.system, base, qk)[0]
        return d["w"] * (point - d["y"])

    problem = shooting_problem(rig, h, observe, 0)
    names = rig.parameter_names
    say(
        f"identifying {', '.join(names)} by single shooting from {log.path.name}: {n - 1} steps "
        f"of {h:g} s, position std {sigma * 1e3:g} mm"
    )
    observed = Observed(
        log.t, log.positions, w, tuple(Channel(c, "m", sigma) for c in ("x", "y", "z")),
        log.path.name,
    )  # fmt: skip
    return fit_and_report(
        spec, rig, settings, problem, {"u": u, "y": y, "w": w}, _bounds(spec, rig), observed, say
    )


def _since(start: float) -> str:
    return f"{time.perf_counter() - start:.1f} s"


def _rollout(rig: LoopRig, theta, u, h) -> np.ndarray:
    q0, p0 = rig.start()
    nk = len(rig.parameter_names)
    run = jax.jit(lambda k, uu: constrained.rollout(rig.system, rig.params(k), q0, p0, uu, h)[0])
    return np.asarray(run(jnp.asarray(theta[:nk]), jnp.asarray(u)))


def _unweighted(residual, theta, data, measured, weight) -> np.ndarray:
    """The model's prediction where a sample was measured (NaN elsewhere): measured + r/w
    from the fit's own compiled residual (no second compilation of the rollout)."""
    r = np.asarray(residual(jnp.asarray(theta), jax.tree_util.tree_map(jnp.asarray, data)))
    r = r.reshape(np.shape(measured))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(weight > 0, measured + r / weight, np.nan)


def _free_run(t, predicted, measured, chans, label) -> Prediction:
    """The check of a shooting fit: the identified model simulated from the known start over
    the whole record (a free run; the fit has no other state to start from)."""
    present = np.isfinite(measured)
    err = np.where(present, predicted - np.nan_to_num(measured), 0.0)
    count = present.sum(axis=0)
    rms = np.sqrt((err**2).sum(axis=0) / np.maximum(count, 1))
    return Prediction(
        "free run", label, len(t) - 1, chans, np.asarray(t) - t[0], predicted, rms, count,
        None, ["from the rest state at the first sample, the recorded input"], rms,
        np.where(present, measured, np.nan),
    )  # fmt: skip


def _covers(h: float) -> str:
    return (
        "The std is the Gauss–Newton covariance of the shooting fit scaled by the residuals' "
        "own variance; it does not cover the discretization error of h = "
        f"{h:g} s, errors of the fixed values (masses, lengths) or of the known start."
    )


def _estimate(spec, result, status, parameters, cov, checked, n, settings, prediction, extra=None):
    nk = len(parameters)
    return Estimate(
        rig=spec.name,
        solver=(
            "single-shooting levenberg-marquardt on the constrained variational integrator "
            "(forward sensitivities)"
        ),
        parameters=parameters,
        cost=result.cost / n,
        iterations=result.iterations,
        converged=status.converged,
        history=[c / n for c in result.history],
        settings={k: v for k, v in settings.items()},
        covariance=None if cov is None else np.asarray(cov)[:nk, :nk].tolist(),
        extra={
            "stop_reason": result.reason,
            "evaluations": result.evaluations,
            "prediction_series": [prediction.series()],
            **(extra or {}),
        },
        status=status.to_dict(),
        validation=checked,
    )


# ------------------------------------------------------------------ from a video


@dataclass(frozen=True)
class LoopMarkers:
    """Markers on the loop: ``body[m]`` tree body indices, ``points[m, 3]`` their centres in
    the body frames (m), ``noise_px`` the std of a tracked centre (px)."""

    body: tuple[int, ...]
    points: np.ndarray
    noise_px: float


def marker_positions(rig: LoopRig, markers: LoopMarkers, q) -> jnp.ndarray:
    """World positions [m, 3] (m) of the marker centres at configuration q."""
    R, p = world_poses(rig.system.tree, rig.closed.params, q)
    idx = jnp.asarray(markers.body)
    return jnp.einsum("mij,mj->mi", R[idx], jnp.asarray(markers.points)) + p[idx]


def rotation(rvec):
    """Rotation matrix of a rotation vector (rad), Rodrigues' formula; smooth at 0."""
    a2 = rvec @ rvec
    small = a2 < 1e-16
    a = jnp.sqrt(jnp.where(small, 1.0, a2))
    s = jnp.where(small, 1.0 - a2 / 6.0, jnp.sin(a) / a)
    c = jnp.where(small, 0.5 - a2 / 24.0, (1.0 - jnp.cos(a)) / jnp.where(small, 1.0, a2))
    x, y, z = rvec
    K = jnp.array([[0.0, -z, y], [z, 0.0, -x], [-y, x, 0.0]])
    return jnp.eye(3) + s * K + c * (K @ K)


def camera_pose_at_rest(rig: LoopRig, markers: LoopMarkers, camera, uv0, seen0, where: str):
    """(rvec, t_cw) of the camera from one frame of the loop at its rest shape: OpenCV's
    planar PnP on the undistorted marker centres (at least 4 seen)."""
    import cv2

    if int(np.sum(seen0)) < 4:
        raise InputError(
            f"{where}: {int(np.sum(seen0))} markers seen in the first frame; the camera's pose "
            "is found from the loop at rest there and needs at least 4"
        )
    pw = np.asarray(marker_positions(rig, markers, jnp.zeros(rig.system.n_dof)))[seen0]
    xn = camera.normalize(uv0[seen0])
    ok, rvec, tvec = cv2.solvePnP(
        pw, xn, np.eye(3), None, flags=cv2.SOLVEPNP_IPPE if len(pw) >= 4 else 0
    )
    if not ok:
        raise InputError(f"{where}: no camera pose fits the first frame's markers")
    return rvec.ravel(), tvec.ravel()


def identify_loop_video(
    spec: RigSpec,
    markers: LoopMarkers,
    camera,
    t_frames: np.ndarray,
    uv: np.ndarray,
    missing: np.ndarray,
    label: str,
    say=lambda _l: None,
) -> Estimate:
    """Identify the stiffness groups from tracked marker centres uv[F, m, 2] (px) at frame
    times t_frames[F] (s, 0 at the first frame, when the loop is at rest and the spec's force
    starts). The residual per frame and marker is (π(R_cw x(q_k) + t_cw) − uv)/σ_px with
    ``estimation.markers.project``; θ = [κ, camera pose offset]."""
    from physid.estimation.markers import pixels_on_grid

    rig = rig_of(spec)
    settings = loop_settings(spec, rig)
    h = settings["h"]
    t_frames = np.asarray(t_frames, float) - float(t_frames[0])
    n = int(np.floor(t_frames[-1] / h + 1e-9)) + 1
    grid = h * np.arange(n)
    sigma = float(markers.noise_px)
    uvg, weight = pixels_on_grid(grid, t_frames, uv, sigma, missing)
    if not np.any(weight[1:] > 0):
        raise InputError(f"{label}: no frame falls on the integrator grid of h = {h:g} s")
    seen0 = weight[0] > 0
    rvec0, t0 = camera_pose_at_rest(rig, markers, camera, uvg[0], seen0, label)
    pose0 = np.concatenate([rvec0, t0])
    # the spec's force at this h's step midpoints (LoopRig.inputs uses the rig's own h)
    u = LoopRig(rig.closed, rig.waveforms, h, n - 1, rig.truth).inputs()
    K, D, model = jnp.asarray(camera.K), jnp.asarray(camera.D), camera.model

    def pixels(qk, pose):
        R = rotation(pose[:3])
        xc = marker_positions(rig, markers, qk) @ R.T + pose[3:]
        return project(model, xc, K, D)

    def observe(qk, extra, d):
        # The pose enters as pose0 + (extra − 1): offsets of about 1 make the LM's relative
        # step test an absolute one (1e-12 rad, 1e-12 m), where a pose entry near 0 would
        # never pass a relative test.
        return (d["sw"][:, None] * (pixels(qk, d["pose0"] + extra - 1.0) - d["uv"])).ravel()

    problem = shooting_problem(rig, h, observe, 6)
    data = {"u": u, "uv": uvg, "sw": np.sqrt(weight), "pose0": np.tile(pose0, (n, 1))}
    k0, lower, upper = _bounds(spec, rig)
    bounds = (
        np.concatenate([k0, np.ones(6)]),
        np.concatenate([lower, np.full(6, -np.inf)]),
        np.concatenate([upper, np.full(6, np.inf)]),
    )
    frames = int(np.sum(np.any(weight > 0, axis=1)))
    say(
        f"identifying {', '.join(rig.parameter_names)} and the camera pose by single shooting "
        f"from {frames} frames of {label} ({n - 1} steps of {h:g} s), σ {sigma:g} px"
    )
    m = uv.shape[1]
    observed = Observed(
        grid,
        np.where(weight[..., None] > 0, uvg, np.nan),
        np.repeat(np.sqrt(weight)[..., None], 2, axis=-1),
        tuple(Channel(f"marker {j} {a}", "px", sigma) for j in range(m) for a in "uv"),
        label,
    )
    nk = len(rig.parameter_names)

    def camera_pose(result: ShootingResult) -> dict:
        pose = pose0 + result.theta[nk:] - 1.0
        R_cw = np.asarray(rotation(jnp.asarray(pose[:3])))
        return {"camera": {"R_cw": R_cw.tolist(), "t_cw": pose[3:].tolist(), "model": camera.model}}

    return fit_and_report(spec, rig, settings, problem, data, bounds, observed, say, camera_pose)


# ------------------------------------------------------------------ the kind's commands


def simulate(spec: RigSpec, options: SimulateOptions, console) -> dict[str, Path]:
    """``physid simulate`` of a loop rig: the rollout at ``[simulation.truth]`` from rest,
    written as a log (measured point + force), truth.json and plot.png."""
    truth = spec.sections.get("simulation", {}).get("truth", {})
    missing = [k for k in spec.sections.get("groups", {}) if k not in truth]
    if missing:
        raise spec.error(
            "simulation.truth", f"no value for {', '.join(missing)}; e.g. {missing[0]} = 20.0"
        )
    rig = rig_of(spec)
    h = options.dt or rig.h
    duration = options.duration or rig.h * rig.steps
    noise = (
        options.noise
        if options.noise is not None
        else spec.section_value("simulation", "noise", "m", 0.0)
    )
    if not (h > 0 and duration > 0 and noise >= 0):
        raise InputError(f"{spec.path}: [simulation] h and duration must be positive, noise ≥ 0")
    steps = int(round(duration / h))
    kappa = rig.true_kappa()
    console.print(f"simulating {spec.name}: {steps} variational steps of {h:g} s ...")
    q, u = simulate_loop(rig, kappa, h, steps)
    points = np.asarray(end_effector(rig, rig.closed.params, jnp.asarray(q)))
    rng = np.random.default_rng(options.seed)
    measured = points + (rng.normal(0.0, noise, points.shape) if noise > 0 else 0.0)
    t = h * np.arange(steps + 1)
    out = Path(options.out)
    out.mkdir(parents=True, exist_ok=True)
    forces = u[:, rig.system.tree.n_actuators :][:, :3]
    note = (
        f"{spec.name}: measured point (m, world) and the force held over the step from each "
        f"row (N, world); noise {noise:g} m, seed {options.seed}"
    )
    written = {"loop log": write_loop_log(out / "log.csv", t, measured, forces, note)}
    truth = {
        "rig": spec.name,
        "spec": str(spec.path),
        "parameters": dict(zip(rig.parameter_names, map(float, kappa), strict=True)),
        "h": h,
        "duration": steps * h,
        "integrator": "constrained midpoint variational",
        "noise_m": noise,
        "seed": options.seed,
    }
    written["truth"] = write_json_atomic(out / "truth.json", truth)
    written["plot"] = _plot(out / "plot.png", t, measured, forces, spec.name)
    return written


def simulate_loop(rig: LoopRig, kappa, h: float, steps: int) -> tuple[np.ndarray, np.ndarray]:
    """The rollout from rest at stiffness ``kappa`` under the spec's loads: q[steps + 1, n] and
    the inputs u[steps + 1, n_inputs] (row k held over step k; the last row is the force
    after the record, for a log's last row)."""
    rig_h = LoopRig(rig.closed, rig.waveforms, h, steps, rig.truth)
    u = np.asarray(rig_h.inputs(steps + 1), float)
    return _rollout(rig_h, np.asarray(kappa, float), u[:-1], h), u


def _plot(path: Path, t, points, forces, title: str) -> Path:
    from physid.estimation.figures import pyplot, save_figure

    plt = pyplot()
    fig, (a, b) = plt.subplots(2, 1, sharex=True, figsize=(8, 5))
    for i, c in enumerate("xyz"):
        a.plot(t, 1e3 * (points[:, i] - points[0, i]), label=c)
        b.plot(t, forces[:, i], label=f"F{c}")
    a.set_ylabel("point − start (mm)")
    b.set_ylabel("force (N)")
    b.set_xlabel("t (s)")
    a.legend()
    b.legend()
    return save_figure(fig, path, title)


def identify(spec: RigSpec, data: list[Path], out: Path, console) -> Estimate:
    """``physid identify`` of a loop rig from one log (``read_loop_log``)."""
    if len(data) != 1:
        raise InputError(f"a loop rig is identified from one log; got {len(data)} files")
    estimate = identify_log_series(spec, read_loop_log(data[0]), console.print)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    estimate.write(out / "estimate.json")
    return estimate
