"""One linearization of the LM (Jacobian blocks, Appendix B) plus its normal equations: the
blocks computed in chunks of ``JACOBIAN_CHUNK`` steps vs one ``vmap`` over all steps, side by
side in one process on the 13-parameter Furuta swing-up (n = 2001 steps, 60 tangents).

Prints the median and minimum wall time of ``--calls`` calls each (interleaved), and the page
faults and system time per call: with one vmap XLA allocates temporaries of n × 60 tangents
of every intermediate, fresh pages from the OS on each call.

``--tangents`` compares instead, at each ``--chunks`` size, how the Jacobian blocks push
their tangent directions (``_Model(tangents=...)``): ``one`` jacfwd over (δ_k, δ_{k+1}, θ)
(60 tangents through the whole residual); ``step``, a jacfwd over (δ_k, θ) and one over
δ_{k+1} alone, whose 24 tangents skip the mass blocks and hinge rows; ``part`` (the default),
one jacfwd per part (θ, Δr, ψ, Δv of each state), so that each part's tangents only pass
through what depends on it.

    .venv/bin/python benchmarks/bench_linearization.py [--calls 15] [--chunks 16 64 256]
    .venv/bin/python benchmarks/bench_linearization.py --tangents [--calls 21]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp

sys.path.insert(0, str(Path(__file__).parent))
from bench_lm_vs_scipy import furuta13_problem  # noqa: E402

from physid.estimation.hinged_problem import JACOBIAN_CHUNK, _Model  # noqa: E402
from physid.estimation.lm import Linearization, normal_equations  # noqa: E402


def one_call(model, prob, X, theta):
    """(wall s, page faults, system s) of one linearization + normal equations."""
    r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    out = model.lin(X, theta, prob._args)
    normal_equations(Linearization(*out, obs_present=None))
    wall, r1 = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_SELF)
    return wall, r1.ru_minflt - r0.ru_minflt, r1.ru_stime - r0.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=15)
    ap.add_argument("--chunks", type=int, nargs="*", default=[JACOBIAN_CHUNK])
    ap.add_argument(
        "--tangents", action="store_true", help="jacfwd over all tangents, per step, per part"
    )
    args = ap.parse_args()
    prob, X0, theta0, _ = furuta13_problem()
    theta = jnp.asarray(theta0)
    m = prob.model
    if args.tangents:  # (chunk, tangents) per variant; the first is the baseline
        variants = {
            f"jacfwd per {s}, chunks of {c}": (c, s)
            for c in args.chunks
            for s in ("one", "step", "part")
        }
    else:
        variants = {
            "vmap (all steps)": (None, "part"),
            **{f"chunks of {c}": (c, "part") for c in args.chunks},
        }
    models = {
        k: _Model(m.rig, m.names, m.h, m.markers, chunk=c, tangents=s)
        for k, (c, s) in variants.items()
    }
    for model in models.values():  # compile
        jax.block_until_ready(model.lin(X0, theta, prob._args))
    runs = {k: [] for k in models}
    for _ in range(args.calls):
        for k, model in models.items():
            runs[k].append(one_call(model, prob, X0, theta))
    print(
        f"furuta13, n = {prob.y.shape[0]} steps; {args.calls} calls each, interleaved"
        f" (xN: speed-up over {next(iter(runs))})"
    )
    base = statistics.median(r[0] for r in next(iter(runs.values())))
    width = max(map(len, runs))
    for k, r in runs.items():
        wall = statistics.median(x[0] for x in r)
        faults = statistics.median(x[1] for x in r)
        sys_s = statistics.median(x[2] for x in r)
        print(
            f"  {k:{width}s} median {wall * 1e3:7.1f} ms  min {min(x[0] for x in r) * 1e3:7.1f} ms"
            f"  faults/call {faults:8.0f}  sys/call {sys_s * 1e3:6.1f} ms  x{base / wall:.2f}"
        )


if __name__ == "__main__":
    main()
