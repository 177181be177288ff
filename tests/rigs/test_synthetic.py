"""Building blocks of the synthetic identification experiments: the controller-style drive
and freeing fixed values of a spec."""

from __future__ import annotations

import numpy as np
import pytest

from physid.rigs.pipeline.sample import SWING_UP, drive_voltage
from physid.spec import SpecError, load_spec, with_parameters


def test_square_drive_is_held_between_control_ticks_in_millivolt_steps():
    """The swing-up drive is what a 100 Hz controller writes: constant over each 10 ms tick,
    whole millivolts, ±amplitude with the sign of the cosine chirp at the tick."""
    t = np.arange(20000) * 1e-4
    u = drive_voltage(t, SWING_UP)
    ticks = u.reshape(-1, 100)  # 100 fine steps of 1e-4 s per 10 ms tick
    assert np.all(ticks == ticks[:, :1])
    assert set(np.unique(u)) == {-3.0, 3.0}
    t_tick = t[::100]
    assert np.array_equal(ticks[:, 0], 3.0 * np.sign(np.cos(2 * np.pi * 1.13 * t_tick)))


def test_with_parameters_frees_fixed_values_in_their_spec_unit():
    spec = load_spec("furuta")
    freed = with_parameters(spec, {"K": (0.1, 0.0, 10.0), "J_Azz": (0.02, 1e-5, 0.1)})
    assert "K" not in freed.fixed and "K" in freed.parameters
    k = freed.parameters["K"]
    assert (k.initial, k.lower, k.upper, k.unit) == (0.1, 0.0, 10.0, "N m/V")
    assert freed.parameters["J_Azz"].initial == 0.02  # an existing parameter, restarted
    assert list(freed.parameters)[:4] == list(spec.parameters)  # order kept, new ones last
    with pytest.raises(SpecError, match="no such value"):
        with_parameters(spec, {"J_Azx": (0.01, 0.0, 1.0)})
    with pytest.raises(SpecError, match="outside"):
        with_parameters(spec, {"K": (20.0, 0.0, 10.0)})
