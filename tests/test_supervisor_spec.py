"""The supervisor conformance class (spec/supervisor.md, DHP-SUP-*) against the reference
supervisor: moves decided on the current record only, one leader among many processes, the
leadership fence per term, a restarted leader starts a new term, the log line.

tests/test_supervisor.py checks the rest (expired, dead and stalled owners, parking,
deposed and killed leaders); its tests carry the DHP-SUP markers too."""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time

import pytest
from dhp import api
from dhp.core import operations
from dhp.core.errors import InvalidInput
from dhp.supervisor import LEADERSHIP, Supervisor
from test_supervisor import action, supervisor_proc

ACTIONS = {"lead", "follow", "resign", "lost_leadership", "orphan", "dead_letter", "error"}


@pytest.fixture
def store(store_location):
    s = api.Store(store_location)
    yield s
    s.close()


def record(store, hid: str) -> dict:
    with store.transaction(write=False) as tx:
        return tx.get(hid)["record"]


def leadership(store) -> dict | None:
    with store.transaction(write=False) as tx:
        return tx.get_leader(LEADERSHIP)


@pytest.mark.covers("DHP-SUP-007", "DHP-SUP-002")
def test_a_stale_scan_changes_only_what_the_rules_allow(store):
    """Feed every judge of a pass a scan that names every handoff, as a scan that went stale
    would: only the handoff the decision rules allow to move is moved."""
    ids = {name: api.dispatch(store, "spec.stale", {"name": name}, {})
           for name in ("pending", "live", "released", "completed", "expired", "renewed")}
    operations.take(store, ids["live"], "claim", "w-live", 60.0)
    with api.claim(store, ids["released"], "w-rel", heartbeat_interval=0):
        pass  # leaving the block releases it
    with api.claim(store, ids["completed"], "w-done", heartbeat_interval=0) as ctx:
        ctx.complete({})
    operations.take(store, ids["expired"], "claim", "w-gone", 0.1)
    operations.take(store, ids["renewed"], "claim", "w-slow", 0.1)
    time.sleep(0.15)
    # Found expired, but its owner came back and claimed it again before the pass acted.
    operations.take(store, ids["renewed"], "claim", "w-slow", 60.0)
    before = {name: record(store, hid) for name, hid in ids.items()}

    lines: list[dict] = []
    sup = Supervisor(store, "sup-stale", ttl=5.0, out=lines.append)
    assert sup.elect()

    def every(tx, now, limit):
        return list(ids.values())

    for judge in (sup._expired, sup._stalled, sup._out_of_time):
        sup._sweep("orphan", every, judge)
    moved = [(line["action"], line["handoff_id"]) for line in lines[1:]]
    assert moved == [("orphan", ids["expired"])]
    after = {name: record(store, hid) for name, hid in ids.items()}
    assert after["expired"]["state"] == "orphaned" and after["expired"]["owner"] is None
    assert after["expired"]["fence"] == before["expired"]["fence"]  # an orphan keeps the fence
    for name in ids.keys() - {"expired"}:
        assert after[name] == before[name], name


@pytest.mark.covers("DHP-SUP-005")
def test_released_and_orphaned_work_out_of_wall_clock_is_parked(store):
    budget = {"max_wall_clock_s": 0.2}
    released = api.dispatch(store, "spec.wall", {"n": 1}, {}, budget)
    orphaned = api.dispatch(store, "spec.wall", {"n": 2}, {}, budget)
    unclaimed = api.dispatch(store, "spec.wall", {"n": 3}, {}, budget)
    with api.claim(store, released, "w1", heartbeat_interval=0):
        pass
    operations.take(store, orphaned, "claim", "w2", 0.1)
    time.sleep(0.3)
    lines: list[dict] = []
    Supervisor(store, "sup-wall", ttl=5.0, out=lines.append).run_pass()
    parked = {line["handoff_id"]: line["reason"] for line in lines
              if line["action"] == "dead_letter"}
    assert set(parked) == {released, orphaned}
    assert all("max_wall_clock_s" in reason for reason in parked.values())
    assert api.status(store, released)["dlq_reason"] == "max_wall_clock_s"
    assert api.status(store, unclaimed)["state"] == "pending"  # no first claim, no clock


@pytest.mark.covers("DHP-SUP-009")
def test_of_many_supervisor_processes_exactly_one_leads_and_acts(store):
    hid = api.dispatch(store, "spec.many", {}, {})
    operations.take(store, hid, "claim", "gone", 0.3)
    procs = [supervisor_proc(store.location, f"sup-{n}", "--ttl", "5", "--interval", "0.1")
             for n in range(5)]
    try:
        for p in procs:
            p.wait_for(lambda i: action("lead")(i) or action("follow")(i))
        time.sleep(1.0)  # ten passes each
        lines = [(p, item) for p in procs for _, item in p.lines]
        leads = [p for p, item in lines if action("lead")(item)]
        assert len(leads) == 1, [item for _, item in lines]
        leader = leads[0]
        for p in procs:
            if p is not leader:
                assert [item["action"] for _, item in p.lines] == ["follow"]
        orphans = [(p, item) for p, item in lines if action("orphan")(item)]
        assert [(p, item["handoff_id"]) for p, item in orphans] == [(leader, hid)]
        assert api.status(store, hid)["state"] == "orphaned"
    finally:
        # Followers first: killed after the leader, one of them would take over.
        for p in sorted(procs, key=lambda p: any(action("lead")(i) for _, i in p.lines)):
            p.stop()


@pytest.mark.covers("DHP-SUP-010", "DHP-SUP-015")
def test_each_term_takes_the_next_leadership_fence(store):
    a = Supervisor(store, "sup-a", ttl=0.3, interval=0.1, out=[].append)
    b = Supervisor(store, "sup-b", ttl=0.3, interval=0.1, out=[].append)
    assert a.elect() and a.fence == 1
    assert a.elect() and a.fence == 1  # a renewal keeps the term
    assert leadership(store)["fence"] == 1
    a.resign()  # a clean stop: the lease ends now, the fence stays
    row = leadership(store)
    assert row["fence"] == 1 and row["expires_at"] <= store.now()
    assert b.elect() and b.fence == 2  # at once, no wait for a's 0.3 s lease
    assert not a.elect()
    time.sleep(0.35)  # b stops renewing: its lease expires
    assert a.elect() and a.fence == 3
    assert leadership(store) | {"expires_at": None} == {
        "holder": "sup-a", "incarnation": a._token, "fence": 3, "expires_at": None}


@pytest.mark.covers("DHP-SUP-014", "DHP-SUP-013")
def test_a_leader_restarted_under_its_id_starts_a_new_term(store):
    first = supervisor_proc(store.location, "sup-x", "--ttl", "30", "--interval", "0.5")
    try:
        _, took = first.wait_for(action("lead"))
        assert took["fence"] == 1
    finally:
        os.kill(first.proc.pid, signal.SIGKILL)  # no resign: the 30 s lease stays in the store
        first.proc.wait()
    started = time.monotonic()
    run = subprocess.run([sys.executable, "-m", "dhp.cli.supervisor", str(store.location), "sup-x",
                          "--once", "--ttl", "30"], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert time.monotonic() - started < 30
    lead = json.loads(run.stdout.splitlines()[0])
    assert lead["action"] == "lead" and lead["fence"] == 2
    assert "dead" in lead["reason"]


@pytest.mark.covers("DHP-SUP-012")
def test_a_pass_interval_not_shorter_than_the_lease_is_refused(store):
    for interval in (5.0, 6.0):
        with pytest.raises(InvalidInput, match="shorter than the leadership ttl"):
            Supervisor(store, "sup", ttl=5.0, interval=interval)
    assert Supervisor(store, "sup", ttl=3.0).interval < 3.0


@pytest.mark.covers("DHP-SUP-016")
def test_every_log_line_has_the_documented_members(store):
    hid = api.dispatch(store, "spec.log", {}, {}, {"max_attempts": 1})
    operations.take(store, hid, "claim", "gone", 0.1)
    time.sleep(0.15)
    lines: list[dict] = []
    sup = Supervisor(store, "sup-log", ttl=5.0, out=lines.append)
    sup.run(once=True)
    assert [line["action"] for line in lines] == ["lead", "orphan", "dead_letter", "resign"]
    for line in lines:
        assert set(line) == {"ts", "supervisor", "action", "handoff_id", "reason", "fence",
                             "leader_fence"}
        assert line["ts"].endswith("Z")
        assert dt.datetime.fromisoformat(line["ts"].replace("Z", "+00:00")).tzinfo is not None
        assert line["supervisor"] == "sup-log" and line["action"] in ACTIONS
        assert isinstance(line["reason"], str) and line["reason"]
        assert line["leader_fence"] == 1 and line["fence"] == 1
    assert [line["handoff_id"] for line in lines] == [None, hid, hid, None]
    assert lines[2]["reason"] == "max_attempts"
