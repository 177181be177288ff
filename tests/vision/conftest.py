"""Rendered test videos, made once per session in a tmp dir (real files, decoded by OpenCV).

Clips are short (0.25 s or less at 240 fps) to keep the vision tests within a couple of
minutes on two cores; the full-drop numbers are in the ``slow`` tests.
"""

import pytest

from physid.vision.camera import action_camera
from physid.vision.render import (
    DropRenderer,
    RenderOptions,
    default_view,
    drop_trajectory,
    render_drop,
)
from physid.vision.scene import default_scene

OCCLUDED = (0, 20, 5)  # marker 0 hidden in frames 20-24 of the sharp clip


@pytest.fixture(scope="session")
def occluded():
    """(marker, first frame, frames) of the sharp clip's occlusion."""
    return OCCLUDED


@pytest.fixture(scope="session")
def rig():
    camera = action_camera()
    scene = default_scene()
    view = default_view(camera, scene)
    return camera, scene, view, DropRenderer(view, scene), drop_trajectory(scene, v0=(0, 0, 2.0))


@pytest.fixture(scope="session")
def sharp_clip(rig, tmp_path_factory):
    """60 sharp frames (0.25 s) from the release, marker 0 occluded for 5 frames."""
    camera, scene, view, renderer, traj = rig
    path = tmp_path_factory.mktemp("vision") / "sharp.avi"
    opts = RenderOptions(exposure=0.0, occlusions=(OCCLUDED,), seed=1)
    return render_drop(path, view, scene, traj, 60, opts, renderer)


@pytest.fixture(scope="session")
def blur_clip(rig, tmp_path_factory):
    """36 frames around the first impact with a full 1/240 s exposure (up to ~20 px smear)."""
    camera, scene, view, renderer, traj = rig
    path = tmp_path_factory.mktemp("vision") / "blur.avi"
    opts = RenderOptions(exposure=1 / 240, blur_samples=12, start=0.09, seed=2)
    return render_drop(path, view, scene, traj, 36, opts, renderer)
