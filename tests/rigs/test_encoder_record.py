"""physid record on a real pseudo-terminal fed by the board simulator at 1000 frames/s."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import serial

from physid.rigs.encoders import read_log_csv
from physid.rigs.encoders.boardsim import (
    BoardSimulator,
    encode_trajectory,
    inject_faults,
    synthetic_trajectory,
)
from physid.rigs.encoders.decode import Frames, StreamDecoder, decode_capture
from tests.conftest import PHYSID, run_physid


def _start_recorder(port: str, out: Path, *extra: str, physid=PHYSID) -> subprocess.Popen:
    proc = subprocess.Popen(
        [*physid, "record", "--port", port, "--out", str(out), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 30
    while not out.exists():  # created once the port is open
        assert proc.poll() is None, proc.communicate()[1]
        assert time.monotonic() < deadline, "recorder did not start"
        time.sleep(0.01)
    return proc


def test_record_5s_at_1khz_loses_nothing(tmp_path: Path) -> None:
    traj = synthetic_trajectory(5.0, 1000.0, 2, seq0=2**32 - 2500, seed=11)
    frames = encode_trajectory(traj)
    data, _ = inject_faults(frames)
    out = tmp_path / "log.bin"
    with BoardSimulator(data, frames.shape[1], rate=1000.0) as sim:
        proc = _start_recorder(sim.port, out)
        t0 = time.monotonic()
        sim.start()
        assert sim.wait(30)
        played = time.monotonic() - t0
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert 4.9 < played < 7.0  # it really streamed in real time
    assert out.read_bytes() == data  # every byte, exactly as sent
    got, stats = decode_capture(out.read_bytes())
    assert stats.frames == 5000 and stats.missing == 0 and stats.corrupted == 0
    np.testing.assert_array_equal(got.seq, traj.seq)
    csv_path = out.with_suffix(".csv")
    assert f"parsed log: {csv_path}" in err
    assert "frames 5000" in err and "dropped 0, corrupted 0" in err
    log = read_log_csv(csv_path)
    assert len(log) == 5000 and not log.missing.any()
    np.testing.assert_allclose(log.values[:, 0], 2 * np.pi * traj.counts[:, 0] / 4096, atol=1e-12)


def test_ctrl_c_stops_a_recorder_started_in_the_background(tmp_path: Path) -> None:
    """A non-interactive shell starts `physid record … &` with SIGINT ignored; `kill -INT`
    must still end the recording cleanly (this hung a CI run started in the background)."""
    traj = synthetic_trajectory(0.5, 1000.0, 2, seed=13)
    frames = encode_trajectory(traj)
    out = tmp_path / "bg.bin"
    # The state a background child inherits (not preexec_fn: forking this JAX process is unsafe).
    ignoring = [sys.executable, "-c", "import signal; signal.signal(signal.SIGINT, "
                "signal.SIG_IGN); from physid.rigs.cli import main; main()"]  # fmt: skip
    with BoardSimulator(frames.tobytes(), frames.shape[1], rate=1000.0) as sim:
        proc = _start_recorder(sim.port, out, physid=ignoring)
        sim.start()
        assert sim.wait(30)
        time.sleep(0.3)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "stopped by user" in err and "frames 500" in err


def test_killed_recorder_leaves_a_parseable_prefix(tmp_path: Path) -> None:
    traj = synthetic_trajectory(4.0, 1000.0, 3, seed=12)
    frames = encode_trajectory(traj)
    data, _ = inject_faults(frames)
    flen = frames.shape[1]
    out = tmp_path / "killed.bin"
    with BoardSimulator(data, flen, rate=1000.0) as sim:
        proc = _start_recorder(sim.port, out)
        sim.start()
        time.sleep(1.5)
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=10)
    assert proc.returncode == -signal.SIGKILL
    raw = out.read_bytes()
    assert len(raw) > 500 * flen  # it had recorded for a while
    assert data.startswith(raw)  # nothing lost or altered before the kill
    got, stats = decode_capture(raw)
    assert stats.frames == len(raw) // flen and stats.missing == 0
    assert stats.truncated_tail == len(raw) % flen
    np.testing.assert_array_equal(got.seq, traj.seq[: stats.frames])


def test_live_decoding_of_a_faulty_board_through_pyserial() -> None:
    traj = synthetic_trajectory(1.5, 1000.0, 2, seed=13)
    frames = encode_trajectory(traj)
    data, plan = inject_faults(frames, byte_error_rate=0.01, drop_rate=0.005, seed=13)
    dec = StreamDecoder()
    parts = []
    with BoardSimulator(data, frames.shape[1], rate=1000.0) as sim:
        port = serial.Serial(sim.port, baudrate=921600, timeout=0.05)
        sim.start()
        received = 0
        deadline = time.monotonic() + 20
        while received < len(data) and time.monotonic() < deadline:
            chunk = port.read(max(1, port.in_waiting))
            received += len(chunk)
            parts.append(dec.feed(chunk))
        port.close()
    parts.append(dec.finish())
    got = Frames.concat(parts, 2)
    lost = np.union1d(plan.dropped, plan.corrupted)
    keep = np.setdiff1d(np.arange(len(frames)), lost)
    np.testing.assert_array_equal(got.seq, traj.seq[keep])
    np.testing.assert_array_equal(got.counts, traj.counts[keep])
    assert dec.stats.dropped == len(plan.dropped) and dec.stats.corrupted == len(plan.corrupted)


def test_record_refuses_to_overwrite_and_names_bad_port(tmp_path: Path) -> None:
    out = tmp_path / "keep.bin"
    out.write_bytes(b"precious")
    res = run_physid("record", "--port", "loop://", "--out", out, "--duration", "0.2", timeout=60)
    assert res.returncode == 2 and "exists" in res.stderr and out.read_bytes() == b"precious"
    bad = tmp_path / "new.bin"
    res = run_physid("record", "--port", "/dev/does-not-exist", "--out", bad, timeout=60)
    assert res.returncode == 2 and "/dev/does-not-exist" in res.stderr and not bad.exists()


@pytest.mark.skipif(not hasattr(os, "openpty"), reason="needs pseudo-terminals")
def test_pty_passes_every_byte_value_unchanged() -> None:
    data = bytes(range(256)) * 20  # includes ^C, ^S, CR, LF, 0xFF: raw mode must keep them
    with BoardSimulator(data, 256, rate=200.0, chunk_frames=1) as sim:
        port = serial.Serial(sim.port, timeout=0.2)
        sim.start()
        got = bytearray()
        deadline = time.monotonic() + 10
        while len(got) < len(data) and time.monotonic() < deadline:
            got += port.read(4096)
        port.close()
    assert bytes(got) == data


def test_board_disconnect_keeps_and_parses_the_data(tmp_path: Path) -> None:
    traj = synthetic_trajectory(1.0, 1000.0, 1, seed=14)
    frames = encode_trajectory(traj)
    data, _ = inject_faults(frames)
    out = tmp_path / "unplugged.bin"
    with BoardSimulator(data, frames.shape[1], rate=1000.0) as sim:
        proc = _start_recorder(sim.port, out, "--duration", "20")
        sim.start()
        assert sim.wait(10)
        time.sleep(0.3)
    # leaving the block closed the pty: the board is gone
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 1, err
    assert "lost after" in err and f"parsed log: {out.with_suffix('.csv')}" in err
    assert out.read_bytes() == data
    assert len(read_log_csv(out.with_suffix(".csv"))) == 1000


def test_record_from_a_socket_url(tmp_path: Path) -> None:
    import socket
    import threading

    traj = synthetic_trajectory(1.0, 1000.0, 2, seed=15)
    data, _ = inject_faults(encode_trajectory(traj))
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    recording, done = threading.Event(), threading.Event()

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            # pyserial discards what arrives while it opens the port (its reset_input_buffer),
            # so the board starts streaming once the recorder says it is recording: a fixed
            # wait lost the first frames on a loaded machine.
            recording.wait(60)
            for i in range(0, len(data), 2400):  # 100 frames at a time, as a board streams
                conn.sendall(data[i : i + 2400])
                time.sleep(0.02)
            done.wait(60)  # keep the connection until the recorder has stopped

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    out = tmp_path / "net.bin"
    proc = subprocess.Popen(
        [*PHYSID, "record", "--port", f"socket://127.0.0.1:{port}", "--out", str(out)]
        + ["--duration", "3"],
        stderr=subprocess.PIPE,
        text=True,
    )
    lines = []
    for line in proc.stderr:
        lines.append(line)
        if line.startswith("recording "):
            recording.set()
    proc.wait(timeout=120)
    done.set()
    thread.join(5)
    server.close()
    stderr = "".join(lines)
    assert proc.returncode == 0, stderr
    assert out.read_bytes() == data
    assert "frames 1000" in stderr


def test_record_on_a_full_disk_keeps_the_capture_and_ends_with_its_summary(
    tmp_path: Path, small_disk
) -> None:
    """A 64 kB file system fills after ~2.7 s of a 24 kB/s board: the recorder stops
    writing, keeps every byte it wrote, prints the summary of what it has, says that the
    CSV could not be written and exits 4 (no traceback)."""
    traj = synthetic_trajectory(6.0, 1000.0, 2, seed=16)
    frames = encode_trajectory(traj)
    data, _ = inject_faults(frames)
    disk = small_disk(64 << 10)
    out = disk / "full.bin"
    with BoardSimulator(data, frames.shape[1], rate=1000.0) as sim:
        proc = _start_recorder(sim.port, out, "--duration", "20")
        sim.start()
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == 4, err
    assert "Traceback" not in err
    raw = out.read_bytes()
    assert 0 < len(raw) < len(data) and data.startswith(raw)  # kept, exactly as received
    assert f"writing {out} failed" in err and "No space left on device" in err
    got, stats = decode_capture(raw)
    assert f"frames {stats.frames} (" in err and "dropped 0, corrupted 0" in err
    assert f"cannot write the parsed log {out.with_suffix('.csv')}" in err
    assert not out.with_suffix(".csv").exists()
