"""The main job on the committed sample folder (issue 7's end-to-end acceptance): every
experiment reported, each identified parameter within its estimator's accuracy goal of the
truth file, and the Furuta video's clock offset within one encoder sample.

Goals (issues 3 and 6): pendulum J 1 %, b and r·μ 10 % (Section 4.2 model, h = 1e-3);
Furuta J_Azz and J_Byy 3 % (Section 4.7 at h = 1e-3; its dampers are shadow parameters of
the step, so only their sign is checked); ellipse drop J/m 5 % (240 fps), and μ either
flagged not identifiable (nothing slides in the sample's throw) or within 0.05; loop κ
2 % (issue 23; measured 2026-11-25: −4.6e-7 and +5.6e-6 relative).
The pendulum and Furuta run the default estimator, the tree (issue 22), on the sample
simulated by its own integrator on rigid joints. Measured 2026-11-26: pendulum J −0.007 %,
b −1.5 %, μ +0.36 %; Furuta J_Azz −1.09 %, J_Byy +0.005 %; offset error +8 µs. (SPOOK on
the SPOOK-simulated sample, 2026-11-24: pendulum −0.05 %, +6.3 %, −0.9 %; Furuta −0.65 %,
−0.07 %; drop +1.65 %; offset error −17 µs.)"""

import io
import math
from pathlib import Path

import pytest
from rich.console import Console

from physid.rigs.pipeline.process import ProcessOptions, load_index, process_folder

SAMPLE = Path(__file__).resolve().parents[2] / "videos"
GOALS = {
    "pendulum": {"J": 0.01, "b": 0.10, "mu": 0.10},
    "furuta": {"J_Azz": 0.03, "J_Byy": 0.03},
    "drop": {"J_over_m": 0.05},
    "loop": {"kappa_theta": 0.02, "kappa_psi": 0.02},  # issue 23: κ from video within 2 %
}


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("reports")
    options = ProcessOptions(jobs=2, cross_validate=False)
    process_folder(SAMPLE, out, options, Console(file=io.StringIO()))
    return out


@pytest.fixture(scope="module")
def summaries(reports):
    return {s["experiment"]: s for s in load_index(reports)}


@pytest.mark.slow
def test_every_sample_experiment_meets_its_accuracy_goal(summaries):
    assert set(summaries) == set(GOALS)
    for name, goals in GOALS.items():
        s = summaries[name]
        assert s["status"] == "ok", (name, s.get("error"))
        truth = s["truth"]["parameters"]
        for param, rel in goals.items():
            value = s["parameters"][param]["value"]
            assert value == pytest.approx(truth[param], rel=rel), (name, param, value)
    furuta = summaries["furuta"]["parameters"]
    assert furuta["b1"]["value"] > 0 and furuta["b2"]["value"] > 0
    mu = summaries["drop"]["parameters"]["mu"]
    true_mu = summaries["drop"]["truth"]["parameters"]["mu"]
    assert not mu["identifiable"] or abs(mu["value"] - true_mu) <= 0.05


def truth_distance(p: dict, truth: float) -> float:
    """How far the truth lies from what the report claims, in the report's own std: |z| for
    a value with a finite std; for a parameter on a box bound, the truth's distance from the
    bound in released std on the side its one-sided interval covers; 0 for a lower bound only
    (μ of a drop that never slides) the truth is above, inf for anything else."""
    std = p.get("std")
    if std is not None and math.isfinite(std) and std > 0:
        return abs(p["value"] - truth) / std
    if p.get("released_std"):
        beyond = truth - p["value"] if p["at_bound"] == "lower" else p["value"] - truth
        return beyond / p["released_std"] if beyond >= 0 else math.inf
    if p.get("lower_bound"):
        return 0.0 if truth >= p["value"] else math.inf
    return math.inf


@pytest.mark.slow
def test_every_sample_parameter_is_within_three_reported_std_and_every_verdict_good(summaries):
    """Issue 24's acceptance on the sample folder: the reported std covers the truth (3 std:
    a calibrated std leaves 0.3 % outside; all 12 parameters have a truth, the drop's
    restitution too) and every report's verdict by prediction is "good fit". Measured
    2026-11-26 (docs/tree-estimator.md, "The sample through the tree"): largest |z| 2.05
    (pendulum b; Furuta all within 0.68, drop 0.13, loop 0.30). It failed until the tree's
    dry friction was split over both rows of the step (pendulum J z −3.45) and the drive was
    held from its own frame (Furuta b1 +24 %, z +2.97)."""
    far = {}
    for name, s in summaries.items():
        assert s["verdict"] == "good fit", (name, s.get("verdict_summary"))
        truth = s["truth"]["parameters"]
        for param, p in s["parameters"].items():
            if param in truth:
                far[f"{name}.{param}"] = truth_distance(p, truth[param])
    assert len(far) == 12, sorted(far)
    assert all(d <= 3.0 for d in far.values()), far


@pytest.mark.slow
def test_hinged_samples_run_the_default_tree_estimator_with_its_checks(reports, summaries):
    """The pendulum and the Furuta are identified by the default estimator (the tree, issue
    22: the built-in specs name none), with what the SPOOK path gave a user: the verdict by
    prediction (k-step and free run on the log), parameter flags and the residual table
    of every encoder channel in estimate.json."""
    import json

    for name, channels in (("pendulum", {"theta"}), ("furuta", {"theta1", "theta2"})):
        assert "generalized coordinates" in summaries[name]["solver"], summaries[name]["solver"]
        doc = json.loads((reports / name / "estimate.json").read_text())
        assert doc["settings"]["estimator"] == "tree"
        checks = {p["kind"] for p in doc["validation"]["predictions"]}
        assert {"k-step", "free run"} <= checks, checks
        table = doc["validation"]["residuals"]["channels"]
        assert {c["name"] for c in table} == channels
        assert all(c["samples"] > 1000 and c["rms"] > 0 for c in table), table


@pytest.mark.slow
def test_furuta_clock_offset_within_one_encoder_sample(summaries):
    sync = summaries["furuta"]["facts"]["sync"]
    truth = summaries["furuta"]["truth"]
    assert sync["fused"] and sync["verdict"] == "ok"
    sample = 1.0 / truth["encoder_rate_hz"]  # 1 ms
    assert abs(sync["offset_s"] - truth["clock_offset_s"]) < sample


@pytest.mark.slow
def test_video_experiments_play_their_overlay_in_the_report(reports, summaries):
    """The drop and the Furuta (3D markers) each have a VP9 WebM overlay, in their report's
    <video>; the pendulum (no video) has none."""
    import cv2

    for name in ("drop", "furuta"):
        assert summaries[name]["files"]["overlay"] == "overlay.webm"
        video = reports / name / "overlay.webm"
        cap = cv2.VideoCapture(str(video))
        assert int(cap.get(cv2.CAP_PROP_FOURCC)).to_bytes(4, "little") == b"VP90"
        assert cap.read()[0]
        assert (
            '<video id="overlay" src="data:video/webm;base64,'
            in (reports / name / "report.html").read_text()
        )
    assert "overlay" not in summaries["pendulum"].get("files", {})
