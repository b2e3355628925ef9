"""The doorbell on both stores: a commit that leaves work takeable wakes idle waiters in
other processes at once (FIFOs on SQLite, LISTEN/NOTIFY on Postgres), so the periodic recheck
(operations.IDLE_RECHECK_S) only bounds a missed ring (spec/schedule.md, DHP-SCH-006)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import dhp
import pytest
from dhp.core import operations

SCHEMA = {"type": "object"}
DISPATCHER = """
import sys, time, dhp
store = dhp.Store(sys.argv[1])
print("ready", flush=True)
sys.stdin.readline()
print(time.monotonic(), flush=True)
dhp.dispatch(store, "k", {}, {"type": "object"})
"""


class Waiting:
    """Wraps a store's work_waiter: `asleep` is set once a waiter blocks on the bell."""

    def __init__(self, store):
        self.asleep = threading.Event()
        self.rung = 0
        self._inner = store.work_waiter
        store.work_waiter = self

    def __call__(self):
        outer = self

        class Registration:
            def __enter__(self):
                self.inner = outer._inner()
                self.wait = self.inner.__enter__()
                return self

            def __call__(self, seconds):
                outer.asleep.set()
                rung = self.wait(seconds)
                outer.rung += rung
                return rung

            def __exit__(self, *exc):
                return self.inner.__exit__(*exc)

        return Registration()


def claim_in_thread(store, got: dict, wait: float) -> threading.Thread:
    def run():
        got["ctx"] = dhp.claim_next(store, "k", "w1", wait=wait, heartbeat_interval=0)
        got["at"] = time.monotonic()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


@pytest.mark.covers("DHP-SCH-006")
def test_a_dispatch_in_another_process_wakes_a_waiter_within_a_second(
        store_location, monkeypatch):
    monkeypatch.setattr(operations, "IDLE_RECHECK_S", 60.0)  # only a ring can be this fast
    store = dhp.Store(store_location)
    waiting = Waiting(store)
    proc = subprocess.Popen([sys.executable, "-c", DISPATCHER, store_location],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "ready\n"
        got: dict = {}
        thread = claim_in_thread(store, got, wait=120)
        assert waiting.asleep.wait(60)
        time.sleep(0.3)  # past the first look that a new Postgres session's ring causes
        proc.stdin.write("go\n")
        proc.stdin.flush()
        sent = float(proc.stdout.readline())
        thread.join(60)
        assert proc.wait(60) == 0
    finally:
        proc.kill()
    assert got["ctx"] is not None and got["ctx"].fence == 1
    assert got["at"] - sent < 1.0, f"woken {got['at'] - sent:.3f}s after the dispatch"
    assert waiting.rung >= 1
    store.close()


@pytest.mark.covers("DHP-SCH-006")
def test_a_commit_that_leaves_nothing_takeable_rings_nobody(store_location):
    store = dhp.Store(store_location)
    hid = dhp.dispatch(store, "k", {}, SCHEMA)
    with dhp.claim(store, hid, "w0", heartbeat_interval=0) as ctx:
        with store.work_waiter() as wait:
            wait(0.5)  # a first Postgres session rings once: consume it
            ctx.checkpoint({"i": 1})
            assert wait(0.3) is False  # a checkpoint makes nothing takeable
            ctx.release()
            assert wait(10) is True  # a release does
    store.close()


def test_the_postgres_listener_listens_again_and_counts_that_as_a_ring(postgres_schemas,
                                                                        monkeypatch):
    """A notification sent while the listening session is down is lost; the new session
    rings, so the waiter still takes the work long before the recheck."""
    import psycopg
    from backends import PG_URL

    store_location = postgres_schemas.location()
    monkeypatch.setattr(operations, "IDLE_RECHECK_S", 60.0)
    store = dhp.Store(store_location)
    other = dhp.Store(store_location)
    bell = store.doorbell
    got: dict = {}
    thread = claim_in_thread(store, got, wait=30)  # returns None at 30 s unless rung
    deadline = time.monotonic() + 60
    while bell.sessions < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    real = bell.conninfo
    bell.conninfo = "postgresql://postgres@127.0.0.1:1/nowhere"  # cannot listen again yet
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute("SELECT pg_terminate_backend(%s)", (bell.backend_pid,))
    time.sleep(0.5)  # the session is gone; nobody listens for this dispatch
    hid = dhp.dispatch(other, "k", {}, SCHEMA)
    bell.conninfo = real
    thread.join(60)
    assert got["ctx"] is not None and got["ctx"].handoff_id == hid
    assert bell.sessions >= 2
    store.close()
    other.close()
