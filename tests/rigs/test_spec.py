"""Rig specs: units, and errors that name the file and the key."""

import pytest

from physid.rigs.models.furuta import build as build_furuta
from physid.spec import SpecError, load_spec, with_overrides
from physid.units import UnitError, parse_unit, to_si

FURUTA = load_spec("furuta").path.read_text()


def write(tmp_path, text):
    path = tmp_path / "rig.toml"
    path.write_text(text)
    return path


def test_units_convert_to_si_and_check_dimensions():
    assert to_si(756, "mm^2") == pytest.approx(756e-6)
    assert to_si(180, "deg", expected="rad") == pytest.approx(3.141592653589793)
    assert parse_unit("N m/V").dims == parse_unit("s A").dims
    assert parse_unit("rad/N m").dims != parse_unit("m/N").dims
    with pytest.raises(UnitError, match="does not match"):
        to_si(1.0, "m/N", expected="rad/N m")


def test_missing_value_names_file_and_key(tmp_path):
    path = write(tmp_path, FURUTA.replace('l2 = { value = 0.092, unit = "m" }', ""))
    with pytest.raises(SpecError, match=r"rig\.toml.*fixed\.l2.*missing value 'l2'"):
        build_furuta(load_spec(path))


def test_unit_typo_names_file_and_key(tmp_path):
    path = write(
        tmp_path,
        FURUTA.replace(
            'm_A = { value = 0.238, unit = "kg" }', 'm_A = { value = 0.238, unit = "kgg" }'
        ),
    )
    with pytest.raises(SpecError, match=r"rig\.toml: \[fixed\.m_A\] unknown unit 'kgg'"):
        load_spec(path)


def test_wrong_dimension_names_file_and_key(tmp_path):
    path = write(
        tmp_path,
        FURUTA.replace('l1 = { value = 0.128, unit = "m" }', 'l1 = { value = 0.128, unit = "kg" }'),
    )
    with pytest.raises(SpecError, match=r"rig\.toml: \[fixed\.l1\] unit 'kg'"):
        build_furuta(load_spec(path))


def test_negative_mass_names_file_and_key(tmp_path):
    path = write(
        tmp_path,
        FURUTA.replace(
            'm_B = { value = 0.428, unit = "kg" }', 'm_B = { value = -0.428, unit = "kg" }'
        ),
    )
    with pytest.raises(SpecError, match=r"rig\.toml: \[fixed\.m_B\] must be positive"):
        build_furuta(load_spec(path))


def test_parameter_outside_its_bounds_is_refused(tmp_path):
    text = FURUTA.replace("J_Azz = { initial = 0.01,", "J_Azz = { initial = 0.5,")
    with pytest.raises(SpecError, match=r"parameters\.J_Azz.*outside"):
        load_spec(write(tmp_path, text))


def test_overrides_accept_units_and_reject_unknown_names():
    spec = with_overrides(load_spec("furuta"), {"l2": "9.2 cm", "b1": "0.002"})
    assert spec.value("l2", "m") == pytest.approx(0.092)
    assert spec.parameters["b1"].initial == 0.002
    with pytest.raises(SpecError, match="no such value"):
        with_overrides(load_spec("furuta"), {"l9": "1"})


def test_dashes_normalized_in_builtin_names_but_never_in_paths(tmp_path):
    """`ellipse-drop` names the built-in spec; a real path with dashes is taken as it is."""
    import shutil

    from physid.spec import load_spec

    assert load_spec("ellipse-drop").model == "ellipse_drop"
    folder = tmp_path / "my-rig"
    folder.mkdir()
    shutil.copy(load_spec("pendulum").path, folder / "pendulum-v2.toml")
    spec = load_spec(folder / "pendulum-v2.toml")
    assert spec.path == folder / "pendulum-v2.toml" and spec.model == "pendulum"


def test_overrides_reach_method_and_other_tables_with_units():
    spec = with_overrides(
        load_spec("ellipse_drop"),
        {
            "method.sigma_theta": "2 mrad",  # not in the spec: added to [method]
            "method.h_max": "0.5 ms",
            "max_iter": "100",
            "ground_circles": "[[60, 78], [340, 7]] mm",
        },
    )
    assert spec.method_value("sigma_theta", "rad", 1.0) == pytest.approx(2e-3)
    assert spec.method_value("h_max", "s", 1.0) == pytest.approx(5e-4)
    assert spec.method["max_iter"] == 100 and isinstance(spec.method["max_iter"], int)
    assert spec.sections["scene"]["ground_circles"]["value"][1] == [340, 7]
    with pytest.raises(SpecError, match=r"--set h_max=2 kg: .*should be like"):
        with_overrides(load_spec("ellipse_drop"), {"h_max": "2 kg"})
    with pytest.raises(SpecError, match=r"no such value.*write method\.sigma_theta"):
        with_overrides(load_spec("ellipse_drop"), {"sigma_theta": "2 mrad"})
    with pytest.raises(SpecError, match=r"--set rho=1 mm: method.rho is dimensionless"):
        with_overrides(load_spec("ellipse_drop"), {"rho": "1 mm"})
    with pytest.raises(SpecError, match="expected an array"):
        with_overrides(load_spec("ellipse_drop"), {"ground_circles": "3 mm"})
