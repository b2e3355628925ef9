"""`dhp worker` exports its spans from the standard OTEL_* environment variables alone (no
code in the task module): to the console, and over OTLP/HTTP to a collector (a tiny one in
this test, on loopback); an idle worker exports no span."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import dhp
import pytest

pytest.importorskip("opentelemetry.sdk")

TASKS = '''
import dhp

@dhp.task("otel.echo", output_schema={"type": "object"})
def echo(ctx, inputs):
    ctx.checkpoint({"half": True})
    return {"echo": inputs}
'''


def worker(tmp_path, **env: str) -> subprocess.Popen:
    (tmp_path / "otel_tasks.py").write_text(TASKS)
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    return subprocess.Popen([sys.executable, "-m", "dhp.cli.main", "worker", "otel_tasks",
                             "--store", str(tmp_path / "store"), "--create"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=dict(clean, **env))


def finish(proc: subprocess.Popen) -> tuple[str, str]:
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    return out, err


def completed(store, hid: str) -> None:
    deadline = time.monotonic() + 60
    while dhp.status(store, hid)["state"] != "completed":
        assert time.monotonic() < deadline, dhp.status(store, hid)
        time.sleep(0.05)


def test_console_exporter_from_the_environment_shows_the_handoffs_spans(tmp_path):
    store = dhp.Store(tmp_path / "store")
    hid = dhp.dispatch(store, "otel.echo", {"n": 1}, {"type": "object"})
    proc = worker(tmp_path, OTEL_TRACES_EXPORTER="console", OTEL_METRICS_EXPORTER="none",
                  OTEL_SERVICE_NAME="unit-worker")
    completed(store, hid)
    out, err = finish(proc)
    assert "OpenTelemetry from the environment (traces: console; metrics: none)" in err
    spans = [json.loads(chunk) for chunk in split_json(out)]
    mine = [s for s in spans if s["context"]["trace_id"] == "0x" + hid[7:39]]
    assert {s["name"] for s in mine} >= {"dhp.claim_next", "dhp.checkpoint", "dhp.complete"}
    assert {s["resource"]["attributes"]["service.name"] for s in mine} == {"unit-worker"}
    assert len(spans) == len(mine)  # no root span of an idle wake


def test_an_idle_worker_exports_no_span(tmp_path):
    store = dhp.Store(tmp_path / "store")
    proc = worker(tmp_path, OTEL_TRACES_EXPORTER="console", OTEL_METRICS_EXPORTER="none")
    proc.stderr.readline()
    for _ in range(3):  # wakes: work announced, none of its kinds
        dhp.dispatch(store, "other.kind", {"n": time.time()}, {"type": "object"})
        store.announce_work()
        time.sleep(0.3)
    out, _err = finish(proc)  # the stop wakes its claim_next once more
    assert split_json(out) == []


def test_otlp_endpoint_alone_exports_over_http_to_a_collector(tmp_path):
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )

    got: list[tuple[str, bytes]] = []

    class Collector(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            got.append((self.path, self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Collector)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        store = dhp.Store(tmp_path / "store")
        hid = dhp.dispatch(store, "otel.echo", {"n": 2}, {"type": "object"})
        proc = worker(tmp_path, OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:"
                      f"{server.server_address[1]}", OTEL_METRICS_EXPORTER="none")
        completed(store, hid)
        _out, err = finish(proc)
    finally:
        server.shutdown()
    assert "traces: otlp_proto_http" in err
    names = set()
    for path, body in got:
        assert path == "/v1/traces"
        request = ExportTraceServiceRequest.FromString(body)
        names |= {span.name for rs in request.resource_spans for ss in rs.scope_spans
                  for span in ss.spans if span.trace_id.hex() == hid[7:39]}
    assert {"dhp.claim_next", "dhp.complete"} <= names


def test_an_unknown_exporter_is_a_usage_error(tmp_path):
    proc = worker(tmp_path, OTEL_TRACES_EXPORTER="nosuch")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert "OTEL_TRACES_EXPORTER: no installed exporter 'nosuch'" in err


def split_json(text: str) -> list[str]:
    """The console exporter's spans: indented JSON objects one after another."""
    chunks, depth, start = [], 0, None
    for i, ch in enumerate(text):  # spans hold no bare braces in strings here
        if ch == "{":
            depth, start = depth + 1, i if depth == 0 else start
        elif ch == "}":
            depth -= 1
            if depth == 0:
                chunks.append(text[start:i + 1])
    return chunks


def test_supervisor_exports_its_orphan_span_and_mcp_on_stdio_refuses_the_console(tmp_path):
    store = dhp.Store(tmp_path / "store")
    hid = dhp.dispatch(store, "otel.echo", {"n": 3}, {"type": "object"})
    dhp.claim(store, hid, "gone", heartbeat_interval=0, ttl=0.01)
    time.sleep(0.05)  # the lease expired: the supervisor orphans it
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env = dict(clean, OTEL_TRACES_EXPORTER="console", OTEL_METRICS_EXPORTER="none")
    sup = subprocess.run([sys.executable, "-m", "dhp.cli.main", "supervisor", "--store",
                          str(tmp_path / "store"), "--once"], capture_output=True, text=True,
                         env=env, timeout=60)
    assert sup.returncode == 0, sup.stderr
    names = {json.loads(c)["name"] for c in split_json(sup.stdout) if '"context"' in c}
    assert "dhp.supervisor.orphan" in names
    mcp = subprocess.run([sys.executable, "-m", "dhp.agents.mcp_cli", "--root",
                          str(tmp_path / "store")], capture_output=True, text=True, env=env,
                         timeout=60, stdin=subprocess.DEVNULL)
    assert mcp.returncode == 2 and "console would write into the protocol" in mcp.stderr
