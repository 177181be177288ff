"""Lemke's algorithm and the LCP JVP of Appendix D.1."""

import jax
import numpy as np

from physid.dynamics.lcp import solve_lcp

solve = jax.jit(solve_lcp)


def random_p_matrix(rng, n):
    """Positive definite symmetric part ⇒ P-matrix: the LCP has a unique solution."""
    B = rng.normal(size=(n, n))
    S = rng.normal(size=(n, n))
    return B @ B.T + 0.1 * np.eye(n) + (S - S.T)


def test_lemke_solves_random_p_matrix_lcps_to_complementarity():
    rng = np.random.default_rng(0)
    worst = 0.0
    for _ in range(200):
        n = int(rng.choice([2, 7, 13]))  # few shapes: each one is a separate compilation
        H, q = random_p_matrix(rng, n), 3 * rng.normal(size=n)
        z = np.asarray(solve(H, q))
        w = H @ z + q
        worst = max(worst, -w.min(), -z.min(), abs(w @ z) / (1 + np.abs(q).max()))
    # The bar: complementarity 1e-10 (pivoting in float64 loses a few digits).
    assert worst < 1e-10


def test_lcp_jvp_matches_central_differences():
    rng = np.random.default_rng(3)
    jvp = jax.jit(lambda H, q, dH, dq: jax.jvp(solve_lcp, (H, q), (dH, dq)))
    for _ in range(10):
        n = 6
        H, q = random_p_matrix(rng, n), rng.normal(size=n)
        dH, dq = rng.normal(size=(n, n)), rng.normal(size=n)
        _, dz = jvp(H, q, dH, dq)
        step = 1e-6
        fd = (solve(H + step * dH, q + step * dq) - solve(H - step * dH, q - step * dq)) / (
            2 * step
        )
        # The solution is piecewise linear-rational in (H, q); away from active-set changes
        # central differences are exact to rounding (~1e-9 with this step).
        np.testing.assert_allclose(dz, fd, atol=1e-7)


def test_nonnegative_q_gives_zero():
    H = np.eye(3)
    assert np.all(np.asarray(solve(H, np.array([1.0, 0.0, 2.0]))) == 0.0)
