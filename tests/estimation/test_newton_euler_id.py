"""NEA and DiffNEA (Lutter et al., Section 4) against ground truth they did not generate
themselves: data simulated by physid's model of the Quanser systems, identification judged by
the recovered parameters and by roll-outs on held-out trajectories."""

import importlib.util
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

from physid.dynamics import newton_euler
from physid.estimation import newton_euler_id as nid
from physid.estimation.consistency import BodyInertia, pseudo_inertia
from physid.estimation.nea_experiments import uniform_dataset
from physid.rigs.models.tree.rig import load_tree_rig
from physid.spec import load_spec


def _section4():
    """The experiment configurations of benchmarks/newton_euler_section4.py."""
    path = Path(__file__).parents[2] / "benchmarks" / "newton_euler_section4.py"
    spec = importlib.util.spec_from_file_location("newton_euler_section4", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_pseudo_inertia_of_phi_is_the_consistency_modules():
    rng = np.random.default_rng(0)
    for _ in range(5):
        m, c = rng.uniform(0.1, 2.0), rng.normal(size=3) * 0.1
        R = np.linalg.qr(rng.normal(size=(3, 3)))[0]
        Ic = R @ np.diag(rng.uniform(0.01, 0.02, 3)) @ R.T
        phi = newton_euler.body_inertial_vector(m, jnp.asarray(c), jnp.asarray(Ic))
        ours = nid.pseudo_inertia_of_vector(phi)
        np.testing.assert_allclose(ours, pseudo_inertia(BodyInertia("b", m, c, Ic)), atol=1e-15)


def test_differentiate_recovers_derivatives_of_a_smooth_signal():
    dt = 2e-3
    t = np.arange(0, 4, dt)
    q = np.sin(2 * np.pi * 1.3 * t)[:, None]
    noisy = q + np.random.default_rng(1).normal(0, 1e-4, q.shape)
    _, qd, qdd = nid.differentiate(noisy, dt, cutoff_hz=15.0)
    cut = nid.edge(9, 15.0, dt)
    w = 2 * np.pi * 1.3
    # 1e-4 rad noise through a 15 Hz filter and two derivatives: ~1 % of the 67 rad/s² peak
    # acceleration; the velocity to ~0.1 %.
    np.testing.assert_allclose(qd[cut:-cut, 0], (w * np.cos(w * t))[cut:-cut], atol=2e-3 * w)
    np.testing.assert_allclose(qdd[cut:-cut, 0], (-(w**2) * q[:, 0])[cut:-cut], atol=2e-2 * w**2)


@pytest.fixture(scope="module")
def cartpole():
    rig = load_tree_rig(load_spec("cartpole"))
    data = uniform_dataset(
        rig.tree, rig.params, np.random.default_rng(2), 400, (0.4, 3.1), (1.5, 8.0), (6.0,)
    )
    return rig, data


def test_base_parameters_of_the_cartpole_are_the_physical_combinations(cartpole):
    rig, d = cartpole
    data = nid.regression_data(
        rig.tree, rig.params, d.q, d.qd, d.qdd, d.tau, ("damping", "armature")
    )
    base = nid.base_parameters(data)
    groups = {
        frozenset(
            [data.names[col]]
            + [data.names[dep] for dep, k in zip(base.dependent, base.K[i], strict=True) if k]
        )
        for i, col in enumerate(base.independent)
    }
    assert groups == {
        frozenset({"cart.m", "pole.m", "x.armature"}),  # the cart axis moves all three
        frozenset({"pole.mcx"}),
        frozenset({"pole.mcz"}),
        frozenset({"pole.Iyy", "theta.armature"}),  # about the pivot
        frozenset({"x.damping"}),
        frozenset({"theta.damping"}),
    }


def test_nea_recovers_exact_data_and_keeps_bodies_physical(cartpole):
    rig, d = cartpole
    import jax

    from physid.dynamics import actuators

    tau = np.asarray(
        jax.jit(jax.vmap(lambda a, b: actuators.actuator_forces(rig.tree, rig.params, a, b)))(
            jnp.asarray(d.qd), jnp.asarray(d.u)
        )
    )
    data = nid.regression_data(rig.tree, rig.params, d.q, d.qd, d.qdd, tau, ("damping", "armature"))
    base = nid.base_parameters(data)
    # A wrong prior (the paper's 1 kg cart and 340 g pole) for what the data cannot separate.
    prior_params = rig.make_params({"cart.mass": 1.0, "pole.mass": 0.34})
    fit = nid.nea(rig.tree, rig.params, data, prior=nid._prior_from(prior_params, data))
    truth = np.concatenate(
        [
            newton_euler.inertial_vector(rig.params),
            rig.params.dofs.damping,
            rig.params.dofs.armature,
        ]
    )
    b_true, b_fit = base.values(truth), base.values(fit.theta)
    nonzero = np.abs(b_true) > 0
    # Exact accelerations: the only bias is the prior term (1e-6 of the data) and the SDP's
    # tolerance (1e-9): 1e-4 relative is the 2 % with a margin of 200.
    np.testing.assert_allclose(b_fit[nonzero], b_true[nonzero], rtol=1e-4)
    assert np.all(fit.min_eigenvalues >= -1e-9)  # every body physical (P ⪰ 0)


def test_the_lmi_keeps_a_thin_rod_physical_where_least_squares_does_not(cartpole):
    rig, d = cartpole
    rng = np.random.default_rng(3)
    data = nid.regression_data(
        rig.tree, rig.params, d.q, d.qd, d.qdd + rng.normal(0, 2.0, d.qdd.shape), d.tau
    )
    free = nid.nea(rig.tree, rig.params, data, lmi=False)
    held = nid.nea(rig.tree, rig.params, data, lmi=True)
    # The pole is a thin rod: its pseudo-inertia is nearly singular (Σ_xx = I_zz/2 ≈ 5e-8),
    # so noisy accelerations push plain least squares outside the physical set; the LMI
    # keeps every body's pseudo-inertia positive semidefinite (to the SDP's tolerance).
    assert np.min(free.min_eigenvalues) < -1e-7
    assert np.all(held.min_eigenvalues >= -1e-9)


CASES = [("cartpole", "a"), ("cartpole", "b"), ("furuta", "a"), ("furuta", "b")]


@pytest.mark.slow
@pytest.mark.parametrize("system,dataset", CASES)
def test_section4_recovers_parameters_and_predicts_held_out_trajectories(system, dataset):
    section4 = _section4()
    result = section4.run(system, dataset)
    # The targets: every excited parameter within 2 % on (a), 5 % on (b). Excited:
    # a base parameter that explains at least 1 % of the RMS generalized force (the others,
    # e.g. a thin rod's inertia about its own axis, move the torques by less than the noise).
    target = 0.02 if dataset == "a" else 0.05
    excited = result.base_share >= 0.01
    assert np.all(result.base_error[excited] < target), result.base_names
    zero = result.base_true == 0
    assert np.all(result.base_error[zero] < target)  # as a share of the torque
    assert np.all(result.theta_error < target)  # DiffNEA's physical parameters
    # Roll-outs at 250 Hz from the held-out initial state, replaying its inputs: the truth's
    # own error (250 Hz RK4, inputs held at the log's rate) is the floor.
    floor = result.rollout["truth"]
    for model in ("NEA", "DiffNEA"):
        for t, err in result.rollout[model].items():
            assert np.all(err < floor[t] + ROLLOUT_BAR[system][dataset]), (model, t, err)


ROLLOUT_BAR = {"cartpole": {"a": 1e-3, "b": 2e-2}, "furuta": {"a": 1e-2, "b": 1e-1}}
