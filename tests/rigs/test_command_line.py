"""The ``physid`` command line: a typo or a bad file gets one line that says what to do, and a
non-zero exit; ``--version``; ``identify --help`` documents the [method] keys.

Most cases run in this process through ``rigs.cli.run`` (the console script's body, without
its ``sys.exit``); two go through the real entry point in a subprocess.
"""

from pathlib import Path

import pytest

from physid.rigs.cli import run
from physid.spec import load_spec
from tests.conftest import run_physid

ROOT = Path(__file__).resolve().parents[2]


def physid(capsys, *args) -> tuple[int, str]:
    """Exit status and stderr of ``physid ARGS...``."""
    status = run([str(a) for a in args])
    return status, capsys.readouterr().err


def one_line_error(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    return lines[0]


def test_version_and_a_typo_through_the_console_script(tmp_path):
    done = run_physid("--version", timeout=120)
    assert done.returncode == 0 and done.stdout.startswith("physid ")
    done = run_physid("simulate", "pendulm", "--out", tmp_path, timeout=120)
    assert done.returncode == 2
    assert one_line_error(done.stderr) == (
        "error: no rig 'pendulm' (did you mean 'pendulum'?); built-in rigs: cartpole, "
        "ellipse_drop, furuta, hexagon_loop, pendulum, pendulum_tree, qube; or give the path of "
        "a spec file (.toml)"
    )


def test_misspelled_command(capsys):
    status, err = physid(capsys, "identfy", "pendulum")
    assert status == 2 and "no command 'identfy' (did you mean 'identify'?)" in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["render", "x.avi", "--kind", "checkerbord"], "'checkerbord' is not one of"),
        (["render", "x.avi", "--model", "pinhol"], "'pinhol' is not one of"),
        (["calibrate", "c.avi", "--board", "9x6", "--square", "2cm", "--out", "c.json",
          "--model", "fish-eye"], "'fish-eye' is not one of"),
    ],
)  # fmt: skip
def test_choices_are_enums(capsys, tmp_path, args, message):
    status, err = physid(capsys, *args)
    assert status == 2 and message in err
    assert not (tmp_path / "x.avi").exists()


def test_square_without_a_unit_that_cannot_be_metres(capsys):
    args = ["calibrate", "c.avi", "--board", "9x6", "--out", "c.json", "--square"]
    status, err = physid(capsys, *args, "20")
    assert status == 2
    assert one_line_error(err) == (
        "error: --square 20: 20 m is not a plausible size; give the unit, e.g. --square 20mm"
    )
    status, err = physid(capsys, *args, "20 kg")
    assert status == 2 and "'kg' is not a length" in one_line_error(err)


def test_identify_on_a_video_and_on_a_binary_csv(capsys, tmp_path):
    status, err = physid(
        capsys, "identify", "pendulum", ROOT / "videos" / "drop.avi", "--out", tmp_path / "o"
    )
    assert status == 2
    assert "drop.avi: a video; identify takes encoder logs (.csv, .bin)" in one_line_error(err)
    fake = tmp_path / "log.csv"
    fake.write_bytes((ROOT / "videos" / "pendulum.bin").read_bytes()[:4096])
    status, err = physid(capsys, "identify", "pendulum", fake, "--out", tmp_path / "o")
    assert status == 2 and "log.csv: byte " in one_line_error(err) and "not a text file" in err
    poses = tmp_path / "poses.csv"
    poses.write_text("t,x,y,theta\n0,0,0,0\n")
    status, err = physid(capsys, "identify", "pendulum", poses, "--out", tmp_path / "o")
    assert status == 2 and "the pendulum rig is identified from encoder logs" in err


def test_spec_typos(capsys, tmp_path):
    text = load_spec("pendulum").path.read_text()
    log = tmp_path / "log.csv"
    log.write_text("t,theta\n0,0\n0.001,0\n")
    cases = {
        "[paramters]": (
            text.replace("[parameters]", "[paramters]"),
            "[paramters] is not a table physid reads (did you mean 'parameters'?)",
        ),
        "kapa": (
            text.replace("[method]\n", "[method]\nkapa = 1000.0\n"),
            "[method.kapa] unknown setting (did you mean 'kappa'?)",
        ),
        "sensor column": (
            text.replace('kind = "encoder"\n', 'kind = "encoder"\ncolumn = { nmae = "a" }\n'),
            "[sensors.theta.column.nmae] unknown key (did you mean 'name'?)",
        ),
    }
    for name, (spec_text, message) in cases.items():
        spec = tmp_path / f"{name.strip('[]').replace(' ', '_')}.toml"
        spec.write_text(spec_text)
        status, err = physid(capsys, "identify", spec, log, "--out", tmp_path / "o")
        assert status == 2, name
        assert message in one_line_error(err), (name, err)


def test_out_folder_with_other_files_is_refused(capsys, tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    log = tmp_path / "log.csv"
    log.write_text("t,theta\n0,0\n0.001,0\n")
    status, err = physid(capsys, "identify", "pendulum", log, "--out", tmp_path)
    assert status == 2 and "holds other files (log.csv, notes.txt)" in one_line_error(err)
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_identify_help_documents_the_method_keys(capsys):
    status = run(["identify", "--help"])
    out = capsys.readouterr().out
    assert status == 0
    from physid.rigs.models import ellipse_drop, identify_hinged, identify_tree

    keys = (*identify_hinged.METHOD_KEYS, *identify_tree.METHOD_KEYS, *ellipse_drop.METHOD_KEYS)
    for key in ("[method] settings", "[sensors.NAME] column", *keys, "docs/rig-spec.md"):
        assert key in out, key
