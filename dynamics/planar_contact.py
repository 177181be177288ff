"""Planar rigid ellipse with frictional impacts against a line (Gabiccini & Fusco, Sections 3-4).

One model, many uses: the contact geometry (normal gap (21), contact point, wrench bases N and
T~ of Section 4.1) is written once as a CasADi SX function. The IPOPT identification NLP calls
it symbolically (``contact_geometry_sx``); the time-stepping simulator evaluates the very same
function numerically (``contact_geometry``).

Time stepping (Section 3.5, eqs. 16-20):

* IRC (impulse-restitution complementarity): contacts are toggled by the big-M rule (6) from
  the gap and separation velocity at step k; an active contact imposes Newton restitution
  ``N^T (v^{k+1} + eps v^k) = 0`` (19) with Coulomb friction complementarity (18).
* IGC (impulse-gap complementarity): ``0 <= c_n  _|_  g_n(q^k) + h N^T v^{k+1} >= 0`` (Stewart
  & Trinkle), kept only for the comparison of Section 4.2.

Each step is a 4x4 LCP in ``z = (c_n, c_t+, c_t-, lambda)`` solved exactly by enumerating its
16 complementary index sets (``solve_lcp4``). Why this gives the same answer as the per-step
IPOPT NLP (20): with the toggles of (6) fixed, (20) is the feasibility problem of the MLCP
{dynamics (16), kinematics (17), friction complementarity (18), restitution equality (19)};
its objective is the squared complementarity residual, which is zero exactly at MLCP
solutions. The LCP here eliminates v^{k+1} through the Delassus matrix and writes the
restitution row as ``0 <= c_n _|_ N^T(v^{k+1} + eps v^k) >= 0``. Whenever (20) is feasible
(c_n >= 0 with the equality), the two coincide; where (20) would be infeasible (the equality
needs a pulling impulse c_n < 0) the LCP returns c_n = 0 and lets the contact separate.
``irc_step_ipopt`` solves (20) literally with IPOPT; a test checks both agree.

Units: SI (m, s, rad, kg); impulses in N s. q = (x, y, theta), v = (vx, vy, omega).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import casadi as ca
import numpy as np

GRAVITY = 9.81  # m/s^2, the paper's value (Section 4.2 gives 133 N s with it)


@dataclass(frozen=True)
class Ellipse:
    """Ellipse with semi-axes ``a`` >= ``b`` (m), mass ``m`` (kg) and inertia ``J`` (kg m^2)."""

    a: float
    b: float
    m: float
    J: float

    @property
    def j_over_m(self) -> float:
        """Inertia-to-mass ratio J/m (m^2), the identifiable quantity (Section 5.2.2)."""
        return self.J / self.m


@dataclass(frozen=True)
class Ground:
    """The environment line through ``p0`` = (x0, y0) (m) at angle ``alpha`` (rad) to x."""

    p0: tuple[float, float] = (0.0, 0.0)
    alpha: float = 0.0

    @property
    def normal(self) -> np.ndarray:
        """Unit normal n (pointing out of the ground into the free half-plane)."""
        return np.array([-np.sin(self.alpha), np.cos(self.alpha)])

    @property
    def tangent(self) -> np.ndarray:
        """Unit tangent d+ along the ground (d- = -d+)."""
        return np.array([np.cos(self.alpha), np.sin(self.alpha)])


# ---------------------------------------------------------------------------------------------
# Contact geometry, written once (CasADi SX) and evaluated numerically by the simulator.
# ---------------------------------------------------------------------------------------------


def contact_geometry_sx(q, a, b, x0, y0, alpha):
    """Gap, wrench bases and contact point of ellipse ``q`` against the line (Section 4.1).

    Works on CasADi SX/MX symbols or plain floats. Returns ``(g, N, Tp, gq)``:

    * ``g`` (m): normal gap g_n(q) = l(beta*) of eq. (21). Minimizing (21) over the boundary
      in closed form gives the support function of the ellipse along the line normal,
      ``g = n.(G - P0) - sqrt(a^2 sin^2(theta-alpha) + b^2 cos^2(theta-alpha))``; it equals
      l(beta*) with the beta* selection of Section 4.1 (checked in ``gap_beta_star`` and the
      tests) but is smooth and branch-free, which IPOPT needs.
    * ``N`` (3): normal wrench basis (n; k.(GQ x n)).
    * ``Tp`` (3): tangential basis for d+ (d+; k.(GQ x d+)); the d- column is ``-Tp``, so the
      2D friction pyramid T~ = (Tp, -Tp) is exact (Section 3.4).
    * ``gq`` (2): contact point Q relative to the COM G, world frame (m).
    """
    x, y, th = q[0], q[1], q[2]
    sa, cal = ca.sin(alpha), ca.cos(alpha)
    s, c = ca.sin(th - alpha), ca.cos(th - alpha)
    r = ca.sqrt(a**2 * s**2 + b**2 * c**2)
    g = (y - y0) * cal - (x - x0) * sa - r
    # Minimizer in the body frame: the boundary point whose outward normal is -n.
    lx, ly = -(a**2) * s / r, -(b**2) * c / r
    ct, st = ca.cos(th), ca.sin(th)
    gqx, gqy = ct * lx - st * ly, st * lx + ct * ly
    nx, ny = -sa, cal
    tx, ty = cal, sa
    N = ca.vertcat(nx, ny, gqx * ny - gqy * nx)
    Tp = ca.vertcat(tx, ty, gqx * ty - gqy * tx)
    return g, N, Tp, ca.vertcat(gqx, gqy)


def _build_geometry_function() -> ca.Function:
    q = ca.SX.sym("q", 3)
    prm = ca.SX.sym("p", 5)
    g, N, Tp, gq = contact_geometry_sx(q, prm[0], prm[1], prm[2], prm[3], prm[4])
    return ca.Function("contact_geometry", [q, prm], [g, N, Tp, gq])


_GEOMETRY = _build_geometry_function()


@dataclass(frozen=True)
class Contact:
    """Numerical contact geometry at one pose (see ``contact_geometry_sx``)."""

    gap: float
    N: np.ndarray
    Tp: np.ndarray
    gq: np.ndarray


def geometry_params(ellipse: Ellipse, ground: Ground) -> np.ndarray:
    return np.array([ellipse.a, ellipse.b, ground.p0[0], ground.p0[1], ground.alpha])


def contact_geometry(q, ellipse: Ellipse, ground: Ground) -> Contact:
    """Evaluate the shared CasADi geometry at pose ``q`` (float arrays)."""
    g, N, Tp, gq = _GEOMETRY(np.asarray(q, float), geometry_params(ellipse, ground))
    return Contact(float(g), np.array(N).ravel(), np.array(Tp).ravel(), np.array(gq).ravel())


def gap_beta_star(q, ellipse: Ellipse, ground: Ground) -> tuple[float, float]:
    """Gap by the literal beta* selection of Section 4.1, eq. (21): ``(g_n, beta*)``.

    ``tan(beta_{1,2}) = (b/a)^2 / tan(theta - alpha)`` has two roots pi apart; beta* is the
    one with the smaller l(beta). Used to check the closed form of ``contact_geometry_sx``.
    """
    a, b = ellipse.a, ellipse.b
    x, y, th = (float(v) for v in q)
    x0, y0 = ground.p0
    al = ground.alpha
    beta1 = np.arctan2((b / a) ** 2 * np.cos(th - al), np.sin(th - al))
    candidates = (beta1, beta1 + np.pi)

    def l_of(beta):
        rho = a * b / np.sqrt(b**2 * np.cos(beta) ** 2 + a**2 * np.sin(beta) ** 2)
        return (y - y0) * np.cos(al) - (x - x0) * np.sin(al) + rho * np.sin(beta + th - al)

    values = [l_of(beta) for beta in candidates]
    i = int(np.argmin(values))
    return float(values[i]), float(candidates[i])


# ---------------------------------------------------------------------------------------------
# Per-step LCP and the IRC / IGC time steppers.
# ---------------------------------------------------------------------------------------------


def solve_lcp4(A: np.ndarray, b: np.ndarray, tol: float = 1e-10) -> np.ndarray:
    """Exact solution z of ``0 <= z _|_ A z + b >= 0`` for a 4x4 LCP by index-set enumeration.

    Index sets are tried smallest first, so the separating solution z = 0 wins whenever it is
    valid and, among frictional solutions, sticking (fewer active multipliers) before sliding.
    ``tol`` is relative to the scale of ``b`` (round-off of the 4x4 solves).
    """
    n = len(b)
    scale = max(1.0, float(np.max(np.abs(b))))
    for k in range(n + 1):
        for active in itertools.combinations(range(n), k):
            z = np.zeros(n)
            if active:
                idx = list(active)
                sub = A[np.ix_(idx, idx)]
                if abs(np.linalg.det(sub)) < 1e-14 * max(1.0, np.abs(sub).max()) ** k:
                    continue
                z[idx] = np.linalg.solve(sub, -b[idx])
            w = A @ z + b
            if z.min() >= -tol * scale and w.min() >= -tol * scale:
                return np.maximum(z, 0.0)
    raise RuntimeError(f"LCP without solution (A={A.tolist()}, b={b.tolist()})")


@dataclass(frozen=True)
class StepResult:
    """One time step: new state and the impulses (N s) and friction multiplier over it."""

    q: np.ndarray
    v: np.ndarray
    cn: float
    ct_plus: float
    ct_minus: float
    lam: float
    active: bool


def _mass_matrix_inv(ellipse: Ellipse) -> np.ndarray:
    return np.diag([1.0 / ellipse.m, 1.0 / ellipse.m, 1.0 / ellipse.J])


def _frictional_lcp(ellipse, contact, v_free, normal_offset, mu):
    """LCP in z = (c_n, c+, c-, lambda) for one contact (eqs. 16, 18 and a normal row).

    Normal row: ``w_n = N^T v^{k+1} + normal_offset``; friction rows as in (18).
    """
    Minv = _mass_matrix_inv(ellipse)
    G = np.column_stack([contact.N, contact.Tp, -contact.Tp])
    W = G.T @ Minv @ G  # Delassus matrix
    A = np.zeros((4, 4))
    A[:3, :3] = W
    A[1, 3] = A[2, 3] = 1.0
    A[3, :3] = [mu, -1.0, -1.0]
    u_free = G.T @ v_free
    b = np.array([u_free[0] + normal_offset, u_free[1], u_free[2], 0.0])
    z = solve_lcp4(A, b)
    v_next = v_free + Minv @ (G @ z[:3])
    return z, v_next


def _free_velocity(ellipse: Ellipse, v, h) -> np.ndarray:
    # Eq. (16) without contact: gravity is -grad V = (0, -m g, 0); K = 0 for a planar body.
    return np.asarray(v, float) + h * np.array([0.0, -GRAVITY, 0.0])


def irc_step(q, v, h, ellipse: Ellipse, ground: Ground, mu: float, eps: float) -> StepResult:
    """One IRC step (eqs. 16-19) with the big-M toggles of (6) evaluated at (q^k, v^k)."""
    q, v = np.asarray(q, float), np.asarray(v, float)
    contact = contact_geometry(q, ellipse, ground)
    v_free = _free_velocity(ellipse, v, h)
    gdot = float(contact.N @ v)
    active = contact.gap <= 0.0 and gdot <= 0.0  # z_c = 1 in eq. (6)
    if active:
        z, v_next = _frictional_lcp(ellipse, contact, v_free, eps * gdot, mu)
    else:
        z, v_next = np.zeros(4), v_free
    return StepResult(q + h * v_next, v_next, *z, active)


def igc_step(q, v, h, ellipse: Ellipse, ground: Ground, mu: float) -> StepResult:
    """One IGC step: ``0 <= c_n _|_ g_n(q^k) + h N^T v^{k+1} >= 0`` with friction (18)."""
    q, v = np.asarray(q, float), np.asarray(v, float)
    contact = contact_geometry(q, ellipse, ground)
    v_free = _free_velocity(ellipse, v, h)
    z, v_next = _frictional_lcp(ellipse, contact, v_free, contact.gap / h, mu)
    return StepResult(q + h * v_next, v_next, *z, bool(z[0] > 0))


def irc_step_ipopt(q, v, h, ellipse: Ellipse, ground: Ground, mu: float, eps: float):
    """One IRC step as the NLP (20), solved by IPOPT through CasADi (reference for tests)."""
    q, v = np.asarray(q, float), np.asarray(v, float)
    contact = contact_geometry(q, ellipse, ground)
    gdot = float(contact.N @ v)
    zc = 1.0 if (contact.gap <= 0.0 and gdot <= 0.0) else 0.0
    big_h = 1e3  # big-M H of (5): far above any impulse or velocity in this problem
    x = ca.SX.sym("x", 3 + 3 + 4)  # q+, v+, cn, c+, c-, lambda
    qn, vn, cn, cp, cm, lam = x[0:3], x[3:6], x[6], x[7], x[8], x[9]
    M = np.diag([ellipse.m, ellipse.m, ellipse.J])
    N, Tp = contact.N, contact.Tp
    weight = h * np.array([0, ellipse.m * GRAVITY, 0])
    dyn = ca.mtimes(M, vn - v) - (N * cn + Tp * (cp - cm)) + weight
    kin = qn - q - h * vn
    ut = ca.dot(Tp, vn)
    slack_p, slack_m, cone = ut + lam, -ut + lam, mu * cn - cp - cm
    sep = ca.dot(N, vn + eps * v)
    obj = (cp * slack_p + cm * slack_m) ** 2 + (lam * cone) ** 2
    g = ca.vertcat(dyn, kin, slack_p, slack_m, cone, sep)
    zn = 1.0 - zc
    lbg = [0] * 6 + [0, 0, 0, -big_h * zn]
    ubg = [0] * 6 + [ca.inf, ca.inf, ca.inf, big_h * zn]
    lbx = [-ca.inf] * 6 + [0, 0, 0, 0]
    ubx = [ca.inf] * 6 + [big_h * zc, ca.inf, ca.inf, ca.inf]
    opts = {"print_time": False, "ipopt": {"print_level": 0, "sb": "yes", "tol": 1e-12}}
    solver = ca.nlpsol("irc20", "ipopt", {"x": x, "f": obj, "g": g}, opts)
    x0 = np.concatenate([q + h * v, v, np.zeros(4)])
    sol = solver(x0=x0, lbx=lbx, ubx=ubx, lbg=lbg, ubg=ubg)
    z = np.array(sol["x"]).ravel()
    return StepResult(z[0:3], z[3:6], *z[6:10], bool(zc))


@dataclass(frozen=True)
class Trajectory:
    """A simulated trajectory on the fine grid ``t[K+1]``; impulses are over ``(t_k, t_k+1]``.

    ``q``, ``v``: [K+1, 3]; ``cn``, ``ct`` (net tangential c+ - c-, along d+), ``lam``: [K]
    in N s (and m/s for lambda).
    """

    t: np.ndarray
    q: np.ndarray
    v: np.ndarray
    cn: np.ndarray
    ct: np.ndarray
    lam: np.ndarray
    meta: dict = field(default_factory=dict)


def simulate(
    q0,
    v0,
    h: float,
    steps: int,
    ellipse: Ellipse,
    ground: Ground,
    mu: float,
    eps: float = 0.0,
    scheme: str = "irc",
) -> Trajectory:
    """Integrate ``steps`` steps of IRC (default) or IGC from (q0, v0) with step ``h`` (s)."""
    if scheme not in ("irc", "igc"):
        raise ValueError(f"scheme must be 'irc' or 'igc', got {scheme!r}")
    q = np.zeros((steps + 1, 3))
    v = np.zeros((steps + 1, 3))
    cn, ct, lam = np.zeros(steps), np.zeros(steps), np.zeros(steps)
    q[0], v[0] = q0, v0
    for k in range(steps):
        if scheme == "irc":
            r = irc_step(q[k], v[k], h, ellipse, ground, mu, eps)
        else:
            r = igc_step(q[k], v[k], h, ellipse, ground, mu)
        q[k + 1], v[k + 1] = r.q, r.v
        cn[k], ct[k], lam[k] = r.cn, r.ct_plus - r.ct_minus, r.lam
    t = h * np.arange(steps + 1)
    return Trajectory(t, q, v, cn, ct, lam, {"scheme": scheme, "h": h, "mu": mu, "eps": eps})


def energy(q, v, ellipse: Ellipse) -> np.ndarray:
    """Total mechanical energy (J): kinetic + gravitational, for rows of q, v [K, 3]."""
    q, v = np.atleast_2d(q), np.atleast_2d(v)
    kinetic = 0.5 * ellipse.m * (v[:, 0] ** 2 + v[:, 1] ** 2) + 0.5 * ellipse.J * v[:, 2] ** 2
    return kinetic + ellipse.m * GRAVITY * q[:, 1]
