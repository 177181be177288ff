"""A tree rig from a spec (``[rig] model = "tree"``): the model from the spec's ``[tree]``
tables or from the MJCF/URDF file it names, the spec's values applied by name, the bodies
checked, and the sensors and inputs tied to joints and actuators.

    [rig]
    model = "tree"
    mjcf = "qube.xml"            # or urdf = "robot.urdf", or [tree] tables; relative to the spec

    [fixed]                      # override the file's values by name
    pendulum.mass = { value = 0.024, unit = "kg" }

    [sensors.alpha]              # an encoder on a joint
    kind = "encoder"
    joint = "alpha"
    channel = 1
    counts_per_rev = 2048
    sign = 1
    offset = { value = 0.0, unit = "rad" }

    [sensors.u]                  # a control input driving an actuator
    kind = "control"
    actuator = "motor"
    unit = "V"
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from physid.dynamics.tree import REVOLUTE, TreeParams
from physid.rigs.models.tree.mjcf import MJCF_SUFFIXES, URDF_SUFFIXES, read_model_file
from physid.rigs.models.tree.model import (
    TreeError,
    TreeModel,
    build_model,
    check_bodies,
    effort_unit,
)
from physid.rigs.models.tree.toml_tree import read_toml_tree
from physid.spec import RigSpec

SENSOR_KINDS = ("encoder", "control")


@dataclass(frozen=True)
class Encoder:
    """An encoder on joint ``joint`` (q index ``dof``): reads sign · q + offset (rad or m)."""

    name: str
    joint: str
    dof: int
    channel: int
    counts_per_rev: int | None
    sign: float
    offset: float
    noise: float  # std (rad or m), for simulation and weights
    unit: str  # rad (hinge) or m (slide)


@dataclass(frozen=True)
class ControlInput:
    """A control input u driving actuator ``actuator`` (index ``index``), in ``unit``."""

    name: str
    actuator: str
    index: int
    unit: str


@dataclass(frozen=True)
class TreeRig:
    """A tree rig: ``model`` (structure, file values, value names), ``params`` with the spec's
    values applied, ``values`` the SI value of every name the spec sets (fixed values and
    parameters' initial values), its encoders and inputs."""

    spec: RigSpec
    model: TreeModel
    params: TreeParams
    values: dict[str, float]
    encoders: tuple[Encoder, ...]
    inputs: tuple[ControlInput, ...]

    @property
    def tree(self):
        return self.model.tree

    def make_params(self, values: Mapping[str, object]) -> TreeParams:
        """Parameters with named values replaced (numbers or JAX tracers; differentiable)."""
        unknown = [k for k in values if k not in self.model.names]
        if unknown:
            raise self.error(f"parameters.{unknown[0]}", self._unknown_message(unknown[0]))
        return self.model.with_values({**self.values, **values})

    def error(self, key: str, message: str) -> TreeError:
        return TreeError(f"{self.spec.path}: [{key}] {message}")

    def _unknown_message(self, name: str) -> str:
        return unknown_name_message(self.model, name)


def unknown_name_message(model: TreeModel, name: str) -> str:
    """Why ``name`` is not a value of the model, and which names are."""
    tree = model.tree
    element, _, prop = name.partition(".")
    elements = {
        **{b: "body" for b in tree.body_names},
        **{j: "joint" for j in tree.dof_names},
        **{a: "actuator" for a in tree.actuator_names},
    }
    if element not in elements and element != "gravity":
        return (
            f"no element named {element!r} in {model.source.name}; bodies: "
            f"{', '.join(tree.body_names)}; joints: {', '.join(tree.dof_names) or 'none'}; "
            f"actuators: {', '.join(tree.actuator_names) or 'none'}"
        )
    props = sorted(k.partition(".")[2] for k in model.names if k.partition(".")[0] == element)
    kind = elements.get(element, "value")
    return f"{kind} {element!r} has no value {prop!r}; it has: {', '.join(props)}"


def model_file(spec: RigSpec) -> Path | None:
    """The MJCF/URDF file named by ``[rig] mjcf`` / ``urdf``, relative to the spec; None for a
    spec with ``[tree]`` tables."""
    try:
        with open(spec.path, "rb") as fh:
            rig = tomllib.load(fh).get("rig", {})
    except (OSError, tomllib.TOMLDecodeError):  # load_spec read it already: unchanged file
        return None
    given = [k for k in ("mjcf", "urdf") if k in rig]
    if len(given) > 1:
        raise TreeError(f"{spec.path}: [rig] give mjcf or urdf, not both")
    if not given:
        return None
    key = given[0]
    path = (spec.path.parent / str(rig[key])).resolve()
    suffixes = MJCF_SUFFIXES if key == "mjcf" else URDF_SUFFIXES
    if path.suffix.lower() not in suffixes:
        raise TreeError(
            f"{spec.path}: [rig] {key} = {rig[key]!r}: expected a {' or '.join(suffixes)} file"
        )
    if "tree" in spec.sections:
        raise TreeError(f"{spec.path}: [rig] {key} and [tree] both describe the tree; keep one")
    if not path.exists():
        raise TreeError(f"{spec.path}: [rig] {key} = {rig[key]!r}: no such file {path}")
    return path


def load_tree_rig(spec: RigSpec) -> TreeRig:
    """Build and check the tree rig of ``spec``; every error names the file and the element."""
    input_units = {
        str(s["actuator"]): str(s.get("unit", ""))
        for s in spec.sensors.values()
        if s.get("kind") == "control" and "actuator" in s
    }
    path = model_file(spec)
    desc = read_model_file(path) if path is not None else read_toml_tree(spec, input_units)
    model = build_model(desc, input_units)
    values = {}
    for name in [*spec.fixed, *spec.parameters]:
        table = "fixed" if name in spec.fixed else "parameters"
        if name not in model.names:
            raise TreeError(f"{spec.path}: [{table}] {name}: {unknown_name_message(model, name)}")
        values[name] = spec.value(name, model.units[name])
    params = model.with_values(values)
    where = {body: _origins(spec, model, body, values) for body in model.tree.body_names}
    check_bodies(model, params, where)
    encoders, inputs = _sensors(spec, model)
    return TreeRig(spec, model, params, values, encoders, inputs)


def _origins(spec: RigSpec, model: TreeModel, body: str, values: dict) -> str:
    """Where a body's inertial values come from, for messages."""
    keys = [k for k in values if k.startswith(f"{body}.")]
    source = f"{model.source}"
    return f"{source} with {spec.path} [{', '.join(keys)}]" if keys else source


def _sensors(spec: RigSpec, model: TreeModel):
    tree = model.tree
    encoders, inputs = [], []
    for name, table in spec.sensors.items():
        where = f"sensors.{name}"
        kind = table.get("kind")
        if kind not in SENSOR_KINDS:
            raise TreeError(
                f"{spec.path}: [{where}] kind = {kind!r}; a tree rig reads "
                f"{' or '.join(SENSOR_KINDS)} sensors"
            )
        if kind == "encoder":
            joint = table.get("joint")
            if joint not in tree.dof_names:
                raise TreeError(
                    f"{spec.path}: [{where}] joint = {joint!r} is not a joint of the tree; add "
                    f"joint = one of {', '.join(tree.dof_names)}"
                )
            dof = tree.dof_names.index(joint)
            unit = "rad" if tree.joint_types[tree.dof_bodies[dof]] == REVOLUTE else "m"
            cpr = table.get("counts_per_rev")
            encoders.append(
                Encoder(
                    name=name,
                    joint=joint,
                    dof=dof,
                    channel=int(table.get("channel", len(encoders))),
                    counts_per_rev=None if cpr is None else int(cpr),
                    sign=float(table.get("sign", 1)),
                    offset=_table_quantity(spec, where, table, "offset", unit),
                    noise=_table_quantity(spec, where, table, "noise", unit),
                    unit=unit,
                )
            )
        else:
            actuator = table.get("actuator")
            if actuator not in tree.actuator_names:
                raise TreeError(
                    f"{spec.path}: [{where}] actuator = {actuator!r} is not an actuator of the "
                    f"tree; actuators: {', '.join(tree.actuator_names) or 'none'}"
                )
            index = tree.actuator_names.index(actuator)
            body = tree.actuator_joints[index]
            default = effort_unit(tree.joint_types[body] == REVOLUTE)
            inputs.append(ControlInput(name, actuator, index, str(table.get("unit", default))))
    encoders.sort(key=lambda e: e.channel)
    return tuple(encoders), tuple(inputs)


def _table_quantity(spec: RigSpec, where: str, table: dict, key: str, unit: str) -> float:
    """SI value of an optional ``key = { value, unit }`` of a sensor table (0 if absent)."""
    from physid.spec import _quantity

    if key not in table:
        return 0.0
    return _quantity(spec, f"{where}.{key}", table[key], unit)
