"""``physid process`` run as a careless user or an attacker would (issue 25), on real files:
experiment names and manifest paths that leave their folders, two runs on one output folder
(a real second process), damaged finished reports, a full disk (a real small tmpfs), and the
exit status. Every test checks that nothing outside ``--out`` changed and that finished
reports survive."""

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from physid.rigs.pipeline.experiments import discover
from physid.rigs.pipeline.outputs import LOCK_FILE, damaged_outputs
from physid.rigs.pipeline.process import load_index
from physid.rigs.pipeline.run import _cached_summary, run_experiment
from physid.spec import load_spec
from tests.conftest import fill, run_physid
from tests.pipeline.conftest import pipeline_spec


def snapshot(root: Path) -> dict[str, tuple]:
    """Every entry under ``root``: (kind, size, mtime_ns, sha256 of files), symlinks unfollowed."""
    found = {}
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        if path.is_symlink():
            found[str(path)] = ("link", os.readlink(path))
        elif path.is_file():
            found[str(path)] = ("file", st.st_size, st.st_mtime_ns, _sha(path))
        else:
            found[str(path)] = ("dir",)
    return found


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def victim(root: Path) -> Path:
    """A folder outside every --out, with a file and a report-like subfolder to lose."""
    v = root / "victim"
    (v / "report").mkdir(parents=True)
    (v / "precious.txt").write_text("not physid's to touch\n")
    (v / "report" / "summary.json").write_text("{}\n")
    return v


# ------------------------------------------------------------------------------ names and paths


def test_experiment_names_that_leave_out_are_invalid_and_touch_nothing(tmp_path, capture):
    """`[experiments."../victim"]` and an absolute name wrote reports there and deleted what
    was there; now they are invalid, nothing is written or removed outside --out, and the
    command exits 1 naming them (it exited 0 when no experiment was reported). Problems are
    printed verbatim, brackets included."""
    world = tmp_path / "world"
    target = victim(world)
    folder = world / "recordings"
    folder.mkdir()
    shutil.copy(capture, folder / "a.bin")
    (folder / "experiments.toml").write_text(
        '[experiments."../victim"]\nrig = "pendulum"\nencoder = "a.bin"\n'
        f'[experiments."{target}"]\nrig = "pendulum"\nencoder = "a.bin"\n'
        '[experiments."x/../../victim"]\nrig = "pendulum"\nencoder = "a.bin"\n'
        '[experiments.lonely]\nencoder = "gone.bin"\n'
    )
    out = world / "reports"
    before = snapshot(world)
    res = run_physid("process", folder, "--out", out, "--no-cross-validate")
    assert res.returncode == 1, res.stderr
    for name in ("../victim", str(target), "x/../../victim"):
        assert f"{name}: invalid: experiment name {name!r} is not an identifier" in res.stderr
    assert "lonely: invalid:" in res.stderr and "gone.bin: no such file" in res.stderr
    assert "[experiments.lonely]: no rig spec" in res.stderr  # not eaten as rich markup
    assert "Traceback" not in res.stderr
    after = snapshot(world)
    created = set(after) - set(before)
    assert all(p.startswith(str(out)) for p in created), created  # only --out gained files
    assert {p: after[p] for p in before} == before  # nothing outside changed or vanished
    assert {s["status"] for s in load_index(out)} == {"invalid"}


def test_a_link_in_out_that_points_elsewhere_is_refused(tmp_path, capture):
    """An output folder holding `NAME -> /somewhere` (or `NAME.failed.log -> ...`): the
    experiment is invalid and the link's target is left alone."""
    target = victim(tmp_path)
    folder = tmp_path / "recordings"
    folder.mkdir()
    shutil.copy(capture, folder / "a.bin")
    shutil.copy(capture, folder / "b.bin")
    shutil.copy(load_spec("pendulum").path, folder / "pendulum.toml")
    out = tmp_path / "reports"
    out.mkdir()
    (out / "a").symlink_to(target)
    (out / "b.failed.log").symlink_to(target / "precious.txt")
    before = snapshot(target)
    found = {e.name: e for e in discover(folder)}
    for name, link in (("a", "a"), ("b", "b.failed.log")):
        summary = run_experiment(found[name], out, {})
        assert summary["status"] == "invalid"
        assert f"output {link!r} would be written at {target}" in summary["error"]
    assert snapshot(target) == before
    (out / "a").unlink()
    (out / "other").mkdir()
    (out / "a").symlink_to(out / "other")  # inside --out, but another folder's
    summary = run_experiment(found["a"], out, {})
    assert summary["status"] == "invalid"
    assert f"{out / 'a'}: a link to {out / 'other'}, not physid's" in summary["error"]
    assert list((out / "other").iterdir()) == []


def test_manifest_inputs_outside_the_folder_need_allow_outside(tmp_path, capture):
    """`../` paths, absolute paths, links out of the folder and `rig = "/abs/spec.toml"` are
    problems naming the file; with allow_outside they are used and listed in the index."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.copy(capture, elsewhere / "far.bin")
    spec = shutil.copy(load_spec("pendulum").path, elsewhere / "spec.toml")
    (elsewhere / "garbage.bin").write_bytes(b"\x00" * 64)
    folder = tmp_path / "recordings"
    folder.mkdir()
    (folder / "link.bin").symlink_to(elsewhere / "far.bin")
    (folder / "experiments.toml").write_text(
        '[experiments.dotdot]\nrig = "pendulum"\nencoder = "../elsewhere/far.bin"\n'
        f'[experiments.absolute]\nrig = "pendulum"\nencoder = "{elsewhere / "far.bin"}"\n'
        '[experiments.linked]\nrig = "pendulum"\nencoder = "link.bin"\n'
        f'[experiments.rigout]\nrig = "{spec}"\nencoder = "../elsewhere/garbage.bin"\n'
    )
    found = {e.name: e for e in discover(folder)}
    far = str((elsewhere / "far.bin").resolve())
    for name in ("dotdot", "absolute", "linked"):
        (problem,) = found[name].problems
        assert f"experiment {name!r}: input {far} is outside the folder" in problem
        assert "--allow-outside" in problem
    assert {str(spec), str(elsewhere / "garbage.bin")} == {
        p.split("input ")[1].split(" is outside")[0] for p in found["rigout"].problems
    }
    allowed = {e.name: e for e in discover(folder, allow_outside=True)}
    assert not any(e.problems for e in allowed.values())
    assert [str(p) for p in allowed["linked"].outside] == [far]
    # The experiment runs (and fails on its garbage capture) with its outside inputs listed.
    summary = run_experiment(allowed["rigout"], tmp_path / "reports", {})
    assert summary["status"] == "failed" and "garbage.bin" in summary["error"]
    assert set(summary["outside_inputs"]) == {str(spec), str(elsewhere / "garbage.bin")}
    from physid.estimation.report import index_page

    assert f"outside the folder (--allow-outside): {spec}" in index_page([summary])


# ------------------------------------------------------------------------------ one finished run


@pytest.fixture(scope="module")
def finished(tmp_path_factory, mixed_run):
    """A folder with one pendulum experiment `a` and an output folder where its report is
    finished (tests copy the output folder). The report is the good experiment of
    ``mixed_run`` (tests/pipeline/conftest.py): the same capture bytes through the same spec
    text, identified by ``physid process`` once for the session; its summary is relabelled
    to this folder's experiment (name, inputs, input hash), which is all that differs."""
    from physid.rigs.pipeline.experiments import input_hash
    from physid.rigs.pipeline.process import _write_index

    mixed, mixed_out, _ = mixed_run
    root = tmp_path_factory.mktemp("finished")
    folder = root / "recordings"
    folder.mkdir()
    pipeline_spec(folder / "pendulum.toml")
    shutil.copy(mixed / "good.bin", folder / "a.bin")
    assert _sha(folder / "pendulum.toml") == _sha(mixed / "pendulum.toml")
    out = root / "reports"
    shutil.copytree(mixed_out / "good", out / "a")
    (exp,) = discover(folder)
    summary = json.loads((out / "a" / "summary.json").read_text())
    assert summary["status"] == "ok", summary.get("error")
    summary.update(
        experiment=exp.name,
        rig=exp.rig,
        inputs=[str(p) for p in exp.input_files()],
        digest=input_hash(exp, {}),  # run_experiment's settings here, as in process's
    )
    (out / "a" / "summary.json").write_text(json.dumps(summary))
    assert run_experiment(exp, out, {}).get("skipped") is True  # a finished report of `a`
    _write_index(out, [exp], {"a": summary})
    (out / LOCK_FILE).write_text("pid 1 (an earlier run)\n")
    return folder, out


def test_reuse_checks_every_recorded_file(tmp_path, finished):
    """A report is reused only when every file its summary lists is there unchanged: a
    half-copied or edited report is recomputed, never served as `ok`."""
    folder, template = finished
    (exp,) = discover(folder)
    summary = json.loads((template / "a" / "summary.json").read_text())
    assert {"estimate.json", "report.html", "log.txt"} <= set(summary["outputs"])
    out = tmp_path / "reports"
    shutil.copytree(template, out)
    assert run_experiment(exp, out, {}).get("skipped") is True  # intact: reused
    (out / "a" / "log.txt").write_text((out / "a" / "log.txt").read_text()[:50])
    (out / "a" / "report.html").unlink()
    assert set(damaged_outputs(out / "a", summary["outputs"])) == {
        "report.html missing",
        "log.txt changed",
    }
    assert _cached_summary(out / "a", summary["digest"]) is None


def test_second_run_on_one_output_folder_names_the_holder_and_changes_nothing(tmp_path, finished):
    """A real second process holds the folder; `physid process` exits 3 naming its pid and
    leaves the folder (its work folder included) as it was; once released, a run works."""
    folder, template = finished
    out = tmp_path / "reports"
    shutil.copytree(template, out)
    (out / ".a.partial").mkdir()  # the holder's work in progress
    (out / ".a.partial" / "log.txt").write_text("[spec] stage spec\n")
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys; from physid.rigs.pipeline.outputs import run_lock\n"
         f"with run_lock({str(out)!r}):\n print('locked', flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "locked"
        before = snapshot(tmp_path)
        res = run_physid("process", folder, "--out", out)
        assert res.returncode == 3, res.stderr
        assert f"another physid run is writing to this folder (pid {holder.pid} " in res.stderr
        assert snapshot(tmp_path) == before
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)
    res = run_physid("process", folder, "--out", out)
    assert res.returncode == 0, res.stderr
    assert load_index(out)[0].get("skipped") is True
    assert not (out / ".a.partial").exists()  # an abandoned work folder, cleaned once free


def test_full_disk_is_one_line_and_keeps_finished_reports(tmp_path, finished, small_disk):
    """The index cannot be written on a full disk: one line naming the file, exit 4, the
    finished report and the previous index untouched, nothing written elsewhere."""
    folder, template = finished
    disk = small_disk(4 << 20)
    out = disk / "reports"
    shutil.copytree(template, out)
    fill(disk)
    before = snapshot(out)
    outside = snapshot(folder)
    res = run_physid("process", folder, "--out", out)
    assert res.returncode == 4, res.stderr
    (line,) = [x for x in res.stderr.splitlines() if x.startswith("error:")]
    assert "index.json" in line and "No space left on device" in line
    assert "Traceback" not in res.stderr
    after = snapshot(out)
    for path in before:  # every finished file is as it was (the lock file aside)
        if not path.endswith(LOCK_FILE):
            assert after[path] == before[path], path
    assert not [p for p in after if p.endswith(".tmp")]  # no half-written index left
    assert snapshot(folder) == outside


@pytest.mark.slow
def test_full_disk_during_an_experiment_keeps_its_log(tmp_path, finished, small_disk):
    """Space for the logs but not for the estimate: the experiment fails with one line
    naming the file, its failed log keeps the stages it reached, the finished one is kept,
    exit status 1."""
    folder, template = finished
    disk = small_disk(4 << 20)
    out = disk / "reports"
    shutil.copytree(template, out)
    shutil.copy(folder / "a.bin", folder / "b.bin")  # a second experiment, removed below
    try:
        fill(disk, leave=24 << 10)  # the log fits; estimate.json (~400 kB) does not
        res = run_physid("process", folder, "--out", out, "--no-cross-validate")
    finally:
        (folder / "b.bin").unlink()
    assert res.returncode == 1, res.stderr
    (line,) = [x for x in res.stderr.splitlines() if x.startswith("b: failed:")]
    assert "No space left on device" in line and "estimate.json" in line
    assert "Traceback" not in res.stderr
    log = (out / "b.failed.log").read_text()
    assert "stage identify" in log
    recorded = json.loads((out / "a" / "summary.json").read_text())["outputs"]
    assert damaged_outputs(out / "a", recorded) == []
