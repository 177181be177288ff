"""The prediction checks' observer and their limit on a motion that amplifies the state's
noise (``estimation.prediction``), on a system with a closed-form solution: the linearized
inverted pendulum x'' = λ² x, whose error in the initial state grows as e^(λt)."""

from dataclasses import replace

import numpy as np
import pytest

from physid.estimation.prediction import (
    Channel,
    InitialState,
    Observations,
    expected_ratio,
    free_run,
    refine_initial_state,
)

LAMBDA, DT, N, SIGMA = 3.0, 0.01, 201, 1e-3  # 1/s, s, samples, m
START = np.array([0.1, -0.3])  # x0 (m), v0 (m/s): the unstable mode's amplitude is 0
CHANNELS = (Channel("x", "m", SIGMA),)
WINDOW = 50  # the free run's initial state is refined over the first 0.5 s


def simulator(lam: float):
    """Simulate of x'' = lam² x in closed form: x0 cosh(lam t) + v0/lam sinh(lam t)."""

    def simulate(x0, start, steps):
        x0 = np.asarray(x0, float)
        t = np.arange(steps + 1) * DT
        return (x0[:, :1] * np.cosh(lam * t) + x0[:, 1:] / lam * np.sinh(lam * t))[..., None]

    return simulate


def observed(seed: int) -> Observations:
    truth = simulator(LAMBDA)(START[None], None, N - 1)[0]
    noise = np.random.default_rng(seed).standard_normal(truth.shape) * SIGMA
    return Observations(np.arange(N) * DT, truth + noise, np.ones(truth.shape, bool))


def initial(stages: int = 1) -> InitialState:
    return InitialState(START + [2e-3, 0.05], lambda z: z, step=1e-6, stages=stages)


@pytest.mark.parametrize("stages", [1, 3])
def test_the_observer_reaches_the_least_squares_initial_state(stages):
    # The model is linear in the initial state, so the least-squares state over the window
    # is one linear solve: the refinement must reach it (to 1e-6 of the noise-level error
    # of the state; the finite-difference Jacobian is exact up to round-off).
    obs = observed(101)
    z, rms = refine_initial_state(simulator(LAMBDA), initial(stages), obs, CHANNELS, WINDOW)
    t = obs.t[: WINDOW + 1]
    A = np.stack([np.cosh(LAMBDA * t), np.sinh(LAMBDA * t) / LAMBDA], axis=1)
    best = np.linalg.lstsq(A, obs.y[: WINDOW + 1, 0], rcond=None)[0]
    assert z == pytest.approx(best, abs=1e-6)
    # the window's residual is the noise's: RMS within 20 % of 1 noise std (51 samples)
    assert 0.8 < rms < 1.2


def test_a_correct_model_of_a_motion_that_amplifies_noise_is_no_poor_fit():
    # The free run's initial state carries the noise of 51 samples; over the next 1.5 s
    # the unstable mode multiplies its error by e^4.5 = 90, so the correct model misses by
    # far more than 3 x the noise. What a correct model scores on its own motion re-noised
    # (expected_ratio) is the limit's scale: the correct model passes on every noise draw,
    # and a model 10 % off in lambda (its prediction departs by ~200 x the noise) fails.
    correct = []
    for seed in (101, 102, 103, 104):
        obs = observed(seed)
        for lam, poor in ((LAMBDA, False), (1.1 * LAMBDA, True), (0.9 * LAMBDA, True)):
            sim = simulator(lam)

            def check(o, sim=sim):
                return [free_run(sim, initial(), o, CHANNELS, WINDOW)]

            found = check(obs)[0]
            expected = expected_ratio(check, obs, found.predicted, CHANNELS)[0]
            assert replace(found, expected=expected).poor is poor, (seed, lam, found.ratio)
            if lam == LAMBDA:
                correct.append(found.ratio[0])
                assert expected[0] > 3.0  # the limit is raised above 3 x the noise
    # ... and it had to be: the correct model's free run misses by more than 3 x the noise
    # on some draws (measured 2026-11-27: 6.9, 11.5, 14.0 and 1.1 x; the limit 3 x 24.0)
    assert max(correct) > 3.0
