"""The local Dask cluster of ``physid process``: usable by this process only.

Dask's scheduler, nannies and workers listen on TCP ports; on 127.0.0.1 any local user can
connect, and a connected client runs arbitrary code in the workers (as root, when physid
runs as root). Here every listener speaks TLS with a certificate made for this run only
(``Security.temporary()``: a fresh key and self-signed certificate in memory, handed to the
worker processes when they are spawned, never written to disk), and every connection must
present it; a client without it cannot even complete the handshake.

Dask also starts an HTTP server in the scheduler and in every worker (status pages, metrics,
the dashboard when Bokeh is installed), even when no dashboard address is given. Here none
starts unless ``dashboard`` is asked for; it then listens on 127.0.0.1, without TLS (any
local user can read it, but not run code through it).
"""

from __future__ import annotations

import os
import signal
from contextlib import contextmanager

from distributed import Nanny, Scheduler, SpecCluster, Worker

# Seconds the cluster may take to shut down once the work is done; longer is a warning and
# the worker processes are ended (a loaded machine once took more than Dask's own 5 s).
SHUTDOWN_TIMEOUT_S = 60.0


class _NoHTTP:
    """Mixin: skip Dask's HTTP server unless ``physid_http`` is set on the class."""

    physid_http = False

    def start_http_server(self, routes, dashboard_address, default_port=0, ssl_options=None):
        if self.physid_http:
            return super().start_http_server(routes, dashboard_address, default_port, ssl_options)
        return None  # no http_application, no listener: Dask checks for both before use


class QuietScheduler(_NoHTTP, Scheduler):
    """A Dask scheduler without an HTTP server."""


class QuietWorker(_NoHTTP, Worker):
    """A Dask worker without an HTTP server (imported by name in the worker processes)."""


def local_cluster(jobs: int, dashboard: bool = False, silence_logs: int = 50) -> SpecCluster:
    """``jobs`` worker processes of one thread each behind nannies, a scheduler, all on
    127.0.0.1 over TLS with a temporary certificate; no HTTP server unless ``dashboard``."""
    from distributed import Security

    security = Security.temporary()
    common = {"host": "127.0.0.1", "protocol": "tls://", "security": security}
    scheduler = {
        "cls": Scheduler if dashboard else QuietScheduler,
        "options": {
            **common,
            "port": 0,
            "dashboard": dashboard,
            "dashboard_address": "127.0.0.1:0" if dashboard else None,
        },
    }
    worker = {
        "cls": Nanny,
        "options": {
            **common,
            "nthreads": 1,
            "worker_class": QuietWorker,
            "dashboard": False,
            "dashboard_address": None,
            "silence_logs": silence_logs,
            "memory_limit": 0,
        },
    }
    return SpecCluster(
        scheduler=scheduler,
        workers={i: worker for i in range(jobs)},
        worker=worker,
        security=security,
        silence_logs=silence_logs,
    )


def dashboard_link(cluster: SpecCluster) -> str | None:
    """The dashboard's address, when the scheduler has one."""
    scheduler = cluster.scheduler
    server = getattr(scheduler, "http_server", None) if scheduler is not None else None
    return f"http://127.0.0.1:{server.port}/status" if server is not None else None


@contextmanager
def closing(cluster: SpecCluster, client, warn, timeout: float = SHUTDOWN_TIMEOUT_S):
    """Yield, then close ``client`` and ``cluster``. Once the work is done, a shutdown that
    fails or takes longer than ``timeout`` is only a warning (``warn(text)``): the worker
    processes it leaves are ended."""
    pids = _worker_pids(client)
    try:
        yield
    except BaseException:
        _close_quietly(client, cluster, timeout)
        raise
    try:
        client.close(timeout=timeout)
        cluster.close(timeout=timeout)
    except (Exception, _cancelled()) as exc:  # noqa: BLE001  (the results are written)
        ended = _end(pids)
        warn(
            f"the local Dask cluster did not shut down cleanly within {timeout:g} s "
            f"({type(exc).__name__}: {exc}); the work is done and saved; "
            f"{ended} leftover worker process(es) ended"
        )


def _cancelled():
    import asyncio

    return asyncio.CancelledError


def _close_quietly(client, cluster, timeout: float) -> None:
    for thing in (client, cluster):
        try:
            thing.close(timeout=timeout)
        except (Exception, _cancelled()):  # noqa: BLE001  (an error is already on its way)
            pass


def _worker_pids(client) -> list[int]:
    try:
        return [int(p) for p in client.run(os.getpid).values()]
    except Exception:  # noqa: BLE001  (no pids: nothing to end later)
        return []


def _end(pids: list[int]) -> int:
    """SIGKILL those of ``pids`` that are still our children; how many were."""
    ended = 0
    for pid in pids:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            continue  # not ours, or already reaped
        if done:
            continue
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            ended += 1
        except (ProcessLookupError, ChildProcessError):
            pass
    return ended
