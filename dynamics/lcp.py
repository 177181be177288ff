"""Linear complementarity: Lemke's algorithm (jit-able) with the custom JVP of Appendix D.1.

Solve ``w = H z + q, w ≥ 0, z ≥ 0, wᵀz = 0`` for z.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax


def lemke(H: jnp.ndarray, q: jnp.ndarray, max_pivots: int | None = None) -> jnp.ndarray:
    """Lemke's complementary pivoting with covering vector 1 (Cottle, Pang & Stone, 4.4).

    Returns z; for matrices where Lemke terminates on a ray (no solution found) the last
    basic solution is returned — callers check ``w = Hz + q`` when that matters.
    """
    n = q.shape[0]
    max_pivots = max_pivots or 4 * n + 10
    # Tableau columns: [w (n) | z (n) | z0 | rhs]; rows: w - H z - 1 z0 = q.
    tableau = jnp.concatenate([jnp.eye(n), -H, -jnp.ones((n, 1)), q[:, None]], axis=1)
    basis = jnp.arange(n)  # indices into the 2n+1 variables; w_i is i, z_i is n+i, z0 is 2n

    def pivot(tab, basis, row, col):
        tab = tab.at[row].divide(tab[row, col])
        factors = tab[:, col].at[row].set(0.0)
        tab = tab - factors[:, None] * tab[row][None, :]
        return tab, basis.at[row].set(col)

    # First pivot: z0 enters, the row with the most negative q leaves.
    row0 = jnp.argmin(q)
    start_needed = q[row0] < 0.0
    tab1, basis1 = pivot(tableau, basis, row0, 2 * n)
    entering0 = row0 + n  # complement of the leaving w_row0

    def cond(state):
        _, basis, entering, it, done = state
        return (~done) & (it < max_pivots)

    def body(state):
        tab, basis, entering, it, _ = state
        col = tab[:, entering]
        rhs = tab[:, -1]
        ratios = jnp.where(col > 1e-12, rhs / jnp.where(col > 1e-12, col, 1.0), jnp.inf)
        # Ties: prefer z0 leaving (terminates), then the smallest ratio's first index.
        best = jnp.min(ratios)
        z0_row = jnp.argmax(basis == 2 * n)
        z0_ties = (ratios[z0_row] <= best * (1.0 + 1e-12) + 1e-15) & jnp.isfinite(best)
        row = jnp.where(z0_ties, z0_row, jnp.argmin(ratios))
        ray = ~jnp.isfinite(best)
        leaving = basis[row]
        new_tab, new_basis = pivot(tab, basis, row, entering)
        tab = jnp.where(ray, tab, new_tab)
        basis = jnp.where(ray, basis, new_basis)
        done = ray | (leaving == 2 * n)
        next_entering = jnp.where(leaving < n, leaving + n, leaving - n)
        return tab, basis, next_entering, it + 1, done

    state = (tab1, basis1, entering0, jnp.array(0), jnp.array(False))
    tab, basis, *_ = lax.while_loop(cond, body, state)
    values = jnp.zeros(2 * n + 1).at[basis].set(tab[:, -1])
    z = values[n : 2 * n]
    return jnp.where(start_needed, jnp.maximum(z, 0.0), jnp.zeros(n))


@jax.custom_jvp
def solve_lcp(H: jnp.ndarray, q: jnp.ndarray) -> jnp.ndarray:
    """z = LCP(H, q) by Lemke, differentiable through the active set (Appendix D.1)."""
    return lemke(H, q)


@solve_lcp.defjvp
def _solve_lcp_jvp(primals, tangents):
    """(D.3–D.7): with active set α = {z_i > 0}, [−H_•α  I_•β] ẏ = q̇ + Ḣ z and ż = 1_α ⊙ ẏ."""
    H, q = primals
    dH, dq = tangents
    z = solve_lcp(H, q)
    active = z > 0.0
    n = q.shape[0]
    A = jnp.where(active[None, :], -H, jnp.eye(n))
    dy = jnp.linalg.solve(A, dq + dH @ z)
    return z, jnp.where(active, dy, 0.0)
