"""Joint state and parameter estimation on generalized coordinates: residuals and Jacobian
blocks of a kinematic tree for the banded arrow LM of ``estimation.lm``.

Unknowns: per log, the states x_k = (q_k, p_k) on the estimator grid t_0 + k h (joint
coordinates and the discrete momentum of Caldwell et al. eq. 4; d = 2 n_dof numbers per step,
4 for a Furuta pendulum against 24 in maximal coordinates), and the free parameters χ = s ⊙ θ
in their box. Weighted residual blocks:

- dynamics, step k → k+1 of the same log: √2/σ_w ⊙ (the forced DEL equations of eq. 5 with
  exact dry friction, ``dynamics.variational_friction.step_residual``), 2 n rows, N m s;
  σ_w [n] (N m s per step and joint) is the process noise, the std of a random impulse per
  step that the model does not explain. Why √2: with both rows free, minimizing over the
  momentum p_k that joins step k−1 to step k leaves r²/σ_w² for the three-point DEL residual
  r at q_k (eq. 3), the likelihood of one impulse of variance σ_w² per step;
- observation, each step: (q_k[j] − y_k) / σ_y per encoder (wrapped to (−π, π] for a
  revolute joint), rad; 0 where the log has no sample;
- no initial-state block: x_0 is as free as every other state (p_0 enters the first row of
  step 0 only).

Several logs of one rig are one chain of states with the dynamics rows between logs weighted
0, so the arrow structure (and LM's banded elimination) carries independent segments.

Jacobians: ∂/∂(q_k, q_{k+1}) is assembled from the gradient and Hessian of L at the step's
midpoint (``variational_friction.lagrangian_jet``) by the chain rule of the midpoint rule,
∂/∂p by hand, and ∂/∂θ by forward mode over the residual: per step the second derivatives
of the kinematics are taken once, in n directions, instead of through 2d + p tangents.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field

import jax
import jax.numpy as jnp
import numpy as np

import physid.dynamics  # noqa: F401  (float64)
from physid.dynamics import newton_euler
from physid.dynamics import variational_friction as vf
from physid.dynamics.tree import REVOLUTE, Tree
from physid.estimation.consistency import InertiaLMI
from physid.estimation.lm import Linearization


def _wrap(a):
    return jnp.arctan2(jnp.sin(a), jnp.cos(a))


@dataclass(frozen=True)
class TreeStructure:
    """What the compiled residuals depend on (every number is an argument): the tree, the map
    from named SI values to its parameters, the free parameter names, the step h (s), the
    joint (q index) each observation channel reads, and how many inputs a step carries."""

    tree: Tree
    make_params: Callable[[dict], object]
    names: tuple[str, ...]
    h: float
    observed: tuple[int, ...]

    @property
    def n(self) -> int:
        return self.tree.n_dof

    @property
    def wraps(self) -> np.ndarray:
        kinds = [self.tree.joint_types[self.tree.dof_bodies[j]] for j in self.observed]
        return np.array([k == REVOLUTE for k in kinds])


# Steps per vectorized chunk of the linearization (a scan over chunks): the per-step
# temporaries of the nested derivatives of one chunk stay in cache, so the time per step does
# not grow with n as one vmap over all steps did (CPU time per step 5–7× per 4× of n).
LINEARIZE_CHUNK = 256


class _Model:
    """Compiled residuals and linearization of one ``TreeStructure``.

    Arguments of every function: ``a`` = dict(values, scale, wd [N−1, 2n], wo [N, k], y [N, k],
    u [N−1, n_act], c [n]): fixed SI values by name, parameter scale, dynamics-row and
    observation weights, observations, inputs and the natural map's inertia per joint.
    """

    def __init__(self, s: TreeStructure, chunk: int | None = LINEARIZE_CHUNK):
        self.s = s
        self.chunk = chunk
        self.linearize = jax.jit(self._linearize)
        self.linearize_states = jax.jit(functools.partial(self._linearize, with_theta=False))
        self.residuals = jax.jit(self._residuals)
        self.cost = jax.jit(
            lambda X, theta, a: sum(jnp.sum(r**2) for r in self._residuals(X, theta, a))
        )
        self.momenta = jax.jit(self._momenta)
        self.joint_inertia = jax.jit(self._joint_inertia)

    def _cost(self, X, theta, a):
        return sum(jnp.sum(r**2) for r in self._residuals(X, theta, a))

    def params(self, a, theta):
        values = dict(a["values"])
        for i, name in enumerate(self.s.names):
            values[name] = theta[i] * a["scale"][i]
        return self.s.make_params(values)

    def _step(self, params, c, q0, p0, q1, p1, u):
        return vf.step_residual(self.s.tree, params, q0, p0, q1, p1, u, self.s.h, c)

    def _obs(self, X, a):
        n, wr = self.s.n, self.s.wraps
        q = X[:, :n][:, np.asarray(self.s.observed, dtype=int)]
        diff = q - a["y"]
        diff = jnp.where(wr, _wrap(diff), diff)
        return a["wo"] * diff

    def _residuals(self, X, theta, a):
        n = self.s.n
        params = self.params(a, theta)
        q, p = X[:, :n], X[:, n:]
        dyn = jax.vmap(lambda *b: self._step(params, a["c"], *b))(
            q[:-1], p[:-1], q[1:], p[1:], a["u"]
        )
        return a["wd"] * dyn, self._obs(X, a), jnp.zeros(0)

    def _dyn_block(self, a, theta, q0, p0, q1, p1, u, wd, with_theta):
        """Weighted residual of one step and its Jacobians w.r.t. x_k, x_{k+1}, θ."""
        s, h, n = self.s, self.s.h, self.s.n
        params = self.params(a, theta)
        jac = vf.step_jacobians(s.tree, params, q0, p0, q1, p1, u, h, a["c"])
        value, A, B, keep, side = jac
        qm, v = 0.5 * (q0 + q1), (q1 - q0) / h
        if with_theta:
            # θ enters L (inertias, gravity), the smooth forces and the friction limit. The
            # mixed derivatives ∂²L/∂(q̄, v̄)∂θ come from one reverse pass over θ pushed along
            # the 2n directions of (q̄, v̄), instead of p tangents through L's gradient.
            def grad_theta(z):
                return jax.grad(lambda th: vf.lagrangian(s.tree, self.params(a, th), z[:n], z[n:]))(
                    theta
                )

            G_th = jax.jacfwd(grad_theta)(jnp.concatenate([qm, v])).T  # [p, 2n] → [2n, p]
            L_qth, L_vth = G_th[:n], G_th[n:]

            def force_terms(th):
                pr = self.params(a, th)
                return (
                    vf.smooth_forces(s.tree, pr, v, u),
                    h * vf.dry_friction_limit(pr, v),
                )

            f_th, lim_th = jax.jacfwd(force_terms)(theta)
            r1_th = 0.5 * h * L_qth - L_vth + 0.5 * h * f_th
            r2_th = -0.5 * h * L_qth - L_vth - 0.5 * h * f_th
            C = jnp.concatenate([keep[:, None] * r1_th + side[:, None] * lim_th, r2_th])
        else:
            C = jnp.zeros((2 * n, 0))
        return wd * value, wd[:, None] * A, wd[:, None] * B, wd[:, None] * C

    def _linearize(self, X, theta, a, with_theta: bool = True):
        n = self.s.n
        q, p = X[:, :n], X[:, n:]
        block = functools.partial(self._dyn_block, a, theta, with_theta=with_theta)
        steps = (q[:-1], p[:-1], q[1:], p[1:], a["u"], a["wd"])
        if self.chunk:
            dr, dA, dB, dC = jax.lax.map(lambda b: block(*b), steps, batch_size=self.chunk)
        else:
            dr, dA, dB, dC = jax.vmap(block)(*steps)
        orr = self._obs(X, a)
        sel = (
            jnp.zeros((len(self.s.observed), 2 * n))
            .at[jnp.arange(len(self.s.observed)), jnp.asarray(self.s.observed)]
            .set(1.0)
        )
        oA = a["wo"][:, :, None] * sel[None]
        p_ = theta.shape[0] if with_theta else 0
        d = 2 * n
        return (
            dr, dA, dB, dC, orr, oA,
            jnp.zeros(0), jnp.zeros((0, d)), jnp.zeros((0, p_)),
        )  # fmt: skip

    def _joint_inertia(self, q, theta, a):
        """Median over the positions q [N, n] of each joint's diagonal of M at θ (kg m² or kg)."""
        params = self.params(a, theta)
        diag = jax.vmap(lambda x: jnp.diag(newton_euler.crba(self.s.tree, params, x)))(q)
        return jnp.median(diag, axis=0)

    def _momenta(self, q, theta, a, starts):
        """Discrete momenta p_k of the positions q [N, n] at θ: the average of D₂L_d of the
        step before and −D₁L_d of the step after (each alone at a log's ends), forces left
        out: a start that puts the first rows near zero where the data follow the model."""
        params = self.params(a, theta)
        h = self.s.h
        D1, D2 = jax.vmap(lambda x0, x1: vf.slot_derivatives(self.s.tree, params, x0, x1, h))(
            q[:-1], q[1:]
        )
        zero = jnp.zeros((1, q.shape[1]))
        before = jnp.concatenate([zero, D2])  # p_k = D₂L_d(q_{k−1}, q_k)
        after = jnp.concatenate([-D1, zero])  # p_k = −D₁L_d(q_k, q_{k+1})
        last = jnp.concatenate([starts[1:], jnp.array([True])])  # a log ends at k
        both = 0.5 * (before + after)
        return jnp.where(starts[:, None], after, jnp.where(last[:, None], before, both))


_MODELS: dict[TreeStructure, _Model] = {}


def compiled(structure: TreeStructure) -> _Model:
    """The compiled model of this structure (shared by every problem that has it)."""
    if structure not in _MODELS:
        _MODELS[structure] = _Model(structure)
    return _MODELS[structure]


@dataclass
class TreeProblem:
    """Joint estimation problem of a tree rig over one or more logs (segments of one chain).

    ``names``: free parameters, χ = ``scale`` · θ, box ``lower``/``upper`` on θ; ``values``:
    every other named SI value the rig's ``make_params`` needs. Per step of the chain (logs
    concatenated, N steps): ``y[N, k]`` observed joint coordinates (rad or m), ``obs_weight
    [N, k]`` = 1/σ_y where a sample is present, else 0; per step transition (N − 1):
    ``u[N−1, n_act]`` inputs, ``dyn_weight[N−1, 2n]`` = √2/σ_w per row, 0 between logs.
    ``c`` [n]: the natural map's inertia per joint (kg m² or kg).
    """

    structure: TreeStructure
    values: dict
    scale: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    y: np.ndarray
    obs_weight: np.ndarray
    u: np.ndarray
    dyn_weight: np.ndarray
    c: np.ndarray
    consistency: InertiaLMI | None = None
    _args: dict = field(init=False, repr=False)

    def __post_init__(self):
        self.model = compiled(self.structure)
        self.names = self.structure.names
        self.d = 2 * self.structure.n
        self._args = {
            "values": {k: jnp.asarray(float(v)) for k, v in self.values.items()},
            "scale": jnp.asarray(np.asarray(self.scale, float)),
            "wd": jnp.asarray(self.dyn_weight, float),
            "wo": jnp.asarray(self.obs_weight, float),
            "y": jnp.asarray(self.y, float),
            "u": jnp.asarray(self.u, float),
            "c": jnp.asarray(self.c, float),
        }

    # ------------------------------------------------------------------ ArrowProblem API
    def linearize(self, X, theta) -> Linearization:
        return self._linearization(self.model.linearize, X, theta)

    def linearize_states(self, X, theta) -> Linearization:
        return self._linearization(self.model.linearize_states, X, theta)

    def _linearization(self, lin, X, theta) -> Linearization:
        out = lin(jnp.asarray(X), jnp.asarray(theta, float), self._args)
        return Linearization(*out, obs_present=np.asarray(self.obs_weight) > 0)

    def cost(self, X, theta) -> float:
        return float(self.model.cost(jnp.asarray(X), jnp.asarray(theta, float), self._args))

    def retract(self, X, dX):
        return jnp.asarray(X) + jnp.asarray(dX)

    def residuals(self, X, theta):
        out = self.model.residuals(jnp.asarray(X), jnp.asarray(theta, float), self._args)
        return tuple(np.asarray(r) for r in out)

    # ------------------------------------------------------------------ helpers
    def params(self, theta):
        """The tree parameters at θ."""
        return self.model.params(self._args, jnp.asarray(theta, float))

    def initial_states(self, q: np.ndarray, theta, starts: np.ndarray) -> jnp.ndarray:
        """X [N, 2n] from positions q [N, n] (e.g. filtered encoder angles): momenta from the
        discrete Legendre transforms at θ (``starts`` [N] marks each log's first step)."""
        q = jnp.asarray(q, float)
        p = self.model.momenta(q, jnp.asarray(theta, float), self._args, jnp.asarray(starts))
        return jnp.concatenate([q, p], axis=1)

    def positions(self, X) -> np.ndarray:
        return np.asarray(X)[:, : self.structure.n]
