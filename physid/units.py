"""Unit strings of rig specs: parse, check the dimension, convert to SI.

A unit string is a product of symbols with optional integer exponents, e.g. ``"kg m^2"``,
``"kg*m^2"``, ``"N m/V"``, ``"kg s^-1"``, ``"mm^2"``, ``"rad/N"``; ``"1"`` or ``""`` is
dimensionless. Radians are kept as their own dimension so that a rotational compliance
(rad/N) is never confused with a linear one (m/N).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from physid.errors import InputError

# Dimension order: mass, length, time, current, angle.
_DIMS = ("kg", "m", "s", "A", "rad")

# symbol -> (scale to SI, dimension exponents)
_SYMBOLS: dict[str, tuple[float, tuple[int, ...]]] = {
    "kg": (1.0, (1, 0, 0, 0, 0)),
    "g": (1e-3, (1, 0, 0, 0, 0)),
    "m": (1.0, (0, 1, 0, 0, 0)),
    "cm": (1e-2, (0, 1, 0, 0, 0)),
    "mm": (1e-3, (0, 1, 0, 0, 0)),
    "um": (1e-6, (0, 1, 0, 0, 0)),
    "s": (1.0, (0, 0, 1, 0, 0)),
    "ms": (1e-3, (0, 0, 1, 0, 0)),
    "us": (1e-6, (0, 0, 1, 0, 0)),
    "Hz": (1.0, (0, 0, -1, 0, 0)),
    "fps": (1.0, (0, 0, -1, 0, 0)),
    "A": (1.0, (0, 0, 0, 1, 0)),
    "N": (1.0, (1, 1, -2, 0, 0)),
    "J": (1.0, (1, 2, -2, 0, 0)),
    "W": (1.0, (1, 2, -3, 0, 0)),
    "V": (1.0, (1, 2, -3, -1, 0)),
    "mV": (1e-3, (1, 2, -3, -1, 0)),
    "rad": (1.0, (0, 0, 0, 0, 1)),
    "mrad": (1e-3, (0, 0, 0, 0, 1)),
    "deg": (math.pi / 180.0, (0, 0, 0, 0, 1)),
    "px": (1.0, (0, 0, 0, 0, 0)),
    "counts": (1.0, (0, 0, 0, 0, 0)),
}

_TOKEN = re.compile(r"^([A-Za-z]+)(?:\^?(-?\d+))?$")


class UnitError(InputError):
    """A unit string that cannot be parsed or has the wrong dimension."""


@dataclass(frozen=True)
class Unit:
    """A parsed unit: multiply a value by ``scale`` to get SI; ``dims`` over kg, m, s, A, rad."""

    text: str
    scale: float
    dims: tuple[int, ...]

    def describe_dims(self) -> str:
        parts = [f"{d}^{e}" if e != 1 else d for d, e in zip(_DIMS, self.dims, strict=True) if e]
        return " ".join(parts) or "dimensionless"


def parse_unit(text: str) -> Unit:
    """Parse a unit string such as ``"kg m^2"`` or ``"N m/V"``; raise UnitError if unknown."""
    cleaned = text.strip()
    if cleaned in ("", "1", "-"):
        return Unit(text, 1.0, (0,) * len(_DIMS))
    scale = 1.0
    dims = [0] * len(_DIMS)
    numerator, *denominators = cleaned.split("/")
    for sign, group in [(1, numerator)] + [(-1, d) for d in denominators]:
        for token in group.replace("*", " ").replace("·", " ").split():
            if token == "1":
                continue
            match = _TOKEN.match(token)
            if not match or match.group(1) not in _SYMBOLS:
                known = ", ".join(sorted(_SYMBOLS))
                raise UnitError(f"unknown unit {token!r} in {text!r} (known symbols: {known})")
            symbol_scale, symbol_dims = _SYMBOLS[match.group(1)]
            power = sign * int(match.group(2) or 1)
            scale *= symbol_scale**power
            for i, e in enumerate(symbol_dims):
                dims[i] += power * e
    return Unit(text, scale, tuple(dims))


def to_si(value: float, unit_text: str, expected: str | None = None) -> float:
    """Convert ``value`` in ``unit_text`` to SI, checking the dimension against ``expected``."""
    unit = parse_unit(unit_text)
    if expected is not None:
        want = parse_unit(expected)
        if unit.dims != want.dims:
            raise UnitError(
                f"unit {unit_text!r} ({unit.describe_dims()}) does not match the expected "
                f"{expected!r} ({want.describe_dims()})"
            )
    return float(value) * unit.scale
