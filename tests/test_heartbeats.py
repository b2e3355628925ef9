"""The process's one heartbeat schedule (dhp.heartbeats): many contexts on few threads, a
beat blocked on one store starving no other context, and a forked child starting empty."""

from __future__ import annotations

import os
import sqlite3
import threading
import time

import pytest
from dhp import api as dhp
from dhp import heartbeats
from dhp.store.sqlite import DB_FILE

SCHEMA = {"type": "object"}


def _wait_for(condition, seconds=10.0):
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    return condition()


@pytest.fixture
def schedule():
    s = heartbeats.Schedule()
    yield s
    with s._lock:
        beats = [entry[2] for entry in s._heap]
    for beat in beats:
        beat.cancel()


def test_a_blocked_beat_delays_no_other_beat(schedule):
    release = threading.Event()
    blocked, fast = [], []
    schedule.every(0.02, lambda: blocked.append(1) or release.wait(30) or True)
    schedule.every(0.02, lambda: fast.append(1) or True)
    assert _wait_for(lambda: blocked)
    count = len(fast)
    assert _wait_for(lambda: len(fast) >= count + 10)  # while the first is still blocked
    assert len(blocked) == 1
    release.set()
    assert _wait_for(lambda: len(blocked) >= 3)


def test_a_beat_ends_when_it_returns_false_raises_or_is_cancelled(schedule, monkeypatch):
    hooked = []
    monkeypatch.setattr(threading, "excepthook", hooked.append)
    calls = {"false": 0, "raise": 0, "cancel": 0, "keep": 0}

    def counting(name, result):
        def fn():
            calls[name] += 1
            if result is ValueError:
                raise ValueError("a bug in the beat")
            return result
        return fn

    schedule.every(0.01, counting("false", False))
    schedule.every(0.01, counting("raise", ValueError))
    cancelled = schedule.every(0.01, counting("cancel", True))
    schedule.every(0.01, counting("keep", True))
    assert _wait_for(lambda: calls["cancel"] >= 2)
    cancelled.cancel()
    seen = calls["cancel"]
    assert _wait_for(lambda: calls["keep"] >= 20)
    assert calls["false"] == 1 and calls["raise"] == 1
    assert calls["cancel"] <= seen + 1  # one call may have been running
    assert [h.exc_type for h in hooked] == [ValueError]  # reported, not swallowed


def test_idle_threads_end(schedule, monkeypatch):
    monkeypatch.setattr(heartbeats, "IDLE_EXIT_S", 0.05)
    beat = schedule.every(0.01, lambda: True)
    assert _wait_for(lambda: schedule.threads >= 1)
    beat.cancel()
    assert _wait_for(lambda: schedule.threads == 0)
    done = []
    schedule.every(0.01, lambda: done.append(1) and False)  # a new one starts a thread
    assert _wait_for(lambda: done == [1])


def test_cancelled_entries_do_not_pile_up(schedule):
    for _ in range(1000):
        schedule.every(60, lambda: True).cancel()
    assert len(schedule._heap) <= 2 * heartbeats._COMPACT_MIN + 2


@pytest.mark.covers("DHP-LSE-004")
def test_many_contexts_with_different_intervals_keep_their_leases(tmp_path):
    store = dhp.Store(tmp_path / "s")
    hids = [dhp.dispatch(store, "hb", {"i": i}, SCHEMA) for i in range(12)]
    contexts = [dhp.claim(store, hid, f"w{i}", ttl=0.4 + 0.1 * (i % 3),
                          heartbeat_interval=0.1 + 0.03 * (i % 3))
                for i, hid in enumerate(hids)]
    for _ in range(15):  # three seconds: many times every ttl, with no call of ours
        time.sleep(0.2)
        states = {dhp.status(store, hid)["state"] for hid in hids}
        assert states == {"claimed"}
    assert all(ctx.lost is None for ctx in contexts)
    for ctx in contexts:
        ctx.complete({"done": True})
    store.close()


def test_a_claim_starts_no_thread_while_one_serves(tmp_path, schedule, monkeypatch):
    monkeypatch.setattr(dhp, "_heartbeats", schedule)  # no other test's leases in it
    store = dhp.Store(tmp_path / "s")
    first = dhp.claim(store, dhp.dispatch(store, "hb", {"first": 1}, SCHEMA), "w", ttl=60)
    assert _wait_for(lambda: schedule._timer)  # its thread waits as the timer
    for i in range(20):  # no beat falls due meanwhile (ttl / 3 = 20 s)
        with dhp.claim(store, dhp.dispatch(store, "hb", {"i": i}, SCHEMA), "w",
                       ttl=60) as ctx:
            ctx.complete({"done": True})
    assert schedule.started == 1
    first.complete({"done": True})
    store.close()


@pytest.mark.covers("DHP-LSE-004")
def test_a_heartbeat_blocked_on_one_store_does_not_starve_another(tmp_path):
    locked, free = dhp.Store(tmp_path / "locked"), dhp.Store(tmp_path / "free")
    stuck = dhp.claim(locked, dhp.dispatch(locked, "hb", {}, SCHEMA), "w", ttl=1.0,
                      heartbeat_interval=0.1)
    hid = dhp.dispatch(free, "hb", {}, SCHEMA)
    ctx = dhp.claim(free, hid, "w", ttl=0.6, heartbeat_interval=0.15)
    holder = sqlite3.connect(tmp_path / "locked" / DB_FILE, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # the locked store's heartbeats wait (busy timeout)
    try:
        for _ in range(12):  # 2.4 s: four times the free store's ttl
            time.sleep(0.2)
            assert dhp.status(free, hid)["state"] == "claimed"
        assert ctx.lost is None
    finally:
        holder.execute("COMMIT")
        holder.close()
    ctx.complete({"done": True})
    stuck.abandon()
    locked.close()
    free.close()


def test_a_forked_child_starts_with_an_empty_schedule(tmp_path):
    store = dhp.Store(tmp_path / "s")
    parent = dhp.claim(store, dhp.dispatch(store, "hb", {"who": "parent"}, SCHEMA), "p",
                       ttl=1.0)
    child_hid = dhp.dispatch(store, "hb", {"who": "child"}, SCHEMA)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            empty = not heartbeats.schedule._heap and heartbeats.schedule.threads == 0
            child_store = dhp.Store(tmp_path / "s")
            ctx = dhp.claim(child_store, child_hid, "c", ttl=0.5)
            time.sleep(1.2)  # kept alive by the child's own heartbeats
            ctx.complete({"done": True})
            code = 0 if empty else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert dhp.status(store, child_hid)["state"] == "completed"
    parent.complete({"done": True})  # the parent's lease was kept by its own heartbeats
    store.close()


def test_a_sigterm_drain_needs_no_lock_its_thread_may_hold(tmp_path):
    # The drain runs in the main thread, between any two bytecodes of it: also while that
    # thread holds the schedule's lock (inside every()) or the registry's mutex.
    store = dhp.Store(tmp_path / "s")
    hid = dhp.dispatch(store, "hb", {}, SCHEMA)
    ctx = dhp.claim(store, hid, "w", ttl=60)
    with heartbeats.schedule._lock, dhp._live_mutex:
        assert dhp.drain() >= 1  # contexts other tests left live are released too
    assert ctx._beats.cancelled and not ctx.active
    assert dhp.status(store, hid)["state"] == "released"
    store.close()
