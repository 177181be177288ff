"""The written-out hinge Jacobians used by the SPOOK step against forward-mode
differentiation of the hinge constraint (F.1, F.2)."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from physid.dynamics.multibody import (
    constraint_jacobian,
    hinge_angle_rate_row,
    hinge_kinematics,
    hinge_violation,
)
from physid.rigs.models.furuta import build as build_furuta
from physid.rigs.models.pendulum import build as build_pendulum
from physid.spec import load_spec


@functools.partial(jax.jit, static_argnums=(1, 2))
def _both(q, hinge, nb):
    """The written-out rows and forward mode's, in one compiled function per hinge (op by op,
    the file took ~12 s of CPU in dispatch and per-primitive compilations)."""
    g, G, Gbar = hinge_kinematics(q, hinge, nb)
    G_ad = constraint_jacobian(lambda x: hinge_violation(x, hinge), q, nb)
    return g, G, Gbar, G_ad, hinge_violation(q, hinge), hinge_angle_rate_row(q, hinge, nb)


@pytest.mark.parametrize("name", ["furuta", "pendulum"])
def test_hinge_kinematics_match_forward_mode(name):
    build = {"furuta": build_furuta, "pendulum": build_pendulum}[name]
    system = build(load_spec(name)).system
    nb = system.n_bodies
    rng = np.random.default_rng(7)
    for _ in range(5):
        # Random poses, far off the constraint manifold: the rows must hold everywhere.
        r = jnp.asarray(rng.normal(size=(nb, 3)))
        e = rng.normal(size=(nb, 4))
        e = jnp.asarray(e / np.linalg.norm(e, axis=1, keepdims=True))
        for hinge in system.hinges:
            g, G, Gbar, G_ad, g_ref, Gbar_ref = _both((r, e), hinge, nb)
            # Entries are O(1) (unit axes, offsets ≲ 1 m): agreement to a few ulps.
            np.testing.assert_allclose(G, G_ad, rtol=0, atol=1e-14)
            np.testing.assert_array_equal(g, g_ref)
            np.testing.assert_array_equal(Gbar, Gbar_ref)
