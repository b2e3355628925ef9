"""`dhp-mcp`: the DHP MCP server. Over stdio by default (the client starts it as a subprocess:
one process, one session); `--http HOST:PORT` serves the SDK's streamable HTTP transport, one
session per MCP session id, with a bearer token required off loopback, the Host and Origin
checked on loopback, and caps on connections, open requests and sessions (in total and per
client address).

Over HTTP an agent is alive while its event stream (the GET the official clients keep open)
is open; when it closes, the agent's leases are recoverable at once. A client that keeps no
stream open must call a tool at least every --agent-timeout seconds (DHP-MCP-020).

Exit codes: the table every DHP command shares (dhp.core.exit_codes; --help shows it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import select
import signal
import socket
import sys
import threading
import time
from typing import Any

from dhp.agents.mcp_sessions import AgentSession, SessionTable
from dhp.core.errors import DHPError
from dhp.core.exit_codes import EXIT_MEANINGS, epilog, exit_code
from dhp.transport import http_guard

DEFAULT_SESSION_TIMEOUT = 600.0
DEFAULT_AGENT_TIMEOUT = 8.0  # DHP-MCP-020's bound for a session without an event stream
MAX_AGENT_TIMEOUT = 10.0     # the most DHP-MCP-020 allows
REAP_S = 0.25
TOKEN_ENV = "DHP_MCP_TOKEN"


EPILOG = epilog(
    ["dhp init --store ./dhp-data && dhp-mcp --root ./dhp-data     # what an MCP client starts",
     "dhp-mcp --root 'postgresql://dhp@db/jobs?schema=dhp' --ttl 30",
     "DHP_MCP_TOKEN=... dhp-mcp --root ./dhp-data --http 0.0.0.0:8471",
     "dhp-mcp --root ./dhp-data --create --http 127.0.0.1:0"],
    {**EXIT_MEANINGS, 0: "the client closed the session (stdio), or SIGTERM/SIGINT"})


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="dhp-mcp", description=__doc__.split("\n\nExit")[0],
                                epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", "--store", dest="root", required=True, metavar="PATH",
                   help="the store: a folder (SQLite) or a postgresql:// URL; it must exist "
                        "(`dhp init`) unless --create")
    p.add_argument("--create", action="store_true",
                   help="create the store if there is none (default: refuse a missing store)")
    p.add_argument("--ttl", type=float, help="default lease length in seconds (store default 5)")
    p.add_argument("--http", metavar="HOST:PORT",
                   help="serve streamable HTTP at http://HOST:PORT/mcp instead of stdio "
                        "(port 0 picks a free one; the address is printed on stderr)")
    http = p.add_argument_group("streamable HTTP (--http)")
    http_guard.add_access_options(http, TOKEN_ENV)
    http.add_argument("--agent-timeout", type=http_guard.positive_seconds,
                      default=DEFAULT_AGENT_TIMEOUT,
                      help="a session with no open event stream and no request for this many "
                           "seconds counts as a dead agent: its leases become recoverable "
                           f"(default {DEFAULT_AGENT_TIMEOUT:g}, at most "
                           f"{MAX_AGENT_TIMEOUT:g})")
    http.add_argument("--session-timeout", type=http_guard.positive_seconds,
                      default=DEFAULT_SESSION_TIMEOUT,
                      help="the server forgets a session unused for this many seconds "
                           f"(default {DEFAULT_SESSION_TIMEOUT:g})")
    for name, default, what in (
            ("max-sessions", 256, "MCP sessions open at once"),
            ("max-sessions-per-address", 64, "MCP sessions open at once from one address")):
        http.add_argument(f"--{name}", type=http_guard.positive_int, default=default,
                          metavar="N", help=f"the most {what} (default {default})")
    http_guard.add_limit_options(http, "open requests and event streams")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        import mcp  # noqa: F401 - the SDK is an extra: say so rather than fail on an import
    except ImportError:
        print("dhp-mcp: the MCP server needs the official MCP SDK: install durable-handoff "
              "with the mcp extra, e.g. pip install '.[mcp]' in a clone", file=sys.stderr)
        return 2
    try:
        from dhp.observe import otel_env
        from dhp.store import Store

        # exporters from OTEL_* variables, if set; not the console on a stdio session
        otel_env.configure("dhp-mcp", stdout_free=bool(args.http))
        # Before serving: a mistyped --root is not_found, never a new empty store.
        store = Store(args.root, create=args.create, **({"ttl": args.ttl} if args.ttl else {}))
        if args.http:
            return serve_http(args, store)
        return serve_stdio(store)
    except DHPError as exc:
        print(f"dhp-mcp: error: {exc}", file=sys.stderr)
        return exit_code(exc)


# --- stdio ----------------------------------------------------------------------------------

def serve_stdio(store: Any) -> int:
    """One client, one session: it ends when the client closes stdin (or dies), and on
    SIGTERM; then its leases become recoverable at once (DHP-MCP-007)."""
    import anyio
    from mcp.server.stdio import stdio_server

    from dhp.agents import mcp_server

    session = AgentSession(store)
    server = mcp_server.build(lambda ctx, purpose, arguments: (session, _nothing))
    # The client's end of stdin closing is the session's end: seen by a thread at once,
    # rather than after the SDK's loop has wound down (DHP-MCP-007).
    threading.Thread(target=_end_on_hangup, args=(os.dup(0), session), daemon=True,
                     name="dhp-stdin-watch").start()

    async def run() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        anyio.run(run)
    finally:
        session.end()
        store.close()
    return 0


def _nothing() -> None:
    pass


def _end_on_hangup(fd: int, session: AgentSession) -> None:
    """End the session when the writer of stdin is gone (a pipe's POLLHUP). Registered with
    no events, poll wakes only for hangup or error, never for data, which the SDK reads."""
    poller = select.poll()
    poller.register(fd, 0)
    while True:
        for _, events in poller.poll():
            if events & select.POLLNVAL:
                return  # not a pipe we can watch: the end of the SDK's loop ends the session
            if events & (select.POLLHUP | select.POLLERR):
                session.end()
                return


def _exit_on_sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


# --- streamable HTTP -------------------------------------------------------------------------

def serve_http(args: argparse.Namespace, store: Any) -> int:
    from mcp.server.transport_security import TransportSecuritySettings

    from dhp.agents import mcp_server
    from dhp.transport import http_serve

    host, _, port = args.http.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        print(f"dhp-mcp: --http wants HOST:PORT, not {args.http!r}", file=sys.stderr)
        return 2
    if args.agent_timeout > MAX_AGENT_TIMEOUT:
        print(f"dhp-mcp: --agent-timeout {args.agent_timeout:g} is over {MAX_AGENT_TIMEOUT:g} "
              "s: a dead agent's lease may not be held longer (DHP-MCP-020)", file=sys.stderr)
        return 2
    try:
        access = http_guard.access_from(args, host, TOKEN_ENV, "dhp-mcp")
    except DHPError as exc:
        print(f"dhp-mcp: {exc}", file=sys.stderr)
        return 2
    table = SessionTable(store, agent_timeout=args.agent_timeout)
    limits = http_guard.limits_from(args)

    def locate(ctx: Any, purpose: str, arguments: Any):
        request = getattr(ctx, "request", None)
        sid = request.headers.get("mcp-session-id") if request is not None else None
        session = table.for_call(sid, purpose, arguments)
        return session, lambda: table.done_with(session)

    server = mcp_server.build(locate)
    app = server.streamable_http_app(
        host=host, session_idle_timeout=args.session_timeout, max_sessions=args.max_sessions,
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False))
    sessions = Sessions(table, max_total=args.max_sessions,
                        max_per_address=args.max_sessions_per_address,
                        timeout=args.session_timeout)
    sock = socket.create_server((host, int(port)),
                                family=socket.AF_INET6 if ":" in host else socket.AF_INET)
    bound = sock.getsockname()
    shown = f"[{bound[0]}]" if ":" in bound[0] else bound[0]
    print(f"dhp-mcp: serving MCP at http://{shown}:{bound[1]}/mcp", file=sys.stderr,
          flush=True)
    stop = threading.Event()
    threading.Thread(target=_reap, args=(table, sessions, stop), daemon=True,
                     name="dhp-reaper").start()
    try:
        http_serve.serve(Gate(app, sessions), sock, access, limits, lifespan="on")
    finally:
        stop.set()
        table.end_all()
        store.close()
    return 0


def _reap(table: SessionTable, sessions: Sessions, stop: threading.Event) -> None:
    while not stop.wait(REAP_S):
        table.reap()
        sessions.expire()


class Sessions:
    """The MCP sessions the SDK holds for clients, as far as caps and ownership go: which
    client address and principal opened each, when it was last used. A session id presented
    by another principal is unknown (a session id is not a credential)."""

    def __init__(self, table: SessionTable, *, max_total: int, max_per_address: int,
                 timeout: float):
        self.table, self.timeout = table, timeout
        self.max_total, self.max_per_address = max_total, max_per_address
        self._open: dict[str, tuple[str, str]] = {}   # sid -> (address, principal)
        self._seen: dict[str, float] = {}
        self._mutex = threading.Lock()

    def refusal(self, address: str) -> tuple[int, str] | None:
        """Why a new session from `address` may not open now, or None."""
        with self._mutex:
            if len(self._open) >= self.max_total:
                return 503, f"too many MCP sessions (max_sessions {self.max_total})"
            if sum(a == address for a, _ in self._open.values()) >= self.max_per_address:
                return 429, (f"too many MCP sessions from {address} (max_sessions_per_address "
                             f"{self.max_per_address}); end unused ones with DELETE")
        return None

    def opened(self, sid: str, address: str, principal: str) -> None:
        with self._mutex:
            self._open[sid] = (address, principal)
            self._seen[sid] = time.monotonic()

    def belongs(self, sid: str, principal: str) -> bool:
        with self._mutex:
            owner = self._open.get(sid)
            if owner is not None:
                self._seen[sid] = time.monotonic()
            return owner is None or owner[1] == principal

    def closed(self, sid: str) -> None:
        with self._mutex:
            self._open.pop(sid, None)
            self._seen.pop(sid, None)
        self.table.end(f"mcp:{sid}")

    def expire(self) -> None:
        """Forget sessions unused for the session timeout (the SDK forgets them too)."""
        cutoff = time.monotonic() - self.timeout
        with self._mutex:
            old = [sid for sid, seen in self._seen.items() if seen < cutoff]
        for sid in old:
            self.closed(sid)


class Gate:
    """ASGI app behind the guard: session caps and ownership, and the signs of an agent's
    life the SDK does not report: each request of a session, its event streams (GET) opening
    and closing, and its end (DELETE with its Mcp-Session-Id)."""

    def __init__(self, app: Any, sessions: Sessions):
        self.app, self.sessions = app, sessions

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or [])
        raw = headers.get(b"mcp-session-id")
        sid = raw.decode("latin-1") if raw else None
        principal = scope.get("dhp.principal", "")
        address = (scope.get("client") or ("?", 0))[0]
        if sid is None and scope["method"] == "POST":
            refused = self.sessions.refusal(address)
            if refused is not None:
                return await _refuse(send, *refused)
        if sid is not None and not self.sessions.belongs(sid, principal):
            return await _refuse(send, 404, "no such MCP session for this client")
        send = self._watching(send, address, principal) if sid is None else send
        key = f"mcp:{sid}"
        if sid is None:
            return await self.app(scope, receive, send)
        table = self.sessions.table
        table.touch(key)
        stream = scope["method"] == "GET"
        if stream:
            table.stream_opened(key)
        try:
            await self.app(scope, receive, send)
        finally:
            if stream:
                await asyncio.to_thread(table.stream_closed, key)
            if scope["method"] == "DELETE":
                await asyncio.to_thread(self.sessions.closed, sid)

    def _watching(self, send: Any, address: str, principal: str) -> Any:
        """send() that registers the session id the SDK hands a new client."""
        async def watching(message: dict) -> None:
            if message["type"] == "http.response.start":
                for name, value in message.get("headers") or []:
                    if name.lower() == b"mcp-session-id":
                        self.sessions.opened(value.decode("latin-1"), address, principal)
            await send(message)
        return watching


async def _refuse(send: Any, status: int, message: str) -> None:
    body = json.dumps({"jsonrpc": "2.0", "id": None,
                       "error": {"code": -32000, "message": message}}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


if __name__ == "__main__":
    sys.exit(main())
