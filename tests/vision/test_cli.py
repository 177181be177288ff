"""``physid render``, ``calibrate`` and ``track`` end to end through the real entry point."""

import cv2
import numpy as np

from physid.vision.posefile import read_pose_csv
from physid.vision.render import load_truth
from tests.conftest import run_physid


def test_render_then_track_writes_poses_and_overlay(tmp_path):
    r = run_physid("render", "drop.avi", "--frames", "24", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    r = run_physid(
        "track",
        "drop.avi",
        "--calibration",
        "drop.avi.camera.json",
        "--rig",
        "ellipse_drop",
        "--out",
        "poses.csv",
        "--overlay",
        "overlay.mp4",
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    assert "frames/s" in r.stderr and "poses.csv" in r.stderr
    stream = read_pose_csv(tmp_path / "poses.csv")
    assert stream.channels[:3] == ("x", "y", "theta")
    assert len(stream) == 24 and not stream.missing.any()
    truth = load_truth(tmp_path / "drop.avi")
    err = stream.values[:, :2] - truth["poses"][:, :2]
    assert np.sqrt(np.mean(err**2)) < 0.3e-3
    cap = cv2.VideoCapture(str(tmp_path / "overlay.mp4"))
    assert cap.isOpened() and int(cap.get(cv2.CAP_PROP_FRAME_COUNT)) == 24


def test_track_error_is_one_line_with_exit_status_2(tmp_path):
    (tmp_path / "camera.json").write_text("{}")
    r = run_physid(
        "track",
        "nope.avi",
        "--calibration",
        "camera.json",
        "--rig",
        "ellipse_drop",
        "--out",
        "p.csv",
        cwd=tmp_path,
    )
    assert r.returncode == 2
    assert "camera.json" in r.stderr and "physid calibrate" in r.stderr
    assert "Traceback" not in r.stderr
