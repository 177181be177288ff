"""ArUco marker pose through the fisheye model against the rendered pose."""

import cv2
import numpy as np
import pytest

from physid.vision.aruco import detector, marker_poses, render_marker
from physid.vision.camera import action_camera

FACING = np.diag([1.0, -1.0, -1.0])  # marker z towards the camera, y up (OpenCV convention)


@pytest.mark.parametrize(
    "tilt, tvec",
    [([0.3, -0.2, 0.1], [0.05, 0.02, 0.25]), ([-0.5, 0.4, 2.0], [-0.15, 0.08, 0.22])],
)
def test_marker_pose_through_fisheye(tilt, tvec):
    cam = action_camera()
    R = cv2.Rodrigues(np.array(tilt))[0] @ FACING
    img = render_marker(cam, 7, 0.05, cv2.Rodrigues(R)[0].ravel(), tvec)
    poses = marker_poses(img, cam, 0.05, detector())
    assert [p.id for p in poses] == [7]
    p = poses[0]
    # corners refine to ~0.1 px on a ~150 px marker: ~0.5 mm / 0.5 deg for a single
    # 50 mm marker at 0.25 m. Skipping the undistortion or a mirrored frame gives cm / tens
    # of degrees, so these bounds catch the errors that matter.
    assert np.linalg.norm(p.tvec - tvec) < 1e-3
    dR = cv2.Rodrigues(cv2.Rodrigues(p.rvec)[0] @ R.T)[0]
    assert np.degrees(np.linalg.norm(dR)) < 1.0
    assert p.rms < 0.3
