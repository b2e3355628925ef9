"""Serving an ASGI app (dhp-mcp, dhp-a2a) with uvicorn under DHP's one bar for servers:
connections capped in total and per client address, a request's headers received within the
read timeout, idle keep-alive connections closed, and every request through `Guard`
(dhp.transport.http_guard). Needs uvicorn (the `mcp` and `a2a` extras bring it)."""

from __future__ import annotations

import asyncio
import json
import socket
from collections import Counter
from typing import Any

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from dhp.transport.http_guard import Access, Guard, Limits

REFUSED_LINGER_S = 0.5
REFUSED = (b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
           b"connection: close\r\ncontent-length: %d\r\n\r\n%s")


def guarded_protocol(limits: Limits) -> type[H11Protocol]:
    """An h11 protocol class that counts its connections and times out slow requests."""
    per_address: Counter[str] = Counter()

    class Guarded(H11Protocol):
        counted: str | None = None
        refused = False

        def connection_made(self, transport: Any) -> None:  # type: ignore[override]
            peer = transport.get_extra_info("peername")
            address = peer[0] if peer else "?"
            total = sum(per_address.values())
            why = (f"too many connections (max_connections {limits.max_connections})"
                   if total >= limits.max_connections else
                   f"too many connections from {address} (max_connections_per_address "
                   f"{limits.max_connections_per_address})"
                   if per_address[address] >= limits.max_connections_per_address else None)
            if why is not None:
                self.refused = True
                body = json.dumps({"error": why}).encode()
                transport.write(REFUSED % (len(body), body))
                # Close our side only after the client's request has had time to arrive:
                # closing with it unread would reset the connection, losing the answer.
                if transport.can_write_eof():
                    transport.write_eof()
                asyncio.get_running_loop().call_later(REFUSED_LINGER_S, transport.close)
                return
            self.counted = address
            per_address[address] += 1
            super().connection_made(transport)
            self._arm_read_timeout()

        def data_received(self, data: bytes) -> None:
            if not self.refused:  # a refused client's request is read and dropped
                super().data_received(data)

        def connection_lost(self, exc: Exception | None) -> None:
            if self.counted is None:
                return
            per_address[self.counted] -= 1
            if not per_address[self.counted]:
                del per_address[self.counted]
            self.counted = None
            super().connection_lost(exc)

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._arm_read_timeout()

        def _arm_read_timeout(self) -> None:
            # A connection whose next request has not begun (its headers complete) within
            # the read timeout is closed: a client trickling headers holds nothing for long.
            waiting_on = self.cycle

            def check() -> None:
                if self.cycle is waiting_on and not self.transport.is_closing():
                    self.transport.close()

            self.loop.call_later(limits.read_timeout, check)

    return Guarded


def serve(app: Any, sock: socket.socket, access: Access, limits: Limits, *,
          lifespan: str = "auto") -> None:
    """Serve `app` behind the guard on the bound socket until stopped (SIGINT/SIGTERM)."""
    guarded = Guard(app, access, limits)
    config = uvicorn.Config(guarded, log_level="warning", lifespan=lifespan,
                            http=guarded_protocol(limits), timeout_keep_alive=int(
                                max(1, limits.idle_timeout)),
                            h11_max_incomplete_event_size=64 * 1024)
    server = uvicorn.Server(config)
    asyncio.run(server.serve(sockets=[sock]))
