"""Acceptance on a full drop (0.5 s, 120 frames of 1280x720 at 240 fps, fisheye), sharp
and with a full-frame exposure; slow (~30 s), run with ``pytest -m slow``.

The numbers measured here are quoted in docs/vision.md.
"""

import numpy as np
import pytest

from physid.vision.render import RenderOptions, load_truth, render_drop
from physid.vision.tracking import track_video

pytestmark = pytest.mark.slow


def _rms(err):
    return float(np.sqrt(np.mean(np.sum(err**2, axis=-1))))


@pytest.mark.parametrize("exposure, centre_tol", [(0.0, 0.1), (1 / 240, 0.3)])
def test_full_drop_acceptance(rig, tmp_path, exposure, centre_tol):
    camera, scene, view, renderer, traj = rig
    opts = RenderOptions(exposure=exposure, occlusions=((1, 70, 5),), seed=3)
    video = render_drop(tmp_path / "drop.avi", view, scene, traj, 120, opts, renderer)
    truth = load_truth(video)
    result = track_video(video, camera, scene)
    assert np.array_equal(result.missing, truth["hidden"])
    ok = ~result.missing
    centre = _rms((result.marker_px - truth["marker_px"])[ok])
    both = ~result.missing.any(axis=1)
    err = result.poses[both] - truth["poses"][both]
    pos, ang = _rms(err[:, :2]), float(np.sqrt(np.mean(err[:, 2] ** 2)))
    print(
        f"exposure {exposure:.5f} s: centres {centre:.3f} px, pos {pos * 1e3:.4f} mm, "
        f"angle {ang * 1e3:.3f} mrad"
    )
    assert centre <= centre_tol  # acceptance: 0.1 px sharp, 0.3 px blurred
    assert pos <= 0.3e-3  # acceptance: 0.3 mm
    assert ang <= 5e-3  # acceptance: 5 mrad
