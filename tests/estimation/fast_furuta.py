"""The driven Furuta of tests/estimation/driven_furuta.py with its linearization and residuals
compiled without LLVM's optimizations, for the Jacobian checks of test_jacobian_tangents.py and
test_markers.py.

What those checks test (the blocks are the derivatives of the residuals) does not depend on
how XLA optimizes the code: float64 throughout, no fast-math at any level; only the order of
operations (fused multiply-adds) may differ, a change at rounding level, some 1e-16 relative,
far below the checks' 1e-5 and 1e-6 tolerances. Measured on the 2-core AMD EPYC VM, the
linearization compiles in 16.5 s of CPU instead of 36.3 s and the residuals in 4.4 s instead
of 9.8 s, and both run in well under a second here. The estimator itself keeps XLA's default."""

from __future__ import annotations

import copy
import functools

import jax.numpy as jnp

from tests.estimation.driven_furuta import driven_furuta

# LLVM optimizations off, as tests/dynamics/tree_cases.py's FAST_COMPILE.
FAST_COMPILE = {"xla_backend_optimization_level": 0}


class _FastModel:
    """The problem's compiled model, with ``lin`` and ``residuals`` replaced by the same
    functions compiled with ``FAST_COMPILE`` for the problem's shapes (everything else is
    the model's own)."""

    def __init__(self, model, lin, residuals):
        self._model, self.lin, self.residuals = model, lin, residuals

    def __getattr__(self, name):
        return getattr(self._model, name)


@functools.cache
def driven_furuta_fast():
    """``(problem, X, θ)`` of ``driven_furuta()``, the problem a copy whose ``linearize`` and
    ``residuals`` run the fast-compiled functions (inputs of the same shapes only)."""
    prob, X, theta = driven_furuta()
    args = (X, jnp.asarray(theta, float), prob._args)
    model = prob.model
    fast = copy.copy(prob)
    fast.model = _FastModel(
        model,
        model.lin.lower(*args).compile(compiler_options=FAST_COMPILE),
        model.residuals.lower(*args).compile(compiler_options=FAST_COMPILE),
    )
    return fast, X, theta
