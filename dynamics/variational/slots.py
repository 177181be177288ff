"""The slot derivatives D₁L_d, D₂L_d of the midpoint discrete Lagrangian in closed form, from
world-frame twists and momenta (Caldwell, Coleman & Correll, eq. 15).

With q̄ = (q₀ + q₁)/2 and v = (q₁ − q₀)/h, L_d = h L(q̄, v) has

    D₁L_d = (h/2) ∂L/∂q(q̄, v) − ∂L/∂q̇(q̄, v),    D₂L_d = (h/2) ∂L/∂q(q̄, v) + ∂L/∂q̇(q̄, v).

Both partials of L = T − V follow from one pass over the bodies in the world frame, with
every twist taken at the world origin (linear part first, as in ``tree.subspaces``):

- joint j's unit twist S_j = (o_j × a_j, a_j) for a revolute joint through o_j along a_j, or
  (a_j, 0) for a prismatic one; body i's twist V_i = Σ_{j ≤ i} S_j v_j (its ancestors);
- body i's momentum at the origin h_i = (l_i, k_i) = (m ċ_i, c_i × l_i + I_i^w ω_i), and
  H_j = Σ_{i in j's subtree} h_i;
- ∂T/∂q̇_j = S_j · H_j (+ armature · v_j), the momentum M(q̄) v;
- ∂T/∂q_j = H_j · [U_j, S_j], with U_j the twist of the body carrying joint j's parent and
  [·,·] the Lie bracket of twists. Turning q_j moves joint j's subtree rigidly by S_j: each
  twist below changes by [S_j, V_i − U_j] and each inertia by the coadjoint action, and the two
  terms of Σ h_i · (...) cancel down to this one (Featherstone's "Ṡ" term in momentum form);
- −∂V/∂q_j = S_j · Σ_{i in subtree} W_i − κ_j (q̄_j − q_ref,j), with W_i = (m_i g, c_i × m_i g)
  the gravity wrench at the origin; point loads enter the same way, as wrenches (F, x × F).

Why: every Newton iteration of the constrained step takes the q₁-Jacobian of D₁L_d, and the
implicit-function derivatives take its derivatives in every argument. By nested automatic
differentiation of L (reverse over the forward pass of ``midpoint.lagrangian``) one step of
the 13-coordinate hexagon cost ~25 ms and minutes to compile; these slots need first
derivatives only (one forward-mode pass for the Jacobian), a few dozen batched operations.
The values equal ``midpoint.slot_derivatives`` to round-off (tested).

Units: q in rad or m, p and the slots in N m s or N s.
"""

from __future__ import annotations

import functools

import jax.numpy as jnp
import numpy as np

from physid.dynamics import spatial
from physid.dynamics.tree import REVOLUTE, WORLD, Tree, TreeParams
from physid.dynamics.variational import midpoint
from physid.dynamics.variational.kinematics import world_poses


@functools.lru_cache(maxsize=64)
def _structure(tree: Tree):
    """Static masks of ``tree``: subtree [n, nb] (1 where body i is joint j's body or below
    it), parent [n, nb + 1] (one-hot: the body that carries joint j's parent, the world's
    zero row last) and revolute [n, 1]."""
    nb, n = tree.n_bodies, tree.n_dof
    below = np.eye(nb)
    for i in range(nb):  # topological order: a parent's row is done before its children
        parent = tree.parents[i]
        if parent != WORLD:
            below[:, i] = np.maximum(below[:, i], below[:, parent])
    body = np.asarray(tree.dof_bodies, dtype=int)
    subtree = below[body]  # below[b, i] = 1 if b is i or an ancestor of i
    parent = np.zeros((n, nb + 1))
    parent[np.arange(n), tree.parent_rows[body]] = 1.0
    revolute = np.array([[tree.joint_types[b] == REVOLUTE] for b in body], dtype=float)
    return subtree, parent, revolute, body


def _bracket(v1, w1, v2, w2):
    """[V₁, V₂] of twists (v, ω) at the origin: (ω₁ × v₂ − ω₂ × v₁, ω₁ × ω₂)."""
    return spatial.cross(w1, v2) - spatial.cross(w2, v1), spatial.cross(w1, w2)


def lagrangian_partials(tree: Tree, params: TreeParams, q, qd, wrenches=None):
    """(∂L/∂q + Q, ∂L/∂q̇) [n] each at (q, q̇): L = T − V (bodies, armature, gravity, springs)
    and Q the generalized forces of extra world wrenches (f, τ at the origin) on the bodies,
    ``wrenches`` = (f [nb, 3] N, τ [nb, 3] N m) or None."""
    subtree, parent, revolute, body = _structure(tree)
    R, p = world_poses(tree, params, q)
    g, b = params.joints, params.bodies
    a = spatial.matvec(R[body], g.axis[body])  # joint axes, world
    o = spatial.matvec(R[body], g.anchor[body]) + p[body]  # points on them, world
    S_w = revolute * a
    S_v = revolute * spatial.cross(o, a) + (1.0 - revolute) * a
    # Twists of the bodies (at the origin): the sum over their ancestors' joints.
    V_v = subtree.T @ (S_v * qd[:, None])
    V_w = subtree.T @ (S_w * qd[:, None])
    c = spatial.matvec(R, b.com) + p
    l = b.mass[:, None] * (V_v + spatial.cross(V_w, c))
    Iw = spatial.matvec(R, spatial.matvec(b.inertia, spatial.rmatvec(R, V_w)))
    k = spatial.cross(c, l) + Iw
    H_l, H_k = subtree @ l, subtree @ k
    momentum = jnp.sum(S_v * H_l + S_w * H_k, axis=-1) + params.dofs.armature * qd
    # U_j: the twist of the body joint j hangs from (zero on the world).
    U_v = parent @ jnp.concatenate([V_v, jnp.zeros((1, 3), V_v.dtype)])
    U_w = parent @ jnp.concatenate([V_w, jnp.zeros((1, 3), V_w.dtype)])
    B_v, B_w = _bracket(U_v, U_w, S_v, S_w)
    dT_dq = jnp.sum(H_l * B_v + H_k * B_w, axis=-1)
    f = b.mass[:, None] * params.gravity
    tau = spatial.cross(c, f)
    if wrenches is not None:
        f, tau = f + wrenches[0], tau + wrenches[1]
    Q = jnp.sum(S_v * (subtree @ f) + S_w * (subtree @ tau), axis=-1)
    d = params.dofs
    return dT_dq + Q - d.stiffness * (q - d.springref), momentum


def load_wrenches(tree: Tree, bodies, points_world, forces_world):
    """(f, τ) [nb, 3] at the origin of point forces F [n_loads, 3] (N) at world points x
    [n_loads, 3] (m) on ``bodies`` (static indices)."""
    onehot = jnp.asarray(np.eye(tree.n_bodies)[np.asarray(bodies, dtype=int)].T)
    return onehot @ forces_world, onehot @ spatial.cross(points_world, forces_world)


def slot_derivatives(tree: Tree, params: TreeParams, q0, q1, h, wrenches_of=None, ua=None):
    """(D₁L_d + F⁻, D₂L_d + F⁺) [n] each: the midpoint slots of eq. 15 with the even split of
    the forces outside V (``midpoint``). ``wrenches_of(q̄)`` gives extra world wrenches at the
    midpoint (point loads, held over the step) and ``ua`` the actuator inputs."""
    qm, v = 0.5 * (q0 + q1), (q1 - q0) / h
    extra = None if wrenches_of is None else wrenches_of(qm)
    dL_dq, dL_dv = lagrangian_partials(tree, params, qm, v, extra)
    if ua is None:
        ua = jnp.zeros(tree.n_actuators, q0.dtype)
    forces = midpoint.nonconservative_forces(tree, params, qm, v, ua)
    common = 0.5 * h * (dL_dq + forces)
    return common - dL_dv, common + dL_dv
