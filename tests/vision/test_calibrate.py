"""Calibration from rendered checkerboard videos against the true intrinsics."""

import numpy as np
import pytest

from physid.vision.calibrate import calibrate_video, parse_board
from physid.vision.camera import action_camera, pinhole_camera
from physid.vision.render import render_checkerboard_video


def _intrinsic_errors(found, true):
    K, K0 = found.K, true.K
    return np.abs(
        [
            K[0, 0] / K0[0, 0] - 1,
            K[1, 1] / K0[1, 1] - 1,
            K[0, 2] / K0[0, 2] - 1,
            K[1, 2] / K0[1, 2] - 1,
        ]
    )


def test_fisheye_calibration_recovers_intrinsics(tmp_path):
    true = action_camera()
    video = render_checkerboard_video(tmp_path / "board.avi", true, (9, 6), 0.02, n_frames=24)
    report = calibrate_video(video, (9, 6), 0.02, "fisheye", max_frames=20)
    # acceptance: fx, fy, cx, cy within 0.5 % (we measure < 0.1 %), RMS <= 0.3 px
    assert _intrinsic_errors(report.camera, true).max() < 0.005
    assert report.rms <= 0.3
    assert len(report.frame_rms) >= 10
    assert all(v < 0.5 for v in report.frame_rms.values())
    assert report.camera.info["rms_px"] == pytest.approx(report.rms)


def test_pinhole_calibration_recovers_intrinsics(tmp_path):
    true = pinhole_camera(640, 360)
    video = render_checkerboard_video(tmp_path / "board.avi", true, (7, 5), 0.02, n_frames=16)
    report = calibrate_video(video, (7, 5), 0.02, "pinhole")
    assert _intrinsic_errors(report.camera, true).max() < 0.01
    assert report.rms <= 0.3


def test_parse_board():
    assert parse_board("9x6") == (9, 6)
    with pytest.raises(ValueError, match="COLSxROWS"):
        parse_board("nine by six")


def test_outlier_view_is_rejected():
    # exact corners of 12 views, one of them with its corners shuffled by 2 px
    from physid.vision.calibrate import calibrate_views
    from physid.vision.render import board_points, board_poses

    cam = action_camera()
    obj = board_points((9, 6), 0.02)
    views = {k: cam.project(obj, r, t) for k, (r, t) in enumerate(board_poses(12, (0.16, 0.1)))}
    views[5] = views[5] + np.random.default_rng(0).normal(0, 2.0, views[5].shape)
    report = calibrate_views(views, (9, 6), 0.02, "fisheye", cam.size)
    assert list(report.rejected) == [5]
    assert 5 not in report.frame_rms
    assert report.rms < 0.01


def test_charuco_calibration_recovers_intrinsics(tmp_path):
    from physid.vision.render import render_charuco_video

    true = action_camera()
    video = render_charuco_video(tmp_path / "charuco.avi", true, (10, 7), 0.02, 0.015, n_frames=24)
    report = calibrate_video(video, (10, 7), 0.02, "fisheye", charuco="DICT_4X4_50", marker=0.015)
    # same acceptance as the checkerboard (0.5 %, 0.3 px); ChArUco corners from the
    # detector's own refinement are ~0.2 px, so we measure ~0.3 % and 0.18 px here
    assert _intrinsic_errors(report.camera, true).max() < 0.005
    assert report.rms <= 0.3
    assert report.detected >= 20
