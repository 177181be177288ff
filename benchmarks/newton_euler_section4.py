"""The simulated experiments of Lutter et al., Section 4, with physid's NEA and DiffNEA:
Furuta (Quanser Qube values, rigs/specs/qube.toml) and cartpole (rigs/specs/cartpole.toml),
datasets (a) uniform samples with exact accelerations and (b) trajectories with viscous
friction, action noise and state noise; identified parameters against the truth and 250 Hz
RK4 roll-outs against held-out trajectories. Results: docs/newton-euler.md.

    .venv/bin/python benchmarks/newton_euler_section4.py [cartpole|furuta] [a|b]
"""

from __future__ import annotations

import sys
import time

import numpy as np

import physid.dynamics  # noqa: F401
from physid.estimation.nea_experiments import (
    Section4Config,
    cartpole_rods,
    furuta_rods,
    run_section4,
)
from physid.rigs.models.tree.rig import load_tree_rig
from physid.spec import load_spec


def _cart_centering(q, qd):
    """A weak PD on the cart (V): keeps it within ±0.4 m as the track would."""
    return -20.0 * q[0] - 3.0 * qd[0]


CONFIGS = {
    "cartpole": (
        "cartpole",
        Section4Config(
            q_span=(0.4, np.pi),
            qd_span=(1.5, 8.0),
            u_span=(6.0,),
            amplitude=4.0,
            freqs_hz=(0.3, 0.7, 1.3, 2.1, 3.4),
            q0=(0.0, np.pi - 0.6),
            state_noise=(1e-5, 1e-4),
            action_noise=0.1,
            joint_terms=("damping", "armature"),
            physical=cartpole_rods(),
            theta_true=(0.57, 0.127, 0.3365, 5.4, 0.0024),
            theta_start=(1.0, 0.34, 0.45, 1.0, 1e-3),  # the paper's 1 kg and 340 g
            feedback=_cart_centering,
        ),
    ),
    "furuta": (
        "qube",
        Section4Config(
            q_span=(np.pi, np.pi),
            qd_span=(8.0, 15.0),
            u_span=(5.0,),
            amplitude=3.0,
            freqs_hz=(0.4, 0.9, 1.7, 2.9),
            q0=(0.0, 0.3),
            state_noise=(1e-4, 1e-4),
            action_noise=0.05,
            joint_terms=("damping",),
            physical=furuta_rods(),
            theta_true=(0.095, 0.085, 0.024, 0.129, 5e-4, 5e-5),
            theta_start=(0.12, 0.1, 0.03, 0.1, 1e-3, 1e-4),
        ),
    ),
}


def run(system: str, dataset: str, seed: int = 0):
    spec_name, config = CONFIGS[system]
    rig = load_tree_rig(load_spec(spec_name))
    return run_section4(rig.tree, rig.params, rig.make_params, config, dataset, seed)


def report(system: str, dataset: str, result) -> None:
    _, config = CONFIGS[system]
    print(f"\n## {system}, dataset ({dataset})  NEA torque residual RMS {result.nea_rms:.3g}")
    print(f"{'base parameter (NEA)':60s} {'true':>11s} {'NEA':>11s} {'share':>7s} {'error':>9s}")
    for name, t, e, s, err in zip(
        result.base_names,
        result.base_true,
        result.base_nea,
        result.base_share,
        result.base_error,
        strict=True,
    ):
        print(f"{name:60s} {t: 11.5g} {e: 11.5g} {s:7.1%} {err:9.2e}")
    print(f"{'physical parameter (DiffNEA)':20s} {'true':>11s} {'DiffNEA':>11s} {'error':>9s}")
    for name, unit, t, e, err in zip(
        config.physical.names,
        config.physical.units,
        config.theta_true,
        np.abs(result.theta_diffnea),
        result.theta_error,
        strict=True,
    ):
        print(f"{name + ' (' + unit + ')':20s} {t: 11.5g} {e: 11.5g} {err:9.2e}")
    print("roll-out error |q_model - q_true| at 1, 2, 5 s (per joint):")
    for model, errors in result.rollout.items():
        cells = "  ".join(
            f"{t:g} s: " + ", ".join(f"{x:.2e}" for x in v) for t, v in errors.items()
        )
        print(f"  {model:8s} {cells}")


if __name__ == "__main__":
    systems = [sys.argv[1]] if len(sys.argv) > 1 else list(CONFIGS)
    datasets = [sys.argv[2]] if len(sys.argv) > 2 else ["a", "b"]
    for system in systems:
        for dataset in datasets:
            start = time.perf_counter()
            report(system, dataset, run(system, dataset))
            print(f"({time.perf_counter() - start:.0f} s)")
