"""In-process ``mallopt`` stops repeated large allocations from faulting in fresh pages (the
workers' environment is checked in tests/pipeline/test_local_workers.py)."""

import os
import platform
import subprocess
import sys

import pytest

_CHILD = """
import resource, sys
import numpy as np
from physid.rigs.pipeline import allocator
if sys.argv[1] == "tuned":
    assert allocator.tune_this_process()
a = np.ones(20 * 2**20 // 8); del a
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    a = np.ones(20 * 2**20 // 8); del a
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(mode: str) -> int:
    # Dask copies its pre-spawn environment (malloc and thread settings) into this process
    # too, and OPENBLAS_NUM_THREADS alone changes the heap's layout: start from a clean one.
    drop = ("MALLOC_", "OMP_", "MKL_", "OPENBLAS_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env["MALLOC_TRIM_THRESHOLD_"] = "65536"  # Dask's worker default
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, mode], env=env, capture_output=True, text=True, check=True
    )
    return int(out.stdout.strip())


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_mallopt_keeps_large_arrays_on_the_heap():
    # 20 allocations of 20 MB are 102 400 fresh 4 kB pages if each one is mapped anew.
    # Under Dask's trim threshold they fault (measured 10 440: the heap shrinks and regrows);
    # tuned they reuse the heap (measured 0). 1000 leaves room for interpreter noise.
    assert _faults("plain") > 5000
    assert _faults("tuned") < 1000
