"""File-creation details shared by every writer: the permissions a new file gets.

Files written through a temporary file (``tempfile.mkstemp``, then a rename) are created
mode 0600, whatever the user's umask; colleagues who can read ``report.html`` then could not
read the ``estimate.json`` it links to. ``follow_umask(fd)`` gives such a file the mode an
ordinary ``open()`` would have given it.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

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
