"""Terminal messages are printed as the text they are: spec keys in brackets survive rich, in
errors and in help texts (issue 25); files physid writes follow the user's umask."""

import io
import json
import os
import stat

import numpy as np

from physid.estimation.estimate import write_json_atomic
from physid.streams import Stream
from physid.terminal import Console, error_line, escape_unknown, plain
from tests.conftest import run_physid


def test_spec_keys_in_brackets_survive_the_console():
    text = io.StringIO()
    console = Console(file=text, width=300)
    console.print("[red]error:[/red] spec.toml: [fixed.m] must be positive, got -1")
    console.print("[yellow]warning:[/yellow] [method] h, [scene] and [markers], [u], [/x]")
    console.print(error_line("error", "[bold] is literal here, and so is [/]"))
    assert text.getvalue().splitlines() == [
        "error: spec.toml: [fixed.m] must be positive, got -1",
        "warning: [method] h, [scene] and [markers], [u], [/x]",
        "error: [bold] is literal here, and so is [/]",
    ]
    assert plain("[green]wrote[/green] [method] h") == "wrote [method] h"
    assert plain(escape_unknown("[red]x[/red] [fixed.m]")) == "x [fixed.m]"


def test_cli_errors_and_help_keep_their_brackets(tmp_path):
    res = run_physid("simulate", "ellipse_drop", "--set", "m=-1 kg", "--out", tmp_path / "x")
    assert res.returncode == 2
    assert "[fixed.m] must be positive, got -1" in res.stderr, res.stderr
    assert not (tmp_path / "x").exists()

    from typer.testing import CliRunner

    from physid.rigs.cli import _register_plugins, app

    _register_plugins()
    runner = CliRunner()

    def help_text(command: str) -> str:  # help is wrapped at 80 columns: compare words
        res = runner.invoke(app, [command, "--help"])
        assert res.exit_code == 0, res.output
        return " ".join(res.output.split())

    assert "Rig spec TOML with [scene] and [markers]" in help_text("track")
    assert "same as [method] model_error = true" in help_text("identify")
    assert "Exit status: 0 every experiment reported" in help_text("process")


def test_written_files_follow_the_umask(tmp_path):
    from physid.estimation.figures import pyplot, save_figure
    from physid.rigs.encoders.csvlog import write_log_csv
    from physid.rigs.models.tree.rig import load_tree_rig
    from physid.rigs.models.tree.simulate import write_tree_log
    from physid.spec import load_spec

    stream = Stream(
        t=np.arange(3) * 1e-3,
        values=np.zeros((3, 2)),
        channels=("theta", "u"),
        units=("rad", "V"),
        missing=np.zeros((3, 2), bool),
    )
    rig = load_tree_rig(load_spec("pendulum_tree"))
    t = np.arange(3) * 1e-3
    old = os.umask(0o027)
    try:
        js = write_json_atomic(tmp_path / "estimate.json", {"a": 1})
        csv = write_log_csv(tmp_path / "log.csv", stream)
        tree_csv = write_tree_log(tmp_path / "tree.csv", rig, t, np.zeros((3, 1)), np.zeros((3, 0)))
        png = save_figure(pyplot().figure(), tmp_path / "plot.png", "a plot")
        os.umask(0o002)
        js2 = write_json_atomic(tmp_path / "index.json", {"a": 2})
    finally:
        os.umask(old)
    # was 0600 whatever the umask (the tree simulator's log until 2026-11-25)
    for path in (js, csv, tree_csv, png):
        assert stat.S_IMODE(path.stat().st_mode) == 0o640, path
    assert png.read_bytes().startswith(b"\x89PNG")
    assert sorted(p.name for p in tmp_path.iterdir()) == [  # no temporary file left behind
        "estimate.json", "index.json", "log.csv", "plot.png", "tree.csv"
    ]  # fmt: skip
    assert stat.S_IMODE(js2.stat().st_mode) == 0o664
    assert json.loads(js2.read_text()) == {"a": 2}
