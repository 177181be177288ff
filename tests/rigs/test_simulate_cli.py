"""`physid simulate` end to end through the real console script."""

import json

import numpy as np

from physid.rigs.encoders import read_log
from tests.conftest import run_physid


def test_simulate_pendulum_writes_log_truth_and_plot(tmp_path):
    out = tmp_path / "pend"
    run = run_physid("simulate", "pendulum", "--out", str(out), "--duration", "2", "--seed", "3")
    assert run.returncode == 0, run.stderr
    log = read_log(out / "log.csv")
    assert log.channels == ("theta", "u")
    assert len(log) == 2001 and np.allclose(np.diff(log.t), 1e-3)
    truth = json.loads((out / "truth.json").read_text())
    assert truth["parameters"]["J"] == 0.0039
    # Released near upright (3 rad) the pendulum falls: the angle leaves 3 rad by far.
    theta = log.column("theta")
    assert theta[0] == 3.0 and np.abs(theta - 3.0).max() > 3.0
    assert (out / "plot.png").stat().st_size > 10_000


def test_simulate_reports_a_bad_override_without_traceback(tmp_path):
    run = run_physid("simulate", "furuta", "--out", str(tmp_path), "--set", "l9=1")
    assert run.returncode == 2
    assert "furuta.toml" in run.stderr and "l9" in run.stderr
    assert "Traceback" not in run.stderr
