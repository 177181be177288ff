"""Tree rigs described without code: spec TOML trees, MJCF and URDF files, value names,
sensors and inputs, and the errors a user gets for input no body or tree can have."""

import json
import re
import textwrap
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest
from typer.testing import CliRunner

from physid.dynamics import actuators
from physid.rigs.cli import app
from physid.rigs.models.tree.mjcf import ModelFileError, read_model_file
from physid.rigs.models.tree.model import TreeError, build_model
from physid.rigs.models.tree.rig import load_tree_rig
from physid.spec import SpecError, load_spec, with_overrides

DATA = Path(__file__).parents[1] / "data" / "trees"


def write_spec(tmp_path: Path, body: str, name: str = "rig.toml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


PENDULUM = """
    [rig]
    model = "tree"
    [tree.bodies.link]
    parent = "world"
    mass = { value = 1.0, unit = "kg" }
    com = { value = [0, 0, -0.2], unit = "m" }
    inertia = { value = [0.01, 0.01, 0.001, 0, 0, 0], unit = "kg m^2" }
    joint = "hinge"
    [tree.joints.hinge]
    type = "hinge"
    axis = [0, 1, 0]
    [sensors.angle]
    kind = "encoder"
    joint = "hinge"
    """


def test_toml_qube_is_the_mjcf_furuta():
    # The shipped Qube spec (TOML, DC motor) and the MJCF Furuta of the dynamics tests (motor
    # gain km/Rm, back-EMF folded into the arm's damping) describe the same machine.
    toml = load_tree_rig(load_spec("qube"))
    mjcf = build_model(read_model_file(DATA / "furuta.xml"))
    for name in ("mass", "com", "inertia"):
        a = getattr(toml.params.bodies, name)
        b = getattr(mjcf.params.bodies, name)
        np.testing.assert_allclose(a, b, rtol=1e-7, atol=1e-12)
    np.testing.assert_allclose(toml.params.joints.translation, mjcf.params.joints.translation)
    rng = np.random.default_rng(0)
    for _ in range(5):
        q, qd, u = rng.normal(size=2), rng.normal(size=2), rng.normal(size=1) * 3
        forces = [
            actuators.generalized_forces(m.tree, m.params, jnp.asarray(q), jnp.asarray(qd), u)
            for m in (toml, mjcf)
        ]
        # Values written with 5-8 digits in both files: 1e-9 relative.
        np.testing.assert_allclose(forces[0], forces[1], rtol=1e-9, atol=1e-15)


def test_shipped_specs_name_their_sensors_inputs_and_values():
    cartpole = load_tree_rig(load_spec("cartpole"))
    assert cartpole.tree.dof_names == ("x", "theta")
    assert [e.unit for e in cartpole.encoders] == ["m", "rad"]
    assert cartpole.inputs[0].actuator == "motor" and cartpole.inputs[0].unit == "V"
    assert cartpole.model.units["x.damping"] == "N s/m"
    assert cartpole.model.units["motor.gear"] == "1/m"
    assert cartpole.model.value("motor.gear") == pytest.approx(584.25)
    pendulum = load_tree_rig(load_spec("pendulum_tree"))  # MJCF with spec overrides
    assert pendulum.model.source.name == "pendulum_tree.xml"
    assert pendulum.values["gravity"] == pytest.approx(9.82)
    np.testing.assert_allclose(pendulum.params.gravity, [0, 0, -9.82])
    assert pendulum.values["theta.damping"] == pytest.approx(1e-4)  # the parameter's start
    assert pendulum.model.value("theta.damping") == pytest.approx(2e-4)  # the file's value


def test_spec_values_override_the_file_by_name(tmp_path):
    xml = DATA / "double_pendulum.xml"
    spec_path = write_spec(
        tmp_path,
        f"""
        [rig]
        model = "tree"
        mjcf = "{xml}"
        [fixed]
        link2.mass = {{ value = 900, unit = "g" }}
        link2.com.z = {{ value = -0.25, unit = "m" }}
        hinge1.damping = {{ value = 0.02, unit = "N m s/rad" }}
        elbow.gear = 3.0
        gravity.z = {{ value = -9.8, unit = "m/s^2" }}
        [parameters]
        link1.inertia.xy = {{ initial = 0.0005, lower = -0.01, upper = 0.01, unit = "kg m^2" }}
        """,
    )
    rig = load_tree_rig(load_spec(spec_path))
    body = rig.tree.body_names.index("link2")
    assert float(rig.params.bodies.mass[body]) == pytest.approx(0.9)
    assert float(rig.params.bodies.com[body, 2]) == pytest.approx(-0.25)
    assert float(rig.params.dofs.damping[0]) == pytest.approx(0.02)
    assert float(rig.params.actuators.gear[0]) == pytest.approx(3.0)
    assert float(rig.params.gravity[2]) == pytest.approx(-9.8)
    inertia = np.asarray(rig.params.bodies.inertia[0])
    assert inertia[0, 1] == inertia[1, 0] == pytest.approx(0.0005)  # symmetric
    # --set reaches dotted names as well
    spec = with_overrides(load_spec(spec_path), {"link2.mass": "1.1 kg"})
    assert float(load_tree_rig(spec).params.bodies.mass[body]) == pytest.approx(1.1)
    # ... and values the spec leaves to its [tree] tables, with a unit (none is implied)
    spec = with_overrides(load_spec("cartpole"), {"pole.mass": "200 g"})
    rig = load_tree_rig(spec)
    assert float(rig.params.bodies.mass[rig.tree.body_names.index("pole")]) == pytest.approx(0.2)
    with pytest.raises(SpecError, match="does not set 'pole.mass', so no unit is implied"):
        with_overrides(load_spec("cartpole"), {"pole.mass": "0.2"})
    with pytest.raises(TreeError, match="no element named 'pol'"):
        load_tree_rig(with_overrides(load_spec("cartpole"), {"pol.mass": "0.2 kg"}))


def test_urdf_is_read_through_mujoco():
    model = build_model(read_model_file(DATA / "two_link.urdf"))
    assert model.tree.body_names == ("upper", "fore")  # the fixed base fuses into the world
    assert model.tree.dof_names == ("shoulder", "elbow")
    assert model.value("elbow.frictionloss") == pytest.approx(0.05)
    assert model.value("shoulder.damping") == pytest.approx(0.3)
    assert model.value("upper.inertia.xy") == pytest.approx(1e-4)
    assert model.value("fore.com.z") == pytest.approx(0.01)


BAD_SPECS = {
    "unknown element": (
        'link2.mass = { value = 1, unit = "kg" }',
        "[fixed]",
        ["no element named 'link2'", "bodies: link"],
    ),
    "unknown property": (
        'link.massa = { value = 1, unit = "kg" }',
        "[fixed]",
        ["body 'link' has no value 'massa'", "mass"],
    ),
    "non-positive mass": (
        'link.mass = { value = -1, unit = "kg" }',
        "[fixed]",
        ["body 'link' has mass -1", "positive"],
    ),
    "triangle inequality": (
        'link.inertia.zz = { value = 0.05, unit = "kg m^2" }',
        "[fixed]",
        ["triangle inequality", "link.inertia"],
    ),
    "negative moment": (
        'link.inertia.xy = { value = 0.02, unit = "kg m^2" }',
        "[fixed]",
        ["negative principal moment", "link.inertia"],
    ),
    "sensor on a missing joint": (
        'kind = "encoder"\njoint = "knee"',
        "[sensors.knee]",
        ["[sensors.knee]", "'knee' is not a joint", "hinge"],
    ),
    "input on a missing actuator": (
        'kind = "control"\nactuator = "motor"',
        "[sensors.u]",
        ["[sensors.u]", "'motor' is not an actuator"],
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_SPECS))
def test_bad_values_and_sensors_name_the_file_the_element_and_what_to_do(tmp_path, case):
    line, table, fragments = BAD_SPECS[case]
    path = write_spec(tmp_path, PENDULUM + f"\n{table}\n{line}\n")
    with pytest.raises(TreeError) as err:
        load_tree_rig(load_spec(path))
    message = str(err.value)
    assert str(path) in message
    for fragment in fragments:
        assert fragment in message, message


def test_structural_errors_name_the_element(tmp_path):
    cycle = PENDULUM.replace('parent = "world"', 'parent = "tip"') + textwrap.dedent(
        """
        [tree.bodies.tip]
        parent = "link"
        mass = { value = 0.1, unit = "kg" }
        inertia = { value = [1e-4, 1e-4, 1e-4, 0, 0, 0], unit = "kg m^2" }
        """
    )
    cases = {
        "cycle": (cycle, ["link -> tip -> link", "cycle", "parent"]),
        "zero axis": (
            PENDULUM.replace("axis = [0, 1, 0]", "axis = [0, 0, 0]"),
            ["'hinge'", "zero length"],
        ),
        "unknown parent": (PENDULUM.replace('"world"', '"base"'), ["parent 'base' is not a body"]),
        "typo key": (PENDULUM.replace("mass =", "mas ="), ["unknown key 'mas'"]),
        "bad unit": (
            PENDULUM.replace('unit = "kg" }', 'unit = "m" }'),
            ["tree.bodies.link.mass", "should be like 'kg'"],
        ),
    }
    for label, (text, fragments) in cases.items():
        path = write_spec(tmp_path, text, f"{label.replace(' ', '_')}.toml")
        with pytest.raises(TreeError) as err:
            load_tree_rig(load_spec(path))
        message = str(err.value)
        assert str(path) in message, label
        for fragment in fragments:
            assert fragment in message, (label, message)


def test_model_file_errors(tmp_path):
    missing = write_spec(tmp_path, '[rig]\nmodel = "tree"\nmjcf = "nope.xml"\n', "missing.toml")
    with pytest.raises(TreeError, match="no such file"):
        load_tree_rig(load_spec(missing))
    xml = tmp_path / "ball.xml"
    xml.write_text(
        '<mujoco><worldbody><body name="b"><joint name="j" type="ball"/>'
        '<inertial pos="0 0 0" mass="1" diaginertia="1 1 1"/></body></worldbody></mujoco>'
    )
    with pytest.raises(ModelFileError, match=r"ball.xml: joint 'j' is a ball joint"):
        read_model_file(xml)
    broken = tmp_path / "broken.xml"
    broken.write_text("<mujoco><worldbody><body></worldbody></mujoco>")
    with pytest.raises(ModelFileError, match=r"broken.xml: MuJoCo cannot compile it"):
        read_model_file(broken)


def test_simulate_writes_log_truth_and_plot_and_reads_a_control_file(tmp_path):
    control = tmp_path / "u.csv"
    t = np.arange(0, 0.5, 0.01)
    control.write_text("t,u\n" + "\n".join(f"{a},{0.05 * np.sin(10 * a)}" for a in t) + "\n")
    out = tmp_path / "sim"
    runner = CliRunner()
    args = ["simulate", "pendulum_tree", "--out", str(out), "--duration", "0.5"]
    result = runner.invoke(app, [*args, "--control", str(control), "--noise", "0"])
    assert result.exit_code == 0, result.output
    lines = (out / "log.csv").read_text().splitlines()
    assert lines[0] == "# units: s,1,rad,N m"
    assert lines[1] == "t,seq,theta,u"
    data = np.array([[float(x) for x in line.split(",")] for line in lines[2:]])
    assert data.shape == (501, 4)
    truth = json.loads((out / "truth.json").read_text())
    assert truth["parameters"]["theta.damping"] == pytest.approx(2e-4)  # [simulation.truth]
    assert truth["initial_positions"] == {"theta": 3.0}
    assert data[0, 2] == pytest.approx(3.0)
    held = np.minimum(np.floor(data[:, 0] / 0.01 + 1e-9).astype(int), len(t) - 1)
    np.testing.assert_allclose(data[:, 3], 0.05 * np.sin(10 * t[held]), atol=1e-12)
    assert (out / "plot.png").stat().st_size > 0
    # Released from 3 rad, the pendulum falls: after 0.5 s it is well below.
    assert data[-1, 2] < 2.5
    bad = tmp_path / "bad.csv"
    bad.write_text("t,torque\n0,1\n")
    result = runner.invoke(app, [*args, "--control", str(bad)])
    assert result.exit_code != 0
    assert "no column for input 'u'" in str(result.exception)


def test_identify_reads_a_tree_rigs_log(tmp_path):
    """physid identify takes a tree spec (issue 22's estimator): the sensors' joint and
    actuator keys are accepted, and a log too short for the step is refused by name."""
    log = tmp_path / "log.csv"
    log.write_text("t,x,theta,u\n0,0,0,0\n0.001,0,0,0\n")
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["identify", "cartpole", str(log), "--out", str(out)])
    message = result.output + str(result.exception)
    assert result.exit_code != 0
    assert "log.csv: 0.001 s of data is too short for h = 0.001 s" in message, message


def test_the_readmes_tree_rig_loads_as_written(tmp_path):
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    blocks = [b for b in re.findall(r"```toml\n(.*?)```", readme, re.S) if 'model = "tree"' in b]
    assert len(blocks) == 1
    rig = load_tree_rig(load_spec(write_spec(tmp_path, blocks[0], "my_double_pendulum.toml")))
    assert rig.tree.body_names == ("upper", "lower")
    assert [e.joint for e in rig.encoders] == ["shoulder", "elbow"]
    assert rig.inputs[0].actuator == "motor" and rig.inputs[0].unit == "N m"
    assert rig.model.value("lower.mass") == pytest.approx(0.2)  # 200 g
    spec = with_overrides(load_spec(tmp_path / "my_double_pendulum.toml"), {"lower.mass": "250 g"})
    assert float(load_tree_rig(spec).params.bodies.mass[1]) == pytest.approx(0.25)
