"""Clock synchronization of a video and an encoder log from a motion both of them see.

Convention: ``t_encoder = t_video + offset + drift · t_video`` (s; ``drift`` dimensionless,
the rate error of the encoder board's clock relative to the camera's).

Two steps:

1. **Coarse** (:func:`coarse_candidates`): the speed of the markers in the image (px/s) and
   the speed the encoder angles predict for the same markers in space (m/s) rise and fall
   together. Both are resampled onto one uniform grid at the video's frame period and their
   windowed Pearson correlation is computed by FFT for every lag that keeps at least half of
   the video inside the log. The best few peaks are the candidates.
2. **Fine** (:func:`refine_offset`): a residual function of the offset (the pipeline uses the
   reprojection error of the markers with the camera pose solved by PnP at each offset) is
   scanned around each candidate and a parabola is fitted to its minimum: sub-sample
   precision. The candidate with the smallest residual wins; how much smaller than the
   runner-up is the ``margin``.

The offset's standard deviation and the drift come from batch means: the offset refined on
each of 8 contiguous blocks of frames, a straight line through them (slope = drift, kept only
beyond three standard deviations), and the scatter about it. The curvature of the residual
alone would assume independent errors; encoder quantization makes them correlated in time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np
from scipy.signal import correlate, correlation_lags


@dataclass(frozen=True)
class SyncResult:
    """Offset (s) and drift of the encoder clock against the video clock, with their
    standard deviations, the evidence, and whether it is safe to fuse the two."""

    offset: float
    offset_std: float
    drift: float
    drift_std: float
    correlation: float  # Pearson r of the speed signals at the coarse peak
    margin: float  # 1 − r(second peak) / r(peak)
    rms: float  # residual RMS at the refined offset (px for reprojection)
    confident: bool
    reason: str

    def to_encoder(self, t_video: np.ndarray) -> np.ndarray:
        """Encoder-clock times (s) of video times (s)."""
        return t_video + self.offset + self.drift * t_video

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Thresholds:
    """When to refuse fusion: the coarse peak must correlate at least ``min_correlation``
    and beat the next peak by ``min_margin``; the refined residual RMS must stay below
    ``max_rms`` (px)."""

    min_correlation: float = 0.5
    min_margin: float = 0.15
    max_rms: float = 3.0
    min_separation: float = 0.25  # s between the peak and a competing one


DEFAULT_THRESHOLDS = Thresholds()


# ------------------------------------------------------------------------------ signals


def point_speed(t: np.ndarray, points: np.ndarray) -> np.ndarray:
    """RMS over points of the speed of points[N, m, k] (k = 2 px or 3 m); NaN-aware."""
    v = np.gradient(np.asarray(points, float), t, axis=0)
    s2 = np.sum(v**2, axis=-1)
    with np.errstate(invalid="ignore"):
        return np.sqrt(np.nanmean(s2, axis=1))


def _normalized(y: np.ndarray) -> np.ndarray:
    y = np.where(np.isfinite(y), y, np.nan)
    y = y - np.nanmean(y)
    scale = np.nanstd(y)
    return np.nan_to_num(y / scale if scale > 0 else y)


def _resample(t: np.ndarray, y: np.ndarray, grid: np.ndarray) -> np.ndarray:
    ok = np.isfinite(y)
    if ok.sum() < 2:
        return np.full_like(grid, np.nan)
    out = np.interp(grid, t[ok], y[ok], left=np.nan, right=np.nan)
    return out


# ------------------------------------------------------------------------------ coarse


def coarse_candidates(
    t_video: np.ndarray,
    s_video: np.ndarray,
    t_encoder: np.ndarray,
    s_encoder: np.ndarray,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
    count: int = 3,
) -> list[tuple[float, float]]:
    """Up to ``count`` (offset, r) pairs: the best lags of the speed-signal correlation,
    at least ``min_separation`` apart, best first (see module doc).

    The grid step is the video's median frame period; lags are limited so that at least
    half of the video lies inside the encoder log.
    """
    dt = float(np.median(np.diff(t_video)))
    grid_v = np.arange(t_video[0], t_video[-1], dt)
    grid_e = np.arange(t_encoder[0], t_encoder[-1], dt)
    a = _normalized(_resample(t_video, s_video, grid_v))
    b = _normalized(_resample(t_encoder, s_encoder, grid_e))
    if len(a) < 8 or len(b) < 8:
        return []
    r, lags, n = _windowed_pearson(a, b)
    peaks = np.where(n >= 0.5 * len(a), _local_maxima(r), -np.inf)
    found: list[tuple[float, float]] = []
    for i in np.argsort(peaks)[::-1]:
        if not np.isfinite(peaks[i]) or len(found) == count:
            break
        offset = grid_e[0] - grid_v[0] + lags[i] * dt
        if all(abs(offset - o) > thresholds.min_separation for o, _ in found):
            found.append((float(offset), float(peaks[i])))
    return found


def _windowed_pearson(a: np.ndarray, b: np.ndarray):
    """Pearson r of a against the overlapping part of b, for every lag (b[i + lag] ~ a[i]),
    from FFT correlations of the windowed sums; also the lags and overlap counts."""

    def corr(x, y):
        return correlate(x, y, mode="full", method="fft")

    ones_a, ones_b = np.ones_like(a), np.ones_like(b)
    n = np.maximum(np.rint(corr(ones_b, ones_a)), 1.0)
    sa, sb = corr(ones_b, a), corr(b, ones_a)
    cov = corr(b, a) - sa * sb / n
    var_a = corr(ones_b, a * a) - sa**2 / n
    var_b = corr(b * b, ones_a) - sb**2 / n
    with np.errstate(invalid="ignore", divide="ignore"):
        r = cov / np.sqrt(np.maximum(var_a * var_b, 0.0))
    r = np.where(np.isfinite(r), r, -np.inf)
    return r, correlation_lags(len(b), len(a), mode="full"), n


def _local_maxima(r: np.ndarray) -> np.ndarray:
    """r where it is a local maximum, −inf elsewhere."""
    peak = np.zeros_like(r, dtype=bool)
    peak[1:-1] = (r[1:-1] >= r[:-2]) & (r[1:-1] >= r[2:])
    return np.where(peak, r, -np.inf)


# ------------------------------------------------------------------------------ fine


def refine_offset(
    residuals: Callable[[float], np.ndarray],
    offset0: float,
    half_width: float,
    n_params: int = 6,
    samples: int = 41,
) -> tuple[float, float, float]:
    """(offset, std, rms) minimizing S(δ) = ‖residuals(δ)‖² near ``offset0``.

    S is scanned at ``samples`` points over ±``half_width`` (s); a parabola through the
    lowest point and its neighbours is refined once on a 10× finer scan, and its curvature
    gives std (see module doc; ``n_params`` are the other fitted unknowns, e.g. 6 for a
    camera pose).
    """
    centre = offset0
    for width in (half_width, 2.0 * half_width / (samples - 1)):
        grid = centre + np.linspace(-width, width, samples)
        S = np.array([_ssr(residuals(d)) for d in grid])
        i = int(np.clip(np.nanargmin(S), 1, samples - 2))
        centre, curvature = _parabola_min(grid[i - 1 : i + 2], S[i - 1 : i + 2])
    res = residuals(centre)
    n = int(np.sum(np.isfinite(res)))
    s_min = _ssr(res)
    sigma2 = s_min / max(n - n_params - 1, 1)
    std = float(np.sqrt(sigma2 / (0.5 * curvature))) if curvature > 0 else float("inf")
    rms = float(np.sqrt(s_min / max(n, 1)))
    return float(centre), std, rms


def _ssr(res: np.ndarray) -> float:
    res = np.asarray(res, float)
    return float(np.sum(res[np.isfinite(res)] ** 2))


def _parabola_min(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Vertex and second derivative of the parabola through three points."""
    c2, c1, _ = np.polyfit(x - x[1], y, 2)
    if c2 <= 0:
        return float(x[int(np.argmin(y))]), 0.0
    vertex = -c1 / (2 * c2)
    vertex = float(np.clip(vertex, x[0] - x[1], x[2] - x[1]))
    return float(x[1] + vertex), float(2 * c2)


# ------------------------------------------------------------------------------ together


def synchronize(
    t_video: np.ndarray,
    s_video: np.ndarray,
    t_encoder: np.ndarray,
    s_encoder: np.ndarray,
    residuals: Callable[[float, np.ndarray], np.ndarray],
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
    blocks: int = 8,
) -> SyncResult:
    """Offset and drift from the speed signals and ``residuals(offset, frames)`` (the residual
    vector of the video frames selected by the boolean mask ``frames``).

    Each coarse candidate is refined on all frames and the one with the smallest residual
    wins (a quasi-periodic motion can make a wrong lag correlate almost as well, but it
    cannot reproject as well). Then the offset is refined on ``blocks`` contiguous blocks of
    frames: a straight line through the block offsets gives the drift, and the scatter about
    it the standard deviations (batch means: honest when residuals are correlated in time,
    e.g. by encoder quantization, where the curvature std alone is too small).
    """
    found = coarse_candidates(t_video, s_video, t_encoder, s_encoder, thresholds)
    if not found:
        return SyncResult(*([float("nan")] * 4), 0.0, 0.0, float("nan"), False, "too few samples")
    frame = float(np.median(np.diff(t_video)))
    everything = np.ones(len(t_video), dtype=bool)
    fits = [refine_offset(lambda d: residuals(d, everything), o, 1.5 * frame) for o, _ in found]
    order = np.argsort([f[2] for f in fits])
    offset, curvature_std, rms = fits[order[0]]
    r_peak = found[order[0]][1]
    rival_rms = fits[order[1]][2] if len(fits) > 1 else float("inf")
    margin = 1.0 - rms / rival_rms if np.isfinite(rival_rms) else 1.0
    offset, offset_std, drift, drift_std = _batch_means(
        t_video, residuals, offset, frame, blocks, curvature_std
    )
    reasons = []
    if r_peak < thresholds.min_correlation:
        reasons.append(f"speed signals correlate only {r_peak:.2f} at the best lag")
    if margin < thresholds.min_margin:
        reasons.append(f"another lag reprojects almost as well ({rms:.2f} vs {rival_rms:.2f} px)")
    if not rms <= thresholds.max_rms:
        reasons.append(f"reprojection RMS {rms:.2f} px at the best offset")
    return SyncResult(
        offset=float(offset),
        offset_std=float(offset_std),
        drift=float(drift),
        drift_std=float(drift_std),
        correlation=float(r_peak),
        margin=float(margin),
        rms=float(rms),
        confident=not reasons,
        reason="; ".join(reasons) or "ok",
    )


def _batch_means(t_video, residuals, offset, frame, blocks, curvature_std):
    """(offset at t_video = 0, its std, drift, drift std) from per-block refined offsets.

    The drift is kept only when it exceeds three of its standard deviations; otherwise the
    offset is the mean of the block offsets."""
    idx = np.array_split(np.arange(len(t_video)), blocks)
    masks = [np.isin(np.arange(len(t_video)), i) for i in idx]
    o = np.array([refine_offset(lambda d, m=m: residuals(d, m), offset, frame)[0] for m in masks])
    tb = np.array([float(np.mean(t_video[i])) for i in idx])
    A = np.column_stack([np.ones_like(tb), tb - tb.mean()])
    coef, *_ = np.linalg.lstsq(A, o, rcond=None)
    dof = max(blocks - 2, 1)
    s2 = float(np.sum((o - A @ coef) ** 2)) / dof
    cov = s2 * np.linalg.inv(A.T @ A)
    drift, drift_std = float(coef[1]), float(np.sqrt(cov[1, 1]))
    if abs(drift) > 3 * drift_std:
        mean_std = float(np.sqrt(cov[0, 0]))
        return coef[0] - drift * tb.mean(), max(mean_std, curvature_std), drift, drift_std
    mean_std = float(np.std(o, ddof=1) / np.sqrt(blocks))
    return float(np.mean(o)), max(mean_std, curvature_std), 0.0, drift_std
