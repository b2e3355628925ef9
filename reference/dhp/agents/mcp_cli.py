"""`dhp-mcp`: the DHP MCP server. Over stdio by default (the client starts it as a subprocess:
one process, one session); `--http HOST:PORT` serves the SDK's streamable HTTP transport, one
session per MCP session id, with a bearer token required off loopback.

Exit codes: the table every DHP command shares (dhp.core.exit_codes; --help shows it).
"""

from __future__ import annotations

import argparse
import asyncio
import hmac
import ipaddress
import os
import select
import signal
import socket
import sys
import threading
from pathlib import Path
from typing import Any

from dhp.agents.mcp_sessions import AgentSession, SessionTable
from dhp.core.errors import DHPError
from dhp.core.exit_codes import EXIT_MEANINGS, epilog, exit_code

DEFAULT_SESSION_TIMEOUT = 600.0
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
    p.add_argument("--token-file", type=Path,
                   help=f"bearer token for --http (or the environment variable {TOKEN_ENV}); "
                        "required unless HOST is a loopback address")
    p.add_argument("--session-timeout", type=float, default=DEFAULT_SESSION_TIMEOUT,
                   help="--http: a session with no request for this many seconds ends and its "
                        f"leases become recoverable (default {DEFAULT_SESSION_TIMEOUT:g})")
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
        from dhp.store import Store

        # Before serving: a mistyped --root is not_found, never a new empty store.
        Store(args.root, create=args.create).close()
        if args.http:
            return serve_http(args)
        return serve_stdio(args.root, args.ttl)
    except DHPError as exc:
        print(f"dhp-mcp: error: {exc}", file=sys.stderr)
        return exit_code(exc)


# --- stdio ----------------------------------------------------------------------------------

def serve_stdio(root: str, ttl: float | None) -> int:
    """One client, one session: it ends when the client closes stdin (or dies), and on
    SIGTERM; then its leases become recoverable at once (DHP-MCP-007)."""
    import anyio
    from mcp.server.stdio import stdio_server

    from dhp.agents import mcp_server

    session = AgentSession(root, ttl=ttl)
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

def serve_http(args: argparse.Namespace) -> int:
    import uvicorn

    from dhp.agents import mcp_server

    host, _, port = args.http.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    if not port.isdigit():
        print(f"dhp-mcp: --http wants HOST:PORT, not {args.http!r}", file=sys.stderr)
        return 2
    token = _token(args.token_file)
    if token is None and not _loopback(host):
        print(f"dhp-mcp: serving on {host}, off loopback, needs a bearer token: give "
              f"--token-file FILE or set {TOKEN_ENV}", file=sys.stderr)
        return 2
    if args.session_timeout <= 0:
        print("dhp-mcp: --session-timeout must be positive", file=sys.stderr)
        return 2
    table = SessionTable(args.root, ttl=args.ttl, idle_timeout=args.session_timeout)
    table.get("stateless").end()  # opens the store once, so a bad --root fails here

    def locate(ctx: Any, purpose: str, arguments: Any):
        request = getattr(ctx, "request", None)
        sid = request.headers.get("mcp-session-id") if request is not None else None
        session = table.for_call(sid, purpose, arguments)
        return session, lambda: table.done_with(session)

    server = mcp_server.build(locate)
    app = server.streamable_http_app(host=host, session_idle_timeout=args.session_timeout)
    gate = Gate(app, token, on_end=lambda sid: table.end(f"mcp:{sid}"))
    sock = socket.create_server((host, int(port)),
                                family=socket.AF_INET6 if ":" in host else socket.AF_INET)
    bound = sock.getsockname()
    shown = f"[{bound[0]}]" if ":" in bound[0] else bound[0]
    print(f"dhp-mcp: serving MCP at http://{shown}:{bound[1]}/mcp", file=sys.stderr,
          flush=True)
    stop = threading.Event()
    reaper = threading.Thread(target=_reap, args=(table, stop), daemon=True, name="dhp-reaper")
    reaper.start()
    uv = uvicorn.Server(uvicorn.Config(gate, log_level="warning", lifespan="on"))
    try:
        asyncio.run(uv.serve(sockets=[sock]))
    finally:
        stop.set()
        table.end_all()
    return 0


def _reap(table: SessionTable, stop: threading.Event) -> None:
    while not stop.wait(min(1.0, table.idle_timeout / 4)):
        table.reap()


def _token(path: Path | None) -> str | None:
    if path is not None:
        text = path.read_text(encoding="utf-8").strip()
        if not text:
            raise SystemExit(f"dhp-mcp: the token file {path} is empty")
        return text
    return os.environ.get(TOKEN_ENV) or None


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class Gate:
    """ASGI wrapper: the bearer token (when one is set) and the end of a session the client
    deletes (DELETE with its Mcp-Session-Id)."""

    def __init__(self, app: Any, token: str | None, on_end: Any):
        self.app, self.on_end = app, on_end
        self.expected = f"Bearer {token}".encode() if token else None

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or [])
        if self.expected is not None and not hmac.compare_digest(
                headers.get(b"authorization", b""), self.expected):
            await send({"type": "http.response.start", "status": 401,
                        "headers": [(b"content-type", b"application/json"),
                                    (b"www-authenticate", b'Bearer realm="dhp-mcp"')]})
            await send({"type": "http.response.body",
                        "body": b'{"error":"a valid bearer token is required"}'})
            return
        await self.app(scope, receive, send)
        sid = headers.get(b"mcp-session-id")
        if scope.get("method") == "DELETE" and sid:
            await asyncio.to_thread(self.on_end, sid.decode("latin-1"))


if __name__ == "__main__":
    sys.exit(main())
