"""``physid simulate`` for tree rigs (``[rig] model = "tree"``): RK4 from the spec's
``[simulation]`` state, driven by ``--control FILE``, written as an encoder-style log, the
true values and a plot.

    [simulation]
    h = { value = 1e-3, unit = "s" }          # RK4 step
    duration = { value = 5.0, unit = "s" }
    rate = { value = 500.0, unit = "Hz" }     # rows of log.csv
    [simulation.positions]                    # initial q by joint (rad or m); default 0
    alpha = { value = 1.0, unit = "rad" }
    [simulation.velocities]                   # initial q̇ by joint (rad/s or m/s); default 0
    [simulation.truth]                        # values that differ from the spec's, by name
    theta.damping = 2e-4                      # SI, or { value = ..., unit = "..." }

The control file is a CSV with a header: ``t`` (s) and one column per control input named as
in ``[sensors]`` (a single input may also be ``u``), held constant between rows. Without
``--control`` every input is zero.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import physid.dynamics  # noqa: F401  (float64)
from physid.dynamics.integrators import rollout_rk4
from physid.dynamics.tree import REVOLUTE
from physid.errors import InputError
from physid.estimation.estimate import write_json_atomic
from physid.estimation.figures import pyplot, save_figure
from physid.files import atomic_open
from physid.rigs.models.kinds import SimulateOptions
from physid.rigs.models.tree.rig import TreeRig, load_tree_rig, unknown_name_message
from physid.spec import RigSpec, _dotted, _quantity
from physid.streams import held_index

CHUNK = 20_000  # steps per compiled call: progress between chunks, one compile per run
UNROLL_BODIES = 4  # trees up to this size run unrolled: faster steps, bearable compile


def simulate(spec: RigSpec, options: SimulateOptions, console) -> dict[str, Path]:
    """Simulate the spec's scenario; write log.csv, truth.json and plot.png to options.out."""
    rig = load_tree_rig(spec)
    table = spec.sections.get("simulation")
    if not isinstance(table, dict):
        raise InputError(f"{spec.path}: [simulation] missing; it sets the scenario to simulate")
    h = options.dt or spec.section_value("simulation", "h", "s")
    duration = options.duration or spec.section_value("simulation", "duration", "s")
    rate = spec.section_value("simulation", "rate", "Hz")
    if not (h > 0 and duration > 0 and rate > 0):
        raise InputError(f"{spec.path}: [simulation] h, duration and rate must be positive")
    truth = truth_values(rig, table)
    q0, qd0 = initial_state(rig, table)
    n_steps = int(round(duration / h))
    t_fine = np.arange(n_steps) * h
    u = read_controls(options.control, rig, t_fine)
    console.print(f"simulating {spec.name}: {n_steps} RK4 steps of {h:g} s ...")
    truth_params = rig.make_params(truth)
    q, _ = rollout(rig, truth_params, q0, qd0, u, h, console)

    stride = max(1, int(round(1.0 / (rate * h))))
    rows = np.arange(0, n_steps + 1, stride)
    t = rows * h
    rng = np.random.default_rng(options.seed)
    readings, noises = [], {}
    for enc in rig.encoders:
        noise = enc.noise if options.noise is None else options.noise
        noises[enc.name] = noise
        value = enc.sign * q[rows, enc.dof] + enc.offset
        readings.append(value + (rng.normal(0.0, noise, len(rows)) if noise > 0 else 0.0))
    u_rows = np.concatenate([u, u[-1:]])[rows] if len(u) else np.zeros((len(rows), 0))
    out = Path(options.out)
    out.mkdir(parents=True, exist_ok=True)
    written = {
        "encoder log": write_tree_log(out / "log.csv", rig, t, np.column_stack(readings), u_rows)
    }
    truth_doc = {
        "rig": spec.name,
        "spec": str(spec.path),
        "model": str(rig.model.source),
        "h": h,
        "duration": duration,
        "integrator": "rk4",
        "seed": options.seed,
        "noise": noises,
        "initial_positions": dict(zip(rig.tree.dof_names, map(float, q0), strict=True)),
        "initial_velocities": dict(zip(rig.tree.dof_names, map(float, qd0), strict=True)),
        "set_by_spec": truth,  # the values the spec and [simulation.truth] set
        "parameters": rig.model.values_of(truth_params),  # every value of the model
    }
    written["truth"] = write_json_atomic(out / "truth.json", truth_doc)
    written["plot"] = _plot(out / "plot.png", rig, t, readings, u_rows, spec.name)
    return written


def truth_values(rig: TreeRig, table: dict) -> dict[str, float]:
    """The spec's values with ``[simulation.truth]`` applied (SI numbers, by name)."""
    spec = rig.spec
    truth = dict(rig.values)
    for name, entry in _dotted(table.get("truth", {}), "value").items():
        if name not in rig.model.names:
            message = unknown_name_message(rig.model, name)
            raise InputError(f"{spec.path}: [simulation.truth] {name}: {message}")
        unit = rig.model.units[name]
        if isinstance(entry, dict):
            truth[name] = _quantity(spec, f"simulation.truth.{name}", entry, unit)
        elif isinstance(entry, int | float) and not isinstance(entry, bool):
            truth[name] = float(entry)  # SI
        else:
            raise InputError(f"{spec.path}: [simulation.truth] {name}: expected an SI number")
    return truth


def initial_state(rig: TreeRig, table: dict) -> tuple[np.ndarray, np.ndarray]:
    """q0, q̇0 from ``[simulation.positions]`` / ``[simulation.velocities]`` (0 where absent)."""
    spec, tree = rig.spec, rig.tree
    state = []
    for key, rate in (("positions", ""), ("velocities", "/s")):
        x = np.zeros(tree.n_dof)
        for joint, entry in table.get(key, {}).items():
            if joint not in tree.dof_names:
                raise InputError(
                    f"{spec.path}: [simulation.{key}] {joint!r} is not a joint; joints: "
                    f"{', '.join(tree.dof_names)}"
                )
            k = tree.dof_names.index(joint)
            unit = ("rad" if tree.joint_types[tree.dof_bodies[k]] == REVOLUTE else "m") + rate
            x[k] = _quantity(spec, f"simulation.{key}.{joint}", entry, unit)
        state.append(x)
    return state[0], state[1]


def read_controls(path: Path | None, rig: TreeRig, t: np.ndarray) -> np.ndarray:
    """Inputs [len(t), n_actuators] at times t from a control CSV (zero-order hold)."""
    u = np.zeros((len(t), rig.tree.n_actuators))
    if path is None:
        return u
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise InputError(f"{path}: cannot read control file: {exc.strerror}") from None
    body = [(i, line) for i, line in enumerate(lines, 1) if line.strip() and line[0] != "#"]
    if not body:
        raise InputError(f"{path}: empty control file; expected a header t,<inputs...>")
    header_line, header = body[0][0], [h.strip() for h in body[0][1].split(",")]
    names = [c.name for c in rig.inputs]
    if "t" not in header:
        raise InputError(f"{path}: line {header_line}: no 't' column in {','.join(header)}")
    columns = {}
    for c in rig.inputs:
        if c.name in header:
            columns[c.index] = header.index(c.name)
        elif len(rig.inputs) == 1 and "u" in header:
            columns[c.index] = header.index("u")
        else:
            raise InputError(
                f"{path}: line {header_line}: no column for input {c.name!r} (inputs of "
                f"{rig.spec.path.name}: {', '.join(names) or 'none'})"
            )
    rows = []
    for lineno, line in body[1:]:
        fields = line.split(",")
        try:
            rows.append([float(f) for f in fields])
        except ValueError:
            raise InputError(f"{path}: line {lineno}: not a row of numbers: {line!r}") from None
        if len(fields) != len(header):
            raise InputError(
                f"{path}: line {lineno}: {len(fields)} fields, header has {len(header)}"
            )
    if not rows:
        raise InputError(f"{path}: no data rows after the header")
    data = np.array(rows)
    times = data[:, header.index("t")]
    if np.any(np.diff(times) < 0) or not np.all(np.isfinite(data)):
        raise InputError(f"{path}: times must increase and every value must be finite")
    idx = held_index(times, t)
    for a, col in columns.items():
        u[:, a] = data[idx, col]
    return u


def rollout(rig: TreeRig, params, q0, qd0, u, h, console):
    """RK4 over all steps in chunks (progress between them): q, q̇ [N + 1, n] as NumPy."""
    tree = rig.tree
    if tree.n_bodies <= UNROLL_BODIES:
        tree = dataclasses.replace(tree, unroll=True)
    n = len(u)
    chunk = min(CHUNK, max(n, 1))
    run = jax.jit(lambda p, q, qd, uu: rollout_rk4(tree, p, q, qd, uu, h))
    qs, qds = [np.asarray(q0)[None]], [np.asarray(qd0)[None]]
    q, qd = jnp.asarray(q0, float), jnp.asarray(qd0, float)
    for start in range(0, n, chunk):
        part = u[start : start + chunk]
        padded = np.concatenate([part, np.zeros((chunk - len(part), u.shape[1]))])
        Q, QD = run(params, q, qd, jnp.asarray(padded))
        Q, QD = np.asarray(Q)[1 : len(part) + 1], np.asarray(QD)[1 : len(part) + 1]
        qs.append(Q)
        qds.append(QD)
        q, qd = jnp.asarray(Q[-1]), jnp.asarray(QD[-1])
        if n > chunk:
            console.print(f"  {min(start + chunk, n) / n:4.0%} of {n} steps")
    q, qd = np.concatenate(qs), np.concatenate(qds)
    if not np.all(np.isfinite(q)):
        bad = int(np.argmax(~np.all(np.isfinite(q), axis=1)))
        raise InputError(
            f"{rig.spec.path}: the simulation diverged at t = {bad * h:.4g} s; reduce "
            "[simulation] h (or --dt)"
        )
    return q, qd


def write_tree_log(path: Path, rig: TreeRig, t, readings, u) -> Path:
    """A CSV log ``t,seq,<encoders...>,<inputs...>`` (a ``# units:`` line first), atomically.

    With hinge encoders and one input named ``u`` in V it is also a valid encoder log for
    ``rigs.encoders.read_log_csv`` (which skips the comment line)."""
    names = [e.name for e in rig.encoders] + [c.name for c in rig.inputs]
    units = [e.unit for e in rig.encoders] + [c.unit for c in rig.inputs]
    lines = [
        "# units: s,1," + ",".join(units),
        ",".join(["t", "seq", *names]),
    ]
    data = np.column_stack([t, np.asarray(readings).reshape(len(t), -1), u])
    for k, row in enumerate(data):
        fields = [repr(float(row[0])), str(k), *(_number(x) for x in row[1:])]
        lines.append(",".join(fields))
    with atomic_open(path, encoding="ascii", newline="") as fh:
        fh.write("\n".join(lines) + "\n")
    return path


def _number(x: float) -> str:
    return repr(float(x)) if math.isfinite(x) else ""


def _plot(path: Path, rig: TreeRig, t, readings, u, title) -> Path:
    plt = pyplot()
    rows = len(rig.encoders) + len(rig.inputs)
    fig, axes = plt.subplots(rows, 1, figsize=(8, 2.0 * rows), sharex=True, squeeze=False)
    for i, enc in enumerate(rig.encoders):
        axes[i, 0].plot(t, readings[i], lw=0.8)
        axes[i, 0].set_ylabel(f"{enc.name} ({enc.unit})")
    for j, c in enumerate(rig.inputs):
        ax = axes[len(rig.encoders) + j, 0]
        ax.plot(t, u[:, c.index], lw=0.8, color="C1")
        ax.set_ylabel(f"{c.name} ({c.unit})")
    axes[-1, 0].set_xlabel("t (s)")
    return save_figure(fig, path, f"{title}: simulated encoders and inputs")
