"""Counts to angles: an EncoderStream from decoded frames and the rig spec's sensor tables.

Per encoder sensor (``[sensors.NAME] kind = "encoder"``)::

    angle = sign * 2 pi * counts / counts_per_rev - offset      (rad)

and ``u = u_mV / 1000`` (V). Channels are the encoder sensors ordered by their board
``channel`` index, then ``u``. Frames absent from the seq sequence get a row whose samples
are all marked missing (NaN); only its time stamp is estimated, linearly between the
received neighbours, so the grid stays uniform for the estimators.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from physid.errors import InputError
from physid.rigs.encoders.capture import read_capture
from physid.rigs.encoders.decode import DecodeStats, Frames
from physid.spec import RigSpec, SpecError, _quantity
from physid.streams import Stream

# A gap longer than this is left as a jump in t instead of being filled with missing rows
# (about 17 min at 1 kHz); it is still reported in source["unfilled_gaps"].
MAX_FILL = 1 << 20


@dataclass(frozen=True)
class EncoderChannel:
    """One encoder sensor of a rig spec; ``offset`` in rad."""

    name: str
    channel: int
    counts_per_rev: int
    sign: int
    offset: float


def encoder_channels(spec: RigSpec) -> list[EncoderChannel]:
    """The spec's encoder sensors, ordered by board channel; errors name the spec key."""
    out = []
    for name, table in spec.sensors.items():
        if not isinstance(table, dict) or table.get("kind") != "encoder":
            continue
        where = f"sensors.{name}"
        ch = table.get("channel")
        if isinstance(ch, bool) or not isinstance(ch, int) or not 0 <= ch < 8:
            raise spec.error(
                f"{where}.channel", f"board channel must be an integer 0..7, got {ch!r}"
            )
        cpr = table.get("counts_per_rev", 4096)
        if isinstance(cpr, bool) or not isinstance(cpr, int) or cpr <= 0:
            raise spec.error(f"{where}.counts_per_rev", f"must be a positive integer, got {cpr!r}")
        sign = table.get("sign", 1)
        if sign not in (1, -1) or isinstance(sign, bool):
            raise spec.error(f"{where}.sign", f"must be 1 or -1, got {sign!r}")
        offset = table.get("offset", 0.0)
        offset = 0.0 if offset == 0 else _quantity(spec, f"{where}.offset", offset, "rad")
        out.append(EncoderChannel(name, ch, cpr, int(sign), float(offset)))
    if not out:
        raise SpecError(
            f"{spec.path}: [sensors] has no encoder; add e.g. [sensors.theta1] kind = "
            '"encoder", channel = 0, counts_per_rev = 4096'
        )
    out.sort(key=lambda c: c.channel)
    for a, b in zip(out, out[1:], strict=False):
        if a.channel == b.channel:
            raise spec.error(f"sensors.{b.name}.channel", f"channel {b.channel} is also {a.name!r}")
    return out


def default_channels(n: int, counts_per_rev: int = 4096) -> list[EncoderChannel]:
    """Channels ``enc0..enc{n-1}`` with the seed rigs' 4096 counts/rev, for use without a spec."""
    return [EncoderChannel(f"enc{i}", i, counts_per_rev, 1, 0.0) for i in range(n)]


def frames_to_stream(
    frames: Frames, stats: DecodeStats, channels: list[EncoderChannel], source: dict | None = None
) -> Stream:
    """EncoderStream (angles in rad, ``u`` in V) on the seq grid, gaps masked."""
    m = len(frames)
    n = stats.n_channels or 0
    where = (source or {}).get("file", "stream")
    for c in channels:
        if c.channel >= n:
            raise InputError(
                f"{where}: the board sends {n} channel(s) but sensor {c.name!r} reads channel "
                f"{c.channel}; check [sensors.{c.name}] channel in the rig spec"
            )
    # Row of each frame: seq steps, except that too-long gaps and resets advance one row.
    fill = np.where(frames.missing_before <= MAX_FILL, frames.missing_before, 0)
    rows = np.arange(m, dtype=np.int64) + np.cumsum(fill) - (fill[0] if m else 0)
    total = int(rows[-1]) + 1 if m else 0
    have = np.zeros(total, dtype=bool)
    have[rows] = True

    k = len(channels)
    values = np.full((total, k + 1), np.nan)
    idx = np.array([c.channel for c in channels], dtype=np.int64)
    scale = np.array([c.sign * 2 * math.pi / c.counts_per_rev for c in channels])
    offset = np.array([c.offset for c in channels])
    values[rows, :k] = frames.counts[:, idx].astype(float) * scale - offset
    values[rows, k] = frames.u_mv.astype(float) / 1000.0
    grid = np.arange(total, dtype=float)
    t = frames.t if total == m else np.interp(grid, rows, frames.t)
    seq = frames.seq if total == m else np.rint(np.interp(grid, rows, frames.seq)).astype(np.int64)
    offsets = np.full(total, -1, dtype=np.int64)
    offsets[rows] = frames.offset
    missing = np.broadcast_to(~have[:, None], values.shape).copy()
    info = dict(source or {})
    info.update(stats.as_dict())
    info.update(
        seq=seq,
        byte_offset=offsets,
        unfilled_gaps=int((frames.missing_before > MAX_FILL).sum()),
        counts_per_rev=[c.counts_per_rev for c in channels],
    )
    return Stream(
        t=t,
        values=values,
        channels=(*(c.name for c in channels), "u"),
        units=("rad",) * k + ("V",),
        missing=missing,
        source=info,
    )


def stream_from_capture(path: str | Path, spec: RigSpec | None, strict: bool = False) -> Stream:
    """Read a raw ``.bin`` capture into an EncoderStream; see :func:`read_capture`."""
    frames, stats = read_capture(path, strict=strict)
    channels = encoder_channels(spec) if spec is not None else default_channels(stats.n_channels)
    src = {"file": str(path), "format": "bin"}
    if spec is not None:
        src["spec"] = str(spec.path)
    return frames_to_stream(frames, stats, channels, src)


# ------------------------------------------------------------------------------ long gaps

# A capture whose frames stop for longer than this (s) is split there into segments: the
# estimators would otherwise put states on a grid across the whole gap (a stray frame 2^30
# seq numbers after the others made one log read as 1 073 748 s and its worker grow by
# 300 MB/s). Shorter gaps are filled with missing rows and bridged by the dynamics.
MAX_GAP_S = 1.0


@dataclass(frozen=True)
class Gap:
    """A stretch of ``seconds`` with no sample, between rows ``rows`` (the last row before,
    the first after) whose board frame numbers are ``seq`` and whose bytes start at
    ``byte_offset`` in the capture (-1 for a CSV log)."""

    rows: tuple[int, int]
    seq: tuple[int, int]
    byte_offset: tuple[int, int]
    seconds: float

    def describe(self) -> str:
        where = f"frames seq {self.seq[0]} -> {self.seq[1]} (rows {self.rows[0]}-{self.rows[1]}"
        if self.byte_offset[1] >= 0:
            where += f", bytes {self.byte_offset[0]}-{self.byte_offset[1]}"
        return f"{where}): no sample for {self.seconds:.6g} s"


def long_gaps(stream: Stream, limit_s: float = MAX_GAP_S) -> list[Gap]:
    """Gaps longer than ``limit_s`` between rows that hold a sample (a run of missing rows
    or a jump in ``t`` alike)."""
    have = np.flatnonzero(~stream.missing.all(axis=1))
    if have.size < 2:
        return []
    dt = np.diff(stream.t[have])
    seq = stream.source.get("seq")
    seq = np.arange(len(stream)) if seq is None else np.asarray(seq)
    offset = stream.source.get("byte_offset")
    offset = np.full(len(stream), -1) if offset is None else np.asarray(offset)
    gaps = []
    for i in np.flatnonzero(dt > limit_s).tolist():
        a, b = int(have[i]), int(have[i + 1])
        gaps.append(
            Gap((a, b), (int(seq[a]), int(seq[b])), (int(offset[a]), int(offset[b])), float(dt[i]))
        )
    return gaps


def split_at_gaps(stream: Stream, limit_s: float = MAX_GAP_S) -> tuple[list[Stream], list[Gap]]:
    """The stream cut at every gap longer than ``limit_s`` (segments in time order, each
    from its first to its last sample), and the gaps. One segment when there is none."""
    gaps = long_gaps(stream, limit_s)
    if not gaps:
        return [stream], []
    have = np.flatnonzero(~stream.missing.all(axis=1))
    starts = [int(have[0])] + [g.rows[1] for g in gaps]
    stops = [g.rows[0] + 1 for g in gaps] + [int(have[-1]) + 1]
    return [_rows(stream, a, b) for a, b in zip(starts, stops, strict=True)], gaps


def _rows(stream: Stream, a: int, b: int) -> Stream:
    """Rows ``a:b`` of a stream, with the per-row arrays of its ``source`` cut alike."""
    n = len(stream)
    source = {
        k: (v[a:b] if isinstance(v, np.ndarray) and v.shape[:1] == (n,) else v)
        for k, v in stream.source.items()
    }
    source["rows"] = (a, b)
    return Stream(
        stream.t[a:b], stream.values[a:b], stream.channels, stream.units,
        stream.missing[a:b], source,
    )  # fmt: skip
