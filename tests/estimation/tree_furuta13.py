"""The 13-parameter Furuta of Marklund et al., Section 4.6, on data the tree estimator's model
describes (issue 22's "13-parameter Furuta on a simulated swing-up"): test data for
``test_tree_furuta13.py`` and ``benchmarks/bench_tree_lm.py --problem furuta13-tree``.

The simulator is the integrator whose equation the tree estimator's dynamics residual is
(``dynamics.variational_friction.rollout``: the midpoint variational step of the rigid-joint
Furuta with exact dry friction), run at h/``SUBSTEPS`` with the input held over each 1 ms
sample. MuJoCo cannot be the truth here: the tree maps each joint's μ onto a Coulomb torque
at the static load (``furuta.tree_rig``), which a MuJoCo ``frictionloss`` can express, but
the motor gain K on a voltage and the tilt of gravity as two free parameters it has only
through a model rewritten per value; the point of this case is that every term of the
estimator's model is in the data and nothing else is (SPOOK's data, ``bench_lm_vs_scipy``,
add compliant hinges and load-dependent friction, which biased b1 by +28 % and b2 by +105 %).
Sub-stepping makes the remaining difference between data and model the discretization of
h = 1e-3 s, a shadow bias of O(h²) that the acceptance's 5 % has to hold over.
"""

from __future__ import annotations

from dataclasses import replace

import jax
import jax.numpy as jnp
import numpy as np

import physid.dynamics  # noqa: F401  (float64)
from physid.dynamics import newton_euler
from physid.dynamics import variational_friction as vf
from physid.rigs.models import furuta
from physid.rigs.models.hinged import simulation_table, truth_values
from physid.rigs.pipeline.sample import SWING_UP, drive_voltage, fixed_truth
from physid.rigs.pipeline.synthetic import (
    FURUTA_SECTION_4_6,
    FURUTA_SECTION_4_6_TRUTH,
    Recording,
    quantizer,
)
from physid.spec import load_spec, with_overrides, with_parameters
from physid.streams import Stream

RATE = 1000.0  # Hz, the encoder frames and the estimator's grid (h = 1e-3 s)
SUBSTEPS = 10  # simulation steps per frame: h_sim = 1e-4 s
COUNTS = 4096  # counts per revolution of both encoders, as the SPOOK recording


def truth_and_spec():
    """(truth {name: SI value} of the tree rig, the spec with every fixed value at its truth,
    the 12 unknowns of ``FURUTA_SECTION_4_6`` and ``estimator = "tree"``)."""
    spec = load_spec("furuta")
    spook = furuta.build(spec)
    truth = truth_values(spec, spook.values, simulation_table(spec))
    truth.update(FURUTA_SECTION_4_6_TRUTH)
    fitted = with_parameters(
        with_overrides(spec, fixed_truth(spec, spook, truth)), FURUTA_SECTION_4_6
    )
    # The encoders' σ_y is their quantization (one count/√12, 4.4e-4 rad), what the data
    # carry; the spec's 1e-3 rad is the SPOOK example's choice.
    sensors = {
        k: {kk: vv for kk, vv in s.items() if kk != "noise"} if s.get("kind") == "encoder" else s
        for k, s in fitted.sensors.items()
    }
    fitted = replace(fitted, sensors=sensors, method={**fitted.method, "estimator": "tree"})
    rig = furuta.tree_rig(fitted)
    values = {k: float(truth.get(k, v)) for k, v in rig.values.items()}
    return values, fitted


def _simulate(rig, values: dict, u_fine: np.ndarray, h: float):
    """q [N + 1, 2] of the tree integrator from rest, hanging (SWING_UP's angles0)."""
    tree, n = rig.tree, rig.tree.n_dof

    @jax.jit
    def run(vals, u):
        params = rig.make_params(vals)
        q0 = jnp.asarray(SWING_UP.angles0, float)
        # The natural map's inertia c changes how the complementarity is solved, not its
        # solution; the diagonal of M at the start is the estimator's choice too.
        c = jnp.diag(newton_euler.crba(tree, params, q0))
        q, _ = vf.rollout(tree, params, q0, jnp.zeros(n), u, h, c)
        return q

    vals = {k: jnp.asarray(v) for k, v in values.items()}
    return np.asarray(run(vals, jnp.asarray(u_fine)))


def consistent_recording(duration: float = 2.0, substeps: int = SUBSTEPS) -> Recording:
    """The swing-up of Section 4.6 (3 V square pulses at 1.13 Hz written at 100 Hz, from
    hanging at rest) simulated by the tree integrator at 1/(``RATE`` ``substeps``) s, sampled
    at ``RATE`` by ``COUNTS``-count encoders: a ``Recording`` (log, truth, spec)."""
    truth, spec = truth_and_spec()
    rig = furuta.tree_rig(spec)
    frames = int(round(duration * RATE)) + 1
    t = np.arange(frames) / RATE
    scenario = replace(SWING_UP, duration=duration)
    u = drive_voltage(t, scenario)  # held over each frame, as the estimator reads a log
    q = _simulate(rig, truth, np.repeat(u[:-1], substeps)[:, None], 1.0 / (RATE * substeps))
    angles = quantizer(COUNTS)(q[::substeps][:, list(rig.observed)])
    log = Stream(
        t,
        np.column_stack([angles, u]),
        (*rig.channels, "u"),
        ("rad",) * len(rig.channels) + ("V",),
        np.zeros((frames, len(rig.channels) + 1), bool),
        {"simulated": "furuta tree integrator", "substeps": substeps},
    )
    return Recording(log, {k: truth[k] for k in spec.parameters}, spec)
