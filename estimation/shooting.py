"""Single-shooting identification of a few parameters of a simulated trajectory: a dense
Levenberg–Marquardt on r(θ) with Jacobians by forward sensitivities, and the steepest descent
with an Armijo line search of Caldwell, Coleman & Correll (Section III) for comparison.

The residual r(θ) [m] (measured minus simulated, weighted) comes from a rollout of the
variational integrator from a known start; its Jacobian J [m, p] from the rollout's tangent
(``dynamics.variational.adjoint.forward_sensitivities``: p tangent rollouts, each step's
derivative by the implicit-function theorem). With p ~ 2 the normal matrix is p × p and dense:
the project's arrow-structured LM (``estimation.lm``) is for state trajectories as unknowns
and has no states to eliminate here; multiple shooting, whose segment starts are such
unknowns, uses it (``estimation.multiple_shooting``).

Arrays in, arrays out; the callables are the caller's (usually jitted) functions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

# A returned point passes the convergence test when one more Gauss–Newton step would move
# no parameter by more than this fraction of its std (as ``rigs.models.identify_hinged``'s
# GN_STEP_STD for the joint LM): what is left is far below what the data resolve.
GN_STEP_STD = 0.1


@dataclass
class ShootingResult:
    """θ, cost ½‖r‖², iterations and function evaluations, why it stopped, the cost after
    each accepted iteration and the Gauss–Newton covariance s² (JᵀJ)⁻¹ (s² = ‖r‖²/(m − p)).

    ``converged`` is True only when the convergence test (``gauss_newton_test``) passed at
    the returned point, whatever rule ended the loop; ``test`` says what it measured (passed
    or not). ``reason`` is the stop rule."""

    theta: np.ndarray
    cost: float
    iterations: int
    evaluations: int
    converged: bool
    reason: str
    history: list[float] = field(default_factory=list)
    covariance: np.ndarray | None = None
    test: str | None = None

    @property
    def std(self) -> np.ndarray | None:
        return None if self.covariance is None else np.sqrt(np.diag(self.covariance))


def levenberg_marquardt(
    residual_jacobian: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]],
    residual: Callable[[np.ndarray], np.ndarray],
    theta0,
    lower=None,
    upper=None,
    max_iter: int = 50,
    step_tol: float = 1e-12,
    grad_tol: float = 1e-14,
    jacobian_at_trial: bool = False,
) -> ShootingResult:
    """Marquardt's method (damping μ·diag(JᵀJ)) on ½‖r(θ)‖² inside the box [lower, upper].

    Stops when the accepted step is below ``step_tol`` relative to θ (the parameters have
    settled to round-off of the rollout's Newton tolerance), the scaled gradient
    ‖Jᵀr‖ / (‖J‖‖r‖) is below ``grad_tol``, no damped step lowers the cost (damping above
    1e16) or at ``max_iter``. Whatever the stop, ``converged`` is the verdict of
    ``gauss_newton_test`` at the returned point. Trial steps are clipped to the box. An iteration
    is one Jacobian; rejected trials cost one residual each.

    ``jacobian_at_trial``: evaluate trials with ``residual_jacobian`` and keep the Jacobian of
    an accepted one, instead of a residual at the trial and then a residual + Jacobian at the
    accepted point. Forward sensitivities compute the rollout with the tangents, so where most
    trials are accepted this saves one rollout per iteration (the hexagon: 7 of 15); a rejected
    trial then costs a Jacobian instead of a residual."""
    theta = np.asarray(theta0, float).copy()
    lo = np.full_like(theta, -np.inf) if lower is None else np.asarray(lower, float)
    hi = np.full_like(theta, np.inf) if upper is None else np.asarray(upper, float)
    r, J = (np.asarray(a) for a in residual_jacobian(theta))
    cost = 0.5 * float(r @ r)
    mu, nu = 1e-3, 2.0
    history, evaluations = [cost], 1
    reason = "iteration limit"
    for it in range(1, max_iter + 1):
        JtJ, g = J.T @ J, J.T @ r
        if np.linalg.norm(g) <= grad_tol * np.linalg.norm(J) * max(np.linalg.norm(r), 1e-300):
            reason = "gradient at round-off"
            return _result(theta, cost, it - 1, evaluations, reason, history, J, r, lo, hi)
        D = np.diag(np.diag(JtJ))
        first_trial = True
        while True:
            step = np.linalg.solve(JtJ + mu * D, -g)
            trial = np.clip(theta + step, lo, hi)
            if first_trial and _negligible(trial - theta, theta, step_tol):
                # The undamped-enough first proposal of this iteration is already at
                # round-off: trying it (and its rejected successors) costs rollouts only.
                reason = "step at round-off"
                return _result(theta, cost, it - 1, evaluations, reason, history, J, r, lo, hi)
            first_trial = False
            if jacobian_at_trial:
                r_trial, J_trial = (np.asarray(a) for a in residual_jacobian(trial))
            else:
                r_trial = np.asarray(residual(trial))
            evaluations += 1
            cost_trial = 0.5 * float(r_trial @ r_trial)
            predicted = -(g @ (trial - theta)) - 0.5 * (trial - theta) @ JtJ @ (trial - theta)
            rho = (cost - cost_trial) / predicted if predicted > 0 else -1.0
            if rho > 0:
                mu *= max(1.0 / 3.0, 1 - (2 * rho - 1) ** 3)
                nu = 2.0
                break
            mu *= nu
            nu *= 2
            if mu > 1e16:
                reason = "no decrease possible (round-off)"
                return _result(theta, cost, it, evaluations, reason, history, J, r, lo, hi)
        small = _negligible(trial - theta, theta, step_tol)
        theta = trial
        if jacobian_at_trial:
            r, J = r_trial, J_trial
        else:
            r, J = (np.asarray(a) for a in residual_jacobian(theta))
            evaluations += 1
        cost = 0.5 * float(r @ r)
        history.append(cost)
        if small:
            reason = "step at round-off"
            return _result(theta, cost, it, evaluations, reason, history, J, r, lo, hi)
    return _result(theta, cost, max_iter, evaluations, reason, history, J, r, lo, hi)


def _negligible(step, theta, step_tol) -> bool:
    return bool(np.all(np.abs(step) <= step_tol * np.maximum(np.abs(theta), 1e-300)))


def gauss_newton_test(J, r, theta, lower, upper) -> tuple[bool, str]:
    """(passed, what it measured): the convergence test of a returned point θ with residual r
    and Jacobian J there, whatever rule stopped the loop (the idea of
    ``rigs.models.identify_hinged.fit_status``).

    One more undamped Gauss–Newton step, parameters on a bound that the gradient pushes out
    of the box held there (a minimum on a bound passes), must move no parameter by more than
    ``GN_STEP_STD`` of its std. The std is that of max(s², 1) (JᵀJ)⁻¹: the residuals' own
    variance s², but never below the unit variance, which is the stated noise when r is
    weighted by its std (the loop's residuals are). Without that floor a noise-free fit,
    whose s² is round-off, would fail on round-off steps; with unweighted residuals whose
    noise is below 1 the test is looser than stated.

    A stop without a decrease at maximal damping ("no decrease possible") is a minimum only
    when this passes: LM ends so at round-off of a minimum's cost, but also where the
    residual does not follow its Jacobian (a kink, an inexact inner solve) far from one."""
    J, r, theta = np.asarray(J), np.asarray(r), np.asarray(theta, float)
    m, p = J.shape
    JtJ, g = J.T @ J, J.T @ r
    held = ((theta <= lower) & (g > 0)) | ((theta >= upper) & (g < 0))
    free = ~held
    step = np.zeros(p)
    step[free] = -np.linalg.pinv(JtJ[np.ix_(free, free)]) @ g[free]
    s2 = max(float(r @ r) / max(m - p, 1), 1.0)
    std = np.sqrt(s2 * np.clip(np.diag(np.linalg.pinv(JtJ)), 0.0, None))
    ok = np.isfinite(std) & (std > 0)
    worst = float(np.max(np.abs(step[ok]) / std[ok], initial=0.0))
    cost = 0.5 * float(r @ r)
    decrease = -float(g @ step) - 0.5 * float(step @ JtJ @ step)
    passed = worst <= GN_STEP_STD
    text = (
        f"Gauss–Newton test: one more step would move no parameter by more than {worst:.2g} "
        f"of its std (passes at ≤ {GN_STEP_STD:g}) and lower the cost by "
        f"{decrease / max(cost, 1e-300):.2g} of itself"
    )
    return passed, text


def _result(theta, cost, iterations, evaluations, reason, history, J, r, lower, upper):
    m, p = J.shape
    s2 = float(r @ r) / max(m - p, 1)
    try:
        cov = s2 * np.linalg.inv(J.T @ J)
    except np.linalg.LinAlgError:
        cov = None
    converged, test = gauss_newton_test(J, r, theta, lower, upper)
    return ShootingResult(
        theta, cost, iterations, evaluations, converged, reason, history, cov, test
    )


def steepest_descent_armijo(
    cost_gradient: Callable[[np.ndarray], tuple[float, np.ndarray]],
    cost: Callable[[np.ndarray], float],
    theta0,
    alpha: float = 0.4,
    beta: float = 0.4,
    grad_tol: float = 1e-3,
    max_iter: int = 10_000,
    max_backtracks: int = 60,
) -> ShootingResult:
    """The draft's optimizer: θ ← θ − βʲ ∇J with the smallest j ≥ 0 such that
    J(θ − βʲ∇J) ≤ J(θ) − α βʲ ‖∇J‖² (Armijo, α = β = 0.4), until ‖∇J‖ < ``grad_tol``
    (the draft's 1e-3). The gradient is the caller's (the discrete adjoint, Lemma 1)."""
    theta = np.asarray(theta0, float).copy()
    value, g = cost_gradient(theta)
    value, g = float(value), np.asarray(g)
    history, evaluations = [value], 1
    for it in range(1, max_iter + 1):
        if np.linalg.norm(g) < grad_tol:
            return ShootingResult(theta, value, it - 1, evaluations, True, "gradient", history)
        s = 1.0
        for _ in range(max_backtracks):
            trial = theta - s * g
            v = float(cost(trial))
            evaluations += 1
            if np.isfinite(v) and v <= value - alpha * s * float(g @ g):
                break
            s *= beta
        else:
            return ShootingResult(theta, value, it, evaluations, False, "line search", history)
        theta = trial
        value, g = cost_gradient(theta)
        value, g = float(value), np.asarray(g)
        evaluations += 1
        history.append(value)
    return ShootingResult(theta, value, max_iter, evaluations, False, "iteration limit", history)
