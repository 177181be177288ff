"""The discretization error estimate ([method] model_error): refit at h/2, report
2|χ_h − χ_{h/2}| as part of the std."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from physid.rigs.models.identify_hinged import halve_series


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
def test_model_error_covers_the_shadow_bias_of_a_coarse_step():
    """Pendulum released from 2 rad, simulated at h = 1e-4, 1e-3 rad noise, identified at
    h = 5e-3: the linearized std alone puts J and rμ 3 std from the truth (z = −2.9 and
    +3.2 measured); with the h/2 refit's discretization error both are within 1.5 std
    (−0.5 and +1.1 measured)."""
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
    method = {**rec.spec.method, "h": {"value": h, "unit": "s"}, "model_error": True}
    spec = replace(rec.spec, method=method)
    rig = kind_module(spec).build(spec)
    est, _ = identify_series(spec, rig, [series_on_grid(rec.log, rig.channels, h, "sim")])
    linearized = est.extra["std_linearized"]
    for name in ("J", "mu"):
        p, truth = est.parameters[name], rec.truth[name]
        assert abs(p.value - truth) > 2.5 * linearized[name]  # the bias the std misses …
        assert abs(p.value - truth) < 1.5 * p.std  # … and the reported std covers
        assert p.identifiable
        assert p.std**2 == pytest.approx(
            linearized[name] ** 2 + est.extra["discretization_error"][name] ** 2
        )
