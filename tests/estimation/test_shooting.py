"""The dense shooting optimizers of ``estimation.shooting`` on a problem with a known answer
(a decaying exponential, NumPy only): LM converges to the truth and stops on a round-off step
without trying it; Armijo steepest descent reaches the draft's gradient tolerance."""

import numpy as np

from physid.estimation.shooting import levenberg_marquardt, steepest_descent_armijo

T = np.linspace(0.0, 3.0, 40)
TRUTH = np.array([2.0, 1.3])  # amplitude, rate (1/s)


def _model(theta):
    return theta[0] * np.exp(-theta[1] * T)


def _residual(theta, measured):
    return _model(theta) - measured


def _residual_jacobian(theta, measured):
    e = np.exp(-theta[1] * T)
    return _residual(theta, measured), np.stack([e, -theta[0] * T * e], axis=1)


def test_lm_recovers_noise_free_parameters_and_stops_at_round_off():
    clean = _model(TRUTH)
    fit = levenberg_marquardt(
        lambda t: _residual_jacobian(t, clean), lambda t: _residual(t, clean), [0.5, 4.0]
    )
    assert fit.converged, fit.reason
    # Noise-free and smooth: the truth to round-off of O(1) values (1e-12).
    np.testing.assert_allclose(fit.theta, TRUTH, rtol=1e-12)
    # The last accepted step reached round-off, or the next proposal was negligible and was
    # not evaluated: no more than one residual per Jacobian plus a few rejected trials.
    assert fit.reason == "step at round-off"
    assert fit.evaluations <= 2 * fit.iterations + 6


def test_lm_std_covers_the_error_with_noise():
    rng = np.random.default_rng(0)
    measured = _model(TRUTH) + 0.01 * rng.standard_normal(T.size)
    fit = levenberg_marquardt(
        lambda t: _residual_jacobian(t, measured), lambda t: _residual(t, measured), [0.5, 4.0]
    )
    assert fit.converged
    # One seed: the error within 4 std (a 4σ miss has probability ~1e-4 per parameter).
    assert np.all(np.abs(fit.theta - TRUTH) <= 4 * fit.std), (fit.theta, fit.std)


def test_steepest_descent_reaches_the_gradient_tolerance():
    clean = _model(TRUTH)

    def cost(t):
        r = _residual(t, clean)
        return 0.5 * r @ r

    def cost_gradient(t):
        r, J = _residual_jacobian(t, clean)
        return 0.5 * r @ r, J.T @ r

    fit = steepest_descent_armijo(cost_gradient, cost, [1.5, 1.0], grad_tol=1e-6)
    assert fit.converged and fit.reason == "gradient"
    _, g = cost_gradient(fit.theta)
    assert np.linalg.norm(g) < 1e-6
    # Near the truth the cost is ½ δᵀ(JᵀJ)δ: a gradient below 1e-6 bounds δ by 1e-6 over
    # the smallest eigenvalue of JᵀJ (> 0.1 here), so 1e-4 absolute is safe.
    np.testing.assert_allclose(fit.theta, TRUTH, atol=1e-4)


def test_lm_with_the_jacobian_at_each_trial_takes_the_same_steps():
    clean = _model(TRUTH)

    def run(flag):
        return levenberg_marquardt(
            lambda t: _residual_jacobian(t, clean), lambda t: _residual(t, clean), [0.5, 4.0],
            jacobian_at_trial=flag,
        )  # fmt: skip

    plain, ahead = run(False), run(True)
    # The same iterates (the same r and J at every accepted point, in the same order):
    # identical histories and θ; one evaluation fewer per accepted step.
    assert ahead.iterations == plain.iterations and ahead.reason == plain.reason
    np.testing.assert_array_equal(ahead.theta, plain.theta)
    np.testing.assert_array_equal(ahead.history, plain.history)
    assert ahead.evaluations == plain.evaluations - plain.iterations


# ------------------------------------------------------------------ the convergence test


def _quantized(q, measured):
    """Residual in units of the 0.01 noise of a model whose output is resolved to ``q`` only
    (a rollout solved to a tolerance): piecewise constant in θ, so LM ends each run on "no
    decrease possible" once the steps fall inside one plateau. The Jacobian is the smooth
    model's."""

    def rj(theta):
        out = q * np.round(_model(theta) / q)
        _, J = _residual_jacobian(theta, measured)
        return (out - measured) / 0.01, J / 0.01

    return rj


def _smooth_fit(measured):
    fit = levenberg_marquardt(
        lambda t: tuple(a / 0.01 for a in _residual_jacobian(t, measured)),
        lambda t: _residual(t, measured) / 0.01, [0.5, 4.0],
    )  # fmt: skip
    assert fit.converged, fit.test
    return fit


def _noisy():
    return _model(TRUTH) + 0.01 * np.random.default_rng(0).standard_normal(T.size)


def test_a_round_off_stop_at_the_minimum_stays_converged():
    measured = _noisy()
    smooth = _smooth_fit(measured)
    rj = _quantized(1e-8, measured)  # output to 1e-6 of the noise: round-off
    fit = levenberg_marquardt(rj, lambda t: rj(t)[0], [0.5, 4.0])
    assert fit.reason == "no decrease possible (round-off)"
    # The plateau it stops on lies 1e-6 std from the smooth minimum: a minimum, and the
    # Gauss–Newton test (one more step < 0.1 std) says so.
    assert fit.converged, fit.test
    np.testing.assert_allclose(fit.theta, smooth.theta, atol=1e-4 * smooth.std.max())


def test_a_round_off_stop_away_from_the_minimum_is_not_converged():
    """Issue 24: "no decrease possible" was reported as converged wherever it happened. With
    the output resolved to 3 × the noise, LM stalls on a plateau ~1.5 std from the minimum:
    one more Gauss–Newton step still moves a parameter by 0.45 std, so it is a stall."""
    measured = _noisy()
    smooth = _smooth_fit(measured)
    rj = _quantized(0.03, measured)
    fit = levenberg_marquardt(rj, lambda t: rj(t)[0], [0.5, 4.0])
    assert fit.reason == "no decrease possible (round-off)"
    assert not fit.converged
    assert "Gauss–Newton test" in fit.test and "passes at ≤ 0.1" in fit.test
    # It is indeed away from the minimum: by more than one std in some parameter.
    assert np.max(np.abs(fit.theta - smooth.theta) / smooth.std) > 1.0


def test_a_residual_that_does_not_follow_its_jacobian_stalls_at_the_start():
    """A Jacobian with one column of the wrong sign (a derivative that misses a term): no
    damped step lowers the cost, LM ends on "no decrease possible" at the start, far from
    the minimum; the old code called it converged."""
    clean = _model(TRUTH)

    def rj(theta):
        r, J = _residual_jacobian(theta, clean)
        return r / 0.01, J * np.array([1.0, -1.0]) / 0.01

    fit = levenberg_marquardt(rj, lambda t: rj(t)[0], [1.5, 1.0])
    assert fit.reason == "no decrease possible (round-off)"
    assert not fit.converged, fit.test
