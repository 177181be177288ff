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

The 6×6 operators (``adjoint``, ``ad``, ``spatial_inertia``) are the paper's; the recursions
use the equivalent 3-vector forms (``motion_from_parent`` ...), tested against them. Small
products are written out as sums of elementwise products (``matvec``, ``matmul``): batched
over states, XLA fuses those into a few vectorized loops, whereas a batched 3×3 dot product
or a contraction with a constant tensor runs 10–30× slower on the CPU. Every function accepts
leading batch axes (bodies, states).
"""

from __future__ import annotations

import jax.numpy as jnp


def matvec(A, x):
    """A x over the last two axes of A [.., m, k] and the last of x [.., k]."""
    out = A[..., :, 0] * x[..., 0:1]
    for k in range(1, A.shape[-1]):
        out = out + A[..., :, k] * x[..., k : k + 1]
    return out


def rmatvec(A, x):
    """Aᵀ x."""
    out = A[..., 0, :] * x[..., 0:1]
    for k in range(1, A.shape[-2]):
        out = out + A[..., k, :] * x[..., k : k + 1]
    return out


def matmul(A, B):
    """A B over the last two axes."""
    out = A[..., :, 0:1] * B[..., 0:1, :]
    for k in range(1, A.shape[-1]):
        out = out + A[..., :, k : k + 1] * B[..., k : k + 1, :]
    return out


def transpose(A):
    return jnp.swapaxes(A, -1, -2)


def cross(a, b):
    """a × b for 3-vectors."""
    a0, a1, a2 = a[..., 0], a[..., 1], a[..., 2]
    b0, b1, b2 = b[..., 0], b[..., 1], b[..., 2]
    return jnp.stack([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0], axis=-1)


def skew(x):
    """[x]: the 3×3 matrix with [x] y = x × y."""
    x0, x1, x2 = x[..., 0], x[..., 1], x[..., 2]
    z = jnp.zeros_like(x0)
    return jnp.stack(
        [jnp.stack([z, -x2, x1], -1), jnp.stack([x2, z, -x0], -1), jnp.stack([-x1, x0, z], -1)],
        axis=-2,
    )


def rotation_about(axis, angle):
    """Rotation matrix by ``angle`` (rad) about the unit vector ``axis`` (Rodrigues:
    cos θ 1 + sin θ [a] + (1 − cos θ) a aᵀ)."""
    s, c = jnp.sin(angle)[..., None, None], jnp.cos(angle)[..., None, None]
    outer = axis[..., :, None] * axis[..., None, :]
    return c * jnp.eye(3) + s * skew(axis) + (1.0 - c) * outer


def rpy_matrix(rpy):
    """R_z(φ_z) R_y(φ_y) R_x(φ_x) of the paper's fixed transform (4); rpy = (φ_x, φ_y, φ_z)."""
    ex, ey, ez = jnp.eye(3)
    Rx = rotation_about(ex, rpy[..., 0])
    Ry = rotation_about(ey, rpy[..., 1])
    Rz = rotation_about(ez, rpy[..., 2])
    return matmul(Rz, matmul(Ry, Rx))


def quat_matrix(quat):
    """Rotation matrix of the scalar-first unit quaternion (w, x, y, z)."""
    w, x, y, z = quat[..., 0], quat[..., 1], quat[..., 2], quat[..., 3]
    rows = [
        [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
        [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
        [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
    ]
    return jnp.stack([jnp.stack(r, -1) for r in rows], -2)


def compose(T_ab, T_bc):
    """T_ac = T_ab T_bc for transforms given as (R, p)."""
    R_ab, p_ab = T_ab
    R_bc, p_bc = T_bc
    return matmul(R_ab, R_bc), matvec(R_ab, p_bc) + p_ab


# --- the paper's 6×6 operators ---------------------------------------------------------------


def _blocks(a, b, c, d):
    return jnp.concatenate(
        [jnp.concatenate([a, b], axis=-1), jnp.concatenate([c, d], axis=-1)], axis=-2
    )


def adjoint(R, p):
    """Ad_T (2): maps a twist in B coordinates to A coordinates, T = (R, p) the pose of B in A."""
    return _blocks(R, matmul(skew(p), R), jnp.zeros_like(R), R)


def adjoint_inverse(R, p):
    """Ad_{T⁻¹} = [[Rᵀ, −Rᵀ[p]], [0, Rᵀ]]: a twist in A coordinates expressed in B's."""
    Rt = transpose(R)
    return _blocks(Rt, -matmul(Rt, skew(p)), jnp.zeros_like(R), Rt)


def ad(twist):
    """ad_V = [[[ω], [v]], [0, [ω]]]: ad_V W = V × W, the Lie bracket of se(3)."""
    W, V = skew(twist[..., 3:]), skew(twist[..., :3])
    return _blocks(W, V, jnp.zeros_like(W), W)


def ad_star(twist):
    """−ad_Vᵀ = [[[ω], 0], [[v], [ω]]]: −ad_Vᵀ F = V ×* F (the paper's ad*)."""
    W, V = skew(twist[..., 3:]), skew(twist[..., :3])
    return _blocks(W, jnp.zeros_like(W), V, W)


def spatial_inertia(mass, com, inertia_com):
    """M̄ (1) about the body frame's origin in the [v, ω] order; ``inertia_com`` is the 3×3
    rotational inertia about the centre of mass ``com`` (body frame), kg m²."""
    mass = jnp.asarray(mass)[..., None, None]
    C = skew(com)
    J_o = inertia_com - mass * matmul(C, C)  # parallel axis −m[c][c] (the paper's (5) has +)
    return _blocks(mass * jnp.eye(3), -mass * C, mass * C, J_o)


# --- the same operations on 3-vectors, as the recursions use them --------------------------


def motion_from_parent(R, p, twist):
    """Ad_{T⁻¹} V: a twist in parent (A) coordinates expressed in child (B) coordinates."""
    v, w = twist[..., :3], twist[..., 3:]
    return jnp.concatenate([rmatvec(R, v - cross(p, w)), rmatvec(R, w)], axis=-1)


def motion_to_parent(R, p, twist):
    """Ad_T V: a twist in child (B) coordinates expressed in parent (A) coordinates."""
    v, w = twist[..., :3], twist[..., 3:]
    Rw = matvec(R, w)
    return jnp.concatenate([matvec(R, v) + cross(p, Rw), Rw], axis=-1)


def force_to_parent(R, p, wrench):
    """Ad*_{T⁻¹} F (3) = Ad_{T⁻¹}ᵀ F: a wrench in child (B) coordinates, about B's origin,
    expressed in parent (A) coordinates about A's origin."""
    f, n = wrench[..., :3], wrench[..., 3:]
    Rf = matvec(R, f)
    return jnp.concatenate([Rf, matvec(R, n) + cross(p, Rf)], axis=-1)


def inertia_to_parent(R, p, inertia6):
    """Ad_{T⁻¹}ᵀ I Ad_{T⁻¹}: a 6×6 (articulated) inertia of a child expressed in the parent
    frame about the parent's origin, as Algorithm 1 accumulates children."""
    return from_blocks(*blocks_to_parent(R, p, *to_blocks(inertia6)))


# Symmetric 6×6 inertias as their 3×3 blocks (A, B, C) = [[A, B], [Bᵀ, C]]: the recursions
# transform and update them block by block, without assembling 6×6 matrices.


def to_blocks(inertia6):
    return inertia6[..., :3, :3], inertia6[..., :3, 3:], inertia6[..., 3:, 3:]


def from_blocks(A, B, C):
    return _blocks(A, B, transpose(B), C)


def body_blocks(mass, com, inertia_com):
    """(A, B, C) of M̄ (1): (m 1, −m[c], J_c − m[c][c])."""
    m = jnp.asarray(mass)[..., None, None]
    Cx = skew(com)
    return m * jnp.eye(3), -m * Cx, inertia_com - m * matmul(Cx, Cx)


def blocks_times(A, B, C, x):
    """[[A, B], [Bᵀ, C]] x for a 6-vector x."""
    xl, xw = x[..., :3], x[..., 3:]
    return jnp.concatenate([matvec(A, xl) + matvec(B, xw), rmatvec(B, xl) + matvec(C, xw)], -1)


def blocks_to_parent(R, p, A, B, C):
    """Xᵀ [[A, B], [Bᵀ, C]] X for X = Ad_{T⁻¹} = diag(Rᵀ, Rᵀ) [[1, −P], [0, 1]], P = [p]:
    rotate each block (R · Rᵀ), then shift by p: A, B − A P, C + P B − Bᵀ P − P A P."""
    Rt = transpose(R)
    A1, B1, C1 = (matmul(R, matmul(M, Rt)) for M in (A, B, C))
    P = skew(p)
    AP = matmul(A1, P)
    PB = matmul(P, B1)
    C2 = C1 + PB + transpose(PB) - matmul(P, AP)
    return A1, B1 - AP, C2


def cross_motion(twist, other):
    """ad_V W = V × W (motion cross product)."""
    v, w = twist[..., :3], twist[..., 3:]
    ov, ow = other[..., :3], other[..., 3:]
    return jnp.concatenate([cross(w, ov) + cross(v, ow), cross(w, ow)], axis=-1)


def cross_force(twist, wrench):
    """−ad_Vᵀ F = V ×* F, the gyroscopic term of Newton–Euler: F = M̄ A + V ×* (M̄ V)."""
    v, w = twist[..., :3], twist[..., 3:]
    f, n = wrench[..., :3], wrench[..., 3:]
    return jnp.concatenate([cross(w, f), cross(v, f) + cross(w, n)], axis=-1)


def inertia_times(mass, com, inertia_com, twist):
    """M̄ V without forming M̄: the body's momentum about its frame's origin."""
    v, w = twist[..., :3], twist[..., 3:]
    m = jnp.asarray(mass)[..., None]
    lin = m * (v + cross(w, com))  # m (v − [c] ω)
    ang = matvec(inertia_com, w) + m * (cross(com, cross(w, com)) + cross(com, v))
    return jnp.concatenate([lin, ang], axis=-1)


def wrench_regressor(twist, acc):
    """A(V, A) [.., 6, 10] with M̄(φ) A + V ×* (M̄(φ) V) = A(V, A) φ (Atkeson et al.), for
    φ = [m, m c, I_o (xx, xy, yy, xz, yz, zz)] (newton_euler.INERTIAL_NAMES):

        A = [[a + ω × v,  [α] + [ω]²,       0                ],
             [0,          −[a + ω × v],     L(α) + [ω] L(ω)  ]]

    with V = [v, ω], A = [a, α] and L(x) the 3×6 matrix with I x = L(x) ι."""
    v, w = twist[..., :3], twist[..., 3:]
    a, alpha = acc[..., :3], acc[..., 3:]
    lin = a + cross(w, v)
    W = skew(w)
    first = skew(alpha) + matmul(W, W)
    L_alpha, L_w = _inertia_basis(alpha), _inertia_basis(w)
    rot = L_alpha + matmul(W, L_w)
    zero6 = jnp.zeros_like(rot)
    top = jnp.concatenate([lin[..., :, None], first, zero6], axis=-1)
    bottom = jnp.concatenate([jnp.zeros_like(lin)[..., :, None], -skew(lin), rot], axis=-1)
    return jnp.concatenate([top, bottom], axis=-2)


def _inertia_basis(x):
    """L(x) [.., 3, 6] with I x = L(x) [xx, xy, yy, xz, yz, zz]."""
    x0, x1, x2 = x[..., 0], x[..., 1], x[..., 2]
    z = jnp.zeros_like(x0)
    return jnp.stack(
        [
            jnp.stack([x0, x1, z, x2, z, z], -1),
            jnp.stack([z, x0, x1, z, x2, z], -1),
            jnp.stack([z, z, z, x0, x1, x2], -1),
        ],
        axis=-2,
    )
