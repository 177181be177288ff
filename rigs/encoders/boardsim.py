"""Encoder-board simulator: frames from a trajectory or a CSV log, played into a pseudo-terminal.

The simulator plays exactly what a board would send, at the real frame rate, into the master
side of a pty; readers open the slave side (a real ``/dev/pts/N`` path) through pyserial, so
tests and demos exercise the same code as a USB-serial adapter. Faults (random byte flips,
dropped frames) are injected with a known ground truth (:class:`FaultPlan`).
"""

from __future__ import annotations

import os
import threading
import time
import tty
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from physid.rigs.encoders.protocol import encode_frames, frame_length

DEFAULT_COUNTS_PER_REV = 4096


@dataclass(frozen=True)
class Trajectory:
    """Board-side samples: ``t`` (s), board clock ``t_us`` [N] (may pass 2^32), ``counts``
    int [N, n], ``u_mv`` int16 [N], ``seq`` [N] (may pass 2^32)."""

    t: np.ndarray
    t_us: np.ndarray
    counts: np.ndarray
    u_mv: np.ndarray
    seq: np.ndarray


@dataclass(frozen=True)
class FaultPlan:
    """Ground truth of injected faults: frame indices (into the trajectory) and byte offsets."""

    dropped: np.ndarray  # frames never sent
    corrupted: np.ndarray  # frames sent with at least one byte changed
    flipped_bytes: np.ndarray  # offsets in the sent stream of changed bytes


def synthetic_trajectory(
    duration: float = 5.0,
    rate: float = 1000.0,
    n_channels: int = 2,
    *,
    seq0: int = 0,
    t0_us: int = 0,
    counts_per_rev: int = DEFAULT_COUNTS_PER_REV,
    seed: int = 0,
) -> Trajectory:
    """Damped swinging joints driven by a chirp voltage; ``seq0``/``t0_us`` may be near 2^32."""
    rng = np.random.default_rng(seed)
    n = int(round(duration * rate))
    k = np.arange(n, dtype=np.int64)
    t = k / rate
    freqs = 0.5 + rng.uniform(0.2, 1.5, n_channels)
    amps = rng.uniform(0.3, 2.5, n_channels)
    angles = amps * np.exp(-0.1 * t[:, None]) * np.sin(2 * np.pi * freqs * t[:, None])
    angles += 0.4 * np.cumsum(np.ones((n, n_channels)), axis=0) / rate  # slow drift, many revs
    counts = np.rint(angles * counts_per_rev / (2 * np.pi)).astype(np.int64)
    u = 6.0 * np.sin(2 * np.pi * (0.2 + 0.3 * t) * t)
    return Trajectory(
        t=t,
        t_us=t0_us + np.rint(t * 1e6).astype(np.int64),
        counts=counts,
        u_mv=np.rint(u * 1000).astype(np.int16),
        seq=seq0 + k,
    )


def trajectory_from_csv(path: str | Path, spec=None, rate: float | None = None) -> Trajectory:
    """Board samples that reproduce a CSV encoder log (angles back to counts via ``spec``).

    Without a spec the channels use 4096 counts/rev, sign +1, offset 0. Rows with a missing
    sample are not sent (the board "drops" them), so a round trip keeps the gaps.
    """
    from physid.rigs.encoders.convert import encoder_channels
    from physid.rigs.encoders.csvlog import read_log_csv

    log = read_log_csv(path)
    names = log.channels[:-1]
    if spec is not None:
        chans = {c.name: c for c in encoder_channels(spec)}
        cpr = np.array([chans[nm].counts_per_rev for nm in names], dtype=float)
        sign = np.array([chans[nm].sign for nm in names], dtype=float)
        offset = np.array([chans[nm].offset for nm in names], dtype=float)
    else:
        cpr, sign, offset = float(DEFAULT_COUNTS_PER_REV), 1.0, 0.0
    keep = ~log.missing.any(axis=1)
    angles = log.values[keep, :-1]
    counts = np.rint(sign * (angles + offset) * cpr / (2 * np.pi)).astype(np.int64)
    return Trajectory(
        t=log.t[keep],
        t_us=np.rint(log.t[keep] * 1e6).astype(np.int64),
        counts=counts,
        u_mv=np.rint(log.values[keep, -1] * 1000).astype(np.int16),
        seq=np.asarray(log.source["seq"])[keep],
    )


def encode_trajectory(traj: Trajectory) -> np.ndarray:
    """Frames of a trajectory as uint8 ``[N, 16 + 4 n]``; ``t_us`` is the board clock."""
    return encode_frames(traj.seq, traj.t_us, traj.counts, traj.u_mv)


def inject_faults(
    frames: np.ndarray,
    byte_error_rate: float = 0.0,
    drop_rate: float = 0.0,
    seed: int = 0,
    protect_ends: bool = True,
) -> tuple[bytes, FaultPlan]:
    """The byte stream of ``frames`` with frames dropped and bytes changed at random.

    Each frame is dropped with probability ``drop_rate``; each sent byte is XORed with a random
    non-zero value with probability ``byte_error_rate`` (a changed byte, never an unchanged
    one). ``protect_ends`` keeps the first and last frame intact, because no reader can know
    about frames lost before the first or after the last frame it sees.
    """
    rng = np.random.default_rng(seed)
    m, flen = frames.shape
    drop = rng.random(m) < drop_rate
    if protect_ends:
        drop[[0, -1]] = False
    sent = np.flatnonzero(~drop)
    stream = frames[sent].reshape(-1).copy()
    flip = rng.random(stream.size) < byte_error_rate
    if protect_ends:
        flip[:flen] = False
        flip[-flen:] = False
    where = np.flatnonzero(flip)
    stream[where] ^= rng.integers(1, 256, where.size).astype(np.uint8)
    corrupted = sent[np.unique(where // flen)]
    return stream.tobytes(), FaultPlan(np.flatnonzero(drop), corrupted, where)


def open_pty() -> tuple[int, int, str]:
    """A pseudo-terminal in raw mode: (master fd, slave fd, slave path for pyserial)."""
    master, slave = os.openpty()
    tty.setraw(master)
    tty.setraw(slave)  # no line discipline: every byte passes unchanged
    return master, slave, os.ttyname(slave)


class BoardSimulator:
    """Plays a byte stream into a pty at ``rate`` frames/s from a background thread.

    Use as a context manager; ``port`` is the device path to open with pyserial. ``start()``
    begins playing (so a test can first start the reader); ``wait()`` blocks until all bytes
    were written. Pacing is by absolute time, so the long-run rate is exact.
    """

    def __init__(self, data: bytes, frame_len: int, rate: float = 1000.0, chunk_frames: int = 1):
        self.data = data
        self.frame_len = frame_len
        self.rate = rate
        self.chunk_frames = chunk_frames
        self.master, self.slave, self.port = open_pty()
        self.written = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._play, daemon=True)

    def __enter__(self) -> BoardSimulator:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self) -> BoardSimulator:
        self._thread.start()
        return self

    def wait(self, timeout: float | None = None) -> bool:
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(2.0)
        for fd in (self.master, self.slave):
            try:
                os.close(fd)
            except OSError:
                pass

    def _play(self) -> None:
        start = time.perf_counter()
        total = len(self.data)
        step = self.frame_len * self.chunk_frames
        sent_frames = 0
        while self.written < total and not self._stop.is_set():
            due = start + sent_frames / self.rate
            delay = due - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            # send every frame that is due now (catch up after a late wake-up)
            now_frames = int((time.perf_counter() - start) * self.rate) + 1
            end = min(total, max(self.written + step, now_frames * self.frame_len))
            view = memoryview(self.data)[self.written : end]
            while view and not self._stop.is_set():
                k = os.write(self.master, view)
                view = view[k:]
                self.written += k
            sent_frames = self.written // self.frame_len


def frame_len_for(n_channels: int) -> int:
    """Frame length in bytes (re-exported for callers of the simulator)."""
    return frame_length(n_channels)
