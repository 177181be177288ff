"""File-creation details shared by every writer: the permissions a new file gets.

Files written through a temporary file (``tempfile.mkstemp``, then a rename) are created
mode 0600, whatever the user's umask; colleagues who can read ``report.html`` then could not
read the ``estimate.json`` it links to. ``follow_umask(fd)`` gives such a file the mode an
ordinary ``open()`` would have given it. ``atomic_open`` does all of it: estimates, logs, pose
files, reports, plots and the sample's files are written through it, so a crash or a full
disk never leaves half a file under the final name.
"""

from __future__ import annotations

import os
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

_lock = threading.Lock()


def umask() -> int:
    """The process's umask, without changing it (Linux: /proc; elsewhere set and restore)."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    with _lock:  # os.umask can only be read by setting it
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


def new_file_mode() -> int:
    """The mode ``open(path, "w")`` gives a new file: 0666 less the umask."""
    return 0o666 & ~umask()


def follow_umask(fd: int) -> None:
    """Give the file open as ``fd`` (made by ``mkstemp``, mode 0600) the umask's mode."""
    os.fchmod(fd, new_file_mode())


@contextmanager
def naming(path) -> Iterator[None]:
    """Give an ``OSError`` raised inside the block the file name ``path`` when it has none
    (a failed ``write`` on a full disk names no file), so the one line printed for it says
    which file could not be written."""
    try:
        yield
    except OSError as exc:
        if exc.filename is None and exc.errno is not None:
            raise type(exc)(exc.errno, exc.strerror, str(path)) from exc
        raise


@contextmanager
def atomic_open(path, mode: str = "w", **kwargs) -> Iterator:
    """``open(path, mode)`` for writing, whole or not at all: the block writes to a temporary
    file in the same folder (created with the umask's mode) which is flushed to disk and
    renamed to ``path`` when the block ends; on any error (a full disk included, named by
    ``path``) the temporary file is removed and ``path`` is untouched. ``kwargs`` go to
    ``os.fdopen`` (``encoding``, ``newline``)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        follow_umask(fd)
        with naming(path), os.fdopen(fd, mode, **kwargs) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
