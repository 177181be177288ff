"""The local Dask workers of ``physid process``: malloc settings in their environment
(replacing Dask's 64 kB trim threshold) and, with several jobs, one core per worker."""

import io
import os

import pytest
from rich.console import Console

from rigs import allocator
from rigs.process import ProcessOptions, _client


def _environment():
    return {k: os.environ.get(k) for k in allocator.ENVIRONMENT}


def _affinities():
    """Per thread of the worker process: the cores it may run on."""
    return {int(t): sorted(os.sched_getaffinity(int(t))) for t in os.listdir("/proc/self/task")}


def _run_on_workers(jobs: int, fn):
    with _client(ProcessOptions(jobs=jobs), Console(file=io.StringIO())) as client:
        return list(client.run(fn).values())


def test_local_workers_start_with_the_allocator_environment():
    (env,) = _run_on_workers(1, _environment)
    assert env == {k: str(v) for k, v in allocator.ENVIRONMENT.items()}


@pytest.mark.skipif(
    not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
    reason="needs Linux affinity and two cores",
)
def test_two_jobs_get_one_core_each_and_one_job_keeps_all():
    cpus = sorted(os.sched_getaffinity(0))
    pinned = _run_on_workers(2, _affinities)
    cores = [{c for a in threads.values() for c in a} for threads in pinned]
    assert all(len(c) == 1 for c in cores), pinned  # every thread of a worker on one core
    assert cores[0] != cores[1], pinned
    (alone,) = _run_on_workers(1, _affinities)
    assert all(a == cpus for a in alone.values()), alone
