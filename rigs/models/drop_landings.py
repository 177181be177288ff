"""The ellipse drop's restitution at a landing the ballistic flights cannot read, by a local fit
of the IRC model over the landing's frames (issue 24).

A landing ellipse often touches with one end and then the other 10-15 ms later, within a
frame interval or two. The flights on either side then do not meet at one instant
(``drop_flights``: no single impact), and the frame-difference estimate that stood for such
an impact is off: over 150 varied throws its first landings read −0.026 ± 0.049 for 0.2
(51 / 82 % within 1 / 2 std at 1 mm of noise), and at 0.1 mm of noise one read 0.120 ± 0.004
(z −20): the frame differences mix two impacts and the spin-up between them.

Here the IRC model (``drop_checks.simulator``) is run from the flight before (at most
``REACH`` of its frames) over the frames up to ``REACH`` after the impact or the next
resolved one, and its start (pose and velocity at the window's first frame), restitution,
J/m and μ are fitted by least squares to those frames alone (scipy's ``least_squares``,
ε bounded to [0, 1]), from the whole record's J/m and μ. The window is a few frames either
side of one landing, short enough that the motion does not yet depend on its start below
the noise (the whole record's free run does: ``drop_checks.output_error`` stalls there).
Over 50 varied sliding throws (1 mm) the drop path's restitution went from an error of
−0.017 ± 0.052 (median |error| 0.024; 54 / 78 % within 1 / 2 std) to −0.008 ± 0.032
(0.006; 54 / 85 %), and with the retry and the step error below to −0.001 ± 0.015 (0.003;
74 / 89 %) (docs/validation.md, "Landing fits" and "Landing fits: the retry").

A landing fit is used only where it is one answer the frames give:

- its χ² per degree of freedom is below χ²'s 99.9 % point (``output_error_limit``: the model
  follows these frames to their noise);
- the restitution is inside (0, 1), not on its box (a bound is no measurement);
- restarts from other restitutions (``RESTITUTION_STARTS``) that end within
  ``AMBIGUOUS_CHI2`` of the best agree with it within 2 of its std (a landing of a slow,
  rocking contact has several restitutions that fit it: one such fit read 0.45 ± 0.04 for
  0.2, with another minimum at 0.03).

Where the first window's fit is refused, it is tried once more over the window one frame
earlier (``earlier_window``), from the flight through that window's first two frames: where
the first contact falls in the interval before the one the flights' split chose, the flight
before straddles it, and the fit from there cannot follow the landing.

Its std is the Gauss-Newton one, max(1, s²) (JᵀJ)⁻¹ over all nine variables (so J/m's and
μ's uncertainty is in it), with J by forward differences of about a third of the noise per
variable (the roll-out is piecewise smooth: an impact moves by whole sub-steps), and in
quadrature with its step error: how far the fit moves when refitted at ``substep_for``'s
coarser step. IRC is a model of the landing's few milliseconds; where the frames come from
another (a coarser-stepped IRC that sinks at each landing, as the Section 6.1 throw's), the
fit can follow them with a restitution 0.02 off and a noise std of 0.0013, and only the
step error, 0.04-0.08 there against a median 0.003 on converged truths, says so.

The fit's μ is recorded with a std of the same two parts (``Landing.mu_std``), not
reported: a landing knows μ to 0.02-0.03 on varied throws, too little to check the whole
record's (docs/validation.md, "μ checked by the landings").
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares

from physid.rigs.models.drop_checks import (
    SUBSTEP_H,
    frame_noise,
    output_error_limit,
    restitution,
    simulator,
    substep_for,
)
from physid.rigs.models.drop_flights import ACCELERATION, MIN_AFTER, fit_flight, impact_flights

# Restitutions the fit restarts from, besides the frames' own estimate: a landing's χ² has
# local minima in ε (a rocking contact), and one start alone cannot tell.
RESTITUTION_STARTS = (0.05, 0.2, 0.4, 0.7)
# χ² units: another start's minimum this close to the best is a competing answer (2 ln 7.4:
# a likelihood ratio the frames barely prefer).
AMBIGUOUS_CHI2 = 4.0
# Forward-difference step of the fit's Jacobian, in each variable's scale (the pose in noise
# std, the velocity in noise std per frame interval, ε in RESTITUTION_SCALE)
DIFF_STEP = 0.3
RESTITUTION_SCALE = 0.01
MU_SCALE = 0.01
# Frames of the landing fit on each side of the impact (at most; the flights' own where
# fewer): the frames nearest the landing hold its restitution, and over a longer window the
# motion comes to depend on its start below the noise (a fit over 20 frames left s^2 156)
REACH = 6
# The landing fit's IRC sub-step as a fraction of ``substep_for``'s (no shorter than
# ``SUBSTEP_H``): restitution moves the frames after the landing little, so the roll-out's
# jitter (an impact moves by whole sub-steps) must stay well below the noise. At
# ``substep_for``'s own step two first landings of varied throws read 0.016 and 0.003 for
# 0.2 with std 0.002 and 0.0005 (z 7.4, -5.3); at a tenth 0.007 +- 0.005 and -0.001 +- 0.003.
SUBSTEP_FRACTION = 0.1


@dataclass(frozen=True)
class Landing:
    """A landing fit: ``restitution`` and its ``std``; ``s2`` χ²/(n − 9) at the end and
    ``s2_limit`` the largest kept; ``frames`` in the window (first, last index);
    ``alternatives`` the restitutions of the restarts within ``AMBIGUOUS_CHI2`` of the best;
    ``usable`` and, where not, ``why``. ``std`` is ``noise_std`` (the Gauss-Newton one) and
    ``step_error`` (the refit's change at the coarser roll-out step; NaN where the fit is
    not usable: none is computed) in quadrature. ``mu``, ``mu_noise_std`` and
    ``mu_step_error``: the same for the fit's friction coefficient (``mu_std``)."""

    restitution: float
    noise_std: float
    step_error: float
    s2: float
    s2_limit: float
    frames: tuple[int, int]
    alternatives: tuple[float, ...]
    usable: bool
    why: str = ""
    mu: float = math.nan
    mu_noise_std: float = math.nan
    mu_step_error: float = math.nan

    @property
    def std(self) -> float:
        """The restitution's std: the noise's and the roll-out step's parts in quadrature
        (the noise's alone where no step error was computed)."""
        step = self.step_error if math.isfinite(self.step_error) else 0.0
        return math.hypot(self.noise_std, step)

    @property
    def mu_std(self) -> float:
        """μ's std: its noise and roll-out step parts in quadrature (NaN where the fit is not
        usable: no step error was computed)."""
        return math.hypot(self.mu_noise_std, self.mu_step_error)

    def to_dict(self) -> dict:
        """Plain values for estimate.json."""

        def plain(x: float):
            return x if math.isfinite(x) else None

        return {
            "restitution": self.restitution,
            "std": plain(self.std),
            "noise_std": plain(self.noise_std),
            "step_error": plain(self.step_error),
            "s2": self.s2,
            "s2_limit": self.s2_limit,
            "frames": list(self.frames),
            "alternatives": list(self.alternatives),
            "usable": self.usable,
            "why": self.why,
            "mu": plain(self.mu),
            "mu_std": plain(self.mu_std),
            "mu_noise_std": plain(self.mu_noise_std),
            "mu_step_error": plain(self.mu_step_error),
        }


def landing_fit(t_m, q_m, geometry, frames: tuple[int, int], start, eps0: float,
                contact: dict, sigma: np.ndarray) -> Landing:  # fmt: skip
    """Fit the IRC model's start, restitution, J/m and μ to frames ``frames[0]..frames[1]``
    of ``q_m`` [n, 3] at ``t_m`` (s), from ``start`` (pose, velocity at the first frame: m,
    rad; m/s, rad/s), restitution ``eps0`` (and ``RESTITUTION_STARTS``) and ``contact``'s
    J_over_m (m²) and mu; ``sigma`` [3] the frames' noise (m, m, rad). J/m and μ are fitted
    too, so that ε's std carries their uncertainty: held at a whole-record fit's values
    (the NLP's, off by 0.01 in μ and 1.5 % in J/m on varied throws) two landings read
    −0.0076 ± 0.0016 and ± 0.0027 for a truth they met within 1 std at the true values."""
    first, last = frames
    t = np.asarray(t_m, float)[first : last + 1]
    y = np.asarray(q_m, float)[first : last + 1]
    h = float(np.median(np.diff(t)))
    nodes = np.rint((t - t[0]) / h).astype(int)
    q0, v0 = (np.asarray(a, float) for a in start)
    reach = max(geometry.a, geometry.b)
    speed = float(np.hypot(v0[0], v0[1]) + abs(v0[2]) * reach)
    step = substep_for(float(sigma[0]), speed)
    fine, coarse = max(step * SUBSTEP_FRACTION, SUBSTEP_H), max(step, SUBSTEP_H)
    jm0, mu0 = float(contact["J_over_m"]), float(contact["mu"])
    eps0 = min(max(eps0, 0.0), 1.0)
    # variables: pose (noise std), velocity (noise std per frame interval), restitution,
    # J/m (per cent) and mu, each in its scale: restitution's and mu's places
    EPS, MU = 6, 8
    scale = np.concatenate([sigma, sigma / h, [RESTITUTION_SCALE, 0.01 * jm0, MU_SCALE]])
    base = np.concatenate([q0, v0, [eps0, jm0, mu0]])
    box = np.array([[0.0, 1.0], [0.5 * jm0, 2.0 * jm0], [0.0, 2.0]])  # eps, J/m, mu
    lower = np.full(9, -np.inf)
    upper = np.full(9, np.inf)
    lower[EPS:], upper[EPS:] = ((box[:, 0] - base[EPS:]) / scale[EPS:],
                                (box[:, 1] - base[EPS:]) / scale[EPS:])  # fmt: skip

    def residuals(z, sub):
        p = base + z * scale
        eps, jm, mu = np.clip(p[EPS:], box[:, 0], box[:, 1])
        sim = simulator(geometry, 1.0, float(jm), float(mu), float(eps), h, sub)
        pred = sim((p[:3][None], p[3:6][None]), np.zeros(1, int), int(nodes[-1]))[0][nodes]
        d = pred - y
        d[:, 2] = (d[:, 2] + math.pi) % (2 * math.pi) - math.pi
        return (d / sigma).ravel()

    def solve(z0, sub):
        return least_squares(residuals, z0, bounds=(lower, upper), diff_step=DIFF_STEP, args=(sub,))

    starts = []
    for e in (eps0, *RESTITUTION_STARTS):
        z0 = np.zeros(9)
        z0[EPS] = min(max((e - eps0) / RESTITUTION_SCALE, lower[EPS]), upper[EPS])
        starts.append(z0)
    ends = [solve(z0, fine) for z0 in starts]
    best = min(ends, key=lambda s: s.cost)
    chi2 = 2.0 * best.cost
    n = best.fun.size
    s2 = chi2 / max(n - 9, 1)
    value = float(base[EPS] + best.x[EPS] * RESTITUTION_SCALE)
    mu = float(base[MU] + best.x[MU] * MU_SCALE)
    try:
        cov = max(1.0, s2) * np.linalg.inv(best.jac.T @ best.jac)
        std = math.sqrt(max(cov[EPS, EPS], 0.0)) * RESTITUTION_SCALE
        mu_noise = math.sqrt(max(cov[MU, MU], 0.0)) * MU_SCALE
    except np.linalg.LinAlgError:
        std = mu_noise = math.inf
    alternatives = tuple(
        float(base[EPS] + s.x[EPS] * RESTITUTION_SCALE)
        for s in ends
        if 2.0 * s.cost <= chi2 + AMBIGUOUS_CHI2
    )
    limit = output_error_limit(n, 9)
    why = ""
    if not (s2 <= limit):
        why = f"the model does not follow the landing's frames (s^2 {s2:.3g} > {limit:.3g})"
    elif not (0.0 < value < 1.0) or not math.isfinite(std) or std <= 0.0:
        why = f"restitution {value:.3g} on its box [0, 1]"
    elif max(abs(a - value) for a in alternatives) > 2.0 * std:
        why = "other restitutions fit the landing as well: " + ", ".join(
            f"{a:.3g}" for a in alternatives
        )
    step_error = mu_step_error = math.nan
    if not why:
        # How far the answer leans on how the impact's instant is stepped: the same fit, from
        # the same starts, at ``substep_for``'s own step (where the roll-out sinks a third of
        # the noise per impact). Frames of a coarser-stepped motion (the Section 6.1 throw's
        # IRC at 1/1200 s, which sinks about the approach speed x 0.83 ms per landing) are met
        # at the fine step with a restitution 0.02 off and s^2 < 2 on some noise draws (std
        # 0.0013); at the coarse step it moves by 0.04-0.08, where landings of converged
        # truths move by a median 0.003 (90th percentile 0.016, 40 landings). Refitted warm
        # from the fine fit, the coarse fit stays within 0.001 of it: hence the cold starts.
        coarse_best = min((solve(z0, coarse) for z0 in starts), key=lambda s: s.cost)
        step_error = abs(float(coarse_best.x[EPS] - best.x[EPS])) * RESTITUTION_SCALE
        mu_step_error = abs(float(coarse_best.x[MU] - best.x[MU])) * MU_SCALE
    return Landing(value, std, step_error, float(s2), limit, (first, last), alternatives,
                   not why, why, mu, mu_noise, mu_step_error)  # fmt: skip


def landing_window(t_m, record: dict):
    """((first, last) frame indices, start (pose, velocity at the first frame)) of the
    landing fit of an impact's flights ``record`` (``drop_flights.impact_flights``), or
    None where fewer than ``MIN_AFTER`` frames follow the impact (a 4-frame window read
    0.39 ± 0.04 for 0.2). From the flight before (its state is known there; at most
    ``REACH`` of its frames) to ``REACH`` frames after the impact or the next resolved one:
    frames after the landing that no flight explains (the other end touching) are what the
    IRC model follows and the frame differences cannot."""
    i = record["interval"]
    first = i - min(record["frames_before"], REACH) + 1
    last = min(record["free"][1], i + REACH)
    if last - i < MIN_AFTER:
        return None
    h = float(np.median(np.diff(t_m)))
    return (first, last), _start(record["before_flight"], t_m[first] - record["t0"], h)


def earlier_window(t_m, q_m, frames: tuple[int, int], record: dict, sigma: np.ndarray):
    """The retry of a refused landing fit over ``frames`` (first, last): the window one frame
    earlier, started from the ballistic flight through its first two frames (``sigma`` [3]
    their noise), or None where that frame is not free of other resolved impacts
    (``record["free"]``, ``drop_flights.impact_flights``). Where the first contact falls in
    the interval before the one the flights' split chose, the flight before is two frames
    that straddle it, and a fit started from there cannot follow the landing (s^2 4.5-1204
    on ten first landings of 50 varied throws; one frame earlier, seven of them s^2
    0.75-2.3)."""
    first, last = frames
    if first - 1 < record["free"][0]:
        return None
    t, q = np.asarray(t_m, float), np.asarray(q_m, float)
    two = slice(first - 1, first + 1)
    flight, _, _ = fit_flight(t[two], q[two], t[first - 1], sigma)
    return (first - 1, last), _start(flight, 0.0, float(np.median(np.diff(t))))


def _start(flight, tau: float, h: float):
    """(pose, velocity) of ``flight`` (``drop_flights.Flight``) at its t0 + ``tau`` (s) as
    the landing fit's simulator starts from them: its velocity at a node is the mean over
    the frame interval (``h`` s) ending there."""
    return flight.pose(tau), flight.v0 + ACCELERATION * (tau - h / 2.0)


def landings_restitution(t_m, q_m, geometry, found: list[dict], contact: dict,
                         progress: Callable[[int, int], None] | None = None) -> dict:  # fmt: skip
    """``drop_checks.restitution`` of the frames (their own noise, ``frame_noise``) with, at
    each impact whose flights are not usable but whose frame difference would stand, a
    :func:`landing_fit` over its :func:`landing_window` (where refused, once more over the
    :func:`earlier_window`) with J/m and μ of ``contact`` (J_over_m m², mu) in its place
    where the fit is usable. Each impact's entry in ``impacts`` names its source, and where
    landing fits were tried, holds them in order (``landing_fits``: ``Landing.to_dict``).
    ``progress(done, total)`` is called as each landing is done (a landing takes seconds
    to a minute)."""
    t_m, q_m = np.asarray(t_m, float), np.asarray(q_m, float)
    noise = frame_noise(q_m)
    sigma = np.array([noise[0], noise[0], noise[1]])
    flights = impact_flights(t_m, q_m, geometry, found, *noise)
    windows = []
    for f, record in zip(found, flights, strict=True):
        stands = f.get("restitution") is not None and f["restitution"] <= 1.0
        # (noise-free frames give no noise to weigh the landing's frames by)
        eligible = record is not None and not record["usable"] and stands and np.all(sigma > 0)
        windows.append(landing_window(t_m, record) if eligible else None)
    total = sum(window is not None for window in windows)
    tried, done = [], 0  # per impact, the landing fits tried, in order; landings done
    for f, record, window in zip(found, flights, windows, strict=True):
        fits = []
        if window is not None:
            fits.append(landing_fit(t_m, q_m, geometry, *window, f["restitution"], contact, sigma))
            retry = None if fits[0].usable else earlier_window(t_m, q_m, window[0], record, sigma)
            if retry is not None:
                fits.append(
                    landing_fit(t_m, q_m, geometry, *retry, f["restitution"], contact, sigma)
                )
            done += 1
            if progress is not None:
                progress(done, total)
        tried.append(fits)
    h = float(np.median(np.diff(t_m)))
    pooled = restitution(
        found, noise[0], h, flights, [fits[-1] if fits else None for fits in tried]
    )
    by_t = {f["t"]: fits for f, fits in zip(found, tried, strict=True) if fits}
    for impact in pooled["impacts"]:  # what each landing fit gave, used or not, and why
        if impact["t"] in by_t:
            impact["landing_fits"] = [fit.to_dict() for fit in by_t[impact["t"]]]
    return pooled
