"""Shared test setup: JAX in float64 and one persistent compilation cache for the whole test
run, both before anything imports or compiles with JAX."""

import os
import shutil
import tempfile

import jax

jax.config.update("jax_enable_x64", True)


# ---------------------------------------------------------------------------- one compilation cache

# One persistent JAX compilation cache for the test run, in a fresh temporary folder: the CLI
# subprocesses, Dask workers and the test process itself (tests that rebuild a jitted closure,
# or run in-process what a worker compiled before) reuse each other's compilations, and tests
# never read or fill the user's ~/.cache/physid/jax. It starts empty, as on CI, so that local
# timings are CI's. It must be on before the first compilation: JAX decides once per process,
# at its first compilation, whether that process uses the cache. A PHYSID_JAX_CACHE set by the
# caller is kept (a folder to reuse across runs, or `off`).
_OWN_CACHE = None
if "PHYSID_JAX_CACHE" not in os.environ:
    _OWN_CACHE = tempfile.mkdtemp(prefix="physid-test-jax-")
    os.environ["PHYSID_JAX_CACHE"] = _OWN_CACHE  # inherited by every subprocess and worker

from physid.rigs.models.identify_hinged import enable_compilation_cache  # noqa: E402

enable_compilation_cache()


def pytest_unconfigure(config):
    if _OWN_CACHE is not None:
        shutil.rmtree(_OWN_CACHE, ignore_errors=True)


# ------------------------------------------------------------------------------ the console script

import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

# The console script's body, run by this interpreter (the one physid is installed in; a
# virtual environment need not have its scripts on PATH).
PHYSID = (sys.executable, "-c", "from physid.rigs.cli import main; main()")


def run_physid(*args, timeout: float = 600, cwd=None, env=None) -> subprocess.CompletedProcess:
    """``physid ARGS...`` in a subprocess: exit status and text stdout/stderr captured.

    ``timeout`` (s) catches a hung command, not a slow one: give each test's worst case on a
    loaded 2-core machine, never a tight bound. ``env`` entries are added to this process's
    environment. COLUMNS=400: rich wraps at the terminal width (80 when captured), and a wide
    one keeps each message on one line for the assertions."""
    return subprocess.run(
        [*PHYSID, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env={**os.environ, "COLUMNS": "400", **(env or {})},
    )


# ------------------------------------------------------------------------------ a small disk


@pytest.fixture
def small_disk(tmp_path):
    """``mount(size_bytes) -> Path``: a folder on a tmpfs of that size, so that writes end in
    a real ENOSPC. A real full disk is what is tested: as root, quotas and reserved blocks
    do not stop writes, and RLIMIT_FSIZE gives EFBIG and a signal instead of ENOSPC. Skips
    where mounting is not permitted (not root, or a sandbox without CAP_SYS_ADMIN)."""
    mounted: list[Path] = []

    def mount(size: int) -> Path:
        where = tmp_path / f"disk{len(mounted)}"
        where.mkdir()
        res = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(where)],
            capture_output=True,
            text=True,
        )
        if res.returncode != 0:
            pytest.skip(f"cannot mount a small tmpfs here: {res.stderr.strip()}")
        mounted.append(where)
        return where

    yield mount
    for where in reversed(mounted):
        subprocess.run(["umount", "-l", str(where)], check=False)


def fill(folder: Path, leave: int = 0) -> Path:
    """Fill the file system holding ``folder`` until at most ``leave`` bytes are free."""
    path = folder / "filler"
    block = b"\0" * 4096
    with open(path, "wb", buffering=0) as fh:
        try:
            while os.statvfs(folder).f_bavail * os.statvfs(folder).f_frsize > leave:
                fh.write(block)
        except OSError:
            pass
    return path


# ------------------------------------------------------------------------------ a browser

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


@pytest.fixture
def headless_dom(tmp_path):
    """``dom(page, *flags) -> (dom, log)``: the DOM headless Chromium builds for the HTML file
    ``page`` (after its scripts ran) and Chromium's stderr. A fresh profile per page, so one
    page's cache never serves another. Skips where Chromium is not installed."""
    if CHROMIUM is None:
        pytest.skip("chromium not installed")

    def dom(page: Path, *flags: str) -> tuple[str, str]:
        profile = tmp_path / f"profile-{page.parent.name}-{page.stem}"
        done = subprocess.run(
            [CHROMIUM, *CHROMIUM_FLAGS, *flags, f"--user-data-dir={profile}", "--dump-dom",
             page.as_uri()],
            capture_output=True,
            text=True,
            timeout=120,  # a hung browser, not a slow page: pages load in a few seconds
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout, done.stderr

    return dom
