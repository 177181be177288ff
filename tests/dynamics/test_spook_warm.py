"""The warm-started SPOOK step (previous step's dry-friction piece, Lemke as fallback) gives
the MLCP solution of cold Lemke, step by step, on the Furuta rig."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from physid.dynamics import spook
from physid.rigs.models.furuta import build
from physid.rigs.models.hinged import simulation_table, truth_values
from physid.spec import load_spec

H, N = 1e-4, 6000  # 0.6 s of 0.1 ms steps: both tests run this one shape


@pytest.fixture(scope="module")
def warm_and_cold():
    """``(rig, params, run)``: ``run(q0, u)`` rolls the Furuta out with ``spook.simulate``
    (warm-started) and, in the same compiled function, takes from every state of that
    rollout the cold Lemke step and the warm step (test 1), and chains cold Lemke steps from
    ``q0`` on their own (test 2). One compilation for both tests: the rollout, the step
    comparison and the cold rollout were four compilations (~35 s of CPU on an empty cache)."""
    spec = load_spec("furuta")
    rig = build(spec)
    params = rig.make_params(
        {
            k: jnp.asarray(v)
            for k, v in truth_values(spec, rig.values, simulation_table(spec)).items()
        }
    )
    system = rig.system

    def compare(carry, x):
        piece, cold_q, cold_v = carry
        rk, ek, vk, uk, rk1, ek1 = x
        cold = spook.step(system, params, (rk, ek), vk, uk, H)
        warm, next_piece = spook._step_on_piece(system, params, (rk, ek), vk, uk, H, piece)
        changed = jnp.any(next_piece.sign != piece.sign) | jnp.any(next_piece.mode != piece.mode)

        def residual(v_next):
            # Inverse dynamics (2.30–2.31) solves the friction rows of (2.24) in closed form
            # for v_{k+1}: its momentum residual is zero iff v_{k+1} solves the MLCP.
            dp_u, _ = spook.impulse_residual(
                system, params, (rk, ek), vk, (rk1, ek1), v_next, uk, H
            )
            return jnp.abs(dp_u).max()

        chained = spook.step(system, params, cold_q, cold_v, uk, H)  # the cold rollout's step
        dv = jnp.abs(warm.v - cold.v).max()
        out = (dv, residual(warm.v), residual(cold.v), changed, next_piece.mode, chained.v)
        return (next_piece, chained.q, chained.v), out

    @jax.jit
    def run(q0, u):
        v0 = jnp.zeros((2, 6))
        (r, e), v = spook.simulate(system, params, q0, v0, u, H)
        start = (spook.Piece(jnp.ones((2, 5)), jnp.zeros(2)), q0, v0)
        xs = (r[:-1], e[:-1], v[:-1], u, r[1:], e[1:])
        _, per_step = lax.scan(compare, start, xs)
        return v, per_step

    return rig, params, run


def test_each_warm_step_is_the_cold_lemke_step(warm_and_cold):
    rig, params, run = warm_and_cold
    # From rest, a ramped motor chirp drives both hinges through sticking and sliding both
    # ways, and the hinge forces change sign: the accepted piece and the Lemke fallback are
    # both exercised.
    t = H * np.arange(N)
    u = jnp.asarray(0.5 * np.minimum(t / 0.3, 1.0) * np.sin(2 * np.pi * (2 + 3 * t) * t))
    v, (dv, res_warm, res_cold, changed, modes, _) = run(
        rig.state_from_angles(jnp.array([0.0, 0.0])), u
    )
    # Impulse scale: gravity on the pendulum over one step.
    scale = float(params.m[1]) * 9.82 * H
    # Every warm step (accepted piece or Lemke + polish) solves the MLCP to rounding. The
    # floor is that of evaluating the residual: λ_h = −(G v + a)/σ with a stiff σ turns the
    # rounding of G v + a into ~1e-11 of the impulse scale.
    assert float(res_warm.max()) < 1e-10 * scale
    # Where Lemke itself is accurate, the two agree to rounding (|v| ≲ 1 here). Pivoting on
    # the Schur complement sometimes loses digits (residuals up to ~1e-3 of the scale, about
    # 3 % of the steps of this run), which the warm step does not inherit.
    lemke_exact = np.asarray(res_cold) < 1e-10 * scale
    assert lemke_exact.mean() > 0.9
    assert float(dv[lemke_exact].max()) < 1e-10 * float(jnp.abs(v).max())
    # The pieces change (and the fallback runs) at transitions only, but they do change:
    # sticking and both sliding directions occur.
    n_changes = int(changed.sum())
    assert 5 < n_changes < 0.05 * N
    assert {-1.0, 0.0, 1.0} <= set(np.unique(np.asarray(modes)).tolist())


def test_warm_simulation_follows_the_cold_one(warm_and_cold):
    rig, _, run = warm_and_cold
    n = 2000  # the release's first 0.2 s; the rest of the shared N steps is not compared
    v_warm, (*_, v_cold) = run(rig.state_from_angles(jnp.array([0.0, np.pi - 0.03])), jnp.zeros(N))
    v_warm, v_cold = np.asarray(v_warm)[1 : n + 1], np.asarray(v_cold)[:n]
    # Rounding differences of ~1e-12 per step grow slowly over 0.2 s of the release.
    np.testing.assert_allclose(v_warm, v_cold, atol=1e-9 * float(np.abs(v_cold).max()))
