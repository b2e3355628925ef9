"""Delays, retries with backoff, claim_next waiting and taking dead owners' work
(spec/schedule.md), on the SQLite store."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import dhp
import pytest
from dhp.core import machine, schemas
from dhp.store import doorbell

HERE = Path(__file__).resolve().parent
SCHEMA = {"type": "object"}


class Tick:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def tick():
    return Tick(1000.0)


@pytest.fixture
def store(tmp_path, tick):
    with dhp.Store(tmp_path / "s", clock=tick) as s:
        yield s


@pytest.mark.covers("DHP-SCH-001", "DHP-SCH-002")
def test_a_delayed_dispatch_is_taken_from_its_instant_on(store, tick):
    hid = dhp.dispatch(store, "k", {"a": 1}, SCHEMA, delay_s=30)
    status = dhp.status(store, hid)
    assert status["state"] == "pending" and status["not_before_in"] == 30
    schemas.validator("status").validate(status)
    assert dhp.claim_next(store, "k", "w1") is None
    tick.now = 1029.999
    with pytest.raises(dhp.Conflict) as refused:
        dhp.claim(store, hid, "w1")
    assert refused.value.requirement == "DHP-SCH-001"
    assert dhp.status(store, hid)["fence"] == 0  # the refusal changed nothing
    tick.now = 1030.0  # the exact instant is eligible
    ctx = dhp.claim_next(store, "k", "w1")
    assert ctx.handoff_id == hid and ctx.fence == 1
    assert dhp.status(store, hid)["not_before_in"] is None


@pytest.mark.covers("DHP-SCH-002")
def test_redispatch_keeps_the_first_delay_and_bad_delays_are_refused(store, tick):
    hid = dhp.dispatch(store, "k", {"a": 1}, SCHEMA, delay_s=30)
    tick.now = 1010.0
    assert dhp.dispatch(store, "k", {"a": 1}, SCHEMA, delay_s=500) == hid
    assert dhp.status(store, hid)["not_before_in"] == 20
    for bad in (-1, float("nan"), float("inf"), "5", True):
        with pytest.raises(dhp.InvalidInput, match="delay_s"):
            dhp.dispatch(store, "k", {"b": bad if isinstance(bad, str) else 0}, SCHEMA,
                         delay_s=bad)
    assert len(dhp.list_handoffs(store)) == 1  # nothing stored by a refused dispatch


def test_not_before_as_a_datetime_becomes_a_delay(store, tick):
    later = dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=60)
    hid = dhp.dispatch(store, "k", {}, SCHEMA, not_before=later)
    assert 59 < dhp.status(store, hid)["not_before_in"] <= 60
    with pytest.raises(dhp.InvalidInput, match="timezone-aware"):
        dhp.dispatch(store, "k", {"x": 1}, SCHEMA, not_before=dt.datetime(2030, 1, 1))


@pytest.mark.covers("DHP-SCH-003")
def test_release_with_a_delay_and_without(store, tick):
    hid = dhp.dispatch(store, "k", {}, SCHEMA)
    dhp.claim(store, hid, "w1", heartbeat_interval=0).release(delay_s=5)
    assert dhp.status(store, hid)["not_before_in"] == 5
    assert dhp.claim_next(store, "k", "w2") is None
    tick.now += 5
    ctx = dhp.claim_next(store, "k", "w2", heartbeat_interval=0)
    ctx.release()
    assert dhp.status(store, hid)["not_before_in"] is None
    ctx = dhp.claim(store, hid, "w3", heartbeat_interval=0)
    with pytest.raises(dhp.InvalidInput, match="not both"):
        ctx.release(delay_s=1, backoff=True)
    with pytest.raises(dhp.InvalidInput, match="delay_s"):
        ctx.release(delay_s=-1)
    assert dhp.status(store, hid)["owner"] == "w3"  # the refused releases changed nothing


@pytest.mark.covers("DHP-SCH-003", "DHP-SCH-004")
def test_failed_attempts_back_off_exponentially_up_to_the_cap(store, tick):
    budget = {"max_attempts": 10, "backoff_s": 2, "backoff_max_s": 10}
    hid = dhp.dispatch(store, "k", {}, SCHEMA, budget)
    waits = []
    for n in range(5):
        dhp.claim(store, hid, f"w{n}", heartbeat_interval=0).release(backoff=True)
        waits.append(dhp.status(store, hid)["not_before_in"])
        tick.now += waits[-1]
    assert waits == [2, 4, 8, 10, 10]


@pytest.mark.covers("DHP-SCH-004")
def test_backoff_formula_jitter_and_defaults():
    budget = {"backoff_s": 1, "backoff_jitter": 0.5}
    assert machine.backoff_delay(budget, 3, 0.0) == 4
    assert machine.backoff_delay(budget, 3, 0.999999) == pytest.approx(2, abs=1e-5)
    assert machine.backoff_delay({}, 3, 0.5) == 0
    assert machine.backoff_delay({"backoff_s": 1}, 5000, 0.0) == machine.DEFAULT_BACKOFF_MAX_S
    with pytest.raises(dhp.InvalidInput):  # the budget schema bounds the jitter
        dhp.make_intent("k", {}, SCHEMA, {"backoff_jitter": 1.5})


@pytest.mark.covers("DHP-SCH-001")
def test_requeue_clears_the_wait(store, tick):
    hid = dhp.dispatch(store, "k", {}, SCHEMA, {"max_attempts": 1, "backoff_s": 100})
    dhp.claim(store, hid, "w1", heartbeat_interval=0).release(backoff=True)
    tick.now += 100
    with pytest.raises(dhp.BudgetExceeded):
        dhp.claim(store, hid, "w2")
    dhp.requeue(store, hid)
    assert dhp.status(store, hid)["not_before_in"] is None
    assert dhp.claim_next(store, "k", "w3", heartbeat_interval=0).fence == 2


@pytest.mark.covers("DHP-SCH-006")
def test_claim_next_wait_returns_when_another_thread_dispatches(tmp_path):
    store = dhp.Store(tmp_path / "s")
    got = {}

    def waiter():
        got["ctx"] = dhp.claim_next(store, "k", "w1", wait=120, heartbeat_interval=0)

    thread = threading.Thread(target=waiter)
    thread.start()
    time.sleep(0.3)
    hid = dhp.dispatch(store, "k", {}, SCHEMA)
    thread.join(60)
    assert not thread.is_alive(), "the wait did not end when work was dispatched"
    assert got["ctx"].handoff_id == hid
    assert list((tmp_path / "s" / doorbell.FOLDER).iterdir()) == []  # the FIFO is gone


@pytest.mark.covers("DHP-SCH-006")
def test_claim_next_wait_wakes_on_a_dispatch_in_another_process(tmp_path):
    store = dhp.Store(tmp_path / "s")
    code = ("import sys, time, dhp; time.sleep(0.5); "
            "dhp.dispatch(dhp.Store(sys.argv[1]), 'k', {}, {'type': 'object'})")
    proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "s")])
    ctx = dhp.claim_next(store, "k", "w1", wait=120, heartbeat_interval=0)
    assert proc.wait(60) == 0
    assert ctx is not None and ctx.fence == 1


@pytest.mark.covers("DHP-SCH-006")
def test_claim_next_wait_wakes_when_not_before_passes_and_times_out(tmp_path):
    store = dhp.Store(tmp_path / "s")
    assert dhp.claim_next(store, "k", "w1", wait=0.2) is None  # nothing: returns at the end
    hid = dhp.dispatch(store, "k", {}, SCHEMA, delay_s=0.5)
    ctx = dhp.claim_next(store, "k", "w1", wait=120, heartbeat_interval=0)
    assert ctx.handoff_id == hid  # nobody rang: the waiter computed the instant itself


def test_a_dead_waiters_fifo_is_removed_by_the_next_ring(tmp_path):
    folder = tmp_path / doorbell.FOLDER
    code = ("import sys, os; from dhp.store import doorbell; from pathlib import Path; "
            "w = doorbell.Waiter(Path(sys.argv[1])).__enter__(); print('ready', flush=True); "
            "os._exit(0)")
    proc = subprocess.run([sys.executable, "-c", code, str(folder)], capture_output=True,
                          text=True, timeout=60)
    assert proc.stdout == "ready\n" and len(list(folder.iterdir())) == 1
    assert doorbell.ring(folder) == 0
    assert list(folder.iterdir()) == []


@pytest.mark.covers("DHP-SCH-006")
def test_a_waiter_that_registers_after_a_quiet_ring_is_still_rung(tmp_path):
    """ring skips listing a folder it found empty while the folder's mtime stays; a waiter's
    FIFO changes that mtime, so the next ring finds it and wakes it."""
    folder = tmp_path / doorbell.FOLDER
    folder.mkdir()
    old = time.time_ns() - 2 * doorbell.QUIET_AFTER_NS
    os.utime(folder, ns=(old, old))  # long quiet: the empty listing is remembered
    assert doorbell.ring(folder) == 0 and doorbell._quiet[str(folder)] == old
    with doorbell.Waiter(folder) as wait:
        assert doorbell.ring(folder) == 1
        assert wait(0) is True
    doorbell._quiet.clear()
    recent = time.time_ns()
    os.utime(folder, ns=(recent, recent))  # changed just now: an entry made within the
    assert doorbell.ring(folder) == 0  # file system's time step would not move the mtime
    assert str(folder) not in doorbell._quiet  # so the empty listing is not kept


@pytest.mark.covers("DHP-SCH-005")
def test_claim_next_takes_a_dead_owners_handoff_before_its_lease_expires(tmp_path):
    store = dhp.Store(tmp_path / "s")
    hid = dhp.dispatch(store, "k", {}, SCHEMA)
    owner = subprocess.Popen([sys.executable, str(HERE / "helpers" / "worker.py"),
                              str(tmp_path / "s"), hid, "doomed", "hold", "300", "2"],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert owner.stdout.readline().strip() == "fence 1"
        while owner.stdout.readline().strip() != "ready":
            pass
        assert dhp.claim_next(store, "k", "w2") is None  # alive: its lease stands
        assert dhp.status(store, hid)["lease_expires_in"] > 200
        owner.kill()
        owner.wait(60)
    finally:
        if owner.poll() is None:
            owner.kill()
    ctx = dhp.claim_next(store, "k", "w2", heartbeat_interval=0)
    assert ctx is not None and ctx.fence == 2 and ctx.last_checkpoint["step"] == 2
    assert dhp.status(store, hid)["attempts"] == 2


def test_idle_store_keeps_no_wake_folder_garbage(tmp_path):
    store = dhp.Store(tmp_path / "s")
    for _ in range(3):
        assert dhp.claim_next(store, "k", "w", wait=0.05) is None
    assert sorted(os.listdir(tmp_path / "s" / doorbell.FOLDER)) == []
