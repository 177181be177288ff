"""The Jacobian blocks of a hinged rig (Appendix B) are the derivatives of the residuals: the
three ways of pushing tangents (all at once, per step, per part) agree to round-off, and the
blocks (dynamics, encoder and marker observations, initial state) match central finite
differences of the residuals along random directions."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from physid.estimation.hinged_problem import _Model
from tests.estimation.fast_furuta import driven_furuta_fast


@pytest.fixture(scope="module")
def driven_furuta():
    """A driven Furuta with encoders and camera markers (tests/estimation/driven_furuta.py),
    shared with test_markers.py's check of the marker rows: one compiled model for both,
    its linearization and residuals compiled without LLVM's optimizations
    (tests/estimation/fast_furuta.py)."""
    return driven_furuta_fast()


# Each case compiles three models (the joint one 52 s on the 2-core AMD EPYC VM, the test run's
# longest call) for the groupings only benchmarks choose: slow. The default run still checks
# the default grouping ("part") against central differences below.
@pytest.mark.slow
@pytest.mark.parametrize("with_theta", [True, False], ids=["joint", "states-only"])
def test_tangent_groupings_give_the_same_blocks(driven_furuta, with_theta):
    prob, X, theta = driven_furuta
    m = prob.model
    blocks = {}
    for how in ("one", "step", "part"):
        model = _Model(m.rig, m.names, m.h, m.markers, tangents=how)
        lin = model.lin if with_theta else model.lin_states
        blocks[how] = lin(X, jnp.asarray(theta), prob._args)
    for how in ("step", "part"):
        for got, want in zip(blocks[how], blocks["one"], strict=True):
            # Same derivatives, other order of floating-point operations: round-off only.
            np.testing.assert_allclose(
                got, want, rtol=1e-12, atol=1e-12 * np.abs(want).max(initial=0.0)
            )


def test_blocks_match_central_differences(driven_furuta):
    prob, X, theta = driven_furuta
    lin = prob.linearize(X, theta)
    rng = np.random.default_rng(3)
    n = X[0].shape[0]
    for _ in range(3):
        dx = rng.standard_normal((n, prob.d))
        dth = rng.standard_normal(len(theta))
        jd = (
            np.einsum("kmi,ki->km", lin.dyn_A, dx[:-1])
            + np.einsum("kmi,ki->km", lin.dyn_B, dx[1:])
            + lin.dyn_C @ dth,
            np.einsum("kmi,ki->km", lin.obs_A, dx),
            lin.init_A @ dx[0] + lin.init_C @ dth,
        )
        eps = 1e-6
        r0 = prob.residuals(X, theta)
        plus = prob.residuals(prob.retract(X, eps * dx), theta + eps * dth)
        minus = prob.residuals(prob.retract(X, -eps * dx), theta - eps * dth)
        for r, p, m, j in zip(r0, plus, minus, jd, strict=True):
            fwd, bwd = (p - r) / eps, (r - m) / eps
            tol = 1e-5 * np.abs(j).max()
            # Dry friction is piecewise smooth (λ_t clipped to its bound): where the segment
            # crosses a kink, forward and backward differences disagree by the jump in slope.
            # Elsewhere they agree to O(ε r''), and the central difference to O(ε² r''') plus
            # round-off O(1e-16 |r| / ε); 1e-5 of the block's largest entry covers both.
            smooth = np.abs(fwd - bwd) <= tol
            assert smooth.mean() > 0.99, smooth.mean()  # the check is not vacuous
            fd = 0.5 * (fwd + bwd)
            np.testing.assert_allclose(fd[smooth], j[smooth], rtol=0, atol=tol)
