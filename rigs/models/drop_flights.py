"""The ellipse drop's restitution at the impact instant, from the ballistic flights on either
side of each impact (issue 24).

Between impacts the ellipse flies: x and y follow parabolas under gravity and θ is linear in
time, exactly, whatever the contact model. A least-squares fit of those flights to the frames
on each side of an impact gives the pose and velocity just before and just after it, at the
instant t* the flight before reaches the ground (gap zero). There the contact point's normal
velocity (N · v, eq. 21, N taken at the pose at t*) gives the restitution −v_n⁺/v_n⁻ of that
impact with its own std (the flights' covariance propagated).

Why: a frame difference across an impact (``drop_checks.impact_consistency``) reads the lever
arm N_θ at a frame, not at t*, while a landing ellipse spins up by tens of rad/s within the
frame interval: over 150 noise-free varied throws that estimate was off by −0.025 ± 0.032,
where the flights at t* give +0.0002 ± 0.0007 on the impacts whose flights meet
(docs/validation.md, "Varied throws").

Two tests keep a flight honest:

- **It is one flight.** The fit takes the frames up to the neighbouring impacts and drops
  the farthest while its residual χ² fails (``FLIGHT_PASS``): a contact the frames do not
  resolve (a rocking end touching the bar, a roll) bends the path and ends the flight there.
- **The two flights meet.** At t* their poses must agree within their extrapolation noise
  (χ² with 3 degrees of freedom, ``MEET_PASS``). An impact that is really two or three
  contacts within a frame interval or two (one end, then the other: the Section 6.1 throw's
  first landing) has no single instant where the flights meet; its restitution is not one
  number the frames can give, and the frame-difference estimate stands for it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy.optimize import brentq
from scipy.stats import chi2 as chi2_dist

from physid.dynamics.planar_contact import GRAVITY
from physid.estimation.ipopt_contact import _geometry_numeric, assign_surfaces, surface_rows

ACCELERATION = np.array([0.0, -GRAVITY, 0.0])  # of a free flight (x, y m/s², θ rad/s²)
FLIGHT_PASS = 0.99  # a flight's χ² below this quantile: still one flight
MEET_PASS = 0.999  # the flights' miss at t* below this quantile of χ²(3): they meet
MIN_AFTER = 3  # frames after the impact: with fewer, the flight's χ² has no degree of freedom
RESOLVED = 3.0  # an approach counts, and a restitution is physical, within this many std


@dataclass(frozen=True)
class Flight:
    """A ballistic fit about time ``t0`` (s): pose ``q0`` and velocity ``v0`` at t0 (m, rad;
    m/s, rad/s), ``unit_cov`` (XᵀX)⁻¹ of the design [1, t − t0] (times σ² per channel: the
    covariance of (pose, velocity) of that channel), ``frames`` its number of frames."""

    q0: np.ndarray
    v0: np.ndarray
    unit_cov: np.ndarray
    frames: int

    def pose(self, tau: float) -> np.ndarray:
        """The pose at t0 + tau (tau in s)."""
        return self.q0 + self.v0 * tau + 0.5 * ACCELERATION * tau**2

    def variance_at(self, tau: float) -> tuple[float, float]:
        """(pose, velocity) variance factors at t0 + tau (times σ² per channel)."""
        e = np.array([1.0, tau])
        return float(e @ self.unit_cov @ e), float(self.unit_cov[1, 1])


def fit_flight(t: np.ndarray, q: np.ndarray, t0: float, sigma: np.ndarray):
    """The ballistic least-squares fit of frames ``q`` [k, 3] at ``t`` [k] (k ≥ 2) about
    ``t0``, and its χ² (residuals over ``sigma`` [3]) with its 3(k − 2) degrees of freedom."""
    tau = t - t0
    X = np.column_stack([np.ones_like(tau), tau])
    y = q - 0.5 * ACCELERATION[None, :] * tau[:, None] ** 2
    unit_cov = np.linalg.inv(X.T @ X)
    beta = unit_cov @ X.T @ y
    chi2 = float(np.sum(((y - X @ beta) / sigma[None, :]) ** 2))
    return Flight(beta[0], beta[1], unit_cov, len(t)), chi2, 3 * (len(t) - 2)


@lru_cache(maxsize=256)
def _chi2_limit(p: float, dof: int) -> float:
    """χ²'s p quantile with ``dof`` degrees of freedom (cached: scipy's ppf costs ~0.1 ms,
    and the flights test every length they try)."""
    return float(chi2_dist.ppf(p, dof))


def longest_flight(t_m, q_m, frames: np.ndarray, t0: float, sigma: np.ndarray):
    """The longest run of ``frames`` (indices ordered away from the impact) that one
    ballistic flight explains (its χ² below ``FLIGHT_PASS``; None with fewer than 2), and
    whether the χ² cut it short (False: every frame is in it).

    All of them first, then one frame fewer from the far end while the χ² fails: one test
    where the flight is clean. (Growing from the impact frame by frame tested every length,
    and the false cuts of 20 tests at 99 % left 3-7 of 7 frames before the analytic drop's
    bounce, with ε's spread twice its propagated std: the lengths chosen by the noise.)"""
    frames = np.asarray(frames)
    for k in range(len(frames), 1, -1):
        flight, chi2, dof = fit_flight(t_m[frames[:k]], q_m[frames[:k]], t0, sigma)
        if dof == 0 or chi2 <= _chi2_limit(FLIGHT_PASS, dof):
            return flight, k < len(frames)
    return None, len(frames) > 0


def impact_flights(t_m, q_m, geometry, found: list[dict], sigma_pos: float,
                   sigma_theta: float) -> list[dict | None]:  # fmt: skip
    """For each impact of ``found`` (``drop_checks.impact_consistency``, in its order; its
    ``interval`` places it among the frames): the flights before and after it and what they
    give at the impact instant t* (s), or None where either flight has fewer than 2 frames
    or no surface is under the object:
    {t_star, meets, miss_chi2, frames_before, frames_after, approach_m_s, leave_m_s,
    restitution, restitution_std, usable, interval, free, before_flight, t0}. ``usable``:
    the flights meet, the flight after has ``MIN_AFTER`` frames, the approach is resolved
    and the restitution lies within ``RESOLVED`` std of [0, 1]. ``interval``: the impact's
    frame interval (frames i, i + 1); ``free``: the first and last frames free of other
    resolved impacts; ``before_flight``: the ``Flight`` before, about ``t0`` (s)."""
    t_m, q_m = np.asarray(t_m, float), np.asarray(q_m, float)
    sigma = np.array([sigma_pos, sigma_pos, sigma_theta])
    where = [f["interval"] for f in found]
    ordered = sorted(set(where))
    surface = assign_surfaces(q_m, geometry)
    out = []
    for i in where:
        n = ordered.index(i)
        first = ordered[n - 1] + 1 if n > 0 else 0  # the flights end at the neighbours' impacts
        last = ordered[n + 1] if n + 1 < len(ordered) else len(t_m) - 1
        j = impact_interval(t_m, q_m, i, first, last, sigma)
        out.append(_impact(t_m, q_m, geometry, surface, j, first, last, sigma))
    return out


def impact_interval(t_m, q_m, i: int, first: int, last: int, sigma, reach: int = 4) -> int:
    """The frame interval of the impact the frames' impulse put in interval i: of i and its
    neighbours, the one that splits the frames around it (``reach`` each side, within
    first..last) into the two flights of least total χ² (the same frames and parameters
    for each split, so their χ² compare). The impulse alone can be one interval off under
    noise, the neighbouring velocity difference sharing a frame; the flight before would
    then end at a frame after the impact (the flat drop's bounce read 0.69-0.73 for 0.6)."""
    lo, hi = max(first, i - reach + 1), min(last, i + reach)
    best, cost = i, math.inf
    for j in (i - 1, i, i + 1):
        if j - lo + 1 < 2 or hi - j < 2:
            continue  # a flight needs two frames
        t0 = 0.5 * (t_m[j] + t_m[j + 1])
        chi2 = sum(
            fit_flight(t_m[part], q_m[part], t0, sigma)[1]
            for part in (np.arange(lo, j + 1), np.arange(j + 1, hi + 1))
        )
        if chi2 < cost:
            best, cost = j, chi2
    return best


def _impact(t_m, q_m, geometry, surface, i: int, first: int, last: int, sigma) -> dict | None:
    """``impact_flights``' record of the impact in frame interval i (frames first..last free
    of other resolved impacts)."""
    t0 = 0.5 * (t_m[i] + t_m[i + 1])
    before, before_cut = longest_flight(t_m, q_m, np.arange(i, first - 1, -1), t0, sigma)
    after, _ = longest_flight(t_m, q_m, np.arange(i + 1, last + 1), t0, sigma)
    ground = surface[i] if surface[i] >= 0 else surface[i + 1]
    if before is None or after is None or ground < 0:
        return None
    rows = surface_rows(np.array([ground]), geometry)

    def gap(t):
        return float(_geometry_numeric(before.pose(t - t0)[None], rows)[0][0])

    # The root is sought an interval beyond each frame: with noise the flight's root can
    # fall just outside its interval (an impact near a frame), and a root clipped to the
    # frame would not move with the flight as the std assumes (``_restitution_std``).
    span = t_m[i + 1] - t_m[i]
    lo, hi = t_m[i] - span, t_m[i + 1] + span
    g_lo, g_hi = gap(lo), gap(hi)
    t_star = brentq(gap, lo, hi, xtol=1e-9) if g_lo > 0.0 >= g_hi else (lo if g_lo <= 0 else hi)
    tau = t_star - t0
    (pb, vb), (pa, _) = before.variance_at(tau), after.variance_at(tau)
    q_b, q_a = before.pose(tau), after.pose(tau)
    miss = float(np.sum((q_a - q_b) ** 2 / ((pb + pa) * sigma**2)))
    q_star = (q_b / pb + q_a / pa) / (1.0 / pb + 1.0 / pa)
    _, N, _ = _geometry_numeric(q_star[None], rows)
    normal = N[0] / np.linalg.norm(N[0][:2])  # the contact point's normal velocity per m/s
    v_minus = before.v0 + ACCELERATION * tau
    v_plus = after.v0 + ACCELERATION * tau
    approach, leave = float(normal @ v_minus), float(normal @ v_plus)
    var_approach = float(np.sum(normal**2 * sigma**2)) * vb
    record = {
        "t_star": float(t_star),
        "meets": bool(miss <= _chi2_limit(MEET_PASS, 3)),
        "miss_chi2": miss,
        "frames_before": before.frames,
        "frames_after": after.frames,
        "approach_m_s": approach,
        "leave_m_s": leave,
        "restitution": None,
        "restitution_std": None,
        "usable": False,
        # for a fit over the landing (drop_landings)
        "interval": i,
        "free": (first, last),
        "before_flight": before,
        "t0": float(t0),
    }
    if approach >= -RESOLVED * math.sqrt(var_approach):
        return record
    eps = -leave / approach
    std = _restitution_std(eps, tau, approach, normal, before, after, sigma)
    physical = abs(eps - min(max(eps, 0.0), 1.0)) <= RESOLVED * std
    # Two frames before the impact whose third fails the flight's χ² may straddle a contact
    # (an impact an interval earlier that ``impact_interval`` did not move): such a
    # "flight" passes through the first frame after the impact, meets the flight after and
    # reads a bounce between the two (the Section 6.1 throw's second bounce: 0.25-0.31 for
    # 0.21). Two frames that are all there is (the record's start) are a flight.
    straddles = before.frames == 2 and before_cut
    # (A zero std, from noise-free frames, would leave nothing else any weight in the pool.)
    usable = all((record["meets"], after.frames >= MIN_AFTER, physical, std > 0.0, not straddles))
    return record | {"restitution": eps, "restitution_std": std, "usable": bool(usable)}


def _restitution_std(eps, tau, approach, normal, before: Flight, after: Flight, sigma) -> float:
    """The std of ε = −v_n⁺/v_n⁻ at t* = t0 + tau, the flights' errors propagated to first
    order with t* itself: the flight before sets t* (its gap's root), and an error δq_b in
    its pose there moves t* by −N·δq_b / v_n⁻, which shifts both normal velocities by
    (N·a) δt*. With c = (1 + ε)(N·a)/v_n⁻ and k = ε − c tau,

        −v_n⁻ δε = N·δv_a + k N·δv_b − c N·δq_b   (δq_b, δv_b: the flight's pose and
                                                     velocity errors at t0),

    whose variance is Σ N_i² σ_i² (U_a,vv + k² U_b,vv − 2 k c U_b,qv + c² U_b,qq), U the
    flights' unit covariances. The t* term matters: it cancels much of the approach's part
    (the analytic flat drop: without it 81 % of 400 draws fell within 1 std)."""
    c = (1.0 + eps) * float(normal @ ACCELERATION) / approach
    k = eps - c * tau
    ub, ua = before.unit_cov, after.unit_cov
    factor = ua[1, 1] + k**2 * ub[1, 1] - 2.0 * k * c * ub[0, 1] + c**2 * ub[0, 0]
    return math.sqrt(float(np.sum(normal**2 * sigma**2)) * max(factor, 0.0)) / abs(approach)
