"""Self-contained HTML reports: one page per experiment and an index comparing experiments.

Plots are PNGs embedded as base64 data URIs, so a page can be mailed or archived alone. The
page builders are pure (summary dicts in, HTML text out); ``write_*`` put them on disk.

An estimator can give the report its fitted channels in ``Estimate.extra["series"]``: a list of
``{"name", "unit", "t", "measured", "t_fit", "fitted"}`` (times in s); the report then plots
data vs fit and the residual of every channel. ``extra["impulses"]`` = ``{"t", "normal",
"tangential"}`` (N s) adds the identified contact impulses.
"""

from __future__ import annotations

import base64
import html
import io
import math
from pathlib import Path

import numpy as np

from physid.estimation.estimate import Estimate

_STYLE = """
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:72em;color:#222;padding:0 1em}
table{border-collapse:collapse;margin:0.6em 0}td,th{border:1px solid #ccc;padding:0.25em 0.6em;
text-align:right}th{background:#f3f3f3}td.l,th.l{text-align:left}.bad{color:#b00020}
.ok{color:#116611}.warn{color:#a15c00}img{max-width:100%;border:1px solid #eee;margin:0.3em 0}
code{background:#f5f5f5;padding:0 0.2em}h2{margin-top:1.4em;border-bottom:1px solid #ddd}
"""


# ------------------------------------------------------------------------------ pieces


def esc(value) -> str:
    return html.escape(str(value))


def fmt(value, digits: int = 5) -> str:
    """A number for a table: significant digits, '—' for missing or non-finite."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "—"
    if isinstance(value, bool | str):
        return esc(value)
    return f"{value:.{digits}g}"


def page(title: str, body: str) -> str:
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{esc(title)}</title><style>{_STYLE}</style></head>"
        f"<body>\n<h1>{esc(title)}</h1>\n{body}\n</body></html>\n"
    )


def table(header: list[str], rows: list[list[str]], left: int = 1) -> str:
    """An HTML table; cells are already-escaped HTML; the first ``left`` columns align left."""

    def cells(tag, row):
        return "".join(
            f"<{tag}{' class=l' if i < left else ''}>{c}</{tag}>" for i, c in enumerate(row)
        )

    body = "".join(f"<tr>{cells('td', r)}</tr>" for r in rows)
    return f"<table><tr>{cells('th', header)}</tr>{body}</table>"


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


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


# ------------------------------------------------------------------------------ plots


def cost_plot(history: list[float]) -> str:
    """Cost per iteration on a log axis (embedded PNG URI)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 2.6))
    y = np.array([np.nan if v is None else v for v in history], float)
    ax.semilogy(np.arange(len(y)), np.where(y > 0, y, np.nan), "o-", ms=3)
    ax.set_xlabel("iteration")
    ax.set_ylabel("cost per step")
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    return png_data_uri(fig)


def series_plot(series: list[dict]) -> str:
    """Data vs fit (left) and residual (right) for every channel (embedded PNG URI)."""
    plt = _pyplot()
    n = len(series)
    fig, axes = plt.subplots(n, 2, figsize=(11, 2.3 * n), squeeze=False)
    for i, s in enumerate(series):
        t, y = np.asarray(s["t"], float), np.asarray(s["measured"], float)
        tf, f = np.asarray(s["t_fit"], float), np.asarray(s["fitted"], float)
        unit = s.get("unit", "")
        axes[i, 0].plot(t, y, ".", ms=2, label="measured")
        axes[i, 0].plot(tf, f, lw=0.9, label="fitted")
        axes[i, 0].set_ylabel(f"{s['name']} ({unit})")
        axes[i, 0].legend(loc="best", fontsize=8)
        axes[i, 1].plot(t, y - np.interp(t, tf, f), ".", ms=2, color="C2")
        axes[i, 1].axhline(0.0, color="k", lw=0.5)
        axes[i, 1].set_ylabel(f"residual ({unit})")
    axes[-1, 0].set_xlabel("t (s)")
    axes[-1, 1].set_xlabel("t (s)")
    fig.tight_layout()
    return png_data_uri(fig)


def impulse_plot(impulses: dict) -> str:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 2.6))
    t = np.asarray(impulses["t"], float)
    ax.plot(t, np.asarray(impulses["normal"], float), lw=0.9, label="normal")
    ax.plot(t, np.asarray(impulses["tangential"], float), lw=0.9, label="tangential")
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


def parameter_rows(summary: dict) -> list[list[str]]:
    """Rows: name, value, std, relative std, unit, identifiable, truth, error/std."""
    truth = truth_values(summary)
    rows = []
    for name, p in summary.get("parameters", {}).items():
        value, std = p["value"], p["std"]
        rel = abs(std / value) if value and std is not None else None
        flag = (
            '<span class="ok">yes</span>'
            if p["identifiable"]
            else f'<span class="bad">{_not_identified(p)}</span>'
        )
        true = truth.get(name)
        z = (value - true) / std if true is not None and std else None
        rows.append(
            [
                esc(name),
                fmt(value),
                fmt(std, 2),
                f"{100 * rel:.2g} %" if rel is not None else "—",
                esc(p["unit"]),
                flag,
                fmt(true),
                fmt(z, 2),
            ]
        )
    return rows


PARAMETER_HEADER = ["parameter", "value", "std", "rel. std", "unit", "identifiable", "truth"]


def experiment_page(summary: dict, estimate: Estimate, folder: Path) -> str:
    """The HTML report of one finished experiment (``folder`` holds its other outputs)."""
    name = summary["experiment"]
    parts = [
        f"<p>rig <b>{esc(summary.get('rig_name', summary.get('rig')))}</b> · solver "
        f"{esc(estimate.solver)} · {estimate.iterations} iterations · "
        + (
            '<span class="ok">converged</span>'
            if estimate.converged
            else '<span class="warn">not converged</span>'
        )
        + f" · physid {esc(estimate.version)}</p>",
        "<h2>Parameters</h2>",
        table([*PARAMETER_HEADER, "(value − truth)/std"], parameter_rows(summary)),
        f"<p>cost per step {fmt(estimate.cost)}"
        + (f" · cross-validation cost per step {fmt(estimate.cv_cost)}" if estimate.cv_cost else "")
        + "</p>",
    ]
    unexcited = estimate.identifiability.get("unexcited_directions")
    if unexcited:
        parts.append(f'<p class="warn">Directions the data do not excite: {esc(unexcited)}</p>')
    parts += _consistency_note(estimate.extra.get("consistency") or {})
    parts += _kappa_note(estimate.extra.get("kappa_stages") or [])
    parts += ["<h2>Data and fit</h2>", _fit_section(estimate, folder)]
    impulses = estimate.extra.get("impulses")
    if impulses:
        parts += ["<h2>Identified contact impulses</h2>", image(impulse_plot(impulses), "impulses")]
    if estimate.history:
        parts += ["<h2>Cost per iteration</h2>", image(cost_plot(estimate.history), "cost")]
    parts += _facts_sections(summary, folder)
    return page(f"physid report: {name}", "\n".join(parts))


def _consistency_note(info: dict) -> list[str]:
    """One line on the physical-consistency constraint (pseudo-inertia ⪰ 0) when enforced."""
    if not info.get("enforced"):
        return []
    bodies = ", ".join(info.get("bodies", []))
    face = info.get("on_boundary") or []
    if face:
        return [
            f'<p class="warn">Physical consistency enforced ({esc(bodies)}); on its boundary: '
            f"{esc(', '.join(face))} — the data push these inertias beyond what a body can "
            "have (check the fixed inertias and the model).</p>"
        ]
    return [f"<p>Physical consistency enforced ({esc(bodies)}): not binding at the fit.</p>"]


def _kappa_note(stages: list[dict]) -> list[str]:
    """One line when κ was raised in stages (``[method] kappa_final``): the values are those
    of the last stage, which trusts the model most."""
    if len(stages) < 2:
        return []
    kappas = " → ".join(f"{s['kappa']:g}" for s in stages)
    iterations = " + ".join(str(s["iterations"]) for s in stages)
    return [
        f"<p>κ raised in stages ({esc(kappas)}; {esc(iterations)} iterations): the values "
        "are those at the last κ, which trusts the model to the noise level.</p>"
    ]


def _fit_section(estimate: Estimate, folder: Path) -> str:
    series = estimate.extra.get("series")
    if series:
        return image(series_plot(series), "data, fit and residuals per channel")
    return file_image(folder / "fit.png", "measured vs fitted") or "<p>no fit plot</p>"


def _facts_sections(summary: dict, folder: Path) -> list[str]:
    facts = summary.get("facts", {})
    parts = []
    if summary.get("warnings"):
        items = "".join(f"<li>{esc(w)}</li>" for w in summary["warnings"])
        parts += ['<h2 class="warn">Warnings</h2>', f"<ul>{items}</ul>"]
    sync = facts.get("sync")
    if sync:
        parts += ["<h2>Clock synchronization</h2>", _dict_table(sync)]
    tracking = facts.get("tracking")
    if tracking:
        parts += ["<h2>Tracking</h2>", _dict_table(tracking)]
    overlay = summary.get("files", {}).get("overlay")
    if overlay:
        parts += ["<h2>Tracking overlay</h2>", overlay_video(folder / overlay)]
    for enc in facts.get("encoders", []):
        parts += [f"<h2>Encoder log {esc(enc['file'])}</h2>", _dict_table(enc)]
    timings = summary.get("timings")
    if timings:
        rows = [[esc(k), f"{v:.2f}"] for k, v in timings.items()]
        parts += ["<h2>Stages</h2>", table(["stage", "wall time (s)"], rows)]
    parts.append('<p><a href="log.txt">log</a> · <a href="estimate.json">estimate.json</a></p>')
    return parts


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


def _dict_table(d: dict) -> str:
    return table(
        ["", "value"],
        [[esc(k), fmt(v) if not isinstance(v, list | dict) else esc(v)] for k, v in d.items()],
    )


def write_experiment_report(path: Path, summary: dict, estimate: Estimate, folder: Path) -> Path:
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(experiment_page(summary, estimate, folder))
    tmp.replace(path)
    return path


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
        rows.append([esc(k), fmt(float(v.mean())), fmt(sd, 2), fmt(float(v.min())),
                     fmt(float(v.max())), esc(unit), str(len(v))])  # fmt: skip
    return rows


def index_page(summaries: list[dict], title: str = "physid: experiments") -> str:
    """All experiments: status table, then per rig a side-by-side parameter comparison with
    cost, cross-validation cost and the spread of each parameter across experiments."""
    status_rows = []
    for s in summaries:
        name, state = s["experiment"], s["status"]
        if state in ("ok", "warning"):
            link = f'<a href="{esc(name)}/report.html">{esc(name)}</a>'
            note = "reused (inputs unchanged)" if s.get("skipped") else "identified"
            cls = "ok" if state == "ok" else "warn"
            note += "".join(f"<br>warning: {esc(w)}" for w in s.get("warnings", []))
        else:
            link = esc(name)
            note = esc(s.get("error", ""))
            if s.get("log"):
                note += f' (<a href="{esc(s["log"])}">log</a>)'
            cls = "bad"
        note += "".join(
            f"<br>input outside the folder (--allow-outside): {esc(p)}"
            for p in s.get("outside_inputs", [])
        )
        status_rows.append(
            [link, esc(s.get("rig_name") or s.get("rig") or "—"),
             f'<span class="{cls}">{esc(state)}</span>', note]
        )  # fmt: skip
    parts = [table(["experiment", "rig", "status", "details"], status_rows, left=4)]
    by_rig: dict[str, list[dict]] = {}
    for s in summaries:
        if s["status"] in ("ok", "warning"):
            by_rig.setdefault(s.get("rig_name", s["rig"]), []).append(s)
    for rig, group in by_rig.items():
        parts.append(f"<h2>{esc(rig)}</h2>")
        names = list(dict.fromkeys(k for s in group for k in s.get("parameters", {})))
        header = ["experiment", *names, "cost/step", "CV cost/step"]
        rows = []
        for s in group:
            ps = s.get("parameters", {})
            cells = [_value_cell(ps.get(k), truth_values(s).get(k)) for k in names]
            cv = s.get("cv_experiments", s.get("cv_cost"))
            rows.append([esc(s["experiment"]), *cells, fmt(s.get("cost"), 3), fmt(cv, 3)])
        parts.append(table(header, rows))
        parts.append(cross_validation_table(group))
        parts.append(
            table(
                ["parameter", "mean", "std", "min", "max", "unit", "experiments"],
                spread_rows(group),
            )  # fmt: skip
        )
    return page(title, "\n".join(parts))


def cross_validation_table(group: list[dict]) -> str:
    """Model tuned on the row's experiment, states estimated on the column's log (encoder
    rows only, cost per step); empty unless the folder had two or more experiments to
    compare. CV cost/step above is the row's mean off the diagonal."""
    rows = [s for s in group if s.get("cross_validation")]
    if not rows:
        return ""
    cols = list(dict.fromkeys(b for s in rows for b in s["cross_validation"]))
    body = [
        [esc(s["experiment"]), *(fmt(s["cross_validation"].get(b), 3) for b in cols)] for s in rows
    ]
    caption = (
        "<p>Cross-validation (Section 4.5): each row's model estimates only the states of "
        "each column's encoder log; cost per step, the diagonal is the row's own log.</p>"
    )
    return caption + table(["model tuned on ↓, states of →", *map(esc, cols)], body)


def _not_identified(p: dict) -> str:
    bound = p.get("at_bound")
    return f"not identifiable: at its {bound} bound" if bound else "not identifiable"


FAR = 3.0  # a value more than FAR of its own std from the truth is flagged


def _value_cell(p: dict | None, truth: float | None) -> str:
    if p is None:
        return "—"
    text = f"{fmt(p['value'])} ± {fmt(p['std'], 2)}"
    if not p["identifiable"]:
        text = f'<span class="bad">{text} ({_not_identified(p)})</span>'
    if truth is not None:
        z = (p["value"] - truth) / p["std"] if p["std"] else None
        if z is not None and abs(z) > FAR:
            text += f'<br><small class="bad">truth {fmt(truth)}: {fmt(z, 2)} std off</small>'
        else:
            text += f"<br><small>truth {fmt(truth)}</small>"
    return text


def write_index(path: Path, summaries: list[dict]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(index_page(summaries))
    tmp.replace(path)
    return path
