"""Estimation problems and solvers (LM, IPOPT, regression) and their results."""

import jax

jax.config.update("jax_enable_x64", True)
