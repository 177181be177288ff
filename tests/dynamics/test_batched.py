"""The batched Newton–Euler kernels (dynamics/batched.py) and their LLVM-fused form
(dynamics/fused.py) against the single-state recursions of dynamics/newton_euler.py
(themselves tested against MuJoCo and Pinocchio to 1e-10 in test_newton_euler.py), on random
states of every tree in tests/data/trees, and the batched kernels' parameter JVP against
central finite differences.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tree_cases import DATA, FAST_COMPILE, rel, single_state, single_state_rows

import physid.dynamics  # noqa: F401 (float64)
from physid.dynamics import batched, fused
from physid.rigs.models.tree.mjcf import read_model_file
from physid.rigs.models.tree.model import build_model

# The 7-joint arm's batched ABA and regressor take minutes to compile (8 unrolled bodies,
# each materialized: dynamics/batched.py), over this module's share of the default run:
# its case runs with -m slow. So do the double pendulum and the cartpole (10 s of XLA
# compilation each on CI's cores): the default run keeps a single body and a two-body
# branch with a motor (the Furuta), and the double pendulum's frames are still exercised by
# the parameter-JVP test below.
MODELS = (
    "pendulum",
    pytest.param("double_pendulum", marks=pytest.mark.slow),
    "furuta",
    pytest.param("cartpole", marks=pytest.mark.slow),
    pytest.param("arm7", marks=pytest.mark.slow),
)
N_STATES = 6
# The two sides evaluate the same formulas in float64 in a different order (written-out
# products vs the vmapped scan), O(10²) operations per body: rounding differs by ~1e-15
# relative (measured ≤ 7e-16). 1e-12 leaves three orders of margin and still catches any wrong
# term (a dropped Coriolis, parallel-axis or armature term is ≥ 1e-3 relative here).
RTOL = 1e-12


class Case:
    """One MJCF tree, random states, the batched kernels and the single-state reference."""

    def __init__(self, name: str):
        tree, self.params, _ = single_state(name)
        self.tree = tree
        rng = np.random.default_rng(sum(map(ord, name)))
        n = tree.n_dof
        self.q = rng.uniform(-np.pi, np.pi, (N_STATES, n))
        self.qd = 2.0 * rng.normal(size=(N_STATES, n))
        self.qdd = 5.0 * rng.normal(size=(N_STATES, n))
        # The reference: the single-state recursions' one compiled program of
        # test_newton_euler.py (tree_cases.single_state), there checked against MuJoCo and
        # Pinocchio; ABA is compared at the RNEA torques of the random states (its ``tau``).
        u = np.zeros((N_STATES, tree.n_actuators))
        one = single_state_rows(name, self.q, self.qd, self.qdd, u)
        self.reference = {"rnea": one["rnea"], "aba": one["aba_of_rnea"], "Y": one["Y"]}
        self.tau = one["rnea"]

        def ours(params, Q, Qd, Qdd, Tau):
            return {
                "rnea": batched.rnea_batch(tree, params, Q, Qd, Qdd),
                "aba": batched.aba_batch(tree, params, Q, Qd, Tau),
                "Y": batched.regressor_batch(tree, params, Q, Qd, Qdd),
            }

        args = (self.params, self.q, self.qd, self.qdd, self.tau)
        self.ours = jax.jit(ours).lower(*args).compile(compiler_options=FAST_COMPILE)(*args)
        self._fused = {}

    def fused(self, quantity: str, threads: int | None = None) -> np.ndarray:
        """The fused kernel of ``quantity`` on this case's states (built on first use)."""
        build = {"rnea": fused.rnea_fused, "aba": fused.aba_fused, "Y": fused.regressor_fused}
        if quantity not in self._fused:
            self._fused[quantity] = build[quantity](self.tree, self.params)
        last = self.tau if quantity == "aba" else self.qdd
        return self._fused[quantity](self.q, self.qd, last, threads=threads)


@pytest.fixture(scope="module", params=MODELS)
def case(request):
    return Case(request.param)


@pytest.mark.parametrize("quantity", ["rnea", "aba", "Y"])
def test_batched_kernels_equal_the_single_state_recursions(case, quantity):
    assert case.ours[quantity].shape == case.reference[quantity].shape
    assert rel(case.ours[quantity], case.reference[quantity]) < RTOL


@pytest.mark.parametrize("quantity", ["rnea", "aba", "Y"])
def test_fused_kernels_equal_the_single_state_recursions(case, quantity):
    # Same formulas as the batched kernels, with constants folded (x·1, x·0, 0 + x) and
    # shared subexpressions: the rounding differs from the reference's as the batched
    # kernels' does, so the same 1e-12.
    out = case.fused(quantity)
    assert out.shape == case.reference[quantity].shape
    assert rel(out, case.reference[quantity]) < RTOL
    # N_STATES = 6 is not a multiple of the 4-state vector width, and two threads split the
    # padded batch at state 4: the tail and the seam must come out the same, bit for bit.
    np.testing.assert_array_equal(case.fused(quantity, threads=2), out)


def test_fused_kernel_refuses_non_finite_states_and_takes_empty_batches():
    # Folding 0·x = 0 is exact only for finite x, so NaN and infinity are refused, naming
    # the input; an empty batch gives an empty result of the right shape.
    model = build_model(read_model_file(DATA / "pendulum.xml"))
    kernel = fused.rnea_fused(model.tree, model.params)
    n = model.tree.n_dof
    bad = np.zeros((3, n))
    bad[1, 0] = np.nan
    with pytest.raises(ValueError, match="input 1 holds NaN"):
        kernel(np.zeros((3, n)), bad, np.zeros((3, n)))
    with pytest.raises(ValueError, match=r"must be \[n_states"):
        kernel(np.zeros((3, n)), np.zeros((2, n)), np.zeros((3, n)))
    assert kernel(*(np.zeros((0, n)) for _ in range(3))).shape == (0, n)
    # A reused output array is filled in place (and the wrong one refused).
    states = [np.full((5, n), 0.3) for _ in range(3)]
    out = np.full((5, n), np.nan)
    assert kernel(*states, out=out) is out
    np.testing.assert_array_equal(out, kernel(*states))
    with pytest.raises(ValueError, match="out must be"):
        kernel(*states, out=np.empty((4, n)))


def test_batched_rnea_jvp_in_parameters_matches_central_differences():
    # The double pendulum has rotated frames, an off-origin anchor and full inertias: every
    # kind of parameter enters. Direction: random in every parameter leaf (a perturbed
    # rotation is no longer orthogonal, but RNEA is a smooth function of its entries all the
    # same). Central differences with h = 1e-6 err by O(h²) ~ 1e-12 (truncation) plus
    # ~1e-16 / 1e-6 = 1e-10 (rounding) relative; 1e-7 leaves margin, a wrong derivative is O(1).
    model = build_model(read_model_file(DATA / "double_pendulum.xml"))
    tree, params = model.tree, model.params
    rng = np.random.default_rng(3)
    Q, Qd, Qdd = (jnp.asarray(rng.normal(size=(4, tree.n_dof))) for _ in range(3))
    leaves, treedef = jax.tree_util.tree_flatten(params)
    direction = jax.tree_util.tree_unflatten(
        treedef, [jnp.asarray(rng.normal(size=np.shape(x))) for x in leaves]
    )

    def tau_of(p):
        return batched.rnea_batch(tree, p, Q, Qd, Qdd)

    # Jitted as the module's other programs (FAST_COMPILE): run eagerly, the kernel's cond
    # compiled with LLVM's optimizations, once with its JVP and again for the evaluations
    # (this test alone 9.5 -> 8.7 s of CPU on an empty cache).
    tangent = jax.jit(lambda p, d: jax.jvp(tau_of, (p,), (d,))[1], compiler_options=FAST_COMPILE)
    values = jax.jit(tau_of, compiler_options=FAST_COMPILE)
    jvp = tangent(params, direction)
    h = 1e-6

    def shifted(sign):
        return jax.tree_util.tree_map(lambda x, d: x + sign * h * d, params, direction)

    fd = (values(shifted(1.0)) - values(shifted(-1.0))) / (2 * h)
    assert float(jnp.max(jnp.abs(jvp))) > 1e-3  # the direction moves τ
    assert rel(jvp, fd) < 1e-7
