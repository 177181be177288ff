"""The simulated experiments of Lutter et al., Section 4, on any tree: datasets (a) and (b),
and roll-outs of an identified model against held-out trajectories. Pure functions of a model
and a random generator (no files).

(a) ``uniform_dataset``: (q, q̇, u) drawn uniformly over the state and input ranges, with the
    exact accelerations of the true model.
(b) ``trajectory``: the true model (viscous friction included) simulated by RK4 under a
    random multisine input (plus a feedback where the rig needs one, both sampled at the
    log's rate as a digital controller would), with small action noise (the applied input
    differs from the recorded one) and small state noise (on the recorded positions); q̇, q̈
    are then estimated from the noisy positions (``newton_euler_id.differentiate``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

import physid.dynamics  # noqa: F401  (float64)
from physid.dynamics import actuators
from physid.dynamics.integrators import rk4_step, rollout_rk4
from physid.dynamics.tree import Tree, TreeParams


def drive_forces(tree: Tree, params: TreeParams, u):
    """Generalized forces the inputs u [.., n_actuators] command, at zero joint rate (a DC
    motor's back-EMF is a damping, not part of the drive): [.., n]."""
    n = tree.n_dof
    f = jax.vmap(lambda uk: actuators.actuator_forces(tree, params, jnp.zeros(n), uk))
    u = jnp.asarray(u, float)
    return np.asarray(f(u.reshape(-1, u.shape[-1]))).reshape(*u.shape[:-1], n)


@dataclass(frozen=True)
class Dataset:
    """Samples (q, q̇, q̈) [N, n], inputs u [N, n_actuators] and the commanded generalized
    forces tau [N, n]; ``t`` [N] (s) for trajectories."""

    q: np.ndarray
    qd: np.ndarray
    qdd: np.ndarray
    u: np.ndarray
    tau: np.ndarray
    t: np.ndarray | None = None


def uniform_dataset(
    tree: Tree,
    params: TreeParams,
    rng: np.random.Generator,
    n_samples: int,
    q_span,
    qd_span,
    u_span,
) -> Dataset:
    """Dataset (a): q ~ U(±q_span), q̇ ~ U(±qd_span), u ~ U(±u_span) per coordinate, q̈ exact."""
    n, na = tree.n_dof, tree.n_actuators
    q = rng.uniform(-1, 1, (n_samples, n)) * np.asarray(q_span)
    qd = rng.uniform(-1, 1, (n_samples, n)) * np.asarray(qd_span)
    u = rng.uniform(-1, 1, (n_samples, na)) * np.asarray(u_span)
    fd = jax.jit(jax.vmap(lambda a, b, c: actuators.forward_dynamics(tree, params, a, b, c)))
    qdd = np.asarray(fd(jnp.asarray(q), jnp.asarray(qd), jnp.asarray(u)))
    return Dataset(q, qd, qdd, u, drive_forces(tree, params, u))


def multisine(rng: np.random.Generator, t: np.ndarray, amplitude, freqs_hz) -> np.ndarray:
    """Σ_k a_k sin(2π f_k t + φ_k) with random phases, scaled to peak ``amplitude`` per input:
    [len(t), n_inputs]."""
    amplitude = np.atleast_1d(amplitude)
    out = np.zeros((len(t), len(amplitude)))
    for j, a in enumerate(amplitude):
        phases = rng.uniform(0, 2 * np.pi, len(freqs_hz))
        s = np.sum(
            [np.sin(2 * np.pi * f * t + p) for f, p in zip(freqs_hz, phases, strict=True)], 0
        )
        out[:, j] = a * s / np.max(np.abs(s))
    return out


def simulate_closed_loop(
    tree: Tree,
    params: TreeParams,
    q0,
    qd0,
    u_open: np.ndarray,
    h: float,
    sub: int,
    feedback: Callable | None = None,
    action_noise: np.ndarray | None = None,
):
    """RK4 at step h under a digital controller sampled every ``sub`` steps: at each sample
    k it commands u_k = u_open[k] + feedback(q_k, q̇_k), and the applied input u_k +
    ``action_noise[k]`` is held over the sample period (sub · h). So the recorded command
    is the applied input up to the action noise, as on a real rig logging its controller.
    Returns q, q̇ at the samples [N + 1, n] and the commanded u [N, na]."""
    noise = np.zeros_like(u_open) if action_noise is None else action_noise

    def sample(carry, xs):
        q, qd = carry
        u_k, w_k = xs
        cmd = u_k if feedback is None else u_k + feedback(q, qd)

        def step(_, state):
            return rk4_step(tree, params, *state, cmd + w_k, h)

        q1, qd1 = jax.lax.fori_loop(0, sub, step, (q, qd))
        return (q1, qd1), (q1, qd1, cmd)

    run = jax.jit(lambda q0, qd0, u, w: jax.lax.scan(sample, (q0, qd0), (u, w)))
    _, (q, qd, cmd) = run(
        jnp.asarray(q0, float), jnp.asarray(qd0, float), jnp.asarray(u_open), jnp.asarray(noise)
    )
    q = np.concatenate([np.asarray(q0, float)[None], np.asarray(q)])
    qd = np.concatenate([np.asarray(qd0, float)[None], np.asarray(qd)])
    return q, qd, np.asarray(cmd)


@dataclass(frozen=True)
class Trajectory:
    """A simulated experiment: true states at the sample times, the recorded (noisy)
    positions and the recorded (commanded) inputs, ``dt`` the sample period (s)."""

    t: np.ndarray
    q_true: np.ndarray
    qd_true: np.ndarray
    q_measured: np.ndarray
    u: np.ndarray
    dt: float


def trajectory(
    tree: Tree,
    params: TreeParams,
    rng: np.random.Generator,
    duration: float,
    dt: float,
    h: float,
    q0,
    amplitude,
    freqs_hz,
    feedback: Callable | None = None,
    state_noise=0.0,
    action_noise=0.0,
) -> Trajectory:
    """Simulate the true model at step h under a controller sampled every dt (a multiple of
    h; ``simulate_closed_loop``) and record its positions every dt with Gaussian noise."""
    sub = int(round(dt / h))
    n_samples = int(round(duration / dt))
    t = np.arange(n_samples) * dt
    u_open = multisine(rng, t, amplitude, freqs_hz)
    w = rng.normal(0.0, 1.0, (n_samples, tree.n_actuators)) * action_noise
    q, qd, cmd = simulate_closed_loop(
        tree, params, q0, np.zeros(tree.n_dof), u_open, h, sub, feedback, w
    )
    q, qd = q[:-1], qd[:-1]
    measured = q + rng.normal(0.0, 1.0, q.shape) * np.asarray(state_noise)
    return Trajectory(t, q, qd, measured, cmd, dt)


def rollout_errors(
    tree: Tree,
    params: TreeParams,
    held_out: Trajectory,
    times=(1.0, 2.0, 5.0),
    rate_hz: float = 250.0,
) -> dict[float, np.ndarray]:
    """|q_model(t) − q_true(t)| per joint at ``times`` for an RK4 roll-out of ``params`` at
    ``rate_hz`` from the held-out trajectory's true initial state, replaying its recorded
    inputs (held between samples)."""
    h = 1.0 / rate_hz
    n_steps = int(round(max(times) / h))
    idx = np.minimum((np.arange(n_steps) * h / held_out.dt + 1e-9).astype(int), len(held_out.u) - 1)
    u = held_out.u[idx]
    run = jax.jit(lambda p, q0, qd0, u: rollout_rk4(tree, p, q0, qd0, u, h))
    q, _ = run(params, held_out.q_true[0], held_out.qd_true[0], jnp.asarray(u))
    q = np.asarray(q)
    out = {}
    for t in times:
        k_model = int(round(t / h))
        k_true = int(round(t / held_out.dt))
        out[t] = np.abs(q[k_model] - held_out.q_true[k_true])
    return out


# --- physical parameterizations of the Section 4 systems (uniform rods, known Rm) --------


@dataclass(frozen=True)
class PhysicalModel:
    """Named physical parameters θ and the map θ ↦ named model values (``rig.make_params``
    takes the latter). Every θ is a physical quantity the data determine."""

    names: tuple[str, ...]
    units: tuple[str, ...]
    to_values: Callable


def cartpole_rods() -> PhysicalModel:
    """Cartpole: cart mass, pole mass and length (a uniform rod hinged at one end) and the
    viscous damping of both joints (|·|); the motor (km, Rm, gearbox, pinion, rotor inertia)
    is known from its data sheet.

    Why the motor is not fitted: q̈ is unchanged when every inertia, every friction
    coefficient and the actuator's gain are multiplied by one factor (gravity scales with the
    masses), so a forward-dynamics loss cannot fix the absolute scale; one known force
    constant does. With km free, DiffNEA on dataset (a) lands on the whole model × 1.64
    (cart 1.02 kg, pole 209 g) with the same accelerations to 1e-9."""

    def to_values(theta):
        m_c, m_p, length, b_x, b_t = (theta[i] for i in range(5))
        rod = m_p * length**2 / 12
        return {
            "cart.mass": m_c,
            "pole.mass": m_p,
            "pole.com.z": length / 2,
            "pole.inertia.xx": rod,
            "pole.inertia.yy": rod,
            "x.damping": jnp.abs(b_x),
            "theta.damping": jnp.abs(b_t),
        }

    return PhysicalModel(
        ("m_cart", "m_pole", "L_pole", "b_x", "b_theta"),
        ("kg", "kg", "m", "N s/m", "N m s/rad"),
        to_values,
    )


def furuta_rods() -> PhysicalModel:
    """Furuta (Qube): arm mass Mr and length Lr (a rod centred on the motor axis; Lr also
    places the pendulum: a kinematic parameter), pendulum mass Mp and length Lp (a rod hung by
    one end) and the viscous damping Dr, Dp (|·|); the motor (km, Rm) is known, for the
    reason given in ``cartpole_rods``."""

    def to_values(theta):
        Mr, Lr, Mp, Lp, Dr, Dp = (theta[i] for i in range(6))
        arm = Mr * Lr**2 / 12
        rod = Mp * Lp**2 / 12
        return {
            "arm.inertia.yy": arm,
            "arm.inertia.zz": arm,
            "arm.mass": Mr,
            "pendulum.pos.x": Lr,
            "pendulum.mass": Mp,
            "pendulum.com.z": -Lp / 2,
            "pendulum.inertia.xx": rod,
            "pendulum.inertia.yy": rod,
            "theta.damping": jnp.abs(Dr),
            "alpha.damping": jnp.abs(Dp),
        }

    return PhysicalModel(
        ("Mr", "Lr", "Mp", "Lp", "Dr", "Dp"),
        ("kg", "m", "kg", "m", "N m s/rad", "N m s/rad"),
        to_values,
    )


# --- one experiment: identify on (a) or (b), roll out on held-out trajectories ------------


@dataclass(frozen=True)
class Section4Config:
    """One system of Section 4: sampling ranges for (a), excitation and noise for (b), the
    joint terms NEA regresses, the physical model DiffNEA fits, its truth and start."""

    q_span: tuple
    qd_span: tuple
    u_span: tuple
    amplitude: float  # peak of the multisine input (input unit)
    freqs_hz: tuple
    q0: tuple  # initial state of the trajectories
    state_noise: tuple  # std per joint (rad or m)
    action_noise: float  # std of the applied input's noise (input unit)
    joint_terms: tuple
    physical: PhysicalModel
    theta_true: tuple
    theta_start: tuple  # DiffNEA's start, and NEA's prior for what data cannot separate
    feedback: Callable | None = None
    n_uniform: int = 2000
    duration: float = 20.0  # s of training trajectory
    dt: float = 2e-3  # sample period of (b)
    h: float = 5e-4  # simulation step of the truth
    cutoff_hz: float = 15.0


@dataclass(frozen=True)
class Section4Result:
    base_names: tuple[str, ...]
    base_true: np.ndarray
    base_nea: np.ndarray
    base_share: np.ndarray  # each base parameter's share of the torque RMS (excitation)
    base_error: np.ndarray  # relative error, or torque-share error for zero-valued ones
    theta_diffnea: np.ndarray
    theta_error: np.ndarray  # relative error of each physical parameter
    rollout: dict  # model -> {t: |q_model − q_true| per joint}
    nea_rms: float


def run_section4(tree, params_true, make_named, config: Section4Config, dataset: str, seed: int):
    """Identify the system on dataset "a" or "b" with NEA (base parameters) and DiffNEA
    (physical parameters), then roll both out at 250 Hz on a held-out trajectory.

    ``make_named(values)`` maps named values to the model (``TreeRig.make_params``)."""
    from physid.estimation import newton_euler_id as nid

    rng = np.random.default_rng(seed)
    phys = config.physical
    make_params = lambda theta: make_named(phys.to_values(theta))  # noqa: E731
    params_start = make_params(jnp.asarray(config.theta_start, float))
    if dataset == "a":
        d = uniform_dataset(
            tree, params_true, rng, config.n_uniform, config.q_span, config.qd_span, config.u_span
        )
        q, qd, qdd, u = d.q, d.qd, d.qdd, d.u
    else:
        traj = trajectory(
            tree,
            params_true,
            rng,
            config.duration,
            config.dt,
            config.h,
            config.q0,
            config.amplitude,
            config.freqs_hz,
            config.feedback,
            config.state_noise,
            config.action_noise,
        )
        q, qd, qdd = nid.differentiate(traj.q_measured, config.dt, config.cutoff_hz)
        cut = nid.edge(9, config.cutoff_hz, config.dt)
        q, qd, qdd, u = q[cut:-cut], qd[cut:-cut], qdd[cut:-cut], traj.u[cut:-cut]
    # NEA knows the actuator (as the paper's NEA): the regression's target is the actuator's
    # generalized force from the recorded input and the (estimated) joint rate.
    act = jax.jit(jax.vmap(lambda a, b: actuators.actuator_forces(tree, params_true, a, b)))
    tau = np.asarray(act(jnp.asarray(qd), jnp.asarray(u)))
    data = nid.regression_data(tree, params_true, q, qd, qdd, tau, config.joint_terms)
    base = nid.base_parameters(data)
    prior = nid._prior_from(params_start, data)
    fit = nid.nea(tree, params_true, data, prior=prior)  # known kinematics and actuator
    truth = _true_theta(tree, params_true, data)
    b_true, b_nea = base.values(truth), base.values(fit.theta)
    contribution = np.linalg.norm(data.A[:, base.independent], axis=0) / np.linalg.norm(data.b)
    share = np.abs(b_true) * contribution
    error = np.where(
        np.abs(b_true) > 0,
        np.abs(b_nea - b_true) / np.where(b_true != 0, np.abs(b_true), 1.0),
        np.abs(b_nea - b_true) * contribution,
    )
    weights = 1.0 / np.maximum(np.std(qdd, axis=0), 1e-9)
    dn = nid.diffnea(tree, make_params, np.asarray(config.theta_start), q, qd, qdd, u, weights)
    theta_true = np.asarray(config.theta_true, float)
    theta_error = np.abs(np.abs(dn.theta) - theta_true) / np.abs(theta_true)
    # Held-out inputs change at the roll-out's 250 Hz, so that the roll-out replays them
    # exactly and the truth's own roll-out error is RK4's alone.
    held_out = trajectory(
        tree,
        params_true,
        np.random.default_rng(seed + 1000),
        5.5,
        1.0 / 250.0,
        config.h,
        config.q0,
        config.amplitude,
        config.freqs_hz,
        config.feedback,
    )
    rollout = {
        name: rollout_errors(tree, p, held_out)
        for name, p in (("truth", params_true), ("NEA", fit.params), ("DiffNEA", dn.params))
    }
    return Section4Result(
        base.describe(data.names),
        b_true,
        b_nea,
        share,
        error,
        dn.theta,
        theta_error,
        rollout,
        fit.rms_residual,
    )


def _true_theta(tree, params, data) -> np.ndarray:
    """θ of the true model in the regression's columns (φ, then joint terms)."""
    from physid.dynamics import newton_euler

    rest = []
    for name in data.names[data.n_inertial :]:
        joint, _, term = name.rpartition(".")
        rest.append(float(np.abs(getattr(params.dofs, term)[tree.dof_names.index(joint)])))
    return np.concatenate([np.asarray(newton_euler.inertial_vector(params)), rest])
