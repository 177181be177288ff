"""The flexible loop filmed (rigs/models/loop_video.py, vision/markers3d.body_marker_frames)
and identified from the video through the camera model (identify_loop.identify_loop_video).

Default run: the markers' poses from the bodies' poses, and a rendered frame of the loop at
rest tracked back to the projection of its corner markers' forward kinematics. Slow: the
sample scenario's 1 s video rendered, tracked and fitted (κ within 2 % of the truth)."""

import jax.numpy as jnp
import numpy as np
import pytest
from rich.console import Console

import physid.dynamics  # noqa: F401  (float64)
from physid.estimation.markers import project
from physid.rigs.models import identify_loop as il
from physid.rigs.pipeline.run import loop_markers
from physid.spec import load_spec
from physid.vision.camera import action_camera
from physid.vision.markers3d import body_marker_frames, look_at, track_markers


def test_body_marker_frames_turn_and_move_with_the_body():
    # Body 1 turned by 90° about z and moved to (1, 2, 3) m: a marker 0.1 m along its x axis
    # faces its y axis, so it sits at (1, 2.1, 3) facing −x, top edge +z.
    Rz = np.array([[0.0, -1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    R = np.stack([np.eye(3), Rz])[None]
    p = np.array([[[0.0, 0.0, 0.0], [1.0, 2.0, 3.0]]])
    f = body_marker_frames(R, p, [1], [[0.1, 0.0, 0.0]], [[0.0, 2.0, 0.0]], [[0.0, 0.0, 1.0]])
    np.testing.assert_allclose(f.centres[0, 0], [1.0, 2.1, 3.0], atol=1e-15)
    np.testing.assert_allclose(f.normals[0, 0], [-1.0, 0.0, 0.0], atol=1e-15)
    np.testing.assert_allclose(f.ups[0, 0], [0.0, 0.0, 1.0], atol=1e-15)


@pytest.fixture(scope="module")
def loop():
    spec = load_spec("hexagon_loop")
    markers, table = loop_markers(spec)
    return spec, il.rig_of(spec), markers, table


def test_rest_frame_tracks_to_the_projected_corners(loop, tmp_path):
    from physid.rigs.models.loop_video import render_loop_video
    from physid.rigs.pipeline.sample import LOOP

    spec, rig, markers, table = loop
    q = np.zeros((2, rig.system.n_dof))  # two frames of the rest shape
    camera = action_camera(800, 600)
    R_cw, t_cw = look_at(LOOP.camera_eye, LOOP.camera_target, up=(0.0, 0.0, 1.0))
    video = tmp_path / "rest.avi"
    truth = render_loop_video(video, rig, table, q, camera, R_cw, t_cw, 100.0)
    assert truth["in_view"].all()
    tracks = track_markers(video, camera, table.ids, table.side, dictionary=table.dictionary)
    assert not tracks.missing.any()
    # The fit's model of a pixel: the corner markers' forward kinematics projected by
    # estimation.markers (JAX, OpenCV's fisheye): equal to the renderer's OpenCV projection.
    world = il.marker_positions(rig, markers, jnp.zeros(rig.system.n_dof))
    xc = world @ jnp.asarray(R_cw).T + jnp.asarray(t_cw)
    model = np.asarray(project("fisheye", xc, jnp.asarray(camera.K), jnp.asarray(camera.D)))
    np.testing.assert_allclose(model, truth["centre_px"][0], atol=1e-9)
    # Sharp 18–27 px markers with 1 grey level of noise: the tracker's centres are within
    # 0.1 px (the spec's [video] noise) of the truth; 0.3 px bounds every one of them.
    err = tracks.uv - truth["centre_px"]
    assert np.sqrt(np.mean(err**2)) < 0.1 and np.abs(err).max() < 0.3
    # PnP on the rest frame gives the camera pose the fit starts from.
    rvec, t = il.camera_pose_at_rest(rig, markers, camera, tracks.uv[0], ~tracks.missing[0], "x")
    R = np.asarray(il.rotation(jnp.asarray(rvec)))
    np.testing.assert_allclose(R, R_cw, atol=2e-3)  # rad: a frame of 0.1 px noise
    np.testing.assert_allclose(t, t_cw, atol=5e-3)  # m at 1 m range


@pytest.mark.slow
def test_kappa_from_the_sample_video_within_2_percent(loop, tmp_path):
    from physid.rigs.pipeline.sample import write_loop

    spec, rig, markers, table = loop
    written = write_loop(tmp_path, Console(quiet=True))
    from physid.vision.camera import Camera

    camera = Camera.load(written["loop camera"])
    tracks = track_markers(
        written["loop video"], camera, table.ids, table.side, dictionary=table.dictionary
    )
    est = il.identify_loop_video(
        spec, markers, camera, tracks.t, tracks.uv, tracks.missing, "loop.mp4"
    )
    assert est.converged and est.verdict == "good fit"
    for name, true in zip(rig.parameter_names, rig.true_kappa(), strict=True):
        p = est.parameters[name]
        # The bar for the sample: 2 %; and the error within 3 reported std.
        assert abs(p.value / true - 1) < 0.02, (name, p.value)
        assert abs(p.value - true) <= 3 * p.std, (name, p.value, p.std)
