"""The tree estimator end to end (issue 22): data from files on disk through ``physid
identify`` (the command line) or ``physid.identify``, with no weight set by hand.

- MuJoCo-simulated rigs (independent physics: ``tests/data/mujoco``, RK4 at 1e-4 s) through
  physid's real encoder path: the board simulator plays the 4096-count encoder frames and the
  1 mV control into a pseudo-terminal at 1000 frames/s, ``physid record`` captures them
  through pyserial into a raw ``.bin``, and ``physid identify`` decodes that capture;
- Section 4.7 of Marklund et al. through ``physid simulate`` + ``physid identify``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import physid
from physid.errors import InputError
from physid.streams import Stream

mujoco = pytest.importorskip("mujoco")

from mujoco_capture import (  # noqa: E402
    furuta_drive,
    pendulum_drive,
    record_capture,
    simulate,
)

DATA = Path(__file__).parents[1] / "data" / "mujoco"
CLI = [sys.executable, "-c", "from physid.rigs.cli import main; main()"]
ROOT = Path(__file__).parents[2]


def identify_cli(spec: Path, log: Path, out: Path) -> dict:
    """``physid identify`` in a fresh process; its estimate.json."""
    proc = subprocess.run(
        [*CLI, "identify", str(spec), str(log), "--out", str(out)], capture_output=True, text=True
    )
    print(proc.stdout[-4000:])
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads((out / "estimate.json").read_text())


def check(estimate: dict, truth: dict, tolerance: dict) -> None:
    """Each parameter within its relative tolerance of the truth and within 3 std (the
    linearized std with the residuals' batch-means covariance: |z| ≤ 3 is the issue's test of
    an honest std), a converged fit and the verdict "good fit"."""
    params = estimate["parameters"]
    for name, value in truth.items():  # shown with -s, and on a failure
        p = params[name]
        print(f"{name}: {p['value']:.6g} (truth {value:.6g}, {(p['value'] - value) / value:+.3%}, "
              f"std {p['std']:.3g}, z {(p['value'] - value) / p['std']:+.2f})")  # fmt: skip
    assert estimate["converged"], estimate["status"]
    for name, value in truth.items():
        p = params[name]
        rel = (p["value"] - value) / value
        assert abs(rel) <= tolerance[name], (name, p["value"], value, rel)
        assert abs(p["value"] - value) <= 3 * p["std"], (name, p["value"], value, p["std"])
    assert estimate["validation"]["verdict"] == "good fit", estimate["validation"]["summary"]


@pytest.mark.slow
def test_mujoco_pendulum_through_the_encoder_board(tmp_path):
    """MuJoCo's driven pendulum (10 s from 1 rad), captured by ``physid record`` from the
    board simulator: J (about the centre of mass) and the gear within 1 %, the damping within
    5 % (the issue's floor), each within 3 std."""
    run = simulate(DATA / "pendulum.xml", pendulum_drive, 10.0, qpos0=[1.0])
    capture = record_capture(run, tmp_path / "pendulum.bin")
    estimate = identify_cli(DATA / "pendulum.toml", capture, tmp_path / "fit")
    truth = {
        "pendulum.inertia.yy": float(run.model.body_inertia[1][1]),
        "theta.damping": float(run.model.dof_damping[0]),
        "motor.gear": float(run.model.actuator_gear[0][0]),
    }
    tolerance = {"pendulum.inertia.yy": 0.01, "theta.damping": 0.05, "motor.gear": 0.01}
    check(estimate, truth, tolerance)


@pytest.mark.slow
def test_mujoco_furuta_through_the_encoder_board(tmp_path):
    """MuJoCo's motor-driven Furuta (10 s of a 3 V square wave plus a slow sine on the arm,
    the pendulum from 0.5 rad), captured by ``physid record`` from the board simulator: both
    inertias and the gear within 1 %, both dampings within 5 %, each within 3 std."""
    run = simulate(DATA / "furuta.xml", furuta_drive, 10.0, qpos0=[0.0, 0.5])
    capture = record_capture(run, tmp_path / "furuta.bin")
    estimate = identify_cli(DATA / "furuta.toml", capture, tmp_path / "fit")
    m = run.model
    truth = {
        "arm.inertia.zz": float(m.body_inertia[1][2]),
        "pendulum.inertia.xx": float(m.body_inertia[2][0]),
        "theta.damping": float(m.dof_damping[0]),
        "alpha.damping": float(m.dof_damping[1]),
        "motor.gear": float(m.actuator_gear[0][0]),
    }
    tolerance = {"arm.inertia.zz": 0.01, "pendulum.inertia.xx": 0.01, "motor.gear": 0.01,
                 "theta.damping": 0.05, "alpha.damping": 0.05}  # fmt: skip
    check(estimate, truth, tolerance)


@pytest.mark.slow
def test_seed_experiment_4_7_through_simulate_and_identify(tmp_path):
    """Section 4.7 on the command line: ``physid simulate furuta`` (SPOOK with Table G.5's
    compliant hinges at h = 1e-4 s, a 5 s release from π − 0.03 rad, 0.001 rad noise), then
    ``physid identify`` of J_Azz, J_Byy, b1, b2 with the default estimator (the tree, no
    ``[method] estimator`` line) at h = 1e-3 s, every other value the simulation's: J_Azz
    and J_Byy within 3 % (the issue's goal; SPOOK on the same data was 4.8 % off in J_Azz).
    The dampers are not asserted: at h = 1e-3 they carry the discretization's shadow bias
    and SPOOK's load-proportional friction, which the tree does not model
    (docs/tree-estimator.md)."""
    from physid.rigs.models import furuta

    sim = tmp_path / "sim"
    # --engine spook: SPOOK's data (the spec names no estimator, so the tree would be the
    # simulator too), the model-form test measured in docs/tree-estimator.md.
    args = ["simulate", "furuta", "--engine", "spook", "--duration", "5", "--noise", "0.001"]
    subprocess.run(
        [*CLI, *args, "--out", str(sim)],
        check=True,
    )
    truth = json.loads((sim / "truth.json").read_text())["parameters"]
    fitted = ("J_Azz", "J_Byy", "b1", "b2")
    # The spec knows what the simulation used for every value it does not identify.
    fixed = "\n".join(
        f'{k} = {{ value = {float(v)!r}, unit = "{furuta.UNITS[k]}" }}'
        for k, v in truth.items()
        if k not in fitted and k in furuta.UNITS
    )
    src = (ROOT / "rigs" / "specs" / "furuta.toml").read_text()
    method = src.split("\n[method]\n")[1].split("\n[")[0].splitlines()
    assert not any(line.startswith("estimator") for line in method)  # the default, unset
    src = src.split("[simulation]")[0]
    head, rest = src.split("[parameters]", 1)
    kept = "\n".join(line for line in head.splitlines() if line.split("=")[0].strip() not in truth)
    spec = tmp_path / "furuta_tree.toml"
    spec.write_text(f"{kept}\n{fixed}\n\n[parameters]{rest}")
    estimate = identify_cli(spec, sim / "log.csv", tmp_path / "fit")
    assert estimate["settings"]["estimator"] == "tree"
    for name in fitted:
        value = estimate["parameters"][name]["value"]
        print(f"{name}: {value:.6g} (truth {truth[name]:.6g}, {value / truth[name] - 1:+.3%})")
    for name in ("J_Azz", "J_Byy"):
        value = estimate["parameters"][name]["value"]
        assert abs(value - truth[name]) <= 0.03 * truth[name], (name, value, truth[name])


def test_python_api_reaches_the_tree_estimator():
    """``physid.identify`` runs the default estimator, the tree, on the built-in pendulum:
    the tree path's own refusal of a drive on a rig without an actuator comes back. The
    SPOOK path (``estimator = "spook"``) fits the same log and only notes that the model
    ignores its drive. Cheap: it stops before anything is compiled."""
    spec = physid.load_spec("pendulum")
    t = np.arange(200) * 1e-3
    sensors = physid.load_spec(spec).sensors
    encoder = next(k for k, v in sensors.items() if v.get("kind") == "encoder")
    values = np.column_stack([0.1 * np.cos(3 * t), np.full(t.size, 0.5)])
    log = Stream(t, values, (encoder, "u"), ("rad", "V"), np.zeros(values.shape, bool))
    with pytest.raises(InputError, match="has no actuator to take an input"):
        physid.identify(spec, log)
