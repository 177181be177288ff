"""Rigid bodies in maximal coordinates and frictional hinge joints (Marklund et al. 2.1–2.4, F).

A ``System`` is the static structure (which bodies, which hinges, which features); the numbers
live in a ``Params`` pytree so that JAX can differentiate with respect to them. Configurations
are ``q = (r[nb, 3], e[nb, 4])`` (centre of mass position, scalar-first quaternion body→world);
velocities ``v[nb, 6]`` hold (linear velocity, world-frame angular velocity) per body.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import jax
import jax.numpy as jnp

from physid.dynamics.quaternion import boxplus, qconj, qmul, rotate

WORLD = -1


@dataclass(frozen=True)
class Hinge:
    """A hinge (F.1) between ``parent`` (a body index or WORLD) and ``child``.

    ``*_point`` is the hinge location and ``*_frame`` a quaternion whose x axis is the hinge axis,
    both in the parent's / child's body frame (world frame for WORLD). ``dry``, ``viscous`` and
    ``motor`` switch on the friction rows (F.4), the viscous drag row (F.2) and the motor row
    (F.3); ``stribeck`` makes the dry coefficient follow (4.1).
    """

    parent: int
    child: int
    parent_point: tuple[float, float, float]
    parent_frame: tuple[float, float, float, float]
    child_point: tuple[float, float, float]
    child_frame: tuple[float, float, float, float]
    dry: bool = False
    viscous: bool = True
    motor: bool = False
    stribeck: bool = False


@dataclass(frozen=True)
class System:
    """Static structure of a multibody system: number of bodies and its hinges."""

    n_bodies: int
    hinges: tuple[Hinge, ...]

    @property
    def n_dof(self) -> int:
        return 6 * self.n_bodies


class HingeParams(NamedTuple):
    """Numbers of one hinge, SI units.

    eps_lin (m/N), eps_rot (rad/(N m)): compliances; tau (s): damping time (2.9);
    b (N m s/rad): viscous coefficient (F.2); mu: dry coefficient of the rotational rows and
    r (m): internal distance that turns it into the translational rows' coefficient r·mu (F.4);
    eps_fric (rad/(N m s)): velocity-level compliance of the friction rows, so that Σ_t =
    eps_fric/h and a sticking hinge creeps at eps_fric × (held torque);
    mu_delta, zeta (s²/rad²): Stribeck excess and transition (4.1); K (N m/V), J_shaft (kg m²):
    motor gain and shaft inertia (F.3).
    """

    eps_lin: jnp.ndarray
    eps_rot: jnp.ndarray
    tau: jnp.ndarray
    b: jnp.ndarray
    mu: jnp.ndarray
    r: jnp.ndarray
    eps_fric: jnp.ndarray
    mu_delta: jnp.ndarray
    zeta: jnp.ndarray
    K: jnp.ndarray
    J_shaft: jnp.ndarray


class Params(NamedTuple):
    """Numbers of a system: masses m[nb] (kg), principal inertias J[nb, 3] (kg m²) about the
    body axes, gravity vector g[3] (m/s²; magnitude 9.82 rotated by the tilt), hinges."""

    m: jnp.ndarray
    J: jnp.ndarray
    g: jnp.ndarray
    hinges: tuple[HingeParams, ...]


def boxplus_config(q, dq: jnp.ndarray):
    """q ⊞ dq (2.16): translations add, rotations compose; dq is [nb, 6] (Δr, ψ)."""
    return boxplus_parts(q, dq[:, :3], dq[:, 3:])


def boxplus_parts(q, dr: jnp.ndarray, dpsi: jnp.ndarray):
    """q ⊞ (Δr [nb, 3], ψ [nb, 3]): :func:`boxplus_config` with the two parts apart, so that
    forward mode can differentiate with respect to one while the other's tangent stays a
    symbolic zero."""
    r, e = q
    return r + dr, jax.vmap(boxplus)(e, dpsi)


def mass_matrix_blocks(params: Params, e: jnp.ndarray) -> jnp.ndarray:
    """Per-body 6×6 blocks of M(q) (2.3): diag(m I, R J Rᵀ)."""

    def block(m, J, e_b):
        R = jax.vmap(lambda c: rotate(e_b, c))(jnp.eye(3)).T
        Jw = R @ jnp.diag(J) @ R.T
        top = jnp.concatenate([m * jnp.eye(3), jnp.zeros((3, 3))], axis=1)
        bottom = jnp.concatenate([jnp.zeros((3, 3)), Jw], axis=1)
        return jnp.concatenate([top, bottom], axis=0)

    return jax.vmap(block)(params.m, params.J, e)


def applied_forces(params: Params, blocks: jnp.ndarray, v: jnp.ndarray) -> jnp.ndarray:
    """f + f_g per body [nb, 6]: gravity m g and the fictitious torque −ω × (J ω) (2.3)."""
    force = params.m[:, None] * params.g[None, :]
    w = v[:, 3:]
    Jw = jnp.einsum("bij,bj->bi", blocks[:, 3:, 3:], w)
    return jnp.concatenate([force, -jnp.cross(w, Jw)], axis=1)


def _frame_state(q, body: int, point, frame):
    """World position and orientation of an attachment frame on ``body`` (or the world)."""
    r, e = q
    point = jnp.asarray(point, dtype=float)
    frame = jnp.asarray(frame, dtype=float)
    if body == WORLD:
        return point, frame
    return r[body] + rotate(e[body], point), qmul(e[body], frame)


def hinge_violation(q, hinge: Hinge) -> jnp.ndarray:
    """g(q) of (F.1): [r_a − r_b; x_a·y_b; x_a·z_b], 5 rows (m, m, m, 1, 1)."""
    ra, ea = _frame_state(q, hinge.parent, hinge.parent_point, hinge.parent_frame)
    rb, eb = _frame_state(q, hinge.child, hinge.child_point, hinge.child_frame)
    xa = rotate(ea, jnp.array([1.0, 0.0, 0.0]))
    yb = rotate(eb, jnp.array([0.0, 1.0, 0.0]))
    zb = rotate(eb, jnp.array([0.0, 0.0, 1.0]))
    return jnp.concatenate([ra - rb, jnp.stack([xa @ yb, xa @ zb])])


def hinge_angle_rate_row(q, hinge: Hinge, n_bodies: int) -> jnp.ndarray:
    """Ḡ of (F.2): the row mapping velocities to the relative rotation rate about the axis."""
    _, eb = _frame_state(q, hinge.child, hinge.child_point, hinge.child_frame)
    axis = rotate(eb, jnp.array([1.0, 0.0, 0.0]))
    row = jnp.zeros((n_bodies, 6))
    row = row.at[hinge.child, 3:].set(axis)
    if hinge.parent != WORLD:
        row = row.at[hinge.parent, 3:].add(-axis)
    return row.reshape(-1)


def _skew(a: jnp.ndarray) -> jnp.ndarray:
    """[a]×, with [a]× b = a × b."""
    zero = jnp.zeros_like(a[0])
    return jnp.stack(
        [
            jnp.stack([zero, -a[2], a[1]]),
            jnp.stack([a[2], zero, -a[0]]),
            jnp.stack([-a[1], a[0], zero]),
        ]
    )


def hinge_kinematics(q, hinge: Hinge, n_bodies: int):
    """g (F.1), its Jacobian G [5, 6 nb] and the axis rate row Ḡ [6 nb] (F.2) of one hinge.

    G is written out instead of forward-differentiated (:func:`constraint_jacobian`): with
    world-frame angular velocities an attachment offset ρ = R p moves as ω × ρ and an axis x
    as ω × x, so ġ = [v_a − [ρ_a]× ω_a − v_b + [ρ_b]× ω_b; (x_a × y_b)·(ω_a − ω_b);
    (x_a × z_b)·(ω_a − ω_b)], exactly the derivative of g(q ⊞ δ) at δ = 0 (D.12). The
    forward-mode version costs a SPOOK step about 12 µs of small XLA kernels, this about 2;
    tests check the two agree to rounding.
    """
    ra, ea = _frame_state(q, hinge.parent, hinge.parent_point, hinge.parent_frame)
    rb, eb = _frame_state(q, hinge.child, hinge.child_point, hinge.child_frame)
    xa = rotate(ea, jnp.array([1.0, 0.0, 0.0]))
    xb = rotate(eb, jnp.array([1.0, 0.0, 0.0]))
    yb = rotate(eb, jnp.array([0.0, 1.0, 0.0]))
    zb = rotate(eb, jnp.array([0.0, 0.0, 1.0]))
    g = jnp.concatenate([ra - rb, jnp.stack([xa @ yb, xa @ zb])])
    turn = jnp.stack([jnp.cross(xa, yb), jnp.cross(xa, zb)])  # rows 3, 4 per unit ω_a − ω_b
    zeros = jnp.zeros((5, 6))
    blocks, rate = [], []
    for body in range(n_bodies):
        block, axis = zeros, jnp.zeros(6)
        if body == hinge.parent:
            rho = ra - q[0][body]
            pos = jnp.concatenate([jnp.eye(3), -_skew(rho)], axis=1)
            block = block + jnp.concatenate([pos, jnp.pad(turn, ((0, 0), (3, 0)))])
            axis = axis - jnp.concatenate([jnp.zeros(3), xb])
        if body == hinge.child:
            rho = rb - q[0][body]
            pos = jnp.concatenate([-jnp.eye(3), _skew(rho)], axis=1)
            block = block + jnp.concatenate([pos, jnp.pad(-turn, ((0, 0), (3, 0)))])
            axis = axis + jnp.concatenate([jnp.zeros(3), xb])
        blocks.append(block)
        rate.append(axis)
    return g, jnp.concatenate(blocks, axis=1), jnp.concatenate(rate)


def constraint_jacobian(fun, q, n_bodies: int) -> jnp.ndarray:
    """G with ġ = G v, by forward differentiation of g(q ⊞ δ) at δ = 0 (exact JVP of D.2)."""

    def moved(delta):
        return fun(boxplus_config(q, delta.reshape(n_bodies, 6)))

    return jax.jacfwd(moved)(jnp.zeros(6 * n_bodies))


def hinge_relative_rotation(q, hinge: Hinge) -> jnp.ndarray:
    """Quaternion of the child attachment frame relative to the parent's."""
    _, ea = _frame_state(q, hinge.parent, hinge.parent_point, hinge.parent_frame)
    _, eb = _frame_state(q, hinge.child, hinge.child_point, hinge.child_frame)
    return qmul(qconj(ea), eb)


def hinge_angle(q, hinge: Hinge) -> jnp.ndarray:
    """Rotation angle (rad, in (−π, π]) of the child about the hinge axis relative to the parent."""
    rel = hinge_relative_rotation(q, hinge)
    return 2.0 * jnp.arctan2(rel[1], rel[0])


def hinge_at_rest(
    parent: int,
    child: int,
    point_world,
    axis_world,
    rest_r: jnp.ndarray,
    rest_e: jnp.ndarray,
    **features,
) -> Hinge:
    """A hinge through ``point_world`` about unit ``axis_world`` for bodies placed at their rest
    configuration (rest_r, rest_e); its joint angle is zero at rest."""
    import numpy as np

    from physid.dynamics.quaternion import axis_angle

    point = np.asarray(point_world, float)
    axis = np.asarray(axis_world, float)
    axis = axis / np.linalg.norm(axis)
    # A world frame whose x axis is the hinge axis: rotate x̂ onto the axis.
    x = np.array([1.0, 0.0, 0.0])
    cross, cos = np.cross(x, axis), float(x @ axis)
    if np.linalg.norm(cross) < 1e-12:
        frame_w = np.array([1.0, 0, 0, 0]) if cos > 0 else np.array([0.0, 0, 0, 1])
    else:
        frame_w = np.asarray(
            axis_angle(cross / np.linalg.norm(cross), float(np.arctan2(np.linalg.norm(cross), cos)))
        )

    def local(body):
        if body == WORLD:
            return tuple(point.tolist()), tuple(frame_w.tolist())
        e = jnp.asarray(rest_e[body])
        p = rotate(qconj(e), jnp.asarray(point - np.asarray(rest_r[body])))
        f = qmul(qconj(e), jnp.asarray(frame_w))
        return tuple(np.asarray(p).tolist()), tuple(np.asarray(f).tolist())

    pp, pf = local(parent)
    cp, cf = local(child)
    return Hinge(parent, child, pp, pf, cp, cf, **features)
