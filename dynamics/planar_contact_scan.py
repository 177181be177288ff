"""The IRC time stepper of ``dynamics.planar_contact``, compiled: ``lax.scan`` over steps,
``vmap`` over initial states, sub-steps inside the compiled step.

Same model, step for step, as ``planar_contact.irc_step`` (eqs. 16-19 of Gabiccini & Fusco):
contact toggled by the big-M rule (6) from the gap and normal velocity at step k, Newton
restitution ``N^T (v^{k+1} + eps v^k) = 0`` with the exact 2D Coulomb cone (18), the 4x4 LCP
in ``z = (c_n, c+, c-, lambda)`` solved exactly by enumerating its 16 complementary index
sets, smallest first (``solve_lcp4``; all 16 are solved at once and the first valid one is
taken, so the answer is the same set the reference picks). The reference is a Python loop
(~1 ms a step); this one runs a step in microseconds, which is what makes a fine step (IRC
acts on velocities only, so an ellipse rolling on the ground sinks into it by O(h) per
impact: 1.4 mm at h = 1/2400 s on the sample drop) affordable in the prediction check and
in the sample's truth.

Everything is per unit mass: only J/m enters the motion (Section 5.2.2). Surfaces are rows
(x0, y0, alpha, length) as ``estimation.ipopt_contact.ContactGeometry.surfaces``; with
``segmented`` the ellipse can touch a surface only where its support point lies over it
(``assign_surfaces``; past a bar's end it is in flight), else the first row is an infinite
line. Units: SI; q = (x, y, theta), v = (vx, vy, omega).
"""

from __future__ import annotations

import itertools
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from physid.dynamics.planar_contact import GRAVITY

# The 16 index sets of the 4x4 LCP in the reference's order (by size, then lexicographic).
_SETS = np.array(
    [[i in s for i in range(4)] for k in range(5) for s in itertools.combinations(range(4), k)]
)
_SIZES = _SETS.sum(axis=1)


def geometry(q, a: float, b: float, surface):
    """Gap (m), normal and tangential wrench bases N, Tp (3 each) and the distance along
    the surface of the contact point (m) of pose ``q`` against ``surface`` = (x0, y0, alpha,
    length): the closed form of ``planar_contact.contact_geometry_sx``."""
    x, y, th = q[0], q[1], q[2]
    x0, y0, alpha = surface[0], surface[1], surface[2]
    sa, ca = jnp.sin(alpha), jnp.cos(alpha)
    s, c = jnp.sin(th - alpha), jnp.cos(th - alpha)
    r = jnp.sqrt(a**2 * s**2 + b**2 * c**2)
    gap = (y - y0) * ca - (x - x0) * sa - r
    lx, ly = -(a**2) * s / r, -(b**2) * c / r
    ct, st = jnp.cos(th), jnp.sin(th)
    gqx, gqy = ct * lx - st * ly, st * lx + ct * ly
    nx, ny, tx, ty = -sa, ca, ca, sa
    N = jnp.stack([nx, ny, gqx * ny - gqy * nx])
    Tp = jnp.stack([tx, ty, gqx * ty - gqy * tx])
    along = (x + gqx - x0) * ca + (y + gqy - y0) * sa
    return gap, N, Tp, along


def _det_and_adjugate(m):
    """Determinant and adjugate of 4x4 matrices m[..., 4, 4] by Laplace expansion in 2x2
    minors: elementwise arithmetic that XLA fuses (a batched LAPACK call per step is what
    makes a tiny solve slow inside ``lax.scan``)."""
    e = [[m[..., i, j] for j in range(4)] for i in range(4)]
    s0 = e[0][0] * e[1][1] - e[1][0] * e[0][1]
    s1 = e[0][0] * e[1][2] - e[1][0] * e[0][2]
    s2 = e[0][0] * e[1][3] - e[1][0] * e[0][3]
    s3 = e[0][1] * e[1][2] - e[1][1] * e[0][2]
    s4 = e[0][1] * e[1][3] - e[1][1] * e[0][3]
    s5 = e[0][2] * e[1][3] - e[1][2] * e[0][3]
    c5 = e[2][2] * e[3][3] - e[3][2] * e[2][3]
    c4 = e[2][1] * e[3][3] - e[3][1] * e[2][3]
    c3 = e[2][1] * e[3][2] - e[3][1] * e[2][2]
    c2 = e[2][0] * e[3][3] - e[3][0] * e[2][3]
    c1 = e[2][0] * e[3][2] - e[3][0] * e[2][2]
    c0 = e[2][0] * e[3][1] - e[3][0] * e[2][1]
    det = s0 * c5 - s1 * c4 + s2 * c3 + s3 * c2 - s4 * c1 + s5 * c0
    adj = [
        [
            e[1][1] * c5 - e[1][2] * c4 + e[1][3] * c3,
            -e[0][1] * c5 + e[0][2] * c4 - e[0][3] * c3,
            e[3][1] * s5 - e[3][2] * s4 + e[3][3] * s3,
            -e[2][1] * s5 + e[2][2] * s4 - e[2][3] * s3,
        ],
        [
            -e[1][0] * c5 + e[1][2] * c2 - e[1][3] * c1,
            e[0][0] * c5 - e[0][2] * c2 + e[0][3] * c1,
            -e[3][0] * s5 + e[3][2] * s2 - e[3][3] * s1,
            e[2][0] * s5 - e[2][2] * s2 + e[2][3] * s1,
        ],
        [
            e[1][0] * c4 - e[1][1] * c2 + e[1][3] * c0,
            -e[0][0] * c4 + e[0][1] * c2 - e[0][3] * c0,
            e[3][0] * s4 - e[3][1] * s2 + e[3][3] * s0,
            -e[2][0] * s4 + e[2][1] * s2 - e[2][3] * s0,
        ],
        [
            -e[1][0] * c3 + e[1][1] * c1 - e[1][2] * c0,
            e[0][0] * c3 - e[0][1] * c1 + e[0][2] * c0,
            -e[3][0] * s3 + e[3][1] * s1 - e[3][2] * s0,
            e[2][0] * s3 - e[2][1] * s1 + e[2][2] * s0,
        ],
    ]
    return det, jnp.stack([jnp.stack(row, axis=-1) for row in adj], axis=-2)


def solve_lcp4(A, b, tol: float = 1e-10):
    """``planar_contact.solve_lcp4`` without a Python loop: z of ``0 <= z _|_ A z + b >= 0``
    (z = 0 if no index set gives a solution, where the reference raises)."""
    sets = jnp.asarray(_SETS)
    eye = jnp.eye(4)
    both = sets[:, :, None] & sets[:, None, :]
    M = jnp.where(both, A[None], eye[None])  # A on the set, identity off it: det = det(A_SS)
    rhs = jnp.where(sets, -b[None], 0.0)
    sub_max = jnp.max(jnp.where(both, jnp.abs(A)[None], 0.0), axis=(1, 2))
    det, adj = _det_and_adjugate(M)
    regular = jnp.abs(det) >= 1e-14 * jnp.maximum(1.0, sub_max) ** jnp.asarray(_SIZES)
    safe_det = jnp.where(regular, det, 1.0)
    z = jnp.where(sets, jnp.einsum("sij,sj->si", adj, rhs) / safe_det[:, None], 0.0)
    w = z @ A.T + b[None]
    scale = jnp.maximum(1.0, jnp.max(jnp.abs(b)))
    ok = regular & (z.min(axis=1) >= -tol * scale) & (w.min(axis=1) >= -tol * scale)
    first = jnp.argmax(ok)
    return jnp.where(ok[first], jnp.maximum(z[first], 0.0), 0.0)


def _contact(q, a, b, surfaces, segmented: bool):
    """Geometry against the surface the pose can touch (``assign_surfaces``) and whether
    there is one."""
    gaps, N, Tp, along = jax.vmap(lambda s: geometry(q, a, b, s))(surfaces)
    if not segmented:
        return gaps[0], N[0], Tp[0], jnp.asarray(True)
    over = (along >= 0.0) & (along <= surfaces[:, 3])
    i = jnp.argmin(jnp.where(over, gaps, jnp.inf))
    return gaps[i], N[i], Tp[i], over[i]


def irc_step(q, v, h, j_over_m, mu, eps, a, b, surfaces, segmented: bool = False):
    """One IRC step (eqs. 16-19) per unit mass; returns (q^{k+1}, v^{k+1})."""
    gap, N, Tp, touch = _contact(q, a, b, surfaces, segmented)
    minv = jnp.array([1.0, 1.0, 1.0 / j_over_m])
    v_free = v + h * jnp.array([0.0, -GRAVITY, 0.0])
    gdot = N @ v
    active = touch & (gap <= 0.0) & (gdot <= 0.0)  # z_c = 1 in eq. (6)

    def impact(_):
        G = jnp.stack([N, Tp, -Tp], axis=1)
        W = G.T @ (minv[:, None] * G)  # Delassus matrix per unit mass
        A = jnp.zeros((4, 4)).at[:3, :3].set(W).at[1, 3].set(1.0).at[2, 3].set(1.0)
        A = A.at[3, :3].set(jnp.array([mu, -1.0, -1.0]))
        u_free = G.T @ v_free
        rhs = jnp.array([u_free[0] + eps * gdot, u_free[1], u_free[2], 0.0])
        return v_free + minv * (G @ solve_lcp4(A, rhs)[:3])

    # A branch, not a select: in flight (most steps) the LCP is not solved at all; the
    # rollout maps over the batch with ``lax.map`` so that the branch survives.
    v_next = jax.lax.cond(active, impact, lambda _: v_free, None)
    return q + h * v_next, v_next


@partial(jax.jit, static_argnames=("steps", "segmented"))
def rollout(q0, v0, h, j_over_m, mu, eps, a, b, surfaces, *, steps, substeps=1, segmented=False):
    """Poses [B, steps + 1, 3] and velocities [B, steps + 1, 3] of a batch of initial states
    q0, v0 [B, 3] on the grid h (s), each grid step taken as ``substeps`` IRC steps of
    h / substeps. Compiled once per ``steps`` (and ``segmented``): everything else, the
    sub-step count included, is traced."""
    surfaces = jnp.asarray(surfaces, float).reshape(-1, 4)
    dt = h / substeps

    def one(q, v):
        def fine(_, state):
            return irc_step(*state, dt, j_over_m, mu, eps, a, b, surfaces, segmented)

        def coarse(state, _):
            state = jax.lax.fori_loop(0, substeps, fine, state)
            return state, state

        _, (qs, vs) = jax.lax.scan(coarse, (q, v), None, length=steps)
        return jnp.concatenate([q[None], qs]), jnp.concatenate([v[None], vs])

    return jax.lax.map(lambda x: one(*x), (jnp.asarray(q0, float), jnp.asarray(v0, float)))
