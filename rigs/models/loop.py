"""The flexible loop rig (Caldwell, Coleman & Correll, Section IV): a closed tree from a spec
(``rigs/specs/hexagon_loop.toml``), the manipulator's periodic force, simulation and the
measured point (the end of link 3, where the force acts).

The spec holds the tree (``[tree]``), the closures and the load (``[closures.*]``,
``[loads.*]``, read by ``tree.closures``), the stiffness groups (``[groups]``: one κ per
group of joints), the parameters to identify (``[parameters]``, one per group), the time
step and horizon and the true values of a simulated experiment (``[simulation]``).
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from physid.dynamics.variational import constrained
from physid.rigs.models.tree.closures import ClosedTreeRig, load_closed_tree
from physid.rigs.models.tree.model import TreeError
from physid.spec import RigSpec
from physid.units import to_si

FORCE_KEYS = ("amplitude", "period", "phase")


@dataclass(frozen=True)
class Waveform:
    """F_i(t) = amplitude_i cos(2π t / period + phase_i) (N), world (or body) components."""

    amplitude: np.ndarray  # [3] N
    period: float  # s
    phase: np.ndarray  # [3] rad

    def at(self, t: np.ndarray) -> np.ndarray:
        """[len(t), 3] (N)."""
        arg = 2 * np.pi * np.asarray(t, float)[:, None] / self.period + self.phase
        return self.amplitude * np.cos(arg)


@dataclass(frozen=True)
class LoopRig:
    """A closed tree rig with its force waveforms, time step h (s) and step count."""

    closed: ClosedTreeRig
    waveforms: tuple[Waveform, ...]
    h: float
    steps: int
    truth: dict[str, float]

    @property
    def system(self) -> constrained.ClosedTree:
        return self.closed.system

    @property
    def parameter_names(self) -> tuple[str, ...]:
        return self.closed.group_names

    def params(self, kappa):
        return self.closed.with_stiffness(kappa)

    def inputs(self, steps: int | None = None) -> jnp.ndarray:
        """u [steps, n_inputs]: each load's force at the step's midpoint t_k + h/2, held over
        the step (the midpoint quadrature of the impulse)."""
        n = self.steps if steps is None else steps
        t = self.h * (np.arange(n) + 0.5)
        na = self.system.tree.n_actuators
        cols = [np.zeros((n, na))] + [w.at(t) for w in self.waveforms]
        return jnp.asarray(np.concatenate(cols, axis=1))

    def start(self) -> tuple[jnp.ndarray, jnp.ndarray]:
        """(q₀, p₀): the closed rest shape q = 0, at rest."""
        n = self.system.n_dof
        return jnp.zeros(n), jnp.zeros(n)

    def true_kappa(self) -> np.ndarray:
        return np.array([self.truth[name] for name in self.parameter_names])


def load_loop(spec: RigSpec) -> LoopRig:
    """The loop rig of ``spec``; errors name the file and the table."""
    closed = load_closed_tree(spec, FORCE_KEYS)
    src = str(spec.path)
    waves = []
    for name, entry in spec.sections.get("loads", {}).items():
        where = f"{src}: [loads.{name}]"
        try:
            amplitude = _quantity(entry.get("amplitude", {"value": [0, 0, 0], "unit": "N"}), "N")
            period = float(_quantity(entry.get("period", {"value": 1.0, "unit": "s"}), "s"))
            phase = _quantity(entry.get("phase", {"value": [0, 0, 0], "unit": "rad"}), "rad")
        except (KeyError, TypeError, ValueError) as exc:
            raise TreeError(f"{where}: amplitude/period/phase: {exc}") from None
        if np.shape(amplitude) != (3,) or np.shape(phase) != (3,) or not period > 0:
            raise TreeError(f"{where}: amplitude and phase need 3 numbers, period > 0")
        waves.append(Waveform(np.asarray(amplitude), period, np.asarray(phase)))
    sim = spec.sections.get("simulation", {})
    h = float(_quantity(sim.get("h", {"value": 0.01, "unit": "s"}), "s"))
    duration = float(_quantity(sim.get("duration", {"value": 1.0, "unit": "s"}), "s"))
    truth = {str(k): float(v) for k, v in sim.get("truth", {}).items()}
    for name in closed.group_names:
        if name not in spec.parameters:
            raise TreeError(f"{src}: [parameters] {name}: the stiffness group has no parameter")
    return LoopRig(closed, tuple(waves), h, int(round(duration / h)), truth)


def _quantity(entry, unit: str):
    values = np.asarray(entry["value"], float)
    return values * to_si(1.0, str(entry.get("unit", unit)))


def end_effector(rig: LoopRig, params, q):
    """World positions [len(q), 3] (m) of the first load's point along configurations q."""
    return jax.vmap(lambda x: constrained.load_points(rig.system, params, x)[0])(q)
