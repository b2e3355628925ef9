"""The lease journal (dhp.core.journal) on both backends: every take (claim, recover,
claim_next, a fence adopted on import) and every orphan is journaled in its own transaction,
with how and how long ago the previous owner was lost; a real SIGKILLed owner; the bound per
handoff; and nothing journaled for a refused take."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import dhp
import pytest
from dhp.core import journal, operations
from dhp.supervisor import Supervisor

WORKER = Path(__file__).resolve().parent / "chaos_worker.py"


@pytest.fixture
def store(store_location):
    s = dhp.Store(store_location, ttl=1.0)
    yield s
    s.close()


def events(store, hid, **kw):
    with store.transaction(write=False) as tx:
        return tx.lease_events(hid, **kw)


def brief(found):
    return [(e["event"], e["fence"], e["worker"], e["how"]) for e in found]


def killed_owner(store, hid: str) -> str:
    """A worker process claims `hid` (long lease, heartbeating) and is SIGKILLed; returns
    its worker id once the store sees the owner dead (a server store learns of it when the
    server ends the dead client's session, a moment after the kill)."""
    proc = subprocess.Popen([sys.executable, str(WORKER), "hold", store.location, hid, "30"],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().split()[0] == "claimed"
    token = operations.get_row(store, hid)["owner_incarnation"]
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(30)
    deadline = time.monotonic() + 10
    while not store.liveness.owner_dead(token):
        assert time.monotonic() < deadline, "the killed owner's liveness lock was not freed"
        time.sleep(0.01)
    return f"holder-{proc.pid}"


def test_every_take_is_journaled_with_how_the_owner_was_lost(store):
    hid = dhp.dispatch(store, "j.takes", {}, {"type": "object"})
    dhp.claim(store, hid, "w1", heartbeat_interval=0).release()   # no checkpoint at all
    dhp.claim_next(store, "j.takes", "w2", heartbeat_interval=0)  # its lease runs out
    time.sleep(1.3)
    ctx = dhp.recover(store, hid, "w3", heartbeat_interval=0)
    with pytest.raises(dhp.Conflict):
        dhp.claim(store, hid, "w4")  # refused: journals nothing
    found = events(store, hid)
    assert brief(found) == [("claim", 1, "w1", None), ("claim_next", 2, "w2", None),
                            ("recover", 3, "w3", journal.EXPIRED)]
    assert events(store, hid, last=2) == found[1:]  # the last two, oldest first
    assert found[0]["lost_s"] is None and found[1]["lost_s"] is None
    # lost at the lease's expiry (claim + 1 s), taken 0.3 s or more after it
    assert found[2]["lost_s"] >= 0.25
    assert ctx.lease_event == {k: v for k, v in found[2].items() if k != "id"}
    assert [e["id"] for e in found] == sorted(e["id"] for e in found)


def test_a_killed_owner_orphaned_by_the_supervisor_then_taken(store):
    """killed_owner has probed the dead owner already (on SQLite that removes its lock file):
    the supervisor still finds it, by the claimed handoffs' owners in the store."""
    hid = dhp.dispatch(store, "j.killed", {}, {"type": "object"})
    holder = killed_owner(store, hid)
    Supervisor(store, "sup", out=lambda line: None).run_pass()
    time.sleep(0.3)
    ctx = dhp.claim_next(store, "j.killed", "standby", heartbeat_interval=0)
    assert brief(events(store, hid)) == [
        ("claim", 1, holder, None), ("orphan", 1, holder, journal.OWNER_DEAD),
        ("claim_next", 2, "standby", journal.OWNER_DEAD)]
    assert ctx.lease_event["lost_s"] >= 0.3  # from the orphan, not from the take


def test_a_take_that_finds_the_owner_dead_itself_lost_nothing_waiting(store):
    hid = dhp.dispatch(store, "j.probe", {}, {"type": "object"})
    killed_owner(store, hid)
    ctx = dhp.recover(store, hid, "standby", heartbeat_interval=0)
    assert (ctx.lease_event["how"], ctx.lease_event["lost_s"]) == (journal.OWNER_DEAD, 0)


def test_the_journal_keeps_the_last_entries_of_each_handoff(store, monkeypatch):
    monkeypatch.setattr(journal, "CAP", 3)
    hid = dhp.dispatch(store, "j.cap", {}, {"type": "object"})
    other = dhp.dispatch(store, "j.cap", {"other": 1}, {"type": "object"})
    dhp.claim(store, other, "o", heartbeat_interval=0)
    for n in range(5):
        dhp.claim(store, hid, f"w{n}", heartbeat_interval=0).release()
    assert [e["worker"] for e in events(store, hid)] == ["w2", "w3", "w4"]
    assert [e["worker"] for e in events(store, other)] == ["o"]  # untouched by the bound
    with store.transaction(write=False) as tx:
        after = tx.lease_events_after(0, 100)
        assert [e["worker"] for e in after] == ["o", "w2", "w3", "w4"]
        assert tx.lease_events_after(after[-2]["id"], 100) == [after[-1]]


def test_import_journals_the_fences_taken_on_the_peer(store, tmp_path):
    source = dhp.Store(tmp_path / "source", ttl=1.0)
    hid = dhp.dispatch(source, "j.import", {}, {"type": "object"})
    with dhp.claim(source, hid, "a", heartbeat_interval=0) as ctx:
        ctx.checkpoint({"n": 1})
        ctx.release()
    with dhp.claim(source, hid, "b", heartbeat_interval=0) as ctx:
        ctx.checkpoint({"n": 2})
        ctx.release()
    log = tmp_path / "h.jsonl"
    dhp.export_log(source, hid, log)
    dhp.import_log(store, log)
    dhp.import_log(store, log)  # duplicates: no new take
    assert brief(events(store, hid)) == [("import", 1, None, None), ("import", 2, None, None)]
    dhp.claim(store, hid, "here", heartbeat_interval=0)
    assert brief(events(store, hid))[-1] == ("claim", 3, "here", None)


def test_the_metric_follower_reads_each_entry_once_even_if_committed_out_of_id_order():
    from contextlib import nullcontext

    from dhp.observe.metrics import JournalFollower

    visible: list[dict] = []

    class Tx:
        def lease_events_after(self, after, limit):
            return sorted((e for e in visible if e["id"] > after), key=lambda e: e["id"])[:limit]

    class Store:
        def transaction(self, write):
            return nullcontext(Tx())

    def take(i, lost_s=0.5):
        visible.append({"id": i, "lost_s": lost_s})

    follower = JournalFollower()
    take(1), take(2, None), take(4)  # id 3's transaction has not committed yet
    assert [e["id"] for e in follower.new_takeovers(Store())] == [1, 4]
    take(3), take(5)  # now it has
    assert [e["id"] for e in follower.new_takeovers(Store())] == [3, 5]
    assert follower.new_takeovers(Store()) == []
