"""Identification NLP (27) of Gabiccini & Fusco for a planar ellipse with frictional impacts.

Decision variables (all on the fine grid of eq. (25), Figure 16):

* ``r_hat`` = (J/m) / a^2 (dimensionless; only the ratio J/m is identifiable, Section 5.2.2,
  so the dynamics (16) are divided by the known mass m and impulses are per unit mass),
* ``mu`` (friction coefficient),
* q^k, v^k for k = 0..N, impulses per unit mass p_n, p_+, p_- (m/s) and friction multipliers
  lambda (m/s) for each step.

Constraints: dynamics (16) / m, kinematics (17), ``g_n(q^k) >= 0`` and the sign and cone
inequalities of (27). The complementarity products Gamma (26) go to the objective.

Weighting rule (the paper tuned W_chi, W_Gamma by trial and error):

* ``W_chi = diag(1/sigma^2)``: chi^T W_chi chi is the chi-square of the measurement noise
  (sigma_x = sigma_y = position noise, sigma_theta = angle noise), so the fit term is ~1 per
  measured coordinate at the truth, whatever the frame rate or window length.
* ``W_Gamma``: every product in (26) is non-negative on the feasible set, so we penalize the
  products themselves (an exact l1 penalty, as in the penalty formulation of MPCCs solved by
  interior-point methods) instead of their squares. A quadratic penalty is never exact: it
  trades complementarity against fit for every finite weight, which is why the paper needed
  per-case tuning. With the l1 penalty, any weight above the MPCC multipliers gives the same,
  complementarity-satisfying solution, so one dimensionless weight ``rho`` works everywhere.
  Products are made dimensionless with the scales the data fix: gap by sigma, impulses per
  unit mass by the speed scale V (largest speed of the smoothed observations), slip and
  friction-multiplier velocities by sigma/dt (dt = median frame interval):
  ``Gamma_3 = p_n g / (V sigma)``, ``Gamma_{1,2} = (...)/(V sigma/dt)``.

Problem building is step-wise in CasADi SX, so the constraint Jacobian and Lagrangian Hessian
are sparse with O(N) non-zeros (``sparsity_report``). ``structure="dense"`` builds the same
NLP by single shooting (states eliminated recursively), which has dense Jacobian and Hessian
blocks; it exists only for the benchmark.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import casadi as ca
import numpy as np

from dynamics.planar_contact import GRAVITY, contact_geometry_sx


class NotIdentifiableError(ValueError):
    """The data cannot determine J/m (no contact, too few frames, no angular excitation)."""


@dataclass(frozen=True)
class ContactGeometry:
    """Known geometry: ellipse semi-axes a, b (m); ground line through (x0, y0) at alpha (rad)."""

    a: float
    b: float
    x0: float = 0.0
    y0: float = 0.0
    alpha: float = 0.0


@dataclass(frozen=True)
class IpoptSettings:
    """Settings of the identification NLP (see the module docstring for the weighting rule).

    ``h_max`` (s): largest fine step (eq. 25); ``sigma_pos`` (m), ``sigma_theta`` (rad):
    measurement noise for W_chi; ``rho``: dimensionless l1 penalty weight of Gamma;
    ``mu_pull``: a linear pull on mu (in chi-square units per unit of mu) that picks the
    smallest mu consistent with the data when the object never slides (then mu only has a
    lower bound, Section 6.1 / Figure 19); it is negligible next to the fit evidence where
    the object slides.
    """

    h_max: float = 1e-3
    sigma_pos: float = 1e-3
    sigma_theta: float = 1e-3
    rho: float = 10.0
    mu_pull: float = 10.0
    j_over_m_initial: float = 4e-4
    j_over_m_bounds: tuple[float, float] = (1e-6, 1e-1)
    mu_initial: float = 0.5
    mu_bounds: tuple[float, float] = (0.0, 2.0)
    max_iter: int = 500
    tol: float = 1e-8
    obj_change_tol: float = 1e-4
    min_frames: int = 8
    structure: str = "stepwise"
    print_level: int = 0


@dataclass(frozen=True)
class ContactFit:
    """Result of one identification: parameters, fitted trajectory and impulses per unit mass.

    ``t`` [N+1] fine grid (s); ``q``, ``v`` [N+1, 3]; ``pn``, ``pt`` (net along d+), ``lam``
    [N] (m/s; multiply by m for N s); ``frame_index`` [N_m] fine index of each frame (25).
    """

    j_over_m: float
    mu: float
    t: np.ndarray
    q: np.ndarray
    v: np.ndarray
    pn: np.ndarray
    pt: np.ndarray
    lam: np.ndarray
    frame_index: np.ndarray
    cost_fit: float
    cost_gamma: float
    iterations: int
    success: bool
    status: str
    wall_s: float
    stats: dict = field(default_factory=dict)


def fine_grid(t_m: np.ndarray, h_max: float) -> tuple[np.ndarray, np.ndarray]:
    """Multi-rate alignment (25), Figure 16, for possibly uneven frame times ``t_m``.

    Each frame interval dt_i is split into n_i = ceil(dt_i / h_max) equal steps, so every frame
    falls exactly on a fine node. Returns the fine times and the node index of each frame.
    """
    dt = np.diff(t_m)
    n = np.ceil(dt / h_max - 1e-9).astype(int)
    n = np.maximum(n, 1)
    index = np.concatenate([[0], np.cumsum(n)])
    t = np.concatenate(
        [t_m[i] + dt[i] * np.arange(n[i]) / n[i] for i in range(len(dt))] + [[t_m[-1]]]
    )
    return t, index


def check_informative(t_m, q_m, geometry: ContactGeometry, settings: IpoptSettings) -> None:
    """Refuse input from which J/m cannot be identified, saying why (Sections 5.2-5.3)."""
    n = len(t_m)
    if n < settings.min_frames:
        raise NotIdentifiableError(
            f"only {n} valid frames; at least {settings.min_frames} are needed to see a "
            "bounce and the flight before and after it (J/m is identified from the change of "
            "angular vs linear velocity at contact, eq. 31)"
        )
    if np.any(np.diff(t_m) <= 0):
        raise NotIdentifiableError("frame times are not strictly increasing")
    gaps = np.array(
        [
            float(
                contact_geometry_sx(
                    q, geometry.a, geometry.b, geometry.x0, geometry.y0, geometry.alpha
                )[0]
            )
            for q in q_m
        ]
    )
    # Contact possible only if some observed gap is within a few noise levels of zero (a
    # frame interval of flight before touching is allowed for, at the observed speed).
    speed = np.max(np.abs(np.diff(q_m[:, :2], axis=0)), initial=0.0)
    reach = 4 * settings.sigma_pos + speed
    if gaps.min() > reach:
        raise NotIdentifiableError(
            f"the object never touches the ground in this window (smallest observed gap "
            f"{gaps.min() * 1e3:.1f} mm): in free flight no contact impulse acts, J and m "
            "scale out of the equations of motion, so J/m cannot be identified (Section "
            "5.2.1); give a window that contains a bounce"
        )


def identify_contact(
    t_m: np.ndarray,
    q_m: np.ndarray,
    geometry: ContactGeometry,
    settings: IpoptSettings = IpoptSettings(),
) -> ContactFit:
    """Solve NLP (27) for frames ``q_m`` [N_m, 3] at times ``t_m`` [N_m] (missing ones removed)."""
    t_m = np.asarray(t_m, float)
    q_m = np.asarray(q_m, float)
    check_informative(t_m, q_m, geometry, settings)
    problem = build_nlp(t_m, q_m, geometry, settings)
    t0 = time.perf_counter()
    sol = problem.solver(
        x0=problem.x0, lbx=problem.lbx, ubx=problem.ubx, lbg=problem.lbg, ubg=problem.ubg
    )
    wall = time.perf_counter() - t0
    stats = problem.solver.stats()
    x = np.array(sol["x"]).ravel()
    parts = problem.unpack(x)
    a2 = geometry.a**2
    fit = float(problem.f_fit(x))
    gam = float(problem.f_gamma(x))
    return ContactFit(
        j_over_m=float(parts["r_hat"]) * a2,
        mu=float(parts["mu"]),
        t=problem.t,
        q=parts["q"],
        v=parts["v"],
        pn=parts["pn"],
        pt=parts["pp"] - parts["pm"],
        lam=parts["lam"],
        frame_index=problem.frame_index,
        cost_fit=fit,
        cost_gamma=gam,
        iterations=int(stats.get("iter_count", -1)),
        success=bool(stats.get("success", False)),
        status=str(stats.get("return_status", "")),
        wall_s=wall,
        stats={
            "t_wall_total": wall,
            "n_variables": int(problem.x0.size),
            "n_constraints": int(problem.lbg.size),
            **problem.sparsity,
        },
    )


@dataclass(frozen=True)
class _Problem:
    solver: ca.Function
    x0: np.ndarray
    lbx: np.ndarray
    ubx: np.ndarray
    lbg: np.ndarray
    ubg: np.ndarray
    t: np.ndarray
    frame_index: np.ndarray
    unpack: object
    f_fit: ca.Function
    f_gamma: ca.Function
    sparsity: dict


def _warm_start(t, t_m, q_m, geometry: ContactGeometry):
    """Initial trajectory from the observations: linear interpolation on the fine grid.

    Velocities follow from (17); impulses per unit mass from (16) projected on n and d+
    (clipped to the feasible signs) so that the initial point nearly satisfies the dynamics.
    """
    q = np.column_stack([np.interp(t, t_m, q_m[:, j]) for j in range(3)])
    h = np.diff(t)
    v = np.zeros_like(q)
    v[1:] = np.diff(q, axis=0) / h[:, None]
    v[0] = v[1]
    n = np.array([-np.sin(geometry.alpha), np.cos(geometry.alpha)])
    d = np.array([np.cos(geometry.alpha), np.sin(geometry.alpha)])
    acc = np.diff(v[:, :2], axis=0) + h[:, None] * np.array([0.0, GRAVITY])
    pn = np.maximum(acc @ n, 0.0)
    pt = acc @ d
    return q, v, pn, np.maximum(pt, 0.0), np.maximum(-pt, 0.0)


def build_nlp(t_m, q_m, geometry: ContactGeometry, s: IpoptSettings) -> _Problem:
    """Build NLP (27) with the weighting rule of the module docstring."""
    t, frame_index = fine_grid(t_m, s.h_max)
    N = len(t) - 1
    h = np.diff(t)
    a2 = geometry.a**2
    geo = (geometry.a, geometry.b, geometry.x0, geometry.y0, geometry.alpha)

    q_init, v_init, pn_init, pp_init, pm_init = _warm_start(t, t_m, q_m, geometry)
    speed = float(np.max(np.linalg.norm(v_init[:, :2], axis=1)))
    V = max(speed, 0.1)  # m/s; floor for a nearly still object
    dt_frame = float(np.median(np.diff(t_m)))
    slip_scale = s.sigma_pos / dt_frame
    w_gap = s.rho / (V * s.sigma_pos)
    w_fric = s.rho / (V * slip_scale)

    r_hat = ca.SX.sym("r_hat")
    mu = ca.SX.sym("mu")
    P = ca.SX.sym("P", 4, N)  # pn, p+, p-, lambda per step
    if s.structure == "stepwise":
        Q = ca.SX.sym("Q", 3, N + 1)
        Vv = ca.SX.sym("V", 3, N + 1)
        qs = [Q[:, k] for k in range(N + 1)]
        vs = [Vv[:, k] for k in range(N + 1)]
    elif s.structure == "dense":
        q0s, v0s = ca.SX.sym("q0", 3), ca.SX.sym("v0", 3)
        qs, vs = [q0s], [v0s]
    else:
        raise ValueError(f"structure must be 'stepwise' or 'dense', got {s.structure!r}")

    eqs, ineqs, gammas_gap, gammas_fric = [], [], [], []
    for k in range(N):
        g, Nb, Tp, _ = contact_geometry_sx(qs[k], *geo)
        pn, pp, pm, lam = P[0, k], P[1, k], P[2, k], P[3, k]
        dp = pp - pm
        if s.structure == "dense":
            # Single shooting: v^{k+1} and q^{k+1} from (16)-(17) as expressions.
            vxy = vs[k][:2] + Nb[:2] * pn + Tp[:2] * dp - h[k] * ca.vertcat(0, GRAVITY)
            om = vs[k][2] + (Nb[2] * pn + Tp[2] * dp) / (r_hat * a2)
            vs.append(ca.vertcat(vxy, om))
            qs.append(qs[k] + h[k] * vs[k + 1])
        else:
            dv = vs[k + 1] - vs[k]
            eqs.append(dv[:2] - Nb[:2] * pn - Tp[:2] * dp + h[k] * ca.vertcat(0, GRAVITY))
            eqs.append(r_hat * dv[2] - (Nb[2] * pn + Tp[2] * dp) / a2)
            eqs.append(qs[k + 1] - qs[k] - h[k] * vs[k + 1])
        ut = ca.dot(Tp, vs[k + 1])
        slack_p, slack_m, cone = ut + lam, -ut + lam, mu * pn - pp - pm
        ineqs.append(ca.vertcat(g, slack_p, slack_m, cone))
        gammas_gap.append(pn * g)
        gammas_fric.append(pp * slack_p + pm * slack_m + lam * cone)
    g_last = contact_geometry_sx(qs[N], *geo)[0]
    ineqs.append(g_last)

    sig = np.array([s.sigma_pos, s.sigma_pos, s.sigma_theta])
    chi = ca.vertcat(*[(qs[k] - q_m[i]) / sig for i, k in enumerate(frame_index)])
    f_fit = ca.sumsqr(chi)
    f_gamma = w_gap * ca.sum1(ca.vertcat(*gammas_gap)) + w_fric * ca.sum1(ca.vertcat(*gammas_fric))

    if s.structure == "stepwise":
        x = ca.vertcat(r_hat, mu, ca.vec(Q), ca.vec(Vv), ca.vec(P))
    else:
        x = ca.vertcat(r_hat, mu, q0s, v0s, ca.vec(P))
    g_all = ca.vertcat(*eqs, *ineqs)
    n_eq = int(ca.vertcat(*eqs).numel()) if eqs else 0
    n_in = int(g_all.numel()) - n_eq

    r0 = s.j_over_m_initial / a2
    p_init = np.vstack([pn_init, pp_init, pm_init, np.zeros(N)])
    inf = np.inf
    lb_r, ub_r = s.j_over_m_bounds[0] / a2, s.j_over_m_bounds[1] / a2
    if s.structure == "stepwise":
        x0 = np.concatenate(
            [[r0, s.mu_initial], q_init.T.ravel("F"), v_init.T.ravel("F"), p_init.ravel("F")]
        )
        nfree = 6 * (N + 1)
    else:
        x0 = np.concatenate([[r0, s.mu_initial], q_init[0], v_init[1], p_init.ravel("F")])
        nfree = 6
    lbx = np.concatenate([[lb_r, s.mu_bounds[0]], -inf * np.ones(nfree), np.zeros(4 * N)])
    ubx = np.concatenate([[ub_r, s.mu_bounds[1]], inf * np.ones(nfree), inf * np.ones(4 * N)])
    lbg = np.concatenate([np.zeros(n_eq), np.zeros(n_in)])
    ubg = np.concatenate([np.zeros(n_eq), inf * np.ones(n_in)])

    f = 0.5 * f_fit + f_gamma + s.mu_pull * mu
    nlp = {"x": x, "f": f, "g": g_all}
    opts = {
        "print_time": False,
        "ipopt": {
            "print_level": s.print_level,
            "sb": "yes",
            "max_iter": s.max_iter,
            "tol": s.tol,
            # The l1 complementarity penalty leaves a long tail of tiny objective
            # decreases (degenerate MPCC); stop once the objective is flat and the
            # constraints hold, instead of creeping for hundreds of iterations.
            "acceptable_tol": 1e10,
            "acceptable_constr_viol_tol": 1e-7,
            "acceptable_dual_inf_tol": 1e10,
            "acceptable_compl_inf_tol": 1e-2,
            "acceptable_obj_change_tol": s.obj_change_tol,
            "acceptable_iter": 8,
            "mu_strategy": "adaptive",
            "bound_push": 1e-6,
            "bound_frac": 1e-6,
            "linear_solver": "mumps",
        },
    }
    solver = ca.nlpsol("ident27", "ipopt", nlp, opts)
    jac = solver.get_function("nlp_jac_g").sparsity_out(1)
    hess = solver.get_function("nlp_hess_l").sparsity_out(0)  # lower triangle
    sparsity = {
        "jacobian_nnz": int(jac.nnz()),
        "jacobian_shape": [jac.size1(), jac.size2()],
        "hessian_nnz": int(hess.nnz()),
    }

    fq = ca.Function("fq", [x], [ca.horzcat(*qs), ca.horzcat(*vs)])

    def unpack(xv: np.ndarray) -> dict:
        qv, vv = fq(xv)
        Pm = np.reshape(xv[-4 * N :], (4, N), order="F")
        return {
            "r_hat": xv[0],
            "mu": xv[1],
            "q": np.array(qv).T,
            "v": np.array(vv).T,
            "pn": Pm[0],
            "pp": Pm[1],
            "pm": Pm[2],
            "lam": Pm[3],
        }

    return _Problem(
        solver,
        x0,
        lbx,
        ubx,
        lbg,
        ubg,
        t,
        frame_index,
        unpack,
        ca.Function("f_fit", [x], [f_fit]),
        ca.Function("f_gamma", [x], [f_gamma]),
        sparsity,
    )


def identifiability(fit: ContactFit, geometry: ContactGeometry, rel_threshold=1e-2) -> dict:
    """Rank analysis of Section 5.2 on the fitted trajectory.

    Builds A_{N_I} of eq. (29) (per unit of the unknown vector w = (m, J, c_n^k, dc_t^k)) over
    the contact steps (normal impulse above ``rel_threshold`` of the largest), returns its
    singular values, numerical rank, the J/m read from its null vector (eq. 31-32), and
    whether the angular column is excited (Section 5.3).
    """
    pn = fit.pn
    if pn.size == 0 or pn.max() <= 0:
        return {"contact_steps": 0, "identifiable": False, "reason": "no contact impulse"}
    steps = np.flatnonzero(pn > rel_threshold * pn.max())
    n_i = len(steps)
    A = np.zeros((3 * n_i, 2 + 2 * n_i))
    h = np.diff(fit.t)
    for row, k in enumerate(steps):
        q = fit.q[k]
        g, Nb, Tp, _ = contact_geometry_sx(
            q, geometry.a, geometry.b, geometry.x0, geometry.y0, geometry.alpha
        )
        Nb, Tp = np.array(Nb, float).ravel(), np.array(Tp, float).ravel()
        dv = fit.v[k + 1] - fit.v[k]
        r = 3 * row
        A[r, 0] = dv[0]
        A[r + 1, 0] = dv[1] + h[k] * GRAVITY
        A[r + 2, 1] = dv[2]
        A[r : r + 3, 2 + 2 * row] = -Nb
        A[r : r + 3, 3 + 2 * row] = -Tp
    sv = np.linalg.svd(A, compute_uv=False)
    _, _, vt = np.linalg.svd(A)
    null = vt[-1]
    ratio = float(null[1] / null[0]) if abs(null[0]) > 0 else float("nan")
    rank = int(np.sum(sv > sv[0] * 1e-8))
    excited = float(np.max(np.abs(fit.v[steps + 1, 2] - fit.v[steps, 2])))
    return {
        "contact_steps": n_i,
        "matrix_shape": list(A.shape),
        "singular_values": sv.tolist(),
        "rank": rank,
        "null_space_dim": int(A.shape[1] - rank),
        "j_over_m_from_null_vector": ratio,
        "max_angular_velocity_jump": excited,
        "identifiable": bool(excited > 1e-3),
        "note": "only J/m is identifiable: (m, J, impulses) scale together (Section 5.2.2)",
    }
