"""The tracker's noise calibration and its use as the estimator's default noise (issue 27)."""

import numpy as np
import pytest

from physid.rigs.models.ellipse_drop import ipopt_settings, noise_origin, tracking_noise
from physid.spec import load_spec, with_overrides
from physid.vision.tracking import noise_scale


def test_noise_scale_recovers_the_true_factor():
    # distances whose real scatter is 3x what the model's std says: s = 3 to within the
    # median's sampling error (~7 % for 1000 frames), whatever the per-frame std
    rng = np.random.default_rng(0)
    std = rng.uniform(0.01e-3, 0.05e-3, 1000)
    dist = 0.05 + 3.0 * std * rng.standard_normal(1000)
    dist[::50] += 1e-3  # a few bad frames do not set it (median, not mean)
    scale, n = noise_scale(dist, std)
    assert n == 1000
    assert scale == pytest.approx(3.0, rel=0.1)
    assert noise_scale(dist[:5], std[:5]) == (1.0, 5)  # too few frames: no scaling


def test_estimator_noise_from_the_pose_file_unless_the_spec_sets_it(tmp_path):
    path = tmp_path / "poses.csv"
    rows = ["t,x,y,theta,std_x,std_y,std_theta,rigid_err,px_sigma,frame,valid"]
    rows += [f"{k / 240},0.1,0.2,0.3,3e-05,4e-05,0.001,0,0.1,{k},1" for k in range(10)]
    rows += ["0.05,nan,nan,nan,nan,nan,nan,nan,nan,10,0"]
    path.write_text("\n".join(rows) + "\n")
    ok = np.array([True] * 10 + [False])
    noise = tracking_noise(path, ok)
    assert noise == pytest.approx((np.sqrt((3e-5**2 + 4e-5**2) / 2), 1e-3))
    spec = load_spec("ellipse_drop")
    s = ipopt_settings(spec, noise)
    assert (s.sigma_pos, s.sigma_theta) == pytest.approx(noise)
    assert "tracker" in noise_origin(spec, noise)
    # a pose file without std columns (physid simulate): the paper's 1 mm / 1 mrad
    plain = tmp_path / "plain.csv"
    plain.write_text("t,x,y,theta\n0,0,0,0\n")
    assert tracking_noise(plain, np.array([True])) is None
    assert ipopt_settings(spec, None).sigma_pos == 1e-3
    # the spec's [method] wins, and the estimate says so
    own = with_overrides(spec, {"method.sigma_pos": "0.2 mm", "method.sigma_theta": "2 mrad"})
    s = ipopt_settings(own, noise)
    assert (s.sigma_pos, s.sigma_theta) == pytest.approx((2e-4, 2e-3))
    assert "spec" in noise_origin(own, noise)


def test_model_error_check_does_not_trust_a_degenerate_effective_parameter_count():
    from physid.rigs.models.ellipse_drop import MODEL_ERROR_LIMIT, model_error_factor

    # measured on the Coulomb-like MuJoCo drop (drop5c): one fit (chi^2 410 over 360
    # observations, mu 0.507), whose linearization counted n_eff = 359.5, 180 or 79 as its
    # pose times were rounded differently; s^2 = 411 sent it to a refit with 20x the noise
    # and mu came back as unidentified. Counted as at most n_obs / 2: 2.3, 2.3, 1.5
    for n_eff in (359.5, 180.1, 78.7):
        cov = {"n_obs": 360, "n_eff": n_eff, "residual_variance_factor": 410 / (360 - n_eff)}
        assert model_error_factor(410.0, cov) <= 410 / 180 < MODEL_ERROR_LIMIT
    # real model error still shows: the sample drop's IRC truth (s^2 = 284) as chi^2 / n
    # of 100 is over the limit for any n_eff
    for n_eff in (0.0, 50.0, 359.0):
        cov = {"n_obs": 360, "n_eff": n_eff, "residual_variance_factor": 36000 / (360 - n_eff)}
        assert model_error_factor(36000.0, cov) > MODEL_ERROR_LIMIT
    # a plain fit: chi^2 / (n_obs - n_eff) as in parameter_covariance
    cov = {"n_obs": 360, "n_eff": 40.0, "residual_variance_factor": 1.0}
    assert model_error_factor(320.0, cov) == pytest.approx(1.0)
    # no count at all (singular linearization): the covariance's own nan, no refit
    cov = {"n_obs": 360, "n_eff": float("nan"), "residual_variance_factor": float("nan")}
    assert not model_error_factor(320.0, cov) > MODEL_ERROR_LIMIT


def test_acceleration_std_is_the_blur_centroid_offset_of_a_constant_acceleration():
    from physid.vision.tracking import BLUR_ACCELERATION, acceleration_std

    # a parabola in every channel: second difference a (per frame^2) at every inner frame,
    # so the std is a / 24 there (a E^2 / 24 at the bound E = 1 frame), 0 at the ends
    k = np.arange(10, dtype=float)
    a = np.array([2e-4, -1e-4, 0.03])
    poses = 0.5 * a * k[:, None] ** 2 + [0.1, 0.2, 0.3]
    noise = np.zeros_like(poses)
    out = acceleration_std(poses, np.arange(10), noise)
    assert out[1:-1] == pytest.approx(np.broadcast_to(np.abs(a) / 24, (8, 3)), rel=1e-9)
    assert BLUR_ACCELERATION == pytest.approx(1 / 24)
    assert not out[[0, -1]].any()
    # a frame whose neighbour is missing (indices not consecutive) gets none
    frames = np.r_[0:5, 6:11]
    gap = acceleration_std(poses, frames, noise)
    assert not gap[[4, 5]].any() and gap[3, 0] > 0  # rows 4, 5: frames 4 and 6
    # the noise's own second difference (6 sigma^2) is taken out: a straight line with a
    # second difference at the noise level reports nothing
    line = np.zeros((5, 3))
    line[2] = 1e-5  # d2 = -2e-5 at frame 2, within sqrt(6) * 1e-5
    assert not acceleration_std(line, np.arange(5), np.full((5, 3), 1e-5)).any()
