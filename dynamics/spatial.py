"""Spatial algebra of rigid bodies in the Lie-algebra form of Lutter et al. (eqs. 1–3).

Conventions (docs/newton-euler.md):

- A *twist* (generalized velocity) is ``[v, ω]``: the linear velocity of the point at the
  frame's origin, then the angular velocity, both in that frame's coordinates. Accelerations
  (derivatives of twists) use the same order. A *wrench* is ``[f, τ]``: force, then moment
  about the frame's origin. This is the order of the paper's text and of Pinocchio; MuJoCo
  writes rotation first.
- A transform ``T = (R, p)`` is the pose of frame B in frame A: ``x_A = R x_B + p``.
- With that order the spatial inertia (1) reads ``[[m 1, −m[c]], [m[c], J_o]]`` with
  ``J_o = J_c − m[c][c]`` the rotational inertia about the origin (the paper prints J in the
  top-left corner, which is the ``[ω, v]`` order, and ``+m[p][p]`` in its Appendix (5), which
  has the wrong sign: ``[c][c] = c cᵀ − |c|² 1`` is negative semidefinite).

The 6×6 operators (``adjoint``, ``ad``, ``spatial_inertia``) are the paper's; the algorithms use
the equivalent 3-vector forms (``motion_to_parent`` ...), which are tested against them and do
a fraction of the arithmetic. All functions act on one body; ``jax.vmap`` them for batches.
"""

from __future__ import annotations

import jax.numpy as jnp


def skew(x):
    """[x]: the 3×3 matrix with [x] y = x × y."""
    x0, x1, x2 = x[0], x[1], x[2]
    z = jnp.zeros_like(x0)
    return jnp.array([[z, -x2, x1], [x2, z, -x0], [-x1, x0, z]])


def rotation_about(axis, angle):
    """Rotation matrix by ``angle`` (rad) about the unit vector ``axis`` (Rodrigues)."""
    K = skew(axis)
    return jnp.eye(3) + jnp.sin(angle) * K + (1.0 - jnp.cos(angle)) * (K @ K)


def rpy_matrix(rpy):
    """R_z(φ_z) R_y(φ_y) R_x(φ_x) of the paper's fixed transform (4); rpy = (φ_x, φ_y, φ_z)."""
    ex, ey, ez = jnp.eye(3)
    return rotation_about(ez, rpy[2]) @ rotation_about(ey, rpy[1]) @ rotation_about(ex, rpy[0])


def quat_matrix(quat):
    """Rotation matrix of the scalar-first unit quaternion (w, x, y, z)."""
    w, x, y, z = quat[0], quat[1], quat[2], quat[3]
    return jnp.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
            [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
            [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
        ]
    )


def compose(T_ab, T_bc):
    """T_ac = T_ab T_bc for transforms given as (R, p)."""
    R_ab, p_ab = T_ab
    R_bc, p_bc = T_bc
    return R_ab @ R_bc, R_ab @ p_bc + p_ab


# --- the paper's 6×6 operators ---------------------------------------------------------------


def adjoint(R, p):
    """Ad_T (2): maps a twist in B coordinates to A coordinates, T = (R, p) the pose of B in A."""
    top = jnp.concatenate([R, skew(p) @ R], axis=1)
    bottom = jnp.concatenate([jnp.zeros((3, 3)), R], axis=1)
    return jnp.concatenate([top, bottom], axis=0)


def ad(twist):
    """ad_V, the Lie bracket [V, ·] of se(3): ad_V W = V × W for twists (motion cross product)."""
    v, w = twist[:3], twist[3:]
    top = jnp.concatenate([skew(w), skew(v)], axis=1)
    bottom = jnp.concatenate([jnp.zeros((3, 3)), skew(w)], axis=1)
    return jnp.concatenate([top, bottom], axis=0)


def spatial_inertia(mass, com, inertia_com):
    """M̄ (1) about the body frame's origin in the [v, ω] order; ``inertia_com`` is the 3×3
    rotational inertia about the centre of mass ``com`` (body frame), kg m²."""
    C = skew(com)
    J_o = inertia_com - mass * (C @ C)  # parallel axis with −m[c][c] (the paper's (5) has +)
    top = jnp.concatenate([mass * jnp.eye(3), -mass * C], axis=1)
    bottom = jnp.concatenate([mass * C, J_o], axis=1)
    return jnp.concatenate([top, bottom], axis=0)


# --- the same operations on 3-vectors, as the algorithms use them ---------------------------


def motion_from_parent(R, p, twist):
    """Ad_{T⁻¹} V: a twist in parent (A) coordinates expressed in child (B) coordinates."""
    v, w = twist[:3], twist[3:]
    return jnp.concatenate([R.T @ (v - jnp.cross(p, w)), R.T @ w])


def motion_to_parent(R, p, twist):
    """Ad_T V: a twist in child (B) coordinates expressed in parent (A) coordinates."""
    v, w = twist[:3], twist[3:]
    Rw = R @ w
    return jnp.concatenate([R @ v + jnp.cross(p, Rw), Rw])


def force_to_parent(R, p, wrench):
    """Ad*_{T⁻¹} F (3) = Ad_{T⁻¹}ᵀ F: a wrench in child (B) coordinates, about B's origin,
    expressed in parent (A) coordinates about A's origin."""
    f, n = wrench[:3], wrench[3:]
    Rf = R @ f
    return jnp.concatenate([Rf, R @ n + jnp.cross(p, Rf)])


def cross_motion(twist, other):
    """ad_V W = V × W (motion cross product)."""
    v, w = twist[:3], twist[3:]
    ov, ow = other[:3], other[3:]
    return jnp.concatenate([jnp.cross(w, ov) + jnp.cross(v, ow), jnp.cross(w, ow)])


def cross_force(twist, wrench):
    """−ad_Vᵀ F = V ×* F (force cross product), the gyroscopic term of Newton–Euler:
    F = M̄ A + V ×* (M̄ V)."""
    v, w = twist[:3], twist[3:]
    f, n = wrench[:3], wrench[3:]
    return jnp.concatenate([jnp.cross(w, f), jnp.cross(v, f) + jnp.cross(w, n)])


def inertia_times(mass, com, inertia_com, twist):
    """M̄ V without forming M̄: the body's momentum about its frame's origin."""
    v, w = twist[:3], twist[3:]
    lin = mass * (v + jnp.cross(w, com))  # m (v − [c] ω)
    J_o_w = inertia_com @ w + mass * jnp.cross(com, jnp.cross(w, com))  # (J_c − m[c][c]) ω
    return jnp.concatenate([lin, J_o_w + mass * jnp.cross(com, v)])


def transform_inertia_to_parent(R, p, inertia6):
    """Ad_{T⁻¹}ᵀ I Ad_{T⁻¹}: a 6×6 (articulated) inertia of a child expressed in the parent
    frame about the parent's origin (as Algorithm 1 accumulates children)."""
    X = adjoint(R.T, -R.T @ p)  # Ad_{T⁻¹}
    return X.T @ inertia6 @ X
