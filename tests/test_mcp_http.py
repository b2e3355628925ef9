"""dhp-mcp across hosts (issue 22): on a folder and on a Postgres store, over stdio and
streamable HTTP, with real processes and kill -9; and the HTTP server held to the bar every
DHP server meets: Host and Origin checked on every loopback address, caps on sessions and
connections per client address, body and read-time limits, sessions bound to their
principal."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("mcp", reason="the MCP server tests need the mcp extra: pip install "
                                  "'durable-handoff[mcp]'")

import httpx2  # noqa: E402  (the SDK's HTTP client)
from mcp import Client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from mcp_agent import server  # noqa: E402

AGENT = Path(__file__).with_name("mcp_agent.py")
SCHEMA = {"type": "object", "required": ["total"], "properties": {"total": {"type": "integer"}}}
TIMEOUT = 60
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "test", "version": "1"}}}
HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, TIMEOUT * 2))


async def call(client: Client, tool: str, args: dict) -> tuple[bool, dict]:
    result = await client.call_tool(tool, args)
    return not result.is_error, result.structured_content


def start_http(root: str, *extra: str, host: str = "127.0.0.1",
               env: dict | None = None) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-m", "dhp.agents.mcp_cli", "--root", root,
                             "--create", "--http", f"{host}:0", *extra],
                            stderr=subprocess.PIPE, text=True, env=env)
    line = proc.stderr.readline()
    match = re.search(r"(http://\S+/mcp)", line)
    assert match, f"no address in {line!r}: {proc.stderr.read() if proc.poll() else ''}"
    return proc, match.group(1)


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def dispatched(location: str) -> str:
    import dhp

    return dhp.dispatch(dhp.Store(location), "k", {"n": time.time_ns() % 10**15}, SCHEMA)


def http_client(url: str, mode: str = "legacy", token: str | None = None) -> Client:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return Client(streamable_http_client(url, http_client=httpx2.AsyncClient(
        headers=headers, timeout=TIMEOUT)), mode=mode, read_timeout_seconds=TIMEOUT)


def start_agent(root: Path, hid: str, *flags: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(AGENT), str(root), hid, "first", "3", "--hold",
                             *flags], stdout=subprocess.PIPE, text=True)


def wait_checkpointed(agent: subprocess.Popen, n: int) -> None:
    for got in agent.stdout:
        if got.strip() == f"checkpointed {n}":
            return
    raise AssertionError(f"the agent ended before checkpoint {n}")


async def recover_after_kill(client: Client, hid: str, pid: int, seconds: float):
    """Kill `pid`, then retry recover every 20 ms from the kill on: (seconds taken, reply)."""
    await call(client, "health", {})
    killed_at = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    while True:
        ok, got = await call(client, "recover", {"handoff_id": hid, "worker_id": "standby"})
        took = time.monotonic() - killed_at
        if ok or took > seconds:
            return took, got
        await asyncio.sleep(0.02)


@pytest.mark.covers("DHP-MCP-007")
def test_stdio_agent_on_either_store_is_recovered_after_kill(store_location, tmp_path):
    """dhp-mcp over stdio on a folder and on a postgresql:// URL (it died at start on a URL):
    an agent kill -9'd after three checkpoints is recovered from checkpoint 3, lease TTL
    30 s, long before the TTL."""
    hid = dispatched(store_location)
    agent = start_agent(tmp_path, hid, "--store", store_location)
    try:
        wait_checkpointed(agent, 3)

        async def go():
            async with Client(server(store_location, ttl=30.0),
                              read_timeout_seconds=TIMEOUT) as standby:
                return await recover_after_kill(standby, hid, agent.pid, 25.0)
        took, got = run(go())
    finally:
        agent.kill()
        agent.wait()
    assert "lease" in got, got
    assert took < 25.0 and got["last_checkpoint"] == {"step": 3}


@pytest.mark.covers("DHP-MCP-020", "DHP-MCP-021")
@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_http_agent_killed_is_recovered_without_waiting_for_its_lease(store_location,
                                                                        tmp_path, mode):
    """An agent over streamable HTTP holding a lease (TTL 60 s) is kill -9'd. With an event
    stream open (legacy, stateful sessions) the server sees the stream close and frees the
    lease at once; without one (the 2026 era's stateless requests) after --agent-timeout (3 s
    here). Before, the server kept heartbeating the dead agent's lease for 600 s."""
    hid = dispatched(store_location)
    proc, url = start_http(store_location, "--ttl", "60", "--agent-timeout", "3")
    agent = start_agent(tmp_path, hid, "--url", url, "--mode", mode)
    try:
        wait_checkpointed(agent, 3)

        async def go():
            async with http_client(url, mode) as standby:
                return await recover_after_kill(standby, hid, agent.pid, 30.0)
        took, got = run(go())
    finally:
        agent.kill()
        agent.wait()
        stop(proc)
    assert "lease" in got, f"not recovered within 30 s of the kill: {got}"
    assert got["last_checkpoint"] == {"step": 3}
    assert took < 30.0


def _initialize(url: str, **headers: str) -> httpx2.Response:
    return httpx2.post(url, json=INIT, headers={**HEADERS, **headers}, timeout=TIMEOUT)


@pytest.mark.covers("DHP-SEC-006")
@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2"])
def test_every_loopback_address_checks_host_and_origin(tmp_path, host):
    """DNS rebinding: a page of evil.example whose name resolves to a loopback address reaches
    the server with `Host: evil.example`. On 127.0.0.2 there was no check at all."""
    proc, url = start_http(str(tmp_path / "store"), host=host)
    try:
        port = url.split(":")[2].split("/")[0]
        evil = _initialize(url, Host=f"evil.example:{port}")
        assert evil.status_code == 403 and "Host" in evil.json()["error"]
        origin = _initialize(url, Origin="http://evil.example")
        assert origin.status_code == 403 and "Origin" in origin.json()["error"]
        assert _initialize(url, Origin=f"http://{host}:{port}").status_code == 200
        assert _initialize(url, Host=f"localhost:{port}").status_code == 200
    finally:
        stop(proc)


@pytest.mark.covers("DHP-SEC-007")
def test_sessions_are_capped_per_address_and_freed_by_delete(tmp_path):
    proc, url = start_http(str(tmp_path / "store"), "--max-sessions-per-address", "3")
    try:
        opened = [_initialize(url) for _ in range(3)]
        assert all(r.status_code == 200 for r in opened)
        refused = _initialize(url)
        assert refused.status_code == 429
        assert "max_sessions_per_address 3" in refused.json()["error"]["message"]
        sid = opened[0].headers["mcp-session-id"]
        gone = httpx2.delete(url, headers={**HEADERS, "Mcp-Session-Id": sid}, timeout=TIMEOUT)
        assert gone.status_code in (200, 204)
        assert _initialize(url).status_code == 200
    finally:
        stop(proc)


@pytest.mark.covers("DHP-SEC-007")
def test_idle_sessions_hold_no_descriptors(tmp_path):
    """Each session used to open its own store (about two descriptors for 600 s); 500 idle
    sessions exhausted `ulimit -n 1024`. Sessions now share the server's store."""
    proc, url = start_http(str(tmp_path / "store"), "--max-sessions-per-address", "200",
                           "--max-sessions", "200")
    try:
        def fds() -> int:
            return len(os.listdir(f"/proc/{proc.pid}/fd"))

        with httpx2.Client(timeout=TIMEOUT) as http:
            def health(sid: str) -> None:
                body = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                        "params": {"name": "health", "arguments": {}}}
                r = http.post(url, json=body, headers={**HEADERS, "Mcp-Session-Id": sid})
                assert r.status_code == 200, r.text
            first = http.post(url, json=INIT, headers=HEADERS).headers["mcp-session-id"]
            health(first)
            before = fds()
            for _ in range(100):
                health(http.post(url, json=INIT, headers=HEADERS).headers["mcp-session-id"])
            after = fds()
        assert after - before < 20, f"{after - before} descriptors for 100 idle sessions"
    finally:
        stop(proc)


@pytest.mark.covers("DHP-SEC-008")
def test_bodies_and_slow_requests_are_bounded(tmp_path):
    proc, url = start_http(str(tmp_path / "store"), "--read-timeout", "1")
    try:
        big = httpx2.post(url, content=b"x" * (4 * 1024 * 1024 + 1), headers=HEADERS,
                          timeout=TIMEOUT)
        assert big.status_code == 413 and "max_body" in big.json()["error"]
        port = int(url.split(":")[2].split("/")[0])
        with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as slow:
            slow.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # and never the rest
            started = time.monotonic()
            assert slow.recv(1024) == b""  # closed by the server
            assert time.monotonic() - started < 30
    finally:
        stop(proc)


@pytest.mark.covers("DHP-SEC-009")
def test_a_session_answers_only_the_principal_that_opened_it(tmp_path):
    tokens = tmp_path / "tokens"
    tokens.write_text("alice-token-0123456789\nbob-token-0123456789ab\n")
    proc, url = start_http(str(tmp_path / "store"), "--token-file", str(tokens))
    try:
        alice = _initialize(url, Authorization="Bearer alice-token-0123456789")
        sid = alice.headers["mcp-session-id"]
        ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
        as_bob = httpx2.post(url, json=ping, timeout=TIMEOUT, headers={
            **HEADERS, "Mcp-Session-Id": sid, "Authorization": "Bearer bob-token-0123456789ab"})
        assert as_bob.status_code == 404
        as_alice = httpx2.post(url, json=ping, timeout=TIMEOUT, headers={
            **HEADERS, "Mcp-Session-Id": sid, "Authorization": "Bearer alice-token-0123456789"})
        assert as_alice.status_code == 200
        assert _initialize(url).status_code == 401
    finally:
        stop(proc)


@pytest.mark.covers("DHP-MCP-020")
def test_an_agent_timeout_over_ten_seconds_is_refused(tmp_path):
    refused = subprocess.run([sys.executable, "-m", "dhp.agents.mcp_cli", "--root",
                              str(tmp_path / "store"), "--create", "--http", "127.0.0.1:0",
                              "--agent-timeout", "30"], capture_output=True, text=True,
                             timeout=TIMEOUT)
    assert refused.returncode == 2 and "DHP-MCP-020" in refused.stderr
