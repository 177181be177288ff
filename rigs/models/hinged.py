"""What the pendulum and Furuta rigs share: a model built from a spec, its observation
function (joint angles), initial states from angles, and ``physid simulate``."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import physid.dynamics  # noqa: F401  (float64)
from physid.dynamics.multibody import Params, System, hinge_angle
from physid.dynamics.spook import simulate as spook_simulate
from physid.errors import InputError
from physid.estimation.consistency import BodyInertia
from physid.estimation.estimate import write_json_atomic
from physid.estimation.figures import pyplot, save_figure
from physid.rigs.models.kinds import SimulateOptions
from physid.spec import RigSpec
from physid.streams import Stream, held_index


@dataclass(frozen=True)
class HingedRig:
    """A rig of bodies on hinges, built from a spec.

    ``make_params(values)`` maps named SI values (fixed values and parameters of the spec; any
    of them may be JAX tracers) to the dynamics ``Params``; ``state_from_angles(angles)`` gives
    the configuration with zero constraint violation and ``values`` the spec's SI values.
    ``channels`` are the encoder channels, one per hinge, in hinge order. ``bodies(values)``
    (None where the model's inertias are not a body's) gives each body's mass, centre of mass
    and inertia for the physical-consistency constraint (``estimation.consistency``).
    """

    system: System
    values: dict[str, float]
    make_params: Callable[[dict], Params]
    state_from_angles: Callable[[jnp.ndarray], tuple]
    channels: tuple[str, ...]
    parameter_units: dict[str, str]
    bodies: Callable[[dict], list[BodyInertia]] | None = None

    def observe(self, q) -> jnp.ndarray:
        """Joint angles (rad) of configuration q, one per hinge, in (−π, π]."""
        return jnp.stack([hinge_angle(q, h) for h in self.system.hinges])


def spec_values(spec: RigSpec, units: dict[str, str], nonnegative: set[str]) -> dict[str, float]:
    """SI values of every name in ``units`` from the spec, dimension-checked; masses and
    inertias must be positive, names in ``nonnegative`` non-negative."""
    values = {}
    for name, unit in units.items():
        positive = name.startswith(("m", "J", "l", "eps", "tau", "r")) and name not in nonnegative
        values[name] = spec.value(name, unit, positive=positive, nonnegative=name in nonnegative)
    spec.check_parameters(units)
    return values


def simulation_table(spec: RigSpec) -> dict:
    table = spec.sections.get("simulation")
    if not isinstance(table, dict):
        raise InputError(f"{spec.path}: [simulation] missing; it sets the scenario to simulate")
    return table


def truth_values(spec: RigSpec, rig_values: dict[str, float], table: dict) -> dict[str, float]:
    """The spec values with the [simulation] truth overrides applied (SI numbers)."""
    truth = dict(rig_values)
    for name, value in table.get("truth", {}).items():
        if name not in truth:
            raise InputError(f"{spec.path}: [simulation.truth] {name!r} is not a value of the rig")
        truth[name] = float(value)
    return truth


def read_control(path: Path | None, t: np.ndarray) -> np.ndarray:
    """Control voltage (V) at times t from a CSV with columns t,u (zero-order hold)."""
    if path is None:
        return np.zeros_like(t)
    try:
        data = np.genfromtxt(path, delimiter=",", names=True)
    except OSError as exc:
        raise InputError(f"{path}: cannot read control file: {exc}") from None
    if data.dtype.names is None or not {"t", "u"} <= set(data.dtype.names):
        raise InputError(f"{path}: control CSV needs a header with columns t,u")
    idx = held_index(np.asarray(data["t"]), t)
    return np.asarray(data["u"])[idx]


def run_simulation(rig: HingedRig, truth: dict, angles0, u: np.ndarray, h: float):
    """SPOOK rollout from rest at ``angles0``: q trajectory, v, joint angles [N+1, k] (rad)."""
    params = rig.make_params({k: jnp.asarray(v) for k, v in truth.items()})
    q0 = rig.state_from_angles(jnp.asarray(angles0, dtype=float))
    v0 = jnp.zeros((rig.system.n_bodies, 6))
    roll = jax.jit(lambda p, uu: spook_simulate(rig.system, p, q0, v0, uu, h))
    q, v = roll(params, jnp.asarray(u))
    angles = np.unwrap(np.asarray(jax.vmap(lambda r, e: rig.observe((r, e)))(*q)), axis=0)
    return q, v, angles


# ------------------------------------------------------------------ the rigid-joint simulation

# ``physid simulate``'s integrators: "tree", the tree estimator's own (rigid joints, dry
# friction at the static load), or "spook", Marklund et al.'s (compliant hinges, dry friction
# proportional to the hinge loads).
ENGINES = ("tree", "spook")
ENGINE_TEXT = {
    "tree": "rigid joints, the tree estimator's integrator",
    "spook": "SPOOK, compliant hinges",
}

# Values only SPOOK's compliant hinges read (compliance, damping time, the sticking's
# creep): a rigid-joint simulation has none, so they are not part of its truth.
SPOOK_ONLY = ("eps_", "tau")


def spook_only(name: str) -> bool:
    return name.startswith(SPOOK_ONLY)


def simulation_engine(spec: RigSpec, options: SimulateOptions, estimator: str) -> str:
    """The integrator of ``physid simulate``: ``--engine``, else ``[simulation] engine``,
    else the spec's estimator (``estimator``), so that one spec simulates and identifies
    with the same model unless it says otherwise."""
    if options.engine is not None:
        value, where = options.engine, "--engine"
    else:
        table = spec.sections.get("simulation")
        value = table.get("engine", estimator) if isinstance(table, dict) else estimator
        where = f"{spec.path}: [simulation] engine"
    if value not in ENGINES:
        raise InputError(f"{where} = {value!r}: expected one of {', '.join(ENGINES)}")
    return str(value)


def rollout_tree(rig, truth: dict, angles0, u: np.ndarray, h: float) -> np.ndarray:
    """The tree estimator's own integrator (``dynamics.variational_friction.rollout``:
    midpoint variational step, exact dry friction) on the rigid-joint ``rig``
    (``tree_rig.FitRig``) with the SI values ``truth``, from rest at ``angles0`` (rad, one per
    joint), the drive ``u`` (V, one per step, the same on every actuator) held over each step
    of ``h`` (s): the observed joint angles [N + 1, k] (rad)."""
    values = {k: jnp.asarray(float(v)) for k, v in truth.items()}
    u_in = u[:, None] * np.ones((1, len(rig.inputs)))
    run = _tree_rollout(rig.tree, rig.make_params, h)
    q = np.asarray(run(values, jnp.asarray(angles0, float), jnp.asarray(u_in)))
    return q[:, list(rig.observed)]


@functools.lru_cache(maxsize=4)
def _tree_rollout(tree, make_params, h: float):
    """Jitted (values, q0, u[N, n_act]) → q [N + 1, n] of the tree integrator from rest at
    ``h`` (one compilation per rig, step and length)."""
    from physid.dynamics import newton_euler
    from physid.dynamics import variational_friction as vf

    @jax.jit
    def run(values, q0, u):
        params = make_params(values)
        # The natural map's inertia c changes how the complementarity is solved, not its
        # solution: the diagonal of M at the start, as the estimator's.
        c = jnp.diag(newton_euler.crba(tree, params, q0))
        q, _ = vf.rollout(tree, params, q0, jnp.zeros(tree.n_dof), u, h, c)
        return q

    return run


# ------------------------------------------------------------------ physid simulate


def changed_fixed_values(spec: RigSpec, rig, truth: dict, console) -> list[str]:
    """The fixed values (not parameters) that ``[simulation.truth]`` changes, noted on the
    console: `physid identify` with this spec would hold them at the spec's values, a model
    error no std covers (the sample's manifest sets them: ``set``, docs/pipeline.md)."""
    changed = sorted(k for k, v in truth.items() if k not in spec.parameters and v != rig.values[k])
    if changed:
        listed = ", ".join(f"{k} = {truth[k]:g} {rig.parameter_units[k]}" for k in changed)
        console.print(
            # "\\[": a literal bracket for rich, which reads "[simulation.truth]" as a style.
            f"note: \\[simulation.truth] changes fixed values of {spec.name}: {listed}; "
            "identify the log with a spec that fixes them so (a copy of the spec, or a "
            "manifest's set)"
        )
    return changed


def simulate_to_folder(
    spec: RigSpec,
    rig,
    engine: str,
    angles0: list[float],
    options: SimulateOptions,
    console,
) -> dict[str, Path]:
    """Simulate the spec's scenario with ``engine`` ("tree": ``rig`` is the rigid-joint
    ``FitRig``; "spook": the compliant ``HingedRig``) and write log.csv, truth.json and
    plot.png to options.out. truth.json lists only the values the simulated model has."""
    from physid.rigs.encoders import write_log_csv

    table = simulation_table(spec)
    h = options.dt or spec.section_value("simulation", "h", "s")
    duration = options.duration or spec.section_value("simulation", "duration", "s")
    rate = spec.section_value("simulation", "rate", "Hz")
    noise = options.noise
    if noise is None:
        noise = spec.section_value("simulation", "noise", "rad")
    if h <= 0 or duration <= 0 or rate <= 0:
        raise InputError(f"{spec.path}: [simulation] h, duration and rate must be positive")
    truth = truth_values(spec, rig.values, table)
    n_steps = int(round(duration / h))
    t_fine = np.arange(n_steps) * h
    u = read_control(options.control, t_fine)
    if options.control is not None and engine == "tree" and not rig.inputs:
        console.print(
            f"[yellow]warning:[/yellow] {spec.name} has no actuator: the control file "
            f"{options.control} is logged as u but drives nothing"
        )
    console.print(f"simulating {spec.name} ({ENGINE_TEXT[engine]}): {n_steps} steps of {h:g} s ...")
    if engine == "tree":
        angles = rollout_tree(rig, truth, angles0, u, h)
        truth = {k: v for k, v in truth.items() if not spook_only(k)}
    else:
        _, _, angles = run_simulation(rig, truth, angles0, u, h)
    changed = changed_fixed_values(spec, rig, truth, console)
    if not np.all(np.isfinite(angles)):
        bad = int(np.argmax(~np.all(np.isfinite(angles), axis=1)))
        raise InputError(
            f"{spec.path}: the simulation diverged at t = {bad * h:.4g} s; reduce "
            "[simulation] h (or --dt)"
        )

    stride = max(1, int(round(1.0 / (rate * h))))
    t = np.arange(0, n_steps + 1, stride) * h
    sampled = angles[::stride]
    rng = np.random.default_rng(options.seed)
    measured = sampled + rng.normal(0.0, noise, sampled.shape) if noise > 0 else sampled
    u_out = np.concatenate([u, u[-1:]])[::stride]
    stream = Stream(
        t,
        np.column_stack([measured, u_out]),
        (*rig.channels, "u"),
        ("rad",) * len(rig.channels) + ("V",),
        np.zeros((len(t), len(rig.channels) + 1), dtype=bool),
        {"simulated": spec.name},
    )
    out = Path(options.out)
    out.mkdir(parents=True, exist_ok=True)
    written = {"encoder log": write_log_csv(out / "log.csv", stream)}
    truth_doc = {
        "rig": spec.name,
        "engine": engine,
        "simulator": ENGINE_TEXT[engine],
        "h": h,
        "duration": duration,
        "noise_rad": noise,
        "seed": options.seed,
        "initial_angles_rad": list(angles0),
        "parameters": truth,
        "fixed_values_changed": changed,
    }
    written["truth"] = write_json_atomic(out / "truth.json", truth_doc)
    written["plot"] = _plot(out / "plot.png", t, measured, u_out, rig.channels, spec.name)
    return written


def _plot(path: Path, t, angles, u, channels, title) -> Path:
    plt = pyplot()
    rows = len(channels) + (1 if np.any(u) else 0)
    fig, axes = plt.subplots(rows, 1, figsize=(8, 2.2 * rows), sharex=True, squeeze=False)
    for i, name in enumerate(channels):
        axes[i, 0].plot(t, angles[:, i], lw=0.8)
        axes[i, 0].set_ylabel(f"{name} (rad)")
    if rows > len(channels):
        axes[-1, 0].plot(t, u, lw=0.8, color="C1")
        axes[-1, 0].set_ylabel("u (V)")
    axes[-1, 0].set_xlabel("t (s)")
    return save_figure(fig, path, f"{title}: simulated encoder angles")
