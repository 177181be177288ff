"""Decoding protocol v1 byte streams into frames: vectorized for captures, incremental live.

Both paths share one scanner, so a capture fed to :class:`StreamDecoder` in chunks of any size
gives exactly what :func:`decode_capture` gives for the whole file.

Reader rules (``docs/encoder-protocol.md``): a frame starts at a sync ``A5 5A``; it is
accepted only if its CRC matches (and version is 1 and ``n`` is the capture's channel count);
after a rejected candidate the search resumes one byte after its sync, after an accepted frame
at the frame's end. The scanner finds every sync candidate and checks every CRC at once with
NumPy; the greedy "resume after the accepted frame" rule only needs a Python loop where two
CRC-valid candidates overlap, which happens only for a sync pattern inside a payload that also
passes the CRC (odds about 2^-16 per such pattern).

Statistics (all exact when the line only flips bytes, as the tests check):

- ``missing``: frames absent from the ``seq`` sequence between accepted frames (mod 2^32).
- ``corrupted``: of those, frames whose bytes arrived but failed validation: the garbage bytes
  in a gap divided by the frame length, rounded up and capped at the gap's missing frames
  (before the first frame and after the last: rounded down, as a recorder that starts or
  stops mid-frame sees a partial frame that is not corruption).
- ``dropped``: ``missing - corrupted``, frames the board never sent (or that vanished without
  leaving bytes, e.g. an overrun USB buffer).
- ``crc_failures``: sync candidates examined and rejected (a corrupted frame may yield zero,
  one or several, so this is a diagnostic, not a frame count).
- ``skipped_bytes``: bytes not inside an accepted frame.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from physid.rigs.encoders.protocol import (
    MAX_CHANNELS,
    SYNC0,
    SYNC1,
    VERSION,
    WRAP,
    crc16_frames,
    frame_dtype,
    frame_length,
)

HALF_WRAP = WRAP // 2
# A clock step further than this fraction of a frame period from what seq predicts is a jump.
JUMP_TOLERANCE = 0.5


@dataclass(frozen=True)
class ClockJump:
    """A board-clock step that disagrees with the seq step; times in s."""

    frame: int  # index (among accepted frames) of the frame after the jump
    offset: int  # byte offset of that frame in the stream
    expected: float  # seq step times the frame period
    measured: float  # what t_us said (negative for a backward step)


@dataclass
class DecodeStats:
    """Running statistics of a decoder (see the module docstring for definitions)."""

    n_channels: int | None = None
    frames: int = 0
    missing: int = 0
    dropped: int = 0
    corrupted: int = 0
    crc_failures: int = 0
    skipped_bytes: int = 0
    leading_bytes: int = 0
    trailing_bytes: int = 0
    truncated_tail: int = 0  # bytes of an incomplete last frame (0 if the stream ends cleanly)
    seq_resets: int = 0
    period_s: float | None = None
    wrong_version_offset: int | None = None  # first CRC-valid frame with another version
    clock_jumps: list[ClockJump] = field(default_factory=list)

    def as_dict(self) -> dict:
        """Plain dict for ``Stream.source`` and JSON."""
        return asdict(self)


@dataclass(frozen=True)
class Frames:
    """Accepted frames, in stream order (M of them, n channels).

    ``seq`` is unwrapped (int64, +1 per frame, continues past 2^32); ``t`` (s) is the board
    clock unwrapped past 2^32 us and made monotonic; ``missing_before[i]`` counts the frames
    absent from the sequence just before frame i (0 after a seq reset).
    """

    offset: np.ndarray  # int64 [M] byte offset in the stream
    seq: np.ndarray  # int64 [M]
    t: np.ndarray  # float64 [M] s
    t_us: np.ndarray  # int64 [M] unwrapped board clock, us
    counts: np.ndarray  # int32 [M, n]
    u_mv: np.ndarray  # int16 [M]
    missing_before: np.ndarray  # int64 [M]
    reset_before: np.ndarray  # bool [M]

    def __len__(self) -> int:
        return self.offset.shape[0]

    @staticmethod
    def concat(parts: list[Frames], n: int) -> Frames:
        """Join chunks from a live decoder into one."""
        parts = [p for p in parts if len(p)]  # empty chunks may predate knowing n
        if not parts:
            return _empty_frames(n)
        return Frames(*(np.concatenate([getattr(p, f) for p in parts]) for f in _FIELDS))


_FIELDS = ("offset", "seq", "t", "t_us", "counts", "u_mv", "missing_before", "reset_before")


def _empty_frames(n: int | None) -> Frames:
    i64 = np.zeros(0, dtype=np.int64)
    return Frames(
        i64,
        i64,
        np.zeros(0),
        i64,
        np.zeros((0, n or 0), dtype=np.int32),
        np.zeros(0, dtype=np.int16),
        i64,
        np.zeros(0, dtype=bool),
    )


@dataclass(frozen=True)
class _Scan:
    positions: np.ndarray  # int64 offsets (in buf) of accepted frames
    rows: np.ndarray  # uint8 [M, frame length], C-contiguous bytes of the accepted frames
    stop: int  # bytes of buf that are final; the rest waits for more data
    n: int | None
    crc_failures: int
    wrong_version: int | None


def _frame_rows(buf: np.ndarray, pos: np.ndarray, flen: int) -> np.ndarray:
    """Bytes of the frames at ``pos`` as ``[M, flen]``; a zero-copy view when back to back."""
    if pos.size and pos[-1] - pos[0] == (pos.size - 1) * flen and np.all(np.diff(pos) == flen):
        return buf[pos[0] : pos[0] + pos.size * flen].reshape(pos.size, flen)
    return np.lib.stride_tricks.sliding_window_view(buf, flen)[pos]


def _scan(buf: np.ndarray, n: int | None, final: bool) -> _Scan:
    """Find accepted frames in ``buf`` (uint8) following the sequential reader's rules."""
    size = buf.size
    if size >= 2:
        cand = np.flatnonzero((buf[:-1] == SYNC0) & (buf[1:] == SYNC1))
    else:
        cand = np.zeros(0, dtype=np.intp)
    has_header = cand + 4 <= size
    c = cand[has_header]
    version = buf[c + 2]
    nn = buf[c + 3]
    plausible = (nn >= 1) & (nn <= MAX_CHANNELS)
    complete = plausible & (c + 16 + 4 * nn.astype(np.intp) <= size)

    # CRC of every complete candidate, grouped by its claimed channel count (one group unless
    # corruption hit the n byte); the rows of group n are reused for the accepted frames.
    crc_ok = np.zeros(c.size, dtype=bool)
    groups: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for k in np.flatnonzero(np.bincount(nn[complete], minlength=MAX_CHANNELS + 1)).tolist():
        sel = np.flatnonzero(complete & (nn == k))
        lk = frame_length(k)
        rows = _frame_rows(buf, c[sel], lk)
        crc_ok[sel] = crc16_frames(rows) == rows[:, lk - 2 :].view("<u2")[:, 0]
        groups[k] = (sel, rows)

    good = crc_ok & (version == VERSION)
    other = np.flatnonzero(crc_ok & (version != VERSION))
    wrong_version = int(c[other[0]]) if other.size else None
    if n is None and good.any():
        n = int(np.bincount(nn[good]).argmax())  # the capture's channel count
    flen = frame_length(n) if n is not None else 0
    acc_idx = np.flatnonzero(good & (nn == n)) if n is not None else np.zeros(0, dtype=np.intp)
    accepted = c[acc_idx]

    if accepted.size > 1:
        overlapping = np.flatnonzero(np.diff(accepted) < flen) + 1
        if overlapping.size:
            keep = np.ones(accepted.size, dtype=bool)
            for i in overlapping.tolist():  # rare: only CRC-valid candidates that overlap
                k = i - 1
                while not keep[k]:
                    k -= 1
                keep[i] = accepted[i] >= accepted[k] + flen
            acc_idx, accepted = acc_idx[keep], accepted[keep]

    stop = size
    if not final:
        # Candidates that cannot be judged yet block the scan, as they would a serial reader.
        waiting = np.concatenate([c[plausible & ~complete], cand[~has_header]])
        if size and buf[-1] == SYNC0:
            waiting = np.append(waiting, size - 1)
        if waiting.size:
            waiting = np.sort(waiting)
            free = waiting[~_inside(waiting, accepted, flen)]
            if free.size:
                stop = int(free[0])
                cut = accepted < stop
                acc_idx, accepted = acc_idx[cut], accepted[cut]

    if accepted.size:
        sel, rows = groups[n]
        if sel.size != acc_idx.size:  # some candidates of this size were rejected
            rows = _frame_rows(buf, accepted, flen)
    else:
        rows = np.zeros((0, flen), dtype=np.uint8)

    # Rejected candidates that a sequential reader would have examined (not inside a frame).
    is_acc = np.zeros(c.size, dtype=bool)
    is_acc[acc_idx] = True
    others = np.concatenate([c[~is_acc], cand[~has_header]])  # few: inner syncs, corruption
    others = others[others < stop]
    rejected = int((~_inside(np.sort(others), accepted, flen)).sum())
    return _Scan(accepted.astype(np.int64), rows, stop, n, rejected, wrong_version)


def _inside(points: np.ndarray, starts: np.ndarray, flen: int) -> np.ndarray:
    """Which ``points`` lie inside one of the frames starting at sorted ``starts``."""
    if starts.size == 0 or points.size == 0:
        return np.zeros(points.size, dtype=bool)
    k = np.searchsorted(starts, points, side="right") - 1
    return (k >= 0) & (points < starts[np.maximum(k, 0)] + flen)


class StreamDecoder:
    """Incremental decoder: :meth:`feed` bytes as they arrive, :meth:`finish` at the end.

    ``n_channels`` fixes the expected channel count; None takes the most common count among
    the first CRC-valid frames. Frames are returned as soon as they are complete.
    """

    def __init__(self, n_channels: int | None = None) -> None:
        self.stats = DecodeStats(n_channels=n_channels)
        self._buf = np.zeros(0, dtype=np.uint8)
        self._base = 0  # stream offset of self._buf[0]
        self._gap = 0  # skipped bytes since the end of the last accepted frame
        self._last: tuple[int, int, int] | None = None  # raw seq, unwrapped seq, unwrapped t_us
        self._period_us: float | None = None
        self._finished = False

    def feed(self, data: bytes | bytearray | memoryview | np.ndarray) -> Frames:
        """Add received bytes; return the frames completed by them."""
        if self._finished:
            raise RuntimeError("StreamDecoder: feed() after finish()")
        chunk = np.frombuffer(data, dtype=np.uint8) if not isinstance(data, np.ndarray) else data
        buf = chunk if self._buf.size == 0 else np.concatenate([self._buf, chunk])
        return self._run(buf, final=False)

    def finish(self) -> Frames:
        """End of stream: judge the bytes still waiting; return the last frames."""
        frames = self._run(self._buf, final=True)
        self._finished = True
        flen = frame_length(self.stats.n_channels) if self.stats.n_channels else 0
        if self._last is None:
            self.stats.leading_bytes = self._gap
        else:
            self.stats.trailing_bytes = self._gap
            if flen:
                self.stats.corrupted += self._gap // flen
                self.stats.truncated_tail = self._gap % flen
        return frames

    def _run(self, buf: np.ndarray, final: bool) -> Frames:
        scan = _scan(buf, self.stats.n_channels, final)
        st = self.stats
        st.n_channels = scan.n
        st.crc_failures += scan.crc_failures
        if scan.wrong_version is not None and st.wrong_version_offset is None:
            st.wrong_version_offset = self._base + scan.wrong_version
        pos = scan.positions
        n = scan.n
        if pos.size == 0:
            self._gap += scan.stop
            st.skipped_bytes += scan.stop
            frames = _empty_frames(n)
        else:
            flen = frame_length(n)
            rec = scan.rows.view(frame_dtype(n)).reshape(-1)
            gaps = np.empty(pos.size, dtype=np.int64)
            gaps[0] = self._gap + pos[0]
            gaps[1:] = np.diff(pos) - flen
            frames = self._unwrap(rec, pos + self._base, gaps, flen)
            self._gap = scan.stop - int(pos[-1]) - flen
            st.skipped_bytes += scan.stop - pos.size * flen
        self._base += scan.stop
        self._buf = buf[scan.stop :].copy()
        return frames

    def _unwrap(self, rec: np.ndarray, offsets: np.ndarray, gaps: np.ndarray, flen: int) -> Frames:
        st = self.stats
        seq_u32 = rec["seq"]
        tus_u32 = rec["t_us"]
        m = seq_u32.size
        first = self._last is None
        # uint32 differences wrap exactly like the board's counters
        prev_seq = seq_u32[0] if first else np.uint32(self._last[0])
        prev_tus = tus_u32[0] if first else np.uint32(self._last[2] % WRAP)
        d = np.diff(seq_u32, prepend=prev_seq).astype(np.int64)
        dtu = np.diff(tus_u32, prepend=prev_tus).astype(np.int64)
        reset = (d == 0) | (d >= HALF_WRAP)
        if first:
            reset[0] = False
        step = np.where(reset, 1, d)
        if first:
            step[0] = 0
        missing_before = np.maximum(step - 1, 0)
        if first:
            st.leading_bytes = int(gaps[0])
        if gaps.any():
            corrupted = -(-gaps // flen)  # garbage bytes in a gap, in frames, rounded up
            corrupted = np.where(reset, corrupted, np.minimum(corrupted, missing_before))
            if first:
                corrupted[0] = gaps[0] // flen  # before the first frame: a partial one is normal
            st.corrupted += int(corrupted.sum())
            st.dropped += int((missing_before - np.minimum(corrupted, missing_before)).sum())
        else:
            st.dropped += int(missing_before.sum())
        st.seq_resets += int(reset.sum())
        st.missing += int(missing_before.sum())
        st.frames += m

        if self._period_us is None:
            steady = np.flatnonzero(step == 1)[:4096]
            if steady.size:
                self._period_us = float(np.median(dtu[steady]))
                st.period_s = self._period_us * 1e-6
        dt = dtu
        if self._period_us is not None:
            period = self._period_us
            expected = np.rint(np.where(reset, 1, step) * period).astype(np.int64)
            if expected.max() > HALF_WRAP:
                # a gap longer than the 71.6 min clock wrap: add the wraps seq says passed
                wraps = np.maximum(np.rint((expected - dtu) / WRAP), 0).astype(np.int64)
                dt = dtu + wraps * WRAP
            jump = np.abs(dt - expected) > JUMP_TOLERANCE * period
            if first:
                jump[0] = False
            if jump.any():
                jump &= ~reset | (dtu >= HALF_WRAP)  # a rebooted board may restart its clock
                for i in np.flatnonzero(jump).tolist():
                    measured = dtu[i] - WRAP if dtu[i] >= HALF_WRAP else dt[i]
                    st.clock_jumps.append(
                        ClockJump(
                            st.frames - m + i, int(offsets[i]), expected[i] * 1e-6, measured * 1e-6
                        )
                    )
                # seq is authoritative across a jump: keep the time base monotonic, on the grid
                dt = np.where(jump, expected, dt)
        dt = np.maximum(dt, 1)
        if first:
            dt[0] = 0
            step[0] = 0
        start_tus = int(tus_u32[0]) if first else self._last[2]
        start_seq = int(seq_u32[0]) if first else self._last[1]
        t_us = start_tus + np.cumsum(dt)
        seq = start_seq + np.cumsum(np.where(reset, 1, step))
        self._last = (int(seq_u32[-1]), int(seq[-1]), int(t_us[-1]))
        return Frames(
            offset=offsets.astype(np.int64),
            seq=seq,
            t=t_us * 1e-6,
            t_us=t_us,
            counts=np.ascontiguousarray(rec["counts"]).reshape(m, -1),
            u_mv=np.ascontiguousarray(rec["u_mV"]),
            missing_before=missing_before,
            reset_before=reset,
        )


def decode_capture(
    data: bytes | np.ndarray, n_channels: int | None = None
) -> tuple[Frames, DecodeStats]:
    """Decode a whole capture at once (vectorized); returns the frames and the statistics."""
    dec = StreamDecoder(n_channels)
    buf = np.frombuffer(data, dtype=np.uint8) if not isinstance(data, np.ndarray) else data
    frames = dec._run(buf, final=True)
    dec._buf = np.zeros(0, dtype=np.uint8)
    tail = dec.finish()
    if len(tail):
        frames = Frames.concat([frames, tail], dec.stats.n_channels)
    return frames, dec.stats
