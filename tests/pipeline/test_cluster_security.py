"""The local Dask cluster of ``physid process`` is usable by its own process only (TLS with a
certificate made for the run, demanded of every connection), starts no HTTP server, and a
shutdown that times out after the work is a warning (issue 25). Real clusters, real sockets."""

import io
import os
import socket
import ssl
import time

import psutil
import pytest
from distributed import Client, Security
from distributed.diagnostics.plugin import WorkerPlugin

from physid.rigs.pipeline.process import ProcessOptions, _client
from physid.terminal import Console


def _listening_ports(pids: list[int]) -> set[int]:
    ports = set()
    for pid in pids:
        for c in psutil.Process(pid).net_connections(kind="inet"):
            if c.status == psutil.CONN_LISTEN:
                ports.add(c.laddr.port)
    return ports


def _handshake_without_certificate(port: int) -> Exception | None:
    """A TLS client that trusts anything but has no certificate of its own."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=30) as raw:
            with ctx.wrap_socket(raw) as tls:
                tls.sendall(b"GET / HTTP/1.0\r\n\r\n")
                tls.recv(1)  # TLS 1.3 reports a refused client certificate here
    except (ssl.SSLError, OSError) as exc:
        return exc
    return None


def _http_answer(port: int) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(b"GET /health HTTP/1.0\r\nHost: localhost\r\n\r\n")
        s.settimeout(30)
        try:
            return s.recv(64)
        except OSError:
            return b""


def test_local_cluster_accepts_only_its_own_clients_and_serves_no_http():
    console = Console(file=io.StringIO())
    with _client(ProcessOptions(jobs=1), console) as client:
        address = client.scheduler.address
        assert address.startswith("tls://127.0.0.1:")
        worker_pids = list(client.run(os.getpid).values())
        assert client.submit(sum, [1, 2]).result() == 3  # its own client works
        ports = _listening_ports([os.getpid(), *worker_pids])
        # scheduler, nanny and worker; Dask's HTTP servers (scheduler and worker) would add 2
        assert len(ports) == 3, ports
        for port in ports:
            assert isinstance(_handshake_without_certificate(port), ssl.SSLError | OSError)
            assert not _http_answer(port).startswith(b"HTTP/")
        port = int(address.rsplit(":", 1)[1])
        # An anonymous client, in plain TCP or in TLS with a certificate of its own, cannot
        # connect, so cannot run code in the workers.
        for url, security in (
            (f"tcp://127.0.0.1:{port}", None),
            (address, Security.temporary()),
        ):
            with pytest.raises((OSError, TimeoutError)):
                Client(url, security=security, timeout="10s")


class SlowTeardown(WorkerPlugin):
    """Keeps a worker busy while it is being closed, as a loaded machine does."""

    def teardown(self, worker):
        time.sleep(30)


def test_a_shutdown_that_times_out_after_the_work_is_a_warning():
    text = io.StringIO()
    console = Console(file=text, width=300)
    with _client(ProcessOptions(jobs=1), console, shutdown_timeout=1.0) as client:
        pids = list(client.run(os.getpid).values())
        client.register_plugin(SlowTeardown(), name="slow-teardown")
        assert client.submit(sum, [2, 3]).result() == 5
    out = text.getvalue()
    assert "warning: the local Dask cluster did not shut down cleanly within 1 s" in out
    assert "the work is done and saved" in out
    for pid in pids:  # no worker is left behind
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
