"""Camera models, centre estimator and world geometry on exact synthetic numbers."""

import json

import cv2
import numpy as np
import pytest

from physid.vision.camera import CalibrationError, Camera, action_camera, pinhole_camera
from physid.vision.circles import disk_bias, weighted_centre
from physid.vision.world import body_pose, match_corners, pixels_to_world, plane_pose, pose_std


@pytest.mark.parametrize("make", [action_camera, pinhole_camera])
def test_project_normalize_round_trip(make):
    cam = make()
    rng = np.random.default_rng(0)
    px = rng.uniform([5, 5], [cam.size[0] - 5, cam.size[1] - 5], (200, 2))
    n = cam.normalize(px)
    back = cam.project(np.column_stack([n, np.ones(len(n))]))
    assert np.abs(back - px).max() < 1e-6


def test_camera_json_round_trip_and_errors(tmp_path):
    cam = action_camera()
    path = cam.save(tmp_path / "camera.json")
    raw = json.loads(path.read_text())
    assert set(raw) >= {"model", "K", "D", "width", "height"}
    again = Camera.load(path)
    assert np.array_equal(again.K, cam.K) and np.array_equal(again.D, cam.D)
    bad = tmp_path / "bad.json"
    bad.write_text('{"model": "fisheye"}')
    with pytest.raises(CalibrationError, match="bad.json"):
        Camera.load(bad)


def _disk_image(cx, cy, r, size=64, ss=8):
    # supersampled anti-aliased disk (independent of the renderer's analytic coverage)
    y, x = np.mgrid[0 : size * ss, 0 : size * ss]
    x = (x + 0.5) / ss - 0.5
    y = (y + 0.5) / ss - 0.5
    inside = ((x - cx) ** 2 + (y - cy) ** 2 <= r * r).astype(float)
    cov = inside.reshape(size, ss, size, ss).mean(axis=(1, 3))
    return 220 - 190 * cov


def test_weighted_centre_is_unbiased_on_a_disk():
    for cx, cy in [(31.3, 30.71), (32.5, 29.25), (30.0, 33.9)]:
        img = _disk_image(cx, cy, 9.0)
        c = weighted_centre(img.astype(np.uint8).astype(float), (20, 19, 24, 24))
        # uint8 quantisation limits this to ~0.01 px
        assert abs(c.x - cx) < 0.02 and abs(c.y - cy) < 0.02


def test_disk_bias_zero_head_on_and_nonzero_oblique():
    cam = Camera("pinhole", [[800, 0, 320], [0, 800, 240], [0, 0, 1]], [0, 0, 0, 0, 0], (640, 480))
    head_on = disk_bias(cam, np.zeros(3), np.array([0, 0, 0.5]), np.zeros((1, 2)), 0.01)
    assert np.abs(head_on).max() < 1e-6
    tilted = disk_bias(
        cam, np.array([0.6, 0, 0]), np.array([0.05, 0.03, 0.4]), np.zeros((1, 2)), 0.01
    )
    assert np.abs(tilted).max() > 0.05


def test_plane_pose_recovers_the_plane_and_world_points():
    cam = action_camera()
    R = cv2.Rodrigues(np.array([3.0, 0.1, -0.05]))[0]
    t = np.array([-0.2, 0.1, 0.2])
    world = np.array([[0, 0], [0.4, 0], [0.4, 0.24], [0, 0.24]])
    px = cam.project(np.column_stack([world, np.zeros(4)]), cv2.Rodrigues(R)[0], t)
    pose = plane_pose(cam.normalize(px), world)
    assert np.abs(pose.R - R).max() < 1e-6 and np.abs(pose.t - t).max() < 1e-6
    probe = np.array([[0.13, 0.07], [0.31, 0.2]])
    probe_px = cam.project(np.column_stack([probe, np.zeros(2)]), pose.rvec, pose.t)
    assert np.abs(pixels_to_world(cam, pose, probe_px) - probe).max() < 1e-7  # m
    # identification of the corner circles among other blobs
    extra = np.vstack([cam.normalize(px), [[0.0, 0.0], [0.1, -0.1]]])
    order = match_corners(extra[[4, 2, 0, 5, 1, 3]], world)
    assert order.tolist() == [2, 4, 1, 5]


def test_body_pose_inverts_marker_placement():
    markers = np.array([[-0.025, 0.0], [0.025, 0.0]])
    q = np.array([[0.1, 0.2, 0.3], [0.0, -0.1, -1.2], [0.05, 0.05, 3.0]])
    c, s = np.cos(q[:, 2]), np.sin(q[:, 2])
    R = np.stack([np.stack([c, -s], -1), np.stack([s, c], -1)], 1)
    world = q[:, None, :2] + np.einsum("nij,mj->nmi", R, markers)
    assert np.abs(body_pose(world, markers) - q).max() < 1e-12


def test_pose_std_matches_monte_carlo():
    cam = action_camera()
    R = cv2.Rodrigues(np.array([3.1, 0.0, 0.0]))[0]
    t = np.array([-0.2, 0.12, 0.19])
    world = np.array([[0, 0], [0.4, 0], [0.4, 0.24], [0, 0.24]])
    px4 = cam.project(np.column_stack([world, np.zeros(4)]), cv2.Rodrigues(R)[0], t)
    pose = plane_pose(cam.normalize(px4), world)
    markers = np.array([[-0.025, 0.0], [0.025, 0.0]])
    mw = np.array([[0.175, 0.12], [0.225, 0.12]])
    mpx = cam.project(np.column_stack([mw, np.zeros(2)]), pose.rvec, pose.t)
    sigma = 0.1
    std = pose_std(cam, pose, mpx[None], np.array([[sigma, sigma]]), markers)[0]
    rng = np.random.default_rng(0)
    noisy = mpx[None] + rng.normal(0, sigma, (4000, 2, 2))
    w = pixels_to_world(cam, pose, noisy.reshape(-1, 2)).reshape(-1, 2, 2)
    mc = body_pose(w, markers).std(axis=0)
    np.testing.assert_allclose(std, mc, rtol=0.08)
