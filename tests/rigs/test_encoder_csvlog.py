"""CSV encoder logs: lossless round trip, masked gaps, and errors that name file and line."""

from pathlib import Path

import numpy as np
import pytest

from physid.errors import InputError
from physid.rigs.encoders import read_log, read_log_csv, write_log_csv
from physid.streams import Stream


def _stream(n: int = 500, seed: int = 0) -> Stream:
    rng = np.random.default_rng(seed)
    t = 12.5 + np.arange(n) * 1e-3
    values = rng.normal(size=(n, 3)) * [3.0, 0.5, 4.0]
    missing = np.zeros((n, 3), dtype=bool)
    missing[[7, 8, n // 2]] = True
    missing[n - 3, 1] = True
    values[missing] = np.nan
    seq = np.arange(n, dtype=np.int64) + 2**32 - 100  # crosses the wrap, kept unwrapped
    return Stream(t, values, ("theta1", "theta2", "u"), ("rad", "rad", "V"), missing, {"seq": seq})


def test_round_trip_is_bit_exact_and_keeps_gaps(tmp_path: Path) -> None:
    s = _stream()
    path = write_log_csv(tmp_path / "log.csv", s)
    assert path.read_text().splitlines()[0] == "t,seq,theta1,theta2,u"
    r = read_log_csv(path)
    assert r.channels == s.channels and r.units == s.units
    np.testing.assert_array_equal(r.t, s.t)
    np.testing.assert_array_equal(r.missing, s.missing)
    np.testing.assert_array_equal(r.values[~s.missing], s.values[~s.missing])
    assert np.isnan(r.values[s.missing]).all()
    np.testing.assert_array_equal(r.source["seq"], s.source["seq"])
    # read_log dispatches on the suffix
    np.testing.assert_array_equal(read_log(path).t, s.t)


def test_default_seq_and_atomic_replace(tmp_path: Path) -> None:
    s = _stream(20)
    plain = Stream(s.t, s.values, s.channels, s.units, s.missing)
    path = tmp_path / "sub" / "log.csv"
    write_log_csv(path, plain)
    np.testing.assert_array_equal(read_log_csv(path).source["seq"], np.arange(20))
    assert [p.name for p in path.parent.iterdir()] == ["log.csv"]  # no temp files left


def test_seq_and_u_are_optional_but_time_is_not(tmp_path: Path) -> None:
    path = tmp_path / "plain.csv"
    path.write_text("theta1,t\n1.0,0.0\n,0.001\n")
    s = read_log_csv(path)
    assert s.channels == ("theta1",) and "seq" not in s.source
    np.testing.assert_array_equal(s.missing[:, 0], [False, True])
    path.write_text("time,theta1\n0.0,1.0\n")
    with pytest.raises(InputError, match=r"plain\.csv: line 1: no time column 't'"):
        read_log_csv(path)


def test_short_row_names_line(tmp_path: Path) -> None:
    path = tmp_path / "short.csv"
    path.write_text("t,seq,theta1,u\n0.0,0,1.0,0.5\n0.001,1,0.5\n")
    with pytest.raises(InputError, match=r"short\.csv: line 3: 3 fields but the header has 4"):
        read_log_csv(path)


def test_bad_number_and_nonincreasing_time_name_line(tmp_path: Path) -> None:
    path = tmp_path / "num.csv"
    path.write_text("t,seq,theta1,u\n0.0,0,1.0,0.5\n0.001,1,abc,0.5\n")
    with pytest.raises(InputError, match=r"num\.csv: line 3: theta1 = 'abc'"):
        read_log_csv(path)
    path.write_text("t,seq,theta1,u\n0.0,0,1.0,0.5\n0.0,1,2.0,0.5\n")
    with pytest.raises(InputError, match=r"num\.csv: line 3: .*does not increase"):
        read_log_csv(path)


def test_unknown_suffix_and_bin_without_spec(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"x\.txt: unknown encoder log type"):
        read_log(tmp_path / "x.txt")
    with pytest.raises(InputError, match=r"x\.bin: .*give the rig spec"):
        read_log(tmp_path / "x.bin")
