"""The flexible loop of Caldwell et al. (rigs/specs/hexagon_loop.toml): the spec's closures,
energy and closure over 10 000 steps, Lemma 1's gradient on the loop, and the stiffness
identified from end-effector positions (noise-free, and with 1 mm noise over 20 seeds).

Every test here compiles the 13-coordinate constrained step (minutes on the shared 2-core
machine), so all but the spec checks are ``slow``."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from physid.dynamics.variational import adjoint, constrained
from physid.estimation.shooting import levenberg_marquardt
from physid.rigs.models.loop import end_effector, load_loop
from physid.rigs.models.tree.model import TreeError
from physid.spec import load_spec


@pytest.fixture(scope="module")
def rig():
    return load_loop(load_spec("hexagon_loop"))


def test_spec_gives_the_drafts_loop(rig):
    system = rig.system
    assert system.n_dof == 13 and system.n_constraints == 6
    params = rig.params(jnp.array([20.0, 20.0]))
    # π/3 per corner closes the hexagon at q = 0 (round-off of six 0.5 m links); 2π/3 would not.
    assert float(jnp.max(jnp.abs(constrained.constraints(system, params, jnp.zeros(13))))) < 1e-14
    Dh = np.asarray(constrained.constraint_jacobian(system, params, jnp.zeros(13)))
    assert np.linalg.matrix_rank(Dh) == 6  # points (w = 1): full row rank
    # A regular hexagon with edges of 0.5 m in the y–z plane: the end of link 3 is the third
    # vertex from S, at (0, −√3/2, 1/2) m.
    w = constrained.load_points(system, params, jnp.zeros(13))[0]
    np.testing.assert_allclose(np.asarray(w), [0.0, -np.sqrt(3) / 2, 0.5], atol=1e-12)


def test_direction_closures_are_refused(tmp_path):
    text = load_spec("hexagon_loop").path.read_text()
    # The draft's eq. 13 in spirit: three closures that all hold the same point give
    # dependent rows; the loader names the closures instead of failing inside Newton.
    text = text.replace("[0.0, 1.0, 0.0], unit", "[1.0, 0.0, 0.0], unit").replace(
        '[0.0, 0.0, 1.0], unit = "m" }\nfree_axis', '[1.0, 0.0, 0.0], unit = "m" }\nfree_axis'
    )
    path = tmp_path / "bad_loop.toml"
    path.write_text(text)
    with pytest.raises(TreeError, match="rank"):
        load_loop(load_spec(path))


@pytest.mark.slow
def test_unforced_loop_keeps_energy_and_closure_over_10000_steps(rig):
    params = rig.params(jnp.array([20.0, 20.0]))
    q0, p0 = rig.start()
    system, h = rig.system, rig.h

    @jax.jit
    def chunk(q0, p0):
        q, p, _ = constrained.rollout(system, params, q0, p0, jnp.zeros((1000, 3)), h)
        closure = jax.vmap(lambda x: constrained.constraints(system, params, x))(q)
        energy = jax.vmap(lambda a, b: constrained.step_energy(system, params, a, b, h))(
            q[:-1], q[1:]
        )
        return q[-1], p[-1], jnp.max(jnp.abs(closure)), energy

    energies, closure = [], 0.0
    for _ in range(10):
        q0, p0, c, e = chunk(q0, p0)
        energies.append(np.asarray(e))
        closure = max(closure, float(c))
    e = np.concatenate(energies)
    assert closure <= 1e-10
    swing = float(np.ptp(e[:1000]))
    # Gravity swings the loop from rest: the midpoint energy oscillates by O(h²) around the
    # true value; a drift would move the mean of the last thousand steps by many swings.
    assert abs(e[-1000:].mean() - e[:1000].mean()) < 0.1 * swing


@pytest.fixture(scope="module")
def shooting(rig):
    q0, p0 = rig.start()
    u, h, system = rig.inputs(), rig.h, rig.system

    def positions(kappa):
        q, _, _ = constrained.rollout(system, rig.params(kappa), q0, p0, u, h)
        return end_effector(rig, rig.params(kappa), q[1:])

    truth = jnp.asarray(rig.true_kappa())
    clean = jax.jit(positions)(truth)

    @jax.jit
    def residual(kappa, measured):
        return (positions(kappa) - measured).ravel()

    @jax.jit
    def residual_jacobian(kappa, measured):
        J, r = jax.jacfwd(lambda k: (residual(k, measured),) * 2, has_aux=True)(kappa)
        return r, J

    return clean, residual, residual_jacobian


@pytest.mark.slow
def test_noise_free_positions_give_the_stiffness(rig, shooting):
    clean, residual, residual_jacobian = shooting
    fit = levenberg_marquardt(
        lambda k: residual_jacobian(k, clean), lambda k: residual(k, clean), [10.0, 25.0],
        0.5, 500.0,
    )  # fmt: skip
    # Noise-free data and a rollout solved to 1e-12: κ is recovered to the rollout's
    # round-off, far inside the 1e-6 of the acceptance, in ≤ 10 Jacobians.
    np.testing.assert_allclose(fit.theta, rig.true_kappa(), rtol=1e-6)
    assert fit.iterations <= 10


@pytest.mark.slow
def test_adjoint_gradient_on_the_loop(rig, shooting):
    clean, _, _ = shooting
    q0, p0 = rig.start()
    u, h, system = rig.inputs(), rig.h, rig.system

    def running(q, p, k, theta):
        w = constrained.load_points(system, rig.params(theta), q)[0]
        return 0.5 * jnp.sum((w - clean[k - 1]) ** 2)

    kappa = jnp.array([10.0, 25.0])
    _, g_adj = jax.jit(
        lambda t: adjoint.adjoint_gradient(system, rig.params, t, q0, p0, u, h, running)
    )(kappa)
    cost = jax.jit(lambda t: adjoint.cost(system, rig.params, t, q0, p0, u, h, running))
    g_fwd = jax.jacfwd(cost)(kappa)
    rel = 1e-5
    g_fd = np.array(
        [
            (cost(kappa.at[i].add(rel * kappa[i])) - cost(kappa.at[i].add(-rel * kappa[i])))
            / (2 * rel * kappa[i])
            for i in range(2)
        ]
    )
    np.testing.assert_allclose(np.asarray(g_adj), np.asarray(g_fwd), rtol=1e-9)
    # Central differences: O(rel²) truncation and 1e-12/1e-5 Newton noise: 1e-6 relative.
    np.testing.assert_allclose(np.asarray(g_adj), g_fd, rtol=1e-6)


@pytest.mark.slow
def test_one_millimetre_noise_coverage_over_20_seeds(rig, shooting):
    clean, residual, residual_jacobian = shooting
    truth = rig.true_kappa()
    for seed in range(20):
        noise = 1e-3 * np.random.default_rng(seed).standard_normal(clean.shape)
        measured = clean + jnp.asarray(noise)
        fit = levenberg_marquardt(
            lambda k, m=measured: residual_jacobian(k, m),
            lambda k, m=measured: residual(k, m),
            [10.0, 25.0], 0.5, 500.0,
        )  # fmt: skip
        assert fit.converged, fit.reason
        np.testing.assert_allclose(fit.theta, truth, rtol=0.01)
        # |error| ≤ 3 std of the Gauss–Newton covariance with s² from the residuals.
        assert np.all(np.abs(fit.theta - truth) <= 3 * fit.std), (seed, fit.theta, fit.std)
