"""``[rig] model = "loop"`` as a rig kind (rigs/models/identify_loop.py): the kind's registration,
its log format and the errors a user meets before any fit runs. The end-to-end
``physid simulate`` → ``physid identify`` run compiles the 13-coordinate constrained step
(minutes on the shared machine) and is in test_loop_cli.py (slow)."""

import numpy as np
import pytest

from physid.errors import InputError
from physid.rigs.models import identify_loop as il
from physid.rigs.models.kinds import kind_module
from physid.spec import SpecError, load_spec

LOG_HEAD = "t,x,y,z,Fx,Fy,Fz\n"


@pytest.fixture(scope="module")
def spec():
    return load_spec("hexagon_loop")


def _spec_with(tmp_path, old: str, new: str):
    text = load_spec("hexagon_loop").path.read_text()
    assert old in text
    path = tmp_path / "loop.toml"
    path.write_text(text.replace(old, new))
    return load_spec(path)


def test_loop_is_a_known_kind(spec):
    module = kind_module(spec)
    assert module is il
    assert callable(module.simulate) and callable(module.identify)


def test_log_round_trip(tmp_path):
    t = 0.01 * np.arange(5)
    points = np.random.default_rng(0).normal(size=(5, 3))
    forces = np.arange(15.0).reshape(5, 3)
    path = il.write_loop_log(tmp_path / "log.csv", t, points, forces, "a note\nsecond line")
    log = il.read_loop_log(path)
    # repr() of each float is written: the round trip is exact.
    np.testing.assert_array_equal(log.t, t)
    np.testing.assert_array_equal(log.positions, points)
    np.testing.assert_array_equal(log.forces, forces)
    assert log.h == pytest.approx(0.01, rel=1e-15)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("t,x,y,z,Fx,Fy\n0,0,0,0,0,0\n", "line 1: no column Fz"),
        (LOG_HEAD + "0,0,0,0,0,0,0\n0.01,0,0,0,0,0,0\n0.03,0,0,0,0,0,0\n", "line 4: time step"),
        (LOG_HEAD + "0,0,0,0,0,0,0\n0.01,0,zero,0,0,0,0\n0.02,0,0,0,0,0,0\n", "line 3: not a row"),
        (LOG_HEAD + "0,0,0,0,0,0,0\n0.01,0,0,0,0,0\n", "line 3: 6 fields"),
        (LOG_HEAD + "0,0,0,0,0,0,0\n", "1 rows"),
        ("# only a comment\n", "empty"),
    ],
)
def test_bad_logs_name_file_and_line(tmp_path, text, message):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(InputError, match=message) as err:
        il.read_loop_log(path)
    assert str(path) in str(err.value)


def test_missing_position_is_nan_not_an_error(tmp_path):
    path = tmp_path / "gap.csv"
    path.write_text(LOG_HEAD + "0,0,0,0,1,2,3\n0.01,,,,1,2,3\n0.02,1,1,1,1,2,3\n")
    log = il.read_loop_log(path)
    assert np.isnan(log.positions[1]).all() and np.isfinite(log.positions[[0, 2]]).all()


def test_misspelled_method_key_is_refused(tmp_path):
    bad = _spec_with(tmp_path, "sigma_pos = {", "sigma_post = {")
    with pytest.raises(SpecError, match="sigma_post.*did you mean.*sigma_pos"):
        bad.check_keys("method", il.METHOD_KEYS)


def test_prepare_takes_a_loop_log_and_checks_method(tmp_path, monkeypatch):
    from physid.rigs.pipeline.single import prepare

    log = tmp_path / "log.csv"
    log.write_text(LOG_HEAD + "0,0,0,0,0,0,0\n0.01,0,0,0,0,0,0\n0.02,0,0,0,0,0,0\n")
    monkeypatch.chdir(tmp_path)
    exp = prepare("hexagon_loop", [log], tmp_path / "out")
    assert exp.encoders == (log.resolve(),)
    bad = _spec_with(tmp_path, "sigma_pos = {", "sigma_post = {")
    with pytest.raises(SpecError, match="sigma_post"):
        prepare(str(bad.path), [log], tmp_path / "out2")


def test_non_stiffness_parameter_is_refused(tmp_path):
    bad = _spec_with(
        tmp_path,
        "[parameters]\n",
        '[parameters]\nlink1.mass = { initial = 0.2, lower = 0.1, upper = 1.0, unit = "kg" }\n',
    )
    with pytest.raises(SpecError, match="link1.mass: a loop rig identifies its stiffness"):
        il.rig_of(bad)


def test_simulate_needs_the_truth_of_every_group(tmp_path):
    from rich.console import Console

    from physid.rigs.models.kinds import SimulateOptions

    bad = _spec_with(tmp_path, "kappa_psi = 20.0\n", "")
    with pytest.raises(SpecError, match=r"\[simulation.truth\] no value for kappa_psi"):
        il.simulate(bad, SimulateOptions(tmp_path / "sim"), Console(quiet=True))
