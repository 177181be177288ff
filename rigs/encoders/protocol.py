"""Encoder board serial protocol v1: frame layout, CRC-16/CCITT-FALSE, frame encoding.

Frame (little-endian), ``n`` encoder channels, length ``16 + 4 n`` bytes::

    0  sync    A5 5A        8  t_us   uint32 board clock (us), wraps at 2^32
    2  version 01          12  counts int32[n] quadrature counts
    3  n       1..8     12+4n  u_mV   int16 control voltage (mV)
    4  seq     uint32   14+4n  crc    CRC-16/CCITT-FALSE over bytes 2 .. 13+4n

See ``docs/encoder-protocol.md`` and ``docs/encoder-format.md``.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

SYNC = b"\xa5\x5a"
SYNC0, SYNC1 = 0xA5, 0x5A
VERSION = 1
MAX_CHANNELS = 8
HEADER_BYTES = 12  # sync, version, n, seq, t_us
WRAP = 1 << 32  # seq and t_us are uint32 counters


def frame_length(n: int) -> int:
    """Bytes in one frame with ``n`` channels."""
    return 16 + 4 * int(n)


@lru_cache(maxsize=MAX_CHANNELS + 1)
def frame_dtype(n: int) -> np.dtype:
    """Packed NumPy record type of one frame with ``n`` channels (views raw bytes directly)."""
    return np.dtype(
        [
            ("sync", "<u2"),
            ("version", "u1"),
            ("n", "u1"),
            ("seq", "<u4"),
            ("t_us", "<u4"),
            ("counts", "<i4", (n,)),
            ("u_mV", "<i2"),
            ("crc", "<u2"),
        ]
    )


def _make_table() -> np.ndarray:
    table = np.zeros(256, dtype=np.uint16)
    for byte in range(256):
        crc = byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else (crc << 1)
        table[byte] = crc & 0xFFFF
    return table


CRC_TABLE = _make_table()
_TABLE_LIST = CRC_TABLE.tolist()


@lru_cache(maxsize=1)
def _pair_table() -> np.ndarray:
    """CRC step over two bytes at once: ``crc' = T2[crc ^ (b0 << 8 | b1)]`` (65536 entries).

    For a non-reflected CRC-16 with zero xor-out, feeding 16 message bits is a linear map of
    ``crc ^ word``; tabulating it halves the number of vectorized passes over the frames.
    """
    x = np.arange(1 << 16, dtype=np.uint32)
    crc = x.astype(np.uint16)
    for _ in range(2):  # two byte steps with the message bytes already folded into x
        crc = (crc << np.uint16(8)) ^ CRC_TABLE[crc >> np.uint16(8)]
    return crc.astype(np.uint16)


def crc16(data: bytes, init: int = 0xFFFF) -> int:
    """CRC-16/CCITT-FALSE of ``data`` (poly 0x1021, init 0xFFFF, no reflection, no xor-out)."""
    crc = init
    table = _TABLE_LIST
    for byte in data:
        crc = ((crc << 8) & 0xFFFF) ^ table[(crc >> 8) ^ byte]
    return crc


def crc16_rows(columns: np.ndarray) -> np.ndarray:
    """CRC-16/CCITT-FALSE of many equal-length messages at once.

    ``columns`` is uint8 ``[L, M]``: byte j of message m at ``columns[j, m]`` (one contiguous
    row per byte position, so each pass reads memory sequentially). Returns uint16 ``[M]``.
    """
    length, m = columns.shape
    crc = np.full(m, 0xFFFF, dtype=np.uint16)
    table2 = _pair_table()
    j = 0
    while j + 2 <= length:
        word = (columns[j].astype(np.uint16) << np.uint16(8)) | columns[j + 1]
        crc = table2[crc ^ word]
        j += 2
    if j < length:
        crc = (crc << np.uint16(8)) ^ CRC_TABLE[(crc >> np.uint16(8)) ^ columns[j]]
    return crc


def crc16_frames(rows: np.ndarray) -> np.ndarray:
    """CRC of each frame in ``rows`` (uint8 ``[M, 16 + 4 n]``, last axis contiguous).

    Covers bytes 2 .. L-3 of each row (version through u_mV), two bytes per vectorized pass:
    the byte pairs are read in place as big-endian uint16 words, no copy.
    """
    words = rows[:, 2:-2].view(">u2")  # frame length is even: 10 + 2 n words
    crc = np.full(rows.shape[0], 0xFFFF, dtype=np.uint16)
    table2 = _pair_table()
    for j in range(words.shape[1]):
        crc = table2[crc ^ words[:, j]]
    return crc


def encode_frames(
    seq: np.ndarray, t_us: np.ndarray, counts: np.ndarray, u_mv: np.ndarray
) -> np.ndarray:
    """Encode M frames; returns uint8 ``[M, 16 + 4 n]`` (row m is frame m's bytes).

    ``seq`` and ``t_us`` are taken modulo 2^32 (so unwrapped counters may be passed),
    ``counts`` is int ``[M, n]``, ``u_mv`` int16-range millivolts.
    """
    counts = np.asarray(counts)
    if counts.ndim == 1:
        counts = counts[:, None]
    m, n = counts.shape
    if not 1 <= n <= MAX_CHANNELS:
        raise ValueError(f"encode_frames: {n} channels; protocol v1 carries 1..{MAX_CHANNELS}")
    rec = np.zeros(m, dtype=frame_dtype(n))
    rec["sync"] = SYNC0 | (SYNC1 << 8)
    rec["version"] = VERSION
    rec["n"] = n
    rec["seq"] = np.asarray(seq, dtype=np.int64) % WRAP
    rec["t_us"] = np.asarray(t_us, dtype=np.int64) % WRAP
    rec["counts"] = counts
    rec["u_mV"] = u_mv
    raw = rec.view(np.uint8).reshape(m, frame_length(n))
    rec["crc"] = crc16_frames(raw)
    return raw


def encode_frame(seq: int, t_us: int, counts: list[int] | tuple[int, ...], u_mv: int) -> bytes:
    """Bytes of one frame."""
    return encode_frames(
        np.array([seq]), np.array([t_us]), np.array([list(counts)]), np.array([u_mv])
    ).tobytes()
