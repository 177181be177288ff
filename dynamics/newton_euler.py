"""Rigid-body dynamics of a kinematic tree by the Newton–Euler recursions in the Lie-algebra
form of Lutter et al. (Section 2, Algorithm 1): RNEA (inverse dynamics), CRBA (mass matrix),
ABA (forward dynamics), the inertial-parameter regressor, and the energies.

Everything is in body coordinates, twists ``[v, ω]`` (see ``dynamics.spatial``). Gravity enters
as an acceleration −g of the base, so every body feels it through the recursion. The armature
(rotor inertia) of each degree of freedom is part of the inertia: ``rnea`` adds armature · q̈,
``crba`` adds it to the diagonal and ``aba`` to each joint's articulated inertia, so
``aba(q, q̇, rnea(q, q̇, q̈)) = q̈``. Joint friction, springs and actuators are generalized
forces (``dynamics.actuators``).

Functions take one state; ``jax.vmap`` them over batches. Loops run over bodies at trace time
(the tree's structure is static), never over samples.
"""

from __future__ import annotations

import jax.numpy as jnp

from dynamics import spatial
from dynamics.tree import (
    FIXED,
    WORLD,
    Tree,
    TreeParams,
    com_positions,
    dof_value,
    parent_transforms,
    subspaces,
)

# Order of a body's 10 standard inertial parameters φ (Pinocchio's): mass, first moment m c,
# then the rotational inertia about the body frame's origin (not the centre of mass).
INERTIAL_NAMES = ("m", "mcx", "mcy", "mcz", "Ixx", "Ixy", "Iyy", "Ixz", "Iyz", "Izz")


def _forward_pass(tree: Tree, params: TreeParams, q, qd, qdd, gravity: bool = True):
    """Body twists v_i and accelerations a_i (with the base accelerating at −g)."""
    Rl, pl = parent_transforms(tree, params, q)
    S = subspaces(tree, params)
    a0 = jnp.concatenate([-params.gravity, jnp.zeros(3)]) if gravity else jnp.zeros(6)
    v0 = jnp.zeros(6)
    vs, as_ = [], []
    for i, parent in enumerate(tree.parents):
        v_parent = v0 if parent == WORLD else vs[parent]
        a_parent = a0 if parent == WORLD else as_[parent]
        sqd = S[i] * dof_value(tree, qd, i)
        v = spatial.motion_from_parent(Rl[i], pl[i], v_parent) + sqd
        a = (
            spatial.motion_from_parent(Rl[i], pl[i], a_parent)
            + S[i] * dof_value(tree, qdd, i)
            + spatial.cross_motion(v, sqd)  # η_i = ad_{v_i} s_i q̇_i
        )
        vs.append(v)
        as_.append(a)
    return Rl, pl, S, vs, as_


def _body_wrench(params: TreeParams, i: int, v, a):
    """Newton–Euler for body i: f = M̄ a + v ×* (M̄ v)."""
    b = params.bodies
    Mv = spatial.inertia_times(b.mass[i], b.com[i], b.inertia[i], v)
    Ma = spatial.inertia_times(b.mass[i], b.com[i], b.inertia[i], a)
    return Ma + spatial.cross_force(v, Mv)


def _backward_pass(tree: Tree, Rl, pl, S, fs):
    """Accumulate body wrenches towards the root; joint forces τ_i = s_iᵀ f_i in q order."""
    fs = list(fs)
    for i in reversed(range(tree.n_bodies)):
        parent = tree.parents[i]
        if parent != WORLD:
            fs[parent] = fs[parent] + spatial.force_to_parent(Rl[i], pl[i], fs[i])
    return jnp.stack([S[i] @ fs[i] for i in tree.dof_bodies])


def rnea(tree: Tree, params: TreeParams, q, qd, qdd):
    """Inverse dynamics (RNEA): τ = M(q) q̈ + c(q, q̇) + g(q) including armature · q̈ (N m or
    N per degree of freedom). Without joint friction, springs or actuators."""
    Rl, pl, S, vs, as_ = _forward_pass(tree, params, q, qd, qdd)
    fs = [_body_wrench(params, i, vs[i], as_[i]) for i in range(tree.n_bodies)]
    return _backward_pass(tree, Rl, pl, S, fs) + params.dofs.armature * qdd


def bias_forces(tree: Tree, params: TreeParams, q, qd):
    """c(q, q̇) + g(q): RNEA at zero acceleration (MuJoCo's qfrc_bias)."""
    return rnea(tree, params, q, qd, jnp.zeros_like(qd))


def crba(tree: Tree, params: TreeParams, q):
    """Joint-space inertia matrix M(q) [n, n] by the composite-rigid-body algorithm, armature on
    the diagonal (as MuJoCo's qM and Pinocchio's crba)."""
    Rl, pl = parent_transforms(tree, params, q)
    S = subspaces(tree, params)
    b = params.bodies
    Ic = [spatial.spatial_inertia(b.mass[i], b.com[i], b.inertia[i]) for i in range(tree.n_bodies)]
    for i in reversed(range(tree.n_bodies)):
        parent = tree.parents[i]
        if parent != WORLD:
            Ic[parent] = Ic[parent] + spatial.transform_inertia_to_parent(Rl[i], pl[i], Ic[i])
    n = tree.n_dof
    M = jnp.zeros((n, n))
    for col, i in enumerate(tree.dof_bodies):
        F = Ic[i] @ S[i]  # wrench of the composite body i moving at unit rate of joint i
        j = i
        M = M.at[col, col].set(S[i] @ F)
        while tree.parents[j] != WORLD:
            F = spatial.force_to_parent(Rl[j], pl[j], F)
            j = tree.parents[j]
            row = tree.dof_index(j)
            if row is not None:
                M = M.at[row, col].set(S[j] @ F)
                M = M.at[col, row].set(S[j] @ F)
    return M + jnp.diag(params.dofs.armature)


def aba(tree: Tree, params: TreeParams, q, qd, tau):
    """Forward dynamics (ABA, Algorithm 1): q̈ such that rnea(q, q̇, q̈) = τ.

    Pass 1 propagates twists v_i and velocity-product accelerations η_i; pass 2 (leaves to
    root) the articulated inertias M̄_{i:n} and bias wrenches, with Ψ_i = (s_iᵀ M̄_{i:n} s_i +
    armature_i)⁻¹; pass 3 (root to leaves) the accelerations. Fixed joints pass their whole
    articulated inertia to the parent.
    """
    Rl, pl = parent_transforms(tree, params, q)
    S = subspaces(tree, params)
    b = params.bodies
    nb = tree.n_bodies
    vs, etas = [], []
    for i, parent in enumerate(tree.parents):
        sqd = S[i] * dof_value(tree, qd, i)
        v = sqd if parent == WORLD else spatial.motion_from_parent(Rl[i], pl[i], vs[parent]) + sqd
        vs.append(v)
        etas.append(spatial.cross_motion(v, sqd))
    IA = [spatial.spatial_inertia(b.mass[i], b.com[i], b.inertia[i]) for i in range(nb)]
    pA = [
        spatial.cross_force(vs[i], spatial.inertia_times(b.mass[i], b.com[i], b.inertia[i], vs[i]))
        for i in range(nb)
    ]
    U, D, u = [None] * nb, [None] * nb, [None] * nb
    for i in reversed(range(nb)):
        if tree.joint_types[i] == FIXED:
            Ia, pa = IA[i], pA[i] + IA[i] @ etas[i]
        else:
            k = tree.dof_index(i)
            U[i] = IA[i] @ S[i]
            D[i] = S[i] @ U[i] + params.dofs.armature[k]
            u[i] = tau[k] - S[i] @ pA[i]
            Ia = IA[i] - jnp.outer(U[i], U[i]) / D[i]
            pa = pA[i] + Ia @ etas[i] + U[i] * (u[i] / D[i])
        parent = tree.parents[i]
        if parent != WORLD:
            IA[parent] = IA[parent] + spatial.transform_inertia_to_parent(Rl[i], pl[i], Ia)
            pA[parent] = pA[parent] + spatial.force_to_parent(Rl[i], pl[i], pa)
    a0 = jnp.concatenate([-params.gravity, jnp.zeros(3)])
    acc = [None] * nb
    qdd = [None] * tree.n_dof
    for i, parent in enumerate(tree.parents):
        a_parent = a0 if parent == WORLD else acc[parent]
        a = spatial.motion_from_parent(Rl[i], pl[i], a_parent) + etas[i]
        k = tree.dof_index(i)
        if k is not None:
            qdd[k] = (u[i] - U[i] @ a) / D[i]
            a = a + S[i] * qdd[k]
        acc[i] = a
    return jnp.stack(qdd) if qdd else jnp.zeros(0)


# --- linear regressor Y(q, q̇, q̈) φ = τ ---------------------------------------------------


def body_inertial_vector(mass, com, inertia_com):
    """φ (10) of one body from mass, centre of mass and inertia about the centre of mass:
    [m, m c, I_o (xx, xy, yy, xz, yz, zz)] with I_o = I_c − m[c][c] about the body origin."""
    C = spatial.skew(com)
    Io = inertia_com - mass * (C @ C)
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
    of ``inertial_vector`` (for a body with m ≠ 0)."""
    P = phi.reshape(-1, 10)
    m = P[:, 0]
    com = P[:, 1:4] / m[:, None]
    xx, xy, yy, xz, yz, zz = (P[:, 4 + k] for k in range(6))
    Io = jnp.stack(
        [jnp.stack([xx, xy, xz], -1), jnp.stack([xy, yy, yz], -1), jnp.stack([xz, yz, zz], -1)],
        -2,
    )
    C = jnp.stack([spatial.skew(c) for c in com]) if com.shape[0] else com
    Ic = Io + m[:, None, None] * (C @ C)
    return m, com, Ic


def _body_regressor(v, a):
    """A(v, a) [6, 10] with M̄(φ) a + v ×* (M̄(φ) v) = A φ for one body."""
    cols = []
    for k in range(10):
        e = jnp.zeros(10).at[k].set(1.0)
        cols.append(_wrench_of_vector(e, v, a))
    return jnp.stack(cols, axis=1)


def _wrench_of_vector(phi, v, a):
    """M̄(φ) a + v ×* M̄(φ) v with M̄ built directly from φ (linear in φ)."""
    m, h = phi[0], phi[1:4]
    xx, xy, yy, xz, yz, zz = phi[4:]
    Io = jnp.array([[xx, xy, xz], [xy, yy, yz], [xz, yz, zz]])

    def times(x):
        lin, ang = x[:3], x[3:]
        return jnp.concatenate([m * lin - jnp.cross(h, ang), Io @ ang + jnp.cross(h, lin)])

    return times(a) + spatial.cross_force(v, times(v))


def regressor(tree: Tree, params: TreeParams, q, qd, qdd):
    """Y(q, q̇, q̈) [n, 10 nb] with Y φ = rnea(q, q̇, q̈) − armature · q̈ for the inertial
    parameters φ = ``inertial_vector(params)``. Uses the kinematic parameters of ``params``
    only (Atkeson et al.; the body wrench is linear in φ)."""
    Rl, pl, S, vs, as_ = _forward_pass(tree, params, q, qd, qdd)
    nb = tree.n_bodies
    # Column block of body i: its wrench regressor carried to each ancestor joint.
    rows = {j: [] for j in tree.dof_bodies}
    for i in range(nb):
        A = _body_regressor(vs[i], as_[i])  # [6, 10] in body i's frame
        blocks = {j: jnp.zeros(10) for j in tree.dof_bodies}
        j = i
        while True:
            if j in blocks:
                blocks[j] = S[j] @ A
            if tree.parents[j] == WORLD:
                break
            A = _force_block_to_parent(Rl[j], pl[j], A)
            j = tree.parents[j]
        for dof_body in tree.dof_bodies:
            rows[dof_body].append(blocks[dof_body])
    return jnp.stack([jnp.concatenate(rows[j]) for j in tree.dof_bodies])


def _force_block_to_parent(R, p, A):
    """Each column of A [6, k] (wrenches) carried to the parent frame."""
    f, n = A[:3], A[3:]
    Rf = R @ f
    return jnp.concatenate([Rf, R @ n + jnp.cross(p[:, None], Rf, axis=0)])


# --- energy ----------------------------------------------------------------------------------


def kinetic_energy(tree: Tree, params: TreeParams, q, qd):
    """½ Σ v_iᵀ M̄_i v_i + ½ Σ armature q̇² (J): bodies plus rotors."""
    Rl, pl, S, vs, _ = _forward_pass(tree, params, q, qd, jnp.zeros_like(qd), gravity=False)
    b = params.bodies
    body = sum(
        0.5 * vs[i] @ spatial.inertia_times(b.mass[i], b.com[i], b.inertia[i], vs[i])
        for i in range(tree.n_bodies)
    )
    return body + 0.5 * jnp.sum(params.dofs.armature * qd**2)


def gravity_energy(tree: Tree, params: TreeParams, q):
    """−Σ m_i gᵀ x_com,i (J), zero with every centre of mass at the world origin."""
    return -jnp.sum(params.bodies.mass * (com_positions(tree, params, q) @ params.gravity))


def spring_energy(params: TreeParams, q):
    """½ Σ k (q − q_ref)² (J) of the joint springs."""
    d = params.dofs
    return 0.5 * jnp.sum(d.stiffness * (q - d.springref) ** 2)


def potential_energy(tree: Tree, params: TreeParams, q):
    """Gravity plus springs (J)."""
    return gravity_energy(tree, params, q) + spring_energy(params, q)


def total_energy(tree: Tree, params: TreeParams, q, qd):
    return kinetic_energy(tree, params, q, qd) + potential_energy(tree, params, q)
