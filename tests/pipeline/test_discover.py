"""Experiment discovery: manifest entries, shared stems, and per-experiment problems."""

import shutil

import pytest

from physid.errors import InputError
from physid.rigs.pipeline.experiments import discover, input_hash


def test_stems_group_files_and_use_the_folder_spec(pendulum_folder):
    (pendulum_folder / "a.mp4").write_bytes(b"")  # a video of the same stem joins experiment a
    (pendulum_folder / "calibration.avi").write_bytes(b"")  # never an experiment
    found = discover(pendulum_folder)
    assert [e.name for e in found] == ["a", "b"]
    a = found[0]
    assert [p.name for p in a.encoders] == ["a.bin"]
    assert [p.name for p in a.videos] == ["a.mp4"]
    assert a.rig.endswith("pendulum.toml") and not a.problems


def test_two_specs_without_manifest_is_a_problem_per_experiment(pendulum_folder):
    shutil.copy(pendulum_folder / "pendulum.toml", pendulum_folder / "other.toml")
    found = discover(pendulum_folder)
    assert all(e.problems for e in found)
    assert "other.toml" in found[0].problems[0] and "pendulum.toml" in found[0].problems[0]


def test_manifest_names_files_and_reports_what_is_missing(pendulum_folder):
    (pendulum_folder / "experiments.toml").write_text(
        '[experiments.good]\nrig = "pendulum.toml"\nencoder = "a.bin"\n'
        '[experiments.lost]\nrig = "pendulum"\nencoder = ["gone.bin"]\n'
        '[experiments.norig]\nencoder = "b.bin"\ncolour = "red"\n'
    )
    found = {e.name: e for e in discover(pendulum_folder)}
    assert not found["good"].problems
    assert any("gone.bin: no such file" in p for p in found["lost"].problems)
    assert found["lost"].rig == "pendulum"  # a built-in rig name
    problems = " ".join(found["norig"].problems)
    assert "no rig spec" in problems and "unknown key 'colour'" in problems


def test_empty_folder_says_what_it_looked_for(tmp_path):
    with pytest.raises(InputError, match="no experiments found"):
        discover(tmp_path)


def test_input_hash_changes_with_file_content(pendulum_folder):
    a = discover(pendulum_folder)[0]
    before = input_hash(a, {})
    assert input_hash(a, {}) == before  # deterministic
    data = bytearray((pendulum_folder / "a.bin").read_bytes())
    data[-1] ^= 0xFF
    (pendulum_folder / "a.bin").write_bytes(bytes(data))
    assert input_hash(a, {}) != before


def test_manifest_window_and_set_reaching_any_spec_table(pendulum_folder):
    from physid.spec import SpecError, load_spec, with_overrides

    (pendulum_folder / "experiments.toml").write_text(
        "[experiments.cut]\n"
        'rig = "ellipse_drop"\nencoder = "a.bin"\n'
        'window = { value = [20, 350], unit = "ms" }\n'
        'set = { "method.sigma_pos" = "0.1 mm", rho = 20, "scene.ground_surface_offset" = '
        '{ value = 15, unit = "mm" } }\n'
        "[experiments.backwards]\n"
        'rig = "ellipse_drop"\nencoder = "a.bin"\nwindow = [0.5, 0.1]\n'
        "[experiments.typo]\n"
        'rig = "ellipse_drop"\nencoder = "a.bin"\nset = { sigma_posn = "0.1 mm" }\n'
    )
    found = {e.name: e for e in discover(pendulum_folder)}
    cut = found["cut"]
    assert not cut.problems
    assert cut.window == pytest.approx((0.02, 0.35))
    spec = with_overrides(load_spec(cut.rig), cut.overrides, cut.overrides_origin())
    assert spec.method_value("sigma_pos", "m", 1.0) == pytest.approx(1e-4)  # [method]
    assert spec.method["rho"] == 20
    assert spec.section_value("scene", "ground_surface_offset", "m") == pytest.approx(0.015)
    assert any("window: end must be after start" in p for p in found["backwards"].problems)
    # the error names the manifest key the user wrote, not a --set flag never given
    typo = found["typo"]
    with pytest.raises(
        SpecError, match=r"experiments\.toml: \[experiments\.typo\] set\.sigma_posn"
    ):
        with_overrides(load_spec(typo.rig), typo.overrides, typo.overrides_origin())
