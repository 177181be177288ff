"""Shared test setup: JAX in float64 before anything imports it."""

import jax

jax.config.update("jax_enable_x64", True)
