"""`dhp demo`: a worker is SIGKILLed after page 20 of 60 and another process finishes with
zero refetch; by default across two hosts (checkpoints shipped over TCP, host A's folder
deleted), with `--one-host` on one shared store."""

from __future__ import annotations

import csv
import hashlib
import re
import subprocess
import sys

import pytest
from dhp import api
from dhp.cli import demo


def _run_demo(*args: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "dhp.cli.main", "demo", *args],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def _times(story: str) -> list[float]:
    return [float(t) for t in re.findall(r"^  t=\s*([0-9.]+)s", story, re.M)]


def _check_csv(out, first: str, second: str) -> None:
    with out.open(encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["page"]) for r in rows] == list(range(1, 61))
    assert {r["worker"] for r in rows[:20]} == {first}
    assert {r["fence"] for r in rows[:20]} == {"1"}
    assert {r["worker"] for r in rows[20:]} == {second}
    assert {r["fence"] for r in rows[20:]} == {"2"}
    for r in rows:
        body = demo.page_body(int(r["page"]))
        assert r["sha256"] == "sha256:" + hashlib.sha256(body).hexdigest()
        assert int(r["bytes"]) == len(body)


@pytest.mark.covers("DHP-TRN-017", "DHP-TRN-020", "DHP-CKP-010", "DHP-FEN-001", "DHP-TRN-012")
def test_two_host_demo_is_green_after_host_a_is_destroyed(tmp_path):
    out, work = tmp_path / "pages.csv", tmp_path / "work"
    story = _run_demo("--out", str(out), "--store", str(work))
    lines = story.splitlines()
    assert lines[-1].startswith("GREEN: 60/60 pages done, 60 fetches"), story
    assert "server counted 60 requests for 60 distinct pages; refetched: none" in story

    def index(text: str) -> int:
        found = [i for i, line in enumerate(lines) if text in line]
        assert found, f"{text!r} not in the story:\n{story}"
        return found[0]

    killed = index("host B holds checkpoint 20 (durable, acknowledged) -> SIGKILL host A's "
                   "worker (server had served 20 pages)")
    deleted = index("host A's data folder deleted; it exists: no")
    lost = index("host B is told host A is lost; it holds checkpoints 1..20, the handoff is "
                 "orphaned there")
    resumed = index("host B's standby resumes at page 21 (host A's folder exists: no)")
    done = index("host B's standby completed: 60 pages")
    assert killed < deleted < lost < resumed < done
    times = _times(story)
    assert times == sorted(times), "the story's timeline runs forwards"
    # Nothing of host A is left; host B alone holds the finished handoff.
    assert not (work / "host-a").exists()
    hid = re.search(r"handoff  (sha256:[0-9a-f]{64})", story).group(1)
    store_b = api.Store(work / "host-b" / "store")
    try:
        assert api.status(store_b, hid)["state"] == "completed"
        assert api.result(store_b, hid)["pages"] == 60
    finally:
        store_b.close()
    assert f"pages CSV: {out}" in story
    _check_csv(out, "host-a-worker", "host-b-standby")
    # The secret the demo made for the hosts: 32 random bytes, in a file for its owner only.
    secret = work / "host-b" / "secret"
    assert len(bytes.fromhex(secret.read_text())) == 32
    assert secret.stat().st_mode & 0o777 == 0o600


@pytest.mark.covers("DHP-LSE-005", "DHP-CKP-009", "DHP-CKP-010", "DHP-FEN-001")
def test_one_host_demo_is_green_with_zero_refetch(tmp_path):
    out = tmp_path / "pages.csv"
    story = _run_demo("--one-host", "--out", str(out), "--store", str(tmp_path / "store"))
    assert story.splitlines()[-1].startswith("GREEN: 60/60 pages done, 60 fetches"), story
    assert "checkpoint 20 acknowledged -> SIGKILL worker (server had served 20 pages)" in story
    assert "standby resumes at page 21" in story
    recovered_ms = float(re.search(r"\(fence 2\) ([0-9.]+) ms after the kill", story).group(1))
    assert recovered_ms < 2500, "the standby waited for the lease instead of the liveness lock"
    assert f"pages CSV: {out}" in story
    _check_csv(out, "demo-worker", "demo-standby")


def test_demo_usage_error(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "dhp.cli.main", "demo", "--kill-at", "60"],
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
    from dhp.core import chain

    store, hid = _finished_handoff(tmp_path, 3)
    server = demo.PageServer(3)
    server.hits = dict(hits)
    try:
        verdict = demo._verdict(api, chain, store, hid, server, 3, tmp_path / "p.csv")
    finally:
        server.httpd.server_close()
    assert verdict["green"] is green
    assert verdict["story"][-1].startswith("GREEN" if green else "RED")


def test_verdict_is_red_on_a_problem_found_during_the_run(tmp_path):
    from dhp.core import chain

    store, hid = _finished_handoff(tmp_path, 3)
    server = demo.PageServer(3)
    server.hits = {"/page/1": 1, "/page/2": 1, "/page/3": 1}
    try:
        verdict = demo._verdict(api, chain, store, hid, server, 3, tmp_path / "p.csv",
                                ["host A's data folder still existed when B took over"])
    finally:
        server.httpd.server_close()
    assert verdict["green"] is False
    assert "host A's data folder still existed" in verdict["story"][-1]
