"""Self-contained HTML reports: one page per experiment and an index comparing experiments.

The pages are Jinja2 templates (``estimation/templates/``, package data): ``base.html`` (layout
and style), ``experiment.html`` (one block per section: ``verdict``, ``prediction``,
``parameters``, ``residuals``, ``state_fit``, ``impulses``, ``history``, ``facts`` with
``overlay`` inside it, so a later section, a video embed, is one block more) and
``index.html``. Plots are PNGs embedded as base64 data URIs, so a page can be mailed or
archived alone. The page builders are pure (summary dicts and the ``Estimate`` in, HTML text
out); ``write_*`` put them on disk. Every table header carries its unit.

What a page shows comes from the ``Estimate``: ``validation`` (verdict, prediction checks,
residual checks, what the std covers; ``estimation.validation``), ``extra["prediction_series"]``
(measured and predicted per channel, the headline plot), ``extra["series"]`` (data vs state
fit: ``{"name", "unit", "t", "measured", "t_fit", "fitted"}``, times in s) and
``extra["impulses"]`` (``{"t", "normal", "tangential"}``, N s).
"""

from __future__ import annotations

import base64
import functools
import html
import io
import math
from pathlib import Path

import numpy as np

from physid.estimation.estimate import Estimate, std_and_correlation
from physid.estimation.figures import pyplot
from physid.files import atomic_open

FAR = 3.0  # a value more than FAR of its own std from the truth is flagged
FINISHED = ("ok", "warning")  # experiments with a report (a warning: reported, with notes)
VERDICT_CSS = {"good fit": "good", "poor fit": "poor", "not converged": "notconv"}
# (an estimate without validation, "not checked", is shown like a poor fit: nothing vouches
# for it)


@functools.cache
def _environment():
    from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

    return Environment(
        loader=PackageLoader("physid.estimation", "templates"),
        autoescape=select_autoescape(["html"]),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def render(template: str, **context) -> str:
    """A template of ``estimation/templates`` rendered with ``context``."""
    return _environment().get_template(template).render(**context)


# ------------------------------------------------------------------------------ pieces


def page(title: str, body: str) -> str:
    """A page in the reports' style around ready-made HTML ``body``."""
    return render("page.html", title=title, body=body)


def esc(value) -> str:
    return html.escape(str(value))


def fmt(value, digits: int = 5) -> str:
    """A number for a table: significant digits, '—' for missing or non-finite."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "—"
    if isinstance(value, bool | str):
        return str(value)
    return f"{value:.{digits}g}"


def png_data_uri(fig) -> str:
    """Render a matplotlib figure to an embedded PNG and close it."""
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def image(uri: str, alt: str) -> str:
    return f'<img src="{uri}" alt="{esc(alt)}">'


def file_image(path: Path, alt: str) -> str:
    """Embed a PNG file written by an estimator ('' if it is absent)."""
    if not path.exists():
        return ""
    data = base64.b64encode(path.read_bytes()).decode()
    return image(f"data:image/png;base64,{data}", alt)


def _array(values) -> np.ndarray:
    return np.array([np.nan if v is None else v for v in values], float)


# ------------------------------------------------------------------------------ plots


def cost_plot(history: list[float]) -> str:
    """Cost per iteration on a log axis (embedded PNG URI)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 2.6))
    y = _array(history)
    ax.semilogy(np.arange(len(y)), np.where(y > 0, y, np.nan), "o-", ms=3)
    ax.set_xlabel("iteration")
    ax.set_ylabel("cost per step (1)")
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    return png_data_uri(fig)


def series_plot(series: list[dict]) -> str:
    """Data vs state fit, and below it the residual on the same time axis, per channel."""
    plt = pyplot()
    n = len(series)
    fig, axes = plt.subplots(2 * n, 1, figsize=(10, 2.6 * n), sharex=True, squeeze=False)
    for i, s in enumerate(series):
        t, y = np.asarray(s["t"], float), _array(s["measured"])
        tf, f = np.asarray(s["t_fit"], float), _array(s["fitted"])
        unit = s.get("unit", "")
        top, low = axes[2 * i, 0], axes[2 * i + 1, 0]
        top.plot(t, y, ".", ms=2, label="measured")
        top.plot(tf, f, lw=0.9, label="state fit")
        top.set_ylabel(f"{s['name']} ({unit})")
        top.legend(loc="best", fontsize=8)
        low.plot(t, y - np.interp(t, tf, f), ".", ms=2, color="C2")
        low.axhline(0.0, color="k", lw=0.5)
        low.set_ylabel(f"residual ({unit})")
    axes[-1, 0].set_xlabel("t (s)")
    fig.tight_layout()
    return png_data_uri(fig)


def prediction_plot(checks: list[dict]) -> str:
    """The headline plot: per channel, the measured data with the k-step-ahead and free-run
    predictions of every data set on one time axis, and below it the prediction errors
    with ±3 × the sensor noise."""
    plt = pyplot()
    names = list(dict.fromkeys(c["name"] for chk in checks for c in chk["channels"]))
    n = len(names)
    fig, axes = plt.subplots(2 * n, 1, figsize=(10, 2.8 * n), sharex=True, squeeze=False)
    shown = set()
    for j, check in enumerate(checks):
        t = np.asarray(check["t"], float)
        for c in check["channels"]:
            i = names.index(c["name"])
            top, low = axes[2 * i, 0], axes[2 * i + 1, 0]
            y, p = _array(c["measured"]), _array(c["predicted"])
            if (c["name"], check["data"]) not in shown:
                shown.add((c["name"], check["data"]))
                top.plot(t, y, ".", ms=1.5, color="0.5", label=f"measured ({check['data']})")
            style = "-" if check["kind"] == "free run" else ":"
            label = f"{check['kind']} ({check['data']})"
            top.plot(t, p, style, lw=0.9, color=f"C{j}", label=label)
            err = p - y
            if c.get("period"):
                err = (err + 0.5 * c["period"]) % c["period"] - 0.5 * c["period"]
            low.plot(t, err, style, lw=0.8, color=f"C{j}")
            top.set_ylabel(f"{c['name']} ({c['unit']})")
            low.set_ylabel(f"error ({c['unit']})")
            for sign in (-1, 1):
                low.axhline(sign * 3 * c["noise"], color="k", lw=0.5, ls="--")
    for i in range(n):
        axes[2 * i, 0].legend(loc="best", fontsize=7)
    axes[-1, 0].set_xlabel("t (s)")
    fig.tight_layout()
    return png_data_uri(fig)


def impulse_plot(impulses: dict) -> str:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 2.6))
    t = np.asarray(impulses["t"], float)
    ax.plot(t, _array(impulses["normal"]), lw=0.9, label="normal")
    ax.plot(t, _array(impulses["tangential"]), lw=0.9, label="tangential")
    ax.set_xlabel("t (s)")
    ax.set_ylabel("impulse (N s)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return png_data_uri(fig)


# ------------------------------------------------------------------------------ experiment


def truth_values(summary: dict) -> dict[str, float]:
    """Ground-truth parameter values from the experiment's truth file, if it has one."""
    truth = summary.get("truth") or {}
    values = truth.get("parameters", {})
    return {k: float(v) for k, v in values.items() if isinstance(v, int | float)}


PARAMETER_HEADER = [
    "parameter",
    "value (unit)",
    "std (unit)",
    "rel. std (%)",
    "unit",
    "identifiable",
    "truth (unit)",
    "(value − truth)/std (1)",
]


def value_text(p: dict) -> str:
    """The value as a reader should take it: "≥ 0.28 (lower bound)" where the data bound it
    only from below."""
    if p.get("lower_bound"):
        return f"≥ {fmt(p['value'], 3)} (lower bound)"
    released = p.get("released_std")
    if released is not None and p.get("at_bound") in ("lower", "upper"):
        # On a box bound: a one-sided interval of one released std (estimation.estimate).
        side = "≤" if p["at_bound"] == "lower" else "≥"
        sign = 1.0 if p["at_bound"] == "lower" else -1.0
        limit = fmt(p["value"] + sign * released, 3)
        return f"{fmt(p['value'])} (on its {p['at_bound']} bound; {side} {limit} at 1 std)"
    return fmt(p["value"])


def z_score(p: dict, truth: float | None) -> float | None:
    std = p.get("std")
    if truth is None or std is None or not math.isfinite(std) or std <= 0 or p.get("lower_bound"):
        return None
    return (p["value"] - truth) / std


def parameter_rows(summary: dict) -> list[list]:
    """Rows of the parameter table (cells as :func:`render`'s table macro takes them):
    name, value, std, relative std, unit, identifiable or why not, truth, z (coloured where
    |z| > FAR)."""
    truth = truth_values(summary)
    rows = []
    for name, p in summary.get("parameters", {}).items():
        value, std = p["value"], p.get("std")
        finite = std is not None and math.isfinite(std)
        rel = abs(std / value) if value and finite else None
        flag = (
            {"text": "yes", "class": "ok"}
            if p["identifiable"]
            else {"text": _not_identified(p), "class": "bad"}
        )
        true = truth.get(name)
        z = z_score(p, true)
        z_cell = {"text": fmt(z, 2), "class": "zbad" if z is not None and abs(z) > FAR else ""}
        rows.append(
            [
                name,
                value_text(p),
                fmt(std, 2) if finite else "—",
                f"{100 * rel:.2g}" if rel is not None else "—",
                p["unit"],
                flag,
                fmt(true),
                z_cell,
            ]
        )
    return rows


def _not_identified(p: dict) -> str:
    reason = p.get("reason")
    if reason:
        return f"not identifiable: {reason}"
    bound = p.get("at_bound")
    return f"not identifiable: at its {bound} bound" if bound else "not identifiable"


def experiment_page(summary: dict, estimate: Estimate, folder: Path) -> str:
    """The HTML report of one finished experiment (``folder`` holds its other outputs)."""
    name = summary["experiment"]
    checked = estimate.validation or {}
    word = checked.get("verdict") or ("not checked" if estimate.converged else "not converged")
    checks = estimate.extra.get("prediction_series") or []
    params = {k: vars(v) for k, v in estimate.parameters.items()}
    context = {
        "title": f"physid report: {name}",
        "rig": summary.get("rig_name", summary.get("rig")),
        "solver": estimate.solver,
        "iterations": estimate.iterations,
        "converged": estimate.converged,
        "status": _status(estimate),
        "version": estimate.version,
        "verdict": {
            "word": word,
            "css": VERDICT_CSS.get(word, "poor"),
            "summary": checked.get("summary", word),
            "reasons": checked.get("reasons", []),
            "factor": fmt(checked.get("poor_fit_factor", 3.0)),
        },
        "prediction_header": [
            "check",
            "data",
            "horizon (s)",
            "channel",
            "RMS error (channel unit)",
            "sensor noise (channel unit)",
            "RMS / noise (1)",
            "a correct model's RMS / noise (1)",
            "RMS over the whole record (channel unit)",
            "departs after (s)",
        ],
        "prediction_rows": prediction_rows(checked.get("predictions", [])),
        "prediction_plot": prediction_plot(checks) if checks else "",
        "parameter_header": PARAMETER_HEADER,
        "parameter_rows": parameter_rows({**summary, "parameters": params}),
        "std_covers": checked.get("std_covers", ""),
        "unexcited": [d["text"] for d in estimate.identifiability.get("unexcited", [])],
        "notes": _consistency_note(estimate.extra.get("consistency") or {})
        + _kappa_note(estimate.extra.get("kappa_stages") or []),
        "cost": fmt(estimate.cost),
        "cv_cost": fmt(estimate.cv_cost) if estimate.cv_cost else "",
        **_correlation(estimate),
        **_holdout(checked.get("held_out_tail"), params),
        **_residuals(checked.get("residuals") or {}),
        "fit_image": _fit_section(estimate, folder),
        "impulse_plot": _impulses(estimate),
        "cost_plot": cost_plot(estimate.history) if estimate.history else "",
        **_facts(summary, folder),
    }
    return render("experiment.html", **context)


def _status(estimate: Estimate) -> dict:
    s = estimate.status or {}
    return {"result": s.get("result", ""), "stop": s.get("stop", ""), "test": s.get("test")}


def prediction_rows(predictions: list[dict]) -> list[list]:
    rows = []
    for p in predictions:
        for c in p["channels"]:
            limit = c.get("limit", 3.0)  # (estimate.json files before "limit": 3 × noise)
            poor = c["ratio"] > limit if c.get("ratio") is not None else False
            rows.append(
                [
                    p["kind"],
                    p["data"],
                    fmt(p["horizon_s"], 3),
                    c["name"],
                    fmt(c["rms"], 3),
                    fmt(c["noise"], 3),
                    {"text": fmt(c["ratio"], 2), "class": "zbad" if poor else ""},
                    fmt(c.get("expected_ratio"), 2) if c.get("expected_ratio") else "—",
                    fmt(c.get("rms_whole_record"), 3),
                    fmt(p.get("departs_at_s"), 3),
                ]
            )
    return rows


def _correlation(estimate: Estimate) -> dict:
    """The parameters' correlation matrix from ``Estimate.covariance`` ('—' where a std is not
    finite), and the sentence saying which fit that covariance is from, where the estimator
    says (``identifiability["covariance_source"]``: the ellipse drop reports either its
    output-error fit's or its NLP's)."""
    cov = estimate.covariance
    # The covariance covers the first parameters (e.g. the ellipse drop's restitution, read
    # off the fitted impacts, has none of its own where the NLP's covariance is reported).
    names = list(estimate.parameters)[: len(cov) if cov is not None else 0]
    if len(names) < 2:
        return {"correlation_header": [], "correlation_rows": [], "correlation_source": ""}
    _, corr = std_and_correlation(cov)
    rows = [[n, *(fmt(v, 2) for v in corr[i])] for i, n in enumerate(names)]
    source = estimate.identifiability.get("covariance_source") or ""
    return {"correlation_header": ["", *names], "correlation_rows": rows,
            "correlation_source": source}  # fmt: skip


def _holdout(holdout: dict | None, params: dict) -> dict:
    if not holdout:
        return {"holdout_rows": [], "holdout_header": [], "holdout_split": ""}
    rows = []
    for k, v in holdout["values"].items():
        z = holdout["z_vs_full"].get(k)
        bad = z is not None and math.isfinite(z) and abs(z) > FAR
        rows.append(
            [
                k,
                fmt(params.get(k, {}).get("value")),
                fmt(v),
                fmt(holdout["std"].get(k), 2),
                params.get(k, {}).get("unit", ""),
                {"text": fmt(z, 2), "class": "zbad" if bad else ""},
            ]
        )
    header = [
        "parameter",
        "full fit (unit)",
        "refit on the head (unit)",
        "its std (unit)",
        "unit",
        "z (1)",
    ]
    return {
        "holdout_rows": rows,
        "holdout_header": header,
        "holdout_split": fmt(holdout["split_s"], 3),
    }


def _residuals(res: dict) -> dict:
    rows = [
        [
            c["name"],
            fmt(c.get("rms"), 3),
            fmt(c.get("stated_noise"), 3),
            fmt(c.get("data_noise"), 3),
            fmt(c.get("chi2_per_dof"), 3),
            fmt(c.get("lag1_autocorrelation"), 2),
            fmt(c.get("ljung_box_p"), 2),
            {"text": c.get("fit", ""), "class": "" if c.get("fit") == "as the noise" else "warn"},
        ]
        for c in res.get("channels", [])
        if c.get("samples")
    ]
    header = [
        "channel",
        "RMS residual (channel unit)",
        "stated noise (channel unit)",
        "data's own noise (channel unit)",
        "χ²/dof vs stated noise (1)",
        "lag-1 autocorrelation (1)",
        "Ljung–Box p (1)",
        "fit",
    ]
    dyn = res.get("dynamics")
    dynamics = None
    if dyn:
        dynamics = {
            "rms": fmt(dyn["rms"], 3),
            "assumed": fmt(dyn["assumed_std"], 3),
            "ratio": fmt(dyn["ratio"], 2),
        }
    return {
        "residual_rows": rows,
        "residual_header": header,
        "findings": res.get("findings", []),
        "dynamics": dynamics,
    }


def _consistency_note(info: dict) -> list[dict]:
    """One line on the physical-consistency constraint (pseudo-inertia ⪰ 0) when enforced."""
    if not info.get("enforced"):
        return []
    bodies = ", ".join(info.get("bodies", []))
    face = info.get("on_boundary") or []
    if face:
        return [
            {
                "class": "warn",
                "text": f"Physical consistency enforced ({bodies}); on its boundary: "
                f"{', '.join(face)} — the data push these inertias beyond what a body can "
                "have (check the fixed inertias and the model).",
            }
        ]
    return [{"class": "", "text": f"Physical consistency enforced ({bodies}): not binding."}]


def _kappa_note(stages: list[dict]) -> list[dict]:
    """One line when κ was raised in stages (``[method] kappa_final``): the values are those
    of the last stage, which trusts the model most."""
    if len(stages) < 2:
        return []
    kappas = " → ".join(f"{s['kappa']:g}" for s in stages)
    iterations = " + ".join(str(s["iterations"]) for s in stages)
    return [
        {
            "class": "",
            "text": f"κ raised in stages ({kappas}; {iterations} iterations): the values are "
            "those at the last κ, which trusts the model to the noise level.",
        }
    ]


def _fit_section(estimate: Estimate, folder: Path) -> str:
    series = estimate.extra.get("series")
    if series:
        return image(series_plot(series), "data, state fit and residuals per channel")
    return file_image(folder / "fit.png", "measured vs fitted") or "<p>no fit plot</p>"


def _impulses(estimate: Estimate) -> str:
    impulses = estimate.extra.get("impulses")
    return impulse_plot(impulses) if impulses else ""


def _facts(summary: dict, folder: Path) -> dict:
    facts = summary.get("facts", {})
    sections = []
    sync = facts.get("sync")
    if sync:
        sections.append(_dict_section("Clock synchronization", sync))
    tracking = facts.get("tracking")
    if tracking:
        sections.append(_dict_section("Tracking", tracking))
    for enc in facts.get("encoders", []):
        sections.append(_dict_section(f"Encoder log {enc['file']}", enc))
    timings = summary.get("timings") or {}
    overlay = summary.get("files", {}).get("overlay")
    return {
        "warnings": list(summary.get("warnings", [])),
        "facts": sections,
        "overlay": overlay_video(folder / overlay) if overlay else "",
        "timing_rows": [[k, f"{v:.2f}"] for k, v in timings.items()],
    }


def _dict_section(title: str, d: dict) -> dict:
    rows = [[k, fmt(v) if not isinstance(v, list | dict) else str(v)] for k, v in d.items()]
    return {"title": title, "header": ["", "value (unit as in the name)"], "rows": rows}


# An overlay up to this size is embedded in the page (which then plays it mailed alone);
# a larger one is played from the file beside report.html.
EMBED_VIDEO_BYTES = 16 << 20


def overlay_video(path: Path) -> str:
    """The tracking overlay (WebM) as a ``<video>`` the page plays, and a link to the file."""
    src = path.name
    if path.exists() and path.stat().st_size <= EMBED_VIDEO_BYTES:
        src = "data:video/webm;base64," + base64.b64encode(path.read_bytes()).decode()
    return (
        f'<video id="overlay" src="{src}" controls muted loop playsinline preload="auto" '
        'style="max-width:100%"></video>'
        f'<p><a href="{esc(path.name)}">overlay video file</a> (detected markers drawn on the '
        "video, to check the tracking by eye)</p>"
    )


def write_experiment_report(path: Path, summary: dict, estimate: Estimate, folder: Path) -> Path:
    with atomic_open(path) as fh:
        fh.write(experiment_page(summary, estimate, folder))
    return Path(path)


# ------------------------------------------------------------------------------ index


def spread_rows(summaries: list[dict]) -> list[list[str]]:
    """Per parameter over experiments: mean, sample std and range (Tables 2 and 4 of
    Marklund et al. compare experiments this way)."""
    names: dict[str, str] = {}
    for s in summaries:
        for k, p in s.get("parameters", {}).items():
            names.setdefault(k, p["unit"])
    rows = []
    for k, unit in names.items():
        v = np.array([s["parameters"][k]["value"] for s in summaries if k in s["parameters"]])
        sd = float(np.std(v, ddof=1)) if len(v) > 1 else None
        rows.append([k, fmt(float(v.mean())), fmt(sd, 2), fmt(float(v.min())),
                     fmt(float(v.max())), unit, str(len(v))])  # fmt: skip
    return rows


SPREAD_HEADER = [
    "parameter",
    "mean (unit)",
    "std (unit)",
    "min (unit)",
    "max (unit)",
    "unit",
    "experiments",
]


def index_page(summaries: list[dict], title: str = "physid: experiments") -> str:
    """All experiments: status and verdict, then per rig a side-by-side parameter comparison
    with cost and cross-validation (by prediction and by state estimation) and the spread of
    each parameter across experiments."""
    status_rows = []
    for s in summaries:
        name, state = s["experiment"], s["status"]
        notes = []
        if state in FINISHED:
            link = {"text": name, "href": f"{name}/report.html"}
            note = "reused (inputs unchanged)" if s.get("skipped") else "identified"
            cls = "ok" if state == "ok" else "warn"
            notes += [f"warning: {w}" for w in s.get("warnings", [])]
        else:
            link = name
            note = s.get("error", "")
            cls = "bad"
        notes += [
            f"input outside the folder (--allow-outside): {p}" for p in s.get("outside_inputs", [])
        ]
        verdict = s.get("verdict") or ""
        html_note = esc(note) + "".join(f"<br>{esc(n)}" for n in notes)
        if s.get("log"):
            html_note += f' (<a href="{esc(s["log"])}">log</a>)'
        details = {"html": html_note}
        status_rows.append(
            [
                link,
                s.get("rig_name") or s.get("rig") or "—",
                {"text": state, "class": cls},
                {"text": verdict, "class": "ok" if verdict == "good fit" else "bad"},
                details,
            ]
        )
    by_rig: dict[str, list[dict]] = {}
    for s in summaries:
        if s["status"] in FINISHED:
            by_rig.setdefault(s.get("rig_name", s["rig"]), []).append(s)
    rigs = [_rig_section(rig, group) for rig, group in by_rig.items()]
    return render("index.html", title=title, status_rows=status_rows, rigs=rigs)


def _rig_section(rig: str, group: list[dict]) -> dict:
    names = list(dict.fromkeys(k for s in group for k in s.get("parameters", {})))
    units = {k: p["unit"] for s in group for k, p in s.get("parameters", {}).items()}
    header = [
        "experiment",
        *(f"{k} ({units[k]})" for k in names),
        "verdict",
        "cost/step (1)",
        "CV cost/step (1)",
    ]
    rows = []
    for s in group:
        ps = s.get("parameters", {})
        cells = [_value_cell(ps.get(k), truth_values(s).get(k)) for k in names]
        cv = s.get("cv_experiments", s.get("cv_cost"))
        rows.append(
            [s["experiment"], *cells, s.get("verdict") or "", fmt(s.get("cost"), 3), fmt(cv, 3)]
        )
    section = {
        "name": rig,
        "header": header,
        "rows": rows,
        "spread_header": SPREAD_HEADER,
        "spread_rows": spread_rows(group),
    }
    section.update(_cross_validation(group))
    return section


def _cross_validation(group: list[dict]) -> dict:
    """Matrices of the cross-experiment validation: by prediction (worst channel's k-step
    RMS over its noise) and by state estimation (cost per step); empty unless the folder had
    two or more experiments of the rig to compare."""
    rows = [s for s in group if s.get("cross_validation")]
    cols = list(dict.fromkeys(b for s in rows for b in s["cross_validation"]))
    cv_rows = [
        [s["experiment"], *(fmt(s["cross_validation"].get(b), 3) for b in cols)] for s in rows
    ]
    pred = [s for s in group if s.get("cross_prediction")]
    pcols = list(dict.fromkeys(b for s in pred for b in s["cross_prediction"]))
    prediction_rows = []
    horizon = ""
    for s in pred:
        cells = [s["experiment"]]
        for b in pcols:
            entry = s["cross_prediction"].get(b)
            if not entry:
                cells.append("—")
                continue
            horizon = f"{fmt(entry.get('horizon_s'), 3)} s"
            ratio = entry.get("ratio")
            bad = ratio is not None and ratio > 3.0
            cells.append({"text": fmt(ratio, 2), "class": "zbad" if bad else ""})
        prediction_rows.append(cells)
    return {
        "cv_header": ["model tuned on ↓, states of →", *cols] if cv_rows else [],
        "cv_rows": cv_rows,
        "prediction_header": ["model tuned on ↓, predicts →", *pcols] if prediction_rows else [],
        "prediction_rows": prediction_rows,
        "horizon": horizon,
    }


def _value_cell(p: dict | None, truth: float | None) -> dict | str:
    if p is None:
        return "—"
    std = p.get("std")
    finite = std is not None and math.isfinite(std)
    text = value_text(p) + (f" ± {fmt(std, 2)}" if finite else "")
    parts = [esc(text)]
    cls = ""
    if not p["identifiable"]:
        parts = [f'<span class="bad">{esc(text)} ({esc(_not_identified(p))})</span>']
    if truth is not None:
        z = z_score(p, truth)
        if z is not None and abs(z) > FAR:
            parts.append(f'<br><small class="bad">truth {fmt(truth)}: {fmt(z, 2)} std off</small>')
            cls = "zbad"
        else:
            parts.append(f"<br><small>truth {fmt(truth)}</small>")
    return {"html": "".join(parts), "class": cls}


def write_index(path: Path, summaries: list[dict]) -> Path:
    with atomic_open(path) as fh:
        fh.write(index_page(summaries))
    return Path(path)
