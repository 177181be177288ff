"""The HTML reports render in headless Chromium without console errors.

Opt-in (``pytest -m browser``): needs Debian's ``chromium`` (``apt-get install chromium``).
Pages are loaded from file:// with the flags a sandboxed, offline machine needs; Chromium's
console messages go to stderr (``--enable-logging=stderr``) and must contain no error.
"""

import io
import re
import shutil
import subprocess

import pytest
from rich.console import Console

from physid.rigs.pipeline.process import ProcessOptions, process_folder

pytestmark = pytest.mark.browser

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--enable-logging=stderr",
    "--v=0",
]


def render(page, tmp_path) -> tuple[str, str]:
    profile = tmp_path / f"profile-{page.parent.name}"
    done = subprocess.run(
        [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "--dump-dom", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout, done.stderr


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed")
def test_index_and_report_render_without_console_errors(tmp_path, pendulum_folder):
    out = tmp_path / "reports"
    index = process_folder(pendulum_folder, out, ProcessOptions(), Console(file=io.StringIO()))
    for page in (index, out / "a" / "report.html"):
        dom, log = render(page, tmp_path)
        assert "<table" in dom and "</html>" in dom
        console = [ln for ln in log.splitlines() if "CONSOLE" in ln or "Uncaught" in ln]
        assert not console, console
        # every embedded plot is a PNG data URI that the page actually carries
        for uri in re.findall(r'src="(data:image/png;base64,[^"]{0,40})', dom):
            assert uri.startswith("data:image/png;base64,iVBOR")
