"""`dhp demo`: a worker is SIGKILLed after page 20 of 60; a standby finishes with zero refetch."""

from __future__ import annotations

import csv
import hashlib
import re
import subprocess
import sys

import pytest
from dhp import api, demo


@pytest.mark.covers("DHP-LSE-005", "DHP-CKP-009", "DHP-CKP-010", "DHP-FEN-001")
def test_demo_is_green_with_zero_refetch(tmp_path):
    out = tmp_path / "pages.csv"
    proc = subprocess.run([sys.executable, "-m", "dhp.cli", "demo", "--out", str(out),
                           "--store", str(tmp_path / "store")],
                          capture_output=True, text=True, timeout=120)
    story = proc.stdout
    assert proc.returncode == 0, story + proc.stderr
    assert story.splitlines()[-1].startswith("GREEN: 60/60 pages done, 60 fetches")
    assert "checkpoint 20 acknowledged -> SIGKILL worker (server had served 20 pages)" in story
    assert "standby resumes at page 21" in story
    recovered_ms = float(re.search(r"\(fence 2\) ([0-9.]+) ms after the kill", story).group(1))
    assert recovered_ms < 2500, "the standby waited for the lease instead of the liveness lock"
    assert f"pages CSV: {out}" in story
    with out.open(encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["page"]) for r in rows] == list(range(1, 61))
    assert {r["worker"] for r in rows[:20]} == {"demo-worker"}
    assert {r["fence"] for r in rows[:20]} == {"1"}
    assert {r["worker"] for r in rows[20:]} == {"demo-standby"}
    assert {r["fence"] for r in rows[20:]} == {"2"}
    for r in rows:
        body = demo.page_body(int(r["page"]))
        assert r["sha256"] == "sha256:" + hashlib.sha256(body).hexdigest()
        assert int(r["bytes"]) == len(body)


def test_demo_usage_error(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "dhp.cli", "demo", "--kill-at", "60"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--kill-at" in proc.stderr


def _finished_handoff(tmp_path, pages: int):
    store = api.Store(tmp_path / "store")
    hid = api.dispatch(store, demo.TASK_KIND, {"base_url": "http://x", "pages": pages},
                       demo.OUTPUT_SCHEMA)
    with api.claim(store, hid, "w") as ctx:
        for n in range(1, pages + 1):
            body = demo.page_body(n)
            ctx.checkpoint({"page": n, "bytes": len(body), "worker": "w",
                            "sha256": "sha256:" + hashlib.sha256(body).hexdigest()})
        ctx.complete({"pages": pages, "digest": "sha256:" + "0" * 64})
    return store, hid


@pytest.mark.parametrize("hits,green", [
    ({"/page/1": 1, "/page/2": 1, "/page/3": 1}, True),
    ({"/page/1": 1, "/page/2": 2, "/page/3": 1}, False),  # one refetch is RED
    ({"/page/1": 1, "/page/3": 1}, False),  # a page never fetched is RED
])
def test_verdict_is_red_on_any_refetch(tmp_path, hits, green):
    from dhp import chain

    store, hid = _finished_handoff(tmp_path, 3)
    server = demo.PageServer(3)
    server.hits = dict(hits)
    try:
        verdict = demo._verdict(api, chain, store, hid, server, 3, tmp_path / "p.csv")
    finally:
        server.httpd.server_close()
    assert verdict["green"] is green
    assert verdict["story"][-1].startswith("GREEN" if green else "RED")
