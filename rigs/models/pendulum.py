"""Pendulum rig (Marklund et al., Section 4.2): one body on a frictional hinge to the world.

World frame: y up, the hinge axis is z through the origin, θ = 0 hangs straight down.
"""

from __future__ import annotations

import jax.numpy as jnp

from physid.dynamics.multibody import WORLD, HingeParams, Params, System, hinge_at_rest
from physid.dynamics.quaternion import axis_angle, rotate
from physid.rigs.models.hinged import HingedRig, simulate_to_folder, simulation_engine
from physid.spec import RigSpec

GRAVITY = 9.82  # m/s², Section 4.2

UNITS = {
    "m": "kg",
    "l": "m",
    "J": "kg m^2",
    "J_perp": "kg m^2",
    "r": "m",
    "eps_lin": "m/N",
    "eps_rot": "rad/N m",
    "tau": "s",
    "eps_fric": "rad/N m s",
    "b": "N m s/rad",
    "mu": "1",
}
OPTIONAL = {"mu_delta": ("1", 0.0), "zeta": ("s^2/rad^2", 0.0)}


def build(spec: RigSpec) -> HingedRig:
    """The pendulum model of ``spec``; Stribeck friction (4.1) if mu_delta is in the spec."""
    from physid.rigs.models.hinged import spec_values

    units = dict(UNITS)
    stribeck = "mu_delta" in spec.fixed or "mu_delta" in spec.parameters
    if stribeck:
        units.update({k: u for k, (u, _) in OPTIONAL.items()})
    values = spec_values(spec, units, nonnegative={"b", "mu", "mu_delta", "zeta"})
    # Without dry friction (mu = 0, not identified) the friction rows carry no impulse: leave
    # them out so that the step needs no LCP.
    dry = "mu" in spec.parameters or values["mu"] > 0
    l = values["l"]
    rest_r = jnp.array([[0.0, -l, 0.0]])
    rest_e = jnp.array([[1.0, 0.0, 0.0, 0.0]])
    hinge = hinge_at_rest(
        WORLD, 0, (0, 0, 0), (0, 0, 1), rest_r, rest_e, dry=dry, viscous=True, stribeck=stribeck
    )
    system = System(1, (hinge,))

    def make_params(v: dict) -> Params:
        hp = HingeParams(
            eps_lin=v["eps_lin"],
            eps_rot=v["eps_rot"],
            tau=v["tau"],
            b=v["b"],
            mu=v["mu"],
            r=v["r"],
            eps_fric=v["eps_fric"],
            mu_delta=v.get("mu_delta", 0.0),
            zeta=v.get("zeta", 0.0),
            K=0.0,
            J_shaft=0.0,
        )
        J = jnp.stack([v["J_perp"], v["J_perp"], v["J"]])
        return Params(jnp.stack([v["m"]]), J[None], jnp.array([0.0, -GRAVITY, 0.0]), (hp,))

    def state_from_angles(angles):
        e = axis_angle([0.0, 0.0, 1.0], angles[0])
        return (rotate(e, rest_r[0])[None], e[None])

    # No physical-consistency constraint (bodies=None): the pendulum swings in a plane, so the
    # data determine only J about the hinge axis, and a planar mass distribution is
    # consistent iff J ≥ 0 (the box). J_perp stands in for the inertia about the two axes the
    # hinge locks; it only conditions the compliant hinge and is not a claim about the body
    # (the spec's 1e-4 with J = 3.9e-3 kg m² would violate 2 J_perp ≥ J).
    return HingedRig(system, values, make_params, state_from_angles, _channels(spec), units)


def _channels(spec: RigSpec) -> tuple[str, ...]:
    encoders = sorted(
        (s.get("channel", 0), name)
        for name, s in spec.sensors.items()
        if s.get("kind") == "encoder"
    )
    return tuple(name for _, name in encoders) or ("theta",)


def simulate(spec: RigSpec, options, console):
    """``physid simulate``: release from rest at ``[simulation] theta0``, on the rigid joint
    (the tree estimator's integrator) or, with engine "spook", on SPOOK's compliant hinge
    (``hinged.simulation_engine``)."""
    from physid.rigs.models.identify_tree import estimator

    engine = simulation_engine(spec, options, estimator(spec))
    rig = tree_rig(spec) if engine == "tree" else build(spec)
    theta0 = spec.section_value("simulation", "theta0", "rad")
    return simulate_to_folder(spec, rig, engine, [theta0], options, console)


def identify(spec: RigSpec, data, out, console):
    """``physid identify``: joint state and parameter LM (rigs.models.identify_hinged)."""
    from physid.rigs.models.identify_tree import estimator, identify_tree

    if estimator(spec) == "tree":
        return identify_tree(spec, tree_rig(spec), data, out, console)
    from physid.rigs.models.identify_hinged import identify_hinged

    return identify_hinged(spec, build(spec), data, out, console)


# ------------------------------------------------------------------ rigid-joint tree (issue 22)

TREE_JOINTS = ("theta",)


def tree_rig(spec: RigSpec):
    """The same pendulum as a kinematic tree with a rigid joint (generalized coordinate θ),
    for ``[method] estimator = "tree"``: one body, its frame at the centre of mass (0, −l, 0)
    at rest, turning about z through the origin; inertia diag(J_perp, J_perp, J) about the
    centre of mass; viscous b. Dry friction: SPOOK's bound μ r |λ| at the static load (the
    hinge carrying the weight, ``rigs.models.furuta.tree_rig``): f_c = μ r m g, and with
    Stribeck (4.1) f_d = μ_δ r m g at v_s = 1/√ζ."""
    from physid.rigs.models.tree_rig import FitRig, encoder_sensors

    rig = build(spec)
    channels, observed, noise = encoder_sensors(spec, TREE_JOINTS, ("revolute",))
    values = dict(rig.values)
    values.setdefault("mu_delta", 0.0)
    values.setdefault("zeta", 0.0)
    units = {**UNITS, **{k: u for k, (u, _) in OPTIONAL.items()}}
    return FitRig(
        tree=_pendulum_tree(), values=values, make_params=pendulum_tree_params,
        channels=channels, observed=observed, inputs=(), sensor_noise=noise,
        parameter_units=units, bodies=None,
    )  # fmt: skip


def _pendulum_tree():
    from physid.dynamics.tree import REVOLUTE, Tree

    return Tree(("pendulum",), (-1,), TREE_JOINTS, (REVOLUTE,), unroll=True)


def pendulum_tree_params(v: dict):
    """TreeParams of the rigid-joint pendulum from its named SI values (traceable)."""
    from physid.dynamics.tree import (
        ActuatorParams,
        BodyParams,
        DofParams,
        JointGeometry,
        TreeParams,
    )

    one = jnp.ones(1)
    l, m = v["l"], v["m"]
    load = v["r"] * m * GRAVITY
    zeta = jnp.asarray(v["zeta"], float)
    vs = jnp.where(zeta > 0, 1.0 / jnp.sqrt(jnp.where(zeta > 0, zeta, 1.0)), 0.0)
    dofs = DofParams(
        armature=0.0 * one,
        damping=v["b"] * one,
        frictionloss=v["mu"] * load * one,
        stribeck=v["mu_delta"] * load * one,
        stribeck_velocity=vs * one,
        friction_velocity=0.0 * one,
        stiffness=0.0 * one,
        springref=0.0 * one,
    )
    zero = 0.0 * l
    return TreeParams(
        bodies=BodyParams(
            mass=m * one,
            com=jnp.zeros((1, 3)),
            inertia=jnp.diag(jnp.stack([v["J_perp"], v["J_perp"], v["J"]]))[None],
        ),
        joints=JointGeometry(
            rotation=jnp.eye(3)[None],
            translation=jnp.stack([zero, -l, zero])[None],
            axis=jnp.array([[0.0, 0.0, 1.0]]),
            anchor=jnp.stack([zero, l, zero])[None],
        ),
        dofs=dofs,
        actuators=ActuatorParams(gear=jnp.zeros(0), km=jnp.zeros(0), Rm=jnp.zeros(0)),
        gravity=jnp.array([0.0, -GRAVITY, 0.0]),
    )
