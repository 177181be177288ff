"""The step's bias ([method] model_error): refit at h/2, report the Richardson value
2χ(h/2) − χ(h) with |χ(h) − χ(h/2)|/√3 as part of the std (``estimation.step_bias``)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from physid.estimation.step_bias import halve_series


def test_halve_series_keeps_samples_on_even_steps_and_holds_the_control():
    grid = np.array([0.0, 0.01, 0.02])
    series = {
        "grid": grid,
        "y": np.array([[1.0], [2.0], [3.0]]),
        "present": np.array([[True], [False], [True]]),
        "init": np.zeros((3, 1)),
        "u": np.array([5.0, 6.0]),
    }
    half = halve_series(series, np.array([[0.0], [1.0], [4.0]]))
    np.testing.assert_allclose(half["grid"], [0, 0.005, 0.01, 0.015, 0.02])
    assert half["y"][::2, 0].tolist() == [1.0, 2.0, 3.0]
    assert half["present"][:, 0].tolist() == [True, False, False, False, True]
    assert half["u"].tolist() == [5.0, 5.0, 6.0, 6.0]  # zero-order hold over both halves
    np.testing.assert_allclose(half["init"][:, 0], [0, 0.5, 1, 2.5, 4])


@pytest.mark.slow
@pytest.mark.xfail(
    reason="measured 2026-11-25: at h = 5 ms on this 1 s log the extrapolation overshoots "
    "(J −0.49 % at h, +0.51 % extrapolated, 1.1 reported std): one reason "
    "step_extrapolation is off by default",
)
def test_the_step_bias_is_removed_and_the_std_covers_what_remains():
    """Pendulum released from 2 rad, simulated at h = 1e-4, 1e-3 rad noise, identified at
    h = 5e-3, ``[method] step_extrapolation``: the reported values, extrapolated with the
    h/2 refit (2χ(h/2) − χ(h), ``estimation.step_bias``), are closer to the truth than the
    values at h and within 1.5 reported std."""
    from physid.rigs.models.identify_hinged import identify_series, series_on_grid
    from physid.rigs.models.kinds import kind_module
    from physid.rigs.pipeline.sample import EncoderScenario
    from physid.rigs.pipeline.synthetic import record
    from physid.spec import load_spec

    rng = np.random.default_rng(0)
    rec = record(
        load_spec("pendulum"),
        EncoderScenario(duration=1.0, angles0=(2.0,)),
        lambda a: a + rng.normal(0.0, 1e-3, a.shape),
    )
    h = 5e-3
    method = {**rec.spec.method, "h": {"value": h, "unit": "s"}, "model_error": True,
              "step_extrapolation": True}  # fmt: skip
    spec = replace(rec.spec, method=method)
    rig = kind_module(spec).build(spec)
    est, _ = identify_series(spec, rig, [series_on_grid(rec.log, rig.channels, h, "sim")])
    linearized, at_h = est.extra["std_linearized"], est.extra["values_at_step"]
    for name in ("J", "mu"):
        p, truth = est.parameters[name], rec.truth[name]
        # J at h is −0.49 % off, 1.3 linearized std (batch means, data noise) since those
        # were added (2026-11-25; −2.9 of (3.31) as printed before): the bias at h …
        assert abs(p.value - truth) < abs(at_h[name] - truth)  # … removed …
        assert abs(p.value - truth) < 1.5 * p.std  # … and what remains is covered
        assert p.identifiable
        assert est.extra["step_extrapolated"][name]
        assert p.std**2 == pytest.approx(
            linearized[name] ** 2
            + est.extra["extrapolation_noise"][name] ** 2
            + est.extra["discretization_error"][name] ** 2
        )
