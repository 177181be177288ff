"""The closed-form slots D₁L_d, D₂L_d (``variational.slots``) against automatic
differentiation of the midpoint discrete Lagrangian (``midpoint.discrete_lagrangian``, whose
values are tested against Newton–Euler): a branched tree with revolute and prismatic joints,
tilted placements, armature, springs, damping, a motor, and point loads in the world and in a
body's frame."""

import jax
import jax.numpy as jnp
import numpy as np

from physid.dynamics.tree import (
    DC_MOTOR,
    PRISMATIC,
    REVOLUTE,
    ActuatorParams,
    BodyParams,
    JointGeometry,
    Tree,
    TreeParams,
    default_dof_params,
)
from physid.dynamics.variational import constrained, midpoint
from physid.dynamics.variational.constrained import ClosedTree, PointLoad

TREE = Tree(
    body_names=("base", "slider", "arm", "branch"),
    parents=(-1, 0, 1, 0),
    joint_names=("yaw", "slide", "elbow", "side"),
    joint_types=(REVOLUTE, PRISMATIC, REVOLUTE, REVOLUTE),
    actuator_names=("motor",),
    actuator_joints=(0,),
    actuator_kinds=(DC_MOTOR,),
)
SYSTEM = ClosedTree(
    TREE,
    loads=(PointLoad(2, (0.1, 0.0, 0.3)), PointLoad(3, (0.0, 0.2, 0.1), frame="body")),
)


def _params():
    rng = np.random.default_rng(3)
    n = 4

    def rotation(v):  # Rodrigues: by |v| rad about v
        angle = np.linalg.norm(v)
        w = np.asarray(v, float) / angle
        K = np.array([[0, -w[2], w[1]], [w[2], 0, -w[0]], [-w[1], w[0], 0]])
        return np.eye(3) + np.sin(angle) * K + (1 - np.cos(angle)) * K @ K

    inertia = []
    for _ in range(n):
        A = rng.normal(size=(3, 3))
        inertia.append(0.01 * (A @ A.T + 3 * np.eye(3)))
    axes = rng.normal(size=(n, 3))
    return TreeParams(
        bodies=BodyParams(
            mass=jnp.array([0.5, 0.3, 0.2, 0.4]),
            com=jnp.asarray(rng.normal(size=(n, 3)) * 0.1),
            inertia=jnp.asarray(np.stack(inertia)),
        ),
        joints=JointGeometry(
            rotation=jnp.asarray(np.stack([rotation(0.4 * rng.normal(size=3)) for _ in range(n)])),
            translation=jnp.asarray(rng.normal(size=(n, 3)) * 0.2),
            axis=jnp.asarray(axes / np.linalg.norm(axes, axis=1, keepdims=True)),
            anchor=jnp.asarray(rng.normal(size=(n, 3)) * 0.05),
        ),
        dofs=default_dof_params(
            n,
            armature=jnp.array([1e-3, 0.0, 2e-4, 0.0]),
            damping=jnp.array([0.01, 0.2, 0.0, 0.03]),
            stiffness=jnp.array([1.5, 30.0, 0.0, 4.0]),
            springref=jnp.array([0.2, 0.05, 0.0, -0.3]),
        ),
        actuators=ActuatorParams(gear=jnp.ones(1), km=jnp.full(1, 0.04), Rm=jnp.full(1, 8.0)),
        gravity=jnp.array([0.3, -0.5, -9.81]),
    )


def _autodiff_slots(system, params, q0, q1, u, h):
    """The slots by reverse-mode differentiation of L_d plus the work h F·x_p(q̄) of the loads
    with F held at q̄ (the definition the closed form must reproduce)."""
    qm, v = 0.5 * (q0 + q1), (q1 - q0) / h
    ua, _ = constrained.split_input(system, u)
    half = 0.5 * h * midpoint.nonconservative_forces(system.tree, params, qm, v, ua)
    forces = constrained.world_forces(system, params, qm, u)

    def forced(a, b):
        work = h * jnp.sum(forces * constrained.load_points(system, params, 0.5 * (a + b)))
        return midpoint.discrete_lagrangian(system.tree, params, a, b, h) + work

    D1, D2 = jax.grad(forced, argnums=(0, 1))(q0, q1)
    return D1 + half, D2 + half


def test_closed_form_slots_equal_automatic_differentiation():
    params = _params()
    h = 0.01
    rng = np.random.default_rng(7)
    ours = jax.jit(lambda a, b, u: constrained.slots(SYSTEM, params, a, b, u, h))
    reference = jax.jit(lambda a, b, u: _autodiff_slots(SYSTEM, params, a, b, u, h))
    for _ in range(3):
        q0 = jnp.asarray(rng.normal(size=4))
        q1 = q0 + jnp.asarray(0.05 * rng.normal(size=4))  # rates of several rad/s
        u = jnp.asarray(rng.normal(size=7))  # motor voltage, two forces
        for got, want in zip(ours(q0, q1, u), reference(q0, q1, u), strict=True):
            # Same quantity by two exact routes: equal to round-off of O(1) terms (1e-12).
            np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=0, atol=1e-12)
