"""The cross-validation's state fit weighs a log's rows as the log's own identification did
(``identify_tree.recorded_weights``): the default process noise σ_w and the natural map's
inertia c scale with the joint inertia at the values a problem is built at, the spec's
initial values in an identification and the held model's values in a state fit, so weights
remade there would score the diagonal with another ruler (docs/pipeline.md)."""

import numpy as np
import pytest

from physid.rigs.models import identify_tree as tree
from physid.spec import load_spec

FITTED = {"J": 0.0039, "b": 2e-4, "mu": 1.8e-3}  # the truth of the pipeline tests' swing


@pytest.fixture(scope="module")
def pendulum():
    """(spec, rig, settings, series): 50 steps of a swing on the 1 ms grid (small: only the
    weights are looked at; one compile of the initial states serves every build)."""
    spec = load_spec("pendulum")
    n = 50
    t = 1e-3 * np.arange(n)
    angles = 2.0 * np.cos(3.0 * t)[:, None]
    series = {"grid": t, "y": angles, "present": np.ones((n, 1), bool), "init": angles,
              "u": np.zeros((n - 1, 0))}  # fmt: skip
    return spec, tree.tree_rig_of(spec), tree.tree_settings(spec), series


def test_the_record_rebuilds_the_identifications_weights(pendulum):
    spec, rig, settings, series = pendulum
    # the identification's weights: made at the spec's initial values (J 0.005); the free
    # parameters themselves do not enter them, so none are named (a smaller compile)
    ident, _, _, info = tree.build_problem(rig, spec, (), [series], settings)
    # as identify_tree_series writes them into estimate.json
    record = tree.recorded_weights(
        {"process_noise": info["process_noise"]},
        {"natural_map_inertia": info["natural_map_inertia"]},
    )
    held, _, _, _ = tree.build_problem(
        rig, spec, (), [series], settings, values=FITTED, weights=record
    )
    remade, _, _, _ = tree.build_problem(rig, spec, (), [series], settings, values=FITTED)
    # exactly the identification's numbers, though the model is held at other values
    assert np.array_equal(np.asarray(held.c), np.asarray(ident.c))
    assert np.array_equal(np.asarray(held.dyn_weight), np.asarray(ident.dyn_weight))
    # without the record both move with J + m l²: 0.0039 + 0.428 · 0.092² against 0.005 + …
    ratio = float(np.asarray(ident.c)[0] / np.asarray(remade.c)[0])
    assert ratio == pytest.approx((0.005 + 0.428 * 0.092**2) / (0.0039 + 0.428 * 0.092**2))


def test_a_record_of_other_joints_is_refused(pendulum):
    spec, rig, settings, series = pendulum
    record = {"process_noise": {"phi": 1e-6}, "natural_map_inertia": {"phi": 1e-2}}
    with pytest.raises(ValueError, match="names joints \\['phi'\\], the rig \\['theta'\\]"):
        tree.build_problem(rig, spec, (), [series], settings, values=FITTED, weights=record)


def test_an_estimate_without_the_tree_record_has_none():
    assert tree.recorded_weights({"kappa": 100.0}, {}) is None
