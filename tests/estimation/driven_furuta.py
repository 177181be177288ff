"""One driven Furuta problem, seen by encoders and a fisheye camera, for the Jacobian checks of
test_jacobian_tangents.py and test_markers.py. Built once per test run: the two files then
linearize it with one compiled model (its Jacobian blocks are ~50 s of XLA compilation on CI's
2-core machine, the residuals ~10 s more), where each used to compile a model of its own."""

from __future__ import annotations

import functools

import cv2
import numpy as np

from physid.estimation.hinged_problem import HingedProblem
from physid.estimation.initialize import initial_states, smooth_angles
from physid.estimation.markers import MarkerObservations
from physid.rigs.models import furuta
from physid.spec import load_spec

NAMES = ("J_Azz", "J_Byy", "b1", "b2", "K", "mu1", "mu2", "tilt_x", "tilt_z")
K = np.array([[610.0, 0.0, 642.5], [0.0, 605.0, 358.0], [0.0, 0.0, 1.0]])
D_FISHEYE = np.array([0.041, -0.012, 0.0031, -0.0007])  # GoPro-like equidistant k1..k4
MARKER_SIGMA = 0.3  # px


@functools.cache
def driven_furuta():
    """``(problem, X, θ)``: a driven Furuta (motor, dry and viscous friction, tilt: every
    parameter block non-trivial), 40 steps of 1 ms, off its fitted states and θ. Three markers
    (two on the pendulum, one on the arm) are seen 0.6 m from a fisheye camera on alternate
    steps, at pixels unrelated to the states, so that no residual sits at a special point.

    The angles are a smooth swing of both hinges, not a simulation: the Jacobian checks need
    states off the constraint manifold (so the hinges carry impulses) and moving hinges (so
    the dry friction is off its kink), not a solution of the dynamics."""
    spec = load_spec("furuta")
    rig = furuta.build(spec)
    h, n = 1e-3, 40
    t = np.arange(n) * h
    u = 2.0 * np.sin(t * 40.0)
    ang = np.stack([0.3 + 2.0 * t + 20.0 * t**2, np.pi - 0.4 - 5.0 * t + 60.0 * t**2], 1)
    rng = np.random.default_rng(1)
    y = ang + rng.normal(0.0, 1e-3, ang.shape)
    R_cw, _ = cv2.Rodrigues(np.array([0.3, -0.2, 0.1]))
    markers = MarkerObservations(
        body=(1, 1, 0),
        points=np.array([[0.05, 0.0, 0.01], [-0.03, 0.01, 0.0], [0.08, 0.0, 0.02]]),
        K=K,
        D=D_FISHEYE,
        R_cw=R_cw,
        t_cw=np.array([0.02, 0.05, 0.6]),
        uv=rng.uniform(300, 900, (n, 3, 2)),
        weight=np.where(np.arange(n)[:, None] % 2 == 0, 1 / MARKER_SIGMA**2, 0.0) * np.ones(3),
    )
    scale = np.array([0.003, 0.004, 1e-3, 1e-4, 0.15, 5e-4, 2e-4, 0.01, 0.02])
    lo, hi = np.full(len(NAMES), -10.0), np.full(len(NAMES), 10.0)
    prob = HingedProblem(
        rig, NAMES, scale, lo, hi, y, np.ones_like(y), u[:-1], h, 1e3, markers, 1e-3
    )
    X = initial_states(rig, smooth_angles(t, y), h)
    # Move the states off the constraint manifold so the hinges carry impulses.
    X = prob.retract(X, 1e-4 * np.random.default_rng(2).standard_normal((n, prob.d)))
    theta = np.array([1.2, 0.9, 1.1, 0.8, 1.3, 1.5, 0.7, 1.0, -1.0])
    return prob, X, theta
