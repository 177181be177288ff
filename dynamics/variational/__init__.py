"""Discrete mechanics by the midpoint variational integrator (Caldwell, Coleman & Correll).

- ``midpoint``: the discrete Lagrangian and forces of a kinematic tree, the forced DEL
  residual in position–momentum form (eqs. 2–5, 15) and an unconstrained Newton step.
- ``constrained``: trees closed by holonomic constraints (loop closures) and loaded by point
  forces; the constrained DEL (eqs. 3, 5) solved by Newton to 1e-12, differentiated through
  the implicit-function theorem (eqs. 6–8).
- ``adjoint``: forward sensitivities and the discrete adjoint of a trajectory cost (Lemma 1,
  eqs. 9–10).

The names of ``midpoint`` are re-exported here: ``variational.step_residual`` etc.
"""

from physid.dynamics.variational.midpoint import (
    NEWTON_MAX_ITERATIONS,
    NEWTON_TOLERANCE,
    discrete_forces,
    discrete_lagrangian,
    lagrangian,
    momentum,
    nonconservative_forces,
    rollout,
    rollout_from_momentum,
    slot_derivatives,
    step,
    step_residual,
)

__all__ = [
    "NEWTON_MAX_ITERATIONS",
    "NEWTON_TOLERANCE",
    "discrete_forces",
    "discrete_lagrangian",
    "lagrangian",
    "momentum",
    "nonconservative_forces",
    "rollout",
    "rollout_from_momentum",
    "slot_derivatives",
    "step",
    "step_residual",
]
