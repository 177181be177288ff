"""Sanity bounds before anything large is allocated (issue 25): a capture with a stray frame
2^30 frames after the others (once read as 1 073 748 s, its worker grew by 300 MB/s until
killed) is split at the gap, or refused naming the frames; an estimator grid beyond the
memory budget (``[method] h = 1e-9``, once ``MemoryError: 44.7 GiB``) is refused naming the
key and the size. Real captures (board protocol bytes), real specs."""

import resource
import shutil

import pytest

from physid.rigs.encoders import read_log
from physid.rigs.encoders.convert import MAX_GAP_S, split_at_gaps
from physid.rigs.encoders.decode import decode_capture
from physid.rigs.encoders.protocol import WRAP, encode_frame
from physid.rigs.pipeline.experiments import discover
from physid.rigs.pipeline.run import StageLog, encoder_segments, run_experiment
from physid.spec import load_spec

JUMP = 1 << 30  # seq numbers between the capture's last frame and the stray one


@pytest.fixture(scope="module")
def stray(tmp_path_factory, capture):
    """The test capture plus one CRC-valid frame 2^30 frames (and 2^30 ms) after its last."""
    data = capture.read_bytes()
    frames, _ = decode_capture(data)
    seq, t_us = int(frames.seq[-1]), int(frames.t_us[-1])
    extra = encode_frame((seq + JUMP) % WRAP, (t_us + JUMP * 1000) % WRAP, [123], 0)
    path = tmp_path_factory.mktemp("stray") / "stray.bin"
    path.write_bytes(data + extra)
    return path, seq


def test_a_stray_frame_far_ahead_splits_the_log_and_is_left_out(stray):
    path, last = stray
    stream = read_log(path, "pendulum")
    assert stream.t[-1] - stream.t[0] > 1e6  # the stray frame's clock, as the board sent it
    segments, gaps = split_at_gaps(stream, MAX_GAP_S)
    assert [len(s) for s in segments] == [len(stream) - 1, 1]
    (gap,) = gaps
    assert gap.seq == (last, last + JUMP)
    assert f"frames seq {last} -> {last + JUMP}" in gap.describe()
    log = StageLog("stray", path.with_name("log.txt"), sink=lambda _: None)
    warned: list[str] = []
    facts = {"encoders": [{"file": path.name}]}
    kept, labels = encoder_segments(
        [stream], [path], load_spec("pendulum"), 1e-3, facts, log, warned
    )
    assert [len(s) for s in kept] == [len(stream) - 1]
    assert labels == [f"stray.bin frames seq 0-{last}"]
    (note,) = warned
    assert f"frames seq {last} -> {last + JUMP}" in note and "[method] max_gap" in note
    assert f"left out, shorter than 10 steps: frames seq {last + JUMP}-{last + JUMP}" in note
    assert "[method] max_gap" in path.with_name("log.txt").read_text()


def test_identify_refuses_the_gap_naming_its_frames(stray, tmp_path):
    from physid.errors import InputError
    from physid.rigs.models.kinds import kind_module

    path, last = stray
    spec = load_spec("pendulum")
    with pytest.raises(InputError) as caught:
        kind_module(spec).identify(spec, [path], tmp_path / "fit", None)
    message = str(caught.value)
    assert f"{path}: frames seq {last} -> {last + JUMP}" in message
    assert "longer than the 1 s limit ([method] max_gap" in message
    assert not (tmp_path / "fit").exists()


def test_a_grid_beyond_the_memory_budget_is_refused_before_allocating(tmp_path, capture):
    folder = tmp_path / "recordings"
    folder.mkdir()
    text = load_spec("pendulum").path.read_text()
    method_h = '[method]\nh = { value = 1e-3, unit = "s" }'
    assert method_h in text  # the built-in spec's step, replaced here
    (folder / "pendulum.toml").write_text(
        text.replace(method_h, '[method]\nh = { value = 1e-9, unit = "s" }')
    )
    shutil.copy(capture, folder / "a.bin")
    (exp,) = discover(folder)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB
    summary = run_experiment(exp, tmp_path / "reports", {})
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak
    assert summary["status"] == "failed"
    error = summary["error"]
    grid = "[method] h = 1e-09 s over 1.5 s of data makes a grid of 1,500,000,001 steps"
    assert f"a.bin: {grid}" in error
    assert "GiB for the estimator, more than the" in error and "GiB budget" in error
    # The grid alone would be 12 GB; refused before, the process grew by far less.
    assert grown < 1 << 20, f"peak RSS grew by {grown} KiB"
    assert grid in (tmp_path / "reports" / "a.failed.log").read_text()  # kept verbatim


@pytest.mark.slow
def test_process_fits_the_segment_before_a_stray_frame_with_a_warning(tmp_path, stray, true_j):
    """End to end: the stray frame is left out, J is identified from the rest (as well as
    without it: 2 %, see test_process), and the split is the experiment's warning."""
    path, last = stray
    folder = tmp_path / "recordings"
    folder.mkdir()
    shutil.copy(load_spec("pendulum").path, folder / "pendulum.toml")
    shutil.copy(path, folder / "stray.bin")
    (exp,) = discover(folder)
    summary = run_experiment(exp, tmp_path / "reports", {})
    assert summary["status"] == "warning", summary.get("error")
    assert abs(summary["parameters"]["J"]["value"] / true_j - 1) < 0.02
    (note,) = summary["warnings"]
    assert f"frames seq {last} -> {last + JUMP}" in note
