"""The ellipse drop rig around the IPOPT estimator: pose CSVs, simulate, refusals."""

import json

import numpy as np
import pytest
from rich.console import Console

from rigs.ellipse_drop import NotIdentifiableInput, identify, read_pose_csv, simulate
from rigs.errors import InputError
from rigs.kinds import SimulateOptions, kind_module
from rigs.spec import load_spec, with_overrides

QUIET = Console(quiet=True)


def test_pose_csv_marks_empty_fields_missing_and_ignores_extra_columns(tmp_path):
    path = tmp_path / "poses.csv"
    path.write_text("t,x,y,theta,std_x\n0,0.1,0.2,0.3,0.001\n0.01,,0.2,0.3,\n0.02,0.1,0.2,0.3,\n")
    s = read_pose_csv(path)
    assert s.channels == ("x", "y", "theta")
    np.testing.assert_array_equal(s.missing[:, 0], [False, True, False])
    assert not s.missing[:, 1:].any()


def test_pose_csv_errors_name_file_and_line(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("t,x,y,theta\n0,0.1,0.2,0.3\n0.01,abc,0.2,0.3\n")
    with pytest.raises(InputError, match=r"bad\.csv:3"):
        read_pose_csv(path)
    path.write_text("t,x,y\n0,1,2\n")
    with pytest.raises(InputError, match="lacks theta"):
        read_pose_csv(path)


def test_simulate_writes_poses_impulses_and_truth(tmp_path):
    spec = with_overrides(load_spec("ellipse_drop"), {"mu": "0.4", "fps": "120"})
    assert kind_module(spec).__name__ == "rigs.ellipse_drop"
    written = simulate(spec, SimulateOptions(tmp_path, duration=0.3, noise=0.0), QUIET)
    truth = json.loads(written["truth"].read_text())
    assert truth["J_over_m"] == pytest.approx(756e-6)
    assert truth["mu"] == 0.4
    poses = read_pose_csv(written["poses"])
    assert len(poses) == 37  # 0.3 s at 120 fps, both ends included
    np.testing.assert_allclose(np.diff(poses.t), 1 / 120, rtol=1e-9)
    imp = np.loadtxt(written["impulses"], delimiter=",", skiprows=1)
    assert imp[:, 1].max() > 0  # the throw of Section 6.1 hits the ground within 0.3 s


def test_identify_refuses_free_flight_with_reason(tmp_path):
    spec = load_spec("ellipse_drop")
    t = np.arange(0, 0.2, 1 / 120)
    path = tmp_path / "flight.csv"
    rows = ["t,x,y,theta"] + [f"{ti},{0.1 * ti},{1.0 - 4.9 * ti**2},0.2" for ti in t]
    path.write_text("\n".join(rows) + "\n")
    with pytest.raises(NotIdentifiableInput, match="cannot be identified.*never touches"):
        identify(spec, [path], tmp_path / "out", QUIET)
    assert not (tmp_path / "out" / "estimate.json").exists()


def test_identify_skips_incomplete_frames_rather_than_inventing_them(tmp_path):
    # 10 frames, 4 with an empty field: only 6 valid frames remain, below the minimum of 8,
    # so the refusal proves the incomplete ones were dropped, not filled in.
    spec = load_spec("ellipse_drop")
    rows = ["t,x,y,theta"]
    for i in range(10):
        x = "" if i % 3 == 1 or i == 9 else "0.0"
        rows.append(f"{i / 120},{x},0.03,0.0")
    path = tmp_path / "gappy.csv"
    path.write_text("\n".join(rows) + "\n")
    with pytest.raises(NotIdentifiableInput, match="only 6 valid frames"):
        identify(spec, [path], tmp_path / "out", QUIET)
