"""``read_log``: one entry point for encoder logs, parsed ``.csv`` or raw ``.bin`` captures."""

from __future__ import annotations

from pathlib import Path

from rigs.encoders.csvlog import read_log_csv
from rigs.errors import InputError
from rigs.spec import RigSpec, load_spec
from rigs.streams import Stream


def read_log(path: str | Path, spec: RigSpec | str | Path | None = None) -> Stream:
    """Read an encoder log into an EncoderStream (angles in rad, ``u`` in V, ``t`` in s).

    ``.csv`` logs are already in physical units. A raw ``.bin`` capture holds counts, so it
    needs the rig ``spec`` (a RigSpec, or a path / built-in name) for counts per revolution,
    sign and offset of each channel.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".csv":
        return read_log_csv(path)
    if suffix == ".bin":
        if spec is None:
            raise InputError(
                f"{path}: a raw .bin capture holds encoder counts; give the rig spec "
                "(counts per revolution, sign, offset) to convert it, e.g. "
                "read_log(path, spec='furuta'), or pass a parsed .csv log instead"
            )
        if not isinstance(spec, RigSpec):
            spec = load_spec(spec)
        from rigs.encoders.convert import stream_from_capture

        return stream_from_capture(path, spec)
    raise InputError(
        f"{path}: unknown encoder log type {path.suffix!r}; expected .csv (parsed log) "
        "or .bin (raw capture from physid record)"
    )
