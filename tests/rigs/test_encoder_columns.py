"""A lab's own CSV read by column name: units, sign, zero, time column, and clear errors."""

import math
from pathlib import Path

import numpy as np
import pytest

from physid.errors import InputError
from physid.rigs.encoders import read_log, read_log_csv, write_log_csv
from physid.spec import SpecError, load_spec
from physid.streams import Stream

# What a bench PC's data logger writes: a preamble, its own names, degrees, milliseconds, the
# motor command in millivolts, a status text column physid does not need, a dropped sample.
LAB_CSV = """\
# PendCon bench 2, logger v3.2 export
# 1 kHz, angle from the 4096-count encoder, zero at the top
time_ms,status,pendulum_angle_deg,motor_cmd_mV
0,OK,-171.88733853924697,0
1,OK,-171.8866,12
2,LOST,,24
3,OK,-171.8851,36
4,OK,-171.8839,48
"""

SPEC = """
[rig]
name = "bench pendulum"
model = "pendulum"

[sensors.theta]
kind = "encoder"
channel = 0
counts_per_rev = 4096

[sensors.theta.column]          # the bench logger's column, not physid's own format
name = "pendulum_angle_deg"
unit = "deg"
sign = -1
offset = { value = 180, unit = "deg" }
time = "time_ms"
time_unit = "ms"
file = "bench*.csv"

[sensors.u]
kind = "control"
column = { name = "motor_cmd_mV", unit = "mV", file = "bench*.csv" }
"""


@pytest.fixture
def spec(tmp_path: Path):
    path = tmp_path / "bench.toml"
    path.write_text(SPEC)
    return load_spec(path)


def test_lab_csv_in_degrees_and_milliseconds(tmp_path: Path, spec) -> None:
    path = tmp_path / "bench_run1.csv"
    path.write_text(LAB_CSV)
    s = read_log(path, spec)
    assert s.channels == ("theta", "u") and s.units == ("rad", "V")
    np.testing.assert_array_equal(s.t, [0.0, 1e-3, 2e-3, 3e-3, 4e-3])
    # angle = sign * value - offset = -(-171.887...°) - 180° = -8.11...° = -0.1415... rad
    deg = np.array([-171.88733853924697, -171.8866, np.nan, -171.8851, -171.8839])
    expected = -np.radians(deg) - math.pi
    np.testing.assert_allclose(s.values[:, 0], expected, rtol=0, atol=1e-15)
    assert s.values[0, 0] == pytest.approx(3.0 - math.pi, abs=1e-12)  # 171.887...° is 3 rad
    np.testing.assert_array_equal(s.missing[:, 0], [False, False, True, False, False])
    np.testing.assert_allclose(s.values[:, 1], [0.0, 0.012, 0.024, 0.036, 0.048], atol=1e-15)
    assert s.source["columns"] == {"theta": "pendulum_angle_deg", "u": "motor_cmd_mV"}


def test_same_spec_reads_physid_logs_by_sensor_name(tmp_path: Path, spec) -> None:
    """``file = "bench*.csv"``: other CSVs are physid's own format, read by sensor name."""
    t = np.arange(4) * 1e-3
    own = Stream(
        t,
        np.c_[[0.1, 0.2, 0.3, 0.4], np.zeros(4)],
        ("theta", "u"),
        ("rad", "V"),
        np.zeros((4, 2), bool),
    )
    s = read_log(write_log_csv(tmp_path / "log.csv", own), spec)
    np.testing.assert_array_equal(s.values, own.values)


def test_misspelled_column_names_line_spec_key_and_a_guess(tmp_path: Path, spec) -> None:
    path = tmp_path / "bench_run2.csv"
    path.write_text(LAB_CSV.replace("pendulum_angle_deg", "pendulum_angel_deg"))
    with pytest.raises(InputError) as err:
        read_log(path, spec)
    message = str(err.value)
    assert "bench_run2.csv: line 3: no column 'pendulum_angle_deg'" in message
    assert "did you mean 'pendulum_angel_deg'?" in message
    assert "[sensors.theta] column" in message


def test_a_declared_control_must_be_in_the_file(tmp_path: Path, spec) -> None:
    """The spec has a motor ([sensors.u]): a file without its column is an error, not an
    unpowered rig."""
    path = tmp_path / "bench_run4.csv"
    path.write_text(LAB_CSV.replace(",motor_cmd_mV", "").replace(",0\n", "\n"))
    with pytest.raises(
        InputError, match=r"no column 'motor_cmd_mV' for channel 'u'.*\[sensors\.u\]"
    ):
        read_log(path, spec)


def test_bad_row_of_a_lab_file_names_its_line(tmp_path: Path, spec) -> None:
    path = tmp_path / "bench_run3.csv"
    path.write_text(LAB_CSV.replace("3,OK,-171.8851,36", "3,OK,-171.88.51,36"))
    with pytest.raises(InputError, match=r"bench_run3\.csv: line 7: theta = '-171\.88\.51'"):
        read_log(path, spec)
    path.write_text(LAB_CSV.replace("4,OK", "2,OK"))
    with pytest.raises(
        InputError,
        match=r"line 8: time_ms = '2' does not increase \(previous .*line 7: time_ms = '3'\)",
    ):
        read_log(path, spec)


def test_unknown_column_key_is_a_spec_error_with_a_guess(tmp_path: Path) -> None:
    path = tmp_path / "typo.toml"
    path.write_text(SPEC.replace('time_unit = "ms"', 'time_units = "ms"'))
    with pytest.raises(
        SpecError,
        match=r"sensors\.theta\.column\.time_units\] unknown key "
        r"\(did you mean 'time_unit'\?\)",
    ):
        read_log(tmp_path / "bench.csv", load_spec(path))


def test_comments_semicolons_and_the_slow_path_agree(tmp_path: Path, monkeypatch) -> None:
    """Comments among the rows (holding delimiters too) and a semicolon export take the fast
    path to the same numbers; a field of blanks, which the C parser refuses, takes the
    line-by-line parse, to the same numbers again."""
    from physid.rigs.encoders import csvlog

    rows = "t,theta1,u\n0.0,1.5,\n0.001,,0.25\n0.002,-2e-3,0.5\n"
    (tmp_path / "a.csv").write_text(rows)
    commented = rows.replace("0.001,,0.25", "# re-zeroed here, see log, p. 3\n0.001,,0.25 # x")
    (tmp_path / "b.csv").write_text(commented)
    (tmp_path / "c.csv").write_text(rows.replace(",", ";"))
    (tmp_path / "d.csv").write_text(rows.replace("0.001,,0.25", "0.001,  ,0.25"))
    a, d = read_log_csv(tmp_path / "a.csv"), read_log_csv(tmp_path / "d.csv")
    with monkeypatch.context() as m:
        m.setattr(csvlog, "_parse_slow", None)  # calling it would fail the test
        b, c = read_log_csv(tmp_path / "b.csv"), read_log_csv(tmp_path / "c.csv")
    for other in (b, c, d):
        np.testing.assert_array_equal(other.t, a.t)
        np.testing.assert_array_equal(other.missing, a.missing)
        np.testing.assert_array_equal(np.nan_to_num(other.values), np.nan_to_num(a.values))
    assert a.missing.tolist() == [[False, True], [True, False], [False, False]]
