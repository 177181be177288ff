"""Decoder robustness: corruption with exact accounting, wrap-around, clock jumps, resets."""

import numpy as np
import pytest

from physid.rigs.encoders.boardsim import encode_trajectory, inject_faults, synthetic_trajectory
from physid.rigs.encoders.decode import Frames, StreamDecoder, decode_capture
from physid.rigs.encoders.protocol import encode_frame, encode_frames, frame_length


def _intact(n_frames: int, plan) -> np.ndarray:
    lost = np.union1d(plan.dropped, plan.corrupted)
    return np.setdiff1d(np.arange(n_frames), lost)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_corruption_recovers_every_intact_frame_with_exact_counts(seed: int) -> None:
    # 60 s at 1 kHz, 2 channels, seq and t_us both wrap inside the capture
    traj = synthetic_trajectory(
        60.0, 1000.0, 2, seq0=2**32 - 20_000, t0_us=2**32 - 30_000_000, seed=seed
    )
    frames = encode_trajectory(traj)
    data, plan = inject_faults(frames, byte_error_rate=0.01, drop_rate=0.005, seed=seed)
    got, stats = decode_capture(data)
    keep = _intact(len(frames), plan)
    # every intact frame, and nothing else, in order with its exact values
    np.testing.assert_array_equal(got.seq, traj.seq[keep])
    np.testing.assert_array_equal(got.counts, traj.counts[keep])
    np.testing.assert_array_equal(got.u_mv, traj.u_mv[keep])
    np.testing.assert_array_equal(got.t_us, traj.t_us[keep])
    assert len(plan.dropped) > 200 and len(plan.corrupted) > 10_000  # the faults are real
    assert stats.dropped == len(plan.dropped)
    assert stats.corrupted == len(plan.corrupted)
    assert stats.missing == len(plan.dropped) + len(plan.corrupted)
    assert stats.skipped_bytes == len(plan.corrupted) * frames.shape[1]
    assert stats.clock_jumps == [] and stats.seq_resets == 0
    # per-frame gap bookkeeping agrees with the ground truth
    np.testing.assert_array_equal(np.diff(got.seq) - 1, got.missing_before[1:])


def test_corrupted_stream_decodes_the_same_live_in_chunks() -> None:
    traj = synthetic_trajectory(5.0, 1000.0, 3, seed=4)
    data, _ = inject_faults(encode_trajectory(traj), 0.01, 0.005, seed=4)
    whole, stats = decode_capture(data)
    dec = StreamDecoder()
    rng = np.random.default_rng(0)
    parts, i = [], 0
    while i < len(data):
        k = int(rng.integers(1, 200))
        parts.append(dec.feed(data[i : i + k]))
        i += k
    parts.append(dec.finish())
    live = Frames.concat(parts, 3)
    np.testing.assert_array_equal(live.seq, whole.seq)
    np.testing.assert_array_equal(live.counts, whole.counts)
    assert dec.stats == stats


def test_wraparound_of_seq_and_clock_is_continuous() -> None:
    m = 4000
    seq = 2**32 - 1500 + np.arange(m)  # wraps after 1500 frames
    t_us = 2**32 - 2_300_000 + np.arange(m) * 1000  # wraps after 2300 frames
    raw = encode_frames(seq, t_us, np.zeros((m, 1)), np.zeros(m)).tobytes()
    got, stats = decode_capture(raw)
    np.testing.assert_array_equal(got.seq, seq)  # unwrapped: keeps increasing past 2^32
    np.testing.assert_array_equal(got.t_us, t_us)
    np.testing.assert_allclose(np.diff(got.t), 1e-3, atol=1e-9)
    assert stats.missing == 0 and stats.clock_jumps == [] and stats.seq_resets == 0


def test_drop_across_the_seq_wrap_is_counted() -> None:
    seq = np.array([2**32 - 3, 2**32 - 2, 1, 2])  # 2^32-1 and 0 were not sent
    raw = encode_frames(seq, seq * 1000, np.zeros((4, 2)), np.zeros(4)).tobytes()
    got, stats = decode_capture(raw)
    assert stats.dropped == 2 and stats.corrupted == 0
    assert got.missing_before.tolist() == [0, 0, 2, 0]
    np.testing.assert_allclose(got.t[2] - got.t[1], 3e-3, atol=1e-9)


def test_clock_jump_is_reported_and_time_stays_monotonic() -> None:
    m = 100
    seq = np.arange(m)
    t_us = np.arange(m) * 1000
    t_us[60:] -= 500_000  # board clock steps back by 0.5 s
    raw = encode_frames(seq, t_us, np.zeros((m, 1)), np.zeros(m)).tobytes()
    got, stats = decode_capture(raw)
    assert len(stats.clock_jumps) == 1
    jump = stats.clock_jumps[0]
    assert jump.frame == 60 and jump.offset == 60 * frame_length(1)
    assert jump.expected == pytest.approx(1e-3) and jump.measured == pytest.approx(-0.499)
    assert np.all(np.diff(got.t) > 0)
    np.testing.assert_allclose(np.diff(got.t), 1e-3, atol=1e-9)  # seq keeps the grid


def test_sync_pattern_inside_payload_does_not_confuse_the_scanner() -> None:
    # counts whose bytes contain A5 5A 01 01 (a plausible header) in every frame
    fake = int.from_bytes(b"\xa5\x5a\x01\x01", "little", signed=True)
    frames = [encode_frame(i, i * 1000, [fake, fake], 0) for i in range(50)]
    got, stats = decode_capture(b"".join(frames))
    assert stats.frames == 50 and stats.crc_failures == 0 and stats.missing == 0
    assert (got.counts == fake).all()


def test_truncated_last_frame_is_reported() -> None:
    raw = encode_frames(np.arange(10), np.arange(10) * 1000, np.ones((10, 2)), np.zeros(10))
    data = raw.tobytes()[:-5]
    got, stats = decode_capture(data)
    assert stats.frames == 9 and stats.truncated_tail == frame_length(2) - 5
    assert stats.corrupted == 0 and stats.missing == 0


def test_seq_reset_starts_a_new_segment() -> None:
    seq = np.concatenate([np.arange(100, 150), np.arange(0, 50)])  # board rebooted
    t_us = np.concatenate([np.arange(50) * 1000 + 10**6, np.arange(50) * 1000])
    raw = encode_frames(seq, t_us, np.zeros((100, 1)), np.zeros(100)).tobytes()
    got, stats = decode_capture(raw)
    assert stats.seq_resets == 1 and stats.dropped == 0 and stats.missing == 0
    assert np.all(np.diff(got.seq) == 1) and np.all(np.diff(got.t) > 0)
    assert len(stats.clock_jumps) == 1


def _sequential_reader(data: bytes, n: int) -> list[int]:
    """The spec's reader, one byte at a time: offsets of accepted frames (independent code)."""
    import binascii

    flen = 16 + 4 * n
    out, pos = [], 0
    while pos + 1 < len(data):
        if data[pos] != 0xA5 or data[pos + 1] != 0x5A:
            pos += 1
            continue
        frame = data[pos : pos + flen]
        if (
            len(frame) == flen
            and frame[2] == 1
            and frame[3] == n
            and binascii.crc_hqx(frame[2:-2], 0xFFFF) == int.from_bytes(frame[-2:], "little")
        ):
            out.append(pos)
            pos += flen
        else:
            pos += 1  # resume one byte after the failed sync
    return out


@pytest.mark.parametrize("seed", range(6))
def test_vectorized_scan_equals_sequential_reader(seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    n = 1 + seed % 3
    m = 3000
    # counts full of sync-like bytes, then heavy damage and random noise bursts
    counts = rng.choice([0x015AA5, 0x01015AA5, -1, 0x5AA55AA5, 7], size=(m, n))
    raw = encode_frames(np.arange(m), np.arange(m) * 1000, counts, rng.integers(-99, 99, m))
    data, _ = inject_faults(raw, byte_error_rate=0.05, drop_rate=0.02, seed=seed)
    pieces = bytearray(data)
    for at in sorted(rng.integers(0, len(pieces), 40).tolist(), reverse=True):
        pieces[at:at] = bytes(rng.choice([0xA5, 0x5A, 0x01, 0x02, 0x00], 30).astype(np.uint8))
    data = bytes(pieces)
    got, stats = decode_capture(data, n_channels=n)
    assert got.offset.tolist() == _sequential_reader(data, n)
    assert stats.frames > 400  # enough intact frames for the comparison to mean something
    dec, parts, i = StreamDecoder(n), [], 0
    while i < len(data):  # the live decoder, in random chunks, agrees
        k = int(rng.integers(1, 300))
        parts.append(dec.feed(data[i : i + k]))
        i += k
    parts.append(dec.finish())
    np.testing.assert_array_equal(Frames.concat(parts, n).offset, got.offset)
    assert dec.stats == stats


def test_overlapping_crc_valid_candidates_follow_the_sequential_rule() -> None:
    # Frame A (n=1) carries "A5 5A 01 01" in its counts, so a second candidate B starts at
    # A+12; B's remaining bytes follow A and are chosen so that B's CRC matches too.
    import binascii

    fake = int.from_bytes(b"\xa5\x5a\x01\x01", "little", signed=True)
    a = encode_frame(5, 5000, [fake], 42)
    b_head = a[12:]  # 8 bytes of B inside A: sync, version, n, then A's u_mV and crc as seq
    b_tail = (777).to_bytes(4, "little") + (3).to_bytes(4, "little") + (9).to_bytes(2, "little")
    crc = binascii.crc_hqx((b_head + b_tail)[2:], 0xFFFF).to_bytes(2, "little")
    b = b_head + b_tail + crc
    assert binascii.crc_hqx(b[2:-2], 0xFFFF) == int.from_bytes(b[-2:], "little")
    before = encode_frame(4, 4000, [1], 0)
    after = encode_frame(6, 6000, [2], 0)
    data = before + a + b[8:] + after
    got, stats = decode_capture(data, n_channels=1)
    assert got.offset.tolist() == _sequential_reader(data, 1) == [0, 20, 52]
    assert got.seq.tolist() == [4, 5, 6]
    assert stats.missing == 0 and stats.skipped_bytes == 12
