"""What the tree-dynamics tests share: the MJCF trees of tests/data/trees, how their results
are compared, and one compiled single-state evaluation of the recursions per tree."""

import functools
from pathlib import Path

import jax
import numpy as np

from physid.dynamics import actuators, newton_euler
from physid.rigs.models.tree.mjcf import read_model_file
from physid.rigs.models.tree.model import build_model

DATA = Path(__file__).parents[1] / "data" / "trees"
# LLVM optimizations off: compiles ~40 % faster, float64 IEEE arithmetic unchanged.
FAST_COMPILE = {"xla_backend_optimization_level": 0}


def rel(a, b) -> float:
    """Largest relative error over states: ‖a − b‖ / ‖b‖ per state (rows)."""
    a, b = np.asarray(a).reshape(len(a), -1), np.asarray(b).reshape(len(b), -1)
    return float(np.max(np.linalg.norm(a - b, axis=1) / np.linalg.norm(b, axis=1)))


@functools.cache
def single_state(name: str):
    """``(tree, params, f)`` of the MJCF tree ``name``: ``f(params, q, qd, qdd, u)`` is one
    compiled program (FAST_COMPILE) of one state's RNEA τ, CRBA, ABA at that τ
    (``aba_of_rnea``), forward dynamics under u and the regressor Y, with
    ``dynamics.newton_euler``'s single-state recursions. test_newton_euler.py checks it
    against MuJoCo and Pinocchio, test_batched.py checks the batched kernels against it:
    one compilation per tree for both (each compiled its own before)."""
    model = build_model(read_model_file(DATA / f"{name}.xml"))
    tree, params = model.tree, model.params

    def one(params, q, qd, qdd, u):
        tau = newton_euler.rnea(tree, params, q, qd, qdd)
        return {
            "rnea": tau,
            "crba": newton_euler.crba(tree, params, q),
            "aba_of_rnea": newton_euler.aba(tree, params, q, qd, tau),
            "forward": actuators.forward_dynamics(tree, params, q, qd, u),
            "Y": newton_euler.regressor(tree, params, q, qd, qdd),
        }

    # One state at a time: compiling the single-state program costs about half of the
    # vmapped one, and tens of calls take milliseconds.
    n = tree.n_dof
    args = (params, np.zeros(n), np.zeros(n), np.zeros(n), np.zeros(tree.n_actuators))
    return tree, params, jax.jit(one).lower(*args).compile(compiler_options=FAST_COMPILE)


def single_state_rows(name: str, q, qd, qdd, u) -> dict:
    """``single_state(name)`` on each state (rows of q, qd, qdd, u): arrays [n_states, ...]."""
    _, params, f = single_state(name)
    rows = [f(params, *state) for state in zip(q, qd, qdd, u, strict=True)]
    return {k: np.array([r[k] for r in rows]) for k in rows[0]}
