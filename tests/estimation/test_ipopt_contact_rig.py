"""The ellipse drop rig around the IPOPT estimator: pose CSVs, simulate, refusals."""

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from rich.console import Console

from physid.errors import InputError
from physid.rigs.models.ellipse_drop import NotIdentifiableInput, identify, read_pose_csv, simulate
from physid.rigs.models.kinds import SimulateOptions, kind_module
from physid.spec import load_spec, with_overrides

QUIET = Console(quiet=True)


def test_pose_csv_marks_empty_fields_missing_and_ignores_extra_columns(tmp_path):
    path = tmp_path / "poses.csv"
    path.write_text("t,x,y,theta,std_x\n0,0.1,0.2,0.3,0.001\n0.01,,0.2,0.3,\n0.02,0.1,0.2,0.3,\n")
    s = read_pose_csv(path)
    assert s.channels == ("x", "y", "theta")
    np.testing.assert_array_equal(s.missing[:, 0], [False, True, False])
    assert not s.missing[:, 1:].any()


def test_pose_csv_errors_name_file_and_line(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("t,x,y,theta\n0,0.1,0.2,0.3\n0.01,abc,0.2,0.3\n")
    with pytest.raises(InputError, match=r"bad\.csv:3"):
        read_pose_csv(path)
    path.write_text("t,x,y\n0,1,2\n")
    with pytest.raises(InputError, match="lacks theta"):
        read_pose_csv(path)


def test_simulate_writes_poses_impulses_and_truth(tmp_path):
    spec = with_overrides(load_spec("ellipse_drop"), {"mu": "0.4", "fps": "120"})
    assert kind_module(spec).__name__ == "physid.rigs.models.ellipse_drop"
    written = simulate(spec, SimulateOptions(tmp_path, duration=0.3, noise=0.0), QUIET)
    truth = json.loads(written["truth"].read_text())
    assert truth["J_over_m"] == pytest.approx(756e-6)
    assert truth["mu"] == 0.4
    poses = read_pose_csv(written["poses"])
    assert len(poses) == 37  # 0.3 s at 120 fps, both ends included
    np.testing.assert_allclose(np.diff(poses.t), 1 / 120, rtol=1e-9)
    imp = np.loadtxt(written["impulses"], delimiter=",", skiprows=1)
    assert imp[:, 1].max() > 0  # the throw of Section 6.1 hits the ground within 0.3 s


def test_identify_refuses_free_flight_with_reason(tmp_path):
    spec = load_spec("ellipse_drop")
    t = np.arange(0, 0.2, 1 / 120)
    path = tmp_path / "flight.csv"
    rows = ["t,x,y,theta"] + [f"{ti},{0.1 * ti},{1.0 - 4.9 * ti**2},0.2" for ti in t]
    path.write_text("\n".join(rows) + "\n")
    with pytest.raises(NotIdentifiableInput, match="cannot be identified.*never touches"):
        identify(spec, [path], tmp_path / "out", QUIET)
    assert not (tmp_path / "out" / "estimate.json").exists()


def test_identify_skips_incomplete_frames_rather_than_inventing_them(tmp_path):
    # 10 frames, 4 with an empty field: only 6 valid frames remain, below the minimum of 8,
    # so the refusal proves the incomplete ones were dropped, not filled in.
    spec = load_spec("ellipse_drop")
    rows = ["t,x,y,theta"]
    for i in range(10):
        x = "" if i % 3 == 1 or i == 9 else "0.0"
        rows.append(f"{i / 120},{x},0.03,0.0")
    path = tmp_path / "gappy.csv"
    path.write_text("\n".join(rows) + "\n")
    with pytest.raises(NotIdentifiableInput, match="only 6 valid frames"):
        identify(spec, [path], tmp_path / "out", QUIET)


def _track_csv(tmp_path, mu: float, duration: float, fps: int, drop: tuple[int, ...]):
    """A pose CSV as ``physid track`` writes it (quality columns, nan rows, sidecar with the
    ground line measured from the video), from an IRC simulation with 1 mm noise."""
    from physid.streams import Stream
    from physid.vision.posefile import write_pose_csv
    from physid.vision.tracking import POSE_CHANNELS, POSE_UNITS

    spec = with_overrides(load_spec("ellipse_drop"), {"mu": str(mu), "fps": str(fps)})
    sim = simulate(spec, SimulateOptions(tmp_path / "sim", duration=duration, seed=3), QUIET)
    poses = read_pose_csv(sim["poses"])
    n = len(poses)
    values = np.column_stack([poses.values, np.full((n, 3), 1e-3), np.zeros(n), np.full(n, 0.2)])
    missing = np.zeros(values.shape, bool)
    missing[list(drop)] = True
    values[missing] = np.nan
    source = {"file": "drop.mp4", "ground_p0": [0.0, 0.0], "ground_alpha": 0.0}
    stream = Stream(poses.t, values, POSE_CHANNELS, POSE_UNITS, missing, source)
    return write_pose_csv(tmp_path / "track" / "poses.csv", stream, np.arange(n))


def test_identify_track_csv_writes_std_extra_and_no_slip_mu_bound(tmp_path):
    # mu = 0.9: the Section 6.1 throw never slides (truth: 0 sliding steps), so mu is not
    # identifiable and must be reported as a lower bound without a std, while J/m (from the
    # angular-velocity jumps at the impacts, eq. 31) is identified with a finite std.
    path = _track_csv(tmp_path, mu=0.9, duration=0.4, fps=120, drop=(20, 31))
    out = tmp_path / "id"
    # The linearized covariance (the default's bootstrap is the next test's)
    base = load_spec("ellipse_drop")
    spec = replace(base, method={**base.method, "covariance": "linearized"})
    est = identify(spec, [path], out, QUIET)
    data = json.loads((out / "estimate.json").read_text())
    jm, mu = data["parameters"]["J_over_m"], data["parameters"]["mu"]
    # Goal of the issue: 5 % at >= 120 fps; and the error is within 4 reported std.
    assert abs(jm["value"] / 756e-6 - 1) < 0.05
    assert jm["std"] > 0 and abs(jm["value"] - 756e-6) < 4 * jm["std"]
    assert not mu["identifiable"] and mu["std"] is None
    assert data["identifiability"]["covariance"]["std_reliable"]
    ident_mu = data["identifiability"]["mu"]
    assert ident_mu["sliding_steps"] == 0
    assert mu["value"] == pytest.approx(ident_mu["lower_bound"])
    assert "bounded below" in ident_mu["note"]
    # Ground line taken from the tracker's sidecar, and the two nan rows skipped.
    assert "video" in data["settings"]["ground"]
    assert data["settings"]["frames_skipped_missing"] == 2
    # extra: plain lists a report can plot, with consistent lengths.
    extra = est.extra
    n_fine = len(extra["t"])
    for key in ("x", "y", "theta", "vx", "vy", "omega"):
        assert isinstance(extra[key], list) and len(extra[key]) == n_fine
    for key in ("impulse_t", "cn", "ct", "lambda"):
        assert isinstance(extra[key], list) and len(extra[key]) == n_fine - 1
    n_frames = 49 - 2  # 0.4 s at 120 fps, both ends, minus the two dropped frames
    for key in ("frame_t", "frame_x", "frame_y", "frame_theta"):
        assert isinstance(extra[key], list) and len(extra[key]) == n_frames
    assert max(extra["cn"]) > 0.1  # N s: the first impact, m * ~4.5 m/s at 64 g is 0.29
    # The output error is refused on this throw: its free run (IRC sub-stepped at ~59 us,
    # from the fastest point's speed) cannot follow frames made by IRC at 1/1200 s, and
    # its chi^2 shows it (measured s^2 3.12 on 141 observations; chi^2's 99.9 % point is
    # 1.42). Under the former limit 4 it was kept with restitution 0.2108 +- 0.00043, 25 std
    # off. The frames' own restitution is reported (measured 0.2102 +- 0.045); 3 std.
    oe = data["identifiability"]["output_error"]
    assert not oe["accepted"] and oe["residual_variance_factor"] > oe["s2_limit"], oe
    eps = data["parameters"]["restitution"]
    assert abs(eps["value"] - 0.2) < 3 * eps["std"], eps
    # estimate.json says which covariance gave the std, and that the model-error allowance
    # widened J/m's alone (mu is a lower bound here)
    assert extra["covariance"]["used"] == "linearized"
    assert extra["covariance"]["model_error_allowance"]["J_over_m"] >= 0
    assert "The std of J/m also includes" in data["validation"]["std_covers"]
    assert extra["covariance"]["bootstrap_requested"] is False
    # estimate.json's covariance gives the reported std (J/m's widened by the allowance),
    # and no variance or covariance for mu, a lower bound
    cov = data["covariance"]
    assert cov[0][0] == pytest.approx(jm["std"] ** 2, rel=1e-12)
    assert cov[1][1] is None and cov[0][1] is None and cov[1][0] is None


def test_the_reported_covariance_is_its_sources_correlation_at_the_reported_std():
    from physid.rigs.models.ellipse_drop import reported_covariance

    # the source's std 2 and 0.01 with correlation -0.6, the reported std widened to 3 and
    # 0.05: the correlation stays, the diagonal is the reported std squared
    source = np.array([[4.0, -0.6 * 2 * 0.01], [-0.6 * 2 * 0.01, 1e-4]])
    out = reported_covariance(source, [3.0, 0.05])
    np.testing.assert_allclose(np.diag(out), [9.0, 0.0025], rtol=1e-14)
    assert out[0, 1] == out[1, 0] == pytest.approx(-0.6 * 3 * 0.05, rel=1e-14)
    # a parameter with no std (mu a lower bound): infinite variance, no covariance
    out = reported_covariance(source, [3.0, np.inf])
    assert out[0, 0] == 9.0 and out[1, 1] == np.inf and np.isnan(out[0, 1])
    # a source with no finite variance (too few refits): the reported std, no correlation
    out = reported_covariance(np.full((2, 2), np.inf), [3.0, 0.05])
    np.testing.assert_allclose(np.diag(out), [9.0, 0.0025])
    assert np.isnan(out[0, 1])


def test_no_slip_throw_identifies_j_over_m_with_a_sharp_bootstrap_std(tmp_path):
    # J/m is identified from the angular-velocity jumps at the impacts (eq. 31) even where
    # nothing slides; 5 % of its value is twice the error the fit makes (1.5 %). The
    # linearized covariance of this fit blows up (J/m 745 mm^2 with std 521 mm^2, truth 756:
    # degenerate complementarity rows, docs/planar-contact.md "Uncertainty"); the parametric
    # bootstrap's refits spread by ~13 mm^2. Eight refits (the fewest a std is taken from is
    # 6) keep the test short; the spread of 8 is within ~40 % of the std at 95 %, and the
    # assertions below hold with 2.5x margin either way. The model-error allowance is off
    # here, to see the bootstrap's own std: on this throw it widens J/m's to 42 mm^2
    # (measured), a noise-free fit of IRC's run at the fitted values being ~40 mm^2 off.
    path = _track_csv(tmp_path, mu=0.9, duration=0.4, fps=120, drop=(20, 31))
    out = tmp_path / "id"
    base = load_spec("ellipse_drop")
    method = {"covariance": "bootstrap", "bootstrap_draws": 8, "model_error": False}
    spec = replace(base, method={**base.method, **method})
    identify(spec, [path], out, QUIET)
    data = json.loads((out / "estimate.json").read_text())
    jm = data["parameters"]["J_over_m"]
    assert jm["identifiable"] and jm["std"] < 0.05 * jm["value"]
    # ... and the std covers the error (the error is 1.5 %, 11 mm^2; 3 std, as issue 24's
    # sample-folder acceptance asks)
    assert abs(jm["value"] - 756e-6) < 3 * jm["std"]
    used = data["extra"]["covariance"]
    assert used["used"] == "bootstrap" and used["draws"] == 8 and used["draws_succeeded"] >= 6
    assert "parametric bootstrap" in data["validation"]["std_covers"]
    assert "bootstrap" in data["identifiability"]["covariance_source"]
    boot = data["identifiability"]["covariance"]["bootstrap"]
    # The reported J/m is the bootstrap's bias-corrected value, 2 fit - median of the refits,
    # with the refits' spread x sqrt(1 + pi / (2 * 8)) (the median's own Monte Carlo error)
    # as its std; the fit itself is kept beside it.
    fix = used["bias_correction"]
    assert len(boot["draws"]) == 8 and fix["applied"] == {"J_over_m": True, "mu": False}
    fit_jm, n = fix["uncorrected"]["J_over_m"], used["draws_succeeded"]
    assert fit_jm == pytest.approx(data["identifiability"]["nlp_values"]["J_over_m"])
    if n == 8:  # (a failed refit's draw is in the list too, as NaN)
        median = float(np.median([d[0] for d in boot["draws"]]))
        assert jm["value"] == pytest.approx(2 * fit_jm - median)
    assert jm["std"] == pytest.approx(boot["std"][0] * np.sqrt(1 + np.pi / (2 * n)))
    assert data["covariance"][0][0] == pytest.approx(jm["std"] ** 2, rel=1e-12)
    # mu is a lower bound here: not corrected, no std
    assert data["parameters"]["mu"]["value"] == pytest.approx(
        data["identifiability"]["mu"]["lower_bound"]
    )


def test_covariance_choice_refuses_unknown_methods_and_too_few_draws():
    from physid.rigs.models.ellipse_drop import covariance_choice

    base = load_spec("ellipse_drop")
    # the bootstrap by default (the linearized std is erratic on this NLP: docs/validation.md)
    assert covariance_choice(base).method == "bootstrap" and covariance_choice(base).draws == 20
    for bad, match in (
        ({"covariance": "jackknife"}, "not a covariance"),
        ({"covariance": "bootstrap", "bootstrap_draws": 3}, "whole number of refits >= 6"),
        ({"covariance": "bootstrap", "bootstrap_draws": 10.5}, "whole number of refits"),
        ({"covariance": "bootstrap", "bootstrap_seed": -1}, "bootstrap_seed"),
    ):
        with pytest.raises(InputError, match=match):
            covariance_choice(replace(base, method={**base.method, **bad}))


def test_identify_fits_only_the_manifest_window(tmp_path):
    # an experiment's `window` (experiments.toml) cuts the pose file before the fit: the
    # 0.3 s simulated drop touches the ground until ~80 ms and from 166 ms on; between them
    # it flies (12-22 mm above the ground over 105-150 ms: 11 frames at 240 fps), so a refusal
    # for that window
    # proves the frames outside it were left out
    spec = with_overrides(load_spec("ellipse_drop"), {"fps": "240"})
    sim = simulate(spec, SimulateOptions(tmp_path / "sim", duration=0.3, noise=0.0), QUIET)
    imp = np.loadtxt(sim["impulses"], delimiter=",", skiprows=1)
    hits = imp[imp[:, 1] > 0, 0]
    assert hits.min() < 0.05 and hits.max() > 0.2 and not np.any((hits > 0.1) & (hits < 0.16))
    with pytest.raises(NotIdentifiableInput, match="never touches the ground in this window"):
        identify(spec, [sim["poses"]], tmp_path / "out", QUIET, window=(0.105, 0.15))
    with pytest.raises(InputError, match=r"the window 0\.5-0\.6 s holds no frame"):
        identify(spec, [sim["poses"]], tmp_path / "out", QUIET, window=(0.5, 0.6))


def test_ground_surfaces_from_the_spec_reach_the_contact_geometry(tmp_path):
    from physid.rigs.models.ellipse_drop import contact_geometry, rig_geometry
    from physid.spec import load_spec as load

    text = (Path(__file__).parents[2] / "rigs" / "specs" / "ellipse_drop.toml").read_text()
    floor = (
        "\n[[ground.surface]]\n"
        'start = { value = [-1000, -100], unit = "mm" }\n'
        'angle = { value = 0, unit = "rad" }\n'
        'length = { value = 3, unit = "m" }\n'
    )
    path = tmp_path / "two.toml"
    path.write_text(text + floor)
    spec = load(path)
    _, ground = rig_geometry(spec)
    geometry = contact_geometry(spec, ground, 0.42)
    # the bar from [fixed] as a 0.42 m segment, and the floor in SI units
    assert geometry.length == pytest.approx(0.42)
    np.testing.assert_allclose(geometry.others, [(-1.0, -0.1, 0.0, 3.0)])
    path.write_text(text + '\n[[ground.surface]]\nangle = { value = 0, unit = "rad" }\n')
    with pytest.raises(InputError, match=r"ground\.surface\[0\].*needs start"):
        contact_geometry(load(path), ground, 0.42)
