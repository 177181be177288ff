"""Camera-marker observation term: the JAX projections against OpenCV, and the marker rows'
tangent-space Jacobian against central finite differences."""

from __future__ import annotations

import cv2
import jax.numpy as jnp
import numpy as np
import pytest

from physid.estimation.markers import (
    MarkerObservations,
    pixels_on_grid,
    project_fisheye,
    project_pinhole,
)
from tests.estimation.driven_furuta import D_FISHEYE, MARKER_SIGMA, K
from tests.estimation.fast_furuta import driven_furuta_fast

D_PINHOLE = np.array([-0.21, 0.05, 1.2e-3, -8e-4, -4e-3])  # k1 k2 p1 p2 k3


def _points(rng, n, max_angle):
    """Camera-frame points in front of the camera, up to ``max_angle`` (rad) off axis, at
    0.2–3 m, plus one exactly on the axis (the r → 0 branch of the fisheye)."""
    ang = rng.uniform(0, max_angle, n)
    az = rng.uniform(-np.pi, np.pi, n)
    depth = rng.uniform(0.2, 3.0, n)
    dirs = np.stack([np.sin(ang) * np.cos(az), np.sin(ang) * np.sin(az), np.cos(ang)], 1)
    return np.concatenate([dirs * depth[:, None], [[0.0, 0.0, 1.3]]])


def test_fisheye_projection_matches_opencv():
    pts = _points(np.random.default_rng(0), 500, np.radians(85))  # a 170° fisheye
    ref, _ = cv2.fisheye.projectPoints(pts[:, None], np.zeros(3), np.zeros(3), K, D_FISHEYE)
    ours = np.asarray(project_fisheye(jnp.asarray(pts), jnp.asarray(K), jnp.asarray(D_FISHEYE)))
    # Same formula in float64 on ~10³ px: only round-off (~1e-13 relative) may differ.
    np.testing.assert_allclose(ours, ref[:, 0], rtol=0, atol=1e-8)


def test_pinhole_projection_matches_opencv():
    pts = _points(np.random.default_rng(1), 500, np.radians(40))
    ref, _ = cv2.projectPoints(pts[:, None], np.zeros(3), np.zeros(3), K, D_PINHOLE)
    ours = np.asarray(project_pinhole(jnp.asarray(pts), jnp.asarray(K), jnp.asarray(D_PINHOLE)))
    np.testing.assert_allclose(ours, ref[:, 0], rtol=0, atol=1e-8)  # as above


@pytest.fixture(scope="module")
def furuta_problem():
    """The driven Furuta of tests/estimation/driven_furuta.py: 3 markers (two on the pendulum,
    one on the arm) seen by a fisheye camera 0.6 m away on alternate steps. The same problem
    (and compiled model, tests/estimation/fast_furuta.py) as test_jacobian_tangents.py's."""
    return driven_furuta_fast()


def test_marker_rows_jacobian_matches_finite_differences(furuta_problem):
    prob, X, theta = furuta_problem
    lin = prob.linearize(X, theta)
    n, mo, d = np.shape(lin.obs_A)
    assert mo == 2 + 2 * 3  # two encoders, then (u, v) of three markers
    h = 1e-6  # central differences: truncation ~h² · |f'''| ≪ 1e-6 of the entries
    fd = np.zeros((n, mo, d))
    for i in range(d):  # a test-only loop over the tangent directions
        step = np.zeros((n, d))
        step[:, i] = h
        plus = prob.residuals(prob.retract(X, step), theta)[1]
        minus = prob.residuals(prob.retract(X, -step), theta)[1]
        fd[:, :, i] = (plus - minus) / (2 * h)
    scale = np.max(np.abs(fd))
    np.testing.assert_allclose(np.asarray(lin.obs_A), fd, rtol=0, atol=1e-6 * scale)
    # Steps without a camera frame carry no marker information at all.
    assert np.all(np.asarray(lin.obs_A)[1::2, 2:] == 0)
    assert np.abs(np.asarray(lin.obs_A)[0::2, 2:]).max() > 0
    assert lin.obs_present[0, 2:].all() and not lin.obs_present[1, 2:].any()


def test_marker_residual_is_weighted_pixel_error(furuta_problem):
    prob, X, theta = furuta_problem
    mk = prob.markers
    px = prob.marker_pixels(X)
    r, e = np.asarray(X[0]), np.asarray(X[1])
    for k in (0, 3):  # OpenCV reference: world point → camera → fisheye pixels
        pw = np.array(
            [
                r[k, b] + np.asarray(cv2.Rodrigues(_rotvec(e[k, b]))[0]) @ p
                for b, p in zip(mk.body, mk.points, strict=True)
            ]
        )
        rvec, _ = cv2.Rodrigues(mk.R_cw)
        ref, _ = cv2.fisheye.projectPoints(pw[:, None], rvec, mk.t_cw, mk.K, mk.D)
        np.testing.assert_allclose(px[k], ref[:, 0], atol=1e-7)  # round-off on ~10³ px
    obs = prob.residuals(X, theta)[1]
    # σ_ref² / σ_px² weighting: √(1e-6 / 0.3²) · (π − uv) on observed steps, 0 elsewhere.
    want = np.sqrt(1e-6 / MARKER_SIGMA**2) * (px[0] - mk.uv[0]).reshape(-1)
    np.testing.assert_allclose(obs[0, 2:], want, rtol=1e-12)
    assert np.all(obs[1, 2:] == 0)


def _rotvec(e):
    angle = 2 * np.arctan2(np.linalg.norm(e[1:]), e[0])
    s = np.linalg.norm(e[1:])
    return np.zeros(3) if s < 1e-15 else e[1:] / s * angle


def test_marker_observations_reject_bad_shapes():
    with pytest.raises(ValueError, match="uv"):
        MarkerObservations((0,), np.zeros((1, 3)), K, D_FISHEYE, np.eye(3), np.zeros(3),
                           np.zeros((5, 2, 2)), np.zeros((5, 2)))  # fmt: skip
    with pytest.raises(ValueError, match="coefficients"):
        MarkerObservations((0,), np.zeros((1, 3)), K, D_PINHOLE, np.eye(3), np.zeros(3),
                           np.zeros((5, 1, 2)), np.zeros((5, 1)))  # fmt: skip


def test_pixels_on_grid_nearest_step_no_invention():
    grid = np.arange(11) * 1e-3  # 11 steps of 1 ms
    t = np.array([-0.004, 0.0021, 0.0049, 0.0076, 0.02])  # before, near 2, 5, 8, after
    uv = np.arange(5 * 2 * 2, dtype=float).reshape(5, 2, 2)
    missing = np.array([[False, False], [False, True], [False, False], [False, False],
                        [False, False]])  # fmt: skip
    out, w = pixels_on_grid(grid, t, uv, 0.5, missing)
    assert np.flatnonzero(w[:, 0]).tolist() == [2, 5, 8]  # the nearest step of each frame
    np.testing.assert_array_equal(out[2, 0], uv[1, 0])
    assert w[2, 0] == 4.0 and w[2, 1] == 0.0  # 1/σ² where seen, 0 where the marker is missing
    assert w.sum() == 4.0 * 5  # frames outside the grid are dropped, none invented
