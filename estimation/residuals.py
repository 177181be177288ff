"""Residual checks of a fit (issue 24): observation residuals against the stated sensor noise
and against the data's own noise, their whiteness, and the dynamics residuals against the
level the weights assume.

- χ² per degree of freedom: mean of (residual / stated noise)² over the samples. It is ~1
  where the states fit the data as well as the sensor allows; it is below 1 both where the
  stated noise is pessimistic and where the states absorb the noise, so it is shown next to:
- the data's own noise, estimated without any model from the third differences of each
  channel (for white noise e, Δ³e has variance 20σ²; a signal smooth on the sampling scale
  contributes (Δt)³ y''' , 3e-8 rad for the sample pendulum at 1 kHz, far below encoder
  quantization). Residuals well below it mean the estimated states follow the noise:
  **over-fitting**; well above it, the model cannot follow the data: **under-fitting**.
- whiteness: the residuals' autocorrelation at lags 1..L and the Ljung–Box statistic
  Q = N(N+2) Σ ρ_k²/(N−k), χ²-distributed with L degrees of freedom for white residuals. A
  model error leaves correlated residuals (so do quantized encoders at low speed, where the
  rounding error repeats): reported, not a verdict by itself.
- dynamics residuals: the weights assume each dynamics row has the std ``level`` (for the
  LM of Marklund et al., σ_ref/√κ, since R⁻¹ = I stands for the encoders' σ_ref); the ratio
  of the actual RMS to it says whether the model errors are as small as κ claims.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.stats import chi2

OVER_FIT = 0.5  # observation residual RMS below this fraction of the data's noise
UNDER_FIT = 2.0  # ... above this multiple of it
WHITENESS_LAGS = 20
WHITENESS_P = 1e-3  # Ljung–Box p-value below which residuals are called correlated


def data_noise(y: np.ndarray, present: np.ndarray, period: float | None = None) -> float:
    """Noise std of one channel from its third differences over runs of consecutive samples
    (model-free; see the module doc). NaN with fewer than 8 usable differences."""
    y = np.asarray(y, float)
    ok = np.asarray(present, bool)
    d3 = np.diff(y, 3)
    if period:
        d3 = (d3 + 0.5 * period) % period - 0.5 * period
    both = ok[:-3] & ok[1:-2] & ok[2:-1] & ok[3:]
    d3 = d3[both]
    if d3.size < 8:
        return math.nan
    # A robust scale (median absolute deviation), so that the few steps with a large third
    # derivative (an impact, a stick-slip transition) do not count as noise.
    mad = float(np.median(np.abs(d3 - np.median(d3))))
    return 1.4826 * mad / math.sqrt(20.0)


def autocorrelation(r: np.ndarray, lags: int) -> np.ndarray:
    """Sample autocorrelation ρ_1..ρ_lags of a residual series (mean removed)."""
    r = np.asarray(r, float) - np.mean(r)
    n = len(r)
    denom = float(np.dot(r, r))
    if n < 2 or denom <= 0:
        return np.full(lags, np.nan)
    spec = np.fft.rfft(r, 2 * n)
    acf = np.fft.irfft(spec * np.conj(spec))[: lags + 1]
    return acf[1:] / denom


def ljung_box(rho: np.ndarray, n: int) -> tuple[float, float]:
    """(Q, p-value) of the Ljung–Box test of ρ_1..ρ_L for a series of length n."""
    lags = np.arange(1, len(rho) + 1)
    q = float(n * (n + 2) * np.sum(rho**2 / (n - lags)))
    return q, float(chi2.sf(q, len(rho)))


def channel_checks(residual: np.ndarray, present: np.ndarray, y: np.ndarray, channel) -> dict:
    """The residual checks of one channel (``channel``: ``estimation.prediction.Channel``);
    ``residual`` and ``y`` on the estimator's grid, ``present`` its sample mask."""
    ok = np.asarray(present, bool) & np.isfinite(residual)
    r = np.asarray(residual, float)[ok]
    n = int(r.size)
    if n == 0:
        return {"name": channel.name, "unit": channel.unit, "samples": 0}
    rms = float(np.sqrt(np.mean(r**2)))
    own = data_noise(y, present, channel.period)
    lags = min(WHITENESS_LAGS, max(n // 5, 1))
    rho = autocorrelation(r, lags)
    q, p = ljung_box(rho, n)
    ratio = rms / own if math.isfinite(own) and own > 0 else math.nan
    fit = "as the noise"
    if ratio < OVER_FIT:
        fit = "over-fitting"
    elif ratio > UNDER_FIT:
        fit = "under-fitting"
    return {
        "name": channel.name,
        "unit": channel.unit,
        "samples": n,
        "rms": rms,
        "stated_noise": channel.noise,
        "chi2_per_dof": float(np.mean((r / channel.noise) ** 2)),
        "data_noise": own,
        "rms_over_data_noise": ratio,
        "fit": fit,
        "lag1_autocorrelation": float(rho[0]),
        "ljung_box_q": q,
        "ljung_box_lags": lags,
        "ljung_box_p": p,
        "white": bool(p >= WHITENESS_P),
    }


def residual_checks(
    residuals: np.ndarray,
    present: np.ndarray,
    y: np.ndarray,
    channels,
    dynamics: np.ndarray | None = None,
    dynamics_level: float | None = None,
) -> dict:
    """Per channel :func:`channel_checks` and, where given, the dynamics residuals
    ``dynamics[n, rows]`` (in the residual's own unit) against their assumed std
    ``dynamics_level``. ``findings`` lists the named problems in words."""
    channels = tuple(channels)
    per = [
        channel_checks(residuals[:, i], present[:, i], y[:, i], c) for i, c in enumerate(channels)
    ]
    out: dict = {"channels": per, "findings": []}
    for c in per:
        if c.get("fit") == "over-fitting":
            out["findings"].append(
                f"over-fitting on {c['name']}: the states follow the noise (residual RMS "
                f"{c['rms']:.2g} {c['unit']}, {c['rms_over_data_noise']:.2f} of the data's own "
                f"noise {c['data_noise']:.2g})"
            )
        elif c.get("fit") == "under-fitting":
            out["findings"].append(
                f"under-fitting on {c['name']}: residual RMS {c['rms']:.2g} {c['unit']} is "
                f"{c['rms_over_data_noise']:.1f} times the data's own noise {c['data_noise']:.2g}"
            )
    correlated = [c for c in per if c.get("samples") and not c["white"]]
    if correlated:
        listed = ", ".join(
            f"{c['name']} (lag-1 {c['lag1_autocorrelation']:.2f})" for c in correlated
        )
        out["findings"].append(
            f"residuals correlated in time (Ljung–Box p < {WHITENESS_P:g}) on {listed}: model "
            "error, an unmodelled input, or a sensor whose error is not white (quantized "
            "encoders at low speed)"
        )
    if dynamics is not None and dynamics_level:
        d = np.asarray(dynamics, float)
        rms = float(np.sqrt(np.mean(d**2))) if d.size else math.nan
        out["dynamics"] = {
            "rms": rms,
            "assumed_std": float(dynamics_level),
            "ratio": rms / float(dynamics_level),
        }
        if rms > UNDER_FIT * dynamics_level:
            out["findings"].append(
                f"dynamics residuals are {rms / dynamics_level:.1f} times the level the "
                "weights assume: the model errs more than κ claims"
            )
    return out
