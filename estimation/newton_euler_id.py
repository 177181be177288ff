"""Identification of kinematic trees the way of Lutter et al. (Section 4.3): NEA, the linear
regression of Atkeson et al. on the inertial regressor with the pseudo-inertia LMI (a
semidefinite program through cvxpy), and DiffNEA, a gradient-based fit of the forward-dynamics
loss over any differentiable parameterization (inertial, kinematic, actuator and friction
parameters).

Both take joint trajectories (q, q̇, q̈) — exact, or estimated from sampled positions by
``differentiate`` (zero-phase Butterworth low-pass + Savitzky–Golay derivatives, scipy.signal).
Pure: arrays in, arrays out.

Base parameters: the torques depend on φ only through independent combinations (a cart's mass
only with the pole's mass, an arm's inertia only about its axis ...). ``base_parameters``
finds them from the regressor of the data by QR with column pivoting; they, not the 10 nb
standard parameters, are what data can determine.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field

import jax
import jax.numpy as jnp
import numpy as np
import scipy.linalg
import scipy.optimize
import scipy.signal

import physid.dynamics  # noqa: F401  (float64)
from physid.dynamics import actuators, newton_euler
from physid.dynamics.tree import Tree, TreeParams

# --- derivatives of sampled positions -------------------------------------------------------


def differentiate(q: np.ndarray, dt: float, cutoff_hz: float, window: int = 9):
    """(q, q̇, q̈) from positions sampled every dt: a 4th-order Butterworth low-pass at
    ``cutoff_hz`` applied forwards and backwards (zero phase), then Savitzky–Golay derivatives
    (cubic, ``window`` samples) of the filtered signal. The ends (half a window) are less
    accurate; callers drop them (``edge``)."""
    q = np.asarray(q, float)
    b, a = scipy.signal.butter(4, cutoff_hz, fs=1.0 / dt)
    smooth = scipy.signal.filtfilt(b, a, q, axis=0)
    qd = scipy.signal.savgol_filter(smooth, window, 3, deriv=1, delta=dt, axis=0)
    qdd = scipy.signal.savgol_filter(smooth, window, 3, deriv=2, delta=dt, axis=0)
    return smooth, qd, qdd


def edge(window: int = 9, cutoff_hz: float | None = None, dt: float | None = None) -> int:
    """Samples to drop at each end after ``differentiate``: the derivative window, and the
    filter's transient (about two periods of the cutoff)."""
    transient = 0 if cutoff_hz is None or dt is None else int(np.ceil(2.0 / (cutoff_hz * dt)))
    return window + transient


# --- NEA ---------------------------------------------------------------------------------


VERBOSE = False
JOINT_TERMS = ("damping", "frictionloss", "armature")


@dataclass(frozen=True)
class RegressionData:
    """The linear model τ = A θ of NEA on a dataset: A [N n, 10 nb + n_terms n], targets b,
    column names (``<body>.<φ name>`` and ``<joint>.<term>``)."""

    A: np.ndarray
    b: np.ndarray
    names: tuple[str, ...]
    n_inertial: int


def regression_data(
    tree: Tree,
    params: TreeParams,
    q,
    qd,
    qdd,
    tau,
    joint_terms: tuple[str, ...] = ("damping",),
    friction_velocity: float = 1e-3,
) -> RegressionData:
    """Stack the regressor Y(q, q̇, q̈) of every sample with the joint-term columns:

        τ = Y φ + armature · q̈ + b · q̇ + f_c · tanh(q̇ / v_ε)

    ``tau`` [N, n] is the generalized force the actuators applied (zero on unactuated
    joints); friction enters with a positive coefficient on this side (it opposes motion)."""
    Y = np.asarray(_batched_regressor(tree)(params, *(jnp.asarray(x) for x in (q, qd, qdd))))
    N, n = np.shape(q)
    cols = [Y]
    names = [f"{body}.{p}" for body in tree.body_names for p in newton_euler.INERTIAL_NAMES]
    signals = {
        "damping": np.asarray(qd),
        "frictionloss": np.tanh(np.asarray(qd) / friction_velocity),
        "armature": np.asarray(qdd),
    }
    for term in joint_terms:
        if term not in signals:
            raise ValueError(f"joint term {term!r} is not one of {JOINT_TERMS}")
        # One column per joint: the joint's own signal on its own row.
        block = np.zeros((N, n, n))
        block[:, np.arange(n), np.arange(n)] = signals[term]
        cols.append(block)
        names += [f"{joint}.{term}" for joint in tree.dof_names]
    A = np.concatenate(cols, axis=2).reshape(N * n, -1)
    return RegressionData(A, np.asarray(tau, float).reshape(-1), tuple(names), Y.shape[2])


@functools.lru_cache(maxsize=16)
def _batched_regressor(tree: Tree):
    """jit(vmap(regressor)) for one tree structure, compiled once per sample count."""
    fn = lambda p, a, b, c: newton_euler.regressor(tree, p, a, b, c)  # noqa: E731
    return jax.jit(jax.vmap(fn, in_axes=(None, 0, 0, 0)))


@dataclass(frozen=True)
class BaseParameters:
    """Independent combinations β = θ_B + K θ_D of the regression's columns (QR with column
    pivoting): A θ = A_B β for every θ. ``independent``/``dependent`` index the columns."""

    independent: np.ndarray
    dependent: np.ndarray
    K: np.ndarray
    names: tuple[str, ...]

    def values(self, theta: np.ndarray) -> np.ndarray:
        theta = np.asarray(theta, float)
        return theta[self.independent] + self.K @ theta[self.dependent]

    def describe(self, all_names: tuple[str, ...], tol: float = 1e-9) -> list[str]:
        """Each base parameter as a readable sum, e.g. 'cart.m + 1·pole.m'."""
        out = []
        for i, col in enumerate(self.independent):
            terms = [all_names[col]]
            for j, dep in enumerate(self.dependent):
                k = self.K[i, j]
                if abs(k) > tol:
                    terms.append(f"{k:+.4g}·{all_names[dep]}")
            out.append(" ".join(terms))
        return out


def base_parameters(data: RegressionData, rtol: float = 1e-8) -> BaseParameters:
    """Base parameters of the columns of ``data.A``: columns are scaled to unit norm, QR with
    column pivoting picks independent ones (|R_kk| > rtol · |R_00|), the others are expressed
    in them by least squares."""
    A = data.A
    norms = np.linalg.norm(A, axis=0)
    active = norms > 0
    scaled = np.where(active, A / np.where(active, norms, 1.0), 0.0)
    _, R, perm = scipy.linalg.qr(scaled, mode="economic", pivoting=True)
    diag = np.abs(np.diag(R))
    rank = int(np.sum(diag > rtol * diag[0]))
    independent = np.sort(perm[:rank])
    dependent = np.setdiff1d(np.arange(A.shape[1]), independent)
    K = (
        np.linalg.lstsq(A[:, independent], A[:, dependent], rcond=None)[0]
        if len(dependent)
        else np.zeros((rank, 0))
    )
    K[np.abs(K) < 1e-12 * max(1.0, np.max(np.abs(K), initial=0.0))] = 0.0
    return BaseParameters(independent, dependent, K, tuple(data.names[i] for i in independent))


@dataclass(frozen=True)
class NEAResult:
    """Identified θ (inertial φ then joint terms, the order of ``names``), the model's
    parameters with the identified φ and joint terms, and fit quality."""

    theta: np.ndarray
    names: tuple[str, ...]
    params: TreeParams
    rms_residual: float  # N m or N
    status: str
    min_eigenvalues: np.ndarray = field(default_factory=lambda: np.zeros(0))  # per body, ≥ 0


def _pseudo_inertia_basis() -> np.ndarray:
    """E [10, 4, 4] with P(φ) = Σ_k φ_k E_k the pseudo-inertia (Wensing et al. 2017, eq. 8)
    of a body's φ = [m, m c, I_o (xx, xy, yy, xz, yz, zz)]: [[½ tr(I_o) 1 − I_o, m c],
    [m cᵀ, m]], linear in φ."""
    E = np.zeros((10, 4, 4))
    E[0, 3, 3] = 1.0
    for k in range(3):
        E[1 + k, k, 3] = E[1 + k, 3, k] = 1.0
    for k, (r, c) in enumerate([(0, 0), (0, 1), (1, 1), (0, 2), (1, 2), (2, 2)]):
        Io = np.zeros((3, 3))
        Io[r, c] = Io[c, r] = 1.0
        E[4 + k, :3, :3] = 0.5 * np.trace(Io) * np.eye(3) - Io
    return E


PSEUDO_INERTIA_BASIS = _pseudo_inertia_basis()


def pseudo_inertia_of_vector(phi_body) -> np.ndarray:
    """The 4×4 pseudo-inertia of one body's φ (NumPy); ⪰ 0 iff a physical body has φ."""
    return np.einsum("k,kij->ij", np.asarray(phi_body, float), PSEUDO_INERTIA_BASIS)


def nea(
    tree: Tree,
    params: TreeParams,
    data: RegressionData,
    prior: np.ndarray | None = None,
    prior_weight: float = 1e-6,
    lmi: bool = True,
) -> NEAResult:
    """NEA: least squares on the regressor, min ‖A θ − b‖² + w ‖θ − θ_prior‖²_D, subject to
    every body's pseudo-inertia P(φ_b) ⪰ 0 (``lmi``: physically consistent regression,
    Wensing et al.) and non-negative friction and armature: a semidefinite program (cvxpy,
    Clarabel).

    The small prior term (w = ``prior_weight`` relative to the data, D the column norms)
    picks, among the inertial parameters the data cannot separate, those closest to the
    prior (default: ``params``'s own); it moves the base parameters by ~w.
    """
    import cvxpy as cp

    A, b = data.A, data.b
    p = A.shape[1]
    nb = tree.n_bodies
    norms = np.linalg.norm(A, axis=0)
    scale = np.where(norms > 0, 1.0 / np.where(norms > 0, norms, 1.0), 1.0)  # θ = scale · x
    theta_prior = prior if prior is not None else _prior_from(params, data)
    x = cp.Variable(p)
    # ‖A_s x − b‖² = ‖R x − Qᵀ b‖² + const with A_s = Q R (thin QR): the SDP sees p rows
    # instead of N n, which keeps it small and well scaled.
    Q, R = np.linalg.qr(A * scale)
    c = Q.T @ b
    norm_b = max(float(b @ b), 1e-300)
    fit = cp.sum_squares(R @ x - c) / norm_b
    # x is each column's contribution to the torques (θ times the column's norm): the prior
    # weighs every direction by how much torque it moves.
    reg = prior_weight * cp.sum_squares(x - theta_prior / scale) / norm_b
    constraints = []
    if lmi:
        for body in range(nb):
            phi = cp.multiply(scale[10 * body : 10 * body + 10], x[10 * body : 10 * body + 10])
            # Congruence D P D with D = diag(1/ℓ, 1/ℓ, 1/ℓ, 1)/√m (ℓ the prior's radius of
            # gyration): the same cone, with entries of order one for every body.
            D = _body_scaling(theta_prior[10 * body : 10 * body + 10])
            basis = np.einsum("ij,kjl,lm->kim", D, PSEUDO_INERTIA_BASIS, D)
            P = sum(phi[k] * basis[k] for k in range(10))
            constraints.append(0.5 * (P + P.T) >> 0)
    joint_cols = np.arange(data.n_inertial, p)
    if len(joint_cols):
        constraints.append(x[joint_cols] >= 0)
    problem = cp.Problem(cp.Minimize(fit + reg), constraints)
    problem.solve(
        solver=cp.CLARABEL, tol_gap_abs=1e-9, tol_gap_rel=1e-9, tol_feas=1e-9, verbose=VERBOSE
    )
    if x.value is None:
        raise RuntimeError(f"NEA: cvxpy status {problem.status}")
    theta = np.asarray(x.value) * scale
    fitted = _params_from(tree, params, data, theta)
    residual = A @ theta - b
    eig = np.array(
        [
            np.linalg.eigvalsh(pseudo_inertia_of_vector(theta[10 * i : 10 * i + 10]))[0]
            for i in range(nb)
        ]
    )
    return NEAResult(
        theta, data.names, fitted, float(np.sqrt(np.mean(residual**2))), problem.status, eig
    )


def _body_scaling(phi_body: np.ndarray) -> np.ndarray:
    P = pseudo_inertia_of_vector(phi_body)
    m = max(P[3, 3], 1e-12)
    ell = np.sqrt(max(np.trace(P[:3, :3]) / m, 1e-12))
    return np.diag([1 / ell, 1 / ell, 1 / ell, 1.0]) / np.sqrt(m)


def _prior_from(params: TreeParams, data: RegressionData) -> np.ndarray:
    """The model's own φ, and zero for the joint terms."""
    phi = np.asarray(newton_euler.inertial_vector(params))
    return np.concatenate([phi, np.zeros(len(data.names) - data.n_inertial)])


def _params_from(tree: Tree, params: TreeParams, data: RegressionData, theta) -> TreeParams:
    """``params`` with identified φ (bodies with m > 0) and joint terms."""
    import dataclasses

    m, com, inertia = newton_euler.inertial_from_vector(jnp.asarray(theta[: data.n_inertial]))
    bodies = dataclasses.replace(params.bodies, mass=m, com=com, inertia=inertia)
    dofs = params.dofs
    for k, name in enumerate(data.names[data.n_inertial :]):
        joint, _, term = name.rpartition(".")
        j = tree.dof_names.index(joint)
        dofs = dataclasses.replace(
            dofs, **{term: getattr(dofs, term).at[j].set(theta[data.n_inertial + k])}
        )
    return dataclasses.replace(params, bodies=bodies, dofs=dofs)


# --- DiffNEA -------------------------------------------------------------------------------


@dataclass(frozen=True)
class DiffNEAResult:
    theta: np.ndarray
    params: TreeParams
    cost: float  # mean squared weighted acceleration error
    iterations: int
    status: str


def diffnea(
    tree: Tree,
    make_params: Callable[[jnp.ndarray], TreeParams],
    theta0: np.ndarray,
    q,
    qd,
    qdd,
    u,
    weights: np.ndarray | None = None,
    max_iterations: int = 200,
) -> DiffNEAResult:
    """DiffNEA: minimize Σ_k ‖W (q̈_model(q_k, q̇_k, u_k; θ) − q̈_k)‖² over θ, where
    ``make_params(θ)`` maps unconstrained θ to the model (inertial parameters, e.g. through
    ``dynamics.parameterization``; kinematics; actuator gains; |·| friction) and q̈_model is
    ABA on the actuator and friction forces.

    Departure from the paper: the loss is a sum of squares, so it is minimized by a
    trust-region Gauss–Newton method (scipy's ``least_squares``) with the exact Jacobian by
    JAX forward mode, not by ADAM: it converges in tens of iterations to the precision of
    the data, where ADAM needs tens of thousands of steps and a learning-rate schedule."""
    q, qd, qdd, u = (jnp.asarray(x, float) for x in (q, qd, qdd, u))
    w = jnp.ones(q.shape[1]) if weights is None else jnp.asarray(weights, float)
    N = q.shape[0]

    def residuals(theta):
        params = make_params(theta)
        pred = jax.vmap(lambda a, b, c: actuators.forward_dynamics(tree, params, a, b, c))(q, qd, u)
        return ((pred - qdd) * w).reshape(-1) / np.sqrt(N)

    fun = jax.jit(residuals)
    jac = jax.jit(jax.jacfwd(residuals))
    result = scipy.optimize.least_squares(
        lambda th: np.asarray(fun(jnp.asarray(th))),
        np.asarray(theta0, float),
        jac=lambda th: np.asarray(jac(jnp.asarray(th))),
        method="trf",
        x_scale="jac",
        xtol=1e-12,
        ftol=1e-12,
        gtol=1e-12,
        max_nfev=max_iterations,
    )
    theta = np.asarray(result.x)
    return DiffNEAResult(
        theta,
        make_params(jnp.asarray(theta)),
        float(2 * result.cost),
        int(result.nfev),
        result.message,
    )
