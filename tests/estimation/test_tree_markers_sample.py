"""The committed sample's Furuta (encoders + 3D marker video) and pendulum through the
generalized-coordinate estimator (issue 22) named in the spec (``[method] estimator =
"tree"``, the default since 2026-11-26, which ``test_sample_end_to_end.py`` runs unnamed):
the main job's pipeline (tracking, clock sync, camera pose, marker rows on the grid), judged
as issue 24 judges the sample: every parameter with a truth within 3 reported std, and the
verdict by prediction "good fit". While the sample came from SPOOK (compliant hinges,
load-proportional friction) the Furuta's b2 was z +3.90 and the pendulum's b +832 %; the
sample now comes from the tree's own integrator on rigid joints (``rigs.pipeline.sample``):
every value is within 1.6 % (dampers 24 %) and both verdicts "good fit", but the pendulum's
J misses 3 std (z −3.45): the std lacks the step's bias (the tree's h/2 refit,
``step_extrapolation``, is off by default).
Slow: tracks 600 frames and fits 6 s of two logs (minutes)."""

from __future__ import annotations

import io
import math
import shutil
from pathlib import Path

import pytest
from rich.console import Console

from physid.rigs.pipeline.process import ProcessOptions, load_index, process_folder

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "videos"

pytestmark = pytest.mark.slow


def _tree_spec(name: str, folder: Path) -> str:
    """The built-in spec ``name`` with ``[method] estimator = "tree"``, written to ``folder``."""
    src = (ROOT / "rigs" / "specs" / f"{name}.toml").read_text()
    (folder / f"{name}_tree.toml").write_text(
        src.replace("[method]\n", '[method]\nestimator = "tree"\n', 1)
    )
    return f"{name}_tree.toml"


@pytest.fixture(scope="module")
def summaries(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sample")
    manifest = (SAMPLE / "experiments.toml").read_text()
    manifest = (
        manifest[: manifest.index("[experiments.drop]")]
        + manifest[manifest.index("[experiments.furuta]") :]
    )
    for name in ("furuta", "pendulum"):
        manifest = manifest.replace(f'rig = "{name}"', f'rig = "{_tree_spec(name, folder)}"')
        for f in SAMPLE.glob(f"{name}*"):
            shutil.copy(f, folder / f.name)
    (folder / "experiments.toml").write_text(manifest)
    out = tmp_path_factory.mktemp("reports")
    process_folder(folder, out, ProcessOptions(jobs=1), Console(file=io.StringIO()))
    return {s["experiment"]: s for s in load_index(out)}


@pytest.mark.xfail(
    strict=True,
    reason=(
        "the default tree reports no step error (its h/2 refit, step_extrapolation, is off "
        "by default): its std does not cover the O(h²) shadow bias of h = 1e-3 s. Measured "
        "2026-11-26 on the regenerated sample: "
        "pendulum J -0.007 % but std 2e-5 relative, z -3.45 (b z -0.73, mu z +0.71); Furuta "
        "J_Azz -1.09 % z -2.87, b1 +24 % z +2.46, J_Byy z +1.09, b2 z -0.93; both 'good fit' "
        "(docs/tree-estimator.md, 'The sample through the tree')"
    ),
)
def test_sample_through_the_tree_estimator_meets_issue_24(summaries):
    """Both experiments reported by the tree estimator, the Furuta with its video fused
    (clock offset within one encoder sample of the truth); every parameter within 3 of its
    reported std of the truth (a calibrated std leaves 0.3 % outside) and "good fit"."""
    assert set(summaries) == {"furuta", "pendulum"}
    for name, s in summaries.items():
        assert s["status"] == "ok", (name, s.get("error"))
        assert "generalized coordinates" in s["solver"], (name, s["solver"])
        assert s["verdict"] == "good fit", (name, s.get("verdict_summary"))
        truth = s["truth"]["parameters"]
        for param, p in s["parameters"].items():
            z = abs(p["value"] - truth[param]) / p["std"]
            assert math.isfinite(z) and z <= 3.0, (name, param, p["value"], p["std"])
    sync = summaries["furuta"]["facts"]["sync"]
    assert sync["fused"]
    assert abs(sync["offset_s"] - summaries["furuta"]["truth"]["clock_offset_s"]) < 1e-3
