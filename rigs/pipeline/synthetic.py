"""Synthetic identification experiments (Marklund et al. Section 4.7): simulate a hinged rig's
scenario with known truth at the spec's fine [simulation] step, record it as the encoder board
would, and identify the spec's free parameters from it with every other value known.

Used by the slow acceptance tests and the method-parameter sweeps in ``benchmarks/``; no file
I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from physid.rigs.pipeline.sample import EncoderScenario, fixed_truth, simulate_hinged
from physid.spec import RigSpec, with_overrides
from physid.streams import Stream

# Section 4.6: motor gain, five inertias, four friction coefficients and the tilt of gravity,
# from the Table 1 initial values, as (initial, lower, upper) in the spec's units. The tilt is
# a rotation vector about the horizontal axes: the third component of the paper's quaternion
# tangent, a rotation about gravity itself, leaves g unchanged and is not a parameter.
FURUTA_SECTION_4_6 = {
    "K": (0.1, 0.0, 10.0),
    "J_Axx": (0.01, 1e-5, 0.1),
    "J_Ayy": (0.01, 1e-5, 0.1),
    "J_Azz": (0.01, 1e-5, 0.1),
    "J_Byy": (0.01, 1e-5, 0.1),
    "J_Bzz": (0.01, 1e-5, 0.1),
    "b1": (1e-4, 0.0, 0.1),
    "b2": (1e-4, 0.0, 0.1),
    "mu1": (1e-4, 0.0, 0.1),
    "mu2": (1e-4, 0.0, 0.1),
    "tilt_x": (0.0, -0.1, 0.1),
    "tilt_z": (0.0, -0.1, 0.1),
}
# Truth for it beyond Table G.5 (which has no gain, dry friction or tilt to speak of): the
# dry friction of the real rig (Table 4), a gain 50 % above the initial value and a tilt of
# about a degree.
FURUTA_SECTION_4_6_TRUTH = {
    "K": 0.15,
    "mu1": 5e-4,
    "mu2": 2e-4,
    "tilt_x": 0.01,
    "tilt_z": -0.02,
}

# Its LM settings: a faster α schedule than Algorithm 1's τ = 1e-6 and ⅓-per-step decrease,
# which spent 8 more iterations letting α fall on the swing-up (29 in all, same minimum).
FURUTA_SECTION_4_6_METHOD = {"lm_tau": 1e-10, "alpha_shrink": 0.1, "max_iter": 40.0}


@dataclass(frozen=True)
class Recording:
    """An encoder log of a simulated scenario: ``log`` (angles in rad, u in V at the
    scenario's rate), the ``truth`` it was simulated with (SI values by name), and ``spec``:
    the rig spec with every fixed value set to the truth (only its parameters are unknown)."""

    log: Stream
    truth: dict[str, float]
    spec: RigSpec


def quantizer(counts_per_rev: int) -> Callable[[np.ndarray], np.ndarray]:
    """Angles (rad) → what an encoder of ``counts_per_rev`` reports (rad)."""
    step = 2 * np.pi / counts_per_rev
    return lambda angles: np.rint(angles / step) * step


def record(
    spec: RigSpec,
    scenario: EncoderScenario,
    measure: Callable[[np.ndarray], np.ndarray],
    overrides: dict[str, float] | None = None,
) -> Recording:
    """Simulate ``scenario`` with the spec's truth (and ``overrides``, SI), sample it at the
    scenario's rate and pass the angles through ``measure`` (e.g. noise or ``quantizer``)."""
    t, _, angles, u, truth, rig = simulate_hinged(spec, scenario, overrides)
    stride = max(1, int(round(1.0 / (scenario.rate * (t[1] - t[0])))))
    channels = rig.channels
    log = Stream(
        t[::stride],
        np.column_stack([measure(angles[::stride]), u[::stride]]),
        (*channels, "u"),
        ("rad",) * len(channels) + ("V",),
        np.zeros((len(t[::stride]), len(channels) + 1), bool),
        {"simulated": spec.name},
    )
    return Recording(log, truth, with_overrides(spec, fixed_truth(spec, rig, truth)))


def recording_problem(spec: RigSpec, log: Stream, method: dict | None = None):
    """The LM problem of identifying ``spec``'s parameters from ``log``, with the spec's
    [method] settings; ``method`` replaces some of them, written as in a spec file
    (``{"h": {"value": 0.01, "unit": "s"}, "kappa": 100.0}``). Returns (HingedProblem,
    initial states, initial θ, LMSettings)."""
    from physid.rigs.models.identify_hinged import (
        build_problem,
        lm_settings,
        method_settings,
        reference_noise,
        series_on_grid,
    )
    from physid.rigs.models.kinds import kind_module

    if method:
        spec = replace(spec, method={**spec.method, **method})
    rig = kind_module(spec).build(spec)
    settings = method_settings(spec)
    series = series_on_grid(log, rig.channels, settings["h"], spec.name)
    names = list(spec.parameters)
    problem, X0 = build_problem(
        rig, spec, names, series, settings, None, None, reference_noise(spec, rig.channels)
    )
    theta0 = np.array([spec.parameters[k].initial for k in names]) / problem.scale
    return problem, X0, theta0, lm_settings(settings)


def identify_recording(spec: RigSpec, log: Stream, method: dict | None = None, progress=None):
    """Identify ``spec``'s parameters from ``log`` (see :func:`recording_problem`) from their
    initial values. Returns (LMResult, {name: SI value}, HingedProblem)."""
    from physid.estimation.lm import levenberg_marquardt

    problem, X0, theta0, settings = recording_problem(spec, log, method)
    res = levenberg_marquardt(problem, X0, theta0, settings, progress)
    values = dict(zip(problem.names, res.theta * problem.scale, strict=True))
    return res, values, problem
