"""The physical-consistency constraint as the rigs and ``physid identify`` set it up: which
bodies it covers, the spec switch, the move of an impossible start and the refusal of fixed
values that leave no physical body."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from physid.errors import InputError
from physid.rigs.models import furuta, pendulum
from physid.rigs.models.identify_hinged import _consistent_start, build_problem, method_settings
from physid.spec import load_spec, with_overrides, with_parameters


def _series(n: int, channels: int) -> dict:
    """A still rig on the estimator grid: enough to build a problem (nothing is fitted)."""
    angles = np.zeros((n, channels))
    return {"grid": np.arange(n) * 1e-3, "y": angles, "present": np.ones_like(angles),
            "init": angles, "u": np.zeros(n - 1)}  # fmt: skip


def _problem(spec, rig):
    settings = method_settings(spec)
    series = _series(4, len(rig.channels))
    return build_problem(rig, spec, list(spec.parameters), series, settings)[0]


def test_furuta_bodies_are_constrained_and_the_switch_turns_it_off():
    spec = load_spec("furuta")
    problem = _problem(spec, furuta.build(spec))
    assert problem.consistency.labels == ("arm A", "pendulum B")
    assert method_settings(spec)["physical_consistency"] is True
    off = dataclasses.replace(spec, method={**spec.method, "physical_consistency": False})
    assert _problem(off, furuta.build(off)).consistency is None
    bad = dataclasses.replace(spec, method={**spec.method, "physical_consistency": "yes"})
    with pytest.raises(Exception, match="physical_consistency"):
        method_settings(bad)


def test_pendulum_is_a_planar_body_without_the_lmi():
    spec = load_spec("pendulum")
    assert _problem(spec, pendulum.build(spec)).consistency is None


def test_impossible_start_is_moved_and_said():
    # Table 1's J_Byy = 0.01 with the spec's J_Bxx = 1e-4, J_Bzz = 4e-3 is no pendulum:
    # LM must start from the nearest consistent J_Byy, J_Bxx + J_Bzz = 4.1e-3.
    spec = load_spec("furuta")
    problem = _problem(spec, furuta.build(spec))
    theta0 = np.array([spec.parameters[k].initial for k in problem.names]) / problem.scale
    said = []
    start = _consistent_start(spec, problem, theta0, said.append)
    values = dict(zip(problem.names, start * problem.scale, strict=True))
    assert values["J_Byy"] == pytest.approx(4.1e-3, rel=1e-6)
    assert values["J_Azz"] == pytest.approx(0.01, rel=1e-6)  # arm A was fine: unchanged
    assert problem.consistency.feasible(start)
    assert "pendulum B not a physical body" in said[0]


def test_fixed_values_that_leave_no_body_are_refused():
    # With J_Bzz fixed at 0.01, J_Byy must lie in [0.0099, 0.0101]; its box ends at 0.005.
    spec = with_overrides(load_spec("furuta"), {"J_Bzz": "0.01"})
    spec = with_parameters(spec, {"J_Byy": (0.004, 1e-5, 0.005)})
    problem = _problem(spec, furuta.build(spec))
    theta0 = np.array([spec.parameters[k].initial for k in problem.names]) / problem.scale
    with pytest.raises(InputError, match="pendulum B .* no values of J_Azz, J_Byy, b1, b2"):
        _consistent_start(spec, problem, theta0, print)
