"""The chunked vmap of the Jacobian blocks is vmap: same values for any n, with the padding of
the last chunk cut off and zero-width data (no markers) passing through."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from physid.estimation.hinged_problem import JACOBIAN_CHUNK, _chunked_vmap


def _block(x, w, empty):
    """A nonlinear per-step function with a Jacobian, like one residual block."""
    jac = jax.jacfwd(lambda y: jnp.sin(y) * w.sum() + y**2)(x)
    return jac, x.sum() + empty.sum()


@pytest.mark.parametrize("n", [1, JACOBIAN_CHUNK - 1, JACOBIAN_CHUNK, 2 * JACOBIAN_CHUNK + 5])
def test_chunked_vmap_equals_vmap(n):
    rng = np.random.default_rng(n)
    x = jnp.asarray(rng.normal(size=(n, 3)))
    w = jnp.asarray(rng.normal(size=(n, 2)))
    empty = jnp.zeros((n, 0, 2))
    # Both sides jitted, as the estimator runs them (inside its jitted linearization): run
    # eagerly, each dispatched ~35 ops one by one, each compiled on its own.
    got = jax.jit(_chunked_vmap(_block))(x, w, empty)
    want = jax.jit(jax.vmap(_block))(x, w, empty)
    for g, e in zip(got, want, strict=True):
        assert g.shape == e.shape
        # Same arithmetic on the same numbers: equal to round-off.
        np.testing.assert_allclose(g, e, rtol=1e-15, atol=1e-15)
