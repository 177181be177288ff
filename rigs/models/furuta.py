"""Furuta pendulum rig (Marklund et al., Section 4.3, Figure 3, Table 1).

World frame: y up. Arm A turns about the vertical hinge 1 at the origin (A's local z), with
its centre of mass l1 along the arm (A's local x); hinge 2 lies along the arm at lA; pendulum
B turns about it (B's local y) with its centre of mass l2 along B's local x, which points down
at θ2 = 0. Hinge 1 carries the motor (F.3). Both hinges have drag (F.2) and dry friction (F.4).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from physid.dynamics.multibody import WORLD, HingeParams, Params, System, hinge_at_rest
from physid.dynamics.quaternion import axis_angle, from_rotvec, qmul, rotate
from physid.estimation.consistency import BodyInertia
from physid.rigs.models.hinged import (
    HingedRig,
    simulate_to_folder,
    simulation_engine,
    spec_values,
)
from physid.rigs.models.pendulum import _channels
from physid.spec import RigSpec

GRAVITY = 9.82  # m/s², Section 4.3

UNITS = {
    "l1": "m",
    "lA": "m",
    "l2": "m",
    "m_A": "kg",
    "m_B": "kg",
    "J_Axx": "kg m^2",
    "J_Ayy": "kg m^2",
    "J_Azz": "kg m^2",
    "J_Bxx": "kg m^2",
    "J_Byy": "kg m^2",
    "J_Bzz": "kg m^2",
    "J_shaft": "kg m^2",
    "r1": "m",
    "r2": "m",
    "tau1": "s",
    "tau2": "s",
    "eps_lin1": "m/N",
    "eps_lin2": "m/N",
    "eps_rot1": "rad/N m",
    "eps_rot2": "rad/N m",
    "eps_fric1": "rad/N m s",
    "eps_fric2": "rad/N m s",
    "b1": "N m s/rad",
    "b2": "N m s/rad",
    "mu1": "1",
    "mu2": "1",
    "K": "N m/V",
    "tilt_x": "rad",
    "tilt_z": "rad",
}
NONNEGATIVE = {"b1", "b2", "mu1", "mu2"}


def build(spec: RigSpec) -> HingedRig:
    """The Furuta model of ``spec``."""
    values = spec_values(spec, UNITS, NONNEGATIVE | {"K", "tilt_x", "tilt_z"})
    l1, lA, l2 = values["l1"], values["lA"], values["l2"]
    # Rest: θ1 = θ2 = 0. A: x along world x, z up (rotation −π/2 about x). B: x down, y along
    # the arm (rotation −π/2 about z).
    rest_r = jnp.array([[l1, 0.0, 0.0], [lA, -l2, 0.0]])
    rest_e = jnp.stack([axis_angle([1.0, 0, 0], -jnp.pi / 2), axis_angle([0, 0, 1.0], -jnp.pi / 2)])
    hinge1 = hinge_at_rest(WORLD, 0, (0, 0, 0), (0, 1, 0), rest_r, rest_e, dry=True, motor=True)
    hinge2 = hinge_at_rest(0, 1, (lA, 0, 0), (1, 0, 0), rest_r, rest_e, dry=True)
    system = System(2, (hinge1, hinge2))

    def make_params(v: dict) -> Params:
        def hinge(i: int, motor: bool) -> HingeParams:
            return HingeParams(
                eps_lin=v[f"eps_lin{i}"],
                eps_rot=v[f"eps_rot{i}"],
                tau=v[f"tau{i}"],
                b=v[f"b{i}"],
                mu=v[f"mu{i}"],
                r=v[f"r{i}"],
                eps_fric=v[f"eps_fric{i}"],
                mu_delta=0.0,
                zeta=0.0,
                K=v["K"] if motor else 0.0,
                J_shaft=v["J_shaft"] if motor else 0.0,
            )

        J = jnp.array(
            [
                [v["J_Axx"], v["J_Ayy"], v["J_Azz"]],
                [v["J_Bxx"], v["J_Byy"], v["J_Bzz"]],
            ]
        )
        tilt = from_rotvec(jnp.stack([v["tilt_x"], 0.0 * v["tilt_x"], v["tilt_z"]]))
        g = rotate(tilt, jnp.array([0.0, -GRAVITY, 0.0]))
        m = jnp.stack([v["m_A"], v["m_B"]])
        return Params(m, J, g, (hinge(1, True), hinge(2, False)))

    def state_from_angles(angles):
        turn1 = axis_angle([0.0, 1.0, 0.0], angles[0])
        turn2 = axis_angle([1.0, 0.0, 0.0], angles[1])
        pivot = jnp.array([lA, 0.0, 0.0])
        rB = pivot + rotate(turn2, rest_r[1] - pivot)
        eB = qmul(turn2, rest_e[1])
        r = jnp.stack([rotate(turn1, rest_r[0]), rotate(turn1, rB)])
        e = jnp.stack([qmul(turn1, rest_e[0]), qmul(turn1, eB)])
        return r, e

    return HingedRig(system, values, make_params, state_from_angles, _channels(spec), UNITS, bodies)


def bodies(v: dict) -> list[BodyInertia]:
    """Arm A and pendulum B for the physical-consistency constraint: principal moments about
    their centres of mass (the body frames' origins). The motor's J_shaft is a rotor about
    hinge 1 with one known moment, consistent whenever positive (its box)."""
    return [
        BodyInertia(
            "arm A", v["m_A"], (0.0, 0.0, 0.0), np.diag([v["J_Axx"], v["J_Ayy"], v["J_Azz"]])
        ),
        BodyInertia(
            "pendulum B", v["m_B"], (0.0, 0.0, 0.0), np.diag([v["J_Bxx"], v["J_Byy"], v["J_Bzz"]])
        ),
    ]


def simulate(spec: RigSpec, options, console):
    """``physid simulate``: release from rest at ``[simulation] theta1, theta2``, driven by
    ``--control``, on rigid joints (the tree estimator's integrator) or, with engine
    "spook", on SPOOK's compliant hinges (``hinged.simulation_engine``)."""
    from physid.rigs.models.identify_tree import estimator

    engine = simulation_engine(spec, options, estimator(spec))
    rig = tree_rig(spec) if engine == "tree" else build(spec)
    angles = [spec.section_value("simulation", f"theta{i}", "rad") for i in (1, 2)]
    return simulate_to_folder(spec, rig, engine, angles, options, console)


def identify(spec: RigSpec, data, out, console):
    """``physid identify``: joint state and parameter LM (rigs.models.identify_hinged)."""
    from physid.rigs.models.identify_tree import estimator, identify_tree

    if estimator(spec) == "tree":
        return identify_tree(spec, tree_rig(spec), data, out, console)
    from physid.rigs.models.identify_hinged import identify_hinged

    return identify_hinged(spec, build(spec), data, out, console)


# ------------------------------------------------------------------ rigid-joint tree (issue 22)

TREE_JOINTS = ("theta1", "theta2")


def tree_rig(spec: RigSpec):
    """The same Furuta as a kinematic tree with rigid joints (generalized coordinates θ1, θ2),
    for ``[method] estimator = "tree"``: the same bodies, frames, names and units as the
    SPOOK model, without the hinges' compliance (eps*, tau*, r* only enter the dry
    friction, below).

    Arm A: body frame = its SPOOK frame (origin at its centre of mass, z along hinge 1), joint
    θ1 about z through the world origin. Pendulum B: its SPOOK frame, joint θ2 about its y
    axis through the point lA along the arm. The motor is a torque K u on θ1 with the shaft
    inertia J_shaft as the joint's armature; b1, b2 are viscous; gravity (0, −9.82, 0) turned
    by the tilt rotation vector (tilt_x, 0, tilt_z), as in ``make_params``.

    Dry friction: SPOOK bounds a hinge's friction impulse by μ (r (|λx| + |λy| + |λz|) +
    |λ_rot1| + |λ_rot2|), proportional to the load the hinge carries (F.4). A tree has no
    hinge loads, so each joint's dry friction is that bound at the rig's static load:
    f_c1 = μ1 (r1 (m_A + m_B) g + (m_A l1 + m_B lA) g) (weight and its moment on hinge 1),
    f_c2 = μ2 r2 m_B g (hinge 2 carries B's weight). μ keeps its name and meaning at rest;
    the swing's centripetal loads are not modelled.
    """
    from physid.rigs.models.tree_rig import FitRig, control_inputs, encoder_sensors

    rig = build(spec)
    tree = _furuta_tree()
    channels, observed, noise = encoder_sensors(spec, TREE_JOINTS, ("revolute",) * 2)
    return FitRig(
        tree=tree, values=dict(rig.values), make_params=furuta_tree_params,
        channels=channels, observed=observed, inputs=control_inputs(spec, ("motor",)),
        sensor_noise=noise, parameter_units=UNITS, bodies=bodies,
    )  # fmt: skip


def _furuta_tree():
    from physid.dynamics.tree import REVOLUTE, TORQUE, Tree

    return Tree(
        body_names=("arm", "pendulum"),
        parents=(-1, 0),
        joint_names=TREE_JOINTS,
        joint_types=(REVOLUTE, REVOLUTE),
        actuator_names=("motor",),
        actuator_joints=(0,),
        actuator_kinds=(TORQUE,),
        unroll=True,
    )


def furuta_tree_params(v: dict):
    """TreeParams of the rigid-joint Furuta from its named SI values (traceable)."""
    from physid.dynamics.tree import (
        ActuatorParams,
        BodyParams,
        DofParams,
        JointGeometry,
        TreeParams,
    )

    one = jnp.ones(())
    zero = 0.0 * one
    # SPOOK rest frames: A = rotation −π/2 about x (z up along hinge 1), B = −π/2 about z
    # (x down the pendulum, y along the arm).
    R_A = jnp.array([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0], [0.0, -1.0, 0.0]])
    R_B = jnp.array([[0.0, 1.0, 0.0], [-1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    l1, lA, l2 = v["l1"], v["lA"], v["l2"]
    r_A = jnp.stack([l1, zero, zero])
    r_B = jnp.stack([lA, -l2, zero])
    g = GRAVITY
    mA, mB = v["m_A"], v["m_B"]
    fc1 = v["mu1"] * (v["r1"] * (mA + mB) * g + (mA * l1 + mB * lA) * g)
    fc2 = v["mu2"] * v["r2"] * mB * g
    J = jnp.stack(
        [
            jnp.diag(jnp.stack([v["J_Axx"], v["J_Ayy"], v["J_Azz"]])),
            jnp.diag(jnp.stack([v["J_Bxx"], v["J_Byy"], v["J_Bzz"]])),
        ]
    )
    two = lambda a, b: jnp.stack([jnp.asarray(a, float) * one, jnp.asarray(b, float) * one])  # noqa: E731
    dofs = DofParams(
        armature=two(v["J_shaft"], 0.0),
        damping=two(v["b1"], v["b2"]),
        frictionloss=two(fc1, fc2),
        stribeck=two(0.0, 0.0),
        stribeck_velocity=two(0.1, 0.1),
        friction_velocity=two(0.0, 0.0),
        stiffness=two(0.0, 0.0),
        springref=two(0.0, 0.0),
    )
    tilt = from_rotvec(jnp.stack([v["tilt_x"], zero, v["tilt_z"]]))
    return TreeParams(
        bodies=BodyParams(mass=jnp.stack([mA, mB]), com=jnp.zeros((2, 3)), inertia=J),
        joints=JointGeometry(
            rotation=jnp.stack([R_A, R_A.T @ R_B]),
            translation=jnp.stack([r_A, R_A.T @ (r_B - r_A)]),
            axis=jnp.array([[0.0, 0.0, 1.0], [0.0, 1.0, 0.0]]),
            anchor=jnp.stack([R_A.T @ (-r_A), R_B.T @ (jnp.stack([lA, zero, zero]) - r_B)]),
        ),
        dofs=dofs,
        actuators=ActuatorParams(gear=jnp.stack([v["K"] * one]), km=jnp.zeros(1), Rm=jnp.ones(1)),
        gravity=rotate(tilt, jnp.array([0.0, -GRAVITY, 0.0])),
    )
