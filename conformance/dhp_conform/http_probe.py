"""Plain HTTP requests to a server under test, for the rules an SDK client hides: status codes,
the Host and Origin headers the kit chooses, a body too large, a request that never ends.
Standard library only (http.client, socket), so nothing rewrites what the kit sends."""

from __future__ import annotations

import http.client
import json
import select
import socket
import time
from dataclasses import dataclass

PATH = "/mcp"
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "dhp-conform", "version": "1"}}}
PING = {"jsonrpc": "2.0", "id": 2, "method": "ping"}


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: str

    def __str__(self) -> str:
        return f"HTTP {self.status} {self.body[:200]!r}"


def post(host: str, port: int, message: dict, *, host_header: str | None = None,
         headers: dict[str, str] | None = None, timeout: float = 15.0) -> Answer:
    """POST one JSON-RPC message to /mcp with exactly the Host header given."""
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        body = json.dumps(message).encode()
        conn.putrequest("POST", PATH, skip_host=True, skip_accept_encoding=True)
        sent = {"Host": host_header or f"{host}:{port}",
                "Accept": "application/json, text/event-stream",
                "Content-Type": "application/json", "Content-Length": str(len(body)),
                **(headers or {})}
        for name, value in sent.items():
            conn.putheader(name, value)
        conn.endheaders(body)
        response = conn.getresponse()
        text = response.read(65536).decode("utf-8", "replace")
        return Answer(response.status, {k.lower(): v for k, v in response.getheaders()}, text)
    finally:
        conn.close()


def open_session(host: str, port: int, token: str | None = None) -> tuple[Answer, str | None]:
    """initialize: the answer and the session id the server gave (None if none)."""
    answer = post(host, port, INIT, headers=bearer(token))
    return answer, answer.headers.get("mcp-session-id")


def in_session(host: str, port: int, sid: str, token: str | None = None) -> Answer:
    """A ping within session `sid`."""
    return post(host, port, PING, headers={"Mcp-Session-Id": sid,
                                           "Mcp-Protocol-Version": "2025-06-18",
                                           **bearer(token)})


def bearer(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


def oversized(host: str, port: int, size: int, send: int, token: str | None = None,
              timeout: float = 15.0) -> str:
    """Announce a body of `size` bytes, send only `send` of them, and return the status line
    the server answers with (a server that must read the body whole never answers)."""
    head = (f"POST {PATH} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
            f"Accept: application/json, text/event-stream\r\nContent-Length: {size}\r\n"
            + "".join(f"{k}: {v}\r\n" for k, v in bearer(token).items()) + "\r\n")
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(head.encode())
        try:
            s.sendall(b" " * send)
        except OSError:
            pass  # the server may refuse and close before the part is sent: read its answer
        got = b""
        try:
            while b"\r\n" not in got:
                chunk = s.recv(4096)
                if not chunk:
                    break
                got += chunk
        except TimeoutError:
            return f"(no answer within {timeout:g} s)"
        except OSError as exc:
            return f"(connection broken: {exc})" if not got else got.split(b"\r\n")[0].decode()
    return got.split(b"\r\n")[0].decode("latin-1") if got else "(closed without an answer)"


def stalled(host: str, port: int, every: float, give_up: float) -> float | None:
    """Send a request's headers a byte every `every` seconds, never finishing them; the
    seconds until the server closed the connection, or None if still open after `give_up`."""
    start = time.monotonic()
    with socket.create_connection((host, port), timeout=give_up) as s:
        s.sendall(f"POST {PATH} HTTP/1.1\r\nHost: {host}:{port}\r\nX-Slow: ".encode())
        while time.monotonic() - start < give_up:
            readable, _, _ = select.select([s], [], [], every)
            if readable:
                try:
                    if not s.recv(4096):
                        return time.monotonic() - start
                except OSError:
                    return time.monotonic() - start
                continue  # an answer (408, say): the close follows
            try:
                s.sendall(b"a")
            except OSError:
                return time.monotonic() - start
    return None
