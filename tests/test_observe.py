"""Observability: one trace per handoff across worker deaths (real SIGKILLs), metrics read back
through the OpenTelemetry SDK and scraped from the Prometheus endpoint, and zero cost without
OpenTelemetry. Each story runs in a process of its own (tests/helpers/otel_story.py): the
OpenTelemetry providers are process-wide. The dashboard in a real browser is in
tests/test_dashboard.py."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("opentelemetry.sdk", reason="tracing and metrics need the `otel` extra")

import dhp  # noqa: E402

STORY = Path(__file__).resolve().parent / "helpers" / "otel_story.py"


def story(*args: str, expect_kill: bool = False, window: str = "0") -> dict | None:
    env = dict(os.environ, DHP_TRACE_CHECKPOINT_WINDOW=window)
    proc = subprocess.run([sys.executable, str(STORY), *args], capture_output=True, text=True,
                          timeout=120, env=env)
    if expect_kill:
        assert proc.returncode == -signal.SIGKILL, proc.stderr
        return None
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_twice_killed_handoff_is_one_trace_with_three_attempts(tmp_path):
    store = tmp_path / "store"
    hid = dhp.dispatch(dhp.Store(store), "traced", {"n": 3}, {"type": "object"})
    spans = tmp_path / "spans.jsonl"
    story("worker", str(store), hid, "worker-1", str(spans), expect_kill=True)
    story("worker", str(store), hid, "worker-2", str(spans), expect_kill=True)
    out = story("finish", str(store), hid, str(spans))
    trace_id = hid[7:39]
    killed, finisher = out["killed"], out["finisher"]
    assert {s["trace_id"] for s in killed} == {"0x" + trace_id}
    assert {s["trace_id"] for s in finisher} == {trace_id}
    takes = [s["attributes"] for s in killed + finisher
             if s["name"] in ("dhp.claim", "dhp.recover")]
    assert [(t["dhp.attempt"], t["dhp.fence"], t["dhp.worker_id"]) for t in takes] == [
        (1, 1, "worker-1"), (2, 2, "worker-2"), (3, 3, "finisher")]
    seqs = [s["attributes"]["dhp.seq"] for s in killed + finisher
            if s["name"] == "dhp.checkpoint"]
    assert seqs == [1, 2, 3, 4, 5]
    assert [s["name"] for s in finisher][-1] == "dhp.complete"
    for span in killed + finisher:
        assert span["attributes"]["dhp.handoff_id"] == hid
        assert span["attributes"]["dhp.task_kind"] == "traced"


def test_checkpoints_of_a_lease_share_one_span_per_window(tmp_path):
    """The default: a span per lease per second of checkpoints, not one per checkpoint."""
    out = story("caller", str(tmp_path / "store"), window="60")
    (span,) = [s for s in out["spans"] if s["name"] == "dhp.checkpoint"]
    assert span["attributes"]["dhp.seq.first"] == 1
    assert span["attributes"]["dhp.seq"] == span["attributes"]["dhp.checkpoints"] == 3
    names = [s["name"] for s in out["spans"]]
    assert names.index("dhp.checkpoint") < names.index("dhp.complete")  # flushed first


def test_an_operation_inside_the_callers_span_keeps_its_parent_and_links(tmp_path):
    out = story("caller", str(tmp_path / "store"))
    claim = next(s for s in out["spans"] if s["name"] == "dhp.claim")
    assert claim["trace_id"] == out["mine"] and claim["parent"] == out["mine_span"]
    assert claim["links"] == [out["hid"][7:39]]  # and it still reaches the handoff's trace


def test_metrics_read_back_through_the_sdk(tmp_path):
    found = story("metrics", str(tmp_path / "store"))
    assert found['dhp.operations{"dhp.operation": "dispatch", "dhp.outcome": "ok"}'] == 3
    assert found['dhp.operations{"dhp.operation": "checkpoint", "dhp.outcome": '
                 '"budget_exceeded"}'] == 1
    assert found['dhp.operations{"dhp.operation": "checkpoint", "dhp.outcome": "ok"}'] == 2
    assert found["dhp.fence_bumps{}"] == 4
    assert found['dhp.failed_attempts{"dhp.error_type": "ValueError"}'] == 1
    assert found['dhp.failed_attempts{"dhp.error_type": "ConnectionError"}'] == 1
    assert found['dhp.budget_refusals{"dhp.cap": "max_steps"}'] == 1
    assert found['dhp.handoffs{"dhp.state": "pending"}'] == 1
    assert found['dhp.handoffs{"dhp.state": "claimed"}'] == 1
    assert found['dhp.handoffs{"dhp.state": "dead_lettered"}'] == 1
    assert found['dhp.leases{"dhp.lease": "live"}'] == 1
    assert found["dhp.dlq.depth{}"] == 1


def test_without_opentelemetry_nothing_is_wrapped_or_imported():
    out = story("bare")
    assert out == {"wrapped": False, "otel_modules": [], "state": "completed"}


def test_prometheus_endpoint_is_scraped(tmp_path):
    pytest.importorskip("prometheus_client", reason="the endpoint needs the `otel` extra")
    store = dhp.Store(tmp_path / "store")
    hid = dhp.dispatch(store, "scraped", {}, {"type": "object"})
    dhp.cancel(store, hid)
    dhp.dispatch(store, "scraped", {"n": 2}, {"type": "object"})
    proc = subprocess.Popen([sys.executable, "-m", "dhp.cli.main", "metrics", "--store",
                             str(tmp_path / "store"), "--serve", "127.0.0.1:0"],
                            stderr=subprocess.PIPE, text=True)
    try:
        url = re.search(r"http://\S+/metrics", proc.stderr.readline()).group(0)
        text = urllib.request.urlopen(url, timeout=30).read().decode()
    finally:
        proc.terminate()
        proc.wait(30)
    assert re.search(r'^dhp_handoffs\{dhp_state="pending"[^}]*\} 1\.0$', text, re.M), text
    assert re.search(r'^dhp_handoffs\{dhp_state="cancelled"[^}]*\} 1\.0$', text, re.M), text
    assert re.search(r"^dhp_dlq_depth(\{[^}]*\})? 0\.0$", text, re.M), text


def test_metrics_once_prints_prometheus_text(tmp_path):
    pytest.importorskip("prometheus_client", reason="needs the `otel` extra")
    dhp.dispatch(dhp.Store(tmp_path / "store"), "once", {}, {"type": "object"})
    proc = subprocess.run([sys.executable, "-m", "dhp.cli.main", "metrics", "--store",
                           str(tmp_path / "store")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert re.search(r'^dhp_handoffs\{dhp_state="pending"[^}]*\} 1\.0$', proc.stdout, re.M)


def killed_owner(store: dhp.StoreBackend, hid: str, ttl: float) -> None:
    """A worker process claims `hid` with lease `ttl`, heartbeating, and is SIGKILLed."""
    worker = Path(__file__).resolve().parent / "chaos_worker.py"
    proc = subprocess.Popen([sys.executable, str(worker), "hold", store.location, hid,
                             str(ttl)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().split()[0] == "claimed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(30)


def test_takeover_delay_after_real_sigkills_through_the_sdk_and_prometheus(tmp_path):
    """Owner A is SIGKILLed and orphaned by the supervisor (lost: owner_dead, at the orphan);
    owner B is SIGKILLed and nobody looks until its lease expires (lost: lease_expired, at
    the expiry). Then a standby takes both: the histogram holds one delay of each kind, at
    least as long as the test waited after each loss."""
    from dhp.supervisor import Supervisor

    store = dhp.Store(tmp_path / "store", ttl=1.0)
    a = dhp.dispatch(store, "takeover", {"n": "a"}, {"type": "object"})
    b = dhp.dispatch(store, "takeover", {"n": "b"}, {"type": "object"})
    killed_owner(store, a, 30)
    Supervisor(store, "sup", out=lambda line: None).run_pass()
    killed_owner(store, b, 1.0)
    time.sleep(1.3)
    out = story("takeover", str(tmp_path / "store"), "takeover", "2")
    points = {p["attributes"]["dhp.lost"]: p for p in out["points"]}
    assert set(points) == {"owner_dead", "lease_expired"}
    assert points["owner_dead"]["count"] == points["lease_expired"]["count"] == 1
    assert points["owner_dead"]["sum"] >= 1.3  # orphaned before B's claim and the wait
    assert points["lease_expired"]["sum"] >= 0.3 - 0.01  # B's lease ran out 1 s after it
    spans = {s["attributes"]["dhp.handoff_id"]: s["attributes"] for s in out["spans"]}
    assert spans[a]["dhp.lost"] == "owner_dead" and spans[b]["dhp.lost"] == "lease_expired"
    assert spans[a]["dhp.takeover.delay_s"] == points["owner_dead"]["sum"]

    pytest.importorskip("prometheus_client", reason="the endpoint needs the `otel` extra")
    proc = subprocess.run([sys.executable, "-m", "dhp.cli.main", "metrics", "--store",
                           str(tmp_path / "store")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    for lost in ("owner_dead", "lease_expired"):
        assert re.search(rf'^dhp_takeover_delay_seconds_count\{{dhp_lost="{lost}"[^}}]*\}} '
                         r"1\.0$", proc.stdout, re.M), proc.stdout
    total = re.search(r'^dhp_takeover_delay_seconds_sum\{dhp_lost="owner_dead"[^}]*\} (\S+)$',
                      proc.stdout, re.M)
    assert float(total.group(1)) == pytest.approx(points["owner_dead"]["sum"])


def test_transport_ship_and_ingest_spans_join_the_handoffs_trace(tmp_path):
    out = story("transport", str(tmp_path))
    hid, trace_id = out["hid"], out["hid"][7:39]
    spans = out["spans"]
    assert {s["trace_id"] for s in spans} == {trace_id}
    assert all(s["attributes"]["dhp.handoff_id"] == hid for s in spans)
    ship = [s for s in spans if s["name"] == "dhp.transport.ship"]
    ingest = [s for s in spans if s["name"] == "dhp.transport.ingest"
              and "dhp.peer" in s["attributes"]]
    imported = [s for s in spans if s["name"] == "dhp.transport.ingest"
                and "dhp.source" in s["attributes"]]
    for side in (ship, ingest):
        # every frame once: the envelope (with the chain at the claim), checkpoints 1 and
        # 2, the forged one, the result
        assert sum(s["attributes"]["dhp.frames"] for s in side) == 5
        assert {s["attributes"]["dhp.fence"] for s in side if "dhp.fence" in s["attributes"]} \
            == {1}
        seqs = {n for s in side if "dhp.seq" in s["attributes"]
                for n in range(s["attributes"]["dhp.seq.first"], s["attributes"]["dhp.seq"] + 1)}
        assert seqs == {1, 2, 3}
        (refused,) = [s for s in side if s["status"] == "ERROR"]
        assert refused["attributes"]["dhp.rejected"] == 1
        assert refused["attributes"]["dhp.error.code"] == "integrity_error"
    assert {s["attributes"]["dhp.peer"] for s in ship} == {out["peer"]}
    assert all(re.fullmatch(r"127\.0\.0\.1:\d+", s["attributes"]["dhp.peer"]) for s in ingest)
    (log,) = imported
    assert log["attributes"]["dhp.source"].endswith("h.jsonl")
    assert log["attributes"]["dhp.frames"] == 4 and log["status"] != "ERROR"  # 1 + 2 + result


def test_a_claim_next_that_finds_nothing_makes_no_span(tmp_path):
    out = story("idle", str(tmp_path / "store"))
    hid = out["hid"]
    assert out["spans"] == [["dhp.dispatch", hid], ["dhp.claim_next", hid],
                            ["dhp.release", hid]]
