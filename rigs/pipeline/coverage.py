"""Does the reported std cover the truth? (issue 24) Repeated synthetic identifications with
independent noise and a known model error, and the fraction of errors within 1 and 2 std,
per parameter class.

The model error is the estimator's step: the data are simulated at ``h_sim`` (0.1 ms), the
estimator runs at a coarser ``h`` (2 ms), so its values are shadow parameters of the
discrete model (Marklund et al. Section 4.7) with a bias the same in every dataset. For a
calibrated std, about 68 % of the errors lie within 1 std and 95 % within 2 std; the issue
asks 60–76 % and ≥ 95 % per class over 50 datasets.

Used by ``benchmarks/bench_std_coverage.py`` (prints the table) and the slow test
``tests/estimation/test_std_coverage.py``; no file I/O.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from physid.rigs.pipeline.sample import EncoderScenario
from physid.rigs.pipeline.synthetic import record
from physid.spec import load_spec

# Parameter classes: the issue asks the coverage per class (a std can be right for inertias
# and wrong for friction).
CLASSES = {"inertia": ("J", "J_"), "damping": ("b",), "friction": ("mu",), "gain": ("K",)}


def parameter_class(name: str) -> str:
    for cls, prefixes in CLASSES.items():
        if any(name == p or (p.endswith("_") and name.startswith(p)) for p in prefixes):
            return cls
        if any(name.startswith(p) and name[len(p) :].isdigit() for p in prefixes):
            return cls
    return "other"


@dataclass(frozen=True)
class Case:
    """One study: the rig, its scenario, the noise (rad, white Gaussian), the data's step
    ``h_sim`` and the spec's method settings (``method``, as in a spec file) for the fit."""

    spec_name: str = "pendulum"
    scenario: EncoderScenario = field(
        default_factory=lambda: EncoderScenario(duration=3.0, angles0=(2.0,))
    )
    noise: float = 5e-4  # about a 4096-count encoder's quantization (4.4e-4 rad)
    h_sim: float = 1e-4
    # Tree study: each seed's release angles drawn uniformly within ± this (rad) of the
    # scenario's, so the step's error differs between datasets as between experiments (0: one
    # motion for all, whose model error is one draw, the same bias in every dataset)
    angle_spread: float = 0.0
    estimator: str = "spook"  # "spook" (identify_hinged) or "tree" (identify_tree)
    method: dict = field(
        default_factory=lambda: {
            "h": {"value": 2e-3, "unit": "s"},
            "holdout": 0.0,
            "model_error": True,
            "step_extrapolation": True,
        }
    )


PENDULUM = Case()

# The same study on the tree estimator (generalized coordinates, the default for hinged rigs):
# the data are the tree's own integrator (``variational_friction.rollout``, viscous and exact
# dry friction) at h_sim = 0.1 ms, identified at h = 2 ms. Its own integrator, not SPOOK's:
# then the only model error is the step, known and the same in every dataset, as the issue
# asks; SPOOK's data carry its compliant hinge and load-proportional friction, a model-form
# error the tree does not describe (issue 22: pendulum b +832 % on SPOOK's sample).
TREE_PENDULUM = Case(
    estimator="tree",
    method={"estimator": "tree", "h": {"value": 2e-3, "unit": "s"}},
)
# The same with ``[method] step_extrapolation``: the refit at h/2 and the order-2 Richardson
# value (``rigs.models.tree_step``).
# The same with each dataset released from its own angle in 2 ± 0.5 rad: the model error (the
# step's, whose effect on J depends on where the turning points fall between grid steps)
# varies between datasets as it does between a user's experiments.
TREE_PENDULUM_MOTIONS = replace(TREE_PENDULUM, angle_spread=0.5)
TREE_PENDULUM_EXTRAPOLATED = replace(
    TREE_PENDULUM, method={**TREE_PENDULUM.method, "step_extrapolation": True}
)


def run_case(
    case: Case,
    seeds,
    progress: Callable[[str], None] | None = None,
    each: Callable[[dict], None] | None = None,
) -> list[dict]:
    """Identify the case once per seed (``run_tree_case`` where ``case.estimator`` is
    "tree"). Per seed: ``values``, ``std`` (reported), ``std_white`` ((3.31) as printed),
    ``std_linearized`` (batch means and the data's own noise), ``truth``, ``verdict`` and
    ``converged``; ``each(row)`` is called as each is done (to keep partial results of a
    long study)."""
    from physid.rigs.models.identify_hinged import identify_series, method_settings, series_on_grid
    from physid.rigs.models.kinds import kind_module

    if case.estimator == "tree":
        return run_tree_case(case, seeds, progress, each)
    say = progress or (lambda _line: None)
    base = load_spec(case.spec_name)
    sim = dict(base.sections["simulation"], h={"value": case.h_sim, "unit": "s"})
    base = replace(base, sections={**base.sections, "simulation": sim})
    clean = record(base, case.scenario, lambda a: a)
    spec = replace(clean.spec, method={**clean.spec.method, **case.method})
    rig = kind_module(spec).build(spec)
    h = method_settings(spec)["h"]
    rows = []
    for seed in seeds:
        rng = np.random.default_rng(seed)
        log = clean.log
        noisy = log.values.copy()
        k = len(rig.channels)
        noisy[:, :k] += rng.normal(0.0, case.noise, noisy[:, :k].shape)
        log = replace(log, values=noisy)
        est, _ = identify_series(spec, rig, [series_on_grid(log, rig.channels, h, "sim")])
        names = list(est.parameters)
        row = {
            "seed": int(seed),
            "values": {k: est.parameters[k].value for k in names},
            "std": {k: est.parameters[k].std for k in names},
            "std_white": est.extra["std_linearized_white"],
            "std_linearized": est.extra.get("std_linearized", est.extra["std_at_stop"]),
            "values_at_half_step": est.extra.get("values_at_half_step"),
            "values_at_step": est.extra.get("values_at_step"),
            "extrapolation_noise": est.extra.get("extrapolation_noise"),
            # A parameter on a box bound: the bound and its released std (one-sided interval)
            "one_sided": {
                k: {"side": p.at_bound, "std": p.released_std}
                for k, p in est.parameters.items()
                if p.released_std is not None
            },
            "truth": {k: clean.truth[k] for k in names},
            "verdict": est.verdict,
            "converged": est.converged,
        }
        rows.append(row)
        if each is not None:
            each(row)
        z = {k: (row["values"][k] - row["truth"][k]) / row["std"][k] for k in names}
        say(f"seed {seed}: " + ", ".join(f"{k} z={v:+.2f}" for k, v in z.items()))
        for k, bound in row["one_sided"].items():
            z1 = one_sided_z(row["values"][k], row["truth"][k], bound)
            say(f"  {k} on its {bound['side']} bound: truth at {z1:.2f} released std from it")
    return rows


def tree_recording(case: Case, angles0=None):
    """(spec, rig, clean log, truth) of a tree case: the spec's [simulation] truth integrated by
    ``variational_friction.rollout`` at ``case.h_sim`` from rest at ``angles0`` (rad; default
    the scenario's), sampled at its rate; the spec's encoder noise set to ``case.noise`` (what
    the fit's weights and χ² assume) and its method to ``case.method``."""
    from physid.rigs.models.hinged import rollout_tree
    from physid.rigs.models.kinds import kind_module
    from physid.streams import Stream

    base = load_spec(case.spec_name)
    sensors = {
        k: ({**v, "noise": {"value": case.noise, "unit": "rad"}} if v.get("kind") == "encoder"
            else v)
        for k, v in base.sensors.items()
    }  # fmt: skip
    spec = replace(base, sensors=sensors, method={**base.method, **case.method})
    rig = kind_module(spec).tree_rig(spec)
    truth = {k: float(v) for k, v in base.sections["simulation"]["truth"].items()}
    sc = case.scenario
    steps = int(round(sc.duration / case.h_sim))
    start = sc.angles0 if angles0 is None else angles0
    # The sample's integrator (one jitted rollout per rig and step, reused by every seed).
    q = rollout_tree(rig, {**rig.values, **truth}, start, np.zeros(steps), case.h_sim)
    stride = max(1, int(round(1.0 / (sc.rate * case.h_sim))))
    angles = q[::stride]
    t = case.h_sim * stride * np.arange(len(angles))
    log = Stream(
        t, np.column_stack([angles, np.zeros(len(t))]), (*rig.channels, "u"),
        ("rad",) * len(rig.channels) + ("V",), np.zeros((len(t), len(rig.channels) + 1), bool),
    )  # fmt: skip
    return spec, rig, log, {k: truth[k] for k in spec.parameters}


def run_tree_case(case: Case, seeds, progress=None, each=None, half_step: bool = False):
    """``run_case`` for the tree estimator (``identify_tree_series``, the spec's defaults).
    ``half_step``: also refit each dataset at h/2 (``values_at_half_step``: the step's
    bias, measured)."""
    from physid.estimation.step_bias import halve_series
    from physid.rigs.models.identify_tree import identify_tree_series, series_on_grid

    say = progress or (lambda _line: None)
    spec, rig, clean, truth = tree_recording(case)
    h = spec.method_value("h", "s", 1e-3)
    half = replace(spec, method={**spec.method, "h": {"value": h / 2, "unit": "s"}})
    k = len(rig.channels)
    rows = []
    for seed in seeds:
        rng = np.random.default_rng(seed)
        if case.angle_spread:
            shift = rng.uniform(-case.angle_spread, case.angle_spread, len(case.scenario.angles0))
            clean = tree_recording(case, np.asarray(case.scenario.angles0) + shift)[2]
        noisy = clean.values.copy()
        noisy[:, :k] += rng.normal(0.0, case.noise, noisy[:, :k].shape)
        log = replace(clean, values=noisy)
        series = series_on_grid(log, rig, h, "sim")
        est, fits = identify_tree_series(spec, rig, [series])
        names = list(est.parameters)
        row = {
            "seed": int(seed),
            "values": {n: est.parameters[n].value for n in names},
            "std": {n: est.parameters[n].std for n in names},
            "std_white": est.extra["std_linearized_white"],
            # The std's pieces: its degrees of freedom and coverage factor (the reported std
            # is the linearized one times k; ``std_pieces``)
            "std_dof": est.extra.get("std_dof"),
            "std_coverage_factor": est.extra.get("std_coverage_factor"),
            "at_bound": {n: est.parameters[n].at_bound for n in names},
            # On a box bound: no std; counted one-sidedly by its released std (``coverage``)
            "one_sided": {
                n: {"side": p.at_bound, "std": p.released_std}
                for n, p in est.parameters.items()
                if p.released_std is not None
            },
            "identifiable": {n: est.parameters[n].identifiable for n in names},
            "truth": truth,
            "verdict": est.verdict,
            "converged": est.converged,
            "iterations": est.iterations,
        }
        for key in ("values_at_step", "values_at_half_step", "std_linearized", "step_std"):
            if key in est.extra:
                row[key] = est.extra[key]
        if half_step and "values_at_half_step" not in row:
            # The same samples on the grid of h/2 (observations on the even steps), started
            # from the fit's angles: the two fits differ in the step only.
            halved = halve_series(series, fits[0]["angles"])
            halved["u"] = np.repeat(series["u"], 2, axis=0)  # held over both halves
            fine, _ = identify_tree_series(half, rig, [halved])
            row["values_at_half_step"] = {n: fine.parameters[n].value for n in names}
            row["std_at_half_step"] = {n: fine.parameters[n].std for n in names}
        rows.append(row)
        if each is not None:
            each(row)
        z = {n: (row["values"][n] - truth[n]) / row["std"][n] for n in names}
        say(f"seed {seed}: " + ", ".join(f"{n} z={v:+.2f}" for n, v in z.items()))
    return rows


def unexpanded(rows: list[dict]) -> list[dict]:
    """The rows with the std before the coverage factor (``std`` / k): the linearized std of
    (3.31) with batch means, for comparison with the reported (expanded) one."""
    out = []
    for row in rows:
        k = row.get("std_coverage_factor") or {}
        out.append({**row, "std": {n: s / k.get(n, 1.0) for n, s in row["std"].items()}})
    return out


def std_pieces(rows: list[dict]) -> dict[str, dict]:
    """Per parameter, over the datasets with a finite std: the medians of the white meat's
    share of the (unexpanded) variance, of the batch-means excess's share, of ν_eff and of
    k; the std's own spread as degrees of freedom, ν̂ = 2 E[V]² / Var(V) of the unexpanded
    variance V (on one motion the errors' variance is the same in every dataset, so ν̂ is
    the variance estimate's own: compare with ν_eff); and the z = error / reported std:
    their sd, excess kurtosis (0 for a normal, 6/(ν − 4) for Student's t_ν) and the
    Kolmogorov–Smirnov p-values against N(0, 1) and against t of the median ν_eff applied
    to the unexpanded z."""
    from scipy import stats

    out = {}
    for name in rows[0]["values"]:
        ok = [r for r in rows if np.isfinite(r["std"][name]) and r["std"][name] > 0]
        k = np.array([(r.get("std_coverage_factor") or {}).get(name, 1.0) for r in ok])
        var = (np.array([r["std"][name] for r in ok]) / k) ** 2
        white = np.array([r["std_white"][name] for r in ok]) ** 2
        err = np.array([r["values"][name] - r["truth"][name] for r in ok])
        nu = np.array([(r.get("std_dof") or {}).get(name, np.inf) for r in ok])
        z_plain = err / np.sqrt(var)
        z = z_plain / k  # over the reported std
        nu_med = float(np.median(nu))
        out[name] = {
            "n": len(ok),
            "white_share": float(np.median(np.minimum(white / var, 1.0))),
            "excess_share": float(np.median(np.maximum(1.0 - white / var, 0.0))),
            "dof": nu_med,
            "coverage_factor": float(np.median(k)),
            "dof_from_spread": float(2 * var.mean() ** 2 / var.var(ddof=1)),
            "sd_z": float(np.std(z, ddof=1)),
            "kurtosis_z": float(stats.kurtosis(z_plain)),
            "ks_normal": float(stats.kstest(z_plain, "norm").pvalue),
            "ks_t": float(stats.kstest(z_plain, stats.t(nu_med).cdf).pvalue)
            if np.isfinite(nu_med)
            else float("nan"),
        }
    return out


def one_sided_z(value: float, truth: float, bound: dict) -> float:
    """How many released std the truth lies from a parameter's bound, on the side the
    interval [bound, bound + k·std] (lower) or [bound − k·std, bound] (upper) covers; a
    truth beyond the bound itself counts as infinitely far."""
    beyond = truth - value if bound["side"] == "lower" else value - truth
    return beyond / bound["std"] if beyond >= 0 else float("inf")


def at_step(rows: list[dict], std: str = "first_order") -> list[dict]:
    """The rows as the fit at h gives them, for comparison with the reported (extrapolated)
    values: the value χ(h), with ``std`` "first_order" (the linearized std with the whole
    first-order bias 2|χ(h) − χ(h/2)| in quadrature: the reported std before the
    extrapolation), "linearized" (batch means, the data's own noise) or "white" ((3.31) as
    printed)."""
    out = []
    for row in rows:
        at_h, half = row.get("values_at_step"), row.get("values_at_half_step")
        if not at_h:
            continue
        if std == "first_order":
            stds = {
                k: float(np.hypot(row["std_linearized"][k], 2 * (v - half[k])))
                for k, v in at_h.items()
            }
        else:
            stds = row["std_linearized" if std == "linearized" else "std_white"]
        out.append({**row, "values": at_h, "std": stds})
    return out


def coverage(rows: list[dict], std_key: str = "std", one_sided: bool = True) -> dict[str, dict]:
    """Per parameter class, over the datasets where the parameter has a finite std or, on
    a box bound, a one-sided interval (``one_sided``: the truth's distance from the bound in
    released std; ``one_sided=False`` leaves those out): their number ``n``, the number
    ``flagged`` without either, the number ``on_bound`` counted one-sidedly, the fraction of
    errors within 1 and 2 of ``std_key``, and the median |error|/std (NaN for a class with
    no dataset to count, e.g. a friction that is a lower bound in every one)."""
    by_class: dict[str, list[float]] = {}
    flagged: dict[str, int] = {}
    on_bound: dict[str, int] = {}
    for row in rows:
        for name, value in row["values"].items():
            s = row[std_key][name]
            cls = parameter_class(name)
            by_class.setdefault(cls, [])
            bound = (row.get("one_sided") or {}).get(name) if one_sided else None
            if bound is not None:
                on_bound[cls] = on_bound.get(cls, 0) + 1
                by_class[cls].append(one_sided_z(value, row["truth"][name], bound))
                continue
            if s is None or not np.isfinite(s) or s <= 0:
                flagged[cls] = flagged.get(cls, 0) + 1
                continue
            by_class[cls].append(abs(value - row["truth"][name]) / s)
    return {
        cls: {
            "n": len(z),
            "flagged": flagged.get(cls, 0),
            "on_bound": on_bound.get(cls, 0),
            **_fractions(np.asarray(z, float)),
        }
        for cls, z in by_class.items()
    }


def _fractions(z: np.ndarray) -> dict[str, float]:
    """Fractions of |z| within 1 and 2, and its median; NaN without a dataset (NumPy's mean
    of an empty array is NaN too, but with a RuntimeWarning in every study's output)."""
    if not len(z):
        return dict.fromkeys(("within_1_std", "within_2_std", "median_abs_z"), math.nan)
    return {
        "within_1_std": float(np.mean(z <= 1.0)),
        "within_2_std": float(np.mean(z <= 2.0)),
        "median_abs_z": float(np.median(z)),
    }
