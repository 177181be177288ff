"""The compiled IRC stepper (``dynamics.planar_contact_scan``) against the reference Python
loop of ``dynamics.planar_contact``, and the sinking it exists to remove.

One compilation (the sub-step count is traced), a few seconds; the reference loop runs
600 steps (~1 s)."""

import numpy as np
import pytest

import physid.dynamics  # noqa: F401 (float64)
from physid.dynamics.planar_contact import (
    GRAVITY,
    Ellipse,
    Ground,
    contact_geometry,
    simulate,
    solve_lcp4,
)
from physid.dynamics.planar_contact_scan import rollout
from physid.dynamics.planar_contact_scan import solve_lcp4 as solve_lcp4_scan

# The sample drop (rigs.pipeline.sample.DROP): ellipse 50 x 25 mm, J/m 756 mm^2, mu 0.3,
# restitution 0.2, released at 3 rad/s above the sloped bar; first impact at 0.123 s, a
# second at 0.188 s, then contact that rolls and slides.
ELLIPSE = Ellipse(0.05, 0.025, 0.064, 0.064 * 756e-6)
GROUND = Ground((0.0634775, 0.0915612), -0.2510199)
MU, EPS, H, STEPS = 0.3, 0.2, 1.0 / 2400, 600
Q0, V0 = np.array([0.12, 0.19, 0.5]), np.array([0.3, 0.0, 3.0])
# Far past the bar's end (the bar ends 0.4 m along it), falling: no contact may act.
Q_OFF, V_OFF = np.array([0.6, 0.05, 0.2]), np.array([0.1, -0.5, 1.0])
BAR = np.array([[*GROUND.p0, GROUND.alpha, 0.4]])


def run(substeps):
    q, v = rollout(
        np.stack([Q0, Q_OFF]), np.stack([V0, V_OFF]), H, ELLIPSE.j_over_m, MU, EPS,
        ELLIPSE.a, ELLIPSE.b, BAR, steps=STEPS, substeps=substeps, segmented=True,
    )  # fmt: skip
    return np.asarray(q), np.asarray(v)


@pytest.fixture(scope="module")
def coarse():
    return run(1)


@pytest.fixture(scope="module")
def reference():
    return simulate(Q0, V0, H, STEPS, ELLIPSE, GROUND, MU, EPS)


def test_same_steps_as_the_reference_loop(coarse, reference):
    """Step for step the reference's IRC through both impacts and the contact after them.
    Tolerance 1e-12 m, rad: the same arithmetic up to the 4x4 solves (cofactors here, LU
    there), whose round-off (1e-16) the two impacts amplify by a few hundred at most; a
    wrong index set or toggle would differ by mm."""
    q, v = coarse
    assert np.any(reference.cn > 0), "the window must contain an impact"
    assert np.max(np.abs(q[0] - reference.q)) < 1e-12
    assert np.max(np.abs(v[0] - reference.v)) < 1e-9  # velocities: 1/h times the positions


def test_no_contact_past_the_end_of_a_bar(coarse):
    """Over no surface the ellipse flies: semi-implicit Euler's exact parabola, y_k = y0 +
    (v0 - g h / 2) t_k - g t_k^2 / 2 (to round-off), though it passes the bar's infinite
    line (the line is 0.2 m below its start; it falls 0.43 m)."""
    q = coarse[0][1]
    t = H * np.arange(STEPS + 1)
    y = Q_OFF[1] + (V_OFF[1] - GRAVITY * H / 2) * t - GRAVITY * t**2 / 2
    np.testing.assert_allclose(q[:, 1], y, atol=1e-12)
    np.testing.assert_allclose(q[:, 0], Q_OFF[0] + V_OFF[0] * t, atol=1e-12)
    line = [contact_geometry(x, ELLIPSE, GROUND).gap for x in q]
    assert min(line) < -0.1  # it did cross the line where the bar would be


def test_sinking_shrinks_with_the_step(coarse):
    """IRC acts on velocities only, so the ellipse sinks into the bar by O(h) in contact:
    ten sub-steps must cut the deepest penetration about tenfold (first order; 5-20 allows
    for where in a step the contact toggles). Measured over the whole sample drop: 0.42 mm,
    33 um, 2.2 um at 1, 10, 100 sub-steps of 1/2400 s."""
    fine = run(10)[0][0]
    deep = [min(contact_geometry(x, ELLIPSE, GROUND).gap for x in q) for q in (coarse[0][0], fine)]
    assert deep[0] < -1e-4  # the coarse step sinks by more than 0.1 mm
    assert 5 < deep[0] / deep[1] < 20


@pytest.mark.slow  # its own compilation (~10 s); the roll-out above covers the LCP's cases
def test_lcp_matches_the_reference_enumeration():
    """Random frictional-contact LCPs (Delassus matrix of a random pose, random free
    velocities): the same z as the reference's index-set enumeration, to round-off."""
    import jax

    rng = np.random.default_rng(3)
    solve = jax.jit(jax.vmap(solve_lcp4_scan))
    A, b = [], []
    for _ in range(64):
        c = contact_geometry(rng.normal([0, 0.05, 0], [0.1, 0.02, 3]), ELLIPSE, GROUND)
        G = np.column_stack([c.N, c.Tp, -c.Tp])
        W = G.T @ np.diag([1, 1, 1 / ELLIPSE.j_over_m]) @ G
        a = np.zeros((4, 4))
        a[:3, :3], a[1, 3], a[2, 3], a[3, :3] = W, 1, 1, [MU, -1, -1]
        u = G.T @ rng.normal(size=3)
        A.append(a)
        b.append([u[0], u[1], u[2], 0.0])
    z = np.asarray(solve(np.array(A), np.array(b)))
    want = np.array([solve_lcp4(a, np.array(bb)) for a, bb in zip(A, b, strict=True)])
    np.testing.assert_allclose(z, want, atol=1e-10)
    assert np.count_nonzero(want[:, 0]) > 10  # impulses, not only separation
