"""Rig specs: TOML files that describe a rig, its fixed values and the parameters to identify.

Layout of a spec (every number carries its unit, converted to SI on load)::

    [rig]
    name = "furuta"            # free text shown in reports
    model = "furuta"           # model builder (see rigs.models)
    description = "..."

    [fixed]                    # known values
    l1 = { value = 0.128, unit = "m" }

    [parameters]               # to identify: initial value and box bounds
    J_Azz = { initial = 0.01, lower = 1e-6, upper = 1.0, unit = "kg m^2" }

    [method]                   # time step, weights, solver settings
    h = { value = 1e-3, unit = "s" }

    [sensors.theta1]           # one table per sensor channel, free keys per kind
    kind = "encoder"

Other tables (``[scene]``, ``[markers]``, ...) are kept verbatim in ``RigSpec.sections`` for the
builders that need them. Errors name the file and the key.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

from physid.errors import InputError
from physid.suggest import did_you_mean
from physid.units import UnitError, parse_unit, to_si

# The built-in rig specs are data of the rigs package (``rigs/specs/`` in the repository).
SPEC_DIR = Path(str(resources.files("physid.rigs") / "specs"))


class SpecError(InputError):
    """A rig spec that cannot be used; the message names the file and the key."""


@dataclass(frozen=True)
class Quantity:
    """A fixed value in SI units, with the unit it was written in."""

    value: float
    unit: str


@dataclass(frozen=True)
class ParameterSpec:
    """A parameter to identify: SI initial value, box ``[lower, upper]``, the spec's unit."""

    name: str
    initial: float
    lower: float
    upper: float
    unit: str
    scale: float  # SI value of one spec unit, to report values in the user's unit


@dataclass(frozen=True)
class RigSpec:
    """A parsed rig spec. Use :meth:`value` to read a fixed value with its dimension checked."""

    path: Path
    name: str
    model: str
    description: str
    fixed: dict[str, Quantity]
    parameters: dict[str, ParameterSpec]
    method: dict[str, Any]
    sensors: dict[str, dict[str, Any]]
    sections: dict[str, Any] = field(default_factory=dict)

    def error(self, key: str, message: str) -> SpecError:
        return SpecError(f"{self.path}: [{key}] {message}")

    def value(self, key: str, unit: str, *, positive: bool = False, nonnegative: bool = False):
        """SI value of ``key``: a fixed value, or a parameter's initial value.

        ``unit`` is the expected dimension (any unit of that dimension is accepted in the file).
        """
        if key in self.fixed:
            quantity, where = self.fixed[key], f"fixed.{key}"
            si = quantity.value
            written = quantity.unit
        elif key in self.parameters:
            param, where = self.parameters[key], f"parameters.{key}"
            si, written = param.initial, param.unit
        else:
            raise self.error(
                f"fixed.{key}",
                f"missing value {key!r} (needed by model {self.model!r}); add "
                f'{key} = {{ value = ..., unit = "{unit}" }} under [fixed]',
            )
        _check_dimension(self, where, written, unit)
        if positive and not si > 0:
            raise self.error(where, f"must be positive, got {si}")
        if nonnegative and not si >= 0:
            raise self.error(where, f"must be non-negative, got {si}")
        return si

    def section_value(
        self, section: str, key: str, unit: str, default: float | None = None
    ) -> float:
        """SI value of ``[section] key``, dimension-checked against ``unit``.

        When the key is absent: ``default`` (already SI), or an error naming the file and key
        if no default is given.
        """
        table = self.method if section == "method" else self.sections.get(section, {})
        if key not in table:
            if default is None:
                raise self.error(
                    f"{section}.{key}",
                    f'missing; add {key} = {{ value = ..., unit = "{unit}" }} under [{section}]',
                )
            return default
        return _quantity(self, f"{section}.{key}", table[key], unit)

    def method_value(self, key: str, unit: str, default: float) -> float:
        """SI value of a ``[method]`` setting, or ``default`` (already SI) when absent."""
        return self.section_value("method", key, unit, default)

    def check_parameters(self, allowed: dict[str, str]) -> None:
        """Raise if a parameter is not one the model knows or has the wrong dimension."""
        for name, param in self.parameters.items():
            if name not in allowed:
                raise self.error(
                    f"parameters.{name}",
                    f"model {self.model!r} has no parameter {name!r}"
                    f"{did_you_mean(name, allowed)}; known: " + ", ".join(sorted(allowed)),
                )
            _check_dimension(self, f"parameters.{name}", param.unit, allowed[name])

    def check_keys(self, section: str, known) -> None:
        """Raise if ``[section]`` has a key that is not in ``known`` (a typo would otherwise
        leave the setting at its default without a word)."""
        table = self.method if section == "method" else self.sections.get(section, {})
        for key in table:
            if key not in known:
                raise self.error(
                    f"{section}.{key}",
                    f"unknown setting{did_you_mean(key, known)}; known: {', '.join(sorted(known))}",
                )


def _check_dimension(spec: RigSpec, where: str, written: str, expected: str) -> None:
    try:
        want, got = parse_unit(expected), parse_unit(written)
    except UnitError as exc:
        raise spec.error(where, str(exc)) from None
    if want.dims != got.dims:
        raise spec.error(
            where,
            f"unit {written!r} ({got.describe_dims()}) should be like {expected!r} "
            f"({want.describe_dims()})",
        )


def _quantity(spec: RigSpec, where: str, entry: Any, unit: str | None = None) -> float:
    if isinstance(entry, int | float) and not isinstance(entry, bool):
        if unit not in (None, "", "1"):
            raise spec.error(where, f'give a unit: {{ value = {entry}, unit = "{unit}" }}')
        return float(entry)
    if not isinstance(entry, dict) or "value" not in entry:
        raise spec.error(where, 'expected a table { value = ..., unit = "..." }')
    written = str(entry.get("unit", ""))
    if unit is not None:
        _check_dimension(spec, where, written, unit)
    try:
        return to_si(_number(spec, where, entry["value"]), written)
    except UnitError as exc:
        raise spec.error(where, str(exc)) from None


def _number(spec: RigSpec, where: str, raw: Any) -> float:
    if isinstance(raw, bool) or not isinstance(raw, int | float) or not math.isfinite(raw):
        raise spec.error(where, f"expected a finite number, got {raw!r}")
    return float(raw)


def load_spec(path: str | Path) -> RigSpec:
    """Read and validate a rig spec TOML file; a bare name looks in ``rigs/specs/``."""
    path = resolve_spec_path(path)
    try:
        with open(path, "rb") as fh:
            raw = tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{path}: not valid TOML: {exc}") from None
    except FileNotFoundError:
        raise SpecError(_no_such_rig(path)) from None
    except OSError as exc:
        raise SpecError(f"{path}: cannot read rig spec: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise SpecError(f"{path}: not a rig spec (not TOML text)") from None
    for table in raw:
        known = did_you_mean(table, _KNOWN_TABLES | _SECTIONS)
        if table not in _KNOWN_TABLES | _SECTIONS and known:
            raise SpecError(f"{path}: [{table}] is not a table physid reads{known}")

    rig = raw.get("rig")
    if not isinstance(rig, dict) or "model" not in rig:
        raise SpecError(f'{path}: [rig] missing; it must name the model, e.g. model = "furuta"')
    shell = RigSpec(
        path=path,
        name=str(rig.get("name", path.stem)),
        model=str(rig["model"]),
        description=str(rig.get("description", "")),
        fixed={},
        parameters={},
        method=dict(raw.get("method", {})),
        sensors=dict(raw.get("sensors", {})),
        sections={k: v for k, v in raw.items() if k not in _KNOWN_TABLES},
    )
    for key, entry in _dotted(raw.get("fixed", {}), "value").items():
        si = _quantity(shell, f"fixed.{key}", entry)
        unit = str(entry.get("unit", "")) if isinstance(entry, dict) else ""  # bare number: 1
        shell.fixed[key] = Quantity(si, unit)
    for key, entry in _dotted(raw.get("parameters", {}), "initial").items():
        shell.parameters[key] = _parameter(shell, key, entry)
    return shell


def _dotted(table: dict, leaf_key: str, prefix: str = "") -> dict:
    """Flatten TOML's dotted keys: ``arm.mass = { value = ... }`` parses as a table ``arm``
    holding ``mass``; tree specs name values ``<body>.mass``, so tables without ``leaf_key``
    are joined into dotted names."""
    flat = {}
    for key, entry in table.items():
        if isinstance(entry, dict) and leaf_key not in entry and entry:
            flat.update(_dotted(entry, leaf_key, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = entry
    return flat


_KNOWN_TABLES = {"rig", "fixed", "parameters", "method", "sensors"}
# Tables kept verbatim for the model builders (a misspelling of one of these is an error;
# other tables are kept for builders this module does not know).
_SECTIONS = {
    "simulation", "scene", "markers", "video", "ground", "tree", "closures", "loads", "groups"
}  # fmt: skip


def _no_such_rig(path: Path) -> str:
    """The error for a spec that does not exist: a guess among the built-in rigs, and all of
    them listed."""
    rigs = builtin_specs()
    listed = ", ".join(rigs)
    if path.suffix != ".toml" and len(path.parts) == 1:
        guess = did_you_mean(path.name.replace("-", "_"), rigs)
        return (
            f"no rig {path.name!r}{guess}; built-in rigs: {listed}; or give the path of a "
            "spec file (.toml)"
        )
    guess = did_you_mean(path.stem, rigs)
    return f"{path}: no such rig spec file{guess}; built-in rigs: {listed}"


def _parameter(spec: RigSpec, key: str, entry: Any) -> ParameterSpec:
    where = f"parameters.{key}"
    if not isinstance(entry, dict):
        raise spec.error(where, "expected { initial = ..., lower = ..., upper = ..., unit = ... }")
    for needed in ("initial", "unit"):
        if needed not in entry:
            raise spec.error(where, f"missing {needed!r}")
    unit = str(entry["unit"])
    try:
        scale = parse_unit(unit).scale
    except UnitError as exc:
        raise spec.error(where, str(exc)) from None
    initial = _number(spec, where, entry["initial"]) * scale
    lower = _number(spec, where, entry.get("lower", -math.inf)) * scale
    upper = _number(spec, where, entry.get("upper", math.inf)) * scale
    if not lower <= initial <= upper:
        raise spec.error(where, f"initial value {initial} is outside [{lower}, {upper}]")
    return ParameterSpec(key, initial, lower, upper, unit, scale)


def resolve_spec_path(path: str | Path) -> Path:
    """A spec path as given, or ``rigs/specs/NAME.toml`` for a bare rig name like ``furuta``
    (``ellipse-drop`` names ``ellipse_drop``: dashes are normalized in bare names only, never
    in paths)."""
    candidate = Path(path)
    if candidate.exists() or candidate.suffix == ".toml":
        return candidate
    builtin = SPEC_DIR / f"{candidate.name.replace('-', '_')}.toml"
    return builtin if builtin.exists() else candidate


def builtin_specs() -> list[str]:
    """Names of the rig specs shipped in ``rigs/specs/``."""
    return sorted(p.stem for p in SPEC_DIR.glob("*.toml"))


def with_overrides(spec: RigSpec, overrides: dict[str, str], origin: str = "--set") -> RigSpec:
    """A copy of ``spec`` with values replaced, in any table of the spec.

    A name is a fixed value or a parameter (its initial value), else a key of ``[method]``,
    else the one table that has that key (``ground_surface_offset`` is ``[scene]``'s);
    ``TABLE.KEY`` names the table outright (``method.sigma_pos``; this form may also add a
    ``[method]`` setting the spec leaves at its default). Each override is
    ``"VALUE"`` (in the unit the spec already uses for that key), ``"VALUE UNIT"``, or an
    array ``"[1, 2] mm"``. A tree rig's dotted value names (``pole.mass``) may also name a
    value the spec leaves to the model (its ``[tree]`` tables or MJCF file), with a unit.
    ``origin`` is how the user wrote the overrides (``--set``, or a
    manifest's ``set`` table), so that errors name what the user typed. Unknown names
    raise a SpecError that lists the known ones.
    """
    fixed = dict(spec.fixed)
    parameters = dict(spec.parameters)
    method = dict(spec.method)
    sections = {k: dict(v) if isinstance(v, dict) else v for k, v in spec.sections.items()}
    for name, text in overrides.items():
        where = f"{origin} {name}={text}" if origin == "--set" else f"{origin}.{name} = {text!r}"
        raw, unit = _override_value(spec, where, name, text)
        table, key = _override_target(spec, name, where, fixed, parameters, method, sections)
        if table == "fixed" and key not in fixed:  # a tree's named value, e.g. pole.mass
            if not isinstance(raw, float):
                raise _override_error(spec, f"{where}: expected a number")
            if not unit:
                raise _override_error(
                    spec,
                    f"{where}: the spec does not set {name!r}, so no unit is implied; write "
                    f"the value with its unit (e.g. '{text} kg' for a mass; docs/newton-euler.md "
                    "lists each value's unit)",
                )
            fixed[key] = Quantity(to_si(raw, unit), unit)  # the tree checks name and unit
        elif table == "fixed":
            if not isinstance(raw, float):
                raise _override_error(spec, f"{where}: expected a number")
            unit = unit or fixed[key].unit
            _override_dims(spec, where, f"fixed.{key}", unit, fixed[key].unit or "1")
            fixed[key] = Quantity(to_si(raw, unit), unit)
        elif table == "parameters":
            if not isinstance(raw, float):
                raise _override_error(spec, f"{where}: expected a number")
            p = parameters[key]
            unit = unit or p.unit
            _override_dims(spec, where, f"parameters.{key}", unit, p.unit or "1")
            si = to_si(raw, unit)
            lower, upper = min(p.lower, si), max(p.upper, si)
            parameters[key] = ParameterSpec(key, si, lower, upper, p.unit, p.scale)
        elif table == "method" and key not in method:
            method[key] = {"value": raw, "unit": unit} if unit else raw
        else:
            target = method if table == "method" else sections[table]
            target[key] = _replaced_entry(spec, f"{table}.{key}", where, target[key], raw, unit)
    return RigSpec(
        spec.path,
        spec.name,
        spec.model,
        spec.description,
        fixed,
        parameters,
        method,
        spec.sensors,
        sections,
    )


def _override_error(spec: RigSpec, message: str) -> SpecError:
    """An override that cannot be applied: the message starts with what the user wrote."""
    return SpecError(f"{message} (rig spec {spec.path})")


def _override_dims(spec: RigSpec, where: str, key: str, unit: str, expected: str) -> None:
    try:
        _check_dimension(spec, key, unit, expected)
    except SpecError as exc:
        message = str(exc).removeprefix(f"{spec.path}: ")
        raise _override_error(spec, f"{where}: {message}") from None


def _override_value(spec: RigSpec, where: str, name: str, text) -> tuple[Any, str]:
    """(number or nested list of numbers, unit or "") of an override's text."""
    if isinstance(text, dict) and "value" in text:  # a manifest may write a table
        value, unit = text["value"], str(text.get("unit", ""))
        text = f"{value} {unit}".strip()
    text = str(text).strip()
    if text.startswith("["):
        depth, end = 0, -1
        for i, ch in enumerate(text):
            depth += ch == "["
            depth -= ch == "]"
            if depth == 0:
                end = i
                break
        body, unit = text[: end + 1], text[end + 1 :].strip()
        try:
            value = tomllib.loads(f"v = {body}")["v"]
        except tomllib.TOMLDecodeError:
            raise _override_error(spec, f"{where}: {body!r} is not an array of numbers") from None
        return value, unit
    number, _, unit = text.partition(" ")
    try:
        return float(number), unit.strip()
    except ValueError:
        raise _override_error(spec, f"{where}: {number!r} is not a number") from None


def _override_target(spec, name, where, fixed, parameters, method, sections) -> tuple[str, str]:
    """(table, key) that the override ``name`` replaces; see ``with_overrides``."""
    tables = {"fixed": fixed, "parameters": parameters, "method": method}
    tables |= {k: v for k, v in sections.items() if isinstance(v, dict)}
    for table in ("fixed", "parameters"):  # dotted names of trees: link2.mass, gravity.z
        if name in tables[table]:
            return table, name
    if "." in name:
        table, _, key = name.partition(".")
        if table in tables and key in tables[table]:
            return table, key
        if table == "method" and key:  # a setting the spec leaves at its default
            return table, key
        if spec.model == "tree" and table not in tables:
            return "fixed", name  # a value of the tree's elements the spec leaves to the model
    else:
        for table in ("fixed", "parameters", "method"):
            if name in tables[table]:
                return table, name
        owners = [t for t, v in tables.items() if name in v]
        if len(owners) == 1:
            return owners[0], name
        if len(owners) > 1:
            options = ", ".join(f"{t}.{name}" for t in owners)
            raise _override_error(spec, f"{where}: {name!r} is in several tables; write {options}")
    known = sorted([*fixed, *parameters, *(f"method.{k}" for k in method)])
    known += sorted(
        f"{t}.{k}"
        for t, v in tables.items()
        if t not in ("fixed", "parameters", "method")
        for k in v
    )
    raise _override_error(
        spec,
        f"{where}: no such value in the spec (to set a [method] setting the spec leaves at "
        f"its default, write method.{name}); known: {', '.join(known)}",
    )


def _replaced_entry(spec, key: str, where: str, entry, raw, unit: str):
    """A spec table entry (``{ value, unit }`` or a bare number) with its value replaced."""
    if isinstance(entry, dict) and "value" in entry:
        written = str(entry.get("unit", ""))
        unit = unit or written
        if written or unit:
            _override_dims(spec, where, key, unit, written or "1")
        old = entry["value"]
        if isinstance(old, list) != isinstance(raw, list):
            shape = "an array [...]" if isinstance(old, list) else "a number"
            raise _override_error(spec, f"{where}: expected {shape} like the spec's {old!r}")
        return {**entry, "value": raw, "unit": unit}
    if isinstance(entry, bool) or not isinstance(entry, int | float):
        raise _override_error(spec, f"{where}: the spec's value {entry!r} cannot be set")
    if unit not in ("", "1"):
        raise _override_error(spec, f"{where}: {key} is dimensionless; give a plain number")
    if not isinstance(raw, float):
        raise _override_error(spec, f"{where}: expected a number")
    return int(raw) if isinstance(entry, int) and float(raw).is_integer() else raw


def with_parameters(spec: RigSpec, free: dict[str, tuple[float, float, float]]) -> RigSpec:
    """A copy of ``spec`` that also identifies the fixed values named in ``free``, each given
    as (initial, lower, upper) in the unit the spec writes it in; already-free parameters may
    be given to change their start and box."""
    fixed = dict(spec.fixed)
    parameters = dict(spec.parameters)
    for name, (initial, lower, upper) in free.items():
        if name in fixed:
            unit = fixed.pop(name).unit
        elif name in parameters:
            unit = parameters[name].unit
        else:
            known = ", ".join(sorted([*spec.fixed, *spec.parameters]))
            raise spec.error(f"parameters.{name}", f"no such value in the spec; known: {known}")
        entry = {"initial": initial, "lower": lower, "upper": upper, "unit": unit}
        parameters[name] = _parameter(spec, name, entry)
    return replace(spec, fixed=fixed, parameters=parameters)
