"""Rigid-body dynamics of a kinematic tree by the Newton–Euler recursions in the Lie-algebra
form of Lutter et al. (Section 2, Algorithm 1): RNEA (inverse dynamics), CRBA (mass matrix),
ABA (forward dynamics), the inertial-parameter regressor, and the energies.

Everything is in body coordinates, twists ``[v, ω]`` (see ``dynamics.spatial``). X_i =
Ad_{T_λi⁻¹} carries a parent's twist into body i's frame and X_iᵀ = Ad*_{T_λi⁻¹} carries body
i's wrench back (3). Gravity enters as an acceleration −g of the base, so every body feels it
through the recursion. The armature (rotor inertia) of each degree of freedom is part of the
inertia: ``rnea`` adds armature · q̈, ``crba`` adds it to the diagonal and ``aba`` to each
joint's articulated inertia, so ``aba(q, q̇, rnea(q, q̇, q̈)) = q̈``. Joint friction, springs
and actuators are generalized forces (``dynamics.actuators``).

Functions take one state; ``jax.vmap`` them over batches. The recursions loop over bodies at
trace time (the tree's structure is static), never over samples; what does not depend on the
parent (joint transforms, body wrenches) is computed for all bodies at once.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from physid.dynamics import spatial
from physid.dynamics.tree import (
    FIXED,
    Tree,
    TreeParams,
    add_row,
    backward_wrenches,
    body_poses,
    body_values,
    com_positions,
    forward_twists,
    parent_transforms,
    row,
    set_row,
    subspaces,
)

# Order of a body's 10 standard inertial parameters φ (Pinocchio's): mass, first moment m c,
# then the rotational inertia about the body frame's origin (not the centre of mass).
INERTIAL_NAMES = ("m", "mcx", "mcy", "mcz", "Ixx", "Ixy", "Iyy", "Ixz", "Iyz", "Izz")


def body_inertias(params: TreeParams):
    """M̄_i (1) of every body about its frame's origin, [nb, 6, 6]."""
    b = params.bodies
    return spatial.spatial_inertia(b.mass, b.com, b.inertia)


def _momenta(params: TreeParams, twists):
    """M̄_i V_i for every body, [nb, 6]."""
    b = params.bodies
    return spatial.inertia_times(b.mass, b.com, b.inertia, twists)


def _kinematics(tree: Tree, params: TreeParams, q, qd):
    """Parent transforms (R, p), subspaces S, twists v_i = X_i v_λ + s_i q̇_i and the
    velocity-product accelerations η_i = ad_{v_i} s_i q̇_i."""
    R, p = parent_transforms(tree, params, q)
    S = subspaces(tree, params)
    sqd = S * body_values(tree, qd)[:, None]
    v = forward_twists(tree, R, p, sqd)
    return R, p, S, v, spatial.cross_motion(v, sqd)


def _base_acceleration(params: TreeParams):
    """The base accelerates at −g: every body then feels gravity through the recursion."""
    return jnp.concatenate([-params.gravity, jnp.zeros(3)])


def _accelerations(tree: Tree, params: TreeParams, R, p, S, eta, qdd):
    """a_i = X_i a_λ + s_i q̈_i + η_i."""
    known = S * body_values(tree, qdd)[:, None] + eta
    return forward_twists(tree, R, p, known, _base_acceleration(params))


def _joint_forces(tree: Tree, S, totals):
    """τ_i = s_iᵀ f_i for the degrees of freedom (q order) from the bodies' total wrenches."""
    dofs = np.asarray(tree.dof_bodies, dtype=int)
    return jnp.sum(S[dofs].reshape(len(dofs), *([1] * (totals.ndim - 2)), 6) * totals[dofs], -1)


def rnea(tree: Tree, params: TreeParams, q, qd, qdd):
    """Inverse dynamics (RNEA): τ = M(q) q̈ + c(q, q̇) + g(q) including armature · q̈ (N m or
    N per degree of freedom). Without joint friction, springs or actuators."""
    R, p, S, v, eta = _kinematics(tree, params, q, qd)
    a = _accelerations(tree, params, R, p, S, eta, qdd)
    f = _momenta(params, a) + spatial.cross_force(v, _momenta(params, v))  # Newton–Euler
    return _joint_forces(tree, S, backward_wrenches(tree, R, p, f)) + params.dofs.armature * qdd


def bias_forces(tree: Tree, params: TreeParams, q, qd):
    """c(q, q̇) + g(q): RNEA at zero acceleration (MuJoCo's qfrc_bias)."""
    return rnea(tree, params, q, qd, jnp.zeros_like(qd))


def _pad(x):
    """x with one extra zero row (the world's) along the body axis."""
    return jnp.concatenate([x, jnp.zeros((1, *x.shape[1:]), x.dtype)])


def crba(tree: Tree, params: TreeParams, q):
    """Joint-space inertia matrix M(q) [n, n] by the composite-rigid-body algorithm, armature on
    the diagonal (as MuJoCo's qM and Pinocchio's crba).

    From the leaves to the root: the composite inertia I^c_i = M̄_i + Σ_children X_kᵀ I^c_k X_k
    is complete when body i is reached; its joint's wrench I^c_i s_i joins the wrenches of
    the joints below (one row per joint, carried to each parent by X_iᵀ), and s_iᵀ times
    them is row i of M's upper triangle (M_ij = s_iᵀ X_chainᵀ I^c_j s_j for j below i)."""
    R, p = parent_transforms(tree, params, q)
    S = subspaces(tree, params)
    b = params.bodies
    n = tree.n_dof
    blocks = spatial.body_blocks(b.mass, b.com, b.inertia)
    col = jnp.eye(n + 1)[tree.dof_rows, :n]  # [nb, n]: one-hot column of body i's joint

    def step(carry, xs):
        A_all, B_all, C_all, F_all = carry
        i, parent, R, p, s, e = xs
        Ic = (row(A_all, i), row(B_all, i), row(C_all, i))
        F = row(F_all, i) + e[:, None] * spatial.blocks_times(*Ic, s)  # [n, 6]
        m_row = jnp.sum(F * s, axis=-1)
        moved = spatial.blocks_to_parent(R, p, *Ic)
        carry = (
            add_row(A_all, parent, moved[0]),
            add_row(B_all, parent, moved[1]),
            add_row(C_all, parent, moved[2]),
            add_row(F_all, parent, spatial.force_to_parent(R, p, F)),
        )
        return carry, m_row

    init = (*map(_pad, blocks), jnp.zeros((tree.n_bodies + 1, n, 6)))
    xs = (jnp.arange(tree.n_bodies), tree.parent_rows, R, p, S, col)
    _, rows = jax.lax.scan(step, init, xs, reverse=True, unroll=tree.unroll)
    upper = jnp.triu(rows[np.asarray(tree.dof_bodies, dtype=int)])
    return upper + jnp.triu(upper, 1).T + jnp.diag(params.dofs.armature)


def aba(tree: Tree, params: TreeParams, q, qd, tau):
    """Forward dynamics (ABA, Algorithm 1): q̈ such that rnea(q, q̇, q̈) = τ.

    Pass 1 propagates twists v_i and η_i = ad_{v_i} s_i q̇_i; pass 2 (leaves to root) the
    articulated inertias M̄_{i:n} and bias wrenches f_b, with Ψ_i = (s_iᵀ M̄_{i:n} s_i +
    armature_i)⁻¹ and Π_i = M̄_{i:n} − M̄_{i:n} s_i Ψ_i s_iᵀ M̄_{i:n}; pass 3 (root to leaves) the
    accelerations. A fixed joint (s = 0) passes its whole articulated inertia to the parent.
    Articulated inertias are kept as their 3×3 blocks (``spatial.blocks_to_parent``).
    """
    R, p, S, v, eta = _kinematics(tree, params, q, qd)
    b = params.bodies
    bias = spatial.cross_force(v, _momenta(params, v))
    fixed = np.array([t == FIXED for t in tree.joint_types])
    xs = (
        jnp.arange(tree.n_bodies),
        tree.parent_rows,
        R,
        p,
        S,
        eta,
        body_values(tree, tau),
        body_values(tree, params.dofs.armature),
        fixed,
    )

    def backward(carry, xs):
        A_all, B_all, C_all, f_all = carry
        i, parent, R, p, s, eta, tau, armature, fixed = xs
        IA = (row(A_all, i), row(B_all, i), row(C_all, i))
        U = spatial.blocks_times(*IA, s)
        D = jnp.where(fixed, 1.0, jnp.sum(s * U) + armature)  # 1/Ψ_i
        f_i = row(f_all, i)
        u = tau - jnp.sum(s * f_i)
        Ul, Uw = U[:3], U[3:]
        Pi = (  # Π = M̄ − U Ψ Uᵀ (U = 0 for a fixed joint)
            IA[0] - Ul[:, None] * Ul[None, :] / D,
            IA[1] - Ul[:, None] * Uw[None, :] / D,
            IA[2] - Uw[:, None] * Uw[None, :] / D,
        )
        beta = f_i + spatial.blocks_times(*Pi, eta) + U * (u / D)
        moved = spatial.blocks_to_parent(R, p, *Pi)
        carry = (
            add_row(A_all, parent, moved[0]),
            add_row(B_all, parent, moved[1]),
            add_row(C_all, parent, moved[2]),
            add_row(f_all, parent, spatial.force_to_parent(R, p, beta)),
        )
        return carry, (U, D, u)

    init = (*map(_pad, spatial.body_blocks(b.mass, b.com, b.inertia)), _pad(bias))
    _, (U, D, u) = jax.lax.scan(backward, init, xs, reverse=True, unroll=tree.unroll)

    def forward(a_all, xs):
        i, parent, R, p, s, eta, U, D, u = xs
        a = spatial.motion_from_parent(R, p, row(a_all, parent)) + eta
        qdd = (u - jnp.sum(U * a)) / D  # 0 for a fixed joint (U = 0, u = 0)
        a = a + s * qdd
        return set_row(a_all, i, a), qdd

    init = jnp.zeros((tree.n_bodies + 1, 6)).at[tree.n_bodies].set(_base_acceleration(params))
    xs = (*xs[:6], U, D, u)
    _, qdd = jax.lax.scan(forward, init, xs, unroll=tree.unroll)
    return qdd[np.asarray(tree.dof_bodies, dtype=int)]


# --- linear regressor Y(q, q̇, q̈) φ = τ ---------------------------------------------------


def body_inertial_vector(mass, com, inertia_com):
    """φ (10) of one body from mass, centre of mass and inertia about the centre of mass:
    [m, m c, I_o (xx, xy, yy, xz, yz, zz)] with I_o = I_c − m[c][c] about the body origin."""
    C = spatial.skew(com)
    Io = inertia_com - mass * spatial.matmul(C, C)
    return jnp.concatenate(
        [
            jnp.atleast_1d(mass),
            mass * com,
            jnp.stack([Io[0, 0], Io[0, 1], Io[1, 1], Io[0, 2], Io[1, 2], Io[2, 2]]),
        ]
    )


def inertial_vector(params: TreeParams):
    """φ of every body stacked, [10 nb] (the order of ``INERTIAL_NAMES``, body by body)."""
    b = params.bodies
    return jnp.concatenate(
        [body_inertial_vector(b.mass[i], b.com[i], b.inertia[i]) for i in range(b.mass.shape[0])]
    )


def inertial_from_vector(phi):
    """(mass [nb], com [nb, 3], inertia about the com [nb, 3, 3]) from φ [10 nb]; the inverse
    of ``inertial_vector`` (for bodies with m ≠ 0)."""
    P = jnp.reshape(phi, (-1, 10))
    m = P[:, 0]
    com = P[:, 1:4] / m[:, None]
    xx, xy, yy, xz, yz, zz = (P[:, 4 + k] for k in range(6))
    Io = jnp.stack(
        [jnp.stack([xx, xy, xz], -1), jnp.stack([xy, yy, yz], -1), jnp.stack([xz, yz, zz], -1)],
        -2,
    )
    C = spatial.skew(com)
    return m, com, Io + m[:, None, None] * spatial.matmul(C, C)


def regressor(tree: Tree, params: TreeParams, q, qd, qdd):
    """Y(q, q̇, q̈) [n, 10 nb] with Y φ = rnea(q, q̇, q̈) − armature · q̈ for the inertial
    parameters φ = ``inertial_vector(params)`` (Atkeson et al.: each body's wrench is linear
    in its φ, f_i = A(v_i, a_i) φ_i, and joint j carries the wrenches of its subtree). Uses
    only the kinematic parameters of ``params``.

    The subtree sums are taken in world coordinates, where they need no recursion:
    Y_j,i = (Ad_{T_wj} s_j)ᵀ (Ad*_{T_wi⁻¹} A_i) for body i at or below joint j, else 0."""
    R, p, S, v, eta = _kinematics(tree, params, q, qd)
    a = _accelerations(tree, params, R, p, S, eta, qdd)
    A = jnp.swapaxes(spatial.wrench_regressor(v, a), -1, -2)  # [nb, 10, 6]: 10 wrenches
    Rw, pw = body_poses(tree, params, q)
    A_world = spatial.force_to_parent(Rw[:, None], pw[:, None], A)  # [nb, 10, 6]
    S_world = spatial.motion_to_parent(Rw, pw, S)  # [nb, 6]
    dofs = np.asarray(tree.dof_bodies, dtype=int)
    below = _subtree_mask(tree)[dofs]  # [n, nb]: body i at or below joint j
    Y = jnp.sum(S_world[dofs][:, None, None, :] * A_world[None], axis=-1)  # [n, nb, 10]
    return (Y * below[:, :, None]).reshape(len(dofs), 10 * tree.n_bodies)


def _subtree_mask(tree: Tree) -> np.ndarray:
    """mask[j, i] = 1 where body i is body j or one of its descendants."""
    nb = tree.n_bodies
    mask = np.eye(nb)
    for i in range(nb):
        j = tree.parents[i]
        while j >= 0:
            mask[j, i] = 1.0
            j = tree.parents[j]
    return mask


# --- energy ----------------------------------------------------------------------------------


def kinetic_energy(tree: Tree, params: TreeParams, q, qd):
    """½ Σ v_iᵀ M̄_i v_i + ½ Σ armature q̇² (J): bodies plus rotors."""
    _, _, _, v, _ = _kinematics(tree, params, q, qd)
    body = 0.5 * jnp.sum(v * _momenta(params, v))
    return body + 0.5 * jnp.sum(params.dofs.armature * qd**2)


def gravity_energy(tree: Tree, params: TreeParams, q):
    """−Σ m_i gᵀ x_com,i (J), zero with every centre of mass at the world origin."""
    heights = jnp.sum(com_positions(tree, params, q) * params.gravity, axis=-1)
    return -jnp.sum(params.bodies.mass * heights)


def spring_energy(params: TreeParams, q):
    """½ Σ k (q − q_ref)² (J) of the joint springs."""
    d = params.dofs
    return 0.5 * jnp.sum(d.stiffness * (q - d.springref) ** 2)


def potential_energy(tree: Tree, params: TreeParams, q):
    """Gravity plus springs (J)."""
    return gravity_energy(tree, params, q) + spring_energy(params, q)


def total_energy(tree: Tree, params: TreeParams, q, qd):
    return kinetic_energy(tree, params, q, qd) + potential_energy(tree, params, q)
