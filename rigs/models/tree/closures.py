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
from dataclasses import dataclass, replace
from typing import Any

import jax.numpy as jnp
import numpy as np

from physid.dynamics.tree import WORLD, TreeParams
from physid.dynamics.variational.constrained import (
    BODY_FRAME,
    WORLD_FRAME,
    ClosedTree,
    PointClosure,
    PointLoad,
    constraint_jacobian,
)
from physid.rigs.models.tree.model import TreeError, TreeModel, build_model
from physid.rigs.models.tree.toml_tree import read_toml_tree
from physid.spec import RigSpec
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


# --- a closed tree rig from a spec -----------------------------------------------------------


@dataclass(frozen=True)
class ClosedTreeRig:
    """A tree spec with closures and loads: the model (``system``, ``params`` in SI, the
    spec's own values), the tree's value names (``model``) and the stiffness groups of
    ``[groups]`` (NAME = [joints]: one stiffness shared by those joints)."""

    spec: RigSpec
    model: TreeModel
    system: ClosedTree
    params: TreeParams
    groups: dict[str, tuple[int, ...]]  # group name -> dof indices (q order)

    @property
    def group_names(self) -> tuple[str, ...]:
        return tuple(self.groups)

    def group_matrix(self) -> np.ndarray:
        """G [n_dof, n_groups]: 1 where a dof's stiffness is its group's value."""
        G = np.zeros((self.system.n_dof, len(self.groups)))
        for j, dofs in enumerate(self.groups.values()):
            G[list(dofs), j] = 1.0
        return G

    def with_stiffness(self, kappa):
        """``params`` with each group's joints at stiffness ``kappa[j]`` (N m/rad or N/m; may be
        a JAX tracer: differentiable)."""
        G = jnp.asarray(self.group_matrix())
        held = 1.0 - jnp.sum(G, axis=1)
        d = self.params.dofs
        stiffness = held * d.stiffness + G @ jnp.asarray(kappa)
        return replace(self.params, dofs=replace(d, stiffness=stiffness))


def load_closed_tree(spec: RigSpec, load_keys=()) -> ClosedTreeRig:
    """The closed tree of a spec with ``[tree]``, ``[closures.*]``, ``[loads.*]`` and
    ``[groups]`` tables. Bodies of zero mass and zero inertia are frames (the massless link
    between the two joints of a corner); other bodies must be physical. Errors name the file
    and the table; ``load_keys`` are keys of ``[loads.*]`` the caller reads itself."""
    src = str(spec.path)
    model = build_model(read_toml_tree(spec, {}))
    tree, params = model.tree, model.params
    for i, name in enumerate(tree.body_names):
        mass = float(params.bodies.mass[i])
        inertia = np.asarray(params.bodies.inertia[i])
        if mass == 0.0 and not np.any(inertia):
            continue
        moments = np.linalg.eigvalsh(0.5 * (inertia + inertia.T))
        if not mass > 0 or moments[0] < -1e-12 * max(abs(moments[-1]), 1e-300):
            raise TreeError(
                f"{src}: [tree.bodies.{name}] mass {mass:g} kg and principal moments "
                f"{moments} kg m²: a body needs a positive mass and inertia (or zero mass and "
                "zero inertia for a massless frame)"
            )
    bodies = tree.body_names
    closures = read_closures(spec.sections.get("closures", {}), bodies, src)
    loads = read_loads(spec.sections.get("loads", {}), bodies, src, load_keys)
    system = ClosedTree(tree, closures, loads)
    check_closure_rank(system, constraint_jacobian(system, params, jnp.zeros(tree.n_dof)), src)
    groups = {}
    dof_names = tree.dof_names
    for name, joints in spec.sections.get("groups", {}).items():
        where = f"{src}: [groups] {name}"
        if not isinstance(joints, list) or not joints:
            raise TreeError(f'{where}: expected a list of joint names, e.g. ["theta1", "theta2"]')
        missing = [j for j in joints if j not in dof_names]
        if missing:
            raise TreeError(f"{where}: {missing} are not joints of the tree; joints: {dof_names}")
        taken = [j for j in joints if any(dof_names.index(j) in g for g in groups.values())]
        if taken:
            raise TreeError(f"{where}: {taken} are already in another group")
        groups[name] = tuple(dof_names.index(j) for j in joints)
    return ClosedTreeRig(spec, model, system, params, groups)
