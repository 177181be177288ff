"""``physid identify`` end to end on a lab's own CSV (its column names, degrees, milliseconds):
the parameter table in the terminal, and the same report folder ``physid process`` writes.

Slow: a 1.5 s pendulum swing through LM (about 30-60 s on two cores)."""

import json

import numpy as np
import pytest

from physid.rigs.pipeline.sample import EncoderScenario, simulate_hinged_tree
from physid.spec import load_spec
from tests.conftest import run_physid

pytestmark = pytest.mark.slow

COLUMNS = """
[sensors.theta.column]
name = "Winkel [deg]"
unit = "deg"
sign = -1
offset = { value = -180, unit = "deg" }
time = "Zeit [ms]"
time_unit = "ms"
"""


# The CSV is read back exactly (1e-15 rad, 2e-16 s). This log once stalled LM: the warm
# start's regression was dominated by its low-pass's start-up transient on the noisy edge
# rows and started LM at J = 1e-5 (its lower bound); those rows are now left out
# (estimation/tree_warm_start.py, EDGE_PERIODS), and LM converges (J +0.008 %, z +0.32).
def test_identify_a_lab_csv_prints_the_table_and_writes_the_report(tmp_path):
    spec = load_spec("pendulum")
    scenario = EncoderScenario(duration=1.5, angles0=(2.5,), board_t0=0.0, seed=1)
    # the default estimator's own model (the tree's integrator on a rigid joint), as the sample
    t_fine, angles, _, _, stride = simulate_hinged_tree(spec, scenario)
    t, theta = t_fine[::stride], angles[::stride, 0]
    theta = theta + np.random.default_rng(1).normal(0, 1e-3, theta.shape)
    # the lab logs 180° - θ in degrees (zero at the top), semicolons, a preamble, ms
    lines = ["# Pendelversuch 3, Messrechner B", "Zeit [ms];Winkel [deg];Status"]
    deg = 180 - np.degrees(theta)
    lines += [f"{1000 * a:.0f};{float(b)!r};ok" for a, b in zip(t, deg, strict=True)]
    data = tmp_path / "versuch3.csv"
    data.write_text("\n".join(lines) + "\n")
    rig = tmp_path / "bench.toml"
    rig.write_text(spec.path.read_text() + COLUMNS)

    out = tmp_path / "fit"
    done = run_physid("identify", rig, data, "--out", out, timeout=900, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    err = done.stderr
    assert "identified parameters" in err and "value ± std" in err and "flags" in err
    row = next(line for line in err.splitlines() if line.startswith("│ J "))
    assert "kg m^2" in row
    assert f"wrote {out / 'report.html'}" in " ".join(err.split())
    for name in ("report.html", "estimate.json", "summary.json", "log.txt"):
        assert (out / name).exists(), name
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "ok" and summary["facts"]["encoders"][0]["file"] == data.name
    # A converged fit first: a stalled LM also ends near the truth (J -1.45 % when the warm
    # start's regression put J on its lower bound), with std inf and "not converged".
    assert summary["converged"] and summary["verdict"] == "good fit", summary["verdict_summary"]
    j, std = summary["parameters"]["J"]["value"], summary["parameters"]["J"]["std"]
    truth = float(spec.sections["simulation"]["truth"]["J"])
    # Issue 24's criterion: within 3 reported std of the truth (J +0.008 %, std 0.026 %,
    # z +0.32 from the converged fit; the CSV reads back the simulated series to 1e-15 rad and
    # 2e-16 s, so this is the estimator's error on the swing). And the std must stay that
    # of a 1.5 s swing at 1 mrad: under 0.1 % (4x the measured 0.026 %), so that a fit that
    # lost its information cannot pass the z test on a wide std.
    assert abs(j - truth) < 3 * std, (j, std)
    assert std < 1e-3 * truth, std
    page = (out / "report.html").read_text()
    assert "<h2>Parameters</h2>" in page and "versuch3.csv" in page
