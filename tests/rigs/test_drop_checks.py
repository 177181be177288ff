"""Ellipse-drop trust checks (issue 24, ``rigs.models.drop_checks``): an impact no rigid body
makes is refused with a message, a real one passes and gives its own J/m; the IPOPT status
is enumerated. Data: the IRC simulator (the throw of Section 6.1 on a flat ground) sampled at
240 fps with 0.3 mm / 0.3 mrad noise."""

from __future__ import annotations

import numpy as np
import pytest

from physid.dynamics.planar_contact import Ellipse, Ground
from physid.dynamics.planar_contact import simulate as simulate_irc
from physid.estimation.estimate import Result
from physid.estimation.ipopt_contact import ContactGeometry
from physid.rigs.models.drop_checks import (
    impact_consistency,
    inconsistency_message,
    ipopt_status,
)

ELLIPSE = Ellipse(0.05, 0.025, 0.064, 0.064 * 756e-6)
SIGMA = 3e-4  # m and rad


@pytest.fixture(scope="module")
def frames():
    h, fps = 1.0 / 2400, 240
    traj = simulate_irc((0.0, 0.1, -0.785), (3.0, -5.0, 0.0), h, 1200, ELLIPSE, Ground(),
                        0.3, 0.2)  # fmt: skip
    idx = np.arange(0, len(traj.t), 2400 // fps)
    rng = np.random.default_rng(0)
    return traj.t[idx], traj.q[idx] + rng.normal(0.0, SIGMA, (len(idx), 3))


GEOMETRY = ContactGeometry(ELLIPSE.a, ELLIPSE.b)


def test_real_impacts_are_consistent_and_imply_their_j_over_m(frames):
    t, q = frames
    found = impact_consistency(t, q, GEOMETRY, SIGMA, SIGMA)
    assert found and all(f["consistent"] for f in found)
    assert inconsistency_message("drop.csv", found) is None
    # The first impact is the largest: its spin change and moment give J/m to ~20 % (the
    # frames resolve the velocities around it at 240 fps; the impulse spreads over two
    # frame intervals, and friction adds its own moment).
    first = next(f for f in found if f["j_over_m"] is not None)
    assert first["j_over_m"] == pytest.approx(756e-6, rel=0.2)


def test_an_impact_that_spins_the_wrong_way_is_refused(frames):
    t, q = frames
    first = impact_consistency(t, q, GEOMETRY, SIGMA, SIGMA)[0]
    # After the first impact the angle turns the other way: the spin change flips sign
    # while the contact impulse (from the linear motion) stays as it was.
    after = t > first["t"]
    k = int(np.argmax(after))
    flipped = q.copy()
    flipped[after, 2] = q[k - 1, 2] - (q[after, 2] - q[k - 1, 2]) + 2 * (q[k, 2] - q[k - 1, 2])
    found = impact_consistency(t, flipped, GEOMETRY, SIGMA, SIGMA)
    message = inconsistency_message("drop.csv", found)
    assert message is not None and "inconsistent with a rigid impulse" in message
    assert "drop.csv" in message and f"t = {first['t']:.4g} s" in message


def test_ipopt_status_is_converged_only_on_a_passed_test():
    class Fit:
        def __init__(self, status):
            self.status = status

    assert ipopt_status(Fit("Parameters_Settled")).test
    assert ipopt_status(Fit("Solve_Succeeded")).converged
    assert ipopt_status(Fit("Maximum_Iterations_Exceeded")).result is Result.max_steps_reached
    assert ipopt_status(Fit("Restoration_Failed")).result is Result.solver_failed


def test_throws_pool_by_inverse_variance_and_widen_where_they_disagree():
    from physid.estimation.estimate import ParameterEstimate
    from physid.rigs.models.ellipse_drop import _pool

    agree = [ParameterEstimate(1.0, 0.1, "1", True), ParameterEstimate(1.1, 0.2, "1", True)]
    entry, report = _pool(agree)
    # weights 100 and 25: mean (100 + 27.5)/125 = 1.02, std 1/sqrt(125); chi2 = 0.8 < 1
    assert entry["value"] == pytest.approx(1.02) and not entry["lower_bound"]
    assert entry["std"] == pytest.approx(125**-0.5) and report["birge_ratio"] < 1
    apart = [ParameterEstimate(1.0, 0.1, "1", True), ParameterEstimate(2.0, 0.1, "1", True)]
    entry, report = _pool(apart)  # 7 std apart: the pooled std 1/√200 grows by √(χ²/1)
    assert entry["value"] == pytest.approx(1.5)
    assert report["birge_ratio"] == pytest.approx(50**0.5) and entry["std"] == pytest.approx(0.5)
    bounds = [ParameterEstimate(0.28, float("inf"), "1", False, lower_bound=True),
              ParameterEstimate(0.35, float("inf"), "1", False, lower_bound=True)]  # fmt: skip
    entry, _ = _pool(bounds)
    assert entry["lower_bound"] and entry["value"] == 0.35 and entry["std"] == float("inf")
