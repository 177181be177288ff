"""Encoder logs as CSV: physid's own ``t,seq,<channels...>,u``, or a lab's columns by name.

physid writes one header line ``t,seq,<channels...>,u`` and one row per frame: ``t`` in s,
encoder channels in rad, ``u`` in V, ``seq`` the board's frame counter (unwrapped, so it keeps
increasing across the 2^32 wrap). A missing sample (a dropped or corrupted frame) is an empty
field: the reader turns it back into a masked sample, so a gap survives a round trip instead
of being silently interpolated. Numbers are written with Python's shortest round-trip
representation, so reading a log back gives bit-identical floats.

The reader also takes a lab's own file (``time_s,angle_deg,...``): a ``CsvLayout`` names the
time column and, per channel, its column, unit, sign and zero (``rigs.encoders.columns`` builds
one from a rig spec's ``[sensors.NAME] column``).
"""

from __future__ import annotations

import io
import math
import re
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from physid.errors import InputError
from physid.files import atomic_open
from physid.streams import Stream
from physid.suggest import did_you_mean

ANGLE_UNIT = "rad"
CONTROL_UNIT = "V"


class CsvLogError(InputError):
    """A CSV encoder log that cannot be read; the message names the file and the line."""


def _format(value: float, missing: bool) -> str:
    if missing or not math.isfinite(value):
        return ""
    return repr(float(value))


def write_log_csv(path: str | Path, stream: Stream) -> Path:
    """Write ``stream`` as a CSV encoder log at ``path``, atomically; return the path.

    The columns are ``t`` (s), ``seq``, the stream's channels other than ``u`` (rad) in their
    order, then ``u`` (V). ``seq`` comes from ``stream.source["seq"]`` when present, else
    0..N-1. A stream without a ``u`` channel gets an all-empty ``u`` column (missing, not 0).
    The file is written to a temporary name in the same folder and renamed into place, so a
    crash never leaves a half-written log under the final name.
    """
    path = Path(path)
    n = len(stream)
    angle_cols = [i for i, c in enumerate(stream.channels) if c != "u"]
    u_col = stream.channels.index("u") if "u" in stream.channels else None
    for i in angle_cols:
        if stream.units[i] != ANGLE_UNIT:
            raise ValueError(
                f"write_log_csv: channel {stream.channels[i]!r} is in {stream.units[i]!r}; "
                f"encoder logs hold angles in {ANGLE_UNIT!r}"
            )
    if u_col is not None and stream.units[u_col] != CONTROL_UNIT:
        raise ValueError(
            f"write_log_csv: channel 'u' is in {stream.units[u_col]!r}; it must be in 'V'"
        )
    seq = stream.source.get("seq") if isinstance(stream.source, dict) else None
    seq = np.arange(n, dtype=np.int64) if seq is None else np.asarray(seq, dtype=np.int64)
    if seq.shape != (n,):
        raise ValueError(f"write_log_csv: source['seq'] has shape {seq.shape}, expected ({n},)")

    header = ["t", "seq", *(stream.channels[i] for i in angle_cols), "u"]
    lines = [",".join(header)]
    t = stream.t.tolist()
    values = stream.values.tolist()
    missing = stream.missing.tolist()
    seq_list = seq.tolist()
    for k in range(n):
        row_v, row_m = values[k], missing[k]
        fields = [repr(t[k]), str(seq_list[k])]
        fields.extend(_format(row_v[i], row_m[i]) for i in angle_cols)
        fields.append("" if u_col is None else _format(row_v[u_col], row_m[u_col]))
        lines.append(",".join(fields))
    text = "\n".join(lines) + "\n"

    with atomic_open(path, encoding="ascii", newline="") as fh:
        fh.write(text)
    return path


@dataclass(frozen=True)
class CsvColumn:
    """One channel of a CSV log: ``header`` names its column; the value in the channel's SI
    ``unit`` (rad or V) is ``sign * scale * raw - offset``."""

    channel: str
    header: str
    unit: str = ANGLE_UNIT
    scale: float = 1.0
    sign: int = 1
    offset: float = 0.0
    required: bool = True
    sensor: str = ""  # the rig spec's sensor table it comes from, for error messages


@dataclass(frozen=True)
class CsvLayout:
    """Which columns of a CSV log to read. ``columns=None`` is physid's own format: every
    column other than ``t``, ``seq`` and ``u`` is an angle in rad, ``u`` is in V. ``time`` names
    the time column, whose values times ``time_scale`` are in s."""

    columns: tuple[CsvColumn, ...] | None = None
    time: str = "t"
    time_scale: float = 1.0


def read_log_csv(path: str | Path, layout: CsvLayout | None = None) -> Stream:
    """Read a CSV encoder log into a Stream (angles in rad, ``u`` in V, ``t`` in s).

    Without ``layout``: physid's own format, header ``t[,seq],<channels...>[,u]`` in any order
    (``seq`` and ``u`` optional). A ``layout`` (``rigs.encoders.columns.csv_layout`` makes one
    from a rig spec) reads named columns of a lab's own file, in its units, sign and zero.
    Empty or ``nan`` fields become missing samples; ``#`` starts a comment; the delimiter is
    ``,`` (``;`` or a tab when the header has no comma). ``source`` holds ``file``,
    ``format="csv"`` and ``seq`` (int64) when the file has one. Errors name the file and line.

    The rows are parsed by NumPy's C reader; only when it refuses a row does a line-by-line
    parse run, to name the line and the field.
    """
    path = Path(path)
    layout = layout or CsvLayout()
    raw = _read_bytes(path)
    header_at, header, delimiter, start = _split_header(path, raw)
    plan = _plan(path, header_at, header, layout)
    try:
        table = _parse_fast(raw, start, delimiter, plan.usecols, len(header))
    except ValueError:
        text = _decode(path, raw)
        table = _parse_slow(path, text, header_at, header, delimiter, plan)
    if table.shape[0] == 0:
        raise CsvLogError(f"{path}: line {header_at + 1}: no data rows after the header")
    return _stream(path, raw, header_at, table, plan, layout, delimiter)


@dataclass(frozen=True)
class _Plan:
    """Column indices (into the header) of time, seq (or None) and each channel."""

    time: int
    seq: int | None
    channels: tuple[CsvColumn, ...]
    indices: tuple[int, ...]
    names: tuple[str, ...]  # the header

    @property
    def usecols(self) -> list[int]:
        return [self.time, *([] if self.seq is None else [self.seq]), *self.indices]


def _read_bytes(path: Path) -> bytes:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise CsvLogError(f"{path}: no such file; check the path") from None
    except OSError as exc:
        raise CsvLogError(f"{path}: cannot read encoder log: {exc.strerror}") from None
    nul = raw.find(b"\0")  # text never holds a NUL byte; videos and captures do
    if nul >= 0:
        raise CsvLogError(
            f"{path}: byte {nul}: not a text file; a CSV log has a header line and one row of "
            "numbers per sample (a raw capture should end in .bin)"
        )
    return raw


def _decode(path: Path, raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CsvLogError(
            f"{path}: byte {exc.start}: not UTF-8 text; save the file as UTF-8"
        ) from None


def _split_header(path: Path, raw: bytes) -> tuple[int, list[str], str, int]:
    """0-based line of the header, its names, the delimiter and the byte offset after it."""
    at, pos = 0, 0
    while pos < len(raw):
        end = raw.find(b"\n", pos)
        end = len(raw) if end < 0 else end
        line = _decode(path, raw[pos:end]).strip()
        if line and not line.startswith("#"):
            delimiter = next((d for d in (",", ";", "\t") if d in line), ",")
            header = [h.strip().strip('"').strip() for h in line.split(delimiter)]
            return at, header, delimiter, end + 1
        at, pos = at + 1, end + 1
    raise CsvLogError(f"{path}: empty file; expected a header line such as t,theta")


def _plan(path: Path, header_at: int, header: list[str], layout: CsvLayout) -> _Plan:
    where = f"{path}: line {header_at + 1}"
    shown = ",".join(header)
    if len(set(header)) != len(header) or "" in header:
        raise CsvLogError(f"{where}: header {shown!r} has empty or repeated names")
    if layout.time not in header:
        raise CsvLogError(
            f"{where}: no time column {layout.time!r} in the header ({shown})"
            + _suggest(layout.time, header)
            + '; name it in the rig spec: [sensors.NAME] column = { time = "..." }'
        )
    if layout.columns is None:
        names = [h for h in header if h not in (layout.time, "seq", "u")]
        if not names:
            raise CsvLogError(
                f"{where}: header {shown!r} has no angle column; expected t[,seq],<channels...>[,u]"
            )
        columns = [CsvColumn(h, h) for h in names]
        if "u" in header:
            columns.append(CsvColumn("u", "u", CONTROL_UNIT))
    else:
        columns = []
        for c in layout.columns:
            if c.header in header:
                columns.append(c)
            elif c.required:
                raise CsvLogError(
                    f"{where}: no column {c.header!r} for channel {c.channel!r} in the header "
                    f"({shown})" + _suggest(c.header, header) + "; set the column name in "
                    f'the rig spec: [sensors.{c.sensor or c.channel}] column = {{ name = "..." }}'
                )
    seq = header.index("seq") if "seq" in header and layout.columns is None else None
    indices = tuple(header.index(c.header) for c in columns)
    return _Plan(header.index(layout.time), seq, tuple(columns), indices, tuple(header))


def _suggest(name: str, header: list[str]) -> str:
    return did_you_mean(name, header)


def _parse_fast(raw: bytes, start: int, delimiter: str, usecols, ncol: int) -> np.ndarray:
    """The used columns of every data row after byte ``start`` [rows, len(usecols)], NaN
    for empty fields, by NumPy's C parser; ValueError on a row it refuses or a row whose
    field count is not ``ncol`` (left to the line-by-line parse, which names the line)."""
    if raw.find(b"#", start) >= 0:  # comments (and the delimiters they may hold) go first
        raw, start = re.sub(rb"#[^\n]*", b"", raw[start:]), 0
    if raw.find(b"\r", start) >= 0:
        raw, start = raw[start:].replace(b"\r\n", b"\n").replace(b"\r", b"\n"), 0
    a = np.frombuffer(raw, dtype=np.uint8, offset=start)
    sep, nl = a == ord(delimiter), a == ord("\n")
    # An empty field: a delimiter at a line's start, or followed by another or by the line's
    # end. Insert "nan" there for the C parser (one copy of the bytes, and only if any).
    empty = np.flatnonzero((sep[:-1] | nl[:-1]) & sep[1:] | sep[:-1] & nl[1:]) + 1
    if a.size and sep[0]:
        empty = np.r_[0, empty]
    if a.size and sep[-1]:
        empty = np.r_[empty, a.size]
    if empty.size:
        nan = np.frombuffer(b"nan", dtype=np.uint8)
        a = np.insert(a, np.repeat(empty, 3), np.tile(nan, empty.size))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "input contained no data": reported by the caller
        table = np.loadtxt(
            io.BytesIO(a),
            delimiter=delimiter,
            comments=None,
            usecols=usecols,
            ndmin=2,
            dtype=float,
            encoding="latin-1",  # the numbers are ASCII; the header was decoded as UTF-8
        )
    # Rows with too many fields pass usecols: every row must have exactly ncol - 1 delimiters.
    if int(sep.sum()) != table.shape[0] * (ncol - 1):
        raise ValueError("a row's field count differs from the header's")
    return table


def _parse_slow(path, text: str, header_at, header, delimiter, plan: _Plan) -> np.ndarray:
    """Line by line: the same table as ``_parse_fast``, or a CsvLogError naming the line."""
    ncol, names = len(header), [c.channel for c in plan.channels]
    rows = []
    lines = text.splitlines()
    for i, line in enumerate(lines[header_at + 1 :], start=header_at + 2):
        line = line.split("#", 1)[0]
        if not line.strip():
            continue
        fields = [f.strip() for f in line.split(delimiter)]
        if len(fields) != ncol:
            raise CsvLogError(
                f"{path}: line {i}: {len(fields)} fields but the header has {ncol} "
                f"({','.join(header)}); a column is missing or extra"
            )
        row = [_time_field(path, i, header[plan.time], fields[plan.time])]
        if plan.seq is not None:
            row.append(_seq_field(path, i, fields[plan.seq]))
        for name, k in zip(names, plan.indices, strict=True):
            row.append(_value_field(path, i, name, fields[k]))
        rows.append(row)
    return np.array(rows, dtype=float).reshape(len(rows), len(plan.usecols))


def _time_field(path, line: int, name: str, field: str) -> float:
    try:
        value = float(field)
    except ValueError:
        raise CsvLogError(f"{path}: line {line}: {name} = {field!r} is not a number") from None
    if not math.isfinite(value):
        raise CsvLogError(f"{path}: line {line}: {name} = {field!r} must be finite")
    return value


def _seq_field(path, line: int, field: str) -> float:
    try:
        return float(int(field))
    except ValueError:
        raise CsvLogError(f"{path}: line {line}: seq = {field!r} is not an integer") from None


def _value_field(path, line: int, name: str, field: str) -> float:
    if not field:
        return math.nan
    try:
        return float(field)
    except ValueError:
        raise CsvLogError(
            f"{path}: line {line}: {name} = {field!r} is not a number "
            "(leave the field empty for a missing sample)"
        ) from None


def _stream(path: Path, raw: bytes, header_at: int, table, plan: _Plan, layout, delimiter):
    def where(k: int, column: int) -> str:
        """``line N: NAME = 'field'`` of data row ``k`` as the file writes it."""
        text = _decode(path, raw)
        line = _data_line_number(text, header_at, k)
        fields = text.splitlines()[line - 1].split("#", 1)[0].split(delimiter)
        field = fields[column].strip() if column < len(fields) else ""
        return f"{path}: line {line}: {plan.names[column]} = {field!r}"

    t = table[:, 0] * layout.time_scale
    bad = np.flatnonzero(~np.isfinite(t))
    if bad.size:
        raise CsvLogError(f"{where(int(bad[0]), plan.time)} must be finite")
    back = np.flatnonzero(np.diff(t) <= 0)
    if back.size:
        k = int(back[0]) + 1
        raise CsvLogError(
            f"{where(k, plan.time)} does not increase (previous {where(k - 1, plan.time)}); "
            "time stamps must be strictly increasing"
        )
    source = {"file": str(path), "format": "csv"}
    first = 1
    if plan.seq is not None:
        seq = table[:, 1]
        odd = np.flatnonzero(~(np.isfinite(seq) & (seq == np.round(seq))))
        if odd.size:
            raise CsvLogError(f"{where(int(odd[0]), plan.seq)} is not an integer")
        source["seq"] = seq.astype(np.int64)
        first = 2
    raw = table[:, first:]
    sign = np.array([c.sign * c.scale for c in plan.channels])
    offset = np.array([c.offset for c in plan.channels])
    values = raw * sign - offset  # NaN stays NaN: a masked sample can never pass as 0
    if layout.columns is not None:
        source["columns"] = {c.channel: c.header for c in plan.channels}
    return Stream(
        t=t,
        values=values,
        channels=tuple(c.channel for c in plan.channels),
        units=tuple(c.unit for c in plan.channels),
        missing=~np.isfinite(values),
        source=source,
    )


def _data_line_number(text: str, header_at: int, k: int) -> int:
    """1-based line number of the k-th data row (skipping blank and comment lines)."""
    count = -1
    lines = text.splitlines()
    for i in range(header_at + 1, len(lines)):
        line = lines[i].split("#", 1)[0]
        if not line.strip():
            continue
        count += 1
        if count == k:
            return i + 1
    return len(lines)
