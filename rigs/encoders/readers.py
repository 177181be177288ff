"""``read_log``: one entry point for encoder logs, CSV logs (physid's or a lab's) or raw
``.bin`` captures."""

from __future__ import annotations

from pathlib import Path

from physid.errors import InputError
from physid.rigs.encoders.capture import CaptureError, TruncatedCaptureWarning, read_capture
from physid.rigs.encoders.columns import csv_layout
from physid.rigs.encoders.convert import stream_from_capture
from physid.rigs.encoders.csvlog import read_log_csv
from physid.spec import RigSpec, load_spec
from physid.streams import Stream

__all__ = ["CaptureError", "TruncatedCaptureWarning", "read_capture", "read_log"]


def read_log(path: str | Path, spec: RigSpec | str | Path | None = None) -> Stream:
    """Read an encoder log into an EncoderStream (angles in rad, ``u`` in V, ``t`` in s).

    ``.csv`` logs hold angles: with a rig ``spec`` (a RigSpec, or a path / built-in name),
    each encoder sensor reads its column as ``[sensors.NAME] column`` says (its own name, in
    rad, by default; ``rigs.encoders.columns``); without one, every column. A raw ``.bin``
    capture holds counts, so it needs the spec for counts per revolution, sign and offset of
    each channel.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if spec is not None and not isinstance(spec, RigSpec):
        spec = load_spec(spec)
    if suffix == ".csv":
        return read_log_csv(path, csv_layout(spec, path))
    if suffix == ".bin":
        if spec is None:
            raise InputError(
                f"{path}: a raw .bin capture holds encoder counts; give the rig spec "
                "(counts per revolution, sign, offset) to convert it, e.g. "
                "read_log(path, spec='furuta'), or pass a parsed .csv log instead"
            )
        return stream_from_capture(path, spec)
    raise InputError(
        f"{path}: unknown encoder log type {path.suffix!r}; expected .csv (a log with a time "
        "column and one column per encoder) or .bin (raw capture from physid record)"
    )
