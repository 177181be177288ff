"""A tree as read from a file or a spec (``TreeDescription``), checked and turned into the
dynamics model (``dynamics.tree.Tree`` + ``TreeParams``), and the names of its values.

Names (docs/newton-euler.md, "Parameter names") follow the model's own elements:
``<body>.mass``, ``<body>.com.x|y|z``, ``<body>.inertia.xx|yy|zz|xy|xz|yz`` (about the centre
of mass, body frame), ``<body>.pos.x|y|z`` (placement in the parent frame), ``<joint>.damping``,
``<joint>.frictionloss``, ``<joint>.armature``, ``<joint>.stiffness``, ``<joint>.springref``,
``<joint>.stribeck``, ``<joint>.stribeck_velocity``, ``<joint>.friction_velocity``,
``<actuator>.gear``, ``<actuator>.km``, ``<actuator>.Rm``, ``gravity`` (magnitude along the
model's gravity direction) and ``gravity.x|y|z``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import jax.numpy as jnp
import numpy as np

from physid.dynamics.tree import (
    DC_MOTOR,
    DOF_DEFAULTS,
    FIXED,
    PRISMATIC,
    REVOLUTE,
    WORLD,
    ActuatorParams,
    BodyParams,
    JointGeometry,
    Tree,
    TreeParams,
    default_dof_params,
)
from physid.errors import InputError
from physid.units import parse_unit

JOINT_TYPE_WORDS = {
    "hinge": REVOLUTE,
    "revolute": REVOLUTE,
    "continuous": REVOLUTE,
    "slide": PRISMATIC,
    "prismatic": PRISMATIC,
    "fixed": FIXED,
}

# Per degree of freedom: field of DofParams -> unit for a revolute and a prismatic joint.
DOF_UNITS = {
    "damping": ("N m s/rad", "N s/m"),
    "frictionloss": ("N m", "N"),
    "armature": ("kg m^2", "kg"),
    "stiffness": ("N m/rad", "N/m"),
    "springref": ("rad", "m"),
    "stribeck": ("N m", "N"),
    "stribeck_velocity": ("rad/s", "m/s"),
    "friction_velocity": ("rad/s", "m/s"),
}
AXES = ("x", "y", "z")
INERTIA_ENTRIES = {
    "xx": (0, 0),
    "yy": (1, 1),
    "zz": (2, 2),
    "xy": (0, 1),
    "xz": (0, 2),
    "yz": (1, 2),
}
# Relative slack of the triangle inequalities and of positive semidefiniteness: values written
# with 6-7 digits (MJCF files, specs) of a thin rod sit on the boundary to that precision.
INERTIA_RTOL = 1e-6


class TreeError(InputError):
    """A tree that no body can have or that cannot be built; names the file and the element."""


@dataclass(frozen=True)
class JointDescription:
    name: str
    type: str  # revolute | prismatic
    axis: np.ndarray
    anchor: np.ndarray
    values: dict[str, float] = field(default_factory=dict)  # DOF_UNITS fields, SI


@dataclass(frozen=True)
class BodyDescription:
    name: str
    parent: str  # a body name or "world"
    rotation: np.ndarray  # placement in the parent frame at q = 0
    translation: np.ndarray
    mass: float
    com: np.ndarray
    inertia: np.ndarray  # 3×3 about the centre of mass, body frame
    joint: JointDescription | None  # None: fixed to the parent
    where: str = ""  # where the body is written, for messages


@dataclass(frozen=True)
class ActuatorDescription:
    name: str
    joint: str
    kind: str  # motor | dc_motor
    values: dict[str, float] = field(default_factory=dict)  # gear, km, Rm (SI)


@dataclass(frozen=True)
class TreeDescription:
    bodies: tuple[BodyDescription, ...]
    actuators: tuple[ActuatorDescription, ...]
    gravity: np.ndarray
    source: Path


@dataclass(frozen=True)
class TreeModel:
    """The dynamics model of a description and the table of its value names."""

    tree: Tree
    params: TreeParams
    names: dict[str, tuple]  # value name -> address (see ``_address``)
    units: dict[str, str]  # value name -> SI unit
    source: Path

    def value(self, name: str) -> float:
        """The model's own value of ``name`` (SI)."""
        return float(_read(self.params, self.names[name]))

    def values_of(self, params: TreeParams) -> dict[str, float]:
        """Every named value of ``params`` (SI), in the model's name order."""
        return {name: float(_read(params, address)) for name, address in self.names.items()}

    def with_values(self, values: Mapping[str, object]) -> TreeParams:
        """``params`` with the named values replaced (numbers or JAX tracers: differentiable)."""
        return apply_values(self.params, {self.names[k]: v for k, v in values.items()})


def build_model(desc: TreeDescription, input_units: Mapping[str, str] | None = None) -> TreeModel:
    """Check the description (names, parents, cycles, axes) and build the model.

    The inertial values are checked by ``check_bodies`` once the spec's values are applied.
    """
    src = desc.source
    order = _topological_order(desc)
    bodies = [desc.bodies[i] for i in order]
    index = {b.name: i for i, b in enumerate(bodies)}
    joint_names = []
    for b in bodies:
        if b.joint is None:
            continue
        if b.joint.type not in (REVOLUTE, PRISMATIC):
            raise TreeError(f"{src}: joint {b.joint.name!r}: unknown type {b.joint.type!r}")
        norm = float(np.linalg.norm(b.joint.axis))
        if not norm > 1e-12:
            raise TreeError(
                f"{src}: joint {b.joint.name!r} (body {b.name!r}) has an axis of zero length "
                f"{list(b.joint.axis)}; give a direction such as [0, 0, 1]"
            )
        joint_names.append(b.joint.name)
    _unique(src, "joint", joint_names)
    _unique(src, "actuator", [a.name for a in desc.actuators])
    clash = set(index) & set(joint_names)
    if clash:
        raise TreeError(
            f"{src}: {sorted(clash)} name both a body and a joint; value names such as "
            "'<name>.mass' must be unambiguous: rename one"
        )
    body_of_joint = {b.joint.name: i for i, b in enumerate(bodies) if b.joint is not None}
    act_joints, act_kinds = [], []
    for a in desc.actuators:
        if a.joint not in body_of_joint:
            raise TreeError(
                f"{src}: actuator {a.name!r} drives joint {a.joint!r}, which does not exist; "
                f"joints: {', '.join(sorted(body_of_joint)) or 'none'}"
            )
        if a.kind not in ("motor", DC_MOTOR):
            raise TreeError(
                f"{src}: actuator {a.name!r}: kind {a.kind!r} is not 'motor' or 'dc_motor'"
            )
        act_joints.append(body_of_joint[a.joint])
        act_kinds.append(a.kind)
    tree = Tree(
        body_names=tuple(b.name for b in bodies),
        parents=tuple(WORLD if b.parent == "world" else index[b.parent] for b in bodies),
        joint_names=tuple(b.joint.name if b.joint else "" for b in bodies),
        joint_types=tuple(b.joint.type if b.joint else FIXED for b in bodies),
        actuator_names=tuple(a.name for a in desc.actuators),
        actuator_joints=tuple(act_joints),
        actuator_kinds=tuple(act_kinds),
    )
    dof_joints = [bodies[i].joint for i in tree.dof_bodies]
    dof_values = {
        key: jnp.array([j.values.get(key, default) for j in dof_joints], float)
        for key, default in DOF_DEFAULTS.items()
    }
    axes = np.array(
        [b.joint.axis / np.linalg.norm(b.joint.axis) if b.joint else np.zeros(3) for b in bodies]
    ).reshape(-1, 3)
    anchors = np.array([b.joint.anchor if b.joint else np.zeros(3) for b in bodies]).reshape(-1, 3)
    params = TreeParams(
        bodies=BodyParams(
            mass=jnp.array([b.mass for b in bodies], float),
            com=jnp.array(np.array([b.com for b in bodies], float).reshape(-1, 3)),
            inertia=jnp.array(np.array([b.inertia for b in bodies], float).reshape(-1, 3, 3)),
        ),
        joints=JointGeometry(
            rotation=jnp.array(np.array([b.rotation for b in bodies], float).reshape(-1, 3, 3)),
            translation=jnp.array(np.array([b.translation for b in bodies], float).reshape(-1, 3)),
            axis=jnp.array(axes),
            anchor=jnp.array(anchors),
        ),
        dofs=default_dof_params(tree.n_dof, **dof_values),
        actuators=ActuatorParams(
            gear=jnp.array([a.values.get("gear", 1.0) for a in desc.actuators], float),
            km=jnp.array([a.values.get("km", 0.0) for a in desc.actuators], float),
            Rm=jnp.array([a.values.get("Rm", 1.0) for a in desc.actuators], float),
        ),
        gravity=jnp.array(desc.gravity, float),
    )
    names, units = _name_table(tree, np.asarray(desc.gravity, float), input_units or {})
    return TreeModel(tree, params, names, units, src)


def _unique(src: Path, what: str, names: list[str]) -> None:
    seen = set()
    for n in names:
        if n in seen:
            raise TreeError(f"{src}: two {what}s are named {n!r}; names must be unique")
        seen.add(n)


def _topological_order(desc: TreeDescription) -> list[int]:
    """Indices of the bodies with every parent before its children; errors for unknown
    parents, repeated names and cycles (naming the bodies on the cycle)."""
    src = desc.source
    by_name: dict[str, int] = {}
    for i, b in enumerate(desc.bodies):
        if b.name == "world":
            raise TreeError(f"{src}: a body may not be named 'world' (the fixed base)")
        if b.name in by_name:
            raise TreeError(f"{src}: two bodies are named {b.name!r}; names must be unique")
        by_name[b.name] = i
    for b in desc.bodies:
        if b.parent != "world" and b.parent not in by_name:
            raise TreeError(
                f"{src}: {b.where or 'body ' + repr(b.name)}: parent {b.parent!r} is not a body; "
                f"bodies: world, {', '.join(by_name)}"
            )
    order: list[int] = []
    state: dict[int, str] = {}
    for start in range(len(desc.bodies)):
        chain = []
        i = start
        while i is not None and state.get(i) != "done":
            if state.get(i) == "visiting":
                cycle = [desc.bodies[k].name for k in chain[chain.index(i) :]]
                raise TreeError(
                    f"{src}: the parents of bodies {' -> '.join(cycle)} -> {cycle[0]} form a "
                    "cycle; a tree has one path from each body to the world: fix a 'parent'"
                )
            state[i] = "visiting"
            chain.append(i)
            parent = desc.bodies[i].parent
            i = None if parent == "world" else by_name[parent]
        for k in reversed(chain):
            state[k] = "done"
            order.append(k)
    return order


def check_bodies(model: TreeModel, params: TreeParams, where: Mapping[str, str]) -> None:
    """Raise TreeError for a body no physical body can be: mass ≤ 0, or an inertia about the
    centre of mass that is not positive semidefinite or breaks a triangle inequality
    (J_x ≤ J_y + J_z on the principal moments). ``where[body]`` says where its values came
    from (file and/or spec keys)."""
    b = params.bodies
    for i, name in enumerate(model.tree.body_names):
        origin = where.get(name, str(model.source))
        m = float(b.mass[i])
        if not m > 0:
            raise TreeError(
                f"{origin}: body {name!r} has mass {m:g} kg; a body needs a positive mass "
                f"(set {name}.mass)"
            )
        inertia = np.asarray(b.inertia[i], float)
        moments = np.linalg.eigvalsh(0.5 * (inertia + inertia.T))
        scale = max(float(np.max(np.abs(moments))), 1e-300)
        slack = INERTIA_RTOL * scale
        if moments[0] < -slack:
            raise TreeError(
                f"{origin}: body {name!r}: inertia has a negative principal moment "
                f"({moments[0]:.3g} kg m²); no body has that: check {name}.inertia.*"
            )
        if moments[2] > moments[0] + moments[1] + slack:
            raise TreeError(
                f"{origin}: body {name!r}: principal moments "
                f"{', '.join(f'{x:.4g}' for x in moments)} kg m² break the triangle "
                "inequality J3 ≤ J1 + J2 that every body satisfies; "
                f"check {name}.inertia.* (about the centre of mass)"
            )


# --- names ------------------------------------------------------------------------------------


def _name_table(tree: Tree, gravity: np.ndarray, input_units: Mapping[str, str]):
    names: dict[str, tuple] = {}
    units: dict[str, str] = {}
    for i, body in enumerate(tree.body_names):
        names[f"{body}.mass"] = ("bodies", "mass", (i,))
        units[f"{body}.mass"] = "kg"
        for k, axis in enumerate(AXES):
            names[f"{body}.com.{axis}"] = ("bodies", "com", (i, k))
            units[f"{body}.com.{axis}"] = "m"
            names[f"{body}.pos.{axis}"] = ("joints", "translation", (i, k))
            units[f"{body}.pos.{axis}"] = "m"
        for entry, (r, c) in INERTIA_ENTRIES.items():
            names[f"{body}.inertia.{entry}"] = ("inertia", i, r, c)
            units[f"{body}.inertia.{entry}"] = "kg m^2"
    for k, body in enumerate(tree.dof_bodies):
        joint = tree.joint_names[body]
        col = 0 if tree.joint_types[body] == REVOLUTE else 1
        for key, pair in DOF_UNITS.items():
            names[f"{joint}.{key}"] = ("dofs", key, (k,))
            units[f"{joint}.{key}"] = pair[col]
    for a, (name, kind, body) in enumerate(
        zip(tree.actuator_names, tree.actuator_kinds, tree.actuator_joints, strict=True)
    ):
        revolute = tree.joint_types[body] == REVOLUTE
        names[f"{name}.gear"] = ("actuators", "gear", (a,))
        units[f"{name}.gear"] = gear_unit(kind, revolute, input_units.get(name))
        if kind == DC_MOTOR:
            names[f"{name}.km"] = ("actuators", "km", (a,))
            units[f"{name}.km"] = "V s/rad"
            names[f"{name}.Rm"] = ("actuators", "Rm", (a,))
            units[f"{name}.Rm"] = "V/A"
    norm = float(np.linalg.norm(gravity))
    direction = gravity / norm if norm > 0 else np.array([0.0, 0.0, -1.0])
    names["gravity"] = ("gravity_magnitude", tuple(direction))
    units["gravity"] = "m/s^2"
    for k, axis in enumerate(AXES):
        names[f"gravity.{axis}"] = ("gravity", k)
        units[f"gravity.{axis}"] = "m/s^2"
    return names, units


def effort_unit(revolute: bool) -> str:
    """Unit of a generalized force on a revolute (N m) or prismatic (N) joint."""
    return "N m" if revolute else "N"


def gear_unit(kind: str, revolute: bool, input_unit: str | None) -> str:
    """Unit of an actuator's gear: effort per input unit for a ``motor`` (dimensionless for
    an input already in N m or N), a transmission ratio for a ``dc_motor`` (1, or 1/m from a
    motor shaft to a slide)."""
    if kind == DC_MOTOR:
        return "1" if revolute else "1/m"
    effort = effort_unit(revolute)
    if input_unit is None or parse_unit(input_unit).dims == parse_unit(effort).dims:
        return "1"
    return f"{effort}/{input_unit}"


def _read(params: TreeParams, address: tuple):
    kind = address[0]
    if kind == "inertia":
        _, i, r, c = address
        return params.bodies.inertia[i, r, c]
    if kind == "gravity_magnitude":
        return jnp.linalg.norm(params.gravity)
    if kind == "gravity":
        return params.gravity[address[1]]
    group, fieldname, idx = address
    return getattr(getattr(params, group), fieldname)[idx]


def apply_values(params: TreeParams, updates: Mapping[tuple, object]) -> TreeParams:
    """``params`` with the entries at the given addresses replaced (traceable)."""
    groups = {
        "bodies": dict(vars(params.bodies)),
        "joints": dict(vars(params.joints)),
        "dofs": dict(vars(params.dofs)),
        "actuators": dict(vars(params.actuators)),
    }
    gravity = jnp.asarray(params.gravity)
    for address, value in updates.items():
        kind = address[0]
        if kind == "inertia":
            _, i, r, c = address
            arr = jnp.asarray(groups["bodies"]["inertia"]).at[i, r, c].set(value)
            groups["bodies"]["inertia"] = arr.at[i, c, r].set(value)
        elif kind == "gravity_magnitude":
            gravity = jnp.asarray(address[1]) * value
        elif kind == "gravity":
            gravity = gravity.at[address[1]].set(value)
        else:
            group, fieldname, idx = address
            groups[group][fieldname] = jnp.asarray(groups[group][fieldname]).at[idx].set(value)
    return TreeParams(
        bodies=BodyParams(**groups["bodies"]),
        joints=JointGeometry(**groups["joints"]),
        dofs=type(params.dofs)(**groups["dofs"]),
        actuators=ActuatorParams(**groups["actuators"]),
        gravity=gravity,
    )
