"""A kinematic tree written in a spec's ``[tree]`` tables (docs/newton-euler.md, "Trees in
TOML"): bodies, joints and actuators by name, every number with its unit, converted to SI.

    [tree]
    gravity = { value = [0, 0, -9.81], unit = "m/s^2" }

    [tree.bodies.arm]                  # one table per body
    parent = "world"                   # a body name or "world"
    pos = { value = [0, 0, 0.1], unit = "m" }   # body frame in the parent frame at q = 0
    quat = [1, 0, 0, 0]                # (w, x, y, z), or rpy = { value = [...], unit = "rad" }
    mass = { value = 0.095, unit = "kg" }
    com = { value = [0, 0, 0], unit = "m" }     # centre of mass, body frame
    inertia = { value = [xx, yy, zz, xy, xz, yz], unit = "kg m^2" }  # about the com
    joint = "theta"                    # the joint to the parent; none: fixed to it

    [tree.joints.theta]
    type = "hinge"                     # hinge | slide (or revolute | prismatic)
    axis = [0, 0, 1]                   # body frame; normalized
    pos = { value = [0, 0, 0], unit = "m" }     # a point of a hinge's axis (default origin)
    damping = { value = 5e-4, unit = "N m s/rad" }  # also armature, frictionloss, ...

    [tree.actuators.motor]
    joint = "theta"
    kind = "dc_motor"                  # or "motor" (τ = gear · u)
    km = { value = 0.042, unit = "V s/rad" }
    Rm = { value = 8.4, unit = "V/A" }
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from physid.rigs.models.tree.model import (
    DOF_UNITS,
    JOINT_TYPE_WORDS,
    ActuatorDescription,
    BodyDescription,
    JointDescription,
    TreeDescription,
    TreeError,
    gear_unit,
)
from physid.spec import RigSpec
from physid.units import UnitError, parse_unit

BODY_KEYS = {"parent", "pos", "quat", "rpy", "mass", "com", "inertia", "joint"}
JOINT_KEYS = {"type", "axis", "pos", *DOF_UNITS}
ACTUATOR_KEYS = {"joint", "kind", "gear", "km", "Rm"}


class _Reader:
    """Reads quantities of one spec, raising errors that name the file and the key."""

    def __init__(self, spec: RigSpec):
        self.path = spec.path

    def error(self, where: str, message: str) -> TreeError:
        return TreeError(f"{self.path}: [{where}] {message}")

    def quantity(self, where: str, entry: Any, unit: str, size: int | None = None):
        """SI value of ``{ value = x, unit = "..." }`` (a bare number for unit "1"); a vector of
        ``size`` numbers when size is given."""
        if isinstance(entry, dict):
            if "value" not in entry:
                raise self.error(where, f'expected {{ value = ..., unit = "{unit}" }}')
            raw, written = entry["value"], str(entry.get("unit", ""))
        elif unit in ("1", ""):
            raw, written = entry, ""
        else:
            raise self.error(where, f'give a unit: {{ value = {entry!r}, unit = "{unit}" }}')
        try:
            got, want = parse_unit(written), parse_unit(unit)
        except UnitError as exc:
            raise self.error(where, str(exc)) from None
        if got.dims != want.dims:
            raise self.error(
                where,
                f"unit {written!r} ({got.describe_dims()}) should be like {unit!r} "
                f"({want.describe_dims()})",
            )
        values = self._numbers(where, raw, size)
        return values * got.scale if size is not None else float(values) * got.scale

    def _numbers(self, where: str, raw: Any, size: int | None):
        if size is None:
            if isinstance(raw, bool) or not isinstance(raw, int | float) or not math.isfinite(raw):
                raise self.error(where, f"expected a finite number, got {raw!r}")
            return float(raw)
        if not isinstance(raw, list) or len(raw) != size:
            raise self.error(where, f"expected a list of {size} numbers, got {raw!r}")
        for x in raw:
            self._numbers(where, x, None)
        return np.array(raw, float)

    def check_keys(self, where: str, table: dict, known: set[str]) -> None:
        for key in table:
            if key not in known:
                raise self.error(where, f"unknown key {key!r}; known: {', '.join(sorted(known))}")


def read_toml_tree(spec: RigSpec, input_units: dict[str, str]) -> TreeDescription:
    """The ``TreeDescription`` of a spec's ``[tree]`` tables; ``input_units`` (actuator ->
    unit of its control input) sets the unit a motor's gear is checked against."""
    r = _Reader(spec)
    table = spec.sections.get("tree")
    if not isinstance(table, dict):
        raise TreeError(
            f"{spec.path}: a tree rig needs [tree] tables (bodies, joints, actuators) or "
            '[rig] mjcf = "file.xml" / urdf = "file.urdf"'
        )
    r.check_keys("tree", table, {"gravity", "bodies", "joints", "actuators"})
    gravity = np.array([0.0, 0.0, -9.81])
    if "gravity" in table:
        gravity = r.quantity("tree.gravity", table["gravity"], "m/s^2", 3)
    bodies_table = table.get("bodies", {})
    joints_table = dict(table.get("joints", {}))
    if not bodies_table:
        raise r.error("tree.bodies", "no bodies; add a table [tree.bodies.NAME] per body")
    used_joints: set[str] = set()
    bodies = []
    for name, body in bodies_table.items():
        where = f"tree.bodies.{name}"
        if not isinstance(body, dict):
            raise r.error(where, "expected a table")
        r.check_keys(where, body, BODY_KEYS)
        for needed in ("parent", "mass", "inertia"):
            if needed not in body:
                raise r.error(where, f"missing {needed!r}")
        joint = None
        if "joint" in body:
            jname = str(body["joint"])
            if jname not in joints_table:
                known = ", ".join(sorted(joints_table)) or "none"
                raise r.error(
                    f"{where}.joint",
                    f"joint {jname!r} has no table [tree.joints.{jname}]; joints: {known}",
                )
            if jname in used_joints:
                raise r.error(f"{where}.joint", f"joint {jname!r} already moves another body")
            used_joints.add(jname)
            joint = _joint(r, jname, joints_table[jname])
        bodies.append(
            BodyDescription(
                name=name,
                parent=str(body["parent"]),
                rotation=_rotation(r, where, body),
                translation=r.quantity(f"{where}.pos", body.get("pos", _zero("m")), "m", 3),
                mass=r.quantity(f"{where}.mass", body["mass"], "kg"),
                com=r.quantity(f"{where}.com", body.get("com", _zero("m")), "m", 3),
                inertia=_inertia(r, f"{where}.inertia", body["inertia"]),
                joint=joint,
                where=f"{spec.path}: [{where}]",
            )
        )
    unused = sorted(set(joints_table) - used_joints)
    if unused:
        raise r.error(
            f"tree.joints.{unused[0]}", "no body names this joint; add joint = ... to a body"
        )
    types = {b.joint.name: b.joint.type for b in bodies if b.joint is not None}
    actuators = [
        _actuator(r, name, entry, types, input_units)
        for name, entry in table.get("actuators", {}).items()
    ]
    return TreeDescription(tuple(bodies), tuple(actuators), gravity, spec.path)


def _zero(unit: str) -> dict:
    return {"value": [0.0, 0.0, 0.0], "unit": unit}


def _rotation(r: _Reader, where: str, body: dict) -> np.ndarray:
    from physid.dynamics.parameterization import placement_rotation

    if "quat" in body and "rpy" in body:
        raise r.error(where, "give either quat or rpy, not both")
    if "rpy" in body:
        rpy = r.quantity(f"{where}.rpy", body["rpy"], "rad", 3)
        return np.asarray(placement_rotation(rpy))
    if "quat" in body:
        quat = r.quantity(f"{where}.quat", body["quat"], "1", 4)
        norm = float(np.linalg.norm(quat))
        if not norm > 1e-12:
            raise r.error(f"{where}.quat", "a quaternion of zero length; e.g. [1, 0, 0, 0]")
        w, x, y, z = quat / norm
        return np.array(
            [
                [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
                [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
                [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
            ]
        )
    return np.eye(3)


def _inertia(r: _Reader, where: str, entry: Any) -> np.ndarray:
    xx, yy, zz, xy, xz, yz = r.quantity(where, entry, "kg m^2", 6)
    return np.array([[xx, xy, xz], [xy, yy, yz], [xz, yz, zz]])


def _joint(r: _Reader, name: str, entry: Any) -> JointDescription:
    where = f"tree.joints.{name}"
    if not isinstance(entry, dict):
        raise r.error(where, "expected a table")
    r.check_keys(where, entry, JOINT_KEYS)
    word = str(entry.get("type", "hinge"))
    if word not in JOINT_TYPE_WORDS or JOINT_TYPE_WORDS[word] == "fixed":
        raise r.error(
            f"{where}.type", f"{word!r} is not a joint type: hinge, slide, revolute, prismatic"
        )
    jtype = JOINT_TYPE_WORDS[word]
    if "axis" not in entry:
        raise r.error(where, "missing 'axis', e.g. axis = [0, 0, 1]")
    axis = r.quantity(f"{where}.axis", entry["axis"], "1", 3)
    col = 0 if jtype == "revolute" else 1
    values = {
        key: r.quantity(f"{where}.{key}", entry[key], units[col])
        for key, units in DOF_UNITS.items()
        if key in entry
    }
    anchor = r.quantity(f"{where}.pos", entry.get("pos", _zero("m")), "m", 3)
    return JointDescription(name, jtype, axis, anchor, values)


def _actuator(
    r: _Reader, name: str, entry: Any, types: dict[str, str], input_units: dict[str, str]
) -> ActuatorDescription:
    where = f"tree.actuators.{name}"
    if not isinstance(entry, dict):
        raise r.error(where, "expected a table")
    r.check_keys(where, entry, ACTUATOR_KEYS)
    if "joint" not in entry:
        raise r.error(where, "missing 'joint': the joint this actuator drives")
    kind = str(entry.get("kind", "motor"))
    if kind not in ("motor", "dc_motor"):
        raise r.error(f"{where}.kind", f"{kind!r} is not 'motor' or 'dc_motor'")
    joint = str(entry["joint"])
    if joint not in types:
        known = ", ".join(sorted(types)) or "none"
        raise r.error(f"{where}.joint", f"no joint {joint!r} moves a body; joints: {known}")
    values = {}
    if "gear" in entry:
        unit = gear_unit(kind, types[joint] == "revolute", input_units.get(name))
        values["gear"] = r.quantity(f"{where}.gear", entry["gear"], unit)
    if kind == "dc_motor":
        for key, unit in (("km", "V s/rad"), ("Rm", "V/A")):
            if key not in entry:
                raise r.error(where, f'a dc_motor needs {key} = {{ value = ..., unit = "{unit}" }}')
            values[key] = r.quantity(f"{where}.{key}", entry[key], unit)
    return ActuatorDescription(name, joint, kind, values)
