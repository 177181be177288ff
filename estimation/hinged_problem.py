"""Residuals and compressed forward-mode Jacobians of joint state and parameter estimation
for hinged rigs (Marklund et al. (3.6–3.8), (3.15–3.20), Appendix B).

Weighted residual blocks (Ω⁻¹ = κI, R⁻¹ = diag(per-channel weight), Section 4.4):

- dynamics block k = 0..n−2: √κ [Δp_u; Δp_q] of step k → k+1 (3.7–3.8), N s;
- observation block k = 0..n−1: √w (h(q_k) − y_k) wrapped to (−π, π] (3.6), rad, one row per
  encoder (missing samples have weight 0), followed, when camera markers are given, by two
  pixel rows per marker (``estimation.markers``; weight σ_ref² / σ_px², see ``HingedProblem``);
- initial-state block: √κ M_Σ [h⁻¹Δq_0; Δv_0] (3.16–3.17, (3.13–3.14)).

Jacobians (Appendix B): each block is a function of the local tangent increments δ_k, δ_{k+1}
(x ⊞ δ at δ = 0, the D.2 JVP makes this exact for rotations) and θ. ``jax.jacfwd`` of one
block pushes its tangent directions through it and ``vmap`` runs all blocks at once — the
compressed E-matrix of (B.1–B.3): the number of JVPs is 2d + p whatever n is. They are pushed
part by part — θ, and Δr, ψ, Δv of x_k and of x_{k+1} — each in a jacfwd of its own with the
other parts held, so a part's tangents skip what does not depend on it (Δr reaches only the
hinge violations, Δv not the mass blocks, θ not the hinge geometry). Linearization + normal
equations of the 13-parameter Furuta, one core: 90.9 ms, against 139.8 ms with two groups
(δ_k, θ) and δ_{k+1}, and 200.2 ms with one jacfwd over all 2d + p
(``benchmarks/bench_linearization.py --tangents``).

Compilation: the jitted functions depend only on the model's *structure* (system, parameter
names, h, which observations); every number (fixed values, scale, κ, data) is an argument.
They are cached per structure, so a second problem of the same rig (cross-validation, another
log of the same length, the pipeline's next experiment) reuses the compiled code, and with
JAX's persistent cache (``rigs.models.identify_hinged.enable_compilation_cache``) a new process does
too.

State tangent per step (d = 12 nb): [Δr, ψ per body (6 nb); Δv (6 nb)].
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import jax
import jax.numpy as jnp
import numpy as np

import physid.dynamics  # noqa: F401  (float64)
from physid.dynamics.multibody import boxplus_parts, constraint_jacobian, hinge_violation
from physid.dynamics.spook import impulse_residual, mass_matrix_blocks
from physid.estimation.consistency import InertiaLMI
from physid.estimation.lm import Linearization
from physid.estimation.markers import MarkerObservations, marker_pixels


def _wrap(a):
    return jnp.arctan2(jnp.sin(a), jnp.cos(a))


# Steps per chunk of the Jacobian blocks. One vmap over all n steps made XLA allocate temporaries
# of n × (2d + p) tangents of every intermediate — 0.4 GB per linearization of the 2001-step
# Furuta, fresh pages from the OS each time (half the linearization's time was page faults).
# Chunks keep the temporaries small and reused: 64 steps made it 2.2× faster (AMD EPYC). On the
# 2-core Xeon of 2026-11-25, linearization + normal equations: 16 steps 160.7 ms median against
# 166.7 ms for 64 on the idle machine, 171.8 against 190.8 ms pinned to one core; the
# 13-parameter fit pinned to one core 6.5 against 7.1 s (benchmarks/bench_linearization.py
# --chunks, docs/benchmarks.md).
JACOBIAN_CHUNK = 16


def _chunked_vmap(f, chunk: int | None = JACOBIAN_CHUNK):
    """``vmap(f)`` over the leading axis, evaluated ``chunk`` steps at a time (None: all)."""
    if chunk is None:
        return jax.vmap(f)

    def g(*xs):
        n = xs[0].shape[0]
        chunks = -(-n // chunk)
        pad = chunks * chunk - n

        def split(x):  # edge padding keeps the padded steps finite; they are cut off below
            x = jnp.concatenate([x, jnp.repeat(x[-1:], pad, axis=0)]) if pad else x
            return x.reshape(chunks, chunk, *x.shape[1:])

        out = jax.lax.map(lambda b: jax.vmap(f)(*b), tuple(split(x) for x in xs))
        return jax.tree.map(lambda y: y.reshape(chunks * chunk, *y.shape[2:])[:n], out)

    return g


def _with_value(f):
    """f returning its value twice, for ``jacfwd(..., has_aux=True)``: one pass gives the
    value and the Jacobian."""

    def g(*b):
        out = f(*b)
        return out, out

    return g


def _jacobians_by_part(f, primal: tuple, which) -> tuple:
    """f(*primal) and [∂f/∂primal[i] for i in ``which``], one ``jacfwd`` per argument with the
    others held as constants: their tangents are then symbolic zeros, so the directions of each
    argument only pass through the operations that depend on it. The primal is the same in
    every jacfwd, so XLA's common-subexpression elimination can share it."""
    val, jacs = None, []
    for i in which:

        def held(x, i=i):
            return f(*primal[:i], x, *primal[i + 1 :])

        jac, val = jax.jacfwd(_with_value(held), has_aux=True)(primal[i])
        jacs.append(jac)
    return val, jacs


class _Model:
    """The static structure of a problem and its pure residual functions.

    Arguments of every function: ``a`` = dict(values, scale, kappa, y, w, u[, cam, uv, mw]).
    ``tangents`` picks how the Jacobian blocks push their tangent directions (same values to
    round-off; ``benchmarks/bench_linearization.py --tangents`` compares them):

    - ``"part"`` (default): one jacfwd per part of the step — Δr, ψ, Δv of x_k and of x_{k+1},
      and θ — each with the other parts held as constants, so their tangents are symbolic
      zeros and every part's directions only pass through what depends on it;
    - ``"step"``: one jacfwd over (δ_k, θ) and one over δ_{k+1};
    - ``"one"``: one jacfwd over all 2d + p directions.
    """

    def __init__(
        self,
        rig,
        names: tuple[str, ...],
        h: float,
        markers: tuple | None,
        chunk: int | None = JACOBIAN_CHUNK,
        tangents: str = "part",
    ):
        if tangents not in ("part", "step", "one"):
            raise ValueError(f"tangents must be 'part', 'step' or 'one', not {tangents!r}")
        self.rig, self.names, self.h, self.chunk = rig, names, h, chunk
        self.tangents = tangents
        self.nb = rig.system.n_bodies
        self.d = 12 * self.nb
        self.markers = markers  # (model, body tuple) or None
        self.lin = jax.jit(self._linearize)
        self.lin_states = jax.jit(functools.partial(self._linearize, with_theta=False))
        self.cost = jax.jit(self._cost_fn)
        self.retract = jax.jit(self._retract_fn)
        self.residuals = jax.jit(self._residuals)
        self.observe = jax.jit(jax.vmap(lambda r, e: rig.observe((r, e))))
        self.pixels = (
            jax.jit(jax.vmap(lambda cam, r, e: marker_pixels(*markers, cam, r, e), (None, 0, 0)))
            if markers
            else None
        )

    # ------------------------------------------------------------------ model pieces
    def params(self, a, theta):
        values = dict(a["values"])
        for i, name in enumerate(self.names):
            values[name] = theta[i] * a["scale"][i]
        return self.rig.make_params(values)

    def _parts(self, delta):
        """(Δr [nb, 3], ψ [nb, 3], Δv [nb, 6]) of a step's tangent δ [d]."""
        nb = self.nb
        c = delta[: 6 * nb].reshape(nb, 6)
        return c[:, :3], c[:, 3:], delta[6 * nb :].reshape(nb, 6)

    def _joined(self, jr, je, jv):
        """Jacobian [.., m, d] from its columns for Δr, ψ [.., m, nb, 3] and Δv [.., m, nb, 6]
        (the inverse of :meth:`_parts` on the last axes)."""
        lead = jr.shape[:-2]
        config = jnp.concatenate([jr, je], axis=-1).reshape(*lead, 6 * self.nb)
        return jnp.concatenate([config, jv.reshape(*lead, 6 * self.nb)], axis=-1)

    def _moved(self, r, e, v, dr, de, dv):
        return boxplus_parts((r, e), dr, de), v + dv

    def _dyn(self, a, theta, rk, ek, vk, rk1, ek1, vk1, uk, dk, dk1):
        return self._dyn_parts(a, theta, rk, ek, vk, rk1, ek1, vk1, uk, *self._parts(dk),
                               *self._parts(dk1))  # fmt: skip

    def _dyn_parts(self, a, theta, rk, ek, vk, rk1, ek1, vk1, uk, drk, dek, dvk, drk1, dek1, dvk1):
        p = self.params(a, theta)
        q, v = self._moved(rk, ek, vk, drk, dek, dvk)
        q1, v1 = self._moved(rk1, ek1, vk1, drk1, dek1, dvk1)
        dp_u, dp_q = impulse_residual(self.rig.system, p, q, v, q1, v1, uk, self.h)
        return jnp.sqrt(a["kappa"]) * jnp.concatenate([dp_u, dp_q])

    def _obs(self, a, r, e, v, y, w, uv, mw, dk):
        return self._obs_parts(a, r, e, v, y, w, uv, mw, *self._parts(dk))

    def _obs_parts(self, a, r, e, v, y, w, uv, mw, dr, de, dv):
        """Encoder rows √w wrap(h(q) − y) (rad) then marker rows √mw (π(q) − uv) (px)."""
        q, _ = self._moved(r, e, v, dr, de, dv)
        enc = jnp.sqrt(w) * _wrap(self.rig.observe(q) - y)
        if not self.markers:
            return enc
        px = marker_pixels(*self.markers, a["cam"], *q)
        return jnp.concatenate([enc, (jnp.sqrt(mw)[:, None] * (px - uv)).reshape(-1)])

    def _init(self, a, theta, r, e, v, d0):
        """√κ M_Σ [h⁻¹ Δq_0; Δv_0] with Δq_0 = G⁺ g(q_0), Δv_0 = G⁺ G v_0 (3.16–3.17; the
        printed (GᵀG)⁻¹Gᵀ is singular for a hinge, so we use the minimum-norm G⁺)."""
        h = self.h
        p = self.params(a, theta)
        q, v = self._moved(r, e, v, *self._parts(d0))
        system = self.rig.system
        g = jnp.concatenate([hinge_violation(q, hg) for hg in system.hinges])
        G = jnp.concatenate(
            [
                constraint_jacobian(lambda qq, hg=hg: hinge_violation(qq, hg), q, self.nb)
                for hg in system.hinges
            ]
        )
        sig = []
        for hp in p.hinges:
            gamma = 1.0 / (1.0 + 4.0 * hp.tau / h)  # (2.9)
            eps = jnp.concatenate([jnp.full(3, hp.eps_lin), jnp.full(2, hp.eps_rot)])
            sig.append(4.0 / h**2 * eps * gamma)  # (2.10)
        sig = jnp.concatenate(sig)
        Gp = G.T @ jnp.linalg.solve(G @ G.T, jnp.eye(G.shape[0]))
        dq0 = Gp @ g
        dv0 = Gp @ (G @ v.reshape(-1))
        M = jax.scipy.linalg.block_diag(*mass_matrix_blocks(p, q[1]))
        Msig = M + G.T @ (G / sig[:, None])
        return jnp.sqrt(a["kappa"]) * jnp.concatenate([Msig @ dq0 / h, Msig @ dv0])

    def _obs_data(self, a, n):
        if self.markers:
            return a["uv"], a["mw"]
        return jnp.zeros((n, 0, 2)), jnp.zeros((n, 0))

    # ------------------------------------------------------------------ residual vector
    def _residuals(self, X, theta, a):
        r, e, v = X
        z = jnp.zeros(self.d)
        dyn = jax.vmap(lambda *b: self._dyn(a, theta, *b, z, z))(
            r[:-1], e[:-1], v[:-1], r[1:], e[1:], v[1:], a["u"]
        )
        uv, mw = self._obs_data(a, r.shape[0])
        obs = jax.vmap(lambda *b: self._obs(a, *b, z))(r, e, v, a["y"], a["w"], uv, mw)
        init = self._init(a, theta, r[0], e[0], v[0], z)
        return dyn, obs, init

    def _cost_fn(self, X, theta, a):
        dyn, obs, init = self._residuals(X, theta, a)
        return jnp.sum(dyn**2) + jnp.sum(obs**2) + jnp.sum(init**2)

    def _linearize(self, X, theta, a, with_theta: bool = True):
        """Values and Jacobian blocks of every residual block at (X, θ). ``with_theta=False``
        leaves out the θ columns (dyn_C, init_C get zero width): the states-only warm-up and
        cross-validation hold θ, and its p tangents are a fifth of the dynamics block's."""
        r, e, v = X
        z = jnp.zeros(self.d)

        nb = self.nb
        zr, zv = jnp.zeros((nb, 3)), jnp.zeros((nb, 6))

        def dyn_block(rk, ek, vk, rk1, ek1, vk1, uk):
            if self.tangents == "part":
                # (θ, Δr_k, ψ_k, Δv_k, Δr_{k+1}, ψ_{k+1}, Δv_{k+1}) one by one: e.g. Δr reaches
                # only the hinge violation and θ only the mass blocks and hinge coefficients.
                def fp(*parts):
                    return self._dyn_parts(a, *parts[:1], rk, ek, vk, rk1, ek1, vk1, uk,
                                           *parts[1:])  # fmt: skip

                primal = (theta, zr, zr, zv, zr, zr, zv)
                val, jacs = _jacobians_by_part(fp, primal, range(0 if with_theta else 1, 7))
                jC = jacs.pop(0) if with_theta else jnp.zeros((val.shape[0], 0))
                return val, self._joined(*jacs[:3]), self._joined(*jacs[3:]), jC

            def f(dk, dk1, th):
                return self._dyn(a, th, rk, ek, vk, rk1, ek1, vk1, uk, dk, dk1)

            if self.tangents == "one":  # all 2d (+ p) tangents through it all
                if with_theta:
                    jac, val = jax.jacfwd(_with_value(f), argnums=(0, 1, 2), has_aux=True)(
                        z, z, theta
                    )
                    return (val, *jac)
                (jA, jB), val = jax.jacfwd(
                    _with_value(lambda dk, dk1: f(dk, dk1, theta)), argnums=(0, 1), has_aux=True
                )(z, z)
                return val, jA, jB, jnp.zeros((val.shape[0], 0))
            # "step": δ_{k+1} enters only through q_{k+1} (h⁻¹ q_{k+1} ⊟ q_k) and v_{k+1}
            # (M v_{k+1} and the impulses, piecewise linear in v_{k+1}); mass blocks, hinge rows
            # and forces depend on (q_k, v_k, θ) only, so a jacfwd of its own pushes δ_{k+1}'s d
            # tangents through the cheap rest.
            if with_theta:
                (jA, jC), val = jax.jacfwd(
                    _with_value(lambda dk, th: f(dk, z, th)), argnums=(0, 1), has_aux=True
                )(z, theta)
            else:
                jA, val = jax.jacfwd(_with_value(lambda dk: f(dk, z, theta)), has_aux=True)(z)
                jC = jnp.zeros((val.shape[0], 0))
            jB = jax.jacfwd(lambda dk1: f(z, dk1, theta))(z)
            return val, jA, jB, jC

        dr, dA, dB, dC = _chunked_vmap(dyn_block, self.chunk)(
            r[:-1], e[:-1], v[:-1], r[1:], e[1:], v[1:], a["u"]
        )

        def obs_block(rk, ek, vk, yk, wk, uvk, mwk):
            if self.tangents == "part":  # encoders read ψ only: Δr, Δv tangents stay zeros

                def fp(*parts):
                    return self._obs_parts(a, rk, ek, vk, yk, wk, uvk, mwk, *parts)

                val, jacs = _jacobians_by_part(fp, (zr, zr, zv), range(3))
                return val, self._joined(*jacs)

            def f(dk):
                return self._obs(a, rk, ek, vk, yk, wk, uvk, mwk, dk)

            jac, val = jax.jacfwd(_with_value(f), has_aux=True)(z)
            return val, jac

        uv, mw = self._obs_data(a, r.shape[0])
        orr, oA = _chunked_vmap(obs_block, self.chunk)(r, e, v, a["y"], a["w"], uv, mw)

        def f0(d0, th):
            return self._init(a, th, r[0], e[0], v[0], d0)

        if with_theta:
            (iA, iC), ir = jax.jacfwd(_with_value(f0), argnums=(0, 1), has_aux=True)(z, theta)
        else:
            iA, ir = jax.jacfwd(_with_value(lambda d0: f0(d0, theta)), has_aux=True)(z)
            iC = jnp.zeros((ir.shape[0], 0))
        return dr, dA, dB, dC, orr, oA, ir, iA, iC

    def _retract_fn(self, X, dX):
        (r, e), v = jax.vmap(lambda rk, ek, vk, dk: self._moved(rk, ek, vk, *self._parts(dk)))(
            *X, dX
        )
        return r, e, v


_MODELS: dict[tuple, _Model] = {}


def _model(rig, names, h, markers) -> _Model:
    """The compiled model of this structure (shared by every problem that has it)."""
    key = (rig.system, rig.make_params, rig.state_from_angles, tuple(names), float(h), markers)
    if key not in _MODELS:
        _MODELS[key] = _Model(rig, tuple(names), float(h), markers)
    return _MODELS[key]


@dataclass
class HingedProblem:
    """Joint estimation problem of a ``HingedRig`` on one trajectory.

    ``names`` are the free parameters; χ = ``scale`` · θ (θ is what LM sees, so that the
    damping αI treats parameters of very different magnitude alike); ``lower``/``upper`` are
    the box on θ. ``y[n, k]`` angles (rad), ``obs_weight[n, k]`` (0 where missing), ``u[n−1]``.

    ``markers`` (optional) adds camera-marker pixel rows to each observation block. R⁻¹ = I
    of Section 4.4 stands for an observation noise of σ_ref = ``reference_noise`` (rad, the
    encoders' noise): marker rows are weighted by σ_ref² · ``markers.weight`` (= σ_ref²/σ_px²)
    so that encoders and camera enter in proportion to their information (Appendix E).

    ``consistency`` (optional): the bodies' pseudo-inertia LMI in θ, imposed by LM next to the
    box (``estimation.consistency``).
    """

    rig: object
    names: tuple[str, ...]
    scale: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    y: np.ndarray
    obs_weight: np.ndarray
    u: np.ndarray
    h: float
    kappa: float
    markers: MarkerObservations | None = None
    reference_noise: float = 1e-3
    consistency: InertiaLMI | None = None
    _args: dict = field(init=False, repr=False)

    def __post_init__(self):
        self.nb = self.rig.system.n_bodies
        self.d = 12 * self.nb
        mk = self.markers
        if mk is not None and mk.uv.shape[0] != np.shape(self.y)[0]:
            raise ValueError(
                f"markers cover {mk.uv.shape[0]} grid steps, the encoders {np.shape(self.y)[0]}"
            )
        self.model = _model(self.rig, self.names, self.h, (mk.model, mk.body) if mk else None)
        self._args = {
            "values": {k: jnp.asarray(float(v)) for k, v in self.rig.values.items()},
            "scale": jnp.asarray(np.asarray(self.scale, float)),
            "kappa": jnp.asarray(float(self.kappa)),
            "y": jnp.asarray(self.y, float),
            "w": jnp.asarray(self.obs_weight, float),
            "u": jnp.asarray(self.u, float),
        }
        if mk is not None:
            self._args.update(
                cam=mk.arrays(),
                uv=jnp.asarray(mk.uv),
                mw=jnp.asarray(mk.weight * self.reference_noise**2),
            )

    # ------------------------------------------------------------------ ArrowProblem API
    def linearize(self, X, theta) -> Linearization:
        return self._linearization(self.model.lin, X, theta)

    def linearize_states(self, X, theta) -> Linearization:
        """The linearization with θ held: no θ columns (dyn_C and init_C of zero width)."""
        return self._linearization(self.model.lin_states, X, theta)

    def _linearization(self, lin, X, theta) -> Linearization:
        out = lin(X, jnp.asarray(theta, float), self._args)
        present = np.asarray(self.obs_weight) > 0
        if self.markers is not None:
            mp = np.repeat(self.markers.weight > 0, 2, axis=1)
            present = np.concatenate([present, mp], axis=1)
        return Linearization(*out, obs_present=present)

    def cost(self, X, theta) -> float:
        return float(self.model.cost(X, jnp.asarray(theta, float), self._args))

    def retract(self, X, dX):
        return self.model.retract(X, jnp.asarray(dX))

    def residuals(self, X, theta):
        """Weighted residual blocks (dyn, obs, init) as NumPy arrays."""
        out = self.model.residuals(X, jnp.asarray(theta, float), self._args)
        return tuple(np.asarray(a) for a in out)

    def observed_angles(self, X) -> np.ndarray:
        """Joint angles [n, k] (rad) of the states X."""
        return np.asarray(self.model.observe(X[0], X[1]))

    def marker_pixels(self, X) -> np.ndarray | None:
        """Predicted marker pixels [n, m, 2] of the states X (None without markers)."""
        if self.markers is None:
            return None
        return np.asarray(self.model.pixels(self._args["cam"], X[0], X[1]))
