"""Marker pixels on the LM grid (rigs.pipeline.fusion.markers_on_grid): each camera frame lands on
the nearest encoder-clock step and is moved to that step's time by the encoders' motion."""

import numpy as np

from physid.rigs.pipeline.fusion import CameraPose, markers_on_grid
from physid.rigs.pipeline.sync import SyncResult
from physid.vision.camera import action_camera


def test_frames_land_on_steps_with_the_motion_to_the_step_time_removed():
    camera = action_camera()
    pose = CameraPose(np.eye(3), np.array([0.0, 0.0, 0.5]))
    omega = 3.0  # rad/s: a marker on a 0.1 m arm turning in front of the camera

    def positions(a):
        return np.stack([0.1 * np.cos(a[:, 0]), 0.1 * np.sin(a[:, 0]), 0 * a[:, 0]], axis=1)[
            :, None, :
        ]

    t_enc = np.arange(0.0, 2.0, 1e-3) + 100.0  # board clock
    angles = (omega * (t_enc - 100.0))[:, None]
    offset = 100.0 + 0.2 + 0.37e-3  # frames fall 0.37 ms off the 1 ms grid
    t_video = np.arange(0.0, 1.5, 1 / 120)
    true = camera.project(positions(omega * (t_video + 0.2 + 0.37e-3)[:, None]).reshape(-1, 3),
                          np.zeros(3), pose.t_cw).reshape(-1, 1, 2)  # fmt: skip
    missing = np.zeros((len(t_video), 1), bool)
    missing[10] = True
    sync = SyncResult(offset, 1e-5, 0.0, 1e-6, 1.0, 1.0, 0.1, True, "ok")
    grid = t_enc  # covers every frame (frames outside the grid would be dropped)
    uv, w = markers_on_grid(grid, sync, t_video, true, missing, t_enc, angles, positions,
                            camera, pose, 0.5)  # fmt: skip
    on = w[:, 0] > 0
    assert on.sum() == len(t_video) - 1  # every frame but the hidden one, none invented
    assert np.all(w[on, 0] == 1 / 0.25)  # 1/σ² px⁻²
    # What lands on step k is where the marker is at the step's time: the encoder-predicted
    # motion over the 0.37 ms gap (~0.1 m * 3 rad/s * 0.37 ms ≈ 0.1 mm ≈ 0.1 px) is removed.
    expected = camera.project(positions(angles[on]).reshape(-1, 3), np.zeros(3),
                              pose.t_cw)  # fmt: skip
    # 1e-6 px: the encoder angles here are exact, so only linear interpolation between the
    # 1 ms encoder samples remains (second order in ω h), far below tracking noise.
    assert np.max(np.abs(uv[on, 0] - expected)) < 1e-6
