"""The loop rig end to end through the console script: ``physid simulate hexagon_loop`` writes
a log of the measured point (1 mm noise) and the force; ``physid identify`` on it recovers
κ. Each command compiles the 13-coordinate constrained step and its forward sensitivities
(minutes on the shared 2-core machine): slow."""

import json

import numpy as np
import pytest

from physid.estimation.estimate import Estimate
from physid.rigs.models.identify_loop import read_loop_log
from tests.conftest import run_physid


@pytest.mark.slow
def test_simulate_then_identify_recovers_kappa(tmp_path):
    sim = tmp_path / "sim"
    run = run_physid("simulate", "hexagon_loop", "--out", str(sim), "--seed", "4", timeout=3000)
    assert run.returncode == 0, run.stderr
    log = read_loop_log(sim / "log.csv")
    assert len(log.t) == 101 and log.h == pytest.approx(0.01, rel=1e-12)
    # The force column is the spec's waveform at the step's midpoint (x: 4 N cos(2π t/0.5 s)).
    np.testing.assert_allclose(
        log.forces[:, 0], 4.0 * np.cos(2 * np.pi * (log.t + 0.005) / 0.5), atol=1e-12
    )
    truth = json.loads((sim / "truth.json").read_text())["parameters"]
    fit = tmp_path / "fit"
    run = run_physid(
        "identify", "hexagon_loop", str(sim / "log.csv"), "--out", str(fit), timeout=3000
    )
    assert run.returncode == 0, run.stderr
    est = Estimate.read(fit / "estimate.json")
    assert est.converged and est.verdict == "good fit"
    assert (fit / "report.html").exists()
    for name, true in truth.items():
        p = est.parameters[name]
        # 1 mm noise over 101 samples of a point that moves by centimetres: the 20-seed study
        # of docs/variational.md saw errors up to 7.5e-4 relative; 1 % is the bar, and
        # the error must be within 3 of its reported std.
        assert abs(p.value / true - 1) < 0.01, (name, p.value)
        assert abs(p.value - true) <= 3 * p.std, (name, p.value, p.std)
        assert p.identifiable
