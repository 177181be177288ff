"""Physical consistency of identified inertias: every body's pseudo-inertia matrix must be
positive semidefinite (Wensing, Kim & Slotine, "Linear matrix inequalities for physically
consistent inertial parameter identification", 2017), imposed with cvxpy.

A body's mass distribution ρ has mass m, first moment h = m c and second moments
Σ = ∫ r rᵀ dρ (all about the body frame's origin). Its pseudo-inertia

    P = ∫ [r; 1][r; 1]ᵀ dρ = [[Σ, h], [hᵀ, m]],   Σ = ½ tr(I_o) 1 − I_o,

with I_o the rotational inertia about the origin, is positive semidefinite for every real body,
and every P ⪰ 0 with m > 0 belongs to one. With the origin at the centre of mass and principal
axes, P ⪰ 0 is the triangle inequalities I_x + I_y ≥ I_z (and permutations): a box on each
moment alone admits bodies that cannot exist (an arm with J_Axx = J_Ayy = 1e-5 and
J_Azz = 3e-3 kg m²).

The rigs' inertial parameters enter P affinely (moments, with mass and centre of mass fixed),
so the constraint is a linear matrix inequality in θ: P_b(θ) = P0_b + Σ_i θ_i P_bi ⪰ 0. LM
imposes it on each parameter step (``constrained_step``) next to the box; the covariance is
conditional on the faces the solution lies on (``active_rows``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

# A body whose smallest normalized eigenvalue is below this lies on the boundary of the LMI (a
# face of the consistent set): cvxpy's interior-point solution reaches it to ~1e-9.
ACTIVE_TOL = 1e-7


@dataclass(frozen=True)
class BodyInertia:
    """One rigid body's inertial parameters: ``mass`` (kg), centre of mass ``com`` (m) and
    rotational inertia ``inertia`` (3×3, kg m², about the centre of mass), all in the body
    frame, as plain numbers."""

    label: str
    mass: float
    com: Sequence[float]
    inertia: np.ndarray


def pseudo_inertia(body: BodyInertia) -> np.ndarray:
    """The 4×4 pseudo-inertia [[Σ, m c], [m cᵀ, m]] (Wensing et al. 2017, eq. 8) about the
    body frame's origin: kg m² in the Σ block, kg m and kg in the border."""
    m = float(body.mass)
    c = np.asarray(body.com, float)
    inertia_o = np.asarray(body.inertia, float) + m * (c @ c * np.eye(3) - np.outer(c, c))
    sigma = 0.5 * np.trace(inertia_o) * np.eye(3) - inertia_o
    return np.block([[sigma, m * c[:, None]], [m * c[None, :], np.array([[m]])]])


@dataclass(frozen=True)
class InertiaLMI:
    """P_b(θ) = P0[b] + Σ_i θ_i Pi[b, i] ⪰ 0 for every body b, in a problem's θ coordinates.

    Each body's matrices are congruence-scaled to its mass and radius of gyration (which
    leaves P ⪰ 0 unchanged) so that eigenvalues of different bodies compare on one scale.
    """

    labels: tuple[str, ...]
    names: tuple[str, ...]  # parameter names, for messages
    P0: np.ndarray  # [nb, 4, 4]
    Pi: np.ndarray  # [nb, p, 4, 4]

    def at(self, theta: np.ndarray) -> np.ndarray:
        """P_b(θ) for every body, [nb, 4, 4]."""
        return self.P0 + np.einsum("i,bijk->bjk", np.asarray(theta, float), self.Pi)

    def min_eigenvalues(self, theta: np.ndarray) -> np.ndarray:
        """Smallest eigenvalue of every body's normalized P_b(θ) (negative: inconsistent)."""
        return np.linalg.eigvalsh(self.at(theta))[:, 0]

    def feasible(self, theta: np.ndarray, tol: float = ACTIVE_TOL) -> bool:
        return bool(np.all(self.min_eigenvalues(theta) >= -tol))

    def in_coordinates(self, scale: np.ndarray) -> InertiaLMI:
        """The same LMI in coordinates φ = θ / scale."""
        return InertiaLMI(
            self.labels, self.names, self.P0, self.Pi * np.asarray(scale)[:, None, None]
        )

    def on_face(self, theta: np.ndarray, tol: float = ACTIVE_TOL) -> tuple[str, ...]:
        """Labels of the bodies on the boundary of P ⪰ 0 at θ."""
        w = self.min_eigenvalues(theta)
        return tuple(lab for lab, wb in zip(self.labels, w, strict=True) if wb <= tol)

    def face_vectors(self, theta: np.ndarray, tol: float = ACTIVE_TOL):
        """(b, v_a, v_c) for every pair of eigenvectors of body b's (near-)zero eigenvalues at
        θ: on that face of the LMI, v_aᵀ P_b v_c = 0."""
        for b, P in enumerate(self.at(theta)):
            w, V = np.linalg.eigh(P)
            null = V[:, w <= tol]
            for a in range(null.shape[1]):
                for c in range(a, null.shape[1]):
                    yield b, null[:, a], null[:, c]

    def face_row(self, b: int, va: np.ndarray, vc: np.ndarray) -> np.ndarray:
        """∂(v_aᵀ P_b(θ) v_c)/∂θ, [p]: the row of the face's linear equation."""
        return np.einsum("j,ijk,k->i", va, self.Pi[b], vc)

    def active_rows(self, theta: np.ndarray, tol: float = ACTIVE_TOL) -> np.ndarray:
        """Linear equations A δθ = 0 that keep θ on the faces of the LMI it lies on, [m, p]:
        to first order a move stays on a face iff every v_aᵀ P_b(δθ) v_c stays 0."""
        rows = [self.face_row(*f) for f in self.face_vectors(theta, tol)]
        return np.array(rows).reshape(len(rows), self.Pi.shape[1])

    def describe_violation(self, theta: np.ndarray, scale: np.ndarray) -> str:
        """Which bodies are inconsistent at θ, with the parameter values, for messages."""
        bad = [
            lab
            for lab, w in zip(self.labels, self.min_eigenvalues(theta), strict=True)
            if w < -ACTIVE_TOL
        ]
        shown = ", ".join(
            f"{k}={v:.4g}" for k, v in zip(self.names, np.asarray(theta) * scale, strict=True)
        )
        return f"{' and '.join(bad)} not a physical body (pseudo-inertia not ⪰ 0) at {shown}"


def inertia_lmi(
    bodies: Callable[[dict], list[BodyInertia]],
    values: dict,
    names: Sequence[str],
    scale: np.ndarray,
    theta_ref: np.ndarray,
) -> InertiaLMI | None:
    """The LMI of ``bodies(values)`` in θ (χ = scale · θ for the parameters ``names``); None
    when no parameter changes any body's pseudo-inertia.

    The affine map is read off at θ = 0 and the unit vectors and checked at ``theta_ref``
    and at a generic point (ValueError if a body's pseudo-inertia is not affine in the
    parameters, e.g. a free centre of mass). Each body is normalized at ``theta_ref``."""
    names = tuple(names)
    scale = np.asarray(scale, float)

    def pseudo(theta) -> list[np.ndarray]:
        v = dict(values, **{k: float(s * t) for k, s, t in zip(names, scale, theta, strict=True)})
        return [pseudo_inertia(b) for b in bodies(v)]

    p = len(names)
    P0 = np.array(pseudo(np.zeros(p)))
    Pi = np.array([pseudo(e) for e in np.eye(p)]).reshape(p, *P0.shape) - P0
    Pi = np.moveaxis(Pi, 0, 1)  # [nb, p, 4, 4]
    if not np.any(Pi):
        return None
    ref = np.array(pseudo(theta_ref))
    for point in (theta_ref, 0.37 * theta_ref + 0.61):  # the reference and a generic point
        got = np.array(pseudo(point))
        affine = P0 + np.einsum("i,bijk->bjk", point, Pi)
        if not np.allclose(got, affine, rtol=1e-9, atol=1e-12 * np.max(np.abs(got))):
            raise ValueError(f"pseudo-inertia is not affine in the parameters {names}")
    # Congruence with diag(1/ℓ, 1/ℓ, 1/ℓ, 1), ℓ the radius of gyration, then divide by m.
    m = ref[:, 3, 3]
    ell = np.sqrt(np.maximum(np.trace(ref[:, :3, :3], axis1=1, axis2=2), 1e-300) / m)
    D = np.stack([np.diag([1 / e, 1 / e, 1 / e, 1.0]) for e in ell]) / np.sqrt(m)[:, None, None]
    P0 = D @ P0 @ D
    Pi = np.einsum("bjk,bikl,blm->bijm", D, Pi, D)
    labels = tuple(b.label for b in bodies(dict(values)))
    return InertiaLMI(labels, names, P0, Pi)


@functools.lru_cache(maxsize=8)  # one per LM run's scaling; a pipeline worker runs many
def _step_problem(p: int, nb: int, Pi_key: bytes):
    """The cvxpy problem of ``constrained_step`` for one LMI (DPP: compiled once, ~2 ms a
    solve afterwards)."""
    import cvxpy as cp

    Pi = np.frombuffer(Pi_key).reshape(nb, p, 4, 4)
    x = cp.Variable(p)
    L = cp.Parameter((p, p))
    s = cp.Parameter(p)
    lo = cp.Parameter(p)
    hi = cp.Parameter(p)
    base = [cp.Parameter((4, 4), symmetric=True) for _ in range(nb)]
    lmi = [
        base[b] + sum(x[i] * Pi[b, i] for i in range(p) if np.any(Pi[b, i])) >> 0 for b in range(nb)
    ]
    objective = cp.Minimize(0.5 * cp.sum_squares(L.T @ x) + s @ x)
    return cp.Problem(objective, [x >= lo, x <= hi, *lmi]), (x, L, s, lo, hi, base)


def constrained_step(
    S: np.ndarray, s: np.ndarray, lo: np.ndarray, hi: np.ndarray, lmi: InertiaLMI, theta: np.ndarray
) -> np.ndarray:
    """Minimizer of ½xᵀSx + sᵀx subject to lo ≤ x ≤ hi and P_b(θ + x) ⪰ 0 for every body
    (S positive definite), by cvxpy's conic solver (Clarabel)."""
    import cvxpy as cp

    p, nb = len(s), lmi.P0.shape[0]
    problem, (x, L, s_, lo_, hi_, base) = _step_problem(
        p, nb, np.ascontiguousarray(lmi.Pi).tobytes()
    )
    L.value = np.linalg.cholesky(S)
    s_.value, lo_.value, hi_.value = s, lo, hi
    for b, P in enumerate(lmi.at(theta)):
        base[b].value = 0.5 * (P + P.T)
    # Tight tolerances: the step must respect the faces to near round-off (then polished).
    problem.solve(solver=cp.CLARABEL, tol_gap_abs=1e-12, tol_gap_rel=1e-12, tol_feas=1e-12)
    if x.value is None or problem.status not in ("optimal", "optimal_inaccurate"):
        raise RuntimeError(f"physical-consistency step: cvxpy status {problem.status}")
    return _polish(S, s, lo, hi, lmi, theta, np.clip(np.asarray(x.value), lo, hi))


def _polish(S, s, lo, hi, lmi: InertiaLMI, theta, x, tol: float = 1e-6) -> np.ndarray:
    """The interior-point solution ``x`` moved exactly onto the constraints it (nearly)
    touches: the equality-constrained QP on that face, solved by its KKT system, kept if it
    is feasible and no worse.

    Why: the conic solver stops ~1e-7 inside the faces it converges to. LM then sees steps
    that never quite reach the face, and a parameter pressed onto a bound is not "at_bound".
    """
    p = len(s)
    # Within tol of a bound, relative to the bound's own magnitude (θ + lo is the bound).
    at_lo = x - lo <= tol * np.maximum(np.abs(theta + lo), np.abs(x))
    at_hi = (hi - x <= tol * np.maximum(np.abs(theta + hi), np.abs(x))) & ~at_lo
    fixed = at_lo | at_hi
    rows = [np.eye(p)[fixed]]
    rhs = [np.where(at_lo, lo, hi)[fixed]]
    at_theta = lmi.at(theta)
    for b, va, vc in lmi.face_vectors(theta + x, tol):
        # v_aᵀ P_b(θ + y) v_c = 0, and P(θ + y) = P(θ) + Σ y_i P_i
        rows.append(lmi.face_row(b, va, vc)[None])
        rhs.append(np.array([-(va @ at_theta[b] @ vc)]))
    E, e = np.concatenate(rows), np.concatenate(rhs)
    if len(E) == 0:
        return x
    kkt = np.block([[S, E.T], [E, np.zeros((len(E), len(E)))]])
    try:
        sol = np.linalg.lstsq(kkt, np.concatenate([-s, e]), rcond=None)[0][:p]
    except np.linalg.LinAlgError:
        return x
    inside = np.all(sol >= lo - 1e-12 * (1 + np.abs(lo))) and np.all(
        sol <= hi + 1e-12 * (1 + np.abs(hi))
    )
    # x sits ~1e-7 off the face, so it may be lower by that much: compare relatively.
    q_sol, q_x = 0.5 * sol @ S @ sol + s @ sol, 0.5 * x @ S @ x + s @ x
    better = q_sol <= q_x + 1e-6 * max(abs(q_x), 1e-300)
    if inside and better and lmi.feasible(theta + sol, 1e-12):
        return np.clip(sol, lo, hi)
    return x


def nearest_consistent(
    theta: np.ndarray, lo: np.ndarray, hi: np.ndarray, lmi: InertiaLMI
) -> np.ndarray:
    """The point of the box nearest to θ (Euclidean, in θ's coordinates) whose bodies are
    physically consistent; raises ValueError if there is none (the fixed values leave no
    consistent choice of the free ones)."""
    p = len(theta)
    try:
        point = theta + constrained_step(np.eye(p), np.zeros(p), lo - theta, hi - theta, lmi, theta)
    except RuntimeError:
        point = None
    if point is None or not lmi.feasible(point, 1e-6):
        raise ValueError("no parameter values in the box make every body physically consistent")
    return point
