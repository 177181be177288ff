"""Loop closures and point loads of a tree rig, read from a spec's tables by body name.

A tree cut open at one joint is closed again by holonomic constraints; a point load is a force
applied at a point of a body (a manipulator pushing). Both are written by the names of the
tree's own bodies::

    [closures.x_axis]                 # point (1, 0, 0) m of body "end" stays on the world's x axis
    body = "end"
    point = { value = [1.0, 0.0, 0.0], unit = "m" }
    other = "world"                   # a body name, or "world" (default)
    target = { value = [0.0, 0.0, 0.0], unit = "m" }   # in other's frame (default: its origin)
    free_axis = [1.0, 0.0, 0.0]       # optional: the point may slide along this line (2 rows)

    [loads.push]                      # three input components (N), in the world frame
    body = "link3"
    point = { value = [0.0, 0.0, 0.5], unit = "m" }
    frame = "world"                   # or "body": components in the body's frame

Points are positions (w = 1), never bare directions: a direction (w = 0) only constrains the
orientation, and three of them give rank-deficient rows (docs/variational.md, eq. 13).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from physid.dynamics.tree import WORLD
from physid.dynamics.variational.constrained import (
    BODY_FRAME,
    WORLD_FRAME,
    ClosedTree,
    PointClosure,
    PointLoad,
)
from physid.rigs.models.tree.model import TreeError
from physid.units import UnitError, parse_unit, to_si


def _body_index(bodies: tuple[str, ...], name: Any, where: str, allow_world: bool) -> int:
    if allow_world and name == "world":
        return WORLD
    if not isinstance(name, str) or name not in bodies:
        known = ", ".join((("world",) if allow_world else ()) + bodies)
        raise TreeError(f"{where}: body {name!r} is not a body of the tree; bodies: {known}")
    return bodies.index(name)


def _vector(entry: Any, where: str, unit: str | None) -> tuple[float, float, float]:
    """Three numbers, plain (``unit`` None) or as { value = [x, y, z], unit = "..." } of the
    dimension of ``unit``, in SI."""
    scale = 1.0
    raw = entry
    if isinstance(entry, Mapping):
        if unit is None or "value" not in entry:
            raise TreeError(f"{where}: expected three numbers, e.g. [1.0, 0.0, 0.0]")
        written = str(entry.get("unit", ""))
        try:
            if parse_unit(written).dims != parse_unit(unit).dims:
                raise TreeError(f"{where}: unit {written!r} is not a unit like {unit!r}")
            scale = to_si(1.0, written)
        except UnitError as exc:
            raise TreeError(f"{where}: {exc}") from None
        raw = entry["value"]
    elif unit not in (None, "1"):
        raise TreeError(f'{where}: give a unit: {{ value = {entry!r}, unit = "{unit}" }}')
    try:
        values = np.asarray(raw, dtype=float)
    except (TypeError, ValueError):
        raise TreeError(f"{where}: expected three numbers, got {raw!r}") from None
    if values.shape != (3,) or not np.all(np.isfinite(values)):
        raise TreeError(f"{where}: expected three finite numbers, got {raw!r}")
    return tuple(float(v) for v in values * scale)


_ORIGIN = {"value": [0.0, 0.0, 0.0], "unit": "m"}


def read_closures(
    tables: Mapping[str, Any], bodies: tuple[str, ...], source: str
) -> tuple[PointClosure, ...]:
    """The ``[closures.NAME]`` tables as constraints on the tree with body names ``bodies``;
    errors name the spec file (``source``) and the table."""
    out = []
    for name, entry in tables.items():
        where = f"{source}: [closures.{name}]"
        if not isinstance(entry, Mapping):
            raise TreeError(f"{where}: expected a table with body, point, other, target")
        unknown = set(entry) - {"body", "point", "other", "target", "free_axis"}
        if unknown:
            raise TreeError(f"{where}: unknown keys {sorted(unknown)}")
        for key in ("body", "point"):
            if key not in entry:
                raise TreeError(f"{where}: missing {key!r}")
        body = _body_index(bodies, entry["body"], f"{where} body", allow_world=False)
        other = _body_index(bodies, entry.get("other", "world"), f"{where} other", True)
        if other == body:
            raise TreeError(f"{where}: body and other are both {entry['body']!r}")
        free = entry.get("free_axis")
        if free is not None:
            free = _vector(free, f"{where} free_axis", None)
            if not np.linalg.norm(free) > 1e-12:
                raise TreeError(f"{where}: free_axis has zero length; give a direction")
        out.append(
            PointClosure(
                body=body,
                point=_vector(entry["point"], f"{where} point", "m"),
                other=other,
                target=_vector(entry.get("target", _ORIGIN), f"{where} target", "m"),
                free_axis=free,
                name=name,
            )
        )
    return tuple(out)


def read_loads(
    tables: Mapping[str, Any], bodies: tuple[str, ...], source: str, extra_keys=()
) -> tuple[PointLoad, ...]:
    """The ``[loads.NAME]`` tables as point loads on the tree with body names ``bodies``;
    ``extra_keys`` are keys the caller reads itself (a rig's force waveform), others are
    refused."""
    out = []
    for name, entry in tables.items():
        where = f"{source}: [loads.{name}]"
        if not isinstance(entry, Mapping):
            raise TreeError(f"{where}: expected a table with body, point, frame")
        unknown = set(entry) - {"body", "point", "frame", *extra_keys}
        if unknown:
            raise TreeError(f"{where}: unknown keys {sorted(unknown)}")
        for key in ("body", "point"):
            if key not in entry:
                raise TreeError(f"{where}: missing {key!r}")
        frame = str(entry.get("frame", WORLD_FRAME))
        if frame not in (WORLD_FRAME, BODY_FRAME):
            raise TreeError(f"{where}: frame {frame!r} is not 'world' or 'body'")
        body = _body_index(bodies, entry["body"], f"{where} body", allow_world=False)
        point = _vector(entry["point"], f"{where} point", "m")
        out.append(PointLoad(body, point, frame, name))
    return tuple(out)


def check_closure_rank(system: ClosedTree, jacobian: np.ndarray, source: str) -> None:
    """Refuse closures whose rows are dependent at the start configuration (Dh of less than
    full row rank): Newton's KKT matrix is then singular. Names the closures."""
    rows = np.asarray(jacobian, float)
    if rows.size == 0:
        return
    s = np.linalg.svd(rows, compute_uv=False)
    rank = int(np.sum(s > 1e-9 * s[0]))
    if rank < rows.shape[0]:
        names = ", ".join(c.name or str(i) for i, c in enumerate(system.closures))
        raise TreeError(
            f"{source}: the closures ({names}) give {rows.shape[0]} constraint rows of rank "
            f"{rank} at the start configuration; remove the dependent ones (a direction, w = 0, "
            "instead of a point constrains the orientation only) or add free_axis"
        )
