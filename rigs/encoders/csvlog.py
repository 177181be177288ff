"""Parsed encoder logs as CSV: one header line ``t,seq,<channels...>,u``, one row per frame.

``t`` is in s, encoder channels in rad, ``u`` in V, ``seq`` is the board's frame counter
(unwrapped, so it keeps increasing across the 2^32 wrap). A missing sample (a dropped or
corrupted frame) is an empty field: the reader turns it back into a masked sample, so a
gap survives a round trip instead of being silently interpolated.

Numbers are written with Python's shortest round-trip representation, so reading a log back
gives bit-identical floats.
"""

from __future__ import annotations

import math
import os
import tempfile
from pathlib import Path

import numpy as np

from physid.errors import InputError
from physid.files import follow_umask
from physid.streams import Stream

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

    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        follow_umask(fd)  # as open() would: mkstemp alone makes the log 0600
        with os.fdopen(fd, "w", encoding="ascii", newline="") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def read_log_csv(path: str | Path) -> Stream:
    """Read a CSV encoder log written by :func:`write_log_csv` (or by hand) into a Stream.

    Channels are the header's names between ``seq`` and ``u``, then ``u``; units are rad and
    V; ``t`` in s. Empty fields become missing samples. ``source`` holds ``file``,
    ``format="csv"`` and ``seq`` (int64). Errors name the file and the line.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise CsvLogError(f"{path}: cannot read encoder log: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise CsvLogError(
            f"{path}: byte {exc.start}: not a text file; a raw capture should end in .bin"
        ) from None

    lines = text.splitlines()
    header_at = next(
        (i for i, line in enumerate(lines) if line.strip() and not line.startswith("#")), None
    )
    if header_at is None:
        raise CsvLogError(f"{path}: empty file; expected a header line t,seq,<channels...>,u")
    header = [h.strip() for h in lines[header_at].split(",")]
    where = f"{path}: line {header_at + 1}"
    for needed in ("t", "seq", "u"):
        if needed not in header:
            raise CsvLogError(
                f"{where}: header has no {needed!r} column ({','.join(header)}); "
                "expected t,seq,<channels...>,u"
            )
    if header[:2] != ["t", "seq"] or header[-1] != "u" or len(header) < 4:
        raise CsvLogError(
            f"{where}: header {','.join(header)!r} must be t,seq,<channels...>,u "
            "with at least one channel"
        )
    if len(set(header)) != len(header) or "" in header:
        raise CsvLogError(f"{where}: header {','.join(header)!r} has empty or repeated names")
    channels = header[2:]
    ncol = len(header)

    t_list: list[float] = []
    seq_list: list[int] = []
    rows: list[list[float]] = []
    nan = math.nan
    for i in range(header_at + 1, len(lines)):
        line = lines[i]
        if not line.strip() or line.startswith("#"):
            continue
        fields = line.split(",")
        if len(fields) != ncol:
            raise CsvLogError(
                f"{path}: line {i + 1}: {len(fields)} fields but the header has {ncol} "
                f"({','.join(header)}); a column is missing or extra"
            )
        try:
            t_val = float(fields[0])
        except ValueError:
            raise CsvLogError(f"{path}: line {i + 1}: t = {fields[0]!r} is not a number") from None
        if not math.isfinite(t_val):
            raise CsvLogError(f"{path}: line {i + 1}: t = {fields[0]!r} must be finite")
        try:
            seq_val = int(fields[1])
        except ValueError:
            raise CsvLogError(
                f"{path}: line {i + 1}: seq = {fields[1]!r} is not an integer"
            ) from None
        row = []
        for name, field in zip(channels, fields[2:], strict=True):
            field = field.strip()
            if not field:
                row.append(nan)
                continue
            try:
                row.append(float(field))
            except ValueError:
                raise CsvLogError(
                    f"{path}: line {i + 1}: {name} = {field!r} is not a number "
                    "(leave the field empty for a missing sample)"
                ) from None
        t_list.append(t_val)
        seq_list.append(seq_val)
        rows.append(row)

    values = np.array(rows, dtype=float).reshape(len(rows), len(channels))
    t = np.array(t_list, dtype=float)
    if t.size > 1 and np.any(np.diff(t) <= 0):
        k = int(np.flatnonzero(np.diff(t) <= 0)[0]) + 1
        line_no = _data_line_number(lines, header_at, k)
        raise CsvLogError(
            f"{path}: line {line_no}: t = {t[k]!r} does not increase (previous {t[k - 1]!r}); "
            "time stamps must be strictly increasing"
        )
    missing = ~np.isfinite(values)
    return Stream(
        t=t,
        values=values,  # NaN where missing, so a masked sample can never pass as 0
        channels=tuple(channels),
        units=(ANGLE_UNIT,) * (len(channels) - 1) + (CONTROL_UNIT,),
        missing=missing,
        source={"file": str(path), "format": "csv", "seq": np.array(seq_list, dtype=np.int64)},
    )


def _data_line_number(lines: list[str], header_at: int, k: int) -> int:
    """1-based line number of the k-th data row (skipping blank and comment lines)."""
    count = -1
    for i in range(header_at + 1, len(lines)):
        line = lines[i]
        if not line.strip() or line.startswith("#"):
            continue
        count += 1
        if count == k:
            return i + 1
    return len(lines)
