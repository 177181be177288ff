"""What the tree estimator needs of a rig (``FitRig``): a kinematic tree, the map from named SI
values to its parameters, which log channels read which joints and drive which actuators, and
each encoder's noise.

Built from a spec in one of two ways:

- ``[rig] model = "tree"`` (``[tree]`` tables, or an MJCF/URDF file): the rig of
  ``rigs.models.tree.rig.load_tree_rig``, its own value names (``arm.inertia.zz``,
  ``theta.damping``, ``motor.gear``, ``gravity.x`` ...), its encoders and inputs
  (``from_tree_rig``);
- the paper's pendulum and Furuta specs (``rigs.models.pendulum.tree_rig``,
  ``rigs.models.furuta.tree_rig``): the same names as their SPOOK models, on the rigid-joint
  tree of the same bodies; their ``[sensors]`` tables read by ``encoder_sensors`` and
  ``control_inputs`` below.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field

import jax
import numpy as np

from physid.dynamics.tree import REVOLUTE, Tree, TreeParams
from physid.estimation.consistency import BodyInertia
from physid.spec import RigSpec
from physid.units import to_si

# Encoder noise when a sensor states neither ``noise`` nor ``counts_per_rev`` (rad or m).
DEFAULT_ENCODER_NOISE = 1e-3


@dataclass(frozen=True, eq=False)
class FitRig:
    """A rig as the tree estimator sees it.

    ``make_params(values)`` maps named SI values (numbers or JAX tracers; every name the rig
    uses) to the tree's parameters; compared by identity, so one rig compiles once.
    ``channels`` are the encoder log columns and ``observed`` the joint (index in q) each one
    reads; ``inputs`` the log column of each actuator; ``sensor_noise`` each encoder's σ_y
    (rad or m). ``bodies(values)`` gives each body's inertia for the physical-consistency LMI
    (None: not enforced)."""

    tree: Tree
    values: dict[str, float]
    make_params: Callable[[dict], TreeParams]
    channels: tuple[str, ...]
    observed: tuple[int, ...]
    inputs: tuple[str, ...]
    sensor_noise: np.ndarray
    parameter_units: dict[str, str]
    bodies: Callable[[dict], list[BodyInertia]] | None = None


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
        raise spec.error("sensors", 'no encoder sensor; add [sensors.NAME] kind = "encoder"')
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
        value = DEFAULT_ENCODER_NOISE
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
                f'actuator {a!r} has no input: add [sensors.NAME] kind = "control" '
                f'actuator = "{a}"',
            )
    return tuple(out)


# ------------------------------------------------------------------ rigs of model = "tree"


def from_tree_rig(rig) -> FitRig:
    """The ``FitRig`` of a ``model = "tree"`` rig (``rigs.models.tree.rig.TreeRig``): its
    encoders in channel order (σ_y: the sensor's ``noise``, else one count/√12, else
    ``DEFAULT_ENCODER_NOISE``), one input per actuator (``[sensors.X] kind = "control"``,
    or the log's ``u`` for a rig with one actuator)."""
    model, tree = rig.model, rig.tree
    noise = []
    for e in rig.encoders:
        if e.noise > 0:
            noise.append(e.noise)
        elif e.counts_per_rev and e.unit == "rad":
            noise.append(2 * np.pi / e.counts_per_rev / np.sqrt(12.0))
        else:
            noise.append(DEFAULT_ENCODER_NOISE)
    by_actuator = {c.actuator: c.name for c in rig.inputs}
    inputs = []
    for a in tree.actuator_names:
        if a in by_actuator:
            inputs.append(by_actuator[a])
        elif len(tree.actuator_names) == 1:
            inputs.append("u")
        else:
            raise rig.error(
                "sensors", f'actuator {a!r} has no input: add [sensors.NAME] kind = "control" '
                f'actuator = "{a}"'
            )  # fmt: skip
    values = dict(rig.values)

    make_params = ModelParams.of(model)

    def bodies(v: dict) -> list[BodyInertia]:
        b = model.with_values({k: float(x) for k, x in v.items()}).bodies
        return [
            BodyInertia(tree.body_names[i], float(b.mass[i]), np.asarray(b.com[i]),
                        np.asarray(b.inertia[i]))
            for i in range(tree.n_bodies)
        ]  # fmt: skip

    return FitRig(
        tree=_compact(tree), values=values, make_params=make_params,
        channels=tuple(e.name for e in rig.encoders), observed=tuple(e.dof for e in rig.encoders),
        inputs=tuple(inputs), sensor_noise=np.array(noise), parameter_units=dict(model.units),
        bodies=bodies if tree.n_bodies else None,
    )  # fmt: skip


@dataclass(frozen=True)
class ModelParams:
    """``make_params`` of a model read from a spec: named SI values → ``TreeParams``.

    Equal (and hashing equal) for equal models, so the tree estimator's compiled residuals,
    keyed by the rig's structure (``estimation.tree_problem.compiled``), are reused by a second
    fit of the same rig; a closure over the model was a new key per call, and every fit traced
    and compiled again (~48 s of CPU on a 10 s Furuta log)."""

    key: tuple  # the value names and a digest of every fixed parameter array
    model: object = field(compare=False, repr=False)

    @classmethod
    def of(cls, model) -> ModelParams:
        digest = hashlib.sha256()
        for leaf in jax.tree.leaves(model.params):
            a = np.asarray(leaf)
            digest.update(str(a.shape).encode() + a.tobytes())
        names = tuple((k, tuple(map(str, v))) for k, v in model.names.items())
        return cls((model.tree, names, digest.hexdigest()), model)

    def __call__(self, values: dict) -> TreeParams:
        return self.model.with_values(values)


def _compact(tree: Tree) -> Tree:
    """Small trees unrolled: the per-step recursions of a 2-body Furuta are a few dozen
    operations, and the scan's loop overhead would dominate them."""
    from dataclasses import replace

    return replace(tree, unroll=True) if tree.n_bodies <= 8 else tree
