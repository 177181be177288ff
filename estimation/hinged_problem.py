"""Residuals and compressed forward-mode Jacobians of joint state and parameter estimation
for hinged rigs (Marklund et al. (3.6–3.8), (3.15–3.20), Appendix B).

Weighted residual blocks (Ω⁻¹ = κI, R⁻¹ = diag(per-channel weight), Section 4.4):

- dynamics block k = 0..n−2: √κ [Δp_u; Δp_q] of step k → k+1 (3.7–3.8), N s;
- observation block k = 0..n−1: √w (h(q_k) − y_k) wrapped to (−π, π] (3.6), rad; missing
  samples have weight 0;
- initial-state block: √κ M_Σ [h⁻¹Δq_0; Δv_0] (3.16–3.17, (3.13–3.14)).

Jacobians (Appendix B): each block is a function of the local tangent increments δ_k, δ_{k+1}
(x ⊞ δ at δ = 0, the D.2 JVP makes this exact for rotations) and θ. ``jax.jacfwd`` of one
block pushes 2d + p tangent directions through it and ``vmap`` runs all blocks at once — the
compressed E-matrix of (B.1–B.3): the number of JVPs is 2d + p whatever n is.

State tangent per step (d = 12 nb): [Δr, ψ per body (6 nb); Δv (6 nb)].
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

import dynamics  # noqa: F401  (float64)
from dynamics.multibody import boxplus_config, constraint_jacobian, hinge_violation
from dynamics.spook import impulse_residual, mass_matrix_blocks
from estimation.lm import Linearization


def _wrap(a):
    return jnp.arctan2(jnp.sin(a), jnp.cos(a))


@dataclass
class HingedProblem:
    """Joint estimation problem of a ``HingedRig`` on one trajectory.

    ``names`` are the free parameters; χ = ``scale`` · θ (θ is what LM sees, so that the
    damping αI treats parameters of very different magnitude alike); ``lower``/``upper`` are
    the box on θ. ``y[n, k]`` angles (rad), ``obs_weight[n, k]`` (0 where missing), ``u[n−1]``.
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

    def __post_init__(self):
        self.nb = self.rig.system.n_bodies
        self.d = 12 * self.nb
        self._lin = jax.jit(self._linearize)
        self._cost = jax.jit(self._cost_fn)
        self._retract = jax.jit(self._retract_fn)

    # ------------------------------------------------------------------ model pieces
    def params(self, theta):
        values = {k: jnp.asarray(v) for k, v in self.rig.values.items()}
        for i, name in enumerate(self.names):
            values[name] = theta[i] * self.scale[i]
        return self.rig.make_params(values)

    def _moved(self, r, e, v, delta):
        nb = self.nb
        q = boxplus_config((r, e), delta[: 6 * nb].reshape(nb, 6))
        return q, v + delta[6 * nb :].reshape(nb, 6)

    def _dyn(self, theta, rk, ek, vk, rk1, ek1, vk1, uk, dk, dk1):
        p = self.params(theta)
        q, v = self._moved(rk, ek, vk, dk)
        q1, v1 = self._moved(rk1, ek1, vk1, dk1)
        dp_u, dp_q = impulse_residual(self.rig.system, p, q, v, q1, v1, uk, self.h)
        return jnp.sqrt(self.kappa) * jnp.concatenate([dp_u, dp_q])

    def _obs(self, r, e, v, y, w, dk):
        q, _ = self._moved(r, e, v, dk)
        return jnp.sqrt(w) * _wrap(self.rig.observe(q) - y)

    def _init(self, theta, r, e, v, d0):
        """√κ M_Σ [h⁻¹ Δq_0; Δv_0] with Δq_0 = G⁺ g(q_0), Δv_0 = G⁺ G v_0 (3.16–3.17; the
        printed (GᵀG)⁻¹Gᵀ is singular for a hinge, so we use the minimum-norm G⁺)."""
        p = self.params(theta)
        q, v = self._moved(r, e, v, d0)
        system = self.rig.system
        n = system.n_dof
        g = jnp.concatenate([hinge_violation(q, hg) for hg in system.hinges])
        G = jnp.concatenate(
            [
                constraint_jacobian(lambda qq, hg=hg: hinge_violation(qq, hg), q, self.nb)
                for hg in system.hinges
            ]
        )
        sig = []
        for hp in p.hinges:
            gamma = 1.0 / (1.0 + 4.0 * hp.tau / self.h)  # (2.9)
            eps = jnp.concatenate([jnp.full(3, hp.eps_lin), jnp.full(2, hp.eps_rot)])
            sig.append(4.0 / self.h**2 * eps * gamma)  # (2.10)
        sig = jnp.concatenate(sig)
        Gp = G.T @ jnp.linalg.solve(G @ G.T, jnp.eye(G.shape[0]))
        dq0 = Gp @ g
        dv0 = Gp @ (G @ v.reshape(-1))
        M = jax.scipy.linalg.block_diag(*mass_matrix_blocks(p, q[1]))
        Msig = M + G.T @ (G / sig[:, None])
        del n
        return jnp.sqrt(self.kappa) * jnp.concatenate([Msig @ dq0 / self.h, Msig @ dv0])

    # ------------------------------------------------------------------ residual vector
    def _residuals(self, X, theta, y, w, u):
        r, e, v = X
        nd = self.d
        z = jnp.zeros(nd)
        dyn = jax.vmap(lambda *a: self._dyn(theta, *a, z, z))(
            r[:-1], e[:-1], v[:-1], r[1:], e[1:], v[1:], u
        )
        obs = jax.vmap(lambda *a: self._obs(*a, z))(r, e, v, y, w)
        init = self._init(theta, r[0], e[0], v[0], z)
        return dyn, obs, init

    def _cost_fn(self, X, theta, y, w, u):
        dyn, obs, init = self._residuals(X, theta, y, w, u)
        return jnp.sum(dyn**2) + jnp.sum(obs**2) + jnp.sum(init**2)

    def _linearize(self, X, theta, y, w, u):
        r, e, v = X
        z = jnp.zeros(self.d)

        def dyn_block(rk, ek, vk, rk1, ek1, vk1, uk):
            f = lambda dk, dk1, th: self._dyn(th, rk, ek, vk, rk1, ek1, vk1, uk, dk, dk1)  # noqa: E731
            jac = jax.jacfwd(f, argnums=(0, 1, 2))(z, z, theta)
            return (f(z, z, theta), *jac)

        dr, dA, dB, dC = jax.vmap(dyn_block)(r[:-1], e[:-1], v[:-1], r[1:], e[1:], v[1:], u)

        def obs_block(rk, ek, vk, yk, wk):
            f = lambda dk: self._obs(rk, ek, vk, yk, wk, dk)  # noqa: E731
            return f(z), jax.jacfwd(f)(z)

        orr, oA = jax.vmap(obs_block)(r, e, v, y, w)
        f0 = lambda d0, th: self._init(th, r[0], e[0], v[0], d0)  # noqa: E731
        ir = f0(z, theta)
        iA, iC = jax.jacfwd(f0, argnums=(0, 1))(z, theta)
        return dr, dA, dB, dC, orr, oA, ir, iA, iC

    def _retract_fn(self, X, dX):
        r, e, v = X
        nb = self.nb
        q = jax.vmap(lambda rk, ek, dk: boxplus_config((rk, ek), dk[: 6 * nb].reshape(nb, 6)))(
            r, e, dX
        )
        return q[0], q[1], v + dX[:, 6 * nb :].reshape(-1, nb, 6)

    # ------------------------------------------------------------------ ArrowProblem API
    def _data(self):
        return jnp.asarray(self.y), jnp.asarray(self.obs_weight), jnp.asarray(self.u)

    def linearize(self, X, theta) -> Linearization:
        out = self._lin(X, jnp.asarray(theta), *self._data())
        return Linearization(*(np.asarray(a) for a in out))

    def cost(self, X, theta) -> float:
        return float(self._cost(X, jnp.asarray(theta), *self._data()))

    def retract(self, X, dX):
        return self._retract(X, jnp.asarray(dX))

    def residuals(self, X, theta):
        """Unweighted-by-nothing weighted blocks (dyn, obs, init) as NumPy arrays."""
        return tuple(np.asarray(a) for a in self._residuals(X, jnp.asarray(theta), *self._data()))
