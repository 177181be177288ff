"""Counts to angles per rig spec, masked gaps, and readers' errors naming file and offset."""

import math
import warnings
from pathlib import Path

import numpy as np
import pytest

from physid.errors import InputError
from physid.rigs.encoders import read_log, read_log_csv, write_log_csv
from physid.rigs.encoders.boardsim import encode_trajectory, inject_faults, synthetic_trajectory
from physid.rigs.encoders.convert import encoder_channels
from physid.rigs.encoders.protocol import encode_frames, frame_length
from physid.rigs.encoders.readers import TruncatedCaptureWarning, read_capture
from physid.spec import load_spec

SPEC = """
[rig]
name = "test arm"
model = "furuta"

[sensors.theta2]
kind = "encoder"
channel = 2
counts_per_rev = 2000
sign = -1
offset = { value = 90.0, unit = "deg" }
noise = { value = 1e-3, unit = "rad" }

[sensors.theta1]
kind = "encoder"
channel = 0
counts_per_rev = 4096
sign = 1
offset = { value = 0.0, unit = "rad" }

[sensors.u]
kind = "control"
unit = "V"
"""


@pytest.fixture
def spec(tmp_path: Path):
    path = tmp_path / "arm.toml"
    path.write_text(SPEC)
    return load_spec(path)


def _capture(tmp_path: Path, m: int = 2000, drop: float = 0.0, flip: float = 0.0):
    traj = synthetic_trajectory(m / 1000, 1000.0, 3, seed=3)
    data, plan = inject_faults(encode_trajectory(traj), flip, drop, seed=3)
    path = tmp_path / "cap.bin"
    path.write_bytes(data)
    return path, traj, plan


def test_channels_ordered_by_board_index(spec) -> None:
    chans = encoder_channels(spec)
    assert [c.name for c in chans] == ["theta1", "theta2"]
    assert chans[1].offset == pytest.approx(math.pi / 2) and chans[1].sign == -1


def test_bin_to_angles_with_gaps_masked(tmp_path: Path, spec) -> None:
    path, traj, plan = _capture(tmp_path, drop=0.01, flip=0.002)
    s = read_log(path, spec)
    assert s.channels == ("theta1", "theta2", "u") and s.units == ("rad", "rad", "V")
    assert len(s) == len(traj.t)  # one row per seq number, first to last
    lost = np.union1d(plan.dropped, plan.corrupted)
    assert s.missing[lost].all() and np.isnan(s.values[lost]).all()
    ok = np.setdiff1d(np.arange(len(traj.t)), lost)
    assert not s.missing[ok].any()
    np.testing.assert_allclose(s.values[ok, 0], 2 * np.pi * traj.counts[ok, 0] / 4096, atol=1e-12)
    np.testing.assert_allclose(
        s.values[ok, 1], -2 * np.pi * traj.counts[ok, 2] / 2000 - np.pi / 2, atol=1e-12
    )
    np.testing.assert_allclose(s.values[ok, 2], traj.u_mv[ok] / 1000, atol=1e-12)
    np.testing.assert_allclose(s.t, traj.t, atol=1e-9)  # gap rows get the grid time
    assert s.source["dropped"] == len(plan.dropped)
    assert s.source["corrupted"] == len(plan.corrupted)
    assert s.source["file"] == str(path)
    # through CSV and back: identical, gaps still masked
    back = read_log_csv(write_log_csv(tmp_path / "cap.csv", s))
    np.testing.assert_array_equal(back.missing, s.missing)
    np.testing.assert_array_equal(back.values[ok], s.values[ok])
    np.testing.assert_array_equal(back.source["seq"], s.source["seq"])


def test_channel_beyond_board_count_is_an_error(tmp_path: Path, spec) -> None:
    raw = encode_frames(np.arange(5), np.arange(5) * 1000, np.zeros((5, 2)), np.zeros(5))
    path = tmp_path / "two.bin"
    path.write_bytes(raw.tobytes())
    with pytest.raises(InputError, match=r"two\.bin: the board sends 2 channel.*theta2"):
        read_log(path, spec)


def test_truncated_capture_errors_name_file_and_offset(tmp_path: Path) -> None:
    raw = encode_frames(np.arange(10), np.arange(10) * 1000, np.ones((10, 2)), np.zeros(10))
    flen = frame_length(2)
    path = tmp_path / "cut.bin"
    path.write_bytes(raw.tobytes()[: 9 * flen + 7])
    with pytest.warns(TruncatedCaptureWarning, match=rf"cut\.bin: byte {9 * flen}: truncated"):
        frames, _ = read_capture(path)
    assert len(frames) == 9
    with pytest.raises(InputError, match=rf"cut\.bin: byte {9 * flen}: truncated"):
        read_capture(path, strict=True)
    path.write_bytes(raw.tobytes()[:10])  # not even one frame
    with pytest.raises(InputError, match=r"cut\.bin: byte 0: truncated"):
        read_capture(path)
    path.write_bytes(b"")
    with pytest.raises(InputError, match=r"cut\.bin: byte 0: empty"):
        read_capture(path)


def test_wrong_version_byte_is_an_error_with_offset(tmp_path: Path) -> None:
    import binascii

    raw = bytearray(encode_frames(np.arange(6), np.arange(6) * 1000, np.ones((6, 1)), np.zeros(6)))
    flen = frame_length(1)
    at = 3 * flen
    raw[at + 2] = 2  # a version-2 frame, with a valid CRC for it
    crc = binascii.crc_hqx(bytes(raw[at + 2 : at + flen - 2]), 0xFFFF)
    raw[at + flen - 2 : at + flen] = crc.to_bytes(2, "little")
    path = tmp_path / "v2.bin"
    path.write_bytes(bytes(raw))
    with pytest.raises(InputError, match=rf"v2\.bin: byte {at}: .*version 2"):
        read_capture(path)


def test_garbage_file_and_bin_without_spec(tmp_path: Path) -> None:
    path = tmp_path / "noise.bin"
    path.write_bytes(np.random.default_rng(0).integers(0, 256, 5000, dtype=np.uint8).tobytes())
    with pytest.raises(InputError, match=r"noise\.bin: byte 0: no valid protocol v1 frame"):
        read_capture(path)
    with pytest.raises(InputError, match=r"noise\.bin: .*give the rig spec"):
        read_log(path)


def test_clean_capture_has_no_warning(tmp_path: Path, spec) -> None:
    path, traj, _ = _capture(tmp_path, m=500)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        s = read_log(path, spec)
    assert not s.missing.any() and len(s) == 500


def test_board_sim_replays_a_csv_log_through_the_decoder(tmp_path: Path, spec) -> None:
    from physid.rigs.encoders.boardsim import trajectory_from_csv
    from physid.rigs.encoders.convert import encoder_channels, frames_to_stream
    from physid.rigs.encoders.decode import decode_capture
    from physid.streams import Stream

    rng = np.random.default_rng(8)
    m = 400
    chans = encoder_channels(spec)
    counts = rng.integers(-50_000, 50_000, (m, 2))
    angles = np.stack(
        [
            c.sign * 2 * np.pi * counts[:, i] / c.counts_per_rev - c.offset
            for i, c in enumerate(chans)
        ],
        axis=1,
    )
    u = rng.integers(-9000, 9000, m) / 1000
    missing = np.zeros((m, 3), dtype=bool)
    missing[[10, 11, 250]] = True
    values = np.column_stack([angles, u])
    values[missing] = np.nan
    log = Stream(
        np.arange(m) * 1e-3, values, ("theta1", "theta2", "u"), ("rad", "rad", "V"), missing
    )
    path = write_log_csv(tmp_path / "orig.csv", log)

    traj = trajectory_from_csv(path, spec)
    assert len(traj.t) == m - 3  # missing rows are not sent
    # the board frame carries the spec's channels at their indices: pad channel 1
    board_counts = np.zeros((len(traj.t), 3), dtype=np.int64)
    board_counts[:, 0], board_counts[:, 2] = traj.counts[:, 0], traj.counts[:, 1]
    raw = encode_frames(traj.seq, traj.t_us, board_counts, traj.u_mv).tobytes()
    frames, stats = decode_capture(raw)
    back = frames_to_stream(frames, stats, chans)
    assert stats.dropped == 3
    np.testing.assert_array_equal(back.missing, missing)
    np.testing.assert_allclose(back.values[~missing], values[~missing], rtol=0, atol=1e-12)
    np.testing.assert_allclose(back.t, log.t, atol=1e-9)
