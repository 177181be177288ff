"""Parameter flags that cannot lie (estimation.flags, estimation.estimate): the rules, and the
invariants ``ParameterEstimate`` and ``Estimate`` enforce when they are built."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from physid.estimation.consistency import BodyInertia, inertia_lmi
from physid.estimation.estimate import Estimate, ParameterEstimate, Result, Status
from physid.estimation.flags import bound_flags, flag_parameters, unexcited_directions
from physid.rigs.models.identify_hinged import parameter_bounds

OK = Status(Result.successful, "relative cost decrease below eps_f", "Gauss–Newton test")
UNITS = {"a": "kg m^2", "b": "N m s/rad", "c": "1"}


def test_bound_consistency_face_and_bound_only_values_have_no_std():
    params = flag_parameters(
        "abc", [1.0, 2.0, 0.3], [0.1, 0.2, 0.01], UNITS, OK,
        at_bound=["lower", "consistency", ""], lower_bound=[False, False, True],
    )  # fmt: skip
    for p in params.values():
        assert not p.identifiable and p.std == math.inf and p.reason
    assert "lower bound" in params["a"].reason
    assert "physical consistency" in params["b"].reason
    assert params["c"].lower_bound and "only a lower bound" in params["c"].reason


def test_a_fit_that_did_not_converge_identifies_nothing():
    stop = Status(Result.max_steps_reached, "iteration limit")
    params = flag_parameters("ab", [1.0, 2.0], [0.01, 0.02], UNITS, stop)
    assert all(not p.identifiable and p.std == math.inf for p in params.values())
    assert "did not converge (max_steps_reached: iteration limit)" in params["a"].reason


def test_a_large_std_is_kept_but_not_called_identified():
    (p,) = flag_parameters("a", [1.0], [0.8], UNITS, OK).values()
    assert not p.identifiable and p.std == 0.8 and "exceeds half" in p.reason


def test_unexcited_directions_are_named_by_parameter():
    # Relative covariance with one unbounded direction (a − b)/√2 and one well determined.
    d = np.array([[1, 1], [-1, 1]]) / math.sqrt(2)
    (found,) = unexcited_directions(["a", "b"], d, [math.inf, 1e-4])
    assert found["text"] == "a − b" and found["relative_std"] == math.inf


def test_the_types_refuse_a_lying_flag():
    with pytest.raises(ValueError, match="never identifiable"):
        ParameterEstimate(1.0, 0.1, "1", True, at_bound="lower")
    with pytest.raises(ValueError, match="never identifiable"):
        ParameterEstimate(1.0, math.inf, "1", True)
    with pytest.raises(ValueError, match="no finite std"):
        ParameterEstimate(1.0, 0.1, "1", False, at_bound="lower")
    with pytest.raises(ValueError, match="names its passed test"):
        Status(Result.successful, "iteration limit")
    good = {"a": ParameterEstimate(1.0, 0.1, "1", True)}
    base = dict(rig="r", solver="s", cost=1.0, iterations=1, history=[], settings={})
    with pytest.raises(ValueError, match="did not converge identifies no parameter"):
        Estimate(parameters=good, converged=False, **base)
    with pytest.raises(ValueError, match="contradicts status"):
        Estimate(parameters={}, converged=True, status={"result": "stalled"}, **base)


def test_parameters_on_a_face_of_physical_consistency_are_flagged():
    # Body A with J_x + J_y = J_z (a planar body): on the boundary of P ⪰ 0. Its three
    # moments take part in that face; body B's parameter J_By is inside.
    def bodies(v):
        return [
            BodyInertia("A", 0.2, (0, 0, 0), np.diag([v["Ax"], v["Ay"], v["Az"]])),
            BodyInertia("B", 0.4, (0, 0, 0), np.diag([1e-3, v["By"], 2e-3])),
        ]

    values = {"Ax": 1e-3, "Ay": 2e-3, "Az": 3e-3, "By": 2e-3}
    names = ("Ax", "Ay", "Az", "By")
    scale = np.array([1e-3, 2e-3, 3e-3, 2e-3])
    lmi = inertia_lmi(bodies, values, names, scale, np.ones(4))
    problem = SimpleNamespace(
        lower=np.full(4, 1e-3), upper=np.full(4, 100.0), consistency=lmi, names=names
    )
    assert parameter_bounds(problem, np.ones(4)) == ["consistency"] * 3 + [""]


def test_a_round_off_image_of_a_bound_is_on_it():
    # b2 = 2.9e-12 N m s/rad above its bound 0, scale 1e-4: seen on the Furuta, reported
    # as identified. Within 1e-6 of the scale it is on the bound.
    assert bound_flags([2.9e-12, 1e-6], [0.0, 0.0], [0.1, 0.1], [1e-4, 1e-4]).tolist() == [
        "lower",
        "",
    ]


def test_a_parameter_on_its_box_bound_keeps_a_one_sided_interval_and_nothing_else():
    """b on its lower bound 0 with a released std: no std, not identifiable, the released
    std kept for the interval [0, k·std]; a parameter on the consistency face or inside the
    box gets none, and a released std on anything but a box bound is refused."""
    from physid.estimation.report import value_text

    params = flag_parameters(
        "abc", [1.0, 0.0, 2.0], [0.1, 0.2, 0.3], UNITS, OK,
        at_bound=["", "lower", "consistency"], released_std=[np.nan, 3e-4, 0.5],
    )  # fmt: skip
    b = params["b"]
    assert b.std == math.inf and not b.identifiable and b.released_std == 3e-4
    assert params["a"].released_std is None and params["c"].released_std is None
    assert value_text(b.__dict__) == "0 (on its lower bound; ≤ 0.0003 at 1 std)"
    with pytest.raises(ValueError, match="one-sided"):
        ParameterEstimate(1.0, 0.1, "1", False, released_std=0.2)
