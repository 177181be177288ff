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


def test_calibration_from_a_folder_or_a_glob_of_photos(tmp_path):
    """The usual input: photos of the board. The frames of a rendered board video saved as
    PNG (lossless: the same pixels the video test sees) give the same camera from a folder
    and from a glob, each view named by its file; a single photo is an error that asks for
    more views, whatever it shows."""
    import cv2

    from physid.vision.calibrate import BoardError, board_views
    from physid.vision.video import frames

    true = pinhole_camera(640, 360)
    video = render_checkerboard_video(tmp_path / "board.avi", true, (7, 5), 0.02, n_frames=16)
    shots = tmp_path / "shots"
    shots.mkdir()
    for k, _, img in frames(video):
        cv2.imwrite(str(shots / f"IMG_{k:04d}.png"), img)
    (shots / "notes.txt").write_text("not an image: ignored")
    from_folder = calibrate_video(shots, (7, 5), 0.02, "pinhole")
    # the video test's acceptance: intrinsics within 1 %, RMS 0.3 px
    assert _intrinsic_errors(from_folder.camera, true).max() < 0.01
    assert from_folder.rms <= 0.3 and from_folder.examined == 16
    # a glob finds the same photos (and would calibrate on the same views)
    assert board_views(str(shots / "IMG_*.png")).names == board_views(shots).names
    assert {from_folder.label(k) for k in from_folder.frame_rms} <= {
        f"IMG_{k:04d}.png" for k in range(16)
    }
    with pytest.raises(BoardError, match=r"IMG_0003\.png: the image IMG_0003\.png \(shows the "
                       r"board\); calibration needs at least 4 views"):  # fmt: skip
        calibrate_video(shots / "IMG_0003.png", (7, 5), 0.02, "pinhole")
    with pytest.raises(BoardError, match=r"no images match"):
        calibrate_video(str(tmp_path / "*.jpg"), (7, 5), 0.02, "pinhole")


def test_square_takes_a_unit():
    from physid.errors import InputError
    from physid.vision.calibrate import parse_length

    assert parse_length("20mm") == pytest.approx(0.02)
    assert parse_length("2 cm") == pytest.approx(0.02)
    assert parse_length("0.02") == 0.02  # bare metres, where plausible (1 mm to 50 cm)
    with pytest.raises(InputError, match=r"--square 20: 20 m is not a plausible size; give the "
                       r"unit, e.g. --square 20mm"):  # fmt: skip
        parse_length("20")
    with pytest.raises(InputError, match="'s' is not a length"):
        parse_length("20s")
