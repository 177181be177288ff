"""κ continuation settings (``[method] kappa``, ``kappa_final``): the stages LM is solved at
and the refusal of a schedule that would lower κ."""

from __future__ import annotations

import dataclasses

import pytest

from physid.rigs.models.identify_hinged import kappa_schedule, method_settings
from physid.spec import SpecError, load_spec


def _settings(**method):
    spec = load_spec("pendulum")
    return method_settings(dataclasses.replace(spec, method={**spec.method, **method}))


def test_default_is_one_stage_at_kappa():
    settings = _settings()
    assert settings["kappa_final"] == settings["kappa"] == 100.0
    assert kappa_schedule(settings) == [100.0]


def test_stages_rise_a_decade_at_a_time_and_end_at_kappa_final():
    assert kappa_schedule(_settings(kappa_final=1e6)) == pytest.approx([1e2, 1e3, 1e4, 1e5, 1e6])
    # A final κ between decades is its own last stage, not overshot.
    assert kappa_schedule(_settings(kappa=10.0, kappa_final=3e3)) == pytest.approx(
        [10.0, 100.0, 1e3, 3e3]
    )
    # Less than a decade above κ: one more stage.
    assert kappa_schedule(_settings(kappa=100.0, kappa_final=500.0)) == [100.0, 500.0]


@pytest.mark.parametrize(
    ("method", "key"),
    [({"kappa_final": 10.0}, "kappa_final"), ({"kappa": 0.0}, "kappa")],
)
def test_bad_kappa_names_the_setting(method, key):
    with pytest.raises(SpecError, match=rf"\[method\.{key}\]"):
        _settings(**method)
