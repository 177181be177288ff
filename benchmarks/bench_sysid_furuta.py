"""``physid identify`` end to end on a MuJoCo-simulated motor-driven Furuta capture, next to
MuJoCo's own ``mujoco.sysid`` on the same log with the same start values and bounds (issue
22's second benchmark).

Data: ``tests/data/mujoco/furuta.xml`` (rigid joints, joint damping on both, rotor armature,
gear 0.005 N m/V) simulated by MuJoCo (RK4, 1e-4 s) for 10 s from rest at α = 0.5 rad under a
recorded control voltage (a 3 V square wave at 1.13 Hz plus a slow sine, 1 mV steps held over
each 1 ms sample); the angles through 4096 counts/rev encoders, written as the board's raw
``.bin`` capture (protocol v1 frames, ``tests/pipeline/mujoco_capture.py``). Five unknowns:
both inertias about the joint axes, both dampings, the gear; starts and bounds are those of
``tests/data/mujoco/furuta.toml`` (the gear starts 2× off, the inertias 40 % and 20 % off,
the dampings 40 % and 100 % off).

- physid: the command line, ``physid identify furuta.toml capture.bin --out DIR`` in a fresh
  process (wall time: Python start, imports, tracing and compiling the JAX programs,
  reading the capture, the tree estimator, prediction checks, estimate.json and the HTML
  report), twice: a **first run** on an empty persistent compilation cache (a new
  ``$PHYSID_JAX_CACHE`` folder, or ``--cache``) and a **warm run** that finds the first
  run's compiled programs there (what every later run on this machine costs); then
  ``physid.identify`` in this process, a first call and ``--repeats`` more (the compiled
  model reused);
- mujoco.sysid: the same capture read by ``physid.read_log`` (the angles), the residual of
  simulated vs measured joint positions (``MjStateQPos``) over the log, MuJoCo's own
  ``least_squares`` with finite differences, the measured first angles and zero velocity as
  the initial state, the control as recorded (held over each sample, given at the model's
  1e-4 s), ``x_scale`` = the start values; fitted on growing windows (1 s, 3 s, 10 s) each
  from the previous window's answer (the issue's hand-tuned setup fitted growing windows to
  escape a wrong local minimum); ``--windows 10`` fits the whole log from the starts. Its
  std: ``calculate_intervals``'s covariance (the residuals' variance times (JᵀJ)⁻¹).

Wall and CPU time (the child's for the command line, this process's otherwise) with the
load average; medians where repeated. Prints both errors and std per parameter and both
times; the last line reads ``furuta-sysid: physid <s> s, mujoco.sysid <s> s, ratio <r>``,
physid's time being the warm run of the command line (end to end, a fresh process); the
lines before it give the first run's and the in-process calls' ratios, by wall and by CPU.

    .venv/bin/python benchmarks/bench_sysid_furuta.py [--repeats 5] [--peer-repeats N]
        [--cli-repeats 1] [--cache DIR] [--windows 1,3,10] [--whole]
"""

from __future__ import annotations

import argparse
import logging
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import mujoco
import numpy as np
from mujoco import sysid

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "pipeline"))
from mujoco_capture import furuta_drive, simulate, write_capture  # noqa: E402

import physid  # noqa: E402

XML = ROOT / "tests" / "data" / "mujoco" / "furuta.xml"
SPEC = ROOT / "tests" / "data" / "mujoco" / "furuta.toml"
PHYSID = [sys.executable, "-c", "from physid.rigs.cli import main; main()"]


def truth(model: mujoco.MjModel) -> dict[str, float]:
    return {
        "arm.inertia.zz": float(model.body_inertia[1][2]),
        "pendulum.inertia.xx": float(model.body_inertia[2][0]),
        "theta.damping": float(model.dof_damping[0]),
        "alpha.damping": float(model.dof_damping[1]),
        "motor.gear": float(model.actuator_gear[0][0]),
    }


# How each parameter of the spec is set on MuJoCo's model (MjSpec), for mujoco.sysid.
SETTERS = {
    "arm.inertia.zz": lambda s, v: s.body("arm").inertia.__setitem__(2, v),
    "pendulum.inertia.xx": lambda s, v: s.body("pendulum").inertia.__setitem__(0, v),
    "theta.damping": lambda s, v: s.joint("theta").damping.__setitem__(0, v),
    "alpha.damping": lambda s, v: s.joint("alpha").damping.__setitem__(0, v),
    "motor.gear": lambda s, v: s.actuator("motor").gear.__setitem__(0, v),
}


# MuJoCo refuses to compile a body whose principal inertias break the triangle inequality
# (A + B ≥ C), which physid enforces too (physical consistency), so each fitted diagonal
# entry lies between the difference and the sum of the other two, fixed ones.
TRIANGLE = {"arm.inertia.zz": ("arm", 2), "pendulum.inertia.xx": ("pendulum", 0)}


def starts_and_bounds(model: mujoco.MjModel) -> dict[str, tuple[float, float, float]]:
    """(start, lower, upper) in SI of each parameter, from the physid spec: the same for
    both, the inertias' bounds narrowed to the triangle inequality."""
    spec = physid.load_spec(SPEC)
    out = {}
    for name in SETTERS:
        p = spec.parameters[name]
        lower, upper = p.lower, p.upper
        if name in TRIANGLE:
            body, axis = TRIANGLE[name]
            a, b = np.delete(model.body_inertia[model.body(body).id], axis)
            lower = max(lower, (1 + 1e-9) * abs(a - b))  # 1e-9: rounding
            upper = min(upper, (1 - 1e-9) * (a + b))
        out[name] = (p.initial, lower, upper)
    return out


def run_sysid(capture: Path, windows: list[float]) -> tuple[dict, dict, float, float]:
    """mujoco.sysid on the capture: (values, std, wall s, process CPU s)."""
    t0, c0 = time.perf_counter(), time.process_time()
    log = physid.read_log(capture, physid.load_spec(SPEC))
    t = log.t - log.t[0]
    q = log.values[:, :2]
    u = log.values[:, 2]
    spec = mujoco.MjSpec.from_file(str(XML))
    model = spec.compile()
    dt = model.opt.timestep
    sub = int(round((t[1] - t[0]) / dt))
    fine_t = np.arange((len(t) - 1) * sub + 1) * dt
    fine_u = np.append(np.repeat(u[:-1], sub), u[-1])[:, None]  # held over each sample
    start = starts_and_bounds(model)
    params = sysid.ParameterDict()
    for name, (x0, lo, hi) in start.items():
        setter = SETTERS[name]
        params.add(
            sysid.Parameter(
                name, x0, lo, hi, modifier=lambda s, p, f=setter: f(s, float(p.value[0]))
            )
        )
    scale = np.array([x0 for x0, _, _ in start.values()])
    state0 = sysid.create_initial_state(model, q[0], np.zeros(model.nv))
    qpos = sysid.SignalType.MjStateQPos
    result = None
    for window in windows:
        n = int(round(window / (t[1] - t[0]))) + 1
        m = (n - 1) * sub + 1
        measured = sysid.TimeSeries.from_names(
            t[:n], q[:n], model, [("theta", qpos), ("alpha", qpos)]
        )
        control = sysid.TimeSeries(fine_t[:m], fine_u[:m])
        seq = sysid.ModelSequences(
            "furuta", spec, "capture", state0, control, measured, allow_missing_sensors=True
        )
        residual_fn = sysid.build_residual_fn(models_sequences=[seq])
        params, result = sysid.optimize(
            params, residual_fn, optimizer="mujoco", verbose=False, x_scale=scale, max_iters=100
        )
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    residuals, _, _ = residual_fn(params.as_vector(), params)
    cov, _ = sysid.calculate_intervals(residuals, result.jac)
    values = {name: float(params[name].value[0]) for name in start}
    std = dict(zip(start, np.sqrt(np.diag(cov)).tolist(), strict=True))
    return values, std, seconds, cpu


def run_cli(capture: Path, out: Path) -> tuple[dict, dict, float, float]:
    """``physid identify`` in a fresh process: (values, std, wall s, the child's CPU s)."""
    import json

    t0, c0 = time.perf_counter(), _children_cpu()
    proc = subprocess.run(
        [*PHYSID, "identify", str(SPEC), str(capture), "--out", str(out), "--force"],
        capture_output=True,
        text=True,
    )
    seconds, cpu = time.perf_counter() - t0, _children_cpu() - c0
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-3000:])
    estimate = json.loads((out / "estimate.json").read_text())
    values = {k: p["value"] for k, p in estimate["parameters"].items()}
    std = {k: p["std"] for k, p in estimate["parameters"].items()}
    return values, std, seconds, cpu


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _load() -> str:
    """The 1-minute load average (other processes on this machine)."""
    return f"{os.getloadavg()[0]:.1f}"


def run_api(capture: Path) -> tuple[dict, dict, float, float, object]:
    """``physid.identify`` in this process: (values, std, wall s, process CPU s, Estimate)."""
    t0, c0 = time.perf_counter(), time.process_time()
    est = physid.identify(SPEC, capture)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    values = {k: p.value for k, p in est.parameters.items()}
    std = {k: p.std for k, p in est.parameters.items()}
    return values, std, seconds, cpu, est


def table(label: str, values: dict, std: dict, true: dict) -> float:
    print(f"{label}:")
    worst = 0.0
    for name, v in true.items():
        rel = (values[name] - v) / v
        worst = max(worst, abs(rel))
        z = (values[name] - v) / std[name] if std[name] > 0 else float("inf")
        print(
            f"  {name:22s} {values[name]:.6g} (truth {v:.6g}) {rel:+.3%}  "
            f"std {std[name]:.3g}  z {z:+.2f}"
        )
    return worst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="in-process physid.identify")
    parser.add_argument(
        "--peer-repeats", type=int, default=0, help="mujoco.sysid runs (default: --repeats)"
    )
    parser.add_argument(
        "--cli-repeats", type=int, default=1, help="warm fresh-process physid identify runs"
    )
    parser.add_argument(
        "--cache", type=Path, help="persistent compilation cache (default: a new, empty one)"
    )
    parser.add_argument("--windows", default="1,3,10", help="mujoco.sysid's growing windows (s)")
    parser.add_argument(
        "--whole", action="store_true", help="also mujoco.sysid on the whole log, no windows"
    )
    args = parser.parse_args()
    windows = [float(w) for w in args.windows.split(",")]
    logging.getLogger("absl").setLevel(logging.ERROR)

    run = simulate(XML, furuta_drive, 10.0, qpos0=[0.0, 0.5])
    true = truth(run.model)
    with tempfile.TemporaryDirectory(prefix="bench-sysid-") as tmp:
        cache = args.cache or Path(tmp) / "jax-cache"
        os.environ["PHYSID_JAX_CACHE"] = str(cache)  # this process's and the children's
        capture = write_capture(run, Path(tmp) / "furuta.bin")
        print(f"capture: {capture.stat().st_size} bytes, {len(run.t)} frames at 1 kHz")
        print(f"compilation cache: {cache} ({_entries(cache)} entries)", flush=True)

        # physid first: the command line on the (empty) cache, then warm; then in this
        # process; then the peer (the longest). Each result when measured.
        cold = run_cli(capture, Path(tmp) / "cold")
        print(f"physid identify, first run: {_runs([cold])}; load {_load()}", flush=True)
        worst_physid = table("physid identify", cold[0], cold[1], true)
        cli = [run_cli(capture, Path(tmp) / f"cli{i}") for i in range(args.cli_repeats)]
        t_cli, c_cli = _medians(cli)
        print(f"physid identify, warm run(s): {_runs(cli)}; load {_load()}", flush=True)
        first = run_api(capture)
        api = [run_api(capture) for _ in range(args.repeats)]
        t_api, c_api = _medians(api) if api else (first[2], first[3])
        print(
            f"physid.identify in this process: first call {first[2]:.2f} s wall / "
            f"{first[3]:.2f} s CPU, then {_runs(api)}; {first[4].iterations} iterations, "
            f"verdict {first[4].validation['verdict']!r}, status "
            f"{first[4].status['result']!r}; load {_load()}",
            flush=True,
        )
        same = all(np.isclose(first[0][k], cold[0][k], rtol=1e-12, atol=0) for k in true)
        print(f"in-process values equal the command line's (1e-12): {same}")
        peer = [run_sysid(capture, windows) for _ in range(args.peer_repeats or args.repeats)]
        t_peer, c_peer = _medians(peer)
        print(f"mujoco.sysid (windows {windows} s): {_runs(peer)}; load {_load()}", flush=True)
        worst_peer = table("mujoco.sysid", peer[0][0], peer[0][1], true)
        if args.whole:
            whole = run_sysid(capture, [windows[-1]])
            print(f"mujoco.sysid on the whole log from the starts: {_runs([whole])}")
            table("mujoco.sysid, whole log", whole[0], whole[1], true)
        print(f"largest error: physid {worst_physid:.3%}, mujoco.sysid {worst_peer:.3%}")
        for label, wall, cpu in (
            ("physid identify, first run (empty cache)", cold[2], cold[3]),
            ("physid identify, warm run", t_cli, c_cli),
            ("physid.identify in process (compiled)", t_api, c_api),
        ):
            print(
                f"{label}: {wall:.2f} s wall / {cpu:.2f} s CPU; mujoco.sysid {t_peer:.2f} s "
                f"wall / {c_peer:.2f} s CPU: ratio {t_peer / wall:.2f} wall, "
                f"{c_peer / cpu:.2f} CPU"
            )
        print(
            f"furuta-sysid: physid {t_cli:.2f} s, mujoco.sysid {t_peer:.2f} s, "
            f"ratio {t_peer / t_cli:.2f}"
        )


def _entries(folder: Path) -> int:
    return len(list(folder.iterdir())) if folder.is_dir() else 0


def _medians(runs) -> tuple[float, float]:
    """Medians of the wall and the CPU seconds of ``runs`` (tuples (…, wall, CPU, …))."""
    return statistics.median(r[2] for r in runs), statistics.median(r[3] for r in runs)


def _runs(runs) -> str:
    return ", ".join(f"{r[2]:.2f} s wall / {r[3]:.2f} s CPU" for r in runs)


if __name__ == "__main__":
    main()
