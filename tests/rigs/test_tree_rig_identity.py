"""A rig read twice from one spec is the same rig to the tree estimator's compile cache
(``estimation.tree_problem.compiled``): a second fit reuses the compiled residuals instead of
tracing and compiling them again. A rig with a different fixed value is not."""

import dataclasses

import numpy as np

from physid.estimation.tree_problem import TreeStructure, compiled
from physid.rigs.models.tree.rig import load_tree_rig
from physid.rigs.models.tree_rig import from_tree_rig
from physid.spec import load_spec


def structure(spec) -> TreeStructure:
    rig = from_tree_rig(load_tree_rig(spec))
    return TreeStructure(rig.tree, rig.make_params, ("arm.mass",), 1e-3, rig.observed)


def test_same_spec_same_compiled_model_and_another_geometry_another():
    spec = load_spec("qube")
    a, b = structure(spec), structure(spec)
    assert a == b and hash(a) == hash(b)
    assert compiled(a) is compiled(b)  # built lazily: no compilation happens here

    # The pendulum's hinge 1 mm further out: a different model, whose residuals must not be
    # those compiled for the first.
    tree = dict(spec.sections["tree"])
    bodies = dict(tree["bodies"])
    pend = dict(bodies["pendulum"], pos={"value": [0.086, 0.0, 0.0], "unit": "m"})
    tree["bodies"] = dict(bodies, pendulum=pend)
    moved = dataclasses.replace(spec, sections=dict(spec.sections, tree=tree))
    c = structure(moved)
    assert c != a
    values = {"arm.mass": 0.095}
    assert not np.allclose(
        np.asarray(a.make_params(values).joints.translation),
        np.asarray(c.make_params(values).joints.translation),
    )
