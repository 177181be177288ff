"""Calibration of the independent footage's camera from a checkerboard MuJoCo rendered
(random board poses, not ``vision.render.board_poses``), slow (~1 min: 40 renders and the
fit). Issue 27 acceptance: fx, fy, cx, cy within 0.05 %."""

import numpy as np
import pytest
from mujoco_footage import CameraSetup, gl_problem, isolated

pytestmark = [
    pytest.mark.slow,
]


def test_independent_camera_intrinsics_within_0_05_percent(tmp_path):
    problem = gl_problem()
    if problem is not None:
        pytest.skip(problem)
    from physid.vision.calibrate import calibrate_video, detect_board

    setup = CameraSetup()
    video, corners = isolated("render_board_video", tmp_path, "board", n_frames=40)
    report = calibrate_video(video, (9, 6), 0.02, "fisheye")
    K, K0 = report.camera.K, np.array(setup.K)
    err = [K[0, 0] / K0[0, 0] - 1, K[1, 1] / K0[1, 1] - 1, K[0, 2] / K0[0, 2] - 1]
    err.append(K[1, 2] / K0[1, 2] - 1)
    print("fx fy cx cy error (%):", np.round(np.array(err) * 100, 4), "RMS", report.rms)
    assert np.abs(err).max() < 5e-4
    # the corners it found are unbiased against MuJoCo's truth: mean error over the views
    # within 0.05 px (a half-pixel convention slip, the cause suspected for the cy
    # +0.16 %, would show as 0.5 px in y)
    import cv2

    cap = cv2.VideoCapture(str(video))
    errors = []
    for truth in corners:
        ok, img = cap.read()
        found = detect_board(cv2.cvtColor(img, cv2.COLOR_BGR2GRAY), (9, 6))
        if found is not None:
            errors.append((found - truth).mean(axis=0))
    assert len(errors) >= 20
    print("mean corner error (px):", np.mean(errors, axis=0).round(4))
    assert np.abs(np.mean(errors, axis=0)).max() < 0.05
