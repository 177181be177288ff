"""Marker pixel rows of the generalized-coordinate estimator (issue 22): the tree's forward
kinematics through the camera of ``estimation.markers`` gives the SPOOK estimator's pixels for
the same poses, the rows' Jacobian is their derivative, and markers alone identify a
parameter."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import physid.dynamics  # noqa: F401  (float64)
from physid.dynamics import variational_friction as vf
from physid.estimation.lm import levenberg_marquardt
from physid.estimation.markers import MarkerObservations, marker_pixels
from physid.estimation.tree_problem import TreeStructure, _Model
from physid.rigs.models import furuta, pendulum
from physid.rigs.models.identify_tree import (
    build_problem,
    fitted_covariance,
    problem_lm_settings,
    tree_settings,
)
from physid.rigs.pipeline.fusion import video_markers
from physid.spec import load_spec
from physid.vision.camera import action_camera
from physid.vision.markers3d import look_at

H = 1e-3
PENDULUM_TRUTH = {"J": 0.0039, "b": 2e-4, "mu": 1.8e-3}  # pendulum.toml [simulation] truth
# Pendulum markers (body frame: origin at the centre of mass, z along the hinge), m.
POINTS = np.array([[0.0, -0.04, 0.01], [0.03, 0.02, 0.01], [-0.02, -0.07, 0.01]])


def _pendulum_camera():
    """0.35 m in front of the hinge plane, looking along −z at the swing (fisheye)."""
    R_cw = np.diag([1.0, -1.0, -1.0])
    eye = np.array([0.0, -0.08, 0.35])
    cam = action_camera(800, 600)
    return cam, R_cw, -R_cw @ eye


def test_tree_pixels_are_the_spook_pixels_of_the_same_poses():
    """The Furuta's three spec markers, seen by the sample's camera pose: the tree's body
    poses at q (``dynamics.tree.point_positions``) and the SPOOK model's zero-violation
    configuration at the same angles (``state_from_angles``) put them on the same pixels.
    Both go through ``world_pixels`` (tested against OpenCV in test_markers.py); what is
    compared is the two kinematics. 1e-9 px: the
    positions agree to round-off (~1e-16 m at 0.3 m from a ~600 px focal length)."""
    spec = load_spec("furuta")
    markers = video_markers(spec)
    rig, spook = furuta.tree_rig(spec), furuta.build(spec)
    cam = action_camera(800, 600)
    R_cw, t_cw = look_at((0.5, 0.1, 0.0), (0.15, 0.0, 0.0))  # the sample's camera
    mk = MarkerObservations(
        markers.body, markers.points, cam.K, cam.D, R_cw, t_cw,
        np.zeros((1, 3, 2)), np.ones((1, 3)), cam.model,
    )  # fmt: skip
    arrays = mk.arrays()
    model = _Model(
        TreeStructure(rig.tree, rig.make_params, (), H, rig.observed, (cam.model, mk.body))
    )
    params = rig.make_params({k: jnp.asarray(v) for k, v in rig.values.items()})
    rng = np.random.default_rng(3)
    qs = np.column_stack([rng.uniform(-np.pi, np.pi, 8), rng.uniform(-1.2, 1.2, 8)])
    # Both kinematics in one jitted program: run eagerly, their vmaps dispatched ~140 ops one
    # by one, each compiled on its own (14 s of compilation on the loaded VM).
    tree_px, spook_px = jax.jit(
        jax.vmap(
            lambda q: (
                model.marker_pixels(params, arrays, q),
                marker_pixels(cam.model, mk.body, arrays, *spook.state_from_angles(q)),
            )
        )
    )(jnp.asarray(qs))
    assert np.all(np.isfinite(tree_px)) and np.ptp(np.asarray(tree_px)) > 50  # markers move
    np.testing.assert_allclose(tree_px, spook_px, rtol=0, atol=1e-9)


def _pendulum_spec(folder: Path):
    src = Path("rigs/specs/pendulum.toml").read_text()
    path = folder / "pendulum.toml"
    path.write_text(src.replace("[method]\n", '[method]\nestimator = "tree"\n', 1))
    return load_spec(path)


def _filmed(rig, params, q: np.ndarray, noise_px: float, seed: int) -> MarkerObservations:
    """The pendulum's three markers at the positions q [N, 1], filmed at 120 fps on the
    1 kHz grid with ``noise_px`` of pixel noise (fisheye, ``_pendulum_camera``)."""
    cam, R_cw, t_cw = _pendulum_camera()
    structure = TreeStructure(rig.tree, rig.make_params, (), H, rig.observed, (cam.model, (0,) * 3))
    model = _Model(structure)
    arrays = {
        "points": jnp.asarray(POINTS), "K": jnp.asarray(cam.K), "D": jnp.asarray(cam.D),
        "R_cw": jnp.asarray(R_cw), "t_cw": jnp.asarray(t_cw),
    }  # fmt: skip
    pixels = jax.jit(jax.vmap(lambda qk: model.marker_pixels(params, arrays, qk)))  # not op by op
    px = np.asarray(pixels(jnp.asarray(q)))
    uv = px + np.random.default_rng(seed).normal(0.0, noise_px, px.shape)
    frames = np.unique(np.round(np.arange(0, len(q) * H, 1 / 120) / H).astype(int))
    weight = np.zeros((len(q), 3))
    weight[frames[frames < len(q)]] = 1 / noise_px**2
    return MarkerObservations((0, 0, 0), POINTS, cam.K, cam.D, R_cw, t_cw, uv, weight, cam.model)


@pytest.fixture(scope="module")
def pendulum_case(tmp_path_factory):
    """1.5 s of the tree simulator's pendulum (truth, h = 1e-3 s, from 1 rad), its three
    markers filmed at 120 fps with 0.3 px noise, and its spec with the tree estimator."""
    spec = _pendulum_spec(tmp_path_factory.mktemp("pendulum"))
    rig = pendulum.tree_rig(spec)
    truth = {**rig.values, **PENDULUM_TRUTH}
    params = rig.make_params({k: jnp.asarray(float(v)) for k, v in truth.items()})
    n = 1500
    q, _ = vf.rollout(
        rig.tree, params, jnp.array([1.0]), jnp.zeros(1), jnp.zeros((n, 0)), H, jnp.full(1, 4e-3)
    )
    q = np.asarray(q)
    mk = _filmed(rig, params, q, 0.3, seed=7)
    grid = np.arange(n + 1) * H
    # Markers only: the encoder rows carry weight 0; the states start from the true angles
    # with 0.01 rad of error (an initial guess, not an observation).
    series = {
        "grid": grid,
        "y": np.zeros((n + 1, 1)),
        "present": np.zeros((n + 1, 1), bool),
        "init": q + 0.01 * np.sin(7 * grid)[:, None],
        "u": np.zeros((n, 0)),
    }
    return spec, rig, series, mk


def test_marker_rows_jacobian_is_their_derivative(tmp_path):
    """∂(marker rows)/∂x_k (``_marker_jacobian``, what the linearization appends to the
    encoder rows) equals central differences of the rows in q (step 1e-6 rad: truncation
    ~1e-12 relative, round-off ~1e-10 of the ~400 px/px per rad slope; bound 1e-7 of the
    largest), and is zero in p (the pixels depend on positions only). Only the marker rows
    are compiled here; the full linearization is checked the same way in the slow fit."""
    spec = _pendulum_spec(tmp_path)
    rig = pendulum.tree_rig(spec)
    params = rig.make_params({k: jnp.asarray(float(v)) for k, v in rig.values.items()})
    n = 40
    q = jnp.asarray(np.cos(np.arange(n) * 0.05))[:, None]  # a swing of ±1 rad
    mk = _filmed(rig, params, np.asarray(q), 0.3, seed=1)
    on = np.flatnonzero(mk.weight[:, 0] > 0)
    structure = TreeStructure(rig.tree, rig.make_params, (), H, rig.observed, (mk.model, mk.body))
    model = _Model(structure)
    a = {"cam": mk.arrays(), "uv": jnp.asarray(mk.uv), "mw": jnp.asarray(mk.weight)}
    rows, A = jax.jit(lambda q: model._marker_jacobian(params, a, q))(q)
    rows_at = jax.jit(jax.vmap(lambda qk, uv, mw: model._marker_rows(params, a, qk, uv, mw)))
    eps = 1e-6
    fd = (rows_at(q + eps, a["uv"], a["mw"]) - rows_at(q - eps, a["uv"], a["mw"])) / (2 * eps)
    np.testing.assert_allclose(rows, rows_at(q, a["uv"], a["mw"]), rtol=0, atol=1e-9)
    assert A.shape == (n, 6, 2)
    np.testing.assert_allclose(A[:, :, 0], fd, rtol=0, atol=1e-7 * np.max(np.abs(fd)))
    assert np.all(A[:, :, 1] == 0.0)
    assert len(on) >= 4 and np.all(A[np.setdiff1d(np.arange(n), on)] == 0.0)
    # ~130 px per rad of swing over 0.3 px of noise: the rows are active
    assert np.max(np.abs(fd[on])) > 100


@pytest.mark.slow  # the LM compile and 1 500 steps: ~1 min on a loaded core
def test_markers_alone_identify_the_inertia(pendulum_case):
    """The pendulum's J from its three markers alone (encoders weighted 0), starting 28 %
    off (0.005 vs 0.0039 kg m²): data from the estimator's own integrator, so the only error
    is the 0.3 px noise; J within 3 std and 0.5 % (a 1.5 s swing of 1 rad seen at 120 fps
    fixes J to ~0.1 %)."""
    spec, rig, series, mk = pendulum_case
    values = {k: v for k, v in PENDULUM_TRUTH.items() if k != "J"}
    settings = tree_settings(spec)
    problem, X0, theta0, _ = build_problem(
        rig, spec, ("J",), [series], settings, values, markers=mk
    )
    assert theta0 * problem.scale[0] == pytest.approx(0.005)
    res = levenberg_marquardt(problem, X0, theta0, problem_lm_settings(problem, settings, theta0))
    J = float(res.theta[0] * problem.scale[0])
    std = float(fitted_covariance(problem, res).std[0])
    assert res.converged, res.reason
    # The linearization's marker block (after the encoder row) is the derivative of the
    # residuals' marker rows: central differences in q at the solution, as above.
    lin, X, eps = res.lin, np.asarray(res.X), 1e-6
    fd = np.zeros_like(np.asarray(lin.obs_r)[:, 1:])
    for sign in (1.0, -1.0):
        Xs = X.copy()
        Xs[:, 0] += sign * eps
        fd += sign * problem.residuals(Xs, res.theta)[1][:, 1:] / (2 * eps)
    A = np.asarray(lin.obs_A)
    np.testing.assert_allclose(A[:, 1:, 0], fd, rtol=0, atol=1e-7 * np.max(np.abs(fd)))
    assert np.all(A[:, 1:, 1] == 0.0) and not np.any(lin.obs_present[:, 0])
    assert abs(J - PENDULUM_TRUTH["J"]) <= 3 * std, (J, std)
    assert abs(J / PENDULUM_TRUTH["J"] - 1) < 5e-3, J
