"""Initial states for joint estimation (Marklund et al., Section 4.4).

Observed angles are smoothed by a 2nd-order 10 Hz Butterworth filter run forward and backward
(no lag), resampled to the estimator's step h, turned into configurations at zero constraint
violation and differenced into velocities by (4.3).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from scipy.signal import butter, sosfiltfilt

from physid.dynamics.spook import configuration_velocity

CUTOFF_HZ = 10.0


def smooth_angles(t: np.ndarray, angles: np.ndarray, cutoff: float = CUTOFF_HZ) -> np.ndarray:
    """Zero-phase low-pass (sosfiltfilt) of angles[N, k] sampled at times t (s). Logs sampled
    too slowly for a 10 Hz cutoff (Nyquist ≤ cutoff) or too short to pad are returned as is."""
    fs = 1.0 / float(np.median(np.diff(t)))
    if fs <= 2.0 * cutoff:
        return angles
    sos = butter(2, cutoff, fs=fs, output="sos")
    if len(t) <= 3 * 2 * len(sos) + 1:
        return angles
    return sosfiltfilt(sos, angles, axis=0)


def resample(t: np.ndarray, values: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """Linear interpolation of values[N, k] at times ``grid`` (per column)."""
    return np.column_stack([np.interp(grid, t, values[:, i]) for i in range(values.shape[1])])


def initial_states(rig, grid_angles: np.ndarray, h: float):
    """States X = (r[n, nb, 3], e[n, nb, 4], v[n, nb, 6]) from smoothed angles[n, k]:
    configurations from ``rig.state_from_angles`` (zero constraint violation) and velocities
    v_{k+1} = h⁻¹ (q_{k+1} ⊟ q_k) (4.3), v_0 = v_1."""
    return _states_fn(rig.state_from_angles)(jnp.asarray(grid_angles, float), float(h))


@functools.lru_cache(maxsize=16)
def _states_fn(state_from_angles):
    """One compiled function per rig model (run op by op, the vmaps cost ~40 compilations)."""

    @functools.partial(jax.jit, static_argnums=1)
    def states(angles, h):
        r, e = jax.vmap(state_from_angles)(angles)
        vel = jax.vmap(lambda r0, e0, r1, e1: configuration_velocity((r0, e0), (r1, e1), h))(
            r[:-1], e[:-1], r[1:], e[1:]
        )
        return r, e, jnp.concatenate([vel[:1], vel])

    return states
