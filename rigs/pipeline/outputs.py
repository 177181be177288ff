"""The output folder of ``physid process``: safe names and paths, one run at a time, and
the file hashes that decide whether a finished report can be reused.

- An experiment's name becomes folder and file names in ``--out`` (``NAME/``,
  ``.NAME.partial/``, ``NAME.failed.log``), so it must be an identifier: letters, digits,
  ``_`` and ``-``. Every path is also resolved (``..``, absolute paths and symbolic links
  followed) and refused unless it lies inside ``--out`` before anything is written or
  removed there.
- ``run_lock`` holds an exclusive ``flock`` on ``--out/.physid.lock`` for the whole run; a
  second run on the same folder is refused with the holder's process id, instead of the two
  deleting each other's work folders.
- ``file_hashes`` records a SHA-256 per file of a finished report (in ``summary.json``);
  ``damaged_outputs`` names what is missing or changed, and such a report is recomputed.
"""

from __future__ import annotations

import datetime
import fcntl
import hashlib
import os
import re
import socket
from contextlib import contextmanager
from pathlib import Path

from physid.errors import InputError

LOCK_FILE = ".physid.lock"
SUMMARY = "summary.json"
NAME_PATTERN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]{0,63}")


class UnsafePath(InputError):
    """An output path that would leave ``--out``."""


class OutputBusy(Exception):
    """Another run holds the output folder's lock; the message names its process."""


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot name an experiment's outputs, or None when it can."""
    if NAME_PATTERN.fullmatch(name):
        return None
    return (
        f"experiment name {name!r} is not an identifier: use 1 to 64 letters, digits, '_' "
        "and '-' (not starting with '-'); the name becomes the report folder in --out"
    )


def inside(root: Path, name: str) -> Path:
    """``root/name``, after checking that it resolves to exactly that place: ``..``,
    absolute names and symbolic links (pointing out of ``root`` or to another report in it)
    are refused."""
    root = Path(root).resolve()
    path = (root / name).resolve()
    if path == root or not path.is_relative_to(root):
        raise UnsafePath(
            f"{root}: output {name!r} would be written at {path}, outside the output folder; "
            "nothing was written or removed there"
        )
    if path != root / name:
        raise UnsafePath(
            f"{root / name}: a link to {path}, not physid's; remove it (nothing was written "
            "or removed there)"
        )
    return path


@contextmanager
def run_lock(out: Path):
    """Hold the output folder for this process until the block ends (``OutputBusy`` if
    another process holds it). The lock file stays: removing it would let a third run lock
    a new file while the second still holds the old one."""
    path = Path(out) / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 512, 0).decode(errors="replace").strip() or "unknown process"
            raise OutputBusy(
                f"{out}: another physid run is writing to this folder ({holder}); wait for it "
                "to finish, or give another --out"
            ) from None
        started = datetime.datetime.now().isoformat(timespec="seconds")
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}, since {started}\n".encode(), 0)
        yield path
    finally:
        os.close(fd)  # releases the lock


def holder(out: Path) -> str:
    """What the lock file says about the run that holds (or last held) it."""
    try:
        return (Path(out) / LOCK_FILE).read_text().strip()
    except OSError:
        return ""


def file_hashes(folder: Path) -> dict[str, str]:
    """SHA-256 of every file under ``folder`` except ``summary.json``, by relative path."""
    folder = Path(folder)
    found = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file() and not path.is_symlink() and path.name != SUMMARY:
            found[path.relative_to(folder).as_posix()] = _sha256(path)
    return found


def damaged_outputs(folder: Path, recorded: dict[str, str] | None) -> list[str]:
    """The recorded files of a finished report that are missing or changed (all of them,
    as ``["outputs"]``, when nothing was recorded)."""
    if not isinstance(recorded, dict) or not recorded:
        return ["outputs"]
    damaged = []
    for name, digest in recorded.items():
        path = Path(folder) / name
        try:
            if _sha256(path) != digest:
                damaged.append(f"{name} changed")
        except OSError:
            damaged.append(f"{name} missing")
    return damaged


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
