"""HTML report builders (estimation.report, Jinja2 templates): what a reader must be able to
see — the verdict by prediction first, values far from their truth coloured, a bound-only μ
written as a bound, the correlations, units in the headers."""

import math
import re

import numpy as np
import pytest

from physid.estimation.estimate import (
    Estimate,
    ParameterEstimate,
    Result,
    Status,
    std_and_correlation,
)
from physid.estimation.prediction import Channel, Prediction
from physid.estimation.report import (
    _consistency_note,
    _kappa_note,
    experiment_page,
    index_page,
    parameter_rows,
)
from physid.estimation.validation import validation


def summary(name, value, std, truth, identifiable=True, status="ok"):
    return {
        "experiment": name,
        "status": status,
        "rig": "pendulum",
        "rig_name": "pendulum",
        "parameters": {
            "J": {"value": value, "std": std, "unit": "kg m^2", "identifiable": identifiable}
        },  # fmt: skip
        "truth": {"parameters": {"J": truth}},
        "cost": 1e-7,
        "cv_cost": None,
        "verdict": "good fit",
    }


def test_a_value_far_from_its_truth_is_flagged_with_its_z_score():
    page = index_page([summary("near", 1.01, 0.01, 1.0), summary("far", 1.5, 0.01, 1.0)])
    near, far = page.split(">far</a>")
    assert "std off" not in near  # 1 std off: within the 3-std band, no flag
    assert 'class="bad">truth 1: 50 std off' in far


def test_failed_experiments_are_listed_with_their_error_and_log():
    bad = {"experiment": "cut", "status": "failed", "rig": "pendulum", "error": "cut.bin: byte 0",
           "log": "cut.failed.log"}  # fmt: skip
    page = index_page([summary("ok", 1.0, 0.01, 1.0), bad])
    assert "cut.bin: byte 0" in page and 'href="cut.failed.log"' in page
    assert 'href="ok/report.html"' in page and 'href="cut/report.html"' not in page


def test_parameter_rows_show_truth_and_unidentifiable_flag():
    rows = parameter_rows(summary("x", 2.0, 0.5, 1.0, identifiable=False))
    (name, value, std, rel, unit, flag, truth, z) = rows[0]
    assert (name, unit, truth, z["text"]) == ("J", "kg m^2", "1", "2")
    assert "not identifiable" in flag["text"] and rel == "25"
    assert z["class"] == ""  # |z| = 2: not coloured


def test_a_parameter_on_its_bound_says_so():
    s = summary("x", 1e-5, None, 1e-4, identifiable=False)
    s["parameters"]["J"]["at_bound"] = "lower"
    (_, _, std, rel, _, flag, _, z) = parameter_rows(s)[0]
    assert "at its lower bound" in flag["text"] and std == rel == z["text"] == "—"
    assert "not identifiable: at its lower bound" in index_page([s])


def test_a_body_on_the_consistency_boundary_is_named():
    assert _consistency_note({"enforced": False}) == []
    calm = _consistency_note({"enforced": True, "bodies": ["arm A"], "on_boundary": []})
    assert "not binding" in calm[0]["text"]
    hit = _consistency_note({"enforced": True, "bodies": ["arm A"], "on_boundary": ["arm A"]})
    assert hit[0]["class"] == "warn" and "on its boundary: arm A" in hit[0]["text"]


def test_kappa_stages_are_said_only_when_there_were_several():
    assert _kappa_note([]) == []
    assert _kappa_note([{"kappa": 100.0, "iterations": 7}]) == []
    stages = [{"kappa": 100.0, "iterations": 7}, {"kappa": 1e3, "iterations": 4}]
    (line,) = _kappa_note(stages)
    assert "100 → 1000" in line["text"] and "7 + 4 iterations" in line["text"]


# ------------------------------------------------------------------ the experiment page


def _estimate(prediction_error: float, expected: float | None = None) -> Estimate:
    """A hand-made estimate of a two-parameter drop-like fit: J/m far from its truth,
    μ only bounded below, one channel predicted with the given RMS error (noise 1e-3) and,
    if given, the RMS over the noise a correct model scores on this motion."""
    status = Status(Result.successful, "relative cost decrease below eps_f", "a test")
    params = {
        "J_over_m": ParameterEstimate(7.69e-4, 1.2e-6, "m^2", True),
        "mu": ParameterEstimate(0.28, math.inf, "1", False, lower_bound=True, reason="bound"),
    }
    t = np.linspace(0.0, 1.0, 101)
    ch = Channel("theta", "rad", 1e-3, 2 * np.pi)
    pred = np.sin(t)[:, None] + prediction_error
    p = Prediction(
        "k-step", "fitted data", 10, (ch,), t, pred, np.array([prediction_error]),
        np.array([100]), measured=np.sin(t)[:, None],
        expected=None if expected is None else np.array([expected]),
    )  # fmt: skip
    checked = validation(status, [p], params, {}, "The std covers the noise.")
    return Estimate(
        rig="ellipse drop",
        solver="test",
        parameters=params,
        cost=1.0,
        iterations=3,
        converged=True,
        history=[2.0, 1.0],
        settings={},
        covariance=[[1.44e-12, 1e-8], [1e-8, math.inf]],
        status=status.to_dict(),
        validation=checked,
        extra={"prediction_series": [p.series()]},
    )


TRUTH = {"experiment": "drop", "rig_name": "ellipse drop",
         "truth": {"parameters": {"J_over_m": 7.56e-4, "mu": 0.3}}}  # fmt: skip


@pytest.fixture(scope="module")
def good_page(tmp_path_factory):
    return experiment_page(TRUTH, _estimate(1e-3), tmp_path_factory.mktemp("exp"))


def test_the_page_leads_with_the_verdict_by_prediction(good_page):
    banner = good_page.index('class="verdict good"')
    assert banner < good_page.index("<h2>Parameters</h2>")
    assert "Verdict: good fit" in good_page
    assert "data:image/png;base64,iVBOR" in good_page  # the prediction plot is embedded


def test_a_poor_prediction_is_marked_poor_fit(tmp_path):
    page = experiment_page(TRUTH, _estimate(5e-3), tmp_path)
    assert 'class="verdict poor"' in page and "Verdict: poor fit" in page
    assert "k-step on fitted data: theta RMS 5.0 × its noise" in page


def test_the_limit_is_3_times_what_a_correct_model_scores_where_that_is_known(tmp_path):
    # 5 x the noise where a correct model scores 4 x on this motion: a good fit, and the
    # page says what a correct model scores; 13 x is above 3 x 4 and a poor fit.
    page = experiment_page(TRUTH, _estimate(5e-3, expected=4.0), tmp_path)
    assert "Verdict: good fit" in page
    assert "<th>a correct model&#39;s RMS / noise (1)</th>" in page
    assert "<td>5</td><td>4</td>" in page  # the RMS over the noise, then a correct model's
    assert "a correct model 4 ×" in page  # the summary line
    page = experiment_page(TRUTH, _estimate(13e-3, expected=4.0), tmp_path)
    assert "Verdict: poor fit" in page
    assert "theta RMS 13.0 × its noise (0.001 rad), above 3 × the 4 × a correct model" in page


def test_far_values_are_coloured_and_a_lower_bound_is_written_as_one(good_page):
    row = good_page[good_page.index("<td class=l>J_over_m</td>") :].split("</tr>")[0]
    assert '<td class="zbad">11</td>' in row  # (7.69e-4 − 7.56e-4)/1.2e-6 = 10.8
    assert "≥ 0.28 (lower bound)" in good_page


def test_correlation_matrix_and_what_the_std_covers_are_shown(good_page):
    assert "Correlation of the parameters" in good_page
    assert "The std covers the noise." in good_page


def test_the_correlation_says_which_fit_its_covariance_is_from(tmp_path):
    """Issue 24: the drop reports its output-error fit's std where that fit is kept, so the
    correlations must be of that fit's covariance (three parameters with restitution) and
    say so; without a stated source the page adds no sentence."""
    import dataclasses

    base = _estimate(1e-3)
    params = {
        **base.parameters,
        "mu": ParameterEstimate(0.3, 0.01, "1", True),
        "restitution": ParameterEstimate(0.2, 0.02, "1", True),
    }
    est = dataclasses.replace(
        base,
        parameters=params,
        covariance=[[1.44e-12, 6e-9, -1.2e-8], [6e-9, 1e-4, 0.0], [-1.2e-8, 0.0, 4e-4]],
        identifiability={"covariance_source": "the output-error fit's covariance"},
    )
    page = experiment_page(TRUTH, est, tmp_path)
    block = page[page.index("Correlation of the parameters") :].split("</table>")[0]
    assert "From the output-error fit&#39;s covariance." in block
    assert "<th>restitution</th>" in block
    # corr(J/m, mu) = 6e-9 / (1.2e-6 · 0.01) = 0.5; corr(J/m, ε) = −1.2e-8 / (1.2e-6 · 0.02)
    assert "<td>0.5</td>" in block and "<td>-0.5</td>" in block
    plain = experiment_page(TRUTH, base, tmp_path / "b")
    assert "From " not in plain.split("Correlation of the parameters")[1].split("</table>")[0]


def test_every_numeric_column_header_carries_its_unit(good_page):
    text_columns = {"parameter", "unit", "identifiable", "check", "data", "channel", "", "fit",
                    "experiment", "rig", "status", "verdict", "details", "stage", "J_over_m",
                    "mu"}  # fmt: skip
    headers = re.findall(r"<th[^>]*>([^<]*)</th>", good_page)
    assert headers
    for h in headers:
        assert h in text_columns or re.search(r"\(.+\)", h), h


def test_std_and_correlation_of_a_covariance():
    # the report's correlation table and the drop's estimate.json covariance both read a
    # covariance through it: std 2 and 3, correlation 2 / (2 * 3); a missing entry (None in
    # estimate.json) reads NaN, a variance of -1e-18 (round-off) a std of 0, not NaN
    std, corr = std_and_correlation([[4.0, 2.0], [2.0, 9.0]])
    np.testing.assert_allclose(std, [2.0, 3.0])
    np.testing.assert_allclose(corr, [[1.0, 1 / 3], [1 / 3, 1.0]])
    std, corr = std_and_correlation([[4.0, None], [None, -1e-18]])
    assert std[1] == 0.0 and np.isnan(corr[0, 1]) and corr[0, 0] == 1.0
