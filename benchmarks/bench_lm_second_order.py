"""Where the 13-parameter Furuta fit spends its iterations, and whether second-order
information would shorten it (issue 3's < 2 s target).

Two experiments on the problem of ``bench_lm_vs_scipy.py --problem furuta13`` (n = 2001):

1. **Start at the answer.** LM from the spec's θ_0 against LM from the θ it converges to
   (states from the same Section 4.4 initialization). If a better parameter start (e.g. a
   linear least-squares guess of the inertias) could save iterations, the second run is the
   bound on what it saves.
2. **Exact Newton.** Gauss–Newton drops Σ_i r_i ∇²r_i from the Hessian of ‖r‖². With the
   dynamics weighted by √κ that term is κ Σ c_i ∇²c_i — the constraint curvature times the
   impulse "multipliers" κ c_i — which does not vanish as the cost falls, the classic cause of
   linear convergence of GN on penalty problems. Here it is added exactly: per residual block
   the Hessian of w·r_k(δ_k, δ_{k+1}, θ) (w = r_k held) by ``jax.hessian``, assembled into the
   same arrow blocks as JᵀJ; LM then damps JᵀJ + S (raising α until the banded Cholesky and
   the Schur complement are positive definite), ρ uses the quadratic model with S, and the
   geodesic acceleration is off (Newton's model already has the curvature).

The exact-Newton run swaps four functions of ``estimation.lm`` for the duration of the run
(:func:`_newton_lm`); the production solver is untouched.

    .venv/bin/python benchmarks/bench_lm_second_order.py [--newton-iter 40]
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from dataclasses import replace
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

import physid.estimation.lm as lm  # noqa: E402
from physid.estimation.hinged_problem import _chunked_vmap  # noqa: E402


def _curvature_fn(problem, with_theta: bool):
    """Jitted (X, θ) ↦ per-block Hessians of w·r (w = the block's residual, held): dynamics
    [n−1, 2d(+p), 2d(+p)] over (δ_k, δ_{k+1}[, θ]), observations [n, d, d], initial state
    [d(+p), d(+p)]."""
    m, a, d = problem.model, problem._args, problem.model.d
    z = jnp.zeros(d)

    def dyn(theta, *b):
        w = jax.lax.stop_gradient(m._dyn(a, theta, *b, z, z))
        if with_theta:
            f = lambda s: w @ m._dyn(a, s[2 * d :], *b, s[:d], s[d : 2 * d])  # noqa: E731
            return jax.hessian(f)(jnp.concatenate([z, z, theta]))
        f = lambda s: w @ m._dyn(a, theta, *b, s[:d], s[d:])  # noqa: E731
        return jax.hessian(f)(jnp.concatenate([z, z]))

    def obs(*b):
        w = jax.lax.stop_gradient(m._obs(a, *b, z))
        return jax.hessian(lambda s: w @ m._obs(a, *b, s))(z)

    def init(theta, r0, e0, v0):
        w = jax.lax.stop_gradient(m._init(a, theta, r0, e0, v0, z))
        if with_theta:
            f = lambda s: w @ m._init(a, s[d:], r0, e0, v0, s[:d])  # noqa: E731
            return jax.hessian(f)(jnp.concatenate([z, theta]))
        return jax.hessian(lambda s: w @ m._init(a, theta, r0, e0, v0, s))(z)

    @jax.jit
    def curvature(X, theta):
        r, e, v = X
        Hd = _chunked_vmap(lambda *b: dyn(theta, *b))(
            r[:-1], e[:-1], v[:-1], r[1:], e[1:], v[1:], a["u"]
        )
        uv, mw = m._obs_data(a, r.shape[0])
        Ho = _chunked_vmap(obs)(r, e, v, a["y"], a["w"], uv, mw)
        return Hd, Ho, init(theta, r[0], e[0], v[0])

    return curvature


def _arrow(blocks, d: int, p: int):
    """Per-block Hessians → arrow blocks (D[n, d, d], U[n−1, d, d], F[n, d, p], P[p, p]),
    placed as normal_equations places JᵀJ."""
    Hd, Ho, Hi = (np.asarray(b) for b in blocks)
    n = Ho.shape[0]
    D = Ho.copy()
    D[:-1] += Hd[:, :d, :d]
    D[1:] += Hd[:, d : 2 * d, d : 2 * d]
    D[0] += Hi[:d, :d]
    F, P = np.zeros((n, d, p)), np.zeros((p, p))
    if p:
        F[:-1] += Hd[:, :d, 2 * d :]
        F[1:] += Hd[:, d : 2 * d, 2 * d :]
        F[0] += Hi[:d, d:]
        P = Hd[:, 2 * d :, 2 * d :].sum(0) + Hi[d:, d:]
    return D, Hd[:, :d, d : 2 * d].copy(), F, P


class _WithCurvature:
    """The problem whose linearizations also leave their curvature blocks in ``store``."""

    def __init__(self, problem, store: dict, timings: list):
        self.problem, self.store, self.timings = problem, store, timings
        self.lower, self.upper = problem.lower, problem.upper
        self.consistency = getattr(problem, "consistency", None)
        self.curv = {True: _curvature_fn(problem, True), False: _curvature_fn(problem, False)}

    def _keep(self, lin, X, theta, with_theta):
        t = time.perf_counter()
        blocks = self.curv[with_theta](X, jnp.asarray(theta, float))
        self.store[id(lin.dyn_r)] = _arrow(blocks, self.problem.d, len(theta) * with_theta)
        self.timings.append(time.perf_counter() - t)
        return lin

    def linearize(self, X, theta):
        return self._keep(self.problem.linearize(X, theta), X, theta, True)

    def linearize_states(self, X, theta):
        return self._keep(self.problem.linearize_states(X, theta), X, theta, False)

    def cost(self, X, theta):
        return self.problem.cost(X, theta)

    def retract(self, X, dX):
        return self.problem.retract(X, dX)

    def residuals(self, X, theta):
        return self.problem.residuals(X, theta)


@contextlib.contextmanager
def _newton_lm(store: dict, raised: list):
    """estimation.lm with JᵀJ + S in the normal equations and the model decrease, and α
    raised (×4) until JᵀJ + S + αI is positive definite; restored on exit."""
    saved = (lm.normal_equations, lm.model_decrease, lm.factor_damped, lm._Scaled)
    normal_equations, model_decrease, factor_damped, scaled_cls = saved
    sc = [np.ones(0)]

    class Scaled(scaled_cls):
        def __init__(self, problem, s):
            super().__init__(problem, s)
            sc[0] = s

    def ne(lin, sx=None, band=False):
        out = normal_equations(lin, sx, False)
        D, U, F, P = store[id(lin.dyn_r)]
        p = out.P.shape[0]
        if sx is not None:  # the loop's coordinates: ξ = x / sx, φ = θ / sc
            s, ss = (sc[0] if p else np.ones(0)), np.outer(sx, sx)
            D, U, F, P = D * ss, U * ss, F * sx[:, None] * s, P * np.outer(s, s)
        D, U = out.D + D, out.U + U
        return out._replace(
            D=D, U=U, F=out.F + F, P=out.P + P, band=lm.banded_upper(D, U) if band else None
        )

    def decrease(lin, dx, dtheta):
        D, U, F, P = store[id(lin.dyn_r)]
        t = dtheta * sc[0] if len(dtheta) else dtheta
        quad = np.einsum("ki,kij,kj->", dx, D, dx)
        quad += 2 * np.einsum("ki,kij,kj->", dx[:-1], U, dx[1:])
        if len(t):
            quad += 2 * np.einsum("ki,kip,p->", dx, F, t) + t @ P @ t
        return model_decrease(lin, dx, dtheta) - quad

    def factor(ne_, alpha):
        for _ in range(60):
            try:
                sys_ = factor_damped(ne_, alpha)
                if not sys_.S.size or np.linalg.eigvalsh(sys_.S)[0] > 0:
                    return sys_
            except np.linalg.LinAlgError:
                pass
            alpha *= 4.0
            raised.append(alpha)
        raise np.linalg.LinAlgError("JᵀJ + S + αI not positive definite for any α tried")

    lm.normal_equations, lm.model_decrease, lm.factor_damped, lm._Scaled = (
        ne,
        decrease,
        factor,
        Scaled,
    )
    try:
        yield
    finally:
        lm.normal_equations, lm.model_decrease, lm.factor_damped, lm._Scaled = saved


def _run(problem, X0, theta0, settings):
    costs = []
    t = time.perf_counter()
    res = lm.levenberg_marquardt(problem, X0, theta0, settings, lambda i, c, a, th: costs.append(c))
    return res, time.perf_counter() - t, costs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--newton-iter", type=int, default=40, help="iteration limit (exact Newton)")
    args = ap.parse_args()

    from bench_lm_vs_scipy import furuta13_problem

    from physid.rigs.models.identify_hinged import enable_compilation_cache

    enable_compilation_cache()
    prob, X0, theta0, settings = furuta13_problem()
    lm.levenberg_marquardt(prob, X0, theta0, replace(settings, max_iter=2))  # compile

    def report(label, res, seconds, costs):
        print(
            f"{label:<28} warm-up {res.warmup_iterations:2d} + joint {res.iterations:2d} its"
            f"  cost {res.cost:.10e}  {seconds:6.2f} s  ({res.reason})"
        )
        print(f"{'':<28} costs: " + " ".join(f"{c:.3g}" for c in costs))

    gn, t_gn, c_gn = _run(prob, X0, theta0, settings)
    report("Gauss-Newton LM from θ0", gn, t_gn, c_gn)
    star, t_star, c_star = _run(prob, X0, gn.theta, settings)
    report("Gauss-Newton LM from θ*", star, t_star, c_star)

    store, timings, raised = {}, [], []
    newton = _WithCurvature(prob, store, timings)
    with _newton_lm(store, raised):
        s = replace(settings, geodesic_ratio=None, max_iter=args.newton_iter)
        newton.linearize(X0, theta0)  # compile the curvature (both widths) outside the timing
        newton.linearize_states(X0, theta0)
        timings.clear()
        res, t_newton, c_newton = _run(newton, X0, theta0, s)
    report("exact Newton LM from θ0", res, t_newton, c_newton)
    t_lin = []
    for _ in range(5):
        t = time.perf_counter()
        jax.block_until_ready(prob.model.lin(X0, jnp.asarray(theta0), prob._args))
        t_lin.append(time.perf_counter() - t)
    print(
        f"curvature blocks: median {1e3 * np.median(timings):.0f} ms per linearization "
        f"(the Jacobian blocks: {1e3 * np.median(t_lin):.0f} ms); α raised to make "
        f"JᵀJ + S + αI positive definite {len(raised)} times, up to {max(raised, default=0):.2g}"
    )


if __name__ == "__main__":
    main()
