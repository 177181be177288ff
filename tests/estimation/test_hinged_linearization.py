"""The states-only linearization of a hinged rig (θ held, used by the LM warm-up) is the full
linearization without its θ columns."""

import numpy as np
import pytest

from physid.estimation.hinged_problem import HingedProblem
from physid.estimation.initialize import initial_states, smooth_angles
from physid.rigs.models import pendulum
from physid.rigs.models.hinged import run_simulation
from physid.spec import load_spec


# slow (43 s on this VM): compiles the full and the states-only linearization
@pytest.mark.slow
def test_states_only_linearization_drops_exactly_the_theta_columns():
    spec = load_spec("pendulum")
    rig = pendulum.build(spec)
    h, n = 1e-3, 60
    truth = dict(rig.values, J=0.0039, b=2e-4, mu=1.8e-3)
    _, _, angles = run_simulation(rig, truth, [2.0], np.zeros(n), h)
    y = angles + np.random.default_rng(0).normal(0, 1e-3, angles.shape)  # n + 1 samples
    names = ("J", "b", "mu")
    scale = np.array([0.004, 1e-4, 1e-3])
    prob = HingedProblem(
        rig, names, scale, scale * 0, scale * 0 + 10, y, np.ones_like(y), np.zeros(n), h, 100.0
    )
    X = initial_states(rig, smooth_angles(np.arange(n + 1) * h, y), h)  # n + 1 states
    theta = np.array([1.1, 0.9, 1.2])  # off the truth, so every block is non-trivial
    full = prob.linearize(X, theta)
    held = prob.linearize_states(X, theta)
    assert held.dyn_C.shape == (n, prob.d, 0) and held.init_C.shape == (prob.d, 0)
    for name in ("dyn_r", "dyn_A", "dyn_B", "obs_r", "obs_A", "init_r", "init_A"):
        # The same derivatives through jacfwd with fewer tangents: equal to round-off.
        got, want = np.asarray(getattr(held, name)), np.asarray(getattr(full, name))
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12 * np.abs(want).max())
    np.testing.assert_array_equal(held.obs_present, full.obs_present)
