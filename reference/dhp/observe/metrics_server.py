"""`dhp metrics --serve`: Prometheus text at /metrics from the standard library's server,
held to the bar of every DHP server (dhp.transport.http_threaded) rather than
prometheus_client's own server, which checks no Host and takes no credential."""

from __future__ import annotations

import threading

from dhp.transport.http_guard import Access, Limits
from dhp.transport.http_threaded import GuardedHandler, GuardedServer


class Handler(GuardedHandler):
    def do_GET(self) -> None:  # noqa: N802 (the http.server interface)
        if self.admit() is None:
            return
        if self.path.split("?")[0] != "/metrics":
            return self.send_json(404, {"error": f"no page {self.path}; the metrics are at "
                                                 "/metrics"})
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        self.send_body(200, generate_latest(), CONTENT_TYPE_LATEST)


def serve(host: str, port: int, access: Access) -> GuardedServer:
    """Serve /metrics in a background thread; returns the server."""
    server = GuardedServer((host, port), Handler, access, Limits())
    threading.Thread(target=server.serve_forever, daemon=True, name="dhp-metrics").start()
    return server
