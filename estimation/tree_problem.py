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
- markers (optional), each step: (π(T_b(q_k) p_j) − uv_kj) / σ_px per marker j and pixel axis,
  px: the tree's forward kinematics (``dynamics.tree.point_positions``) through the camera
  of ``estimation.markers`` (``world_pixels``, the projection the SPOOK estimator's marker
  rows use), 0 where no frame falls on the step. Rows of x_k alone, so the arrow structure
  holds; the marker geometry (body frames, joint placements) is taken as known: the rows do
  not depend on θ (a free parameter that moved a marker would be missing from their
  Jacobian, so ``TreeProblem`` checks that none does);
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
from physid.dynamics.tree import REVOLUTE, Tree, point_positions
from physid.estimation.consistency import InertiaLMI
from physid.estimation.lm import Linearization
from physid.estimation.markers import MarkerObservations, world_pixels


def _wrap(a):
    return jnp.arctan2(jnp.sin(a), jnp.cos(a))


@dataclass(frozen=True)
class TreeStructure:
    """What the compiled residuals depend on (every number is an argument): the tree, the map
    from named SI values to its parameters, the free parameter names, the step h (s), the
    joint (q index) each observation channel reads, and the markers' camera model and body
    indices (``MarkerObservations.model``, ``.body``; None: no marker rows)."""

    tree: Tree
    make_params: Callable[[dict], object]
    names: tuple[str, ...]
    h: float
    observed: tuple[int, ...]
    markers: tuple[str, tuple[int, ...]] | None = None

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
# Up to this many steps one vmap is cheaper than the chunks (its temporaries still fit the
# cache): at n = 2 001 (the 13-parameter Furuta), 27.6–34.2 against 34.0–34.9 ms of CPU per
# linearization (min of 7, two rounds, load ~22), and 0.026–0.032 against 0.032–0.037 s in
# the earlier measurement of docs/benchmarks.md; at 8 004 steps the chunks win (0.13–0.15
# against 0.18–0.21 s).
VMAP_UP_TO = 4096


class _Model:
    """Compiled residuals and linearization of one ``TreeStructure``.

    Arguments of every function: ``a`` = dict(values, scale, wd [N−1, 2n], wo [N, k], y [N, k],
    u [N−1, n_act], c [n][, cam, uv [N, m, 2], mw [N, m]]): fixed SI values by name, parameter
    scale, dynamics-row and observation weights, observations, inputs, the natural map's
    inertia per joint, and with markers the camera (``MarkerObservations.arrays``), the
    pixels on the grid and their weights 1/σ_px² (px⁻²).
    """

    def __init__(
        self, s: TreeStructure, chunk: int | None = LINEARIZE_CHUNK, vmap_up_to: int = VMAP_UP_TO
    ):
        self.s = s
        # No free parameter (states only, a cross-validation): lax.map's batching cannot
        # reshape the zero-width θ columns [chunk, 2n, 0] (ZeroDivisionError), so vmap.
        self.chunk = chunk if s.names else None
        self.vmap_up_to = vmap_up_to
        self.linearize = jax.jit(self._linearize)
        self.linearize_states = jax.jit(functools.partial(self._linearize, with_theta=False))
        self.residuals = jax.jit(self._residuals)
        self.cost = jax.jit(
            lambda X, theta, a: sum(jnp.sum(r**2) for r in self._residuals(X, theta, a))
        )
        self.momenta = jax.jit(self._momenta)
        self.chained_momenta = jax.jit(self._chained_momenta)
        self.joint_inertia = jax.jit(self._joint_inertia)
        self.pixels = jax.jit(
            lambda X, theta, a: jax.vmap(
                lambda q: self.marker_pixels(self.params(a, theta), a["cam"], q)
            )(X[:, : self.s.n])
        )

    def _chunked(self, steps: int) -> bool:
        """Linearize in chunks of ``self.chunk`` steps (a static choice by shape)."""
        return bool(self.chunk) and steps > self.vmap_up_to

    def _cost(self, X, theta, a):
        return sum(jnp.sum(r**2) for r in self._residuals(X, theta, a))

    def params(self, a, theta):
        values = dict(a["values"])
        for i, name in enumerate(self.s.names):
            values[name] = theta[i] * a["scale"][i]
        return self.s.make_params(values)

    def _step(self, params, a, q0, p0, q1, p1, u):
        return vf.step_residual(
            self.s.tree, params, q0, p0, q1, p1, u, self.s.h, a["c"], a["alpha"]
        )

    def marker_pixels(self, params, cam, q):
        """Pixels [m, 2] of the markers at the joint coordinates q [n] (one step)."""
        model, body = self.s.markers
        return world_pixels(
            model, cam, point_positions(self.s.tree, params, q, body, cam["points"])
        )

    def _marker_rows(self, params, a, q, uv, mw):
        """√mw (π(q) − uv) of one step, [2m] px (u then v per marker)."""
        px = self.marker_pixels(params, a["cam"], q)
        return (jnp.sqrt(mw)[:, None] * (px - uv)).reshape(-1)

    def _obs(self, X, a, params):
        n, wr = self.s.n, self.s.wraps
        q = X[:, :n][:, np.asarray(self.s.observed, dtype=int)]
        diff = q - a["y"]
        diff = jnp.where(wr, _wrap(diff), diff)
        enc = a["wo"] * diff
        if self.s.markers is None:
            return enc
        rows = jax.vmap(lambda qk, uv, mw: self._marker_rows(params, a, qk, uv, mw))(
            X[:, :n], a["uv"], a["mw"]
        )
        return jnp.concatenate([enc, rows], axis=1)

    def _marker_jacobian(self, params, a, q):
        """(rows [N, 2m], ∂rows/∂x_k [N, 2m, 2n]) of the marker rows at the positions
        q [N, n] (forward mode over q)."""

        def one(b):
            qk, uv, mw = b
            f = functools.partial(self._marker_rows, params, a, uv=uv, mw=mw)
            J = jax.jacfwd(f)(qk)  # [2m, n]; the rows do not depend on the momenta
            return f(qk), jnp.concatenate([J, jnp.zeros_like(J)], axis=1)

        steps = (q, a["uv"], a["mw"])
        if self._chunked(q.shape[0]):
            return jax.lax.map(one, steps, batch_size=self.chunk)
        return jax.vmap(one)(steps)

    def _residuals(self, X, theta, a):
        n = self.s.n
        params = self.params(a, theta)
        q, p = X[:, :n], X[:, n:]
        dyn = jax.vmap(lambda *b: self._step(params, a, *b))(q[:-1], p[:-1], q[1:], p[1:], a["u"])
        return a["wd"] * dyn, self._obs(X, a, params), jnp.zeros(0)

    def _dyn_block(self, a, theta, q0, p0, q1, p1, u, wd, with_theta):
        """Weighted residual of one step and its Jacobians w.r.t. x_k, x_{k+1} and (with
        ``with_theta``) θ."""
        s, h, n = self.s, self.s.h, self.s.n
        params = self.params(a, theta)
        jac = vf.step_jacobians(s.tree, params, q0, p0, q1, p1, u, h, a["c"], a["alpha"])
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
            # Rows r₁ + αλ, r₂ − (1 − α)λ: sliding λ = side·lim, sticking λ = −r₁/α − c v̄.
            a_ = a["alpha"]
            ratio = (1.0 - a_) / a_
            share = a_ * side[:, None] * lim_th
            drop = ratio * (1.0 - keep)[:, None]
            C = jnp.concatenate(
                [keep[:, None] * r1_th + share, r2_th + drop * r1_th - ratio * share]
            )
        else:
            return wd * value, wd[:, None] * A, wd[:, None] * B
        return wd * value, wd[:, None] * A, wd[:, None] * B, wd[:, None] * C

    def _linearize(self, X, theta, a, with_theta: bool = True):
        n = self.s.n
        q, p = X[:, :n], X[:, n:]
        block = functools.partial(self._dyn_block, a, theta, with_theta=with_theta)
        steps = (q[:-1], p[:-1], q[1:], p[1:], a["u"], a["wd"])
        if self._chunked(q.shape[0]):
            out = jax.lax.map(lambda b: block(*b), steps, batch_size=self.chunk)
        else:
            out = jax.vmap(block)(*steps)
        # Without θ the blocks have no C: lax.map cannot batch an array of size 0.
        dr, dA, dB, dC = out if with_theta else (*out, jnp.zeros((len(out[0]), 2 * n, 0)))
        params = self.params(a, theta)
        orr = self._obs(X, a, params)
        sel = (
            jnp.zeros((len(self.s.observed), 2 * n))
            .at[jnp.arange(len(self.s.observed)), jnp.asarray(self.s.observed)]
            .set(1.0)
        )
        oA = a["wo"][:, :, None] * sel[None]
        if self.s.markers is not None:
            _, mA = self._marker_jacobian(params, a, q)
            oA = jnp.concatenate([oA, mA], axis=1)
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

    def _chained_momenta(self, q, theta, a):
        """Momenta p [N, n] that close every step's second row on the positions q [N, n] at θ:
        p_{k+1} = (1 − α)λ_k + D₂L_d(q_k, q_{k+1}) + F⁺_k, λ_k the natural map's friction of step
        k at p_k (a scan: while a joint sticks λ_k depends on p_k); each log starts from the
        frictionless p_k = −(D₁L_d + F⁻)(q_k, q_{k+1}). Then row 1 of step k is the
        three-point DEL residual at q_k with the friction of both steps around it."""
        params = self.params(a, theta)
        h, n = self.s.h, self.s.n
        zero = jnp.zeros(n)
        r1, r2 = jax.vmap(
            lambda q0, q1, u: vf.frictionless_rows(self.s.tree, params, q0, zero, q1, zero, u, h)
        )(q[:-1], q[1:], a["u"])
        v = (q[1:] - q[:-1]) / h
        joined = a["wd"][:, 0] > 0  # step k joins q_k to q_{k+1} within one log
        fresh = -jnp.concatenate([r1[1:], r1[-1:]])  # p_{k+1} where a log starts at k + 1

        def one(p, x):
            r1k, r2k, vk, joins, start = x
            lam = vf.step_impulse(params, p + r1k, vk, h, a["c"], a["alpha"])
            nxt = jnp.where(joins, (1.0 - a["alpha"]) * lam - r2k, start)
            return nxt, nxt

        _, rest = jax.lax.scan(one, -r1[0], (r1, r2, v, joined, fresh))
        return jnp.concatenate([-r1[:1], rest])


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
    ``c`` [n]: the natural map's inertia per joint (kg m² or kg). ``markers``: pixel
    observations on the same N steps (their ``model`` and ``body`` must be the structure's
    ``markers``), or None. ``friction_row_weight``: α, the share of each step's dry-friction
    impulse in its first row (``variational_friction``; ½ is the model, other values serve
    ``rigs.models.tree_row_weight``'s extrapolation); a runtime argument of the compiled
    functions, so a problem with another α compiles nothing new.
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
    markers: MarkerObservations | None = None
    friction_row_weight: float = vf.FRICTION_ROW_WEIGHT
    _args: dict = field(init=False, repr=False)

    def __post_init__(self):
        mk = self.markers
        want = None if mk is None else (mk.model, mk.body)
        if self.structure.markers != want:
            raise ValueError(
                f"TreeProblem: structure.markers {self.structure.markers} but the marker "
                f"observations are {want}"
            )
        if mk is not None and mk.uv.shape[0] != np.shape(self.y)[0]:
            raise ValueError(
                f"markers cover {mk.uv.shape[0]} grid steps, the encoders {np.shape(self.y)[0]}"
            )
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
            "alpha": jnp.asarray(self.friction_row_weight, float),
        }
        if mk is not None:
            self._args.update(cam=mk.arrays(), uv=jnp.asarray(mk.uv), mw=jnp.asarray(mk.weight))
            moving = self._parameters_moving_markers()
            if moving:
                raise ValueError(
                    f"TreeProblem: the free parameter(s) {', '.join(moving)} move the markers; "
                    "the marker rows take the marker geometry as known (fix them)"
                )

    def _parameters_moving_markers(self) -> list[str]:
        """Free parameters whose derivative of the marker pixels is non-zero (forward mode at
        q = 0, θ = 1: a parameter that does not enter the kinematics has an exact 0)."""
        if not len(self.names):
            return []
        q0 = jnp.zeros(self.structure.n)

        def px(th):
            return self.model.marker_pixels(
                self.model.params(self._args, th), self._args["cam"], q0
            )

        J = np.asarray(jax.jacfwd(px)(jnp.ones(len(self.names))))  # [m, 2, p]
        return [k for i, k in enumerate(self.names) if np.any(J[..., i] != 0)]

    # ------------------------------------------------------------------ ArrowProblem API
    def linearize(self, X, theta) -> Linearization:
        return self._linearization(self.model.linearize, X, theta)

    def linearize_states(self, X, theta) -> Linearization:
        return self._linearization(self.model.linearize_states, X, theta)

    def _linearization(self, lin, X, theta) -> Linearization:
        out = lin(jnp.asarray(X), jnp.asarray(theta, float), self._args)
        present = np.asarray(self.obs_weight) > 0
        if self.markers is not None:
            present = np.concatenate([present, np.repeat(self.markers.weight > 0, 2, 1)], 1)
        return Linearization(*out, obs_present=present)

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

    def chained_momenta(self, q: np.ndarray, theta) -> np.ndarray:
        """Momenta [N, n] that close every step's second row on the positions q [N, n] at θ,
        friction included (``_Model._chained_momenta``): with them, row 1 of each step is
        the three-point DEL residual at its first position."""
        out = self.model.chained_momenta(
            jnp.asarray(q, float), jnp.asarray(theta, float), self._args
        )
        return np.asarray(out)

    def positions(self, X) -> np.ndarray:
        return np.asarray(X)[:, : self.structure.n]

    def marker_pixels(self, X, theta) -> np.ndarray | None:
        """Predicted marker pixels [N, m, 2] of the states X at θ (None without markers)."""
        if self.markers is None:
            return None
        return np.asarray(self.model.pixels(jnp.asarray(X), jnp.asarray(theta, float), self._args))
