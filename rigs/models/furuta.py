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
from physid.rigs.models.hinged import HingedRig, simulate_to_folder, spec_values
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
    rig = build(spec)
    angles = [spec.section_value("simulation", f"theta{i}", "rad") for i in (1, 2)]
    return simulate_to_folder(spec, rig, angles, options, console)


def identify(spec: RigSpec, data, out, console):
    """``physid identify``: joint state and parameter LM (rigs.models.identify_hinged)."""
    from physid.rigs.models.identify_hinged import identify_hinged

    return identify_hinged(spec, build(spec), data, out, console)
