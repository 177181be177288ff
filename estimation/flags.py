"""Parameter flags that cannot lie, for every estimator (issue 24).

An estimator hands over what it computed — values, linearized std, which parameters sit on a
bound of their box or on the boundary of physical consistency, which are only bounded from
below, and how its run ended — and :func:`flag_parameters` turns that into
``ParameterEstimate`` objects by one set of rules:

- a parameter on a box bound or on the consistency face is not a measurement (the data push
  it further): no finite std, not identifiable;
- a run whose convergence test did not pass stopped at a point that is not a minimum; the
  linearization there describes that point, not the data: no finite std, none identifiable;
- a value that is only a lower bound (μ of a contact that never slides) has no std;
- a std that is not finite (a direction the data do not excite) or larger than half the
  parameter's magnitude is not an identification.

``ParameterEstimate`` and ``Estimate`` check the result once more when they are built
(``estimation.estimate``), so no estimator can report a flagged parameter as identified.
"""

from __future__ import annotations

import math

import numpy as np

from physid.estimation.estimate import ParameterEstimate, Status

REL_STD_LIMIT = 0.5  # a parameter whose std exceeds half its magnitude is not identified
# A value within this fraction of its scale (|initial value|, or the box width) of a bound
# is on it. The solvers put a parameter they stop at a bound exactly there, but a later
# stage (κ continuation, a restart) can leave a round-off image: b2 = 2.9e-12 N m s/rad on
# the bound 0 with a scale of 1e-4 was reported with a finite std and "identifiable". A
# distance of 1e-6 of the scale is far below any std the data give (the smallest relative
# std seen on the sample folder is 4e-4, J of the pendulum).
BOUND_TOL = 1e-6


def bound_flags(values, lower, upper, scale=None) -> np.ndarray:
    """ "lower", "upper" or "" per parameter: which bound of its box it sits on (SI values),
    within ``BOUND_TOL`` of ``scale`` (default: the value's magnitude)."""
    values, lower, upper = (np.asarray(a, float) for a in (values, lower, upper))
    mag = np.abs(values) if scale is None else np.abs(np.asarray(scale, float))
    tol = np.maximum(BOUND_TOL * mag, 1e-9 * np.abs(values)) + 1e-300
    return np.where(values <= lower + tol, "lower", np.where(values >= upper - tol, "upper", ""))


def flag_parameters(
    names,
    values,
    std,
    units: dict[str, str],
    status: Status,
    magnitude=None,
    at_bound=None,
    lower_bound=None,
    unexcited: dict[str, str] | None = None,
    released_std=None,
) -> dict[str, ParameterEstimate]:
    """``ParameterEstimate`` per name by the rules of this module.

    ``values``, ``std`` (SI; std may be inf or NaN); ``magnitude`` per parameter, the size
    its std is compared with (default |value|); ``at_bound`` per parameter "lower", "upper",
    "consistency" or ""/None; ``lower_bound`` per parameter True where the value is only a
    bound from below; ``unexcited`` {name: text} for parameters in a direction the data do
    not excite (the text names the direction); ``released_std`` per parameter, for one on a
    box bound: its std with the bound released (NaN or inf where unknown), which bounds it
    one-sidedly (``ParameterEstimate.released_std``)."""
    names = list(names)
    p = len(names)
    values = np.asarray(values, float)
    std = np.asarray(std, float)
    magnitude = np.abs(values) if magnitude is None else np.asarray(magnitude, float)
    at_bound = [None] * p if at_bound is None else [b or None for b in at_bound]
    lower_bound = [False] * p if lower_bound is None else [bool(b) for b in lower_bound]
    unexcited = unexcited or {}
    released = np.full(p, np.nan) if released_std is None else np.asarray(released_std, float)
    out = {}
    for i, name in enumerate(names):
        reason = _reason(
            name, float(std[i]), float(magnitude[i]), status, at_bound[i], lower_bound[i],
            unexcited,
        )  # fmt: skip
        # Bounds, a failed convergence test and bound-only values void the std; a weakly
        # excited parameter keeps its (large, finite) std: it is honest, only no
        # identification.
        voided = at_bound[i] or not status.converged or lower_bound[i]
        shown_std = math.inf if voided else float(std[i])
        one_sided = (
            float(released[i])
            if at_bound[i] in ("lower", "upper") and status.converged and np.isfinite(released[i])
            else None
        )
        out[name] = ParameterEstimate(
            value=float(values[i]),
            std=shown_std,
            unit=units[name],
            identifiable=reason is None,
            at_bound=at_bound[i],
            lower_bound=lower_bound[i],
            reason=reason,
            released_std=one_sided,
        )
    return out


_TOO_LARGE = "its std exceeds half its magnitude"


def _reason(name, std, magnitude, status, at_bound, lower_bound, unexcited) -> str | None:
    """Why ``name`` is not identifiable (None: it is), in the order of the module's rules."""
    if at_bound in ("lower", "upper"):
        return f"at its {at_bound} bound: the data push it beyond the box, no measurement"
    if at_bound == "consistency":
        return (
            "on the boundary of physical consistency: the data push it beyond what a body can "
            "have, no measurement"
        )
    if at_bound:
        return f"at a bound ({at_bound})"
    if not status.converged:
        return f"the fit did not converge ({status.result.value}: {status.stop})"
    if lower_bound:
        return "only a lower bound: the data bound it from below, not above"
    if name in unexcited:
        return f"not excited enough by the data: {unexcited[name]}"
    if not math.isfinite(std):
        return "not excited by the data (no finite std)"
    if std > REL_STD_LIMIT * magnitude:
        return f"{_TOO_LARGE} ({std:.3g} against {magnitude:.3g})"
    return None


def unexcited_directions(names, directions, variances, limit: float = REL_STD_LIMIT) -> list:
    """Directions of the relative covariance the data do not excite, named by parameter:
    per direction (columns of ``directions``, relative units, with ``variances`` its
    relative variance, inf where unbounded) whose std exceeds ``limit``, a dict of
    ``parameters`` {name: component} with the components above 0.1 in magnitude (largest
    first), ``relative_std`` and ``text`` ("J_Axx − 0.71 J_Ayy")."""
    names = list(names)
    directions = np.asarray(directions, float)
    out = []
    for j, var in enumerate(np.asarray(variances, float)):
        rel = math.sqrt(var) if math.isfinite(var) else math.inf
        if rel <= limit:
            continue
        col = directions[:, j]
        big = np.argsort(-np.abs(col))
        big = [i for i in big if abs(col[i]) > 0.1]
        if not big:
            continue
        sign = 1.0 if col[big[0]] >= 0 else -1.0
        parts = {names[i]: float(sign * col[i] / abs(col[big[0]])) for i in big}
        out.append({"parameters": parts, "relative_std": rel, "text": _combination(parts)})
    return out


def _combination(parts: dict[str, float]) -> str:
    text = ""
    for k, (name, c) in enumerate(parts.items()):
        mag = abs(c)
        coeff = "" if math.isclose(mag, 1.0, rel_tol=1e-3) else f"{mag:.2g} "
        if k == 0:
            text = f"{coeff}{name}"
        else:
            text += f" {'+' if c >= 0 else '−'} {coeff}{name}"
    return text


def unexcited_by_parameter(directions: list) -> dict[str, str]:
    """{name: "in the direction J_Axx − 0.71 J_Ayy"} for every parameter that takes part in
    an unexcited direction (from :func:`unexcited_directions`)."""
    out: dict[str, str] = {}
    for d in directions:
        for name in d["parameters"]:
            out.setdefault(name, f"in the direction {d['text']}")
    return out
