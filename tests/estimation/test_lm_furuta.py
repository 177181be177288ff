"""Furuta self-consistency with the four parameters of Section 4.7 (J_Azz, J_Byy, b1, b2), plus
the motor gain K, which a release without control never excites: it must be flagged."""

from __future__ import annotations

import numpy as np
import pytest

from physid.estimation.hinged_problem import HingedProblem
from physid.estimation.initialize import initial_states, smooth_angles
from physid.estimation.lm import LMSettings
from physid.estimation.uncertainty import parameter_covariance
from physid.rigs.models import furuta
from physid.rigs.models.hinged import run_simulation
from physid.rigs.models.identify_hinged import kappa_schedule, solve_continued
from physid.spec import load_spec

TRUTH = {"J_Azz": 0.003, "J_Byy": 0.004, "b1": 1e-3, "b2": 1e-4}  # Table G.5


@pytest.mark.slow
def test_furuta_four_parameters_and_unexcited_gain():
    spec = load_spec("furuta")
    rig = furuta.build(spec)
    h, n = 1e-3, 1000  # the estimator's own h, ε, τ (the spec's fixed values)
    truth = dict(rig.values, **TRUTH)
    _, _, ang = run_simulation(rig, truth, [0.0, np.pi - 0.3], np.zeros(n), h)
    y = ang + np.random.default_rng(0).normal(0.0, 1e-5, ang.shape)
    names = (*TRUTH, "K")
    ps = spec.parameters
    init = np.array([ps[k].initial for k in TRUTH] + [0.1])  # Table 1 initial values
    lo = np.array([ps[k].lower for k in TRUTH] + [0.0])
    hi = np.array([ps[k].upper for k in TRUTH] + [10.0])
    kappa = spec.method_value("kappa", "1", 100.0)

    def at_kappa(k):
        return HingedProblem(
            rig, names, init, lo / init, hi / init, y, np.ones_like(y), np.zeros(n), h, k
        )

    X0 = initial_states(rig, smooth_angles(np.arange(n + 1) * h, y), h)
    # The model is exact, so κ is raised from the spec's 1e3 to 1e8 (``[method] kappa_final``).
    schedule = kappa_schedule({"kappa": kappa, "kappa_final": 1e8})
    settings = LMSettings(tau=1e-9, max_iter=80)
    _, res, _, _ = solve_continued(at_kappa, X0, np.ones(5), settings, schedule)
    assert res.converged
    values = res.theta * init
    cov = parameter_covariance(res.lin, init, values)
    for i, (name, true) in enumerate(TRUTH.items()):
        assert abs(values[i] - true) < 4 * cov.std[i], (name, values[i], cov.std[i])
        assert cov.identifiable[i]
    # All four within the 1e-3 relative that issue 3 asks. Measured (2026-11-24): J_Azz
    # +2.4e-5, J_Byy −1e-7, b1 +2.8e-4, b2 −6.8e-5, relative std 3.0e-5, 1.3e-6, 3.8e-4,
    # 1.4e-4: the tolerance is 2.7 std of b1. Seed 1: b1 −2.0e-4. At κ = 1e3 alone b1's std
    # is 2.2e-3 and seed 1 missed (b1 −1.9e-3).
    assert values[:4] == pytest.approx([0.003, 0.004, 1e-3, 1e-4], rel=1e-3)
    # K: zero sensitivity without control — unchanged, infinite std, not identifiable.
    assert values[4] == pytest.approx(0.1) and not cov.identifiable[4]
    assert np.isinf(cov.std[4]) and 4 in np.flatnonzero(np.abs(cov.directions[:, 0]) > 0.9)


def _identify_simulated(scenario, measure):
    """Simulate ``scenario`` with the spec's [simulation] truth (h = 1e-4), log it at 1 kHz
    through ``measure`` and identify the spec's parameters from Table 1 initial values with
    the other values known, at the spec's h and κ. Returns (LMResult, {name: value}, truth)."""
    from physid.rigs.pipeline.synthetic import identify_recording, record

    rec = record(load_spec("furuta"), scenario, measure)
    res, values, _ = identify_recording(rec.spec, rec.log)
    return res, values, rec.truth


@pytest.mark.slow
def test_driven_furuta_converges_to_the_four_parameters():
    """The sample's drive (3 V chirp, 3 s of it) simulated at h = 1e-4 with Table G.5 truth,
    1 kHz log quantized to 4096 counts/rev, estimator h = 1e-3 and the spec's κ, Table 1
    initial values. Plain Algorithm 1 stops at its iteration limit here with J_Azz at the
    lower bound; with geodesic acceleration it converges (docs/lm-estimator.md). Tolerances:
    Section 4.7 asks 3 % for the inertias at h = 1e-3; the dampers carry the shadow bias of
    the h = 1e-3 discretization (5–11 % measured), so 20 %."""
    from dataclasses import replace

    from physid.rigs.pipeline.sample import FURUTA
    from physid.rigs.pipeline.synthetic import quantizer

    res, values, truth = _identify_simulated(replace(FURUTA, duration=3.0), quantizer(4096))
    assert res.converged, res.reason
    assert res.iterations <= 40
    for name, tol in (("J_Azz", 0.03), ("J_Byy", 0.03), ("b1", 0.2), ("b2", 0.2)):
        assert values[name] == pytest.approx(truth[name], rel=tol), name


@pytest.mark.slow
def test_seed_experiment_4_7_release():
    """Section 4.7: release from π − 0.03 rad, Table G.5 truth simulated at h = 1e-4, 10 s,
    0.001 rad Gaussian noise; J_Azz, J_Byy, b1, b2 free from Table 1 initial values, the other
    values known (the simulation's). At the estimator's h = 1e-3: J_Azz and J_Byy within the
    3 % the issue asks (measured +1.5 % and −0.3 % at the spec's κ = 1e3). The dampers are
    shadow parameters of the coarser step (−21 %, −34 % measured): only their convergence
    is checked here, as at h = 1e-2 in the paper."""
    from physid.rigs.pipeline.sample import EncoderScenario

    rng = np.random.default_rng(0)
    res, values, truth = _identify_simulated(
        EncoderScenario(duration=10.0, angles0=(0.0, np.pi - 0.03)),
        lambda a: a + rng.normal(0.0, 1e-3, a.shape),
    )
    assert res.converged, res.reason
    assert values["J_Azz"] == pytest.approx(truth["J_Azz"], rel=0.03)
    assert values["J_Byy"] == pytest.approx(truth["J_Byy"], rel=0.03)
    assert 0 < values["b1"] and 0 < values["b2"]


@pytest.mark.slow
def test_thirteen_parameter_swing_up():
    """Section 4.6's identification on a simulated swing-up: gain, five inertias, four
    friction coefficients and the tilt of gravity (the paper's 13-dimensional quaternion
    tangent less the rotation about gravity, which does not change g) from Table 1 initial
    values; truth Table G.5 plus ``FURUTA_SECTION_4_6_TRUTH``, simulated at h = 1e-4 and
    recorded as the controller wrote it (100 Hz, 1 mV) with 4096-count encoders.

    Measured (2026-11-24, with the physical-consistency LMI): 17 iterations, J_Azz +1.5 %,
    J_Byy −0.25 %, J_Bzz −1.1 %, K −0.06 %, tilt −0.9 % / −2.6 %. The arm never turns about
    its x and y axes: without the LMI both J_Axx and J_Ayy ran to their lower bound (a
    massless wobble absorbs the discretization error, as "0 (200.0)" in Table 4); with it,
    J_Axx + J_Ayy ≥ J_Azz keeps the arm a body, J_Axx ends on its bound and J_Ayy near
    J_Azz. Both must be flagged, not reported with the ~1e-7 std their linearization gives.
    The four friction coefficients carry the shadow bias of h = 1e-3 (b1 ≈ 0, b2 +125 %,
    μ1 +16 %, μ2 −74 %; a refit at h/2 about halves it, eps_fric 1–100 barely moves it), so
    they are only required to be non-negative."""
    from physid.rigs.models.identify_hinged import fitted_covariance
    from physid.rigs.pipeline.sample import SWING_UP
    from physid.rigs.pipeline.synthetic import (
        FURUTA_SECTION_4_6,
        FURUTA_SECTION_4_6_METHOD,
        FURUTA_SECTION_4_6_TRUTH,
        identify_recording,
        quantizer,
        record,
    )
    from physid.spec import with_parameters

    rec = record(load_spec("furuta"), SWING_UP, quantizer(4096), FURUTA_SECTION_4_6_TRUTH)
    spec = with_parameters(rec.spec, FURUTA_SECTION_4_6)
    res, values, problem = identify_recording(spec, rec.log, FURUTA_SECTION_4_6_METHOD)
    assert res.converged, res.reason
    assert res.iterations <= 20  # issue 3's limit (measured 17)
    assert problem.consistency.feasible(res.theta)  # both bodies physically possible
    names = list(problem.names)
    cov = fitted_covariance(problem, res)
    flagged = {k for k, ok in zip(names, cov.identifiable, strict=True) if not ok}
    assert {"J_Axx", "J_Ayy"} <= flagged
    truth = rec.truth
    for name in ("J_Azz", "J_Byy", "J_Bzz"):  # the inertias the swing-up excites: 5 %
        assert name not in flagged
        assert values[name] == pytest.approx(truth[name], rel=0.05), name
    # The gain is excited by every pulse: 1 % (measured 0.01 %). The tilt: within 1e-3 rad
    # of the truth's 0.01 and −0.02 rad, a twentieth of a degree (measured 2e-5, 6e-4).
    assert values["K"] == pytest.approx(truth["K"], rel=0.01)
    assert abs(values["tilt_x"] - truth["tilt_x"]) < 1e-3
    assert abs(values["tilt_z"] - truth["tilt_z"]) < 1e-3
    assert all(values[k] >= 0 for k in ("b1", "b2", "mu1", "mu2"))
