"""Decoding a 60 s, 1000 Hz, 2-channel encoder capture: physid's vectorized decoder vs loops.

Peers, run on the same bytes in this process:

- ``struct loop``: the straightforward reader: find the sync with ``bytes.find``, check the
  CRC with a table-driven Python CRC, ``struct.unpack_from`` the fields, append to lists.
- ``struct loop + binascii``: the same loop with the CRC from ``binascii.crc_hqx`` (C), the
  strongest pure-stdlib loop we know of, shown for honesty.

Each is timed as the median of ``--runs`` runs (default 5); all outputs are checked equal.
Run: ``python benchmarks/bench_encoder_decode.py [--runs N] [--flip 0.01]``.
"""

from __future__ import annotations

import argparse
import binascii
import statistics
import struct
import time

import numpy as np

from physid.rigs.encoders.boardsim import encode_trajectory, inject_faults, synthetic_trajectory
from physid.rigs.encoders.decode import decode_capture
from physid.rigs.encoders.protocol import crc16

HEADER = struct.Struct("<BBII")


def struct_loop(data: bytes, crc=crc16) -> tuple[list[int], list[tuple[int, ...]]]:
    """Reference sequential reader (protocol rules, no statistics beyond the frames)."""
    seqs, counts = [], []
    pos, size = 0, len(data)
    while True:
        pos = data.find(b"\xa5\x5a", pos)
        if pos < 0 or pos + 4 > size:
            break
        version, n = data[pos + 2], data[pos + 3]
        flen = 16 + 4 * n
        if version != 1 or not 1 <= n <= 8 or pos + flen > size:
            pos += 1
            continue
        (stored,) = struct.unpack_from("<H", data, pos + flen - 2)
        if crc(data[pos + 2 : pos + flen - 2]) != stored:
            pos += 1
            continue
        _, _, seq, _t_us = HEADER.unpack_from(data, pos + 2)
        fields = struct.unpack_from(f"<{n}ih", data, pos + 12)
        seqs.append(seq)
        counts.append(fields[:n])
        pos += flen
    return seqs, counts


def _crc_c(body: bytes) -> int:
    return binascii.crc_hqx(body, 0xFFFF)


def _time(fn, runs: int) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--flip", type=float, default=0.0, help="byte error rate of the capture")
    args = ap.parse_args()

    traj = synthetic_trajectory(60.0, 1000.0, 2, seed=0)
    data, plan = inject_faults(encode_trajectory(traj), args.flip, 0.0, seed=0)
    frames, _ = decode_capture(data)
    m = len(frames)
    ref_seq, ref_counts = struct_loop(data)
    assert ref_seq == (frames.seq % 2**32).tolist()
    assert np.array_equal(np.array(ref_counts), frames.counts)
    assert struct_loop(data, _crc_c)[0] == ref_seq

    buf = np.frombuffer(data, dtype=np.uint8)
    t_np = _time(lambda: decode_capture(buf), args.runs)
    t_py = _time(lambda: struct_loop(data), args.runs)
    t_c = _time(lambda: struct_loop(data, _crc_c), args.runs)
    print(
        f"capture: {len(data)} bytes, {m} frames (60 s, 1000 Hz, 2 channels), "
        f"byte error rate {args.flip}, median of {args.runs} runs"
    )
    print(f"{'decoder':<28}{'frames/s':>14}{'physid speed-up':>18}")
    for name, t in (
        ("physid decode_capture", t_np),
        ("struct loop", t_py),
        ("struct loop + binascii", t_c),
    ):
        print(f"{name:<28}{m / t:>14,.0f}{t / t_np:>17.1f}x")


if __name__ == "__main__":
    main()
