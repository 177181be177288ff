"""HTML report builders (estimation.report): what a reader must be able to see."""

from physid.estimation.report import _consistency_note, _kappa_note, index_page, parameter_rows


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
    }


def test_a_value_far_from_its_truth_is_flagged_with_its_z_score():
    page = index_page([summary("near", 1.01, 0.01, 1.0), summary("far", 1.5, 0.01, 1.0)])
    near, far = page.split("<td class=l>far</td>")
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
    assert (name, unit, truth, z) == ("J", "kg m^2", "1", "2")
    assert "not identifiable" in flag and rel == "25 %"


def test_a_parameter_on_its_bound_says_so():
    s = summary("x", 1e-5, None, 1e-4, identifiable=False)
    s["parameters"]["J"]["at_bound"] = "lower"
    (_, _, std, rel, _, flag, _, z) = parameter_rows(s)[0]
    assert "at its lower bound" in flag and std == rel == z == "—"
    assert "not identifiable: at its lower bound" in index_page([s])


def test_a_body_on_the_consistency_boundary_is_named():
    assert _consistency_note({"enforced": False}) == []
    calm = _consistency_note({"enforced": True, "bodies": ["arm A"], "on_boundary": []})
    assert "not binding" in calm[0]
    hit = _consistency_note({"enforced": True, "bodies": ["arm A"], "on_boundary": ["arm A"]})
    assert 'class="warn"' in hit[0] and "on its boundary: arm A" in hit[0]


def test_kappa_stages_are_said_only_when_there_were_several():
    assert _kappa_note([]) == []
    assert _kappa_note([{"kappa": 100.0, "iterations": 7}]) == []
    stages = [{"kappa": 100.0, "iterations": 7}, {"kappa": 1e3, "iterations": 4}]
    (line,) = _kappa_note(stages)
    assert "100 → 1000" in line and "7 + 4 iterations" in line
