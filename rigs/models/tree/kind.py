"""The ``[rig] model = "tree"`` kind (``rigs.models.kinds``): ``physid simulate`` by RK4
(``rigs.models.tree.simulate``) and ``physid identify`` by joint state and parameter
estimation on generalized coordinates (``rigs.models.identify_tree``)."""

from __future__ import annotations

from pathlib import Path

from physid.rigs.models.tree.simulate import simulate
from physid.spec import RigSpec

__all__ = ["identify", "simulate"]


def identify(spec: RigSpec, data: list[Path], out: Path, console):
    """``physid identify`` of a tree rig: every log fitted jointly (``identify_tree``)."""
    from physid.rigs.models.identify_tree import identify_tree, tree_rig_of

    return identify_tree(spec, tree_rig_of(spec), data, out, console)
