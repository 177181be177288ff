"""Which columns of a CSV log a rig spec reads: ``[sensors.NAME] column``.

Each encoder sensor reads the column named after it, in rad, unless its table says otherwise::

    [sensors.theta]
    kind = "encoder"
    column = { name = "angle_deg", unit = "deg", sign = -1, offset = { value = 90, unit = "deg" },
               time = "time_ms", time_unit = "ms", file = "lab_*.csv" }

    [sensors.u]                      # the motor voltage (rigs with a motor)
    kind = "control"
    column = { name = "motor_mV", unit = "mV" }

``column = "angle_deg"`` is short for ``{ name = "angle_deg" }``. The channel's value is
``sign * value - offset`` in rad (V for the control), after converting ``value`` from ``unit``;
``time`` (default ``t``) and ``time_unit`` (default s) name the time column, and must agree
between the sensors a file is read for. ``file`` (a glob on the file name, default every file)
says which files the table describes: a file that does not match it is read by the sensor's own
name, in rad, as physid writes its logs, so one spec reads a lab's files and physid's alike.

A ``.bin`` capture ignores ``column``: its sensors' ``channel``, ``counts_per_rev``, ``sign``
and ``offset`` describe the board's counts instead (``rigs.encoders.convert``).
"""

from __future__ import annotations

from fnmatch import fnmatch
from pathlib import Path
from typing import Any

from physid.rigs.encoders.csvlog import ANGLE_UNIT, CONTROL_UNIT, CsvColumn, CsvLayout
from physid.spec import RigSpec, _check_dimension, _quantity
from physid.suggest import did_you_mean
from physid.units import UnitError, parse_unit

COLUMN_KEYS = ("name", "unit", "sign", "offset", "time", "time_unit", "file")
# The keys of [sensors.NAME] tables of each kind read here (docs/rig-spec.md).
SENSOR_KEYS = {
    "encoder": ("kind", "channel", "counts_per_rev", "sign", "offset", "noise", "weight", "column"),
    "control": ("kind", "unit", "column"),
}
# Tree rigs (and the tree estimator) tie an encoder to a joint and an input to an actuator.
TREE_SENSOR_KEYS = {"encoder": ("joint",), "control": ("actuator",)}


def check_sensors(spec: RigSpec) -> None:
    """Raise on a misspelled key of an encoder or control sensor table (a typo would leave
    the setting at its default without a word), or of its ``column`` table."""
    for name, table in spec.sensors.items():
        if not isinstance(table, dict):
            raise spec.error(f"sensors.{name}", 'expected a table, e.g. kind = "encoder"')
        known = SENSOR_KEYS.get(table.get("kind"))
        if known is None:
            continue
        known = (*known, *TREE_SENSOR_KEYS[table.get("kind")])
        for key in table:
            if key not in known:
                raise spec.error(
                    f"sensors.{name}.{key}",
                    f"unknown key{did_you_mean(key, known)}; known: {', '.join(known)}",
                )
        _table(spec, name)


def csv_layout(spec: RigSpec | None, path: str | Path) -> CsvLayout | None:
    """The layout ``spec`` gives the CSV file ``path``; None (physid's own format, every
    column) when the spec has no encoder sensor."""
    if spec is None:
        return None
    check_sensors(spec)
    encoders = sorted(
        (table.get("channel", 0), name)
        for name, table in spec.sensors.items()
        if isinstance(table, dict) and table.get("kind") == "encoder"
    )
    if not encoders:
        return None
    controls = [
        name
        for name, table in spec.sensors.items()
        if isinstance(table, dict) and table.get("kind") == "control"
    ]
    name = Path(path).name
    columns, times = [], {}
    # Every sensor the spec declares must be in the file (a motor rig read without its
    # voltage would be fitted as if unpowered); without a control sensor, u is optional.
    for sensor, si in [(s, ANGLE_UNIT) for _, s in encoders] + [
        (s, CONTROL_UNIT) for s in controls[:1]
    ]:
        column, time = _column(spec, sensor, si, name, required=True)
        columns.append(column)
        if time is not None:
            times[sensor] = time
    if not controls:
        columns.append(CsvColumn("u", "u", CONTROL_UNIT, required=False, sensor="u"))
    distinct = set(times.values())
    if len(distinct) > 1:
        listed = "; ".join(f"{s}: {t[0]!r} in {t[2]}" for s, t in times.items())
        raise spec.error(
            "sensors", f"the sensors read {name} with different time columns ({listed})"
        )
    time, scale, _ = distinct.pop() if distinct else ("t", 1.0, "s")
    return CsvLayout(tuple(columns), time, scale)


def _table(spec: RigSpec, sensor: str) -> dict[str, Any] | None:
    entry = spec.sensors[sensor].get("column")
    where = f"sensors.{sensor}.column"
    if entry is None:
        return None
    if isinstance(entry, str):
        return {"name": entry}
    if not isinstance(entry, dict):
        raise spec.error(where, f'expected a name or a table {{ name = "..." }}, got {entry!r}')
    for key in entry:
        if key not in COLUMN_KEYS:
            raise spec.error(
                f"{where}.{key}",
                f"unknown key{did_you_mean(key, COLUMN_KEYS)}; known: {', '.join(COLUMN_KEYS)}",
            )
    return entry


def _applies(spec: RigSpec, sensor: str, file_name: str) -> bool:
    table = _table(spec, sensor)
    return table is not None and fnmatch(file_name, str(table.get("file", "*")))


def _column(
    spec: RigSpec, sensor: str, si: str, file_name: str, required: bool
) -> tuple[CsvColumn, tuple[str, float, str] | None]:
    """The sensor's column in ``file_name`` and the (time column, time scale, time unit) its
    table names (None when it names neither ``time`` nor ``time_unit``)."""
    where = f"sensors.{sensor}.column"
    table = _table(spec, sensor) if _applies(spec, sensor, file_name) else None
    channel = sensor if si == ANGLE_UNIT else "u"
    if table is None:
        return CsvColumn(channel, channel, si, required=required, sensor=sensor), None
    header = str(table.get("name", channel))
    unit = str(table.get("unit", si))
    _check_dimension(spec, f"{where}.unit", unit, si)
    scale = parse_unit(unit).scale
    sign = table.get("sign", 1)
    if isinstance(sign, bool) or sign not in (1, -1):
        raise spec.error(f"{where}.sign", f"must be 1 or -1, got {sign!r}")
    offset = table.get("offset", 0.0)
    offset = 0.0 if offset == 0 else _quantity(spec, f"{where}.offset", offset, si)
    time = str(table.get("time", "t"))
    time_unit = str(table.get("time_unit", "s"))
    try:
        time_scale = parse_unit(time_unit).scale
    except UnitError as exc:
        raise spec.error(f"{where}.time_unit", str(exc)) from None
    _check_dimension(spec, f"{where}.time_unit", time_unit, "s")
    column = CsvColumn(channel, header, si, scale, int(sign), float(offset), required, sensor)
    explicit = "time" in table or "time_unit" in table
    return column, (time, time_scale, time_unit) if explicit else None
