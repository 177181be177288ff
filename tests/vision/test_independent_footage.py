"""Tracking on footage physid did not draw (MuJoCo physics and OpenGL renderer, fisheye
remap, grey bar with the ground circles on it, lighting gradient, vignetting, gamma, motion
blur in linear light, sensor noise, H.264): a short clip (0.1 s through the first bounce)
committed in ``tests/data/independent/`` (``mujoco_footage.SHORT``; rendering it takes
minutes on a shared CPU). A slow test renders it afresh.

The three full drops of the acceptance (identification of J/m and mu) are in
``test_independent_drops.py`` (slow).
"""

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from mujoco_footage import SHORT, CameraSetup, Rig, gl_problem, isolated

DATA = Path(__file__).parents[1] / "data" / "independent"


def require_gl():
    """Skip, saying why, where MuJoCo cannot render offscreen (checked in a subprocess)."""
    problem = gl_problem()
    if problem is not None:
        pytest.skip(problem)


def _rms(err):
    return float(np.sqrt(np.mean(err**2)))


@pytest.fixture(scope="module")
def clip():
    """24 frames (0.1 s) from 50 ms after release, through the first bounce on the bar:
    a dark sheet (reflectance 0.3, grey ~80 at the centre, ~50 in the vignetted corners)
    with the bar (0.42) lighter than it, H.264 at crf 28."""
    from physid.vision.camera import Camera

    return SimpleNamespace(
        path=DATA / "short.mp4",
        spec=DATA / "short.toml",
        camera=Camera.load(DATA / "short.camera.json"),
        truth=dict(np.load(DATA / "short.truth.npz")),
    )


@pytest.fixture(scope="module")
def tracked(clip):
    from physid.spec import load_spec
    from physid.vision.scene import scene_from_spec
    from physid.vision.tracking import track_video

    scene = scene_from_spec(load_spec(clip.spec))
    return track_video(clip.path, clip.camera, scene), scene


def test_pinhole_principal_point_convention():
    require_gl()
    # the fisheye remap assumes MuJoCo's pinhole principal point at (W/2 - 1/2, H/2 - 1/2)
    # in OpenCV's pixel convention; a lone dark disk on the optical axis must land there
    # (0.05 px: a 20-px disk's anti-aliased centroid is exact to ~0.01 px, the half-pixel
    # error this guards against is 10x that)
    dx, dy = isolated("disk_centroid_offset")
    assert abs(dx) < 0.05 and abs(dy) < 0.05


def test_every_frame_tracked_on_independent_footage(tracked):
    result, _ = tracked
    assert not result.missing.any()


def test_static_circles_on_the_bar_and_corners_found(clip, tracked):
    result, _ = tracked
    truth = clip.truth
    # the ground circles sit on a grey bar; the reference circles in vignetted corners of
    # a dark sheet (8-bit contrast ~30 levels). 0.25 px: measured up to 0.18 px here (H.264
    # repeats a static scene's artefacts, so the 10-frame average does not shrink them;
    # MuJoCo's 4x multisampling alone leaves ~0.04 px); before issue 27 the corner and bar
    # circles were not found at all on such a sheet and bar
    assert np.abs(result.reference_px - truth["reference_px"]).max() < 0.25
    assert np.abs(result.ground_px - truth["ground_px"]).max() < 0.25


def test_poses_within_acceptance_on_independent_footage(clip, tracked):
    result, _ = tracked
    err = result.poses - clip.truth["poses"]
    # issue 27 acceptance: x, y within 0.1 mm RMS and theta within 2 mrad RMS
    assert _rms(err[:, 0]) < 0.1e-3
    assert _rms(err[:, 1]) < 0.1e-3
    assert _rms(err[:, 2]) < 2e-3


def test_reported_std_matches_the_real_error(clip, tracked):
    result, _ = tracked
    err = result.poses - clip.truth["poses"]
    # RMS error over RMS reported std, each of x, y, theta. Factor 2 here: 24 frames give
    # the RMS error only to ~+-15 % and the video's noise scale (from the marker distance's
    # scatter over the same 24 frames) to ~+-20 %, and most of the position error is the
    # plane pose's, one draw per video; issue 27's factor 1.5 is checked on the 120-frame
    # drops (test_independent_drops.py). Measured 1.46, 1.35, 1.62; before issue 27 the
    # std was 3-5x too small on H.264 footage (and 4.8-10.8x on these clips)
    for k in range(3):
        ratio = _rms(err[:, k]) / _rms(result.pose_std[:, k])
        assert 1 / 2 < ratio < 2, (k, ratio)


def test_ground_is_a_segment_of_the_bar(clip, tracked):
    result, scene = tracked
    rig = Rig()
    # the contact surface starts at the bar's left end and is as long as the bar; 0.3 mm
    # and 1 mrad: the ground circles' centres are good to ~0.03 mm each, over 0.36 m
    assert np.linalg.norm(result.ground_p0 - np.array(rig.bar_start)) < 0.3e-3
    assert abs(result.ground_length - rig.bar_length) < 0.3e-3
    assert abs(result.ground_alpha - rig.bar_alpha) < 1e-3
    assert result.stream().source["ground_length"] == pytest.approx(result.ground_length)


def test_rig_and_camera_are_what_the_spec_says():
    # guards the test footage itself: the spec written beside a clip describes its rig
    rig, setup = Rig(), CameraSetup()
    assert setup.camera().size == (1280, 720)
    assert np.allclose(
        rig.ground_dots()[1] - rig.ground_dots()[0], (rig.bar_length - 0.06) * rig.tangent
    )


@pytest.mark.slow
def test_freshly_rendered_clip_tracks_like_the_committed_one(tmp_path, clip):
    require_gl()
    from physid.spec import load_spec
    from physid.vision.scene import scene_from_spec
    from physid.vision.tracking import track_video

    name, mu, look, n, start = SHORT
    fresh = isolated("render_drop", tmp_path, name, mu, look, n_frames=n, start=start)
    np.testing.assert_allclose(
        fresh.truth["poses"], clip.truth["poses"], atol=1e-6
    )  # m, rad: MuJoCo versions may differ in the last bits
    result = track_video(fresh.path, fresh.camera, scene_from_spec(load_spec(fresh.spec)))
    assert not result.missing.any()
    err = result.poses - fresh.truth["poses"]
    assert _rms(err[:, 0]) < 0.1e-3 and _rms(err[:, 1]) < 0.1e-3 and _rms(err[:, 2]) < 2e-3


def _contact(mu: float, coulomb: bool):
    """(f_n, |f_t|, slip) per MuJoCo step in contact of the default throw (~0.2 s)."""
    import mujoco
    from mujoco_footage import CameraSetup, Look, Throw, contact_record, mjcf

    model = mujoco.MjModel.from_xml_string(mjcf(Rig(), Look(), CameraSetup(), mu, coulomb))
    _, fn, ft, slip = contact_record(model, Throw()).T
    live = fn > 0.5  # N: the drop's weight is 0.63 N; lighter rows are a contact's fringes
    return fn[live], ft[live], slip[live]


def test_mujoco_friction_is_coulombs_only_with_the_fast_friction_reference():
    # The committed clips use MuJoCo's default contact: through the mu = 0.5 drop's impacts
    # the contact slips *inside* the cone (the reason its mu is read as 0.449). Force-
    # weighted |f_t|/f_n over the slipping steps: measured 0.34; Coulomb's law says 0.5
    fn, ft, slip = _contact(0.5, coulomb=False)
    slipping = slip > 0.01  # m/s: 40 um per frame at 240 fps, 20x the inside-cone creep below
    assert ft[slipping].sum() / fn[slipping].sum() < 0.8 * 0.5
    # mjcf(coulomb=True): the friction rows' own 0.2 ms reference makes it Coulomb's law:
    # slipping contact on the cone (measured to 1e-8 relative) and contact inside the
    # cone creeping at most 0.7 mm/s (3 um per frame, a tenth of the tracking noise)
    for mu in (0.2, 0.5):
        fn, ft, slip = _contact(mu, coulomb=True)
        slipping = slip > 0.01
        assert slipping.sum() >= 10  # the default throw slides on landing
        np.testing.assert_allclose(ft[slipping] / fn[slipping], mu, rtol=1e-4)
        assert np.all(ft <= mu * fn * (1 + 1e-4))
        inside = ft < 0.99 * mu * fn
        assert inside.sum() >= 100 and slip[inside].max() < 1e-3
