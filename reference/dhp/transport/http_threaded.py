"""The standard library's threaded HTTP server (the dashboard, `dhp metrics --serve`) held to
the same bar as the ASGI servers (dhp.transport.http_guard): connections capped in total and
per client address, a request cut off when it has not arrived within the read timeout, the
body limit, and `Access` (Host, Origin, token) asked for every request."""

from __future__ import annotations

import json
import socket
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from dhp.transport.http_guard import Access, Decision, Limits


class GuardedServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: type[GuardedHandler],
                 access: Access, limits: Limits):
        super().__init__(address, handler)
        self.access, self.limits = access, limits
        self._open: Counter[str] = Counter()
        self._mutex = threading.Lock()

    def process_request(self, request: Any, client_address: Any) -> None:
        address = client_address[0]
        with self._mutex:
            why = (f"too many connections (max_connections {self.limits.max_connections})"
                   if sum(self._open.values()) >= self.limits.max_connections else
                   f"too many connections from {address} (max_connections_per_address "
                   f"{self.limits.max_connections_per_address})"
                   if self._open[address] >= self.limits.max_connections_per_address else None)
            if why is None:
                self._open[address] += 1
        if why is not None:
            body = json.dumps({"error": why}).encode()
            try:
                request.sendall(b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: "
                                b"application/json\r\nconnection: close\r\ncontent-length: "
                                + str(len(body)).encode() + b"\r\n\r\n" + body)
                # Read what of the request has arrived: closing with it unread would reset
                # the connection and lose the answer. No waiting: this is the accept loop.
                while request.recv(65536, socket.MSG_DONTWAIT):
                    pass
            except OSError:
                pass
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._mutex:
                self._open[client_address[0]] -= 1
                if not self._open[client_address[0]]:
                    del self._open[client_address[0]]


class GuardedHandler(BaseHTTPRequestHandler):
    """A handler whose requests must arrive within the read timeout; `admit()` asks Access
    and the body limit, answering the refusal itself."""

    server: GuardedServer

    def log_message(self, format: str, *args: Any) -> None:
        pass  # one line per poll would drown the terminal

    def handle_one_request(self) -> None:
        # A socket timeout bounds one recv, not a request trickled a byte at a time: the
        # timer cuts the connection when the whole request is not in by the deadline.
        self._cut = threading.Timer(self.server.limits.read_timeout, self._shut)
        self._cut.daemon = True
        self._cut.start()
        try:
            super().handle_one_request()
        finally:
            self._cut.cancel()

    def _shut(self) -> None:
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def admit(self, *, token_optional: bool = False) -> Decision | None:
        """The decision for this request, or None after answering its refusal.
        `token_optional`: pages that hold no data (the dashboard's static files) are served
        without the token, never without the Host and Origin checks."""
        self._cut.cancel()  # the request line and headers are in
        decision = self.server.access.admit(
            self.headers.get("Host"), self.headers.get("Origin"),
            self.headers.get("Authorization", "").encode("latin-1") or None)
        if decision.status == 401 and token_optional:
            decision = Decision(200)
        if decision.status != 200:
            self.send_json(decision.status, {"error": decision.message})
            return None
        length = self.headers.get("Content-Length", "0")
        if not length.isdigit() or int(length) > self.server.limits.max_body:
            self.send_json(413, {"error": f"the request body is larger than "
                                          f"{self.server.limits.max_body} bytes (max_body)"})
            return None
        return decision

    def send_body(self, code: int, body: bytes, content_type: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        if code == 401:
            self.send_header("WWW-Authenticate", f'Bearer realm="{self.server.access.realm}"')
        self.end_headers()
        self.wfile.write(body)

    def send_json(self, code: int, obj: Any) -> None:
        self.send_body(code, json.dumps(obj, allow_nan=False).encode(), "application/json")
