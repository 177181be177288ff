"""Pure, differentiable models and integrators (JAX, float64)."""

import jax

jax.config.update("jax_enable_x64", True)
