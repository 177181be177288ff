"""The 13-parameter Furuta of Marklund et al., Section 4.6 (issue 22's acceptance): the gain,
five inertias, four friction coefficients and the tilt from the Table 1 start values, on a
simulated swing-up that the tree's model describes (``tree_furuta13.py``: the tree integrator
at 1e-4 s, 4096-count encoders at 1 kHz, fitted at h = 1e-3 s with the default weights).

Asked: at most 15 LM iterations (from Table 1's values through the default warm start,
``estimation.tree_warm_start``); the inertias the data do not excite flagged (J_Axx and J_Ayy:
the arm turns about its z axis only, so they enter neither its kinetic energy nor anything
else); every other parameter within 5 % of the truth. Also asserted: |z| ≤ 3 with the
reported std, and a converged fit status.

Why 5 % holds here and not on SPOOK's swing-up (``benchmarks/bench_tree_lm.py --problem
furuta13``, b1 +28 %, b2 +105 %): those data carry compliant hinges and friction proportional
to the swing's hinge loads, which the tree does not model; here the only difference between
data and model is the discretization of h = 1e-3 s against 1e-4 s, and the quantization."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from tree_furuta13 import consistent_recording  # noqa: E402

from physid.rigs.models import furuta  # noqa: E402
from physid.rigs.models.identify_tree import (  # noqa: E402
    identify_tree_series,
    series_on_grid,
    tree_settings,
)

UNEXCITED = ("J_Axx", "J_Ayy")


@pytest.fixture(scope="module")
def fitted():
    rec = consistent_recording()
    rig = furuta.tree_rig(rec.spec)
    series = series_on_grid(rec.log, rig, tree_settings(rec.spec)["h"], "furuta13-tree")
    lines = []
    estimate, _ = identify_tree_series(rec.spec, rig, [series], progress=lines.append)
    print("\n".join(line for line in lines if not line.startswith("  iteration")))
    for k, p in estimate.parameters.items():  # shown with -s, and on a failure
        v = rec.truth[k]
        print(f"{k:7s} {p.value:.6g} (truth {v:.6g}, {(p.value - v) / v:+.2%}, std {p.std:.3g})")
    return rec, estimate


@pytest.mark.slow  # the Furuta's compilation and a 13-parameter fit: minutes on a loaded core
def test_furuta13_swing_up_converges(fitted):
    """The fit ends by LM's own stop and passes the Gauss–Newton test (status converged)."""
    _, estimate = fitted
    assert estimate.converged, estimate.status


@pytest.mark.slow
def test_furuta13_swing_up_within_15_iterations(fitted):
    """The issue's ≤ 15, from Table 1's start values through the default warm start
    (``estimation.tree_warm_start``): measured 6 (21 without it, J_Azz at its lower bound
    for five of them)."""
    _, estimate = fitted
    assert estimate.iterations <= 15, estimate.iterations


@pytest.mark.slow
def test_furuta13_unexcited_inertias_are_flagged_by_name(fitted):
    """J_Axx and J_Ayy are not identifiable, and the reason names them; nothing else is
    flagged (the four friction coefficients, which SPOOK's data left in one unexcited
    direction, are told apart here)."""
    _, estimate = fitted
    for k, p in estimate.parameters.items():
        if k in UNEXCITED:
            assert not p.identifiable, (k, p)
            assert k in (p.reason or ""), (k, p.reason)
        else:
            assert p.identifiable, (k, p.reason)


@pytest.mark.slow
def test_furuta13_identified_parameters_within_5_percent_and_3_std(fitted):
    """5 % is the issue's; measured ≤ 2.9 % (μ1, whose std is 8 % of it; every |z| ≤ 0.84,
    docs/tree-estimator.md), so the discretization bias could grow by half and still pass,
    while a model error of SPOOK's size (tens of %) would not. |z| ≤ 3: the reported std
    covers the error."""
    rec, estimate = fitted
    for k, p in estimate.parameters.items():
        if k in UNEXCITED:
            continue
        v = rec.truth[k]
        assert abs(p.value - v) <= 0.05 * abs(v), (k, p.value, v)
        assert np.isfinite(p.std) and abs(p.value - v) <= 3 * p.std, (k, p.value, v, p.std)
