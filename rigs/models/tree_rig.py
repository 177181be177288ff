"""Rigs identified on generalized coordinates: a kinematic tree, the map from a spec's named
values to its parameters, and which log channels read which joints and drive which actuators.

Built from a spec in one of two ways:

- ``[rig] model = "tree"`` with ``file = "rig.xml"`` (an MJCF or URDF file, read by MuJoCo's
  compiler, ``rigs.models.tree.mjcf``): the names are the tree's own
  (``arm.inertia.zz``, ``theta.damping``, ``motor.gear``, ``gravity``...; see
  ``rigs.models.tree.model``), plus ``tilt.x``, ``tilt.y``, ``tilt.z`` (rad): a rotation
  vector applied to the model's gravity, the stand's tilt of Marklund et al., Section 4.6;
- the paper's pendulum and Furuta specs (``rigs.models.pendulum.tree_rig``,
  ``rigs.models.furuta.tree_rig``): the same names as their SPOOK models, on the rigid-joint
  tree of the same bodies.

Sensors: every ``[sensors.X] kind = "encoder"`` reads one joint, ``joint = "NAME"`` (default:
the joint named X), in channel order. Inputs: every actuator takes one log column, the
``[sensors.X] kind = "control"`` with ``actuator = "NAME"`` (default: the log's ``u`` column
for a rig with one actuator).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import jax.numpy as jnp
import numpy as np

from physid.dynamics.quaternion import from_rotvec, rotate
from physid.dynamics.tree import REVOLUTE, Tree, TreeParams
from physid.errors import InputError
from physid.estimation.consistency import BodyInertia
from physid.spec import RigSpec
from physid.units import to_si

TILT_NAMES = ("tilt.x", "tilt.y", "tilt.z")


@dataclass(frozen=True)
class TreeRig:
    """A tree rig built from a spec.

    ``make_params(values, base)`` maps named SI values (numbers or JAX tracers; ``values`` has
    every name) and the ``base`` parameters (a TreeParams of numbers, or None) to the tree's
    parameters. ``channels`` are the encoder log columns and ``observed`` the joint (index in
    q) each one reads; ``inputs`` the log column of each actuator; ``sensor_noise`` each
    encoder's σ_y (rad or m). ``bodies(values)`` gives each body's inertia for the
    physical-consistency LMI (None: not enforced)."""

    tree: Tree
    base: TreeParams | None
    values: dict[str, float]
    make_params: Callable[[dict, TreeParams | None], TreeParams]
    channels: tuple[str, ...]
    observed: tuple[int, ...]
    inputs: tuple[str, ...]
    sensor_noise: np.ndarray
    parameter_units: dict[str, str]
    bodies: Callable[[dict], list[BodyInertia]] | None = None

    def params(self, values: dict | None = None) -> TreeParams:
        """The tree's parameters at the rig's values, with ``values`` replacing some."""
        merged = {k: jnp.asarray(float(v)) for k, v in {**self.values, **(values or {})}.items()}
        return self.make_params(merged, self.base)


def tilted(gravity, values: dict, names=TILT_NAMES):
    """``gravity`` [3] turned by the rotation vector (values[names[0..2]]), rad (Section 4.6:
    the stand's tilt as a rotation of the gravitational acceleration)."""
    psi = jnp.stack([jnp.asarray(values.get(k, 0.0), float) for k in names])
    return rotate(from_rotvec(psi), gravity)


def encoder_sensors(spec: RigSpec, joint_names: tuple[str, ...], dof_types) -> tuple:
    """(channels, observed joint indices, σ_y per channel) from the spec's encoder sensors in
    channel order; each names its joint (``joint = ...``, default: the sensor's own name).
    σ_y: the sensor's ``noise`` if given, else the quantization of ``counts_per_rev``
    (one count / √12), else 1e-3 rad."""
    found = sorted(
        (s.get("channel", 0), name, s)
        for name, s in spec.sensors.items()
        if isinstance(s, dict) and s.get("kind") == "encoder"
    )
    if not found:
        raise spec.error("sensors", "no encoder sensor; add [sensors.NAME] kind = \"encoder\"")
    channels, observed, noise = [], [], []
    for _, name, s in found:
        joint = str(s.get("joint", name))
        if joint not in joint_names:
            raise spec.error(
                f"sensors.{name}",
                f"reads joint {joint!r}, which the rig does not have; joints: "
                + ", ".join(joint_names)
                + ' (set joint = "NAME")',
            )
        j = joint_names.index(joint)
        channels.append(name)
        observed.append(j)
        noise.append(_sensor_noise(spec, name, s, dof_types[j] == REVOLUTE))
    return tuple(channels), tuple(observed), np.array(noise)


def _sensor_noise(spec: RigSpec, name: str, s: dict, revolute: bool) -> float:
    noise = s.get("noise")
    if isinstance(noise, dict) and "value" in noise:
        value = to_si(float(noise["value"]), str(noise.get("unit", "rad" if revolute else "m")))
    elif isinstance(noise, int | float) and not isinstance(noise, bool):
        value = float(noise)
    elif "counts_per_rev" in s and revolute:
        value = 2 * np.pi / float(s["counts_per_rev"]) / np.sqrt(12.0)
    else:
        value = 1e-3
    if not value > 0:
        raise spec.error(f"sensors.{name}.noise", f"must be positive, got {value:g}")
    return value


def control_inputs(spec: RigSpec, actuator_names: tuple[str, ...]) -> tuple[str, ...]:
    """The log column that drives each actuator: ``[sensors.X] kind = "control"`` with
    ``actuator = "NAME"`` (column X), or ``u`` for a rig with one actuator."""
    columns = {}
    for name, s in spec.sensors.items():
        if isinstance(s, dict) and s.get("kind") == "control":
            target = s.get("actuator")
            if target is None and len(actuator_names) == 1:
                target = actuator_names[0]
            if target is not None and target not in actuator_names:
                raise spec.error(
                    f"sensors.{name}.actuator",
                    f"{target!r} is not an actuator of the rig; actuators: "
                    + (", ".join(actuator_names) or "none"),
                )
            if target is not None:
                columns[target] = "u" if name in ("u", "control") else name
    out = []
    for a in actuator_names:
        if a in columns:
            out.append(columns[a])
        elif len(actuator_names) == 1:
            out.append("u")
        else:
            raise spec.error(
                "sensors",
                f"actuator {a!r} has no input: add [sensors.NAME] kind = \"control\" "
                f'actuator = "{a}"',
            )
    return tuple(out)


# ------------------------------------------------------------------ rigs from an MJCF/URDF file


@functools.lru_cache(maxsize=8)
def _model_of(path: Path, mtime: float):
    from physid.rigs.models.tree.mjcf import read_model_file
    from physid.rigs.models.tree.model import build_model

    return build_model(read_model_file(path))


def _file_params(values: dict, base: TreeParams, addresses: tuple) -> TreeParams:
    """``base`` with the named values at their addresses, gravity turned by the tilt."""
    from physid.rigs.models.tree.model import apply_values

    params = apply_values(base, {addr: values[name] for name, addr in addresses})
    return TreeParams(
        params.bodies, params.joints, params.dofs, params.actuators,
        tilted(params.gravity, values),
    )  # fmt: skip


@functools.lru_cache(maxsize=32)
def _file_maker(addresses: tuple) -> Callable:
    """One ``make_params`` per set of named values (a stable function: the compiled residuals
    are cached by it)."""
    return functools.partial(_file_params, addresses=addresses)


def from_model_file(spec: RigSpec) -> TreeRig:
    """The tree rig of a ``model = "tree"`` spec: ``[rig] file`` (MJCF or URDF, relative to
    the spec), the spec's [fixed] values and [parameters] by the tree's names."""
    file = _rig_file(spec)
    path = (Path(spec.path).parent / file).resolve()
    model = _model_of(path, path.stat().st_mtime if path.exists() else 0.0)
    tree = model.tree
    units = dict(model.units)
    units.update({k: "rad" for k in TILT_NAMES})
    values = {}
    for name in [*spec.fixed, *spec.parameters]:
        if name not in units:
            raise spec.error(
                f"fixed.{name}" if name in spec.fixed else f"parameters.{name}",
                f"{path.name} has no value {name!r}; names are <body>.mass, "
                "<body>.inertia.xx, <joint>.damping, <joint>.frictionloss, <actuator>.gear, "
                "gravity, tilt.x ... (docs/tree-estimator.md)",
            )
        values[name] = spec.value(name, units[name])
    spec.check_parameters(units)
    addresses = tuple(sorted((k, model.names[k]) for k in values if k in model.names))
    for k in TILT_NAMES:
        values.setdefault(k, 0.0)
    dof_types = [tree.joint_types[b] for b in tree.dof_bodies]
    channels, observed, noise = encoder_sensors(spec, tree.dof_names, dof_types)
    inputs = control_inputs(spec, tree.actuator_names)
    bodies = _file_bodies(model, tree, values) if tree.n_bodies else None
    return TreeRig(
        tree=_compact(tree), base=model.params, values=values,
        make_params=_file_maker(addresses), channels=channels, observed=observed,
        inputs=inputs, sensor_noise=noise, parameter_units=units, bodies=bodies,
    )  # fmt: skip


def _rig_file(spec: RigSpec) -> str:
    import tomllib

    try:
        raw = tomllib.loads(Path(spec.path).read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise InputError(f"{spec.path}: cannot read the spec again: {exc}") from None
    file = raw.get("rig", {}).get("file")
    if not isinstance(file, str):
        raise spec.error(
            "rig.file", 'a model = "tree" spec names its MJCF or URDF file: file = "rig.xml"'
        )
    return file


def _file_bodies(model, tree: Tree, values: dict):
    """Each body's inertial values as a function of the named values (for the LMI)."""
    from physid.rigs.models.tree.model import apply_values

    names = tuple(sorted((k, model.names[k]) for k in values if k in model.names))

    def bodies(v: dict) -> list[BodyInertia]:
        p = apply_values(model.params, {addr: float(v[k]) for k, addr in names})
        b = p.bodies
        return [
            BodyInertia(tree.body_names[i], float(b.mass[i]), np.asarray(b.com[i]),
                        np.asarray(b.inertia[i]))
            for i in range(tree.n_bodies)
        ]  # fmt: skip

    return bodies


def _compact(tree: Tree) -> Tree:
    """Small trees unrolled: the per-step recursions of a 2-body Furuta are a few dozen
    operations, and the scan's loop overhead would dominate them."""
    from dataclasses import replace

    return replace(tree, unroll=True) if tree.n_bodies <= 8 else tree
