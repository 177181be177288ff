"""Trust checks of an ellipse-drop fit (issue 24): impacts that a rigid body cannot make, the
restitution of the fitted impacts, the IPOPT run's status, the parameters' flags, and the
fit's prediction by the IRC simulator.

- **Impacts inconsistent with a rigid impulse** (:func:`impact_consistency`, model-free, from
  the frames alone): across an impact a rigid body's spin changes by the contact impulse's
  moment about its centre of mass, (J/m) Δω = p_n N_θ + p_t T_θ (eq. 16 per unit mass, the
  impulse p read from the change of the linear velocity less gravity, N_θ, T_θ the lever arms
  of eq. 21 at the frame nearest the ground). J/m > 0, so the spin change must have the
  moment's sign. Where both are resolved (above 3 × their noise from the frames' position
  and angle noise) and the signs differ, no J/m explains the impact: the identification is
  refused (4 of 33 real impacts ended at the lower bound of J/m, std 0, "identifiable").
  The same numbers give each consistent impact's own J/m = moment / Δω, used as a start of
  the multi-start on J/m.
- **Restitution** (:func:`restitution`): −v_n⁺/v_n⁻ of the contact point's normal velocity
  across each impact the frames resolve and that approaches visibly, pooled. The NLP (IGC)
  has no restitution; the IRC prediction needs one.
- **Status** (:func:`ipopt_status`): successful only on IPOPT's own convergence tests or the
  parameter-settling test; the iteration limit and solver failures are named.
- **Prediction** (:func:`predictions`): the IRC stepper with the identified J/m, μ and
  restitution, k-step-ahead from the fitted states and a free run, against the frames
  (``estimation.prediction``). Compiled (``dynamics.planar_contact_scan``: ``lax.scan``,
  about 5 µs a step against 1.2 ms for the reference loop) and sub-stepped at
  ``SUBSTEP_H``: on the fit's grid IRC sank 2.8 mm into the bar at an impact.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace

import numpy as np
from scipy.stats import chi2 as chi2_dist

from physid.dynamics.planar_contact import GRAVITY
from physid.dynamics.planar_contact_scan import rollout
from physid.estimation.estimate import Result, Status
from physid.estimation.flags import bound_flags
from physid.estimation.ipopt_contact import (
    LIKELIHOOD_RATIO_95,
    _geometry_numeric,
    assign_surfaces,
    identify_contact,
    in_contact,
    surface_rows,
)
from physid.estimation.prediction import (
    Channel,
    InitialState,
    Observations,
    Prediction,
    difference,
    expected_ratio,
    free_run,
    refine_initial_state,
    window_starts,
)
from physid.estimation.uncertainty import batch_means, positive_part
from physid.rigs.models.drop_flights import impact_flights

RESOLVED = 3.0  # an impulse, spin change or moment counts when above this many noise std
BATCHES = 10  # blocks of frames of the batch-means covariance (as for the hinged rigs)
PREDICTION_HORIZON = 0.1  # s, the k of the k-step-ahead check (as for the hinged rigs)
FREE_RUN_HORIZON = 1.0  # s, the free run's verdict horizon
# Growing windows of the observers (``InitialState.stages``): the free run's 2k steps from
# 1/16 of them, each k-step window's past from 1/4, a window with fewer than three frames
# skipped (at 120 fps on the NLP's ~1 ms grid the free run's first is 1/8: four frames).
# Over 30 varied throws at 1 mm (true values) the free run's observer fitted its window to
# 3-360 noise std RMS (median 25) in one stage of Gauss-Newton, to 0.9-50 (median 3.8) so
# (docs/validation.md, "Prediction checks of vigorous throws").
FREE_RUN_STAGES = 5
K_STEP_STAGES = 3
# s, the IRC sub-step of the prediction check. IRC acts on velocities only, so an ellipse in
# contact sinks into the ground by O(h) (sample drop: 0.42 mm at 1/2400 s, 33 um at
# 1/24000 s, 2.2 um at 1/240000 s), which the estimator's gap constraint forbids; at this
# step the sinking is below the sample tracker's noise (3.5 um). The same step as the
# sample's truth (``rigs.pipeline.sample.DropScenario``).
SUBSTEP_H = 1.0 / 240000
# m/s: IRC's sinking per impact is about the approach speed times the sub-step (sample drop:
# 0.42 mm at 1/2400 s, 2.2 um at 1/240000 s for a 1.1 m/s landing)
SINK_SPEED = 1.0


def substep_for(sigma_pos: float, speed: float = SINK_SPEED) -> float:
    """The IRC sub-step (s) of the prediction and output-error roll-outs for frames of noise
    ``sigma_pos`` (m) of a body whose points move at up to ``speed`` (m/s; at least
    SINK_SPEED): the longest whose sinking into the ground, speed x sub-step, stays below a
    third of the noise, and no shorter than ``SUBSTEP_H``. The sample's 13.6 um gives
    ``SUBSTEP_H``; a 1 mm throw at 1 m/s 333 us, a hundred times fewer steps for the same
    answer where the frames cannot see the difference, and at 5 m/s 67 us (at 333 us the
    Section 6.1 throw's 5 m/s impacts sank ~1.7 mm, more than the frames' noise:
    docs/validation.md, "The ellipse drop's std")."""
    return max(SUBSTEP_H, sigma_pos / (3.0 * max(speed, SINK_SPEED)))


def fastest_point_speed(fit, geometry) -> float:
    """m/s, an upper bound on the speed of any point of the ellipse over the fit's states:
    max over the grid of |v_xy| + |ω| a_max (a contact point's approach speed is at most
    this), for ``substep_for``."""
    v = np.asarray(fit.v, float)
    reach = max(geometry.a, geometry.b)
    return float(np.max(np.hypot(v[:, 0], v[:, 1]) + np.abs(v[:, 2]) * reach))


def impact_consistency(t_m, q_m, geometry, sigma_pos: float, sigma_theta: float) -> list[dict]:
    """The impacts the frames resolve, each with its frame interval (``interval``, 0 the
    first) and that interval's mid time ``t`` (s), its spin change Δω (rad/s), the moment of
    its impulse about the centre of mass per unit mass (m²/s), its own J/m where both are
    resolved and agree in sign (m²), and ``consistent`` (False: the signs disagree).

    Candidates are frame intervals i whose neighbouring intervals' velocities (i−1 before,
    i+1 after) differ, gravity removed, by more than RESOLVED × the noise of such a
    difference (2σ/Δt per component) while the body is within reach of the ground; of
    adjacent candidates the one with the largest impulse is the impact."""
    t_m, q_m = np.asarray(t_m, float), np.asarray(q_m, float)
    if len(t_m) < 4:
        return []
    dt = np.diff(t_m)
    v = np.diff(q_m, axis=0) / dt[:, None]
    tm = 0.5 * (t_m[1:] + t_m[:-1])
    surface = assign_surfaces(q_m, geometry)  # the surface under each frame (-1: none)
    gaps, N, T = _geometry_numeric(q_m, surface_rows(surface, geometry))
    gaps = np.where(surface >= 0, gaps, np.inf)
    out = []
    i = np.arange(1, len(v) - 1)
    span = tm[i + 1] - tm[i - 1]
    dv = v[i + 1] - v[i - 1]
    p = dv[:, :2] - np.array([0.0, -GRAVITY])[None, :] * span[:, None]
    step = np.median(dt)
    noise_v = 2.0 * sigma_pos / step
    reach = 4 * sigma_pos + np.linalg.norm(v[i, :2], axis=1) * dt[i]
    near = np.minimum(gaps[i], gaps[i + 1]) < reach
    big = near & (np.linalg.norm(p, axis=1) > RESOLVED * noise_v)
    size = np.where(big, np.linalg.norm(p, axis=1), 0.0)
    for j in np.flatnonzero(big):
        if (j > 0 and size[j - 1] > size[j]) or (j + 1 < len(size) and size[j + 1] >= size[j]):
            continue  # a neighbour carries more of the same impact
        k = i[j] if gaps[i[j]] <= gaps[i[j] + 1] else i[j] + 1  # the frame nearest the ground
        n, t = N[k, :2], T[k, :2]
        p_n, p_t = float(p[j] @ n), float(p[j] @ t)
        # Normal velocity of the contact point before and after (eq. 21: N·v).
        vn_before, vn_after = float(N[k] @ v[i[j] - 1]), float(N[k] @ v[i[j] + 1])
        moment = p_n * N[k, 2] + p_t * T[k, 2]
        noise_m = noise_v * math.hypot(N[k, 2], T[k, 2])
        # The impulse acts in frame interval i, and in a contact that rolls the lever arms
        # change over it (the sample drop at 0.36 s: N_θ from -3 to +8 mm between the two
        # frames as the contact point passes under the centre of mass, a moment of either
        # sign): the moment's sign counts only where it is the same, and resolved, with
        # the lever arms of both frames.
        span_k = np.array([i[j], i[j] + 1])
        span_k = span_k[surface[span_k] == surface[k]]
        moments = p_n * N[span_k, 2] + p_t * T[span_k, 2]
        one_sign = bool(np.all(np.sign(moments) == np.sign(moment)))
        spin = float(dv[j, 2])
        noise_w = 2.0 * sigma_theta / step
        resolved = (
            abs(spin) > RESOLVED * noise_w
            and one_sign
            and float(np.min(np.abs(moments))) > RESOLVED * noise_m
        )
        consistent = not resolved or np.sign(spin) == np.sign(moment)
        out.append(
            {
                "t": float(tm[i[j]]),
                "interval": int(i[j]),  # the frame interval (i[j], i[j] + 1) of the impulse
                "impulse_n_per_kg": p_n,
                "impulse_t_per_kg": p_t,
                "spin_change_rad_s": spin,
                "moment_m2_s": moment,
                "resolved": bool(resolved),
                "consistent": bool(consistent),
                "j_over_m": moment / spin if resolved and consistent else None,
                "approach_m_s": vn_before,
                # A rolling contact's lever arms change sign within the interval: the
                # contact point's normal velocity from one frame's arms is then no
                # impact's (the sample drop at 0.36 s gave -v_n+/v_n- = 2.96).
                "restitution": max(0.0, -vn_after / vn_before)
                if vn_before < -RESOLVED * noise_v and one_sign
                else None,
            }
        )
    return out


def frame_noise(q_m) -> tuple[float, float]:
    """(σ_pos m, σ_θ rad): the frames' own noise, model-free from their third differences
    (``estimation.residuals.data_noise``; robust to the few differences an impact makes),
    for deciding which impacts and velocity changes the frames resolve. The NLP's
    ``sigma_pos`` is a weight (default 1 mm, the paper's simulation); a tracker's poses are
    often ten times better, and with 1 mm at 240 fps no impact of the sample drop, whose
    bounce leaves at 0.23 m/s, would count as resolved (the noise of a velocity difference
    is 2σ/Δt = 0.48 m/s)."""
    from physid.estimation.residuals import data_noise

    q_m = np.asarray(q_m, float)
    ok = np.ones(len(q_m), bool)
    pos = float(np.sqrt(np.mean([data_noise(q_m[:, i], ok) ** 2 for i in (0, 1)])))
    return pos, float(data_noise(q_m[:, 2], ok))


def inconsistency_message(path, found: list[dict]) -> str | None:
    """The refusal for impacts a rigid body cannot make (None where there is none)."""
    bad = [f for f in found if not f["consistent"]]
    if not bad:
        return None
    parts = [
        f"t = {f['t']:.4g} s: the spin changes by {f['spin_change_rad_s']:+.3g} rad/s, but the "
        f"contact impulse's moment about the centre of mass is {f['moment_m2_s']:+.3g} m²/s per "
        "kg"
        for f in bad
    ]
    return (
        f"{path}: {len(bad)} impact(s) inconsistent with a rigid impulse ({'; '.join(parts)}): "
        "J/m > 0 turns the body the way the moment pushes it, so no J/m explains them. Check "
        "the tracking there (a swapped marker, a lost frame) and the ground line, or leave "
        "the impact out with a window"
    )


def restitution(found: list[dict], sigma_pos: float, frame_dt: float,
                flights: list[dict | None] | None = None,
                landings: list | None = None) -> dict:  # fmt: skip
    """ε of the impacts the frames resolve (:func:`impact_consistency`), pooled. Each
    impact's own ε is, where ``flights`` (``drop_flights.impact_flights``, one per impact of
    ``found``) has a usable record, −v_n⁺/v_n⁻ at the impact instant from the ballistic
    flights on either side, with their propagated std; else, where ``landings``
    (``drop_landings.Landing`` or None, one per impact) has a usable fit over the landing,
    its restitution and std; else −v_n⁺/v_n⁻ of the contact point's
    normal velocity from the frames just before and after the impact where it approaches
    visibly (not a rolling contact, and ε ≤ 1), whose std is the frames' velocity noise σ_v
    propagated, σ_v √(1 + ε²) / |v_n⁻| (ε = −v_n⁺/v_n⁻ from two independent frame differences:
    δε = (δv_n⁺ + ε δv_n⁻)/|v_n⁻|; ε the pooled value). They are pooled by inverse variance
    (for frame differences alone, weights v_n⁻²: a contact that rolls in at 8 mm/s gives
    ε = 0 and weighs nothing); the std is the pooled one, or the weighted spread over √n
    where the impacts disagree more than that noise explains (its square above the noise's
    times χ²'s 95 % point over its ν = n_eff − 1 degrees of freedom: a spread of two or
    three impacts is itself a noisy number, and taking it wherever it was larger put 75 % of
    400 noise draws within 1 std; 72 % gated). From the frames, not the fit: the NLP (IGC)
    has no restitution, and its velocity right after an impact's steps need not be the
    bounce (the sample drop's fit gave 0.0 for a truth of 0.2)."""
    # (ε > 1 would be an impact that gains energy: no rigid impact, a misread contact.)
    flights = flights if flights is not None else [None] * len(found)
    landings = landings if landings is not None else [None] * len(found)
    per = []  # (t, approach m/s, eps, variance or None for a frame difference's, source)
    for f, fl, la in zip(found, flights, landings, strict=True):
        if fl is not None and fl["usable"]:
            per.append((f["t"], fl["approach_m_s"], fl["restitution"],
                        fl["restitution_std"] ** 2, "flights"))  # fmt: skip
        elif la is not None and la.usable:
            per.append((f["t"], f["approach_m_s"], la.restitution, la.std**2, "landing fit"))
        elif f.get("restitution") is not None and f["restitution"] <= 1.0:
            per.append((f["t"], f["approach_m_s"], f["restitution"], None, "frame differences"))
    if not per:
        return {"value": None, "std": None, "impacts": []}
    e = np.array([p[2] for p in per])
    approach2 = np.array([p[1] ** 2 for p in per])
    own_var = np.array([np.nan if p[3] is None else p[3] for p in per])
    differences = np.isnan(own_var)
    noise = math.sqrt(2.0) * sigma_pos / frame_dt  # a frame difference's velocity noise
    # (Was sqrt(2) noise / sqrt(sum w), as if the bounce carried the approach's noise at full
    # weight: over 399 noise draws of the mu = 0.3 throw 87 / 99 % of the errors fell within
    # 1 / 2 std, median |z| 0.43; propagated, 75 / 97 %, 0.58: docs/validation.md.)

    def weights(mean: float) -> np.ndarray:  # inverse variances, a frame difference's at mean
        return 1.0 / np.where(differences, noise**2 * (1.0 + mean**2) / approach2, own_var)

    mean = float(np.mean(e))
    for _ in range(3):  # a frame difference's variance holds the pooled value: settle it
        w = weights(mean)
        mean = float(np.sum(w * e) / np.sum(w))
    w = weights(mean)
    std = 1.0 / math.sqrt(float(np.sum(w)))
    if len(e) > 1:  # the spread, where it exceeds what the noise explains (at 95 %)
        n_eff = float(np.sum(w) ** 2 / np.sum(w**2))
        nu = max(n_eff - 1.0, 1.0)
        spread = math.sqrt(float(np.sum(w * (e - mean) ** 2) / np.sum(w)) / nu)
        if spread**2 > std**2 * chi2_dist.ppf(0.95, nu) / nu:
            std = spread
    impacts_ = [{"t": t, "approach_m_s": a, "restitution": r, "source": src}
                for t, a, r, _, src in per]  # fmt: skip
    return {"value": mean, "std": std, "impacts": impacts_}


def frames_restitution(t_m, q_m, geometry, found: list[dict], sigma_pos: float,
                       sigma_theta: float) -> dict:  # fmt: skip
    """:func:`restitution` of frames ``q_m`` at ``t_m`` with the ballistic flights at each
    impact's instant (``drop_flights.impact_flights``) where they are usable; ``sigma_pos``
    (m), ``sigma_theta`` (rad): the frames' own noise (:func:`frame_noise`)."""
    flights = impact_flights(t_m, q_m, geometry, found, sigma_pos, sigma_theta)
    frame_dt = float(np.median(np.diff(np.asarray(t_m, float))))
    return restitution(found, sigma_pos, frame_dt, flights)


def objective_point(fit, settings) -> dict:
    """{j_over_m, mu, objective} of a ``ContactFit``: its J/m and mu and the NLP's objective
    there (half its chi^2, the complementarity penalties and the pull on mu), the terms on
    which multi-start solutions are compared (:func:`fit_multistart`, :func:`basins`)."""
    objective = 0.5 * fit.cost_fit + fit.cost_gamma + settings.mu_pull * fit.mu
    return {"j_over_m": fit.j_over_m, "mu": fit.mu, "objective": objective}


def fit_multistart(t_m, q_m, geometry, settings, found: list[dict]) -> tuple:
    """IPOPT from the spec's initial J/m and, where that fit fails a test — J/m on a bound,
    or no convergence test passed — from more starts: the J/m the frames' own impacts imply
    (:func:`impact_consistency`, their median) and a third and three times the first start.
    Each J/m start is also solved from a second initial mu (``MU_START``, the multi-start on
    mu of ``identify_contact``: kept where its objective is lower by more than
    ``BASIN_CHI2`` / 2, the first otherwise) and, where it slides, probed with mu boxed
    below its solution (``IpoptSettings.mu_probe_gaps``: kept on the same terms where it
    ends inside its box). The lowest objective whose J/m is
    inside its box wins (else the lowest). Returns (fit, starts: [{start, j_over_m, mu,
    objective, status, solutions}]), ``solutions`` every converged solution of that start
    (:func:`basins` reads them).

    Why: the NLP is nonconvex in J/m; a real impact ended at the lower bound from 1000 mm²
    and at the right value from 300 mm². And in mu: 2 of 20 noise draws of the mu = 0.3
    throw ended at mu 0.365 from mu0 = 0.5 (10-20 bootstrap std off), at 0.307 from 0.2 with
    an objective lower by 8-12 (docs/validation.md, "The ellipse drop's std"); one of 50
    more (seed 140) ended at 0.3765 from every initial mu, 0.310 with the probe below."""
    from dataclasses import replace

    mu_starts = settings.mu_starts or (MU_START,)

    def run(start):
        fit = identify_contact(
            t_m, q_m, geometry, replace(settings, j_over_m_initial=start, mu_starts=mu_starts)
        )
        solutions = [sol for r in fit.stats["restarts"] for sol in r["solutions"].values()]
        return fit, {"start": start, **objective_point(fit, settings), "status": fit.status,
                     "solutions": solutions}  # fmt: skip

    lo, hi = settings.j_over_m_bounds
    first = settings.j_over_m_initial
    fits = [run(first)]
    fit = fits[0][0]
    # (An implausible χ² is not a reason here: identify_contact restarts on it itself, and a
    # model error, e.g. the sample's IRC truth sinking into the bar, makes it implausible
    # from every start: the sample drop then took four solves to the same J/m.)
    on_bound = bound_flags([fit.j_over_m], [lo], [hi], [first])[0] != ""
    if not on_bound and ipopt_status(fit).converged:
        return fit, [fits[0][1]]
    own = [f["j_over_m"] for f in found if f.get("j_over_m")]
    starts = ([float(np.median(own))] if own else []) + [first / 3.0, first * 3.0]
    for start in starts:
        if lo < start < hi and all(abs(start / s[1]["start"] - 1) > 0.1 for s in fits):
            fits.append(run(start))
    inside = [f for f in fits if bound_flags([f[0].j_over_m], [lo], [hi], [first])[0] == ""]
    best = min(inside or fits, key=lambda f: f[1]["objective"])
    return best[0], [f[1] for f in fits]


MU_START = 0.2  # the second initial mu of every start (the first is the spec's, 0.5)

# Twice the objective difference within which another solution competes with the fit
# (ipopt_contact.LIKELIHOOD_RATIO_95: chi^2 with 2 degrees of freedom at 95 %).
BASIN_CHI2 = LIKELIHOOD_RATIO_95


def basins(starts: list[dict], best: dict, std, threshold: float = BASIN_CHI2) -> list[dict]:
    """Competing local minima of a multi-start (``fit_multistart``'s ``starts``): converged
    solutions whose objective is within ``threshold`` / 2 of ``best`` ({objective, j_over_m,
    mu}) and whose J/m or mu differs from it by more than ``std`` [2] (the fit's own std:
    a solution closer than that is the same basin). Each as {j_over_m, mu, objective,
    delta_chi2 = 2 (objective - best's)}; the farthest in units of std first; duplicates
    (within one std of one listed) dropped."""
    std = np.asarray(std, float)
    out = []
    for start in starts:
        for sol in start.get("solutions", []):
            d2 = 2.0 * (sol["objective"] - best["objective"])
            if not sol.get("success", True) or d2 > threshold:
                continue
            delta = np.abs([sol["j_over_m"] - best["j_over_m"], sol["mu"] - best["mu"]])
            with np.errstate(invalid="ignore", divide="ignore"):
                far = np.where(np.isfinite(std) & (std > 0), delta / std, 0.0)
            if far.max() <= 1.0:
                continue
            same = any(
                np.all(np.abs([sol["j_over_m"] - o["j_over_m"], sol["mu"] - o["mu"]]) <= std)
                for o in out
            )
            if not same:
                out.append({"j_over_m": sol["j_over_m"], "mu": sol["mu"],
                            "objective": sol["objective"], "delta_chi2": d2,
                            "distance_std": float(far.max())})  # fmt: skip
    return sorted(out, key=lambda b: -b["distance_std"])


def basin_spread(values, std, competing: list[dict], names=("j_over_m", "mu")):
    """The std that covers competing basins (:func:`basins`) and which parameters they move
    far: (std [P], far [P] bool).

    Per parameter, with d the largest distance of a competing basin's value from ``values``:
    sqrt(std^2 + (d / 2)^2), the std of an equal mixture of the two basins (each with the
    fit's spread) — either solution is then within 2 std of the reported value at most.
    ``far`` where d exceeds 2 of the fit's own std: the data do not decide between values
    that far apart, so the parameter is not called identifiable."""
    values, std = np.asarray(values, float), np.asarray(std, float)
    d = np.zeros(len(values))
    for b in competing:
        d = np.maximum(d, np.abs(np.array([b[n] for n in names]) - values))
    with np.errstate(invalid="ignore"):
        far = np.isfinite(std) & (d > 2.0 * std)
    return np.sqrt(std**2 + (d / 2.0) ** 2), far


_SETTLED = (
    "parameter-settling test: J/m moved < 0.1 %, μ < 0.001 and the objective < 1 % over 15 "
    "iterations, with the dynamics met to 1e-6"
)


def ipopt_status(fit) -> Status:
    """The enumerated outcome of the IPOPT fit (``estimation.estimate.Status``)."""
    status = fit.status
    if status == "Parameters_Settled":
        return Status(Result.successful, status, _SETTLED)
    if status == "Solve_Succeeded":
        return Status(Result.successful, status, "IPOPT's KKT test (optimality and feasibility)")
    if status == "Solved_To_Acceptable_Level":
        return Status(Result.successful, status, "IPOPT's acceptable-level KKT test")
    if status == "Maximum_Iterations_Exceeded":
        return Status(Result.max_steps_reached, status)
    return Status(Result.solver_failed, status or "unknown IPOPT status")


# ------------------------------------------------------------------------------ prediction


def channels(settings) -> tuple[Channel, ...]:
    return (
        Channel("x", "m", settings.sigma_pos),
        Channel("y", "m", settings.sigma_pos),
        Channel("theta", "rad", settings.sigma_theta, 2 * math.pi),
    )


def simulator(geometry, m: float, j_over_m: float, mu: float, eps: float, h: float,
              substep_h: float = SUBSTEP_H):  # fmt: skip
    """``estimation.prediction.Simulate`` of the IRC stepper: x0 = (q[B, 3], v[B, 3]), poses
    [B, steps + 1, 3] on the grid h, each grid step taken as sub-steps of at most
    ``SUBSTEP_H`` (``dynamics.planar_contact_scan``). ``m`` is not needed (only J/m enters
    the motion); it is kept for the callers' signature."""
    del m
    substeps = max(1, math.ceil(h / substep_h - 1e-9))
    surfaces = geometry.surfaces()

    # The states are the estimator's, of the step h: v^k = (q^k - q^{k-1}) / h, the mean
    # velocity over the last step, which in flight leads the velocity at t_k by g h / 2.
    # A sub-stepped roll-out's own v^k leads it by g dt / 2; started from the estimator's,
    # it fell 0.4 mm behind the fit in 0.1 s of flight on the sample drop.
    lead = np.array([0.0, -GRAVITY, 0.0]) * (h - h / substeps) / 2.0

    def simulate(x0, start, steps):
        q0, v0 = (np.asarray(a, float) for a in x0)
        v0 = v0 + lead
        q, _ = rollout(
            q0, v0, h, j_over_m, mu, eps, geometry.a, geometry.b, surfaces,
            steps=int(steps), substeps=substeps, segmented=geometry.segmented,
        )  # fmt: skip
        return np.asarray(q)

    return simulate


@dataclass(frozen=True)
class GridStates:
    """States on a fine grid, as ``k_step_observed`` reads a fit's: ``t`` [n] (s), ``q``,
    ``v`` [n, 3] (v^k the mean velocity over the step before, the NLP's convention) and
    ``frame_index`` [n_frames] (the frames' steps)."""

    t: np.ndarray
    q: np.ndarray
    v: np.ndarray
    frame_index: np.ndarray

    @classmethod
    def of(cls, fit) -> GridStates:
        """A fit's states (``t``, ``q``, ``v``, ``frame_index`` attributes)."""
        return cls(*(np.asarray(getattr(fit, k)) for k in ("t", "q", "v", "frame_index")))

    @classmethod
    def of_poses(cls, t, q, frame_index, v0) -> GridStates:
        """Poses ``q`` [n, 3] on the grid ``t``, from velocity ``v0`` at t[0]: the velocities
        their differences."""
        q = np.asarray(q, float)
        v = np.diff(q, axis=0) / np.diff(np.asarray(t, float))[:, None]
        return cls(np.asarray(t, float), q, np.vstack([np.asarray(v0, float)[None], v]),
                   np.asarray(frame_index))  # fmt: skip

    def from_node(self, node: int) -> GridStates:
        """The states from grid step ``node`` on (a frame's), the frames renumbered."""
        frames = self.frame_index[self.frame_index >= node] - node
        return GridStates(self.t[node:], self.q[node:], self.v[node:], frames)


def state_steps(chans) -> np.ndarray:
    """The finite-difference steps of the prediction's observer in (x, y, θ, vx, vy, ω):
    a tenth of the pose channels' noise (:func:`channels`), and a tenth of it per 0.1 s. A
    roll-out's impacts move by whole sub-steps, so a step must move the frames by more than
    that jitter (the output error's reason, ``_OE_STEPS``); 1e-6 m with 1 mm noise gave
    Jacobians of jitter."""
    pose = 0.1 * np.array([c.noise for c in chans])
    return np.concatenate([pose, pose / 0.1])


def predictions(fit, t_m, q_m, geometry, settings, m: float, values: dict, label: str,
                start=None) -> list:  # fmt: skip
    """k-step-ahead from the fitted states and a free run, by IRC with ``values`` (J_over_m,
    mu, restitution), against the frames on the fit's fine grid, from the first frame whose
    state the frames determine (:func:`observed_start`). ``start`` (q0, v0): a roll-out of
    the identified model from this initial state (an output-error fit's,
    :func:`output_error`) starts the free run and is a second start of each k-step window;
    else the free run starts from the NLP's state.

    Where a check exceeds 3 × the noise, each carries ``expected``, what the identified
    model scores in it on its own free run re-noised (``estimation.prediction.
    expected_ratio``, its observer started from that run's own states): a vigorous throw
    amplifies the state's noise through its bounces beyond 3 × the noise however right the
    model, and the verdict's limit is 3 × that. (Within 3 × the noise the limit cannot
    matter, and the re-noised runs, 3 × the checks' cost, are not made.)"""
    h = float(np.median(np.diff(np.asarray(fit.t, float))))
    node = int(np.asarray(fit.frame_index)[observed_start(fit)])
    states = GridStates.of(fit).from_node(node)
    t = states.t
    y = np.zeros((len(t), 3))
    present = np.zeros((len(t), 3), bool)
    y[states.frame_index] = np.asarray(q_m, float)[-len(states.frame_index) :]
    present[states.frame_index] = True
    obs = Observations(t, y, present)
    chans = channels(settings)
    sub = substep_for(settings.sigma_pos, fastest_point_speed(fit, geometry))
    sim = simulator(geometry, m, values["J_over_m"], values["mu"], values["restitution"], h, sub)
    k = max(1, min(int(round(PREDICTION_HORIZON / h)), len(t) - 1))
    window = min(2 * k, len(t) - 1)
    horizon = int(round(FREE_RUN_HORIZON / h))

    def checks(observed: Observations, at: GridStates, free_from: GridStates, guide) -> list:
        ahead = k_step_observed(sim, at, observed, chans, k, label, guide)
        free = free_run(sim, _initial_state(free_from, chans), observed, chans, window, label,
                        horizon)  # fmt: skip
        return [ahead, free]

    free_from, guide = states, None
    if start is not None:  # the output-error fit's roll-out: the free run's start, and a
        # second start of each k-step window
        run = np.asarray(sim((start[0][None], start[1][None]), np.zeros(1, int), len(fit.t) - 1))
        free_from = GridStates.of_poses(fit.t, run[0], fit.frame_index, start[1]).from_node(node)
        guide = free_from
    found = checks(obs, states, free_from, guide)
    if not any(p.poor for p in found):  # within 3 x the noise: the limit cannot matter
        return found
    own = GridStates.of_poses(t, found[1].predicted, states.frame_index, found[1].initial[3:])
    expected = expected_ratio(lambda o: checks(o, own, own, None), obs, own.q, chans)
    return [replace(p, expected=e) for p, e in zip(found, expected, strict=True)]


def _initial_state(states: GridStates, chans) -> InitialState:
    """The free run's initial state (q, v at the grid's first step), refined in
    ``FREE_RUN_STAGES`` growing windows (``InitialState.stages``)."""
    return InitialState(
        np.concatenate([states.q[0], states.v[0]]),
        lambda z: (np.asarray(z)[:, :3], np.asarray(z)[:, 3:]),
        step=state_steps(chans),
        stages=FREE_RUN_STAGES,
    )


def k_step_observed(sim, fit, obs: Observations, chans, k: int, label: str, guide=None):
    """The k-step-ahead check as a predictor from past frames only: for each window
    (s, s + k], the state at s − k is the NLP's, refined by output error to the frames of
    [s − k, s] through the IRC model (``estimation.prediction.refine_initial_state``), then
    simulated on through the window, whose frames it has not seen. The first window
    (no past) is left to the free run.

    Why not from the NLP's states directly: the NLP (27) is another contact model (IGC,
    no restitution, an impulse free at every step within the complementarity penalty), and
    its velocity just after an impact is whatever fits the frames under that model. On the
    sample drop the window from 0.2 s, 10 ms after the second impact, missed by 5.0 / 1.0 /
    7.3x the noise from the NLP's state with the output-error parameters and by about as
    much with the true ones (the other windows 0.2-1.5x): a check of the NLP's state there,
    not of the identified model. Refining the state on the window's own first quarter
    instead (6 frames for 6 state numbers) leaves a velocity error of about
    sigma_theta sqrt(12/6) / 25 ms, which alone drifts by 4x the angle noise over the next
    75 ms: the observer has to see as long a stretch as it predicts.

    ``guide`` (``GridStates``): a roll-out of the identified model (the output-error fit's
    free run) on the grid; its state at s − k, v = (q^k − q^{k−1})/h as the NLP's, is a
    second start of the refinement, and the start whose refined state fits the past frames
    better is kept (a choice made on past frames only). The NLP's state 10 ms after the
    sample's second impact is far enough off that 6 Gauss–Newton steps from it did not
    reach the past frames' optimum (the window after it missed by 15-19x the noise).

    The refinement (finite-difference steps :func:`state_steps`) runs Levenberg–Marquardt
    over the past's first quarter, half and whole (three growing windows,
    ``InitialState.stages``)."""
    n = len(obs.t)
    step = state_steps(chans)
    starts = window_starts(n, k)
    predicted = np.full(obs.y.shape, np.nan)
    for s in starts[starts >= k]:  # a handful of windows, each a short output-error fit
        past = s - k
        sub = Observations(obs.t[past:], obs.y[past:], obs.present[past:])
        starts = [np.concatenate([fit.q[past], fit.v[past]])]
        if guide is not None and past >= 1:
            starts.append(np.concatenate([guide.q[past], guide.v[past]]))
        best = None
        for z0 in starts:
            initial = InitialState(
                z0, lambda z: (np.asarray(z)[:, :3], np.asarray(z)[:, 3:]), step, K_STEP_STAGES
            )
            z, err = refine_initial_state(sim, initial, sub, chans, k)
            if best is None or err < best[1]:
                best = (z, err)
        z = best[0]
        pred = np.asarray(sim(initial.to_state(z[None]), np.zeros(1, int), 2 * k), float)[0]
        stop = min(s + k, n - 1)
        predicted[s + 1 : stop + 1] = pred[k + 1 : stop - past + 1]
    err = difference(predicted, obs.y, chans)
    ok = obs.present & np.isfinite(err)
    count = ok.sum(axis=0)
    rms = np.sqrt((np.where(ok, err, 0.0) ** 2).sum(axis=0) / np.maximum(count, 1))
    note = (f"each window's state fitted by the IRC model to the {k} steps "
            f"({obs.t[k] - obs.t[0]:.3g} s) of frames before it; the first window is the "
            "free run's")  # fmt: skip
    return Prediction("k-step", label, k, tuple(chans), obs.t, predicted, rms, count, None,
                      [note], measured=np.where(obs.present, obs.y, np.nan))  # fmt: skip


# ------------------------------------------------------------------------------ output error

# Forward-difference steps of the output-error Jacobian, per unit of each variable's scale
# (J/m relative, mu and eps absolute, the initial pose in noise std, the initial velocity in
# noise std per 0.1 s). The sub-stepped IRC roll-out is piecewise smooth: an impact moves by
# whole sub-steps (4 us, ~4 um of travel at 1 m/s, a third of the sample's tracking noise),
# so a step must move the predicted frames by several noise std for the difference to be a
# derivative rather than that jitter: 1e-3 of J/m moved the sample drop's free run by
# ~2 noise std RMS.
_OE_STEPS = (1e-3, 1e-3, 2e-3, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0)
# The output error is kept only where its chi^2 is what noise of the stated size leaves:
# below chi^2's (1 - OE_MODEL_ERROR_P) quantile (:func:`output_error_limit`), so that a
# correct model at the stated noise is refused once in 1000 fits (as WHITENESS_P in
# estimation.residuals). A model error the free run cannot follow shows first as this
# excess: on the mu = 0.9 throw (IRC frames at 1/1200 s, the free run sub-stepped at
# ~57 us) 9 of 20 noise draws ended at s^2 2.0-3.4 on 147 observations, under the former
# limit 4 but 8-20 std of chi^2's own scatter above 1, with restitution 8-40 of its std off
# (docs/validation.md, "The ellipse drop's std").
OE_MODEL_ERROR_P = 1e-3


@dataclass(frozen=True)
class OutputError:
    """The drop's parameters and initial state fitted by output error (simulation error):
    the IRC roll-out from (q0, v0) against every frame. ``values`` (J_over_m m², mu,
    restitution); ``std`` of each (inf where held: mu when nothing slides); ``covariance``
    [3, 3] of the three (zero rows for a held one); ``chi2`` the weighted squared error over
    the frames at the end and ``chi2_start`` at the NLP's values; ``n_obs``;
    ``residual_variance_factor`` chi2 / (n_obs − n_free) and ``s2_limit``, the largest at
    which the fit is kept (:func:`output_error_limit`; ``kept``); ``iterations``; ``free``
    the parameters fitted; ``residuals`` [n_frames, 3] (x, y, theta in noise std) at the
    end; ``on_bound`` the fitted parameters that ended on their box
    (:func:`oe_parameter_box`)."""

    values: dict
    std: dict
    covariance: np.ndarray
    q0: np.ndarray
    v0: np.ndarray
    chi2: float
    chi2_start: float
    n_obs: int
    residual_variance_factor: float
    iterations: int
    free: tuple
    s2_limit: float
    residuals: np.ndarray
    on_bound: tuple = ()

    @property
    def kept(self) -> bool:
        """Does the free run follow the frames to their stated noise (s² ≤ ``s2_limit``)
        with every fitted parameter inside its box (``on_bound`` empty)?"""
        return bool(self.residual_variance_factor <= self.s2_limit and not self.on_bound)

    def to_dict(self) -> dict:
        return {
            "values": dict(self.values),
            "std": {k: (v if math.isfinite(v) else None) for k, v in self.std.items()},
            "chi2": self.chi2,
            "chi2_at_nlp_values": self.chi2_start,
            "n_obs": self.n_obs,
            "residual_variance_factor": self.residual_variance_factor,
            "s2_limit": self.s2_limit,
            "on_bound": list(self.on_bound),
            # which channel the free run misses: mean squared residual in stated noise units
            "chi2_per_frame": dict(
                zip(("x", "y", "theta"), np.mean(self.residuals**2, axis=0).tolist(), strict=True)
            ),
            "iterations": self.iterations,
            "fitted": list(self.free),
            "q0": self.q0.tolist(),
            "v0": self.v0.tolist(),
            "method": "Levenberg-Marquardt on the IRC free run against every frame "
            "(forward-difference Jacobian); std from max(1, s^2) (J^T W J)^-1 plus batch means",
        }


def output_error(fit, t_m, q_m, geometry, settings, values: dict, hold_mu: bool,
                 iterations: int = 12, substep_h: float | None = None) -> OutputError:  # fmt: skip
    """Refine J/m, mu (unless ``hold_mu``), restitution and the initial state (q0, v0) by
    output error: minimize Σ ((ŷ_i − y_i)/σ)² over every frame, ŷ the IRC roll-out
    (:func:`simulator`, sub-stepped) from (q0, v0) with those parameters; Levenberg–
    Marquardt from the NLP's values, the Jacobian by forward differences (one roll-out per
    variable), a step kept only where it lowers the error.

    Why: the NLP (27) has no restitution (IGC impacts), and restitution read from frame
    differences across each impact (:func:`restitution`) carries the velocity noise of
    four frames: 0.192 for 0.2 on the sample drop, which shifts each bounce by ~9 mm/s and
    made the free run miss the frames by 57x the noise, while the true parameters predict
    them within the noise (0.74, 0.52, 0.51x). The bounces' timing amplifies every
    parameter error, so the frames after each impact determine ε, J/m and μ better than the
    contact impulses alone do."""
    t = np.asarray(fit.t, float)
    h = float(np.median(np.diff(t)))
    if substep_h is None:
        substep_h = substep_for(settings.sigma_pos, fastest_point_speed(fit, geometry))
    frames = np.asarray(fit.frame_index)
    sig = np.array([settings.sigma_pos, settings.sigma_pos, settings.sigma_theta])
    y = np.asarray(q_m, float)
    steps = len(t) - 1
    free = ("J_over_m", "restitution") if hold_mu else ("J_over_m", "mu", "restitution")
    scale = np.array([values["J_over_m"], 1.0, 1.0, *sig, *(sig / 0.1)])
    active = [0, 2, *range(3, 9)] if hold_mu else list(range(9))

    base = np.concatenate([[values["J_over_m"], values["mu"], values["restitution"]],
                           fit.q[0], fit.v[0]])  # fmt: skip
    lower, upper = oe_parameter_box(settings)

    def unpack(z):
        return base + z * scale

    def into_box(z):
        """z with J/m, mu and restitution moved onto their box (a projected LM step): the
        roll-out cannot use values outside it, so beyond it the error is flat and LM
        drifted (a rejected fit ended at restitution -2.99)."""
        p = unpack(z)
        z = z.copy()
        z[:3] = (np.clip(p[:3], lower, upper) - base[:3]) / scale[:3]
        return z

    def residuals(z):
        p = unpack(z)
        jm, mu, eps = p[:3]
        sim = simulator(geometry, 1.0, jm, mu, eps, h, substep_h)
        pred = sim((p[3:6][None], p[6:9][None]), np.zeros(1, int), steps)[0][frames]
        d = pred - y
        d[:, 2] = (d[:, 2] + math.pi) % (2 * math.pi) - math.pi
        return (d / sig).ravel()

    z = into_box(np.zeros(9))
    r = residuals(z)
    chi2_start = chi2 = float(r @ r)
    damping, done = 1e-3, 0
    step = np.asarray(_OE_STEPS)
    for iteration in range(1, iterations + 1):
        done = iteration
        J, step = _jacobian(residuals, z, r, active, step)
        Ja = J[:, active]
        A, g = Ja.T @ Ja, Ja.T @ r
        improved = False
        for _ in range(6):
            dz = np.zeros(9)
            dz[active] = np.linalg.solve(A + damping * np.diag(np.diag(A) + 1e-12), -g)
            dz = into_box(z + dz) - z
            trial = residuals(z + dz)
            if float(trial @ trial) < chi2:
                z, r, chi2 = z + dz, trial, float(trial @ trial)
                damping = max(damping / 10.0, 1e-9)
                improved = True
                break
            damping *= 10.0
        # Stop where no step lowers the error or the step's predicted decrease is below
        # 0.1 % of it (far below chi^2's own noise, sqrt(2 n_obs) / n_obs ~ 7 % at 360).
        if not improved or abs(g @ dz[active]) < 1e-3 * chi2:
            break
    J, step = _jacobian(residuals, z, r, active, step)
    # A variable that moves no frame (mu where the roll-out never slides: a unit change of
    # it moves them by less than 1e-6 noise std RMS) is not determined: held, std inf.
    active = [i for i in active if np.linalg.norm(J[:, i]) > 1e-6 * math.sqrt(r.size)]
    names = ("J_over_m", "mu", "restitution")
    p = unpack(z)
    # A held one keeps its start: LM's steps along a direction that moves no frame are
    # noise (mu once drifted to its bound 2.0 where the roll-out never slid)
    p[:3] = [p[i] if i in active else base[i] for i in range(3)]
    # A parameter on its box is not a measurement (no std; ``OutputError.kept`` refuses it)
    on_bound = tuple(
        n for i, n in enumerate(names)
        if i in active and (p[i] <= lower[i] or p[i] >= upper[i])
    )  # fmt: skip
    free = tuple(n for i, n in enumerate(names) if i in active)
    n_obs, n_free = r.size, len(active)
    s2 = chi2 / max(n_obs - n_free, 1)
    cov_a = _output_error_covariance(J[:, active], r, s2)
    cov = np.zeros((9, 9))
    cov[np.ix_(active, active)] = cov_a
    cov *= np.outer(scale, scale)
    std = {n: float(np.sqrt(max(cov[i, i], 0.0))) if i in active else math.inf
           for i, n in enumerate(names)}  # fmt: skip
    return OutputError(
        values={n: float(p[i]) for i, n in enumerate(names)},
        std=std,
        covariance=cov[:3, :3],
        q0=p[3:6],
        v0=p[6:9],
        chi2=chi2,
        chi2_start=chi2_start,
        n_obs=n_obs,
        residual_variance_factor=float(s2),
        iterations=done,
        free=free,
        s2_limit=output_error_limit(n_obs, n_free),
        residuals=r.reshape(-1, 3),
        on_bound=on_bound,
    )


def oe_parameter_box(settings) -> tuple[np.ndarray, np.ndarray]:
    """Lower and upper bounds of (J/m, mu, restitution) in the output-error fit: the NLP's
    boxes (``IpoptSettings.j_over_m_bounds``, ``mu_bounds``; m², 1) and [0, 1] for the
    restitution coefficient."""
    lower = np.array([settings.j_over_m_bounds[0], settings.mu_bounds[0], 0.0])
    upper = np.array([settings.j_over_m_bounds[1], settings.mu_bounds[1], 1.0])
    return lower, upper


def output_error_limit(n_obs: int, n_free: int) -> float:
    """The largest residual variance factor s² = χ² / (n_obs − n_free) at which an output-
    error fit is kept: χ²'s (1 − ``OE_MODEL_ERROR_P``) quantile with n_obs − n_free degrees
    of freedom, over them. 1.41 for the Section 6.1 throw's 147 observations (χ²'s own
    scatter there is ±0.12), 1.25 for the sample drop's 360.

    Why not the NLP's ``MODEL_ERROR_LIMIT`` (4, a stated noise off by 2x): the bounces'
    timing makes the free run so sensitive to restitution and J/m that a model error of
    ~1.5 noise std RMS (s² 2-3) biases them by 10-40 of the Gauss-Newton std, which only
    the noise sets. Frames that the stated noise explains leave no room for such an error.
    The price: a model that is right but whose frames are noisier than stated by more than
    ~1.2x is refused too, and the NLP's values with their own std are reported. The
    residuals' whiteness (``estimation.residuals``) does not separate the cases: 3 of the
    9 kept fits above had white residuals in every channel (Ljung-Box p >= 0.003), while
    the sample drop's kept fit (s² 0.13, within its std) has correlated ones (its
    tracking error, p 1e-44 on x)."""
    dof = max(n_obs - n_free, 1)
    return float(chi2_dist.ppf(1.0 - OE_MODEL_ERROR_P, dof) / dof)


def _jacobian(residuals, z, r, active, step):
    """Forward-difference Jacobian of ``residuals`` at z (r = residuals(z)) over the
    ``active`` variables, and the steps used. A step whose difference moves the frames by
    less than 0.3 noise std RMS is enlarged (once, up to 100x) to move them by about one:
    below that the sub-steps' jitter (an impact moves by whole sub-steps) dominates the
    difference, which is then no derivative (measured: with 0.1 mm noise and 1/24000 s
    sub-steps the fixed steps left LM at chi^2/n = 74 on a self-consistent throw)."""
    step = np.array(step, float)
    J = np.zeros((r.size, len(z)))
    target = math.sqrt(r.size)  # one noise std RMS over the frames
    for i in active:
        dz = np.zeros(len(z))
        dz[i] = step[i]
        d = residuals(z + dz) - r
        size = float(np.linalg.norm(d))
        if size < 0.3 * target:
            step[i] *= min(100.0, target / max(size, 1e-3 * target))
            dz[i] = step[i]
            d = residuals(z + dz) - r
        J[:, i] = d / step[i]
    return J, step


def _output_error_covariance(J: np.ndarray, r: np.ndarray, s2: float) -> np.ndarray:
    """Covariance of the fitted variables (in the Jacobian's units) from J [n_obs, p] and the
    residuals r (noise units): max(1, s²) (JᵀJ)⁻¹ plus the positive part of the batch-means
    excess over ``BATCHES`` blocks of frames, as in ``ipopt_contact.parameter_covariance``.

    The factor is floored at 1: a fit better than the stated noise does not make the std
    smaller than that noise implies (the sample drop's frames miss the free run by 0.36 of
    the tracker's stated std, s² = 0.13, with residuals correlated over frames: the plane
    pose's offset is common to all of them; scaled by s² the std of J/m was 0.056 mm² for
    an error of 0.23 mm²). Batch means cover residuals correlated in time."""
    try:
        inv = np.linalg.inv(J.T @ J)
    except np.linalg.LinAlgError:
        return np.full((J.shape[1], J.shape[1]), np.inf)
    cov = max(1.0, s2) * inv
    rows = (J * r[:, None]).reshape(-1, 3, J.shape[1]).sum(axis=1)  # per frame
    score = rows @ inv
    return cov + positive_part(batch_means(score, BATCHES) - s2 * inv)


def irc_frames(fit, geometry, values: dict, substep_h: float, h: float | None = None,
               offset: float = 0.0, first: int = 0):  # fmt: skip
    """[n_frames − first, 3] poses of the IRC model (``simulator``) with ``values``
    (J_over_m m², mu, restitution), run free from the NLP's state at its frame ``first``
    (q, v at that node; the first frame by default) and read at the fit's frames from that
    one on: the data the identified model would have produced without noise, for refits
    that carry the NLP's model error against IRC (``estimation.bootstrap``,
    ``model_error_probe``). ``h`` (s): the grid the sub-steps ``substep_h`` (s) divide,
    the fit's own by default; on another grid the frames are read at its nearest node
    (the frame times must be multiples of ``h`` from the first, e.g. the 1/1200 s grid of
    the Section 6.1 throw's truth at 120 fps). ``offset`` (s, a multiple of ``h``; only
    with ``h``): every frame read that much later, the run's first frame its state
    ``offset`` after the NLP's (``model_error_allowance``'s phases)."""
    t = np.asarray(fit.t, float)
    own = float(np.median(np.diff(t)))
    nodes = np.asarray(fit.frame_index)[first:]
    t_frames = t[nodes]
    if h is None:
        if offset != 0.0:
            raise ValueError("an offset reads the run on a grid of its own: pass h")
        h, index = own, nodes - nodes[0]
    else:
        index = np.rint((t_frames - t_frames[0] + offset) / h).astype(int)
    sim = simulator(geometry, 1.0, values["J_over_m"], values["mu"], values["restitution"], h,
                    substep_h)  # fmt: skip
    # the NLP's v^k is the mean velocity over its own step, v(t_k) + g own / 2 upwards; the
    # simulator takes the mean over a step of its grid h
    q0 = np.asarray(fit.q[nodes[0]], float)
    v0 = np.asarray(fit.v[nodes[0]], float) + np.array([0.0, GRAVITY, 0.0]) * (h - own) / 2.0
    q = sim((q0[None], v0[None]), np.zeros(1, int), int(index[-1]))
    return np.asarray(q)[0][index]


def observed_start(fit) -> int:
    """The first of the fit's frames whose NLP state the frames determine: 0, or 1 where
    the NLP has contact (``ipopt_contact.in_contact``: a normal impulse above 1 % of its
    largest) within the first frame interval. Before an impact in that interval only the
    first frame sees the motion, so the NLP's velocity there is whatever its objective
    found cheapest, not the throw's: on varied throw 16 (about [3, −5] m/s at the start)
    it was [7.2, −14.6] m/s, and IRC run from it missed the frames by 0.31 m RMS."""
    return int(in_contact(fit.pn)[: int(fit.frame_index[1])].any())


def fit_frames(t_m, frames, geometry, settings):
    """The NLP's fit of ``frames`` [n, 3] at ``t_m`` (s) as the drop path fits data: the
    impacts they resolve at their own noise (:func:`impact_consistency`,
    :func:`frame_noise`), then :func:`fit_multistart`. For fits of simulated frames (the
    model-error allowance, the coverage study's probes)."""
    seen = impact_consistency(t_m, frames, geometry, *frame_noise(frames))
    return fit_multistart(t_m, frames, geometry, settings, seen)[0]


# s, the longest IRC sub-step of the model-error allowance's run: on the Section 6.1 throw
# IRC at 1/24000 s and 1/240000 s agree to 3.1 noise std RMS over 0.4 s (at 1/1200-1/4800 s
# the motion leaves them at the first impact), and it sinks ~0.2 mm at 5 m/s impacts.
ALLOWANCE_SUBSTEP_H = 1.0 / 24000
# The phases of the allowance's runs on the NLP's grid, as fractions of its step: each run
# starts that much later along the fit's motion, so its impacts fall elsewhere between
# the grid's nodes. Not 0: a run from the NLP's own first state puts its impacts where the
# NLP's fit already has them, which its grid represents well; on 10 varied throws whose
# noise-free frames the NLP fits 0.0016-0.019 off in mu, that run's fit was 4e-5-0.008 off
# (median 3e-4) and the runs at a quarter, half and three quarters of a step 0.0006-0.029
# (docs/validation.md, "The allowance's phases").
ALLOWANCE_PHASES = (0.25, 0.5, 0.75)


def model_error_allowance(fit, geometry, settings, values: dict) -> dict | None:
    """The size of the NLP's (27) model error against rigid contact at the identified
    values, for the std where the NLP's values are reported. The IRC model is run free with
    ``values`` (J_over_m m², mu, restitution) from the NLP's motion, near its converged
    motion (sub-steps of at most ``ALLOWANCE_SUBSTEP_H``, finer where the frames' noise and
    the fit's speeds ask, ``substep_for``), once per phase of ``ALLOWANCE_PHASES`` (the run
    read that fraction of the NLP's step later at every frame), read at the frames without
    noise and fitted as the drop path fits data (:func:`fit_multistart`). The fits' J/m and
    mu less ``values``' are errors of fits with no noise; the allowance is their RMS over
    the phases whose fit converged to a test off J/m's bound: {J_over_m, mu, phases:
    [{phase, J_over_m, mu (signed), status}] (None each where that fit failed),
    first_frame, substep_s, cpu_s}; None where no phase's fit did. The runs start at the
    first frame whose state the frames determine (``observed_start``: the second where an
    impact falls within the first frame interval) and are fitted from there on.

    Why: where the output error is not kept, the NLP's values carry its model error (a
    ~1 ms grid and penalized complementarity against IRC's impulses), which neither its
    linearized std nor the bootstrap's refits of its own prediction see. A run shares only
    its first impact with the frames (the next ones depend on the state to below the
    noise), so its errors are those of a throw like this one, not this one's: over 50
    noise draws of the Section 6.1 throw they did not correlate with the fit's own errors
    (r = +0.12 for mu), so they widen the std (in quadrature) rather than correct the value
    (docs/validation.md, "The NLP's std"). Where the grid cuts a throw's impacts decides
    much of that error, and a user's throw lands at any phase of it: hence several."""
    c0 = time.process_time()
    first = observed_start(fit)
    t_m = fit.t[fit.frame_index][first:]
    speed = fastest_point_speed(fit, geometry)
    sub = min(ALLOWANCE_SUBSTEP_H, substep_for(settings.sigma_pos, speed))
    own = float(np.median(np.diff(fit.t)))
    # a grid that divides the frame interval and holds every phase's offset
    interval = float(np.median(np.diff(t_m)))
    quarter = interval / (4 * max(1, round(interval / own)))
    lo, hi = settings.j_over_m_bounds
    phases = []
    for phase in ALLOWANCE_PHASES:
        offset = round(phase * own / quarter) * quarter
        frames = irc_frames(fit, geometry, values, sub, quarter, offset, first)
        clean = fit_frames(t_m, frames, geometry, settings)
        on_bound = bound_flags([clean.j_over_m], [lo], [hi], [settings.j_over_m_initial])[0]
        if on_bound != "" or not ipopt_status(clean).converged:
            phases.append(None)
            continue
        phases.append({
            "phase": phase,
            "J_over_m": clean.j_over_m - values["J_over_m"],
            "mu": clean.mu - values["mu"],
            "status": clean.status,
        })  # fmt: skip
    usable = [p for p in phases if p is not None]
    if not usable:
        return None
    return {
        "J_over_m": float(np.sqrt(np.mean([p["J_over_m"] ** 2 for p in usable]))),
        "mu": float(np.sqrt(np.mean([p["mu"] ** 2 for p in usable]))),
        "phases": phases,
        "first_frame": first,
        "substep_s": sub,
        "cpu_s": time.process_time() - c0,
    }
