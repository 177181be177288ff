"""The HTML reports render in headless Chromium without console errors.

Opt-in (``pytest -m browser``): needs Debian's ``chromium`` (``apt-get install chromium``).
Pages are loaded from file:// with the flags a sandboxed, offline machine needs; Chromium's
console messages go to stderr (``--enable-logging=stderr``) and must contain no error.
"""

import io
import re

import pytest
from rich.console import Console

from physid.rigs.pipeline.process import ProcessOptions, process_folder

pytestmark = pytest.mark.browser

# Chromium writes the page's console messages to stderr only with these.
LOGGING = ("--enable-logging=stderr", "--v=0")


def test_index_and_report_render_without_console_errors(tmp_path, pendulum_folder, headless_dom):
    out = tmp_path / "reports"
    index = process_folder(pendulum_folder, out, ProcessOptions(), Console(file=io.StringIO()))
    for page in (index, out / "a" / "report.html"):
        dom, log = headless_dom(page, *LOGGING)
        assert "<table" in dom and "</html>" in dom
        console = [ln for ln in log.splitlines() if "CONSOLE" in ln or "Uncaught" in ln]
        assert not console, console
        # every embedded plot is a PNG data URI that the page actually carries
        for uri in re.findall(r'src="(data:image/png;base64,[^"]{0,40})', dom):
            assert uri.startswith("data:image/png;base64,iVBOR")
