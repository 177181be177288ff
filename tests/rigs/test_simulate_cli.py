"""`physid simulate` end to end through the real console script, and how it chooses its
integrator (``hinged.simulation_engine``)."""

import json
from itertools import pairwise

import numpy as np
import pytest
from scipy.special import ellipk

from physid.errors import InputError
from physid.rigs.cli import run
from physid.rigs.encoders import read_log
from physid.rigs.models.hinged import simulation_engine, spook_only
from physid.rigs.models.kinds import SimulateOptions
from physid.spec import load_spec, resolve_spec_path
from tests.conftest import run_physid

THETA0 = 0.1  # rad: a swing small enough to be smooth, large enough to time to 1e-9 s
G = 9.82  # m/s², the pendulum model's gravity (Section 4.2)


def pendulum_spec(tmp_path, simulation: str):
    """The built-in pendulum spec with its [simulation] table replaced (it is the last)."""
    text = resolve_spec_path("pendulum").read_text()
    path = tmp_path / "pendulum.toml"
    path.write_text(text[: text.index("[simulation]")] + "[simulation]\n" + simulation)
    return path


FRICTIONLESS = f"""\
h = {{ value = 1e-3, unit = "s" }}
duration = {{ value = 2.5, unit = "s" }}
rate = {{ value = 1000.0, unit = "Hz" }}
theta0 = {{ value = {THETA0}, unit = "rad" }}
noise = {{ value = 0.0, unit = "rad" }}
truth = {{ J = 0.0039, b = 0.0, mu = 0.0 }}
"""


def zero_crossings(t, theta):
    """Times where θ changes sign, linearly interpolated between samples."""
    k = np.nonzero(np.sign(theta[:-1]) != np.sign(theta[1:]))[0]
    return t[k] - theta[k] * (t[k + 1] - t[k]) / (theta[k + 1] - theta[k])


def analytic_period(p: dict) -> float:
    """The exact period (s) of the rigid pendulum at amplitude θ0: 4 √(I / m g l) K(k) with
    I = J + m l² about the hinge and k = sin(θ0 / 2) (scipy's ellipk takes m = k²)."""
    inertia = p["J"] + p["m"] * p["l"] ** 2
    return 4 * np.sqrt(inertia / (p["m"] * G * p["l"])) * ellipk(np.sin(THETA0 / 2) ** 2)


def test_simulate_pendulum_swings_with_the_analytic_period(tmp_path):
    """The default simulator (the tree's rigid joint) writes the log, the truth and the plot,
    and its frictionless small swings are a physical pendulum's: the period of
    I = J + m l² about the hinge, at amplitude θ0, and the amplitude kept swing after swing."""
    out = tmp_path / "pend"
    spec = pendulum_spec(tmp_path, FRICTIONLESS)
    done = run_physid("simulate", spec, "--out", out, "--seed", "3")
    assert done.returncode == 0, done.stderr
    log = read_log(out / "log.csv")
    assert log.channels == ("theta", "u")
    assert len(log) == 2501 and np.allclose(np.diff(log.t), 1e-3)
    truth = json.loads((out / "truth.json").read_text())
    assert truth["engine"] == "tree" and truth["parameters"]["J"] == 0.0039
    # Only what a rigid joint has: no hinge compliance, damping time or creep.
    names = set(truth["parameters"])
    assert {"m", "l", "J", "J_perp", "r", "b", "mu"} <= names
    assert not any(spook_only(k) for k in names), names
    assert (out / "plot.png").stat().st_size > 10_000

    t, theta = log.t, log.column("theta")
    assert theta[0] == THETA0
    period = analytic_period(truth["parameters"])
    crossings = zero_crossings(t, theta)
    assert len(crossings) >= 5
    measured = 2 * (crossings[-1] - crossings[0]) / (len(crossings) - 1)
    # 2e-5: the midpoint step lengthens the period by (ω h)² / 12 = 4.3e-6 at h = 1 ms
    # (ω = 7.2 rad/s), and a crossing interpolated linearly errs by < 1e-9 s (θ̈ = 0 where
    # θ = 0). It rejects g = 9.81 (5e-4), the inertia about the centre of mass instead of
    # the hinge (a factor 1.4).
    assert abs(measured / period - 1) < 2e-5, (measured, period)
    # Friction off, the energy stays: every half swing peaks at θ0. 1e-4: the variational
    # step's energy error is O((ω h)²) = 5e-5 and sampling a peak at 1 kHz loses at most
    # θ0 (ω h / 2)² / 2 = 6e-6 of it; the spec's b = 2e-4 would take 1.3 % per second.
    peaks = [np.abs(theta[(t > a) & (t < b)]).max() for a, b in pairwise(crossings)]
    assert np.allclose(peaks, THETA0, rtol=1e-4, atol=0), peaks


def _spec_with(tmp_path, method: str = "", engine: str | None = None):
    simulation = FRICTIONLESS + (f'engine = "{engine}"\n' if engine else "")
    path = pendulum_spec(tmp_path, simulation)
    if method:
        path.write_text(path.read_text().replace("[method]\n", f"[method]\n{method}\n"))
    return load_spec(path)


def test_the_engine_is_the_option_else_the_simulation_table_else_the_estimator(tmp_path):
    opts = SimulateOptions(tmp_path)
    default = _spec_with(tmp_path)
    assert simulation_engine(default, opts, "tree") == "tree"
    assert simulation_engine(default, opts, "spook") == "spook"  # the spec's estimator
    table = _spec_with(tmp_path, engine="spook")
    assert simulation_engine(table, opts, "tree") == "spook"
    cli = SimulateOptions(tmp_path, engine="tree")
    assert simulation_engine(table, cli, "spook") == "tree"


def test_a_pendulum_spec_with_the_spook_estimator_simulates_with_spook(tmp_path):
    from physid.rigs.models.identify_tree import estimator

    spec = _spec_with(tmp_path, method='estimator = "spook"')
    assert simulation_engine(spec, SimulateOptions(tmp_path), estimator(spec)) == "spook"


@pytest.mark.parametrize(
    ("engine", "option", "where"),
    [("rk4", None, "[simulation] engine = 'rk4'"), (None, "spoook", "--engine = 'spoook'")],
)
def test_an_unknown_engine_is_named_with_the_choices(tmp_path, engine, option, where):
    spec = _spec_with(tmp_path, engine=engine)
    with pytest.raises(InputError) as err:
        simulation_engine(spec, SimulateOptions(tmp_path, engine=option), "tree")
    assert where in str(err.value) and "tree, spook" in str(err.value)


def test_engine_on_a_rig_with_one_simulator_is_refused(tmp_path, capsys):
    status = run(["simulate", "ellipse_drop", "--out", str(tmp_path), "--engine", "spook"])
    err = capsys.readouterr().err
    assert status == 2 and "--engine" in err and "one simulator" in err
    assert not any(tmp_path.iterdir())


def test_simulate_reports_a_bad_override_without_traceback(tmp_path):
    run = run_physid("simulate", "furuta", "--out", str(tmp_path), "--set", "l9=1")
    assert run.returncode == 2
    assert "furuta.toml" in run.stderr and "l9" in run.stderr
    assert "Traceback" not in run.stderr


def test_simulate_help_names_the_engines(capsys):
    status = run(["simulate", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert status == 0
    for text in ("--engine", '"tree"', '"spook"', "[simulation] engine", "[method] estimator"):
        assert text in out, text
