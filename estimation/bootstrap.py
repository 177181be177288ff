"""Parametric bootstrap of a fit's parameters (issue 24: an uncertainty that covers the truth).

The identified model's own prediction of the data, re-noised with the measurement noise, is
fitted again B times; the spread of the refits is the parameters' uncertainty. It needs no
linearization, so it holds where the linearized covariance does not: for the ellipse drop's
NLP (27) the implicit-function-theorem covariance of ``ipopt_contact.parameter_covariance``
depends on IPOPT's barrier weights on degenerate complementarity rows and jumps by factors
between fits of nearly the same data (docs/planar-contact.md, *Uncertainty*).

Each refit starts from the fit's own primal-dual point (``ipopt_contact.warm_refit_solver``),
on the same NLP (grid, penalty weights, surfaces) with only the data changed, so it follows
the fit's basin of the nonconvex problem: the bootstrap measures how the estimate moves with
the noise, not how far another local minimum lies.

Bias correction: where the estimator is biased under noise, the refits repeat the bias
about the fit (they are the same estimator applied to data whose truth is the fit), so
``Bootstrap.corrected`` = fit − (median of the refits − fit) removes it to first order
(Efron & Tibshirani, *An Introduction to the Bootstrap*, ch. 10, with the median for the
mean: robust to a refit that left the basin). Its std, ``std_corrected``, adds the
median's own Monte Carlo error to the refits' spread.

``parametric_bootstrap`` is the generic loop (draws, refit callable, progress);
``contact_bootstrap`` applies it to a ``ContactFit``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from physid.estimation.ipopt_contact import (
    ContactFit,
    fit_at,
    mu_wall,
    refit,
    warm_refit_solver,
)

# Fewest successful refits for a std: with fewer the spread's own relative error,
# 1/sqrt(2 (n - 1)), exceeds 0.3.
MIN_DRAWS = 6


@dataclass(frozen=True)
class Bootstrap:
    """Refits of re-noised copies of a fit's prediction.

    ``names``: the parameters; ``draws`` [B, P] their refitted values (NaN where a refit
    failed); ``success`` [B]; ``std`` [P] the sample std over the successful refits (inf
    where fewer than ``MIN_DRAWS`` succeeded); ``interval`` [P, 2] the central 95 %
    percentile interval of the refits, ``interval_68`` [P, 2] the central 68 % one (half its
    width is a std robust to a few refits that left the basin); ``noise`` the std of the
    noise added per channel; ``seed``; ``iterations`` [B]; ``wall_s`` and ``cpu_s`` of the
    whole bootstrap; ``center`` [P] the fitted values the refits scatter about (None where
    not given), ``bounds`` [P, 2] the box a corrected value is kept in."""

    names: tuple[str, ...]
    draws: np.ndarray
    success: np.ndarray
    std: np.ndarray
    interval: np.ndarray
    interval_68: np.ndarray
    noise: np.ndarray
    seed: int
    iterations: np.ndarray
    wall_s: float
    cpu_s: float
    extra: dict = field(default_factory=dict)
    center: np.ndarray | None = None
    bounds: np.ndarray | None = None

    @property
    def bias(self) -> np.ndarray:
        """[P] the estimator's bias as the refits show it: median of the successful refits
        less ``center`` (NaN with fewer than ``MIN_DRAWS`` refits or without a center)."""
        good = self.draws[self.success]
        if self.center is None or len(good) < MIN_DRAWS:
            return np.full(len(self.names), np.nan)
        return np.median(good, axis=0) - np.asarray(self.center, float)

    @property
    def corrected(self) -> np.ndarray:
        """[P] the bias-corrected values, center − bias = 2 center − median(refits), kept
        inside ``bounds`` (NaN where there is no bias)."""
        if self.center is None:
            return np.full(len(self.names), np.nan)
        value = np.asarray(self.center, float) - self.bias
        if self.bounds is not None:
            value = np.clip(value, self.bounds[:, 0], self.bounds[:, 1])
        return value

    @property
    def std_corrected(self) -> np.ndarray:
        """[P] std of the corrected value: the refits' spread and the Monte Carlo error of
        their median, whose variance is (pi/2) std^2 / n for n normal draws (x1.04 at
        n = 20)."""
        n = max(int(self.success.sum()), 1)
        return self.std * math.sqrt(1.0 + math.pi / (2.0 * n))

    def to_dict(self) -> dict:
        """Plain lists for estimate.json."""
        ok = self.success
        return {
            "method": "parametric bootstrap: the fit's prediction of the frames re-noised "
            "with the noise below, refitted from the fit's solution (warm-started IPOPT); "
            "std = sample std of the successful refits",
            "parameters": list(self.names),
            "draws_requested": int(len(self.success)),
            "draws_succeeded": int(ok.sum()),
            "seed": self.seed,
            "noise_std": self.noise.tolist(),
            "std": [float(v) if np.isfinite(v) else None for v in self.std],
            "mean": [float(v) for v in np.nanmean(self.draws[ok], axis=0)] if ok.any() else None,
            "interval_95": self.interval.tolist(),
            "interval_68": self.interval_68.tolist(),
            "draws": [[float(v) for v in row] for row in self.draws],
            "iterations_median": float(np.median(self.iterations)) if len(ok) else None,
            "center": None if self.center is None else [float(v) for v in self.center],
            "bias_median": [float(v) if np.isfinite(v) else None for v in self.bias],
            "corrected": [float(v) if np.isfinite(v) else None for v in self.corrected],
            "std_corrected": [float(v) if np.isfinite(v) else None for v in self.std_corrected],
            "wall_s": self.wall_s,
            "cpu_s": self.cpu_s,
            **{name: value.to_dict() for name, value in self.extra.items()},
        }


def parametric_bootstrap(
    mean: np.ndarray,
    noise: np.ndarray,
    refit_fn: Callable[[np.ndarray], tuple[np.ndarray, bool, int]],
    names: tuple[str, ...],
    draws: int,
    seed: int = 0,
    progress: Callable[[int, int], None] | None = None,
    center=None,
    bounds=None,
) -> Bootstrap:
    """Refit ``draws`` copies of the model's prediction ``mean`` [n, c] with independent
    Gaussian noise of std ``noise`` [c] per channel added. ``center`` [P]: the fitted
    values (for the bias correction), ``bounds`` [P, 2] their box.

    ``refit_fn(y)`` returns (parameter values [P], success, iterations) for data y; the
    noise comes from ``numpy.random.default_rng(seed)``, so the draws are reproducible.
    ``progress(done, total)`` is called after each refit."""
    if draws < 1:
        raise ValueError(f"the bootstrap needs at least one draw, got {draws}")
    mean = np.asarray(mean, float)
    noise = np.broadcast_to(np.asarray(noise, float), mean.shape[1:])
    rng = np.random.default_rng(seed)
    t0, c0 = time.perf_counter(), time.process_time()
    values = np.full((draws, len(names)), np.nan)
    success = np.zeros(draws, bool)
    iterations = np.zeros(draws, int)
    for b in range(draws):
        y = mean + rng.standard_normal(mean.shape) * noise
        v, ok, its = refit_fn(y)
        values[b], success[b], iterations[b] = v, ok, its
        if progress is not None:
            progress(b + 1, draws)
    good = values[success]
    if len(good) >= MIN_DRAWS:
        std = np.std(good, axis=0, ddof=1)
        interval = np.percentile(good, [2.5, 97.5], axis=0).T
        interval_68 = np.percentile(good, [16.0, 84.0], axis=0).T
    else:
        std = np.full(len(names), np.inf)
        interval = interval_68 = np.full((len(names), 2), np.nan)
    return Bootstrap(
        tuple(names),
        values,
        success,
        std,
        interval,
        interval_68,
        np.asarray(noise, float),
        int(seed),
        iterations,
        time.perf_counter() - t0,
        time.process_time() - c0,
        center=None if center is None else np.asarray(center, float),
        bounds=None if bounds is None else np.asarray(bounds, float),
    )


@dataclass(frozen=True)
class WallDraws:
    """The wall of the profile in mu (``ipopt_contact.mu_wall``) of a fit and of each of its
    bootstrap refits: ``value`` the fit's (None where its profile never rose by the wall's
    rise), ``draws`` [B] the refits' (NaN where the refit failed or its profile never rose),
    ``std`` their sample std (inf with fewer than ``MIN_DRAWS``), ``solves`` the profile's
    solves over the fit and the refits."""

    value: float | None
    draws: np.ndarray
    std: float
    solves: int

    def to_dict(self) -> dict:
        """Plain values for estimate.json."""
        return {
            "value": self.value,
            "draws": [None if np.isnan(v) else float(v) for v in self.draws],
            "std": float(self.std) if np.isfinite(self.std) else None,
            "solves": self.solves,
        }


def _contact_refitter(fit: ContactFit, walls: list | None = None, warm=None, profile=None):
    """(refit function y -> (J/m m^2, mu), success, iterations; bounds [2, 2] of J/m and mu;
    the warm solver) of warm-started refits of ``fit``'s NLP
    (``ipopt_contact.warm_refit_solver``). A refit counts when IPOPT passed a convergence
    test (its own or the parameter-settling one) and J/m is not on its bound. Where
    ``walls`` is a list, each refit's wall of the profile in mu (``mu_wall``: its value,
    NaN where the refit failed or the profile never rose, and its solves) is appended,
    profiled by ``profile`` (a ``warm_refit_solver(fit.problem, settle=False)``, built here
    where not given). ``warm``: the refits' solver of ``fit.problem`` where already built."""
    warm = warm_refit_solver(fit.problem) if warm is None else warm
    if walls is not None and profile is None:
        profile = warm_refit_solver(fit.problem, settle=False)
    lo, hi = warm.lbx[0], warm.ubx[0]
    a2 = fit.j_over_m / float(fit.x[0])  # J/m = r_hat a^2

    def one(y: np.ndarray) -> tuple[np.ndarray, bool, int]:
        sol = refit(warm, fit, y)
        r_hat = float(sol["parts"]["r_hat"])
        inside = lo * (1 + 1e-6) < r_hat < hi * (1 - 1e-6)
        ok = sol["success"] and inside
        values = np.array([r_hat * a2, float(sol["parts"]["mu"])])
        if walls is not None:
            walls.append(_refit_wall(profile.with_data(y), fit, sol) if ok else (np.nan, 0))
        return values, ok, sol["iterations"]

    return one, np.array([[lo * a2, hi * a2], [warm.lbx[1], warm.ubx[1]]]), warm


def _refit_wall(profile, fit: ContactFit, sol: dict) -> tuple[float, int]:
    """(wall of the profile in mu, solves) of a refit ``sol`` of ``fit``'s NLP, profiled
    from the refit's own primal-dual point on its data (``profile``: a solver to IPOPT's
    own convergence, ``warm_refit_solver(..., settle=False)``, with the refit's data)."""
    found = mu_wall(fit_at(fit, sol), profile)
    return (np.nan if found["value"] is None else found["value"]), found["solves"]


def contact_bootstrap(
    fit: ContactFit,
    sigma: np.ndarray,
    draws: int,
    seed: int = 0,
    noise_scale: float = 1.0,
    progress: Callable[[int, int], None] | None = None,
    wall: bool = False,
) -> Bootstrap:
    """Parametric bootstrap of the ellipse drop's NLP fit: J/m (m^2) and mu.

    The data model is the fit's own trajectory at the frames, ``fit.q[fit.frame_index]``
    (the identified J/m and mu with their contact impulses: it meets the dynamics (16)-(17)
    exactly), plus white noise of std ``sigma`` (sigma_pos, sigma_pos, sigma_theta: m, m,
    rad) times ``noise_scale`` (the residuals' excess over the stated noise, sqrt(s^2),
    where it exceeds 1). A refit counts when IPOPT passed a convergence test (its own or
    the parameter-settling one) and J/m is not on its bound.

    With ``wall``, the fit and each refit are also profiled in mu (``ipopt_contact.mu_wall``)
    and ``extra["mu_wall"]`` holds their walls (``WallDraws``): the walls' spread is the std
    of the fit's wall as an estimate of mu (``ellipse_drop.reported_values``). The fit is
    profiled first: where its own profile never rises there is no wall to give a std, and
    the refits are not profiled (their walls NaN)."""
    profile = warm_refit_solver(fit.problem, settle=False) if wall else None
    own = mu_wall(fit, profile) if wall else None
    walls = [] if wall and own["value"] is not None else None
    one, bounds, _ = _contact_refitter(fit, walls, profile=profile)
    mean = fit.q[fit.frame_index]
    noise = np.asarray(sigma, float) * max(float(noise_scale), 1.0)
    boot = parametric_bootstrap(
        mean, noise, one, ("J_over_m", "mu"), draws, seed, progress,
        center=[fit.j_over_m, fit.mu], bounds=bounds,
    )  # fmt: skip
    if not wall:
        return boot
    if walls is None:
        walls = [(np.nan, 0)] * draws
    values = np.array([w for w, _ in walls])
    found = values[np.isfinite(values)]
    std = float(np.std(found, ddof=1)) if len(found) >= MIN_DRAWS else math.inf
    solves = own["solves"] + sum(n for _, n in walls)
    return replace(boot, extra=boot.extra | {"mu_wall": WallDraws(own["value"], values, std,
                                                                    solves)})  # fmt: skip


def model_error_probe(fit: ContactFit, frames: np.ndarray) -> dict:
    """One noise-free refit of the NLP (warm-started from ``fit``) to ``frames`` [n, 3],
    the IRC model's free run at the fitted values (``drop_checks.irc_frames``): its J/m
    (m^2) and mu less the fitted ones estimate the NLP's model error against IRC at the
    fit, which refits of the NLP's own prediction cannot see — where the run stays near
    the fit's trajectory: on the Section 6.1 throw it leaves it at the first impact and the
    warm refit mostly fails (docs/validation.md, "The NLP's std"). Returns {values [2], bias
    [2] (NaN where the refit failed), success, iterations, cpu_s}."""
    c0 = time.process_time()
    one, _, _ = _contact_refitter(fit)
    values, ok, iterations = one(np.asarray(frames, float))
    bias = values - np.array([fit.j_over_m, fit.mu]) if ok else np.full(2, np.nan)
    return {
        "values": values,
        "bias": bias,
        "success": bool(ok),
        "iterations": int(iterations),
        "cpu_s": time.process_time() - c0,
    }
