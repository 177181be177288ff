"""Unit quaternions (scalar-first w, x, y, z) and the ⊞ / ⊟ operators on rotations.

Angular velocities and rotation vectors are expressed in the world frame, so a rotation
vector ψ acts by left multiplication: ``e ⊞ ψ = exp(ψ) ⋆ e`` (the world-frame form of
Marklund et al. (2.13); with ``J(q)`` in world axes as in (2.3) this keeps every Jacobian in
one frame).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def qmul(a: jnp.ndarray, b: jnp.ndarray) -> jnp.ndarray:
    """Quaternion product a ⋆ b."""
    aw, av = a[..., 0], a[..., 1:]
    bw, bv = b[..., 0], b[..., 1:]
    w = aw * bw - jnp.sum(av * bv, axis=-1)
    v = aw[..., None] * bv + bw[..., None] * av + jnp.cross(av, bv)
    return jnp.concatenate([w[..., None], v], axis=-1)


def qconj(e: jnp.ndarray) -> jnp.ndarray:
    """Conjugate (the inverse of a unit quaternion)."""
    return e * jnp.array([1.0, -1.0, -1.0, -1.0])


def rotate(e: jnp.ndarray, p: jnp.ndarray) -> jnp.ndarray:
    """Rotate vector p by unit quaternion e: R(e) p."""
    w, v = e[..., :1], e[..., 1:]
    t = 2.0 * jnp.cross(v, p)
    return p + w * t + jnp.cross(v, t)


def to_matrix(e: jnp.ndarray) -> jnp.ndarray:
    """Rotation matrix R(e) whose columns are the body axes in world coordinates."""
    eye = jnp.eye(3)
    return jnp.stack([rotate(e, eye[i]) for i in range(3)], axis=-1)


@jax.custom_jvp
def from_rotvec(psi: jnp.ndarray) -> jnp.ndarray:
    """Quaternion of rotation vector ψ (D.8); exact value and derivatives at ψ = 0."""
    a2 = jnp.sum(psi * psi)
    small = a2 < 1e-16
    angle = jnp.sqrt(jnp.where(small, 1.0, a2))
    # cos(a/2) -> 1 - a^2/8 and sin(a/2)/a -> 1/2 - a^2/48 near zero.
    c = jnp.where(small, 1.0 - a2 / 8.0, jnp.cos(angle / 2.0))
    k = jnp.where(small, 0.5 - a2 / 48.0, jnp.sin(angle / 2.0) / angle)
    return jnp.concatenate([c[None], k * psi])


@from_rotvec.defjvp
def _from_rotvec_jvp(primals, tangents):
    """Appendix D.2 (D.9–D.11): the tangent stays finite and exact at ψ = 0 (D.12).

    The rule is written in |ψ|² and takes the square root only of a value kept away from
    zero, so that it is itself differentiable there: a Hessian through ⊞ at δ = 0 (second
    derivatives of the residuals) would otherwise read d|ψ| = ψ/|ψ| = 0/0 and be NaN."""
    (psi,), (dpsi,) = primals, tangents
    e = from_rotvec(psi)
    a2 = jnp.sum(psi * psi)
    small = a2 < 1e-8
    a = jnp.sqrt(jnp.where(small, 1.0, a2))
    dot = jnp.sum(psi * dpsi)
    s, c = jnp.sin(a / 2.0), jnp.cos(a / 2.0)
    # Exact expressions (D.9, D.10) away from zero ...
    des_exact = -dot / (2.0 * a) * s
    dev_exact = (dpsi / a - psi * dot / a**3) * s + psi / a * dot / (2.0 * a) * c
    # ... and the series (D.11) near zero, which reduces to (0, dψ/2) at ψ = 0 (D.12).
    des_series = -dot * (0.25 - a2 / 96.0)
    dev_series = dpsi * (0.5 - a2 / 48.0) + psi * dot * (-1.0 / 24.0)
    des = jnp.where(small, des_series, des_exact)
    dev = jnp.where(small, dev_series, dev_exact)
    return e, jnp.concatenate([des[None], dev])


def to_rotvec(e: jnp.ndarray) -> jnp.ndarray:
    """Rotation vector of unit quaternion e (exact log map, (3.23) written with atan2).

    ``2·atan2(|e_v|, e_s)·e_v/|e_v|`` is smooth at the identity (unlike arccos) and picks the
    short way round by flipping the sign of e when e_s < 0.
    """
    e = jnp.where(e[0] < 0.0, -e, e)
    s = jnp.sqrt(jnp.sum(e[1:] ** 2))
    small = s < 1e-8
    safe_s = jnp.where(small, 1.0, s)
    # 2 atan2(s, c) / s -> (2/c)(1 - s^2/(3c^2)) as s -> 0.
    factor = jnp.where(
        small,
        2.0 / e[0] * (1.0 - s**2 / (3.0 * e[0] ** 2)),
        2.0 * jnp.arctan2(safe_s, e[0]) / safe_s,
    )
    return factor * e[1:]


def boxplus(e: jnp.ndarray, psi: jnp.ndarray) -> jnp.ndarray:
    """e ⊞ ψ (2.14): rotate e by the world-frame rotation vector ψ."""
    return qmul(from_rotvec(psi), e)


def boxminus(ea: jnp.ndarray, eb: jnp.ndarray) -> jnp.ndarray:
    """ea ⊟ eb (2.15): the world-frame rotation vector ψ with eb ⊞ ψ = ea."""
    return to_rotvec(qmul(ea, qconj(eb)))


def boxminus_small_angle(ea: jnp.ndarray, eb: jnp.ndarray) -> jnp.ndarray:
    """Small-angle rotation residual (3.24): ψ ≈ 2 e'_s e'_v with e' = ea ⋆ eb*."""
    d = qmul(ea, qconj(eb))
    return 2.0 * d[0] * d[1:]


def axis_angle(axis, angle: float) -> jnp.ndarray:
    """Quaternion of a rotation by ``angle`` (rad) about unit ``axis``."""
    axis = jnp.asarray(axis, dtype=float)
    return jnp.concatenate([jnp.cos(angle / 2.0)[None], jnp.sin(angle / 2.0) * axis])
