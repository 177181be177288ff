"""The tree estimator on a pendulum with viscous and dry (Coulomb) friction simulated by an
independent engine (issue 22's acceptance): MuJoCo integrates ``tests/data/mujoco/
pendulum_friction.xml`` (RK4 at 1e-4 s; joint damping, and frictionloss as MuJoCo's stiff soft
constraint), the angle is sampled at 1 kHz through a 4096-count encoder, and physid identifies
the inertia about the centre of mass, the damping b and the Coulomb torque f_c at h = 1e-3 s
with the default weights: on one long log, and on a large and a small swing fitted jointly
(one parameter set, states per log: Marklund et al., Section 4.5)."""

from __future__ import annotations

import pytest

from physid.rigs.models.identify_tree import identify_tree_series, series_on_grid, tree_settings
from physid.rigs.models.tree.rig import load_tree_rig
from physid.rigs.models.tree_rig import from_tree_rig
from physid.spec import load_spec

mujoco = pytest.importorskip("mujoco")

from tests.estimation.test_tree_mujoco import DATA, mujoco_log  # noqa: E402

XML, SPEC = DATA / "pendulum_friction.xml", DATA / "pendulum_friction.toml"
NAMES = ("pendulum.inertia.yy", "theta.damping", "theta.frictionloss")
# The tolerances: J within 1 %, the Coulomb torque and the viscous coefficient within
# 10 % (b's torque is a few times smaller than f_c's on these swings, and MuJoCo's friction is
# a soft constraint near zero speed, which the tree's exact complementarity is not).
TOLERANCE = {"pendulum.inertia.yy": 0.01, "theta.damping": 0.10, "theta.frictionloss": 0.10}


def undriven(_t: float) -> float:
    return 0.0


def fit(logs):
    spec = load_spec(SPEC)
    rig = from_tree_rig(load_tree_rig(spec))
    h = tree_settings(spec)["h"]
    series = [series_on_grid(log, rig, h, f"swing {i}") for i, log in enumerate(logs)]
    estimate, fits = identify_tree_series(spec, rig, series)
    return estimate, fits


def check(estimate, model):
    truth = {
        "pendulum.inertia.yy": float(model.body_inertia[1][1]),
        "theta.damping": float(model.dof_damping[0]),
        "theta.frictionloss": float(model.dof_frictionloss[0]),
    }
    for name, value in truth.items():  # shown with -s, and on a failure
        p = estimate.parameters[name]
        print(f"{name}: {p.value:.6g} (truth {value:.6g}, {(p.value - value) / value:+.3%}, "
              f"std {p.std:.3g}) {estimate.status['result']}")  # fmt: skip
    for name, value in truth.items():
        rel = (estimate.parameters[name].value - value) / value
        assert abs(rel) <= TOLERANCE[name], (name, estimate.parameters[name].value, value, rel)
    # The identified model predicts the logs it came from (k-step-ahead and free run).
    assert estimate.validation["verdict"] == "good fit", estimate.validation["summary"]


@pytest.mark.slow  # 20 000 steps of MuJoCo in a Python loop and a fit: minutes on a loaded core
def test_mujoco_friction_pendulum_one_long_log():
    """20 s released from 3 rad (about 9 swings down to ±0.2 rad)."""
    log, model = mujoco_log(XML, undriven, 20.0, qpos0=[3.0])
    estimate, _ = fit([log])
    check(estimate, model)


@pytest.mark.slow
def test_mujoco_friction_pendulum_two_swings_jointly():
    """A large swing (10 s from 3 rad) and a small one (6 s from 0.5 rad, which stops and
    sticks after ~5 s) of the same rig, fitted as one parameter set with states per log:
    the joint fit's values are as good as the long log's, and the small log is not ignored
    (its own free run is part of the verdict). The stuck end is where the fit at the
    friction's row weight α = ½ stalls (``rigs.models.tree_row_weight``): the values come
    from the fits at α = 0.7 and 0.9, extrapolated, and the status is theirs (converged)."""
    large, model = mujoco_log(XML, undriven, 10.0, qpos0=[3.0])
    small, _ = mujoco_log(XML, undriven, 6.0, qpos0=[0.5])
    estimate, fits = fit([large, small])
    assert [len(f["grid"]) for f in fits] == [10001, 6001]
    check(estimate, model)
    assert estimate.converged and estimate.extra["friction_row_weight"]["alphas"] == [0.7, 0.9]
    # Each log has its own states and its own k-step-ahead and free-run checks (two each).
    assert len(estimate.extra["costs_per_log"]) == 2
    assert len(estimate.extra["prediction_series"]) == 4
