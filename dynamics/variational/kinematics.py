"""World poses of a tree's bodies by path doubling: log₂(depth) batched compositions instead of
one sequential composition per body.

``tree.body_poses`` composes T_world,i = T_world,λ(i) · T_λ(i),i body by body in a
``lax.scan``. Inside the integrator's Newton steps the poses are differentiated to second
order (forward over reverse over forward), and on the CPU each scan iteration of each of those
passes is a handful of tiny kernels: a 14-body loop's ∂²L_d took 3.4 ms, most of it loop
overhead. Path doubling (pointer jumping) computes the same products in rounds: after round r
every body holds the composition of the transforms of its 2^r nearest ancestors' joints, so
⌈log₂ depth⌉ rounds of one batched gather-and-compose finish any tree. The ancestor pattern is
static (NumPy), so the gathers have constant indices.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from physid.dynamics import spatial
from physid.dynamics.tree import Tree, TreeParams, parent_transforms


def doubling_schedule(tree: Tree) -> tuple[np.ndarray, ...]:
    """The ancestor index of every body in each round ([nb + 1] each, ``nb`` = the world,
    which is its own ancestor): round r composes with the ancestor 2^r levels up."""
    nb = tree.n_bodies
    up = np.append(tree.parent_rows, nb)  # the world row points to itself
    rounds = []
    while np.any(up[:nb] != nb):
        rounds.append(up.copy())
        up = up[up]
    return tuple(rounds)


def world_poses(tree: Tree, params: TreeParams, q):
    """World poses of the body frames, R [nb, 3, 3] and p [nb, 3] (m): ``tree.body_poses``
    by path doubling (same values to round-off)."""
    Rl, pl = parent_transforms(tree, params, q)
    R = jnp.concatenate([Rl, jnp.eye(3, dtype=Rl.dtype)[None]])
    p = jnp.concatenate([pl, jnp.zeros((1, 3), pl.dtype)])
    nb1 = tree.n_bodies + 1
    for up in doubling_schedule(tree):
        # The gather as a product with a constant 0/1 matrix: its transpose (reverse mode) is
        # another small product, where an indexed gather's is a scatter-add, several times
        # slower on the CPU.
        E = jnp.asarray(np.eye(nb1)[up], R.dtype)
        R_up = jnp.einsum("ij,jkl->ikl", E, R)
        p_up = E @ p
        R, p = spatial.compose((R_up, p_up), (R, p))
    return R[:-1], p[:-1]
