"""Camera-marker observations for joint state and parameter estimation.

Markers are points fixed on the bodies, seen by a calibrated camera with known extrinsics.
Their pixel residual is one more observation term (3.6) of the state x_k alone, so it keeps
the arrow structure of the normal equations (Marklund et al. (3.25)): per grid step k and
marker j

    Δy_kj = √w_kj · (π(R_cw (r_b + R(e_b) p_j) + t_cw) − uv_kj)     (px, weighted)

with π the camera projection written in JAX to match OpenCV exactly:
``cv2.fisheye.projectPoints`` (equidistant model with k1..k4) and ``cv2.projectPoints``
(pinhole with k1 k2 p1 p2 k3). Both ignore skew, as OpenCV does with its default ``alpha = 0``.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax.numpy as jnp
import numpy as np

import physid.dynamics  # noqa: F401  (float64)
from physid.dynamics.quaternion import rotate

MODELS = ("fisheye", "pinhole")


@dataclass(frozen=True)
class MarkerObservations:
    """Pixel observations of m body-fixed markers on the estimator grid (n steps).

    ``body[j]``: body index of marker j; ``points[m, 3]``: its centre in that body's frame
    (m, about the body's centre of mass); ``K[3, 3]``, ``D``: intrinsics of ``model``
    (``"fisheye"``: D = k1..k4; ``"pinhole"``: D = k1 k2 p1 p2 [k3]); ``R_cw[3, 3]``,
    ``t_cw[3]`` (m): extrinsics, x_cam = R_cw x_world + t_cw; ``uv[n, m, 2]`` (px): the
    measured pixel on each grid step (any finite value where absent); ``weight[n, m]``
    (px⁻²): 1/σ_px² on steps a camera frame falls on, 0 elsewhere.
    """

    body: tuple[int, ...]
    points: np.ndarray
    K: np.ndarray
    D: np.ndarray
    R_cw: np.ndarray
    t_cw: np.ndarray
    uv: np.ndarray
    weight: np.ndarray
    model: str = "fisheye"

    def __post_init__(self) -> None:
        if self.model not in MODELS:
            raise ValueError(f"marker camera model {self.model!r}; expected one of {MODELS}")
        m = len(self.body)
        pts = np.asarray(self.points, float).reshape(m, 3)
        uv = np.asarray(self.uv, float)
        w = np.asarray(self.weight, float)
        if uv.ndim != 3 or uv.shape[1:] != (m, 2) or w.shape != uv.shape[:2]:
            raise ValueError(
                f"MarkerObservations: uv {uv.shape} must be [n, {m}, 2] and weight "
                f"{w.shape} [n, {m}]"
            )
        if np.any(w < 0) or not np.all(np.isfinite(w)):
            raise ValueError("MarkerObservations: weights must be finite and non-negative")
        d = np.asarray(self.D, float).ravel()
        want = (4,) if self.model == "fisheye" else (4, 5)
        if d.size not in want:
            raise ValueError(f"{self.model} D needs {' or '.join(map(str, want))} coefficients")
        if self.model == "pinhole" and d.size == 4:
            d = np.concatenate([d, [0.0]])
        object.__setattr__(self, "body", tuple(int(b) for b in self.body))
        object.__setattr__(self, "points", pts)
        object.__setattr__(self, "K", np.asarray(self.K, float).reshape(3, 3))
        object.__setattr__(self, "D", d)
        object.__setattr__(self, "R_cw", np.asarray(self.R_cw, float).reshape(3, 3))
        object.__setattr__(self, "t_cw", np.asarray(self.t_cw, float).reshape(3))
        # Absent samples: a finite placeholder so that 0 · (π − uv) stays 0, never NaN.
        object.__setattr__(self, "uv", np.where(w[..., None] > 0, uv, 0.0))
        object.__setattr__(self, "weight", w)

    @property
    def m(self) -> int:
        return len(self.body)

    def arrays(self) -> dict:
        """The numeric part as a pytree of arrays (what the jitted residuals take)."""
        return {
            "points": jnp.asarray(self.points),
            "K": jnp.asarray(self.K),
            "D": jnp.asarray(self.D),
            "R_cw": jnp.asarray(self.R_cw),
            "t_cw": jnp.asarray(self.t_cw),
        }


def project_fisheye(xc: jnp.ndarray, K: jnp.ndarray, D: jnp.ndarray) -> jnp.ndarray:
    """``cv2.fisheye.projectPoints`` of camera-frame points xc[..., 3] (m) → px[..., 2].

    θ = atan(r), r = |(x, y)|/z; θ_d = θ (1 + k1 θ² + k2 θ⁴ + k3 θ⁶ + k4 θ⁸);
    (x', y') = (θ_d / r)(x/z, y/z); u = fx x' + cx, v = fy y' + cy. At r → 0, θ_d/r → 1
    (the series is used below r = 1e-8 so that value and derivative stay finite).
    """
    a, b = xc[..., 0] / xc[..., 2], xc[..., 1] / xc[..., 2]
    r2 = a * a + b * b
    small = r2 < 1e-16
    r = jnp.sqrt(jnp.where(small, 1.0, r2))
    theta = jnp.arctan(r)
    t2 = theta * theta
    poly = 1.0 + t2 * (D[0] + t2 * (D[1] + t2 * (D[2] + t2 * D[3])))
    # θ/r = atan(r)/r → 1 − r²/3 near 0.
    scale = jnp.where(small, 1.0 - r2 / 3.0, theta / r) * jnp.where(small, 1.0, poly)
    return jnp.stack([K[0, 0] * a * scale + K[0, 2], K[1, 1] * b * scale + K[1, 2]], axis=-1)


def project_pinhole(xc: jnp.ndarray, K: jnp.ndarray, D: jnp.ndarray) -> jnp.ndarray:
    """``cv2.projectPoints`` (D = k1 k2 p1 p2 k3) of camera-frame points xc[..., 3] → px."""
    a, b = xc[..., 0] / xc[..., 2], xc[..., 1] / xc[..., 2]
    r2 = a * a + b * b
    k1, k2, p1, p2, k3 = D[0], D[1], D[2], D[3], D[4]
    radial = 1.0 + r2 * (k1 + r2 * (k2 + r2 * k3))
    x = a * radial + 2.0 * p1 * a * b + p2 * (r2 + 2.0 * a * a)
    y = b * radial + p1 * (r2 + 2.0 * b * b) + 2.0 * p2 * a * b
    return jnp.stack([K[0, 0] * x + K[0, 2], K[1, 1] * y + K[1, 2]], axis=-1)


def project(model: str, xc, K, D):
    """Pixels of camera-frame points through ``model`` ("fisheye" or "pinhole")."""
    return project_fisheye(xc, K, D) if model == "fisheye" else project_pinhole(xc, K, D)


def marker_pixels(model: str, body: tuple[int, ...], cam: dict, r, e) -> jnp.ndarray:
    """Predicted pixels [m, 2] of the markers for one configuration (r[nb, 3], e[nb, 4])."""
    idx = jnp.asarray(body)
    return world_pixels(model, cam, r[idx] + rotate(e[idx], cam["points"]))


def world_pixels(model: str, cam: dict, pw) -> jnp.ndarray:
    """Pixels [..., 2] of world points pw[..., 3] (m) through the camera ``cam`` (the
    ``MarkerObservations.arrays`` pytree): extrinsics, then ``project``. The one projection
    of every estimator's marker rows (maximal and generalized coordinates)."""
    xc = pw @ cam["R_cw"].T + cam["t_cw"]
    return project(model, xc, cam["K"], cam["D"])


def pixels_on_grid(
    grid: np.ndarray,
    t: np.ndarray,
    uv: np.ndarray,
    sigma_px: float,
    missing: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Camera samples moved onto the estimator grid: (uv[n, m, 2], weight[n, m]).

    ``t[F]`` (s, on the grid's clock) are frame times and ``uv[F, m, 2]`` the tracked pixels,
    ``missing[F, m]`` marks markers not seen. Each frame goes to the grid step nearest it if
    that is within half a step (frames outside the grid are dropped, nothing is invented);
    its weight is 1/σ_px². Two frames on one step (camera faster than 1/h): the later wins.
    """
    grid, t = np.asarray(grid, float), np.asarray(t, float)
    uv = np.asarray(uv, float)
    F, m = uv.shape[:2]
    seen = np.ones((F, m), bool) if missing is None else ~np.asarray(missing, bool)
    seen &= np.all(np.isfinite(uv), axis=-1)
    h = float(grid[1] - grid[0]) if len(grid) > 1 else 1.0
    k = np.rint((t - grid[0]) / h).astype(int)
    ok = (k >= 0) & (k < len(grid)) & (np.abs(grid[np.clip(k, 0, len(grid) - 1)] - t) <= h / 2)
    out_uv = np.zeros((len(grid), m, 2))
    weight = np.zeros((len(grid), m))
    rows = np.flatnonzero(ok)
    out_uv[k[rows]] = np.where(seen[rows, :, None], uv[rows], 0.0)
    weight[k[rows]] = np.where(seen[rows], 1.0 / sigma_px**2, 0.0)
    return out_uv, weight
