"""The local Dask workers of ``physid process``: malloc settings in their environment
(replacing Dask's 64 kB trim threshold), other libraries' warnings in the run's log file and,
when asked and with several jobs, one core per worker."""

import io
import os
import warnings

import pytest
from rich.console import Console

from physid.rigs.pipeline import allocator
from physid.rigs.pipeline.process import ProcessOptions, _client


def _environment():
    return {k: os.environ.get(k) for k in allocator.ENVIRONMENT}


def _affinities():
    """Per thread of the worker process: the cores it may run on."""
    seen = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            seen[int(tid)] = sorted(os.sched_getaffinity(int(tid)))
        except OSError:  # the thread ended meanwhile
            pass
    return seen


def _run_on_workers(jobs: int, fn, pin: bool = False, warnings_log=None):
    console = Console(file=io.StringIO())
    with _client(ProcessOptions(jobs=jobs), console, pin, warnings_log=warnings_log) as client:
        return list(client.run(fn).values())


def _environment_and_affinities():
    # A library's warning, as CVXPY's "Solution may be inaccurate" in the consistency
    # projection: it must reach the log file, not the terminal the worker's stderr is.
    warnings.warn("Solution may be inaccurate (a library's warning)", UserWarning, stacklevel=1)
    return _environment(), _affinities()


@pytest.fixture(scope="module")
def worker_log(tmp_path_factory):
    return tmp_path_factory.mktemp("run") / "physid.log"


@pytest.fixture(scope="module")
def one_worker(worker_log):
    """``(environment, affinities)`` of the worker of a one-job local cluster asked to pin
    (which ``--jobs 1`` does not do): one cluster for both tests, each start ~4 s."""
    (found,) = _run_on_workers(1, _environment_and_affinities, pin=True, warnings_log=worker_log)
    return found


def test_a_library_warning_in_a_worker_goes_to_the_run_log(one_worker, worker_log):
    text = worker_log.read_text()
    assert text.count("py.warnings WARNING (worker ") == 1, text
    assert "UserWarning: Solution may be inaccurate" in text, text


def test_local_workers_start_with_the_allocator_environment(one_worker):
    env, _ = one_worker
    assert env == {k: str(v) for k, v in allocator.ENVIRONMENT.items()}


@pytest.mark.skipif(
    not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
    reason="needs Linux affinity and two cores",
)
def test_pinned_workers_get_one_core_each_and_unpinned_keep_all(one_worker):
    cpus = sorted(os.sched_getaffinity(0))
    pinned = _run_on_workers(2, _affinities, pin=True)
    cores = [{c for a in threads.values() for c in a} for threads in pinned]
    assert all(len(c) == 1 for c in cores), pinned  # every thread of a worker on one core
    assert cores[0] != cores[1], pinned
    for workers in (_run_on_workers(2, _affinities), [one_worker[1]]):
        for threads in workers:
            assert all(a == cpus for a in threads.values()), threads
