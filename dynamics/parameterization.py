"""Physically plausible parameters of a body by construction (Lutter et al., Appendix
"Virtual Physical Parameters"), the unconstrained alternative to the pseudo-inertia LMI of
``estimation.consistency``.

Virtual parameters of one body: θ_√m (mass m = θ_√m²), θ_√L (3; the central second moments of
the mass distribution along its principal axes, L_i = θ_√L,i²), θ_J (3; roll-pitch-yaw of the
principal axes in the body frame, R_J = R_z R_y R_x as in (4)) and the centre of mass p_m.
Then J_p = diag(L₂ + L₃, L₁ + L₃, L₁ + L₂) is positive semidefinite and satisfies the triangle
inequalities for every θ, and the inertia about the centre of mass is R_J J_p R_Jᵀ.

The Appendix's (5) carries it to the body origin with ``+ m[p][p]``; the correct parallel-axis
term is ``− m[p][p]`` (``[p][p] = p pᵀ − |p|² 1`` is negative semidefinite, the inertia about
the origin is the larger one): ``inertia_about_origin``.

The same every-value-is-physical idea for kinematics: a placement is (p_k, θ_R) with
R = R_z R_y R_x (4), ``placement_rotation``.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from physid.dynamics import spatial
from physid.dynamics.tree import BodyParams


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class PlausibleBodies:
    """Virtual parameters of every body: sqrt_mass [nb], sqrt_moments [nb, 3] (√(kg m²)),
    rpy [nb, 3] (rad), com [nb, 3] (m). Every value gives a physical body."""

    sqrt_mass: jnp.ndarray
    sqrt_moments: jnp.ndarray
    rpy: jnp.ndarray
    com: jnp.ndarray


def principal_inertia(sqrt_moments):
    """J_p = diag(L₂ + L₃, L₁ + L₃, L₁ + L₂) with L = θ_√L²."""
    L = sqrt_moments**2
    return jnp.stack([L[..., 1] + L[..., 2], L[..., 0] + L[..., 2], L[..., 0] + L[..., 1]], -1)


def to_body_params(theta: PlausibleBodies) -> BodyParams:
    """Mass, centre of mass and inertia about the centre of mass (body frame) of θ."""
    R = jax.vmap(spatial.rpy_matrix)(theta.rpy)
    Jp = principal_inertia(theta.sqrt_moments)
    inertia = jnp.einsum("bij,bj,bkj->bik", R, Jp, R)
    return BodyParams(theta.sqrt_mass**2, theta.com, inertia)


def inertia_about_origin(mass, com, inertia_com):
    """Rotational inertia about the body origin: J = J_c − m[p][p] (the Appendix's (5) with the
    sign corrected)."""
    C = spatial.skew(com)
    return inertia_com - mass * (C @ C)


def from_body_params(bodies: BodyParams) -> PlausibleBodies:
    """θ of physical bodies (inverse of ``to_body_params`` up to the symmetries of the
    eigen-decomposition; NumPy, for initial values). Moments on the boundary map to 0."""
    mass = np.asarray(bodies.mass, float)
    rows_s, rows_r = [], []
    for inertia in np.asarray(bodies.inertia, float):
        w, V = np.linalg.eigh(0.5 * (inertia + inertia.T))
        if np.linalg.det(V) < 0:
            V[:, 0] = -V[:, 0]
        # J_p = diag(L2+L3, L1+L3, L1+L2)  =>  L1 = (J2 + J3 − J1)/2, ...
        L = 0.5 * np.array([w[1] + w[2] - w[0], w[0] + w[2] - w[1], w[0] + w[1] - w[2]])
        rows_s.append(np.sqrt(np.maximum(L, 0.0)))
        rows_r.append(rpy_of(V))
    return PlausibleBodies(
        jnp.sqrt(jnp.asarray(mass)),
        jnp.asarray(np.array(rows_s).reshape(-1, 3)),
        jnp.asarray(np.array(rows_r).reshape(-1, 3)),
        jnp.asarray(bodies.com, float),
    )


def rpy_of(R: np.ndarray) -> np.ndarray:
    """(φ_x, φ_y, φ_z) with R = R_z(φ_z) R_y(φ_y) R_x(φ_x)."""
    R = np.asarray(R, float)
    phi_y = np.arcsin(np.clip(-R[2, 0], -1.0, 1.0))
    phi_x = np.arctan2(R[2, 1], R[2, 2])
    phi_z = np.arctan2(R[1, 0], R[0, 0])
    return np.array([phi_x, phi_y, phi_z])


def placement_rotation(rpy):
    """Rotation of a fixed transform T_O (4) from its roll-pitch-yaw angles."""
    return spatial.rpy_matrix(rpy)
