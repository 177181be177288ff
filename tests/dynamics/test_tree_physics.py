"""Physics of the tree model as physics: the spatial algebra's identities, kinematics and
energies against MuJoCo, parameter derivatives against central differences, energy
conservation of a symplectic step over 1000 periods, and dissipation of every friction and
motor model for random parameters."""

import dataclasses
import functools
from pathlib import Path

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pinocchio as pin
import pytest
from tree_cases import FAST_COMPILE

from physid.dynamics import actuators, integrators, newton_euler, parameterization, spatial
from physid.dynamics.tree import DC_MOTOR, body_poses, point_positions
from physid.rigs.models.tree.mjcf import read_model_file
from physid.rigs.models.tree.model import build_model

DATA = Path(__file__).parents[1] / "data" / "trees"


def load(name):
    model = build_model(read_model_file(DATA / f"{name}.xml"))
    return model.tree, model.params


def random_rotation(rng):
    return np.linalg.qr(rng.normal(size=(3, 3)))[0] * np.sign(
        np.linalg.det(rng.normal(size=(3, 3)))
    )


def _spatial_pairs(R, p, V, W, F, m, c, Ic):
    """(vector form, 6×6 form) pairs that must agree."""
    Ad, Adi = spatial.adjoint(R, p), spatial.adjoint_inverse(R, p)
    M = spatial.spatial_inertia(m, c, Ic)
    return {
        "Ad Ad⁻¹": (Ad @ Adi, jnp.eye(6)),
        "to parent": (spatial.motion_to_parent(R, p, V), Ad @ V),
        "from parent": (spatial.motion_from_parent(R, p, V), Adi @ V),
        "force (3)": (spatial.force_to_parent(R, p, F), Adi.T @ F),
        "ad": (spatial.cross_motion(V, W), spatial.ad(V) @ W),
        "ad*": (spatial.cross_force(V, F), -spatial.ad(V).T @ F),
        "ad* matrix": (spatial.ad_star(V), -spatial.ad(V).T),
        "power": (Ad @ V @ spatial.force_to_parent(R, p, F), V @ F),  # frame independent
        "inertia": (spatial.inertia_times(m, c, Ic, V), M @ V),
        "inertia to parent": (spatial.inertia_to_parent(R, p, M), Adi.T @ M @ Adi),
        "regressor": (
            spatial.wrench_regressor(V, W) @ newton_euler.body_inertial_vector(m, c, Ic),
            M @ W + spatial.cross_force(V, M @ V),
        ),
    }


def test_vector_forms_equal_the_papers_6x6_operators():
    rng = np.random.default_rng(1)
    R = np.linalg.qr(rng.normal(size=(3, 3)))[0]
    R *= np.linalg.det(R)  # a proper rotation
    args = (R, *rng.normal(size=(4, 6)))
    args = (R, args[1][:3], *args[2:], 1.7, rng.normal(size=3), np.diag([0.3, 0.4, 0.5]))
    for name, (ours, paper) in jax.jit(_spatial_pairs)(*args).items():
        # Exact identities evaluated two ways: agreement to rounding (1e-13 relative).
        np.testing.assert_allclose(ours, paper, rtol=1e-13, atol=1e-13, err_msg=name)


def test_spatial_inertia_and_parallel_axis_sign_match_pinocchio():
    # Pinocchio's Inertia(m, c, I_c).matrix() is in the same [v, ω] order; the paper's
    # Appendix (5) with +m[p][p] would make the inertia about the origin *smaller* than about
    # the centre of mass, which no body has.
    rng = np.random.default_rng(2)
    m, c = 0.8, rng.normal(size=3) * 0.2
    R = np.linalg.qr(rng.normal(size=(3, 3)))[0]
    Ic = R @ np.diag([0.01, 0.02, 0.025]) @ R.T
    ours = spatial.spatial_inertia(m, c, Ic)
    np.testing.assert_allclose(ours, pin.Inertia(m, c, Ic).matrix(), rtol=1e-14, atol=1e-16)
    Io = parameterization.inertia_about_origin(m, c, Ic)
    np.testing.assert_allclose(Io, Ic + m * (c @ c * np.eye(3) - np.outer(c, c)), atol=1e-16)
    assert np.all(np.linalg.eigvalsh(np.asarray(Io) - Ic) >= -1e-15)


def test_plausible_parameterization_is_physical_for_every_value_and_inverts():
    rng = np.random.default_rng(3)
    theta = parameterization.PlausibleBodies(
        jnp.asarray(rng.normal(size=64)),
        jnp.asarray(rng.normal(size=(64, 3))),
        jnp.asarray(rng.normal(size=(64, 3)) * 3),
        jnp.asarray(rng.normal(size=(64, 3))),
    )
    bodies = jax.jit(parameterization.to_body_params)(theta)
    moments = np.linalg.eigvalsh(np.asarray(bodies.inertia))
    assert np.all(np.asarray(bodies.mass) >= 0)
    assert np.all(moments >= -1e-15)
    assert np.all(moments[:, 2] <= moments[:, 0] + moments[:, 1] + 1e-15)  # triangle
    back = jax.jit(parameterization.to_body_params)(parameterization.from_body_params(bodies))
    np.testing.assert_allclose(back.inertia, bodies.inertia, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(back.mass, bodies.mass, rtol=1e-14)


def test_body_poses_energies_and_points_match_mujoco():
    tree, params = load("arm7")
    m = mujoco.MjModel.from_xml_path(str(DATA / "arm7.xml"))
    m.opt.enableflags |= mujoco.mjtEnableBit.mjENBL_ENERGY
    d = mujoco.MjData(m)
    rng = np.random.default_rng(4)
    q, qd = rng.uniform(-np.pi, np.pi, tree.n_dof), rng.normal(size=tree.n_dof)
    d.qpos[:], d.qvel[:] = q, qd
    mujoco.mj_forward(m, d)
    hand = tree.body_names.index("hand")
    point = np.array([0.01, -0.02, 0.1])

    @jax.jit
    def ours(q, qd):
        return (
            *body_poses(tree, params, q),
            point_positions(tree, params, q, (hand,), jnp.asarray(point)[None])[0],
            newton_euler.potential_energy(tree, params, q),
            newton_euler.kinetic_energy(tree, params, q, qd),
        )

    R, p, world, pot, kin = ours(jnp.asarray(q), jnp.asarray(qd))
    # Forward kinematics is a product of 8 rotations: rounding ~1e-15; 1e-12 is generous.
    np.testing.assert_allclose(R, d.xmat[1:].reshape(-1, 3, 3), atol=1e-12)
    np.testing.assert_allclose(p, d.xpos[1:], atol=1e-12)
    hand = tree.body_names.index("hand")
    point = np.array([0.01, -0.02, 0.1])
    world = point_positions(tree, params, jnp.asarray(q), (hand,), jnp.asarray(point)[None])
    np.testing.assert_allclose(
        world[0], d.xpos[hand + 1] + d.xmat[hand + 1].reshape(3, 3) @ point, atol=1e-12
    )
    # MuJoCo's energy: gravity + springs, and ½ q̇ᵀ M q̇ with its armature-including M.
    assert float(pot) == pytest.approx(d.energy[0], rel=1e-10)
    assert float(kin) == pytest.approx(d.energy[1], rel=1e-10)


def _perturbation(tree_params, rng):
    """A random direction in every leaf of the parameter pytree, scaled to each leaf."""
    leaves, treedef = jax.tree_util.tree_flatten(tree_params)
    direction = [
        jnp.asarray(
            rng.normal(size=np.shape(x))
            * (np.abs(np.asarray(x)) + 0.1 * np.max(np.abs(np.asarray(x))) + 1e-3)
        )
        for x in leaves
    ]
    return jax.tree_util.tree_unflatten(treedef, direction)


def test_parameter_jvps_match_central_differences():
    tree, params = load("furuta")
    # Exercise every model term: a DC motor instead of the plain motor, Coulomb and Stribeck
    # friction, springs and armature on both joints.
    tree = dataclasses.replace(tree, actuator_kinds=(DC_MOTOR,))
    params = dataclasses.replace(
        params,
        dofs=dataclasses.replace(
            params.dofs,
            armature=jnp.array([1e-5, 2e-6]),
            frictionloss=jnp.array([2e-3, 1e-4]),
            stribeck=jnp.array([1e-3, 5e-5]),
            stribeck_velocity=jnp.array([0.5, 0.3]),
            friction_velocity=jnp.array([0.05, 0.05]),
            stiffness=jnp.array([0.01, 0.002]),
            springref=jnp.array([0.2, -0.1]),
        ),
        actuators=dataclasses.replace(params.actuators, km=jnp.array([0.042]), Rm=jnp.array([8.4])),
    )
    q, qd = jnp.array([0.3, 2.0]), jnp.array([1.2, -0.7])
    qdd, u = jnp.array([3.0, -5.0]), jnp.array([2.5])

    def outputs(p):
        return jnp.concatenate(
            [
                newton_euler.rnea(tree, p, q, qd, qdd),
                actuators.forward_dynamics(tree, p, q, qd, u),
                newton_euler.crba(tree, p, q).ravel(),
                jnp.atleast_1d(newton_euler.total_energy(tree, p, q, qd)),
            ]
        )

    direction = _perturbation(params, np.random.default_rng(5))
    eps = 1e-6

    # Two compiled programs, the outputs (run at both shifted points) and their JVP, without
    # LLVM's optimizations (FAST_COMPILE): 11.1 -> 6.9 s of CPU where one program held the
    # JVP and both evaluations, compiled with XLA's default. Float64 either way; the central
    # difference then agrees with the JVP to 1.5e-8 instead of 2.0e-9 of the scale below
    # (the order of operations in the difference's rounding), 70x under the 1e-6 bound.
    values = jax.jit(outputs, compiler_options=FAST_COMPILE)
    tangent = jax.jit(lambda p, d: jax.jvp(outputs, (p,), (d,))[1], compiler_options=FAST_COMPILE)
    plus = jax.tree_util.tree_map(lambda x, d: x + eps * d, params, direction)
    minus = jax.tree_util.tree_map(lambda x, d: x - eps * d, params, direction)
    jvp, central = tangent(params, direction), (values(plus) - values(minus)) / (2 * eps)
    # Central differences: truncation ~eps² = 1e-12 of the third derivative, rounding
    # ~1e-16/eps = 1e-10 of the outputs' scale; 1e-6 relative to the derivative's norm is a
    # margin of 10⁴ over rounding and still fails for any missing or wrong term.
    scale = np.maximum(np.abs(np.asarray(jvp)), np.max(np.abs(np.asarray(jvp))) * 1e-6)
    assert np.max(np.abs(np.asarray(central) - np.asarray(jvp)) / scale) < 1e-6


def _frictionless(name):
    tree, params = load(name)
    zeros = jnp.zeros(tree.n_dof)
    dofs = dataclasses.replace(params.dofs, damping=zeros, frictionloss=zeros)
    return dataclasses.replace(tree, unroll=True), dataclasses.replace(params, dofs=dofs)


def _periods(tree, params):
    """Equilibrium and the periods (s) of the small oscillations about it (linearization)."""

    def V(q):
        return newton_euler.potential_energy(tree, params, q)

    # One compilation for the 20 Newton steps on ∇V = 0 and the mass matrix (traced op by op
    # each step, they cost ~10 s of CPU).
    parts = jax.jit(
        lambda q: (jax.hessian(V)(q), jax.grad(V)(q), newton_euler.crba(tree, params, q))
    )
    q = jnp.zeros(tree.n_dof)
    for _ in range(20):
        K, g, _ = parts(q)
        q = q - jnp.linalg.solve(K, g)
    K, _, M = parts(q)
    omega = np.sqrt(np.linalg.eigvals(np.linalg.solve(M, K)).real)
    return q, 2 * np.pi / omega


def test_hamiltonian_flow_is_the_gradient_of_the_hamiltonian():
    tree, params = load("double_pendulum")  # springs, armature, anchors off the origin
    rng = np.random.default_rng(7)
    q, p = jnp.asarray(rng.normal(size=2)), jnp.asarray(rng.normal(size=2))

    # FAST_COMPILE (no LLVM optimizations, float64): 7.9 -> 6.5 s of CPU; the two sides
    # then differ by 1.7e-15 relative (3.0e-15 with XLA's default), far under 1e-11.
    @functools.partial(jax.jit, compiler_options=FAST_COMPILE)
    def both(q, p):
        grad_q, grad_p = jax.grad(integrators.hamiltonian, argnums=(2, 3))(tree, params, q, p)
        return (grad_p, -grad_q), integrators.hamiltonian_flow(tree, params, q, p)

    (qd_ad, pd_ad), (qd, pd) = both(q, p)
    # The same derivative by reverse mode and by RNEA + a forward JVP: rounding (1e-12).
    np.testing.assert_allclose(qd, qd_ad, rtol=1e-12)
    np.testing.assert_allclose(pd, pd_ad, rtol=1e-11, atol=1e-12 * np.max(np.abs(pd_ad)))


@pytest.mark.parametrize(
    "name", ["pendulum", pytest.param("double_pendulum", marks=pytest.mark.slow)]
)
def test_symplectic_step_keeps_the_energy_of_a_frictionless_tree_over_1000_periods(name):
    tree, params = _frictionless(name)
    q_eq, periods = _periods(tree, params)
    # 20 steps per period of the fastest mode, 1000 periods of the slowest.
    steps_per_period = int(np.ceil(20 * periods.max() / periods.min()))
    h = periods.max() / steps_per_period
    n_steps = 1000 * steps_per_period
    q0 = q_eq + 0.4 * jnp.cos(jnp.arange(tree.n_dof) + 0.3)  # a large swing, not a mode

    @jax.jit
    def energies():
        q, p = integrators.rollout_midpoint(tree, params, q0, jnp.zeros(tree.n_dof), h, n_steps)
        return jax.vmap(lambda q, p: integrators.hamiltonian(tree, params, q, p))(q, p)

    E = np.asarray(energies())
    first, last = E[: 10 * steps_per_period], E[-10 * steps_per_period :]
    drift = abs(last.mean() - first.mean())
    oscillation = first.max() - first.min()
    swing = E[0] - float(newton_euler.potential_energy(tree, params, q_eq))
    # A symplectic step keeps a modified energy exactly: the error oscillates with amplitude
    # O((h ω)²) and does not grow. Over 1000 periods the mean moves by less than a tenth of
    # that oscillation; explicit RK4 at the same step loses energy steadily (slow variant).
    assert drift < 0.1 * oscillation
    assert oscillation < 0.05 * swing  # (h ω)² = (2π/20)² ≈ 0.1, times the midpoint's 1/12
    if name == "double_pendulum":
        u = jnp.zeros((n_steps, tree.n_actuators))
        q_rk, qd_rk = jax.jit(
            lambda: integrators.rollout_rk4(tree, params, q0, jnp.zeros(tree.n_dof), u, h)
        )()
        total = jax.jit(jax.vmap(lambda q, qd: newton_euler.total_energy(tree, params, q, qd)))
        E_rk = np.asarray(total(q_rk[-10 * steps_per_period :], qd_rk[-10 * steps_per_period :]))
        assert abs(E_rk.mean() - first.mean()) > 10 * drift


def test_dissipative_models_never_add_energy_at_zero_input():
    tree, params = load("furuta")
    tree = dataclasses.replace(tree, actuator_kinds=(DC_MOTOR,))
    rng = np.random.default_rng(6)
    n_params, n_states = 20, 50

    def random_params(seed):
        r = np.random.default_rng(seed)
        # Every friction and motor coefficient of either sign: |·| keeps them dissipative.
        dofs = dataclasses.replace(
            params.dofs,
            damping=jnp.asarray(r.normal(size=2) * 1e-3),
            frictionloss=jnp.asarray(r.normal(size=2) * 1e-3),
            stribeck=jnp.asarray(r.normal(size=2) * 1e-3),
            stribeck_velocity=jnp.asarray(r.normal(size=2)),
            friction_velocity=jnp.asarray(r.normal(size=2) * 0.1),
            stiffness=jnp.asarray(np.abs(r.normal(size=2)) * 1e-2),
            springref=jnp.asarray(r.normal(size=2)),
            armature=jnp.asarray(np.abs(r.normal(size=2)) * 1e-5),
        )
        acts = dataclasses.replace(
            params.actuators,
            km=jnp.asarray(r.normal(size=1) * 0.05),
            Rm=jnp.asarray(r.normal(size=1) * 10),
        )
        return dataclasses.replace(params, dofs=dofs, actuators=acts)

    def rates(p, q, qd):
        """dE/dt along the flow at zero input, and q̇ᵀ τ of the dissipative forces."""
        qdd = actuators.forward_dynamics(tree, p, q, qd, jnp.zeros(1))
        _, dE = jax.jvp(lambda q, qd: newton_euler.total_energy(tree, p, q, qd), (q, qd), (qd, qdd))
        return dE, actuators.dissipated_power(tree, p, q, qd)

    # FAST_COMPILE (no LLVM optimizations, float64): 6.1 -> 3.8 s of CPU; rounding-level
    # changes only (~1e-16 relative), far under the 1e-9 of the scale asserted.
    batched = jax.jit(
        jax.vmap(jax.vmap(rates, (None, 0, 0)), (0, None, None)), compiler_options=FAST_COMPILE
    )
    ps = jax.tree_util.tree_map(
        lambda *x: jnp.stack(x), *[random_params(s) for s in range(n_params)]
    )
    q = jnp.asarray(rng.uniform(-np.pi, np.pi, (n_states, 2)))
    qd = jnp.asarray(rng.normal(size=(n_states, 2)) * 3)
    dE, power = map(np.asarray, batched(ps, q, qd))
    scale = np.max(np.abs(power))
    # Ė equals the dissipated power to rounding (1e-9 of its scale), and is never positive.
    np.testing.assert_allclose(dE, power, atol=1e-9 * scale)
    assert np.all(power <= 0.0)
    assert np.all(dE <= 1e-9 * scale)
