"""Rotations: the custom JVP of D.2 and the ⊞/⊟ operators."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from physid.dynamics.quaternion import (
    boxminus,
    boxminus_small_angle,
    boxplus,
    from_rotvec,
    qmul,
    rotate,
    to_matrix,
)

rng = np.random.default_rng(1)
# The first and second derivatives jitted, one compilation each for the tests below: run
# eagerly, the Hessian of the custom JVP rule dispatched ~110 ops one by one, each compiled
# on its own (the file's CPU 10.7 -> 6.4 s on an empty cache).
_hessian = jax.jit(jax.hessian(from_rotvec))
_jacobian = jax.jit(jax.jacfwd(from_rotvec))


@pytest.mark.parametrize("scale", [0.0, 1e-6, 1e-3, 0.5, 2.5])
def test_from_rotvec_jvp_matches_central_differences(scale):
    psi = rng.normal(size=3) * scale
    dpsi = rng.normal(size=3)
    _, tangent = jax.jvp(from_rotvec, (jnp.asarray(psi),), (jnp.asarray(dpsi),))
    step = 1e-6
    fd = (from_rotvec(psi + step * dpsi) - from_rotvec(psi - step * dpsi)) / (2 * step)
    # Central differences of a smooth function with step 1e-6 are accurate to ~1e-10.
    np.testing.assert_allclose(tangent, fd, atol=1e-9)


def test_from_rotvec_jvp_is_exact_at_zero():
    dpsi = jnp.array([0.3, -1.2, 0.7])
    _, tangent = jax.jvp(from_rotvec, (jnp.zeros(3),), (dpsi,))
    # (D.12): exactly (0, dψ/2), no rounding at all.
    assert tangent[0] == 0.0
    np.testing.assert_array_equal(tangent[1:], dpsi / 2)


def test_from_rotvec_second_derivative_is_exact_at_zero():
    hess = _hessian(jnp.zeros(3))
    # e = (cos(|ψ|/2), ψ sin(|ψ|/2)/|ψ|): ∂²e_s/∂ψ² = −I/4 and e_v is odd in ψ, so its second
    # derivative vanishes. Before the rule was written in |ψ|², this was all NaN.
    np.testing.assert_allclose(hess[0], -0.25 * np.eye(3), atol=1e-15)
    np.testing.assert_allclose(hess[1:], 0.0, atol=1e-15)


@pytest.mark.parametrize("scale", [1e-6, 1e-3, 0.5, 2.5])
def test_from_rotvec_second_derivative_matches_differences_of_the_jvp(scale):
    psi = rng.normal(size=3) * scale
    dpsi = rng.normal(size=3)
    hess = _hessian(jnp.asarray(psi))
    step = 1e-6
    fd = (_jacobian(jnp.asarray(psi + step * dpsi)) - _jacobian(jnp.asarray(psi - step * dpsi))) / (
        2 * step
    )
    # Central differences of the (smooth) Jacobian with step 1e-6: accurate to ~1e-10; the
    # series/exact switch of the rule at |ψ| = 1e-4 is continuous to ~1e-13 in the Jacobian.
    np.testing.assert_allclose(hess @ dpsi, fd, atol=1e-8)


def test_boxplus_then_boxminus_round_trips():
    for _ in range(20):
        e = from_rotvec(jnp.asarray(rng.normal(size=3)))
        psi = jnp.asarray(rng.normal(size=3))
        psi = psi * min(1.0, 3.0 / float(jnp.linalg.norm(psi)))  # stay below π
        np.testing.assert_allclose(boxminus(boxplus(e, psi), e), psi, atol=1e-12)


def test_small_angle_residual_is_third_order():
    e = from_rotvec(jnp.array([0.2, -0.4, 0.1]))
    direction = jnp.array([1.0, 2.0, -0.5]) / np.sqrt(5.25)
    for angle in (1e-2, 1e-3):
        psi = angle * direction
        approx = boxminus_small_angle(boxplus(e, psi), e)
        # 2 e_s e_v = sin(ψ) n, so the error is ψ³/6 (3.24).
        assert float(jnp.linalg.norm(approx - psi)) == pytest.approx(angle**3 / 6, rel=1e-2)


def test_rotation_matrix_agrees_with_rotate_and_product():
    a = from_rotvec(jnp.array([0.3, 0.1, -0.2]))
    b = from_rotvec(jnp.array([-1.0, 0.5, 0.4]))
    p = jnp.array([0.1, 0.2, 0.3])
    np.testing.assert_allclose(to_matrix(a) @ p, rotate(a, p), atol=1e-14)
    np.testing.assert_allclose(rotate(qmul(a, b), p), rotate(a, rotate(b, p)), atol=1e-14)
