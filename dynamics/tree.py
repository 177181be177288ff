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
import numpy as np

from physid.dynamics import spatial

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

    ``unroll`` is how the recursions over bodies are evaluated: ``False`` (default) as a
    ``lax.scan`` over bodies, whose compile time does not grow with the number of bodies
    (seconds for the 7-joint arm); ``True`` unrolled, a larger program that can run faster
    for small trees in long sequential loops (``dataclasses.replace(tree, unroll=True)``).
    """

    body_names: tuple[str, ...]
    parents: tuple[int, ...]
    joint_names: tuple[str, ...]
    joint_types: tuple[str, ...]
    actuator_names: tuple[str, ...] = ()
    actuator_joints: tuple[int, ...] = ()
    actuator_kinds: tuple[str, ...] = ()
    unroll: bool = False
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

    @property
    def parent_rows(self) -> np.ndarray:
        """Parent of each body with the world as row ``n_bodies`` (for arrays with one extra
        row that holds the base's values)."""
        return np.array([self.n_bodies if p == WORLD else p for p in self.parents], dtype=int)

    @property
    def dof_rows(self) -> np.ndarray:
        """Index in q of each body's joint, ``n_dof`` for a fixed joint (an extra zero row)."""
        return np.array(
            [
                self.n_dof if self.dof_index(i) is None else self.dof_index(i)
                for i in range(self.n_bodies)
            ],
            dtype=int,
        )


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


# Values of a joint's actuator-free parameters where a model gives none (v_ε and v_s in m/s
# or rad/s, the rest zero: no friction, no spring).
DOF_DEFAULTS = {
    "armature": 0.0,
    "damping": 0.0,
    "frictionloss": 0.0,
    "stribeck": 0.0,
    "stribeck_velocity": 0.1,
    "friction_velocity": 1e-3,
    "stiffness": 0.0,
    "springref": 0.0,
}


def default_dof_params(n_dof: int, **values) -> DofParams:
    """DofParams with ``DOF_DEFAULTS`` except the arrays given."""
    arrays = {
        k: jnp.broadcast_to(jnp.asarray(values.get(k, v), float), (n_dof,))
        for k, v in DOF_DEFAULTS.items()
    }
    return DofParams(**arrays)


# --- kinematics ------------------------------------------------------------------------------


def body_values(tree: Tree, x):
    """The per-dof vector x [n] spread over bodies, [nb] (0 at fixed joints)."""
    return jnp.concatenate([x, jnp.zeros(1, x.dtype)])[tree.dof_rows]


def dof_value(tree: Tree, x, body: int):
    """Entry of the per-dof vector x for body ``body``'s joint (0 for a fixed joint)."""
    k = tree.dof_index(body)
    return jnp.zeros((), x.dtype) if k is None else x[k]


def _type_masks(tree: Tree):
    revolute = np.array([t == REVOLUTE for t in tree.joint_types])[:, None]
    prismatic = np.array([t == PRISMATIC for t in tree.joint_types])[:, None]
    return revolute, prismatic


def parent_transforms(tree: Tree, params: TreeParams, q):
    """T_λi(q) = T_placement · T_joint(q) = (R [nb, 3, 3], p [nb, 3]): each body's pose in its
    parent's frame. A revolute joint turns by q about the line through ``anchor`` along
    ``axis`` (R_q, anchor − R_q anchor); a prismatic one moves by q ``axis``; a fixed one is
    the identity. Computed for all bodies at once."""
    g = params.joints
    qb = body_values(tree, q)
    revolute, prismatic = _type_masks(tree)
    R_rev = spatial.rotation_about(g.axis, qb)
    R_q = jnp.where(revolute[:, :, None], R_rev, jnp.eye(3))
    p_rev = g.anchor - spatial.matvec(R_rev, g.anchor)
    p_q = jnp.where(revolute, p_rev, jnp.where(prismatic, g.axis * qb[:, None], 0.0))
    return spatial.compose((g.rotation, g.translation), (R_q, p_q))


def subspaces(tree: Tree, params: TreeParams):
    """s_i for every body, [nb, 6]: the body twist per unit joint rate, [r × a, a] for a
    revolute joint about the line through r along a, [a, 0] for a prismatic one, 0 if fixed."""
    g = params.joints
    revolute, prismatic = _type_masks(tree)
    s_rev = jnp.concatenate([spatial.cross(g.anchor, g.axis), g.axis], axis=-1)
    s_pri = jnp.concatenate([g.axis, jnp.zeros_like(g.axis)], axis=-1)
    return jnp.where(revolute, s_rev, jnp.where(prismatic, s_pri, 0.0))


def row(x, i):
    """x[i] along the first axis for a traced index (a dynamic slice, not a gather)."""
    return jax.lax.dynamic_index_in_dim(x, i, keepdims=False)


def set_row(x, i, value):
    """x with row i replaced (a dynamic update, not a scatter: in place inside a scan)."""
    return jax.lax.dynamic_update_index_in_dim(x, value, i, 0)


def add_row(x, i, value):
    return set_row(x, i, row(x, i) + value)


def body_poses(tree: Tree, params: TreeParams, q):
    """World poses of the body frames: R [nb, 3, 3], p [nb, 3] (m)."""
    Rl, pl = parent_transforms(tree, params, q)
    nb = tree.n_bodies

    def step(carry, xs):
        R_all, p_all = carry
        i, parent, R, p = xs
        R, p = spatial.compose((row(R_all, parent), row(p_all, parent)), (R, p))
        return (set_row(R_all, i, R), set_row(p_all, i, p)), (R, p)

    init = (jnp.zeros((nb + 1, 3, 3)).at[nb].set(jnp.eye(3)), jnp.zeros((nb + 1, 3)))
    xs = (jnp.arange(nb), tree.parent_rows, Rl, pl)
    _, (R, p) = jax.lax.scan(step, init, xs, unroll=tree.unroll)
    return R, p


def point_positions(tree: Tree, params: TreeParams, q, bodies: tuple[int, ...], points):
    """World positions [k, 3] (m) of points [k, 3] fixed on ``bodies`` (body-frame coordinates),
    e.g. markers or an end effector."""
    R, p = body_poses(tree, params, q)
    idx = np.asarray(bodies)
    return spatial.matvec(R[idx], points) + p[idx]


def com_positions(tree: Tree, params: TreeParams, q):
    """World positions of every body's centre of mass, [nb, 3] (m)."""
    R, p = body_poses(tree, params, q)
    return spatial.matvec(R, params.bodies.com) + p


def body_twists(tree: Tree, params: TreeParams, q, qd):
    """Body twists [nb, 6] = [v, ω] of every body frame in its own coordinates."""
    R, p = parent_transforms(tree, params, q)
    sqd = subspaces(tree, params) * body_values(tree, qd)[:, None]
    return forward_twists(tree, R, p, sqd)


def forward_twists(tree: Tree, R, p, known, base=None):
    """x_i = Ad_{T_λi⁻¹} x_λ + known_i from the root to the leaves (twists or accelerations,
    [nb, 6]); ``base`` is the world's value (zero by default)."""
    nb = tree.n_bodies

    def step(x_all, xs):
        i, parent, R, p, known = xs
        x = spatial.motion_from_parent(R, p, row(x_all, parent)) + known
        return set_row(x_all, i, x), x

    init = jnp.zeros((nb + 1, 6))
    if base is not None:
        init = init.at[nb].set(base)
    xs = (jnp.arange(nb), tree.parent_rows, R, p, known)
    _, x = jax.lax.scan(step, init, xs, unroll=tree.unroll)
    return x


def backward_wrenches(tree: Tree, R, p, f):
    """Accumulate wrenches f [nb, ..., 6] from the leaves to the root: each body's total is its
    own plus its children's carried by Ad*_{T⁻¹} (3). Returns the totals, [nb, ..., 6]."""
    nb = tree.n_bodies

    def step(f_all, xs):
        i, parent, R, p = xs
        f = row(f_all, i)
        return add_row(f_all, parent, spatial.force_to_parent(R, p, f)), f

    init = jnp.concatenate([f, jnp.zeros((1, *f.shape[1:]))])
    xs = (jnp.arange(nb), tree.parent_rows, R, p)
    _, totals = jax.lax.scan(step, init, xs, reverse=True, unroll=tree.unroll)
    return totals
