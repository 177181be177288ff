"""Other libraries' warnings and logs go to a log file, not the terminal; physid's own stay."""

import io
import socket
import subprocess
import sys

import pytest
from rich.console import Console

from physid.rigs.cli_output import LibraryLog
from physid.rigs.encoders.capture import TruncatedCaptureWarning
from tests.conftest import run_physid


def test_library_warnings_to_the_file_physid_warnings_to_the_terminal(tmp_path):
    screen = io.StringIO()
    log = LibraryLog(Console(file=screen))
    log._show_warning(DeprecationWarning("np.foo is deprecated"), DeprecationWarning, "lib.py", 3)
    log._show_warning(TruncatedCaptureWarning("cut.bin: byte 9: truncated"),
                      TruncatedCaptureWarning, "capture.py", 70)  # fmt: skip
    assert screen.getvalue() == "warning: cut.bin: byte 9: truncated\n"
    log.write_to(tmp_path / "out" / "physid.log")
    assert log.flush_to_file() == tmp_path / "out" / "physid.log"
    text = (tmp_path / "out" / "physid.log").read_text()
    assert "DeprecationWarning: np.foo is deprecated" in text and "cut.bin" not in text
    assert log.flush_to_file() is None  # nothing new: no file touched, nothing said


@pytest.mark.slow
def test_a_held_dashboard_port_leaves_process_quiet(tmp_path):
    """``physid process`` while another program holds Dask's dashboard port 8787: the local
    cluster starts no dashboard (``rigs.pipeline.cluster``: no HTTP server unless asked
    for), so nothing about the port reaches the terminal or the log. (Before the cluster
    stopped serving a dashboard, Dask warned 'Port 8787 is already in use' and physid moved
    the warning into OUT/physid.log.) Slow: a local Dask cluster starts (36 s on the loaded
    two-core machine, 10 s of CPU)."""
    holder = socket.socket()
    try:
        holder.bind(("127.0.0.1", 8787))
        holder.listen()
    except OSError:
        pass  # already held by something else: the same situation
    folder = tmp_path / "recordings"
    folder.mkdir()
    (folder / "run1.bin").write_bytes(b"\xa5\x5a")  # no rig spec: an experiment that fails
    out = tmp_path / "reports"
    try:
        done = run_physid("process", folder, "--out", out, timeout=300)
    finally:
        holder.close()
    assert "index.html" in done.stdout, done.stderr
    assert "8787" not in done.stderr and "Warning" not in done.stderr, done.stderr
    log = out / "physid.log"
    assert not log.exists() or "8787" not in log.read_text()


def test_install_takes_over_warnings_in_a_fresh_process(tmp_path):
    code = (
        "import warnings, logging\n"
        "from rich.console import Console\n"
        "from physid.rigs.cli_output import LibraryLog\n"
        "log = LibraryLog(Console(stderr=True)); log.install()\n"
        "warnings.warn('from a library', FutureWarning)\n"
        "logging.getLogger('distributed.scheduler').warning('a dask log line')\n"
        f"log.write_to({str(tmp_path / 'physid.log')!r}); log.flush_to_file()\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    text = (tmp_path / "physid.log").read_text()
    assert "FutureWarning: from a library" in text and "a dask log line" in text
