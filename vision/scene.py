"""What the camera sees on a planar rig: reference circles, ground circles, body markers.

Read from the ``[scene]`` and ``[markers]`` tables of a rig spec (see
``rigs/specs/ellipse_drop.toml``); all lengths SI (m) in the plane's world frame {S}
(x right, y up).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from physid.spec import RigSpec, SpecError
from physid.units import UnitError, parse_unit


@dataclass(frozen=True)
class Scene:
    """Planar scene geometry (m): reference circles [4, 2] with ``reference_radius``; ground
    circles [2, 2], ``ground_radius``, ``surface_offset``; body markers [2, 2] in the body
    frame (origin at the centre of mass) with ``marker_radius``; ellipse semi-axes a, b."""

    reference: np.ndarray
    reference_radius: float
    ground: np.ndarray
    ground_radius: float
    surface_offset: float
    markers: np.ndarray
    marker_radius: float
    a: float = 0.05
    b: float = 0.025
    ground_extent: tuple[float, float] | None = None

    @property
    def marker_distance(self) -> float:
        """Distance between the two body markers (m)."""
        return float(np.linalg.norm(self.markers[1] - self.markers[0]))

    def ground_line(self, ground_xy: np.ndarray) -> tuple[np.ndarray, float]:
        """Contact surface (P0 [2] m, alpha rad) from the two ground circles' centres (m)."""
        p, q = np.asarray(ground_xy, dtype=float)
        d = q - p
        alpha = float(np.arctan2(d[1], d[0]))
        normal = np.array([-np.sin(alpha), np.cos(alpha)])
        return p + self.surface_offset * normal, alpha

    def ground_segment(self, p0: np.ndarray, alpha: float, ground_xy: np.ndarray):
        """(start [2] m, length m) of the contact surface whose line passes through ``p0``
        at ``alpha`` (``ground_line``): it runs ``ground_extent`` = (before, after) beyond
        the two ground circles (measured along the bar); ``(p0, inf)`` without an extent
        (an infinite line)."""
        if self.ground_extent is None:
            return np.asarray(p0, float), float("inf")
        d = np.array([np.cos(alpha), np.sin(alpha)])
        before, after = self.ground_extent
        span = float(np.dot(np.asarray(ground_xy[1]) - ground_xy[0], d))
        return np.asarray(p0, float) - before * d, span + before + after


def default_scene() -> Scene:
    """The seed rig of Gabiccini & Fusco (Sect. 6.2), as in ``rigs/specs/ellipse_drop.toml``."""
    return Scene(
        reference=np.array([[0.0, 0.0], [0.40, 0.0], [0.40, 0.24], [0.0, 0.24]]),
        reference_radius=0.008,
        ground=np.array([[0.060, 0.078], [0.340, 0.0062]]),
        ground_radius=0.006,
        surface_offset=0.014,
        markers=np.array([[-0.025, 0.0], [0.025, 0.0]]),
        marker_radius=0.005,
    )


def scene_from_spec(spec: RigSpec) -> Scene:
    """The scene of a rig spec; a SpecError names the table and key that is wrong."""
    sc = spec.sections.get("scene")
    mk = spec.sections.get("markers")
    if not isinstance(sc, dict) or not isinstance(mk, dict):
        raise SpecError(
            f"{spec.path}: [scene] and [markers] tables are needed to track video; see "
            "rigs/specs/ellipse_drop.toml for the layout"
        )
    d = default_scene()
    a, b = d.a, d.b
    for name in ("a", "b"):
        if name in spec.fixed or name in spec.parameters:
            if name == "a":
                a = spec.value("a", "m", positive=True)
            else:
                b = spec.value("b", "m", positive=True)
    return Scene(
        reference=_points(spec, "scene", "reference_circles", sc, 4),
        reference_radius=_length(spec, "scene", "reference_radius", sc),
        ground=_points(spec, "scene", "ground_circles", sc, 2),
        ground_radius=_length(spec, "scene", "ground_radius", sc),
        surface_offset=_length(spec, "scene", "ground_surface_offset", sc, default=0.0),
        markers=_points(spec, "markers", "positions", mk, 2),
        marker_radius=_length(spec, "markers", "radius", mk),
        a=a,
        b=b,
        ground_extent=_extent(spec, sc),
    )


def _extent(spec: RigSpec, raw: dict) -> tuple[float, float] | None:
    """``[scene] ground_extent = { value = [BEFORE, AFTER], unit = "mm" }``: how far the
    contact surface runs beyond the first and the second ground circle (along the bar)."""
    if "ground_extent" not in raw:
        return None
    value, scale = _scale(spec, "scene.ground_extent", raw["ground_extent"])
    try:
        before, after = (float(v) * scale for v in value)
    except (TypeError, ValueError):
        before = after = float("nan")
    if not (np.isfinite(before) and np.isfinite(after) and before + after > -np.inf):
        raise SpecError(
            f"{spec.path}: [scene.ground_extent] expected [before, after], got {value!r}"
        )
    return before, after


def _scale(spec: RigSpec, where: str, entry) -> tuple[object, float]:
    if not isinstance(entry, dict) or "value" not in entry:
        raise SpecError(f'{spec.path}: [{where}] expected {{ value = ..., unit = "mm" }}')
    try:
        unit = parse_unit(str(entry.get("unit", "")))
    except UnitError as exc:
        raise SpecError(f"{spec.path}: [{where}] {exc}") from None
    if unit.dims != parse_unit("m").dims:
        raise SpecError(f"{spec.path}: [{where}] unit must be a length, e.g. mm")
    return entry["value"], unit.scale


def _points(spec: RigSpec, table: str, key: str, raw: dict, n: int) -> np.ndarray:
    where = f"{table}.{key}"
    if key not in raw:
        raise SpecError(f"{spec.path}: [{where}] missing: give {n} points [[x, y], ...]")
    value, scale = _scale(spec, where, raw[key])
    try:
        pts = np.asarray(value, dtype=float) * scale
    except (TypeError, ValueError):
        pts = np.zeros(0)
    if pts.shape != (n, 2) or not np.all(np.isfinite(pts)):
        raise SpecError(f"{spec.path}: [{where}] expected {n} points [[x, y], ...], got {value}")
    return pts


def _length(spec: RigSpec, table: str, key: str, raw: dict, default=None) -> float:
    where = f"{table}.{key}"
    if key not in raw:
        if default is not None:
            return default
        raise SpecError(f'{spec.path}: [{where}] missing: give {{ value = ..., unit = "mm" }}')
    value, scale = _scale(spec, where, raw[key])
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise SpecError(f"{spec.path}: [{where}] expected a non-negative number, got {value}")
    return float(value) * scale
