"""A kinematic tree of rigid bodies in generalized coordinates: its frozen structure, its
numeric parameters (a JAX pytree, differentiable in every entry) and its kinematics.

Structure (``Tree``, static, hashable): bodies in topological order (a parent precedes its
children), each attached to its parent (or the world, −1) by one joint, revolute, prismatic or
fixed. Every revolute and prismatic joint is one degree of freedom; q holds them in body order.

Parameters (``TreeParams``): each body's mass, centre of mass and 3×3 inertia about the centre
of mass (body frame); each joint's placement (pose of the body frame in the parent frame at
q = 0), axis and anchor; each degree of freedom's friction, armature and spring; each
actuator's gains; gravity as a vector. The kinematic entries are parameters, not structure,
so that DiffNEA can fit them (Lutter et al., Appendix "Kinematics").

Joint motion (body frame = the MJCF body frame): a revolute joint turns the body by q about
the line through ``anchor`` along the unit ``axis``; a prismatic joint moves it by q along
``axis``. The pose of body i in its parent is T_λi(q) = T_placement · T_joint(q).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import jax
import jax.numpy as jnp

from dynamics import spatial

REVOLUTE = "revolute"
PRISMATIC = "prismatic"
FIXED = "fixed"
JOINT_TYPES = (REVOLUTE, PRISMATIC, FIXED)

TORQUE = "motor"  # τ = gear · u (MJCF <motor>)
DC_MOTOR = "dc_motor"  # τ = gear k_m (u − gear k_m q̇) / R_m, u in volts
ACTUATOR_KINDS = (TORQUE, DC_MOTOR)

WORLD = -1


@dataclass(frozen=True)
class Tree:
    """The frozen structure of a kinematic tree; names are the model's own element names.

    ``parents[i] < i`` (topological order), ``WORLD`` = −1 for a body on the world.
    ``actuator_joints`` are body (joint) indices of the joints each actuator drives.
    """

    body_names: tuple[str, ...]
    parents: tuple[int, ...]
    joint_names: tuple[str, ...]
    joint_types: tuple[str, ...]
    actuator_names: tuple[str, ...] = ()
    actuator_joints: tuple[int, ...] = ()
    actuator_kinds: tuple[str, ...] = ()
    dof_bodies: tuple[int, ...] = field(init=False)

    def __post_init__(self) -> None:
        nb = len(self.body_names)
        for name, seq in (
            ("parents", self.parents),
            ("joint_names", self.joint_names),
            ("joint_types", self.joint_types),
        ):
            if len(seq) != nb:
                raise ValueError(f"Tree: {name} has {len(seq)} entries for {nb} bodies")
        for i, parent in enumerate(self.parents):
            if not WORLD <= parent < i:
                raise ValueError(
                    f"Tree: body {self.body_names[i]!r} has parent {parent}; bodies must come "
                    "after their parents (topological order)"
                )
        for kind in self.joint_types:
            if kind not in JOINT_TYPES:
                raise ValueError(f"Tree: joint type {kind!r} is not one of {JOINT_TYPES}")
        na = len(self.actuator_names)
        if len(self.actuator_joints) != na or len(self.actuator_kinds) != na:
            raise ValueError("Tree: actuator names, joints and kinds differ in length")
        dofs = tuple(i for i, kind in enumerate(self.joint_types) if kind != FIXED)
        object.__setattr__(self, "dof_bodies", dofs)
        for name, joint in zip(self.actuator_names, self.actuator_joints, strict=True):
            if joint not in dofs:
                raise ValueError(f"Tree: actuator {name!r} drives a fixed joint or none")
        for kind in self.actuator_kinds:
            if kind not in ACTUATOR_KINDS:
                raise ValueError(f"Tree: actuator kind {kind!r} is not one of {ACTUATOR_KINDS}")

    @property
    def n_bodies(self) -> int:
        return len(self.body_names)

    @property
    def n_dof(self) -> int:
        return len(self.dof_bodies)

    @property
    def n_actuators(self) -> int:
        return len(self.actuator_names)

    @property
    def dof_names(self) -> tuple[str, ...]:
        """Joint names of the degrees of freedom, in q order."""
        return tuple(self.joint_names[i] for i in self.dof_bodies)

    def dof_index(self, body: int) -> int | None:
        """Index in q of body ``body``'s joint, None for a fixed joint."""
        return self.dof_bodies.index(body) if body in self.dof_bodies else None

    @property
    def actuator_dofs(self) -> tuple[int, ...]:
        """Index in q of the joint each actuator drives."""
        return tuple(self.dof_bodies.index(j) for j in self.actuator_joints)

    def children(self, body: int) -> tuple[int, ...]:
        return tuple(i for i, parent in enumerate(self.parents) if parent == body)


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class BodyParams:
    """Inertial parameters of every body, body frame: mass [nb] (kg), com [nb, 3] (m),
    inertia [nb, 3, 3] (kg m², about the centre of mass)."""

    mass: jnp.ndarray
    com: jnp.ndarray
    inertia: jnp.ndarray


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class JointGeometry:
    """Kinematic parameters of every body's joint: placement rotation [nb, 3, 3] and
    translation [nb, 3] (m) of the body frame in the parent frame at q = 0; unit ``axis``
    [nb, 3] and ``anchor`` [nb, 3] (m, a point of a revolute axis), both in the body frame."""

    rotation: jnp.ndarray
    translation: jnp.ndarray
    axis: jnp.ndarray
    anchor: jnp.ndarray


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class DofParams:
    """Per degree of freedom (q order), in N m (revolute) or N (prismatic) units:

    - ``armature`` (kg m² or kg): rotor inertia reflected to the joint, added to M's diagonal;
    - ``damping`` b (N m s/rad): viscous friction −|b| q̇;
    - ``frictionloss`` f_c: Coulomb friction −|f_c| σ(q̇), σ(x) = tanh(x / v_ε);
    - ``stribeck`` f_d and ``stribeck_velocity`` v_s: extra friction −|f_d| exp(−(q̇/v_s)²) σ(q̇)
      at low speed (Section 3, "Stribeck", with ν_s = 1/v_s²);
    - ``friction_velocity`` v_ε (rad/s or m/s): smoothing scale of the Coulomb sign, so that the
      right-hand side is Lipschitz for fixed-step integrators; 0 gives sign(q̇) exactly;
    - ``stiffness`` k and ``springref`` q_ref: spring −k (q − q_ref) (MJCF stiffness/springref).

    The absolute values keep every friction term dissipative for every parameter value.
    """

    armature: jnp.ndarray
    damping: jnp.ndarray
    frictionloss: jnp.ndarray
    stribeck: jnp.ndarray
    stribeck_velocity: jnp.ndarray
    friction_velocity: jnp.ndarray
    stiffness: jnp.ndarray
    springref: jnp.ndarray


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class ActuatorParams:
    """Per actuator: ``gear`` (the MJCF gear: N m per input unit for a ``motor``, the
    transmission ratio for a ``dc_motor``), ``km`` (V s/rad = N m/A) and ``Rm`` (Ω) of a
    ``dc_motor`` (unused by a ``motor``)."""

    gear: jnp.ndarray
    km: jnp.ndarray
    Rm: jnp.ndarray


@jax.tree_util.register_dataclass
@dataclass(frozen=True)
class TreeParams:
    """Every number of a tree model; ``gravity`` [3] (m/s²) in the world frame."""

    bodies: BodyParams
    joints: JointGeometry
    dofs: DofParams
    actuators: ActuatorParams
    gravity: jnp.ndarray


def default_dof_params(n_dof: int, **values) -> DofParams:
    """DofParams with zeros (and v_ε = 1e-3, v_s = 0.1) except the arrays given."""
    base = {
        "armature": 0.0,
        "damping": 0.0,
        "frictionloss": 0.0,
        "stribeck": 0.0,
        "stribeck_velocity": 0.1,
        "friction_velocity": 1e-3,
        "stiffness": 0.0,
        "springref": 0.0,
    }
    arrays = {
        k: jnp.broadcast_to(jnp.asarray(values.get(k, v), float), (n_dof,)) for k, v in base.items()
    }
    return DofParams(**arrays)


# --- kinematics ------------------------------------------------------------------------------


def joint_transform(kind: str, axis, anchor, q):
    """T_joint(q) = (R, p) of one joint; identity for a fixed joint."""
    if kind == REVOLUTE:
        R = spatial.rotation_about(axis, q)
        return R, anchor - R @ anchor
    if kind == PRISMATIC:
        return jnp.eye(3), axis * q
    return jnp.eye(3), jnp.zeros(3)


def motion_subspace(kind: str, axis, anchor):
    """s_i: the body twist (body frame) per unit joint rate; [r × a, a] for a revolute joint
    about the line through r along a, [a, 0] for a prismatic one."""
    if kind == REVOLUTE:
        return jnp.concatenate([jnp.cross(anchor, axis), axis])
    if kind == PRISMATIC:
        return jnp.concatenate([axis, jnp.zeros(3)])
    return jnp.zeros(6)


def dof_value(tree: Tree, x, body: int):
    """Entry of the per-dof vector x for body ``body``'s joint (0 for a fixed joint)."""
    k = tree.dof_index(body)
    return jnp.zeros((), x.dtype) if k is None else x[k]


def parent_transforms(tree: Tree, params: TreeParams, q):
    """T_λi(q) = (R [nb, 3, 3], p [nb, 3]): each body's pose in its parent's frame."""
    g = params.joints
    Rs, ps = [], []
    for i, kind in enumerate(tree.joint_types):
        Tj = joint_transform(kind, g.axis[i], g.anchor[i], dof_value(tree, q, i))
        R, p = spatial.compose((g.rotation[i], g.translation[i]), Tj)
        Rs.append(R)
        ps.append(p)
    return jnp.stack(Rs), jnp.stack(ps)


def subspaces(tree: Tree, params: TreeParams):
    """s_i for every body, [nb, 6] (zeros for fixed joints)."""
    g = params.joints
    return jnp.stack(
        [motion_subspace(k, g.axis[i], g.anchor[i]) for i, k in enumerate(tree.joint_types)]
    )


def body_poses(tree: Tree, params: TreeParams, q):
    """World poses of the body frames: R [nb, 3, 3], p [nb, 3] (m)."""
    Rl, pl = parent_transforms(tree, params, q)
    Rs, ps = [], []
    for i, parent in enumerate(tree.parents):
        if parent == WORLD:
            R, p = Rl[i], pl[i]
        else:
            R, p = spatial.compose((Rs[parent], ps[parent]), (Rl[i], pl[i]))
        Rs.append(R)
        ps.append(p)
    return jnp.stack(Rs), jnp.stack(ps)


def point_positions(tree: Tree, params: TreeParams, q, bodies: tuple[int, ...], points):
    """World positions [k, 3] (m) of points [k, 3] fixed on ``bodies`` (body-frame coordinates),
    e.g. markers or an end effector."""
    R, p = body_poses(tree, params, q)
    idx = jnp.asarray(bodies)
    return jnp.einsum("kij,kj->ki", R[idx], points) + p[idx]


def com_positions(tree: Tree, params: TreeParams, q):
    """World positions of every body's centre of mass, [nb, 3] (m)."""
    R, p = body_poses(tree, params, q)
    return jnp.einsum("bij,bj->bi", R, params.bodies.com) + p


def body_twists(tree: Tree, params: TreeParams, q, qd):
    """Body twists [nb, 6] = [v, ω] of every body frame in its own coordinates."""
    Rl, pl = parent_transforms(tree, params, q)
    S = subspaces(tree, params)
    vs = []
    for i, parent in enumerate(tree.parents):
        v = S[i] * dof_value(tree, qd, i)
        if parent != WORLD:
            v = spatial.motion_from_parent(Rl[i], pl[i], vs[parent]) + v
        vs.append(v)
    return jnp.stack(vs)
