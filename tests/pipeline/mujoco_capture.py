"""Encoder captures of a rig that MuJoCo simulates (issue 22's independent truth), written as
the board writes them: the joint angles through 4096-count encoders and the control voltage
in mV, as protocol-v1 frames (``rigs.encoders.boardsim``) in a raw ``.bin`` that physid's
capture decoder reads, or played through a pseudo-terminal into ``physid record``.

Used by the end-to-end tests (tests/pipeline/test_tree_end_to_end.py) and by
``benchmarks/bench_sysid_furuta.py``."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import mujoco
import numpy as np

from physid.rigs.encoders.boardsim import BoardSimulator, Trajectory, encode_trajectory

RATE = 1000.0  # Hz, the board's frame rate
COUNTS_PER_REV = 4096
PHYSID = [sys.executable, "-c", "from physid.rigs.cli import main; main()"]


@dataclass(frozen=True)
class Run:
    """MuJoCo's run: ``t`` (s), true joint angles ``q[N, nq]`` (rad), the control ``u[N]``
    (V, on the board's 1 mV grid) held over each sample, and the compiled model."""

    t: np.ndarray
    q: np.ndarray
    u: np.ndarray
    model: mujoco.MjModel


def furuta_drive(t):
    """A square wave on the arm (3 V at 1.13 Hz, as the sample swing-up) plus a slow sine."""
    return 3.0 * np.sign(np.sin(2 * np.pi * 1.13 * t)) + 1.0 * np.sin(2 * np.pi * 0.31 * t)


def pendulum_drive(t):
    return 0.2 * np.sin(2 * np.pi * 0.5 * t) + 0.15 * np.sin(2 * np.pi * 1.7 * t)


def simulate(xml: Path, drive, duration: float, qpos0=None) -> Run:
    """MuJoCo's run of ``xml`` from rest at ``qpos0`` under ``drive(t)`` rounded to 1 mV (what
    the board records) and held over each 1 ms sample. ``mujoco.rollout`` steps it in C."""
    from mujoco import rollout

    model = mujoco.MjModel.from_xml_path(str(xml))
    data = mujoco.MjData(model)
    if qpos0 is not None:
        data.qpos[:] = qpos0
    sub = int(round(1.0 / (RATE * model.opt.timestep)))
    n = int(round(duration * RATE)) + 1
    t = np.arange(n) / RATE
    u = np.rint(np.array([drive(tk) for tk in t]) * 1000.0) / 1000.0
    state0 = np.empty(mujoco.mj_stateSize(model, mujoco.mjtState.mjSTATE_FULLPHYSICS))
    mujoco.mj_getState(model, data, state0, mujoco.mjtState.mjSTATE_FULLPHYSICS)
    ctrl = np.repeat(u[:-1], sub)[:, None]  # u[k] held from t_k to t_{k+1}
    state, _ = rollout.rollout(model, data, state0, ctrl)
    qadr = 1 + np.arange(model.nq)  # FULLPHYSICS: time, then qpos
    q = np.vstack([state0[qadr], state[0, sub - 1 :: sub][:, qadr]])
    return Run(t, q, u, model)


def trajectory(run: Run) -> Trajectory:
    """The board's samples of a run: counts rounded to the nearest of 4096 per revolution."""
    k = np.arange(len(run.t), dtype=np.int64)
    return Trajectory(
        t=run.t,
        t_us=np.rint(run.t * 1e6).astype(np.int64),
        counts=np.rint(run.q * COUNTS_PER_REV / (2 * np.pi)).astype(np.int64),
        u_mv=np.rint(run.u * 1000).astype(np.int16),
        seq=k,
    )


def write_capture(run: Run, path: Path) -> Path:
    """The run as the raw ``.bin`` a board's serial stream would leave (protocol v1 frames)."""
    path.write_bytes(encode_trajectory(trajectory(run)).tobytes())
    return path


def record_capture(run: Run, path: Path) -> Path:
    """The run played by the board simulator into a pseudo-terminal at 1000 frames/s and
    recorded there by ``physid record`` (pyserial): the real capture path, in real time."""
    frames = encode_trajectory(trajectory(run))
    with BoardSimulator(frames.tobytes(), frames.shape[1], rate=RATE) as board:
        proc = subprocess.Popen(
            [*PHYSID, "record", "--port", board.port, "--out", str(path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 300  # the recorder's imports on a loaded machine
        while not path.exists():  # created once the port is open
            if proc.poll() is not None:
                raise RuntimeError(f"physid record ended: {proc.communicate()[1]}")
            if time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError("physid record did not open the port")
            time.sleep(0.05)
        board.start()
        board.wait()
        time.sleep(0.5)  # the last frames through the pty
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    if proc.returncode != 0:
        raise RuntimeError(f"physid record failed: {err}")
    return path
