"""The MJCF Furuta (Quanser Qube values) driven by a recorded control voltage, simulated by
physid and by MuJoCo from the same state at h = 1e-4 s for 5 s."""

import dataclasses
from pathlib import Path

import jax
import mujoco
import numpy as np
import pytest

from physid.dynamics.integrators import rollout_rk4
from physid.rigs.models.tree.mjcf import read_model_file
from physid.rigs.models.tree.model import build_model

DATA = Path(__file__).parents[1] / "data" / "trees"
H, DURATION = 1e-4, 5.0


def recorded_control(n_steps: int) -> np.ndarray:
    """The voltage the encoder board recorded in videos/furuta.bin (first 5 s, 1 kHz; copied
    to tests/data/trees/furuta_control.csv), held between samples: [n_steps, 1]."""
    data = np.genfromtxt(DATA / "furuta_control.csv", delimiter=",", names=True, skip_header=1)
    t = np.arange(n_steps) * H
    idx = np.clip(np.searchsorted(data["t"], t + 1e-9, side="right") - 1, 0, len(data) - 1)
    return data["u"][idx][:, None]


def mujoco_rollout(q0, u, integrator: str) -> np.ndarray:
    m = mujoco.MjModel.from_xml_path(str(DATA / "furuta.xml"))
    m.opt.timestep = H
    m.opt.integrator = getattr(mujoco.mjtIntegrator, f"mjINT_{integrator}")
    d = mujoco.MjData(m)
    d.qpos[:] = q0
    out = [d.qpos.copy()]
    for uk in u:
        d.ctrl[:] = uk
        mujoco.mj_step(m, d)
        out.append(d.qpos.copy())
    return np.array(out)


@pytest.mark.slow
def test_furuta_driven_by_a_recorded_control_matches_mujoco_over_5_s():
    model = build_model(read_model_file(DATA / "furuta.xml"))
    tree = dataclasses.replace(model.tree, unroll=True)
    n_steps = int(round(DURATION / H))
    u = recorded_control(n_steps)
    q0 = np.array([0.0, 0.05])  # the sample experiment's release (videos/furuta.truth.json)
    q, _ = jax.jit(lambda p, q0, u: rollout_rk4(tree, p, q0, np.zeros(2), u, H))(
        model.params, q0, u
    )
    q = np.asarray(q)
    # The drive swings the arm over ±1.4 rad and the pendulum over ±0.9 rad.
    assert np.ptp(q[:, 0]) > 2.0 and np.ptp(q[:, 1]) > 1.0
    rk4 = mujoco_rollout(q0, u, "RK4")
    rms_rk4 = np.sqrt(np.mean((rk4 - q) ** 2, axis=0))
    # Same integrator, independent dynamics (MuJoCo's CRB + RNE with its own passive forces):
    # the bar is 1 mrad RMS; they agree to rounding (measured 2e-15 rad), so 1e-9
    # rad still passes with margin yet fails for any difference in the dynamics.
    assert np.all(rms_rk4 < 1e-9)
    euler = mujoco_rollout(q0, u, "EULER")
    rms_euler = np.sqrt(np.mean((euler - q) ** 2, axis=0))
    # MuJoCo's default semi-implicit Euler is first order: at h = 1e-4 its own error over the
    # 5 s is ~0.85 mrad RMS on the arm (measured), inside the 1 mrad.
    assert np.all(rms_euler < 1e-3)
