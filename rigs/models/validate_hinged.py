"""Prediction and residual checks of a hinged-rig fit (issue 24): the rig's side of
``estimation.prediction`` and ``estimation.residuals``.

The identified model is the spec's rig with the identified values: the same SPOOK stepper
``physid simulate`` uses, with the spec's own fixed values (the estimator's softened friction
rows, ``identify_hinged.estimation_values``, are a device of the inverse dynamics, not part of
the model). It is simulated in batches (``jax.vmap`` of ``lax.scan``; one compilation per
rig structure and batch shape) from the jointly estimated states and observed as encoder
angles (rad) and, where the fit fused a video, marker pixels (px).
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

import physid.dynamics  # noqa: F401  (float64)
from physid.dynamics.spook import configuration_velocity
from physid.dynamics.spook import simulate as spook_simulate
from physid.estimation.markers import marker_pixels
from physid.estimation.prediction import (
    Channel,
    InitialState,
    Observations,
    Prediction,
    free_run,
    k_step_ahead,
)
from physid.estimation.residuals import data_noise, residual_checks

# Default k of the k-step-ahead check, as a time (s): long enough that a model error shows
# (an ignored 0.3 N m drive moves the pendulum by 0.2 rad in 0.1 s), short enough that a right
# model started from a jointly estimated state stays at the noise (the sample pendulum at
# κ = 100: 0.46, 0.54, 0.99, 6.4 mrad RMS for 0.05, 0.1, 0.2, 0.5 s, quantization 0.44 mrad).
# A spec can set its own: [method] prediction_horizon.
PREDICTION_HORIZON = 0.1
# Default horizon of the free run's verdict (s): about one swing of the sample pendulums
# (0.9 s): a model that cannot predict one period from a state fitted on 0.1 s is poor.
# [method] free_run_horizon.
FREE_RUN_HORIZON = 1.0


def channels(spec, rig, markers=None) -> tuple[Channel, ...]:
    """Encoder channels (rad, noise ``[sensors.X] noise``, default 1e-3 rad; angles wrap at
    2π) and, with markers, two pixel channels per marker (noise from the fit's weights)."""
    from physid.units import to_si

    out = []
    for c in rig.channels:
        noise = spec.sensors.get(c, {}).get("noise")
        if isinstance(noise, dict) and "value" in noise:
            sigma = to_si(float(noise["value"]), str(noise.get("unit", "rad")))
        elif isinstance(noise, int | float):
            sigma = float(noise)
        else:
            sigma = 1e-3
        out.append(Channel(c, "rad", sigma, 2 * math.pi))
    if markers is not None:
        for j in range(len(markers.body)):
            w = markers.weight[:, j]
            sigma = float(1.0 / np.sqrt(np.median(w[w > 0]))) if np.any(w > 0) else 1.0
            out += [Channel(f"marker {j} {a}", "px", sigma) for a in "uv"]
    return tuple(out)


def observations(series: dict, markers=None) -> Observations:
    """The measured channels of a series on its grid (the same order as :func:`channels`)."""
    y, present = np.asarray(series["y"], float), np.asarray(series["present"], bool)
    if markers is not None:
        n, m = markers.weight.shape
        y = np.concatenate([y, markers.uv.reshape(n, 2 * m)], axis=1)
        present = np.concatenate([present, np.repeat(markers.weight > 0, 2, axis=1)], axis=1)
    return Observations(np.asarray(series["grid"], float), y, present)


@functools.lru_cache(maxsize=8)
def _rollout_fn(system, observe, h: float, marker_model):
    """Jitted batched rollout: (params, q0, v0, u[B, steps], cam) → channels [B, steps+1, m].
    Cached per rig structure, so every check of one rig compiles once per batch shape."""

    def one(params, q0, v0, u, cam):
        (r, e), _ = spook_simulate(system, params, q0, v0, u, h)
        out = jax.vmap(lambda rr, ee: observe((rr, ee)))(r, e)
        if marker_model is None:
            return out
        px = jax.vmap(lambda rr, ee: marker_pixels(*marker_model, cam, rr, ee))(r, e)
        return jnp.concatenate([out, px.reshape(px.shape[0], -1)], axis=1)

    return jax.jit(jax.vmap(one, in_axes=(None, 0, 0, 0, None)))


def simulator(rig, values: dict, h: float, u: np.ndarray, markers=None):
    """The ``estimation.prediction.Simulate`` of ``rig`` with the SI ``values`` (its own
    values, updated) and the control u[n−1] of a series: simulate(((r, e), v), start, steps)
    with the control from grid step ``start`` on (held at its last value past the end)."""
    values = {k: v for k, v in values.items() if k in rig.values}
    merged = {k: jnp.asarray(float(v)) for k, v in {**rig.values, **values}.items()}
    params = rig.make_params(merged)
    model = (markers.model, markers.body) if markers is not None else None
    roll = _rollout_fn(rig.system, rig.observe, float(h), model)
    cam = markers.arrays() if markers is not None else None
    u = np.asarray(u, float)
    u = np.concatenate([u, np.repeat(u[-1:] if len(u) else np.zeros(1), 2)])

    def simulate(x0, start, steps):
        (r, e), v = (np.asarray(x0[0][0]), np.asarray(x0[0][1])), np.asarray(x0[1])
        b = len(start)
        # Batch and length padded to powers of two: the checks of one fit (and of the next
        # experiment) then share a handful of compiled shapes; the padded steps run past the
        # record with the last control, and are cut off.
        bp, sp = _pow2(b), _pow2(steps)
        pad = np.r_[np.arange(b), np.zeros(bp - b, int)]
        first = np.asarray(start)[pad]
        idx = np.minimum(first[:, None] + np.arange(sp)[None, :], len(u) - 1)
        out = roll(params, (jnp.asarray(r[pad]), jnp.asarray(e[pad])), jnp.asarray(v[pad]),
                   u[idx], cam)  # fmt: skip
        return np.asarray(out)[:b, : steps + 1]

    return simulate


def _pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


def states_at(X):
    """``states_at(steps)`` of the estimated states X = (r, e, v) for ``k_step_ahead``."""
    r, e, v = (np.asarray(a) for a in X)

    def at(steps):
        return (r[steps], e[steps]), v[steps]

    return at


@functools.lru_cache(maxsize=8)
def _state_of_angles(state_from_angles, h: float):
    def one(z):
        a0, a1 = jnp.split(z, 2)
        q0, q1 = state_from_angles(a0), state_from_angles(a1)
        return q0, configuration_velocity(q0, q1, h)

    return jax.jit(jax.vmap(one))


def initial_state(rig, angles01: np.ndarray, h: float) -> InitialState:
    """The initial state as the joint angles of the first two grid steps (rad), refined by
    output error before the free run: configurations at zero constraint violation and the
    velocity (4.3) between them, as the estimator's own initial states."""
    to = _state_of_angles(rig.state_from_angles, float(h))

    def to_state(z):
        q, v = to(jnp.asarray(z, float))
        return (np.asarray(q[0]), np.asarray(q[1])), np.asarray(v)

    z0 = np.asarray(angles01, float).reshape(-1)
    return InitialState(z0, to_state, step=1e-7)


def horizon_steps(settings: dict, n: int) -> int:
    """k of the k-step-ahead check: ``[method] prediction_horizon`` (s) on the grid."""
    k = int(round(settings.get("prediction_horizon", PREDICTION_HORIZON) / settings["h"]))
    return max(1, min(k, n - 1))


def predict(
    rig, values: dict, series: dict, X, fitted_angles, settings: dict, chans, markers=None,
    label: str = "fitted data",
) -> list[Prediction]:  # fmt: skip
    """k-step-ahead and free-run checks of the model with ``values`` on ``series``, from the
    estimated states X (and their observed angles, for the free run's initial state)."""
    h = settings["h"]
    obs = observations(series, markers)
    n = len(obs.t)
    k = horizon_steps(settings, n)
    sim = simulator(rig, values, h, series["u"], markers)
    ahead = k_step_ahead(sim, states_at(X), obs, chans, k, label)
    angles = np.unwrap(np.asarray(fitted_angles, float)[:2], axis=0)
    horizon = int(round(settings.get("free_run_horizon", FREE_RUN_HORIZON) / h))
    # The free run's initial state is fitted to its first 2k steps: on the sample pendulum,
    # released near the top where a velocity error grows fast, a 0.1 s window left it 2.4 ×
    # the noise over the first second (departing after 0.4 s), a 0.2 s window 0.8 ×.
    free = free_run(sim, initial_state(rig, angles, h), obs, chans, 2 * k, label, horizon)
    return [ahead, free]


def residual_report(problem, X, theta, series: dict, chans, markers=None) -> dict:
    """``estimation.residuals.residual_checks`` of a fit: observation residuals in sensor
    units (measured − fitted), against the data's own noise, and the dynamics rows against
    the level κ assumes (R⁻¹ = I stands for σ_ref, so a dynamics row's assumed std is
    σ_ref/√κ in its own unit, and the weighted rows are compared with σ_ref)."""
    obs = observations(series, markers)
    fitted = np.asarray(problem.observed_angles(X))
    if markers is not None:
        px = np.asarray(problem.marker_pixels(X))
        fitted = np.concatenate([fitted, px.reshape(len(px), -1)], axis=1)
    resid = np.asarray(obs.y) - fitted
    for i, c in enumerate(chans):
        if c.period:
            resid[:, i] = (resid[:, i] + 0.5 * c.period) % c.period - 0.5 * c.period
    dyn, _, _ = problem.residuals(X, theta)
    return residual_checks(resid, obs.present, obs.y, chans, dyn, problem.reference_noise)


def observation_noise(series: dict, chans, weights, sigma_ref: float, markers=None) -> np.ndarray:
    """The data's own noise per observation row of the LM problem, in its weighted units
    (√w · σ_data for encoders; σ_ref √w_px · σ_data for marker pixels), for the
    covariance's white meat (``estimation.uncertainty.parameter_covariance``)."""
    obs = observations(series, markers)
    own = np.array(
        [data_noise(obs.y[:, i], obs.present[:, i], c.period) for i, c in enumerate(chans)]
    )
    own = np.where(np.isfinite(own), own, 0.0)
    k = len(weights)
    out = own[:k] * np.sqrt(np.asarray(weights, float))
    if markers is not None:
        w = np.repeat(np.asarray(markers.weight, float), 2, axis=1)
        wm = np.array([np.median(col[col > 0]) if np.any(col > 0) else 0.0 for col in w.T])
        out = np.concatenate([out, own[k:] * sigma_ref * np.sqrt(wm)])
    return out
