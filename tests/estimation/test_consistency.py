"""Physical consistency of inertias (estimation.consistency): pseudo-inertia matrices of known
bodies, the LMI's equivalence with the triangle inequalities, and the LM parameter step under
it against an independent formulation."""

from __future__ import annotations

import numpy as np
import pytest

from physid.estimation.consistency import (
    BodyInertia,
    constrained_step,
    inertia_lmi,
    nearest_consistent,
    pseudo_inertia,
)


def test_pseudo_inertia_of_a_solid_box_off_its_centre():
    # Box of sides a, b, c: ∫x² dm = m a²/12 etc.; about an origin at −c0 the second moments
    # gain m c0 c0ᵀ and the first moment is m c0 (Wensing et al. 2017, eq. 8). Exact.
    m, (a, b, c) = 2.0, (0.3, 0.2, 0.1)
    com = np.array([0.05, -0.02, 0.01])
    inertia = m / 12 * np.diag([b * b + c * c, a * a + c * c, a * a + b * b])
    P = pseudo_inertia(BodyInertia("box", m, com, inertia))
    sigma = m / 12 * np.diag([a * a, b * b, c * c]) + m * np.outer(com, com)
    assert P[:3, :3] == pytest.approx(sigma, abs=1e-15)
    assert P[:3, 3] == pytest.approx(m * com) and P[3, 3] == m
    assert np.linalg.eigvalsh(P)[0] > 0


def test_point_mass_lies_on_the_boundary():
    # ∫[r;1][r;1]ᵀ of one point is rank one: the boundary of P ⪰ 0 (eigenvalues 0, 0, 0, +).
    r = np.array([0.1, 0.2, -0.3])
    P = pseudo_inertia(BodyInertia("point", 0.5, r, np.zeros((3, 3))))
    assert P == pytest.approx(0.5 * np.outer([*r, 1], [*r, 1]), abs=1e-15)
    assert np.linalg.eigvalsh(P)[:3] == pytest.approx([0, 0, 0], abs=1e-15)


def _two_bodies(v):
    return [
        BodyInertia("A", 0.2, (0, 0, 0), np.diag([v["Ax"], v["Ay"], v["Az"]])),
        BodyInertia("B", 0.4, (0, 0, 0), np.diag([v["Bx"], v["By"], v["Bz"]])),
    ]


VALUES = {"Ax": 1e-3, "Ay": 3e-3, "Az": 3e-3, "Bx": 1e-4, "By": 4e-3, "Bz": 4e-3}
NAMES = ("Ax", "Ay", "Az", "By")
SCALE = np.array([1e-3, 3e-3, 3e-3, 4e-3])


def _triangle(values: dict, body: str) -> bool:
    x, y, z = (values[body + k] for k in "xyz")
    return x + y >= z and y + z >= x and x + z >= y


def test_lmi_is_the_triangle_inequalities_for_principal_moments():
    lmi = inertia_lmi(_two_bodies, VALUES, NAMES, SCALE, np.ones(4))
    rng = np.random.default_rng(1)
    for theta in rng.uniform(0.0, 2.0, size=(400, 4)):
        v = dict(VALUES, **dict(zip(NAMES, theta * SCALE, strict=True)))
        ok = lmi.min_eigenvalues(theta) >= 0
        assert ok.tolist() == [_triangle(v, "A"), _triangle(v, "B")]


def test_lmi_refuses_a_pseudo_inertia_that_is_not_affine():
    # A free centre of mass enters Σ as m c cᵀ: quadratic, not an LMI in the parameters.
    def body(v):
        return [BodyInertia("A", 1.0, (v["c"], 0, 0), np.eye(3) * 1e-2)]

    with pytest.raises(ValueError, match="not affine"):
        inertia_lmi(body, {"c": 0.1}, ("c",), np.ones(1), np.ones(1))


def test_no_lmi_without_inertial_parameters():
    assert inertia_lmi(_two_bodies, dict(VALUES, b=1.0), ("b",), np.ones(1), np.ones(1)) is None


def _triangle_qp(S, s, lo, hi, theta):
    """The same step with the triangle inequalities written out as linear constraints."""
    import cvxpy as cp

    x = cp.Variable(4)
    chi = cp.multiply(theta + x, SCALE)
    ax, ay, az, by = chi[0], chi[1], chi[2], chi[3]
    bx, bz = VALUES["Bx"], VALUES["Bz"]
    cons = [x >= lo, x <= hi, ax + ay >= az, ay + az >= ax, ax + az >= ay]
    cons += [bx + by >= bz, by + bz >= bx, bx + bz >= by]
    cp.Problem(cp.Minimize(0.5 * cp.quad_form(x, S) + s @ x), cons).solve(solver=cp.CLARABEL)
    return x.value


@pytest.mark.parametrize("seed", range(6))
def test_constrained_step_matches_the_linear_inequality_formulation(seed):
    rng = np.random.default_rng(seed)
    lmi = inertia_lmi(_two_bodies, VALUES, NAMES, SCALE, np.ones(4))
    G = rng.normal(size=(4, 4))
    S = G @ G.T + 0.1 * np.eye(4)
    s = rng.normal(size=4) * 3
    theta = np.ones(4)
    lo, hi = 0.01 - theta, 3.0 - theta
    x = constrained_step(S, s, lo, hi, lmi, theta)
    ref = _triangle_qp(S, s, lo, hi, theta)
    # Both are conic interior-point solutions of the same QP; ours is then polished onto the
    # active face, so they agree to the reference's own accuracy (~1e-7).
    assert x == pytest.approx(ref, abs=2e-6)
    assert lmi.feasible(theta + x, 1e-12)
    assert np.all(x >= lo) and np.all(x <= hi)


def test_step_pressed_onto_a_face_ends_exactly_on_it():
    # Gradient pulling Ay down and Az up: the minimizer lies on Ax + Ay = Az of body A,
    # which the polish puts there to round-off (LM relies on this to report faces).
    lmi = inertia_lmi(_two_bodies, VALUES, NAMES, SCALE, np.ones(4))
    theta = np.ones(4)
    x = constrained_step(
        np.eye(4), np.array([0.0, 5.0, -5.0, 0.0]), -theta + 1e-3, 5 - theta, lmi, theta
    )
    assert lmi.on_face(theta + x) == ("A",)
    assert abs(lmi.min_eigenvalues(theta + x)[0]) < 1e-13
    rows = lmi.active_rows(theta + x)
    assert rows.shape == (1, 4)
    chi = (theta + x) * SCALE
    assert chi[0] + chi[1] == pytest.approx(chi[2], rel=1e-12)


def test_nearest_consistent_point_and_an_impossible_box():
    lmi = inertia_lmi(_two_bodies, VALUES, NAMES, SCALE, np.ones(4))
    bad = np.array([0.01, 0.01, 1.0, 1.0])  # Ax, Ay ≪ Az: no such arm
    lo, hi = np.full(4, 1e-3), np.full(4, 10.0)
    good = nearest_consistent(bad, lo, hi, lmi)
    assert lmi.feasible(good, 1e-12) and not lmi.feasible(bad)
    assert lmi.on_face(good) == ("A",)  # the projection lands on the face it crossed
    # By must stay within Bx of Bz = 4e-3 (triangle), but the box allows only ≤ 2e-3.
    with pytest.raises(ValueError, match="physically consistent"):
        nearest_consistent(np.ones(4), lo, np.array([10, 10, 10, 0.5]), lmi)
