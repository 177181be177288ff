"""The tree estimator's prediction simulator (``identify_tree.simulator``): one compiled
program of fixed shape (``ROLLOUT_BATCH`` states × ``ROLLOUT_CHUNK`` steps) serves every
batch size and window length, and gives the integrator's own trajectory."""

from __future__ import annotations

from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

import physid.dynamics  # noqa: F401  (float64)
from physid.dynamics import variational_friction as vf
from physid.rigs.models import pendulum
from physid.rigs.models.identify_tree import (
    ROLLOUT_BATCH,
    ROLLOUT_CHUNK,
    _batches,
    _rollout,
    simulator,
)
from physid.spec import load_spec

H = 1e-3
C = np.array([0.0075])  # the natural map's inertia (kg m²), as the estimator tests use
N = 700  # steps of the reference trajectory: windows below span up to 3 chunks


@pytest.fixture(scope="module")
def rig(tmp_path_factory):
    src = Path("rigs/specs/pendulum.toml").read_text()
    path = tmp_path_factory.mktemp("pendulum") / "pendulum.toml"
    path.write_text(src.replace("[method]\n", '[method]\nestimator = "tree"\n', 1))
    return pendulum.tree_rig(load_spec(path))


VALUES = {"J": 0.0039, "b": 2e-4, "mu": 0.0}  # no dry friction: see test_start_state_…


@pytest.fixture(scope="module")
def reference(rig):
    """The integrator itself (``variational_friction.rollout``, one state, no batching)
    from 1.2 rad at rest: the inputs u [N, n_act] and the states x_k = (q_k, p_k) [N + 1, 2]."""
    merged = {k: jnp.asarray(float(v)) for k, v in {**rig.values, **VALUES}.items()}
    u = np.zeros((N, len(rig.inputs)))
    q, p = vf.rollout(
        rig.tree, rig.make_params(merged), jnp.array([1.2]), jnp.array([0.0]), u, H, C
    )
    return u, np.concatenate([np.asarray(q), np.asarray(p)], axis=1)


# Both compile the pendulum's Newton step three times (the reference scan, the batched chunk
# and the start): 34 s CPU under load, over the default run's budget.
@pytest.mark.slow
def test_windows_of_any_batch_and_length_follow_the_integrator(rig, reference):
    """11 windows (two batches of 8, the second padded) of 300 steps (three chunks of 128,
    the last cut) from states of the integrator's own trajectory reproduce it; another
    parameter set (dry friction on), batch and length reuse the one compiled program."""
    assert (ROLLOUT_BATCH, ROLLOUT_CHUNK) == (8, 128)  # the sizes the windows below straddle
    u, x = reference
    sim, _ = simulator(rig, VALUES, H, u, C)
    first = np.linspace(0, N - 300, 11).astype(int)
    pred = sim(x[first], first, 300)
    want = x[first[:, None] + np.arange(301)[None, :], :1]
    # The same steps in the same order; a batched Newton iteration may run one more
    # iteration on a lane that has converged (corrections < 1e-12 rad), so agreement is to
    # round-off accumulated over 300 steps, not bit for bit: 1e-10 rad.
    np.testing.assert_allclose(pred, want, rtol=0, atol=1e-10)
    sim2, _ = simulator(rig, {**VALUES, "mu": 0.02}, H, u, C)
    assert np.all(np.isfinite(sim2(x[:3], np.zeros(3, int), 5)))
    roll, _ = _rollout(rig.tree, rig.make_params, tuple(rig.observed), H)
    assert roll._cache_size() == 1


@pytest.mark.slow
def test_start_state_inverts_the_step(rig, reference):
    """The state from the positions of the first two steps (``start_state``: p₀ = −D₁L_d −
    (h/2) F) is the state the integrator stepped from, without dry friction (whose impulse
    the first row's inverse cannot see): p₀ to the step's Newton tolerance (1e-12 rad in q₁,
    times M/h ≈ 8 kg m²/s: 1e-10 N m s)."""
    u, x = reference
    _, start = simulator(rig, VALUES, H, u, C)
    k = np.arange(0, 450, 50)  # 9 states: two batches
    z = np.stack([x[k, 0], x[k + 1, 0]], axis=1)
    np.testing.assert_allclose(start(z), x[k], rtol=0, atol=1e-10)


def test_batches_cover_every_row_once_in_fixed_size_blocks():
    """Every row in exactly one block, in order; each block ``ROLLOUT_BATCH`` long (the one
    compiled shape), its padding copies of a real row (so no lane runs from a made-up
    state)."""
    for b in (1, 7, 8, 9, 100):
        blocks = list(_batches(b))
        real = np.concatenate([rows[:m] for rows, m in blocks])
        np.testing.assert_array_equal(real, np.arange(b))
        for rows, m in blocks:
            assert len(rows) == ROLLOUT_BATCH and 1 <= m <= ROLLOUT_BATCH
            assert set(rows[m:]) <= set(rows[:m])
