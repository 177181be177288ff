"""glibc malloc settings for physid's compute processes.

The LM allocates and frees arrays of 1–60 MB several times per iteration (Jacobian blocks,
normal-equation blocks, banded factors). glibc maps an allocation above its mmap threshold
fresh from the OS and unmaps it on free, so each use pays a page fault per 4 kB. Normally
the threshold rises to the size of freed blocks (up to 32 MB), but setting any malloc
parameter turns that off, and Dask sets ``MALLOC_TRIM_THRESHOLD_`` = 64 kB in its workers:
the threshold then stays at 128 kB and every such array is mapped anew. Measured on the
sample Furuta experiment (one worker, 2-core machine): 5.7 M page faults and 24 s of system
time in a 71 s run; with these settings 1.8 M and 10 s, 59 s wall.

The values keep arrays up to 32 MB (glibc's largest mmap threshold on 64-bit) on the heap
and let up to 1 GB of freed memory stay with the process for reuse.
"""

from __future__ import annotations

import ctypes

MMAP_THRESHOLD = 32 * 1024 * 1024
TRIM_THRESHOLD = 1024 * 1024 * 1024
TOP_PAD = 256 * 1024 * 1024

# Read by glibc when a process starts: for worker processes we spawn (Dask's pre-spawn
# environment).
ENVIRONMENT = {
    "MALLOC_MMAP_THRESHOLD_": MMAP_THRESHOLD,
    "MALLOC_TRIM_THRESHOLD_": TRIM_THRESHOLD,
    "MALLOC_TOP_PAD_": TOP_PAD,
}

# mallopt parameter numbers from glibc's <malloc.h>.
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3


def tune_this_process() -> bool:
    """Apply the settings to the running process through ``mallopt`` (for ``physid identify``
    and other in-process runs); False where the C library is not glibc."""
    try:  # the C library is already loaded: look mallopt up in the process itself
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError, TypeError):
        return False
    ok = mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
    ok &= mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    ok &= mallopt(_M_TOP_PAD, TOP_PAD)
    return bool(ok)
