"""Protocol v1 framing and CRC, checked against independent references (struct, binascii)."""

import binascii
import struct

import numpy as np
import pytest

from physid.rigs.encoders.decode import Frames, StreamDecoder, decode_capture
from physid.rigs.encoders.protocol import (
    crc16,
    crc16_rows,
    encode_frame,
    encode_frames,
    frame_length,
)


def _reference_frame(seq: int, t_us: int, counts: list[int], u_mv: int) -> bytes:
    """The layout of docs/encoder-protocol.md written out with struct, CRC by binascii."""
    n = len(counts)
    body = struct.pack(f"<BBII{n}ih", 1, n, seq, t_us, *counts, u_mv)
    return b"\xa5\x5a" + body + struct.pack("<H", binascii.crc_hqx(body, 0xFFFF))


def test_crc_check_value() -> None:
    assert crc16(b"123456789") == 0x29B1
    cols = np.frombuffer(b"123456789", dtype=np.uint8)[:, None].repeat(4, axis=1)
    assert crc16_rows(cols).tolist() == [0x29B1] * 4
    odd = np.frombuffer(b"12345678", dtype=np.uint8)[:, None]  # even length path too
    assert crc16_rows(odd)[0] == binascii.crc_hqx(b"12345678", 0xFFFF)


def test_vectorized_crc_matches_binascii_on_random_messages() -> None:
    rng = np.random.default_rng(1)
    for length in (1, 2, 3, 20, 45):
        msgs = rng.integers(0, 256, (length, 300), dtype=np.uint8)
        got = crc16_rows(msgs)
        want = [binascii.crc_hqx(msgs[:, i].tobytes(), 0xFFFF) for i in range(300)]
        assert got.tolist() == want


@pytest.mark.parametrize("n", [1, 2, 8])
def test_encode_matches_reference_layout(n: int) -> None:
    counts = [(-1) ** i * (123456 + i) for i in range(n)]
    ref = _reference_frame(2**32 - 1, 4_000_000_000, counts, -1234)
    assert encode_frame(2**32 - 1, 4_000_000_000, counts, -1234) == ref
    assert len(ref) == frame_length(n)


@pytest.mark.parametrize("n", [1, 3, 8])
def test_round_trip_frames_bytes_decoder(n: int) -> None:
    rng = np.random.default_rng(n)
    m = 5000
    seq = np.arange(m) + 77
    t_us = 1_000_000 + np.arange(m) * 1000
    counts = rng.integers(-(2**31), 2**31, (m, n))
    u = rng.integers(-(2**15), 2**15, m)
    frames, stats = decode_capture(encode_frames(seq, t_us, counts, u).tobytes())
    assert stats.frames == m and stats.n_channels == n
    assert (stats.missing, stats.dropped, stats.corrupted, stats.skipped_bytes) == (0, 0, 0, 0)
    np.testing.assert_array_equal(frames.seq, seq)
    np.testing.assert_array_equal(frames.t_us, t_us)
    np.testing.assert_array_equal(frames.counts, counts)
    np.testing.assert_array_equal(frames.u_mv, u)
    np.testing.assert_array_equal(frames.offset, np.arange(m) * frame_length(n))
    assert stats.period_s == pytest.approx(1e-3)


def test_live_decoder_in_random_chunks_equals_file_decoder() -> None:
    rng = np.random.default_rng(5)
    m = 3000
    raw = encode_frames(
        np.arange(m), np.arange(m) * 1000, rng.integers(-9, 9, (m, 2)), np.zeros(m)
    ).tobytes()
    raw = bytes(rng.integers(0, 256, 7, dtype=np.uint8)) + raw  # starts mid-stream
    whole, stats = decode_capture(raw)
    dec = StreamDecoder()
    parts, i = [], 0
    while i < len(raw):
        k = int(rng.integers(1, 60))
        parts.append(dec.feed(raw[i : i + k]))
        i += k
    parts.append(dec.finish())
    live = Frames.concat(parts, 2)
    for name in ("offset", "seq", "t_us", "counts", "u_mv"):
        np.testing.assert_array_equal(getattr(live, name), getattr(whole, name))
    assert dec.stats == stats
    assert stats.frames == m and stats.leading_bytes == 7 and stats.corrupted == 0
