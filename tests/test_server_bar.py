"""The dashboard and `dhp metrics --serve` held to the bar of every DHP server (spec/security.md,
DHP-SEC-006..009): Host and Origin checked on every loopback address (reads of the dashboard
were open to DNS rebinding), a request that does not arrive within the read timeout cut off
(600 half-sent requests held 602 threads), connections capped per address, and a token for
every read off loopback."""

from __future__ import annotations

import http.client
import os
import re
import socket
import subprocess
import sys
import time

import dhp
import pytest
from dhp.observe import dashboard
from dhp.transport import http_guard


def request(port: int, path: str, host: str = "127.0.0.1", **headers: str):
    conn = http.client.HTTPConnection(host, port, timeout=30)
    conn.request("GET", path, headers=headers)
    response = conn.getresponse()
    return response.status, response.read()


@pytest.fixture
def board(tmp_path):
    store = dhp.Store(tmp_path / "store")
    servers = []

    def start(bind: str = "127.0.0.1:0") -> dashboard.Dashboard:
        server = dashboard.serve(store, bind)
        servers.append(server)
        return server
    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.mark.covers("DHP-SEC-006")
@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2"])
def test_dashboard_reads_check_host_and_origin(board, host):
    port = board(f"{host}:0").server_address[1]
    assert request(port, "/api/overview", host)[0] == 200
    status, body = request(port, "/api/handoffs", host, Host="evil.example")
    assert status == 403 and b"Host" in body
    assert request(port, "/api/overview", host, Origin="http://evil.example")[0] == 403
    assert request(port, "/", host, Host=f"localhost:{port}")[0] == 200


@pytest.mark.covers("DHP-SEC-008")
def test_dashboard_cuts_off_a_request_that_does_not_arrive(board, monkeypatch):
    monkeypatch.setattr(http_guard.Limits, "__init__", _limits_with(read_timeout=0.5))
    port = board().server_address[1]
    with socket.create_connection(("127.0.0.1", port), timeout=30) as slow:
        slow.sendall(b"GET /api/overview HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        started = time.monotonic()
        assert slow.recv(1024) == b""
        assert time.monotonic() - started < 20
    assert request(port, "/api/overview")[0] == 200


@pytest.mark.covers("DHP-SEC-007")
def test_dashboard_caps_connections_per_address(board, monkeypatch):
    monkeypatch.setattr(http_guard.Limits, "__init__",
                        _limits_with(max_connections_per_address=3, read_timeout=30))
    port = board().server_address[1]
    held = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(3)]
    try:
        time.sleep(0.2)
        status, body = request(port, "/api/overview")
        assert status == 503 and b"max_connections_per_address 3" in body
    finally:
        for sock in held:
            sock.close()
    deadline = time.monotonic() + 20
    while request(port, "/api/overview")[0] != 200 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert request(port, "/api/overview")[0] == 200


@pytest.mark.covers("DHP-SEC-009")
def test_dashboard_off_loopback_needs_the_token_to_read(board):
    server = board("0.0.0.0:0")
    port = server.server_address[1]
    assert request(port, "/api/overview")[0] == 401
    assert request(port, "/")[0] == 200  # the page itself holds no data
    auth = {"Authorization": f"Bearer {server.token}"}
    assert request(port, "/api/overview", **auth)[0] == 200


def _limits_with(**changes):
    original = http_guard.Limits.__init__

    def init(self, *args, **kwargs):
        original(self, *args, **{**kwargs, **changes})
    return init


def _metrics(*args: str, env: dict | None = None) -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen([sys.executable, "-m", "dhp.cli.main", "metrics", *args],
                            stderr=subprocess.PIPE, text=True, env=env)
    line = proc.stderr.readline()
    match = re.search(r":(\d+)/metrics", line)
    if match is None:
        proc.kill()
        raise AssertionError(f"no address in {line!r}{proc.stderr.read()}")
    return proc, int(match.group(1))


@pytest.mark.covers("DHP-SEC-006", "DHP-SEC-009")
def test_metrics_server_checks_host_and_needs_a_token_off_loopback(tmp_path):
    pytest.importorskip("prometheus_client", reason="metrics need the otel extra")
    store = tmp_path / "store"
    dhp.Store(store)
    proc, port = _metrics("--store", str(store), "--serve", "127.0.0.2:0")
    try:
        assert request(port, "/metrics", "127.0.0.2")[0] == 200
        assert request(port, "/metrics", "127.0.0.2", Host="evil.example")[0] == 403
    finally:
        proc.kill()
        proc.wait()
    env = {k: v for k, v in os.environ.items() if k != "DHP_METRICS_TOKEN"}
    refused = subprocess.run([sys.executable, "-m", "dhp.cli.main", "metrics", "--store",
                              str(store), "--serve", "0.0.0.0:0"], capture_output=True,
                             text=True, timeout=60, env=env)
    assert refused.returncode == 2 and "bearer token" in refused.stderr
    token = "metrics-token-0123456789"
    proc, port = _metrics("--store", str(store), "--serve", "0.0.0.0:0",
                          env=dict(env, DHP_METRICS_TOKEN=token))
    try:
        assert request(port, "/metrics")[0] == 401
        status, body = request(port, "/metrics", Authorization=f"Bearer {token}")
        assert status == 200 and b"dhp_" in body
    finally:
        proc.kill()
        proc.wait()
