"""Many units at once in one worker process (dhp.worker.slots), with real processes: kill -9
of a process running eight units, SIGTERM drains, `async def` tasks, and a slow unit beside
others whose leases it must not let lapse. On both stores."""

from __future__ import annotations

import asyncio
import collections
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import dhp
import pytest
from dhp.worker import aio
from test_worker import children_of, stop, wait_for

TASKS = textwrap.dedent('''
    import asyncio, os, time
    import dhp

    @dhp.task("unit.steps", output_schema={"type": "object", "required": ["n"]},
              budget={"max_attempts": 5})
    def steps(ctx, inputs):
        state = ctx.last_checkpoint or {"i": 0}
        start = time.time()
        for i in range(state["i"], inputs["n"]):
            time.sleep(inputs["sleep"])
            ctx.checkpoint({"i": i + 1, "pid": os.getpid()})
        return {"n": inputs["n"], "resumed_at": state["i"], "start": start, "end": time.time()}

    @dhp.task("unit.async", output_schema={"type": "object", "required": ["n"]},
              budget={"max_attempts": 5})
    async def steps_async(ctx, inputs):
        state = ctx.last_checkpoint or {"i": 0}
        start = time.time()
        for i in range(state["i"], inputs["n"]):
            await asyncio.sleep(inputs["sleep"])
            await ctx.checkpoint({"i": i + 1, "pid": os.getpid()})
        return {"n": inputs["n"], "resumed_at": state["i"], "start": start, "end": time.time()}
''')
SCHEMA = {"type": "object", "required": ["n"]}


def start_pool(folder: Path, location: str, *args: str) -> subprocess.Popen:
    """`dhp worker unit_tasks` on the store, returned once it logged its start line."""
    (folder / "unit_tasks.py").write_text(TASKS)
    pool = subprocess.Popen([sys.executable, "-m", "dhp.cli.main", "worker", "unit_tasks",
                             "--store", location, "--create", *args],
                            cwd=folder, stderr=subprocess.PIPE, text=True)
    line = pool.stderr.readline()
    assert " start " in line, line + pool.stderr.read()
    return pool


def states(store, hids) -> collections.Counter:
    return collections.Counter(dhp.status(store, h)["state"] for h in hids)


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="reads /proc")
@pytest.mark.parametrize("kind", ["unit.steps", "unit.async"])
def test_kill_9_of_a_process_running_eight_units_loses_none(tmp_path, store_location, kind):
    # A 60 s lease: every takeover before it ran out comes from the dead process's liveness
    # lock; the pool's parent starts a second process, which finishes everything.
    pool = start_pool(tmp_path, store_location, "--units", "8", "--ttl", "60")
    try:
        store = dhp.Store(store_location, create=False)
        hids = [dhp.dispatch(store, kind, {"n": 6, "sleep": 0.1, "k": k}, SCHEMA,
                             {"max_attempts": 5}) for k in range(20)]
        wait_for(lambda: sum(dhp.status(store, h)["checkpoints"]["count"] >= 2
                             for h in hids) >= 6, what="units with two checkpoints")
        victim = children_of(pool.pid)[0]
        held = [h for h in hids if dhp.status(store, h)["state"] == "claimed"]
        os.kill(victim, signal.SIGKILL)
        killed_at = time.monotonic()
        wait_for(lambda: states(store, hids)["completed"] == 20, what="every completion")
        assert time.monotonic() - killed_at < 50, "waited for the leases, not the lock"
    finally:
        code, log = stop(pool)
    assert code == 0, log
    assert f"(pid {victim}) ended by signal 9" in log
    assert len(held) >= 2, "the kill came when one unit or none ran"
    for hid in hids:
        result, records = dhp.result(store, hid), dhp.checkpoints(store, hid)
        assert [r["seq"] for r in records] == list(range(1, 7))
        assert log.count(f"complete {kind} {hid[:19]}") == 1, log
        # Resumed from the last checkpoint the killed process acknowledged: at most the
        # step it was inside is done again.
        killed = [r for r in records if r["state"]["pid"] == victim]
        assert result["resumed_at"] == len(killed)
    taken_over = [h for h in held if dhp.status(store, h)["fence"] >= 2]
    assert taken_over == held


def test_sigterm_lets_units_finish_within_the_grace_and_releases_the_rest(
        tmp_path, store_location):
    pool = start_pool(tmp_path, store_location, "--units", "4", "--grace", "1")
    store = dhp.Store(store_location, create=False)
    short = [dhp.dispatch(store, "unit.steps", {"n": 2, "sleep": 0.3, "k": k}, SCHEMA)
             for k in range(2)]
    long = [dhp.dispatch(store, "unit.steps", {"n": 1000, "sleep": 0.05, "k": k}, SCHEMA)
            for k in range(2)]
    try:
        wait_for(lambda: states(store, short + long)["claimed"] == 4, what="four units")
        wait_for(lambda: all(dhp.status(store, h)["checkpoints"]["count"] for h in long),
                 what="a checkpoint of each long unit")
    finally:
        code, log = stop(pool)
    assert code == 0, log
    assert states(store, short)["completed"] == 2, log
    for hid in long:
        status = dhp.status(store, hid)
        assert status["state"] == "released" and status["not_before_in"] is None, status
        assert status["checkpoints"]["count"] >= 1
        assert f"release unit.steps {hid[:19]} (drained)" in log
    assert "released 2 handoff(s)" in log


def test_async_tasks_share_one_loop_and_run_at_once(tmp_path, store_location):
    # --threads: the units run in the pool's own process (no child)
    pool = start_pool(tmp_path, store_location, "--threads", "--concurrency", "8")
    try:
        store = dhp.Store(store_location, create=False)
        hids = [dhp.dispatch(store, "unit.async", {"n": 3, "sleep": 0.2, "k": k}, SCHEMA)
                for k in range(8)]
        wait_for(lambda: states(store, hids)["completed"] == 8, what="every completion")
    finally:
        code, log = stop(pool)
    assert code == 0, log
    runs = [dhp.result(store, h) for h in hids]
    assert all(len(dhp.checkpoints(store, h)) == 3 for h in hids)
    # Some two ran at the same time (the loop did not run them one after another).
    assert any(a["start"] < b["end"] and b["start"] < a["end"]
               for i, a in enumerate(runs) for b in runs[i + 1:]), runs


def test_a_slow_unit_lets_no_other_lease_lapse(tmp_path, store_location):
    # Leases of 1 s; each unit sleeps 2.5 s without a write: only the background heartbeats,
    # served apart from the units, keep the four leases.
    pool = start_pool(tmp_path, store_location, "--units", "4", "--ttl", "1")
    try:
        store = dhp.Store(store_location, create=False)
        hids = [dhp.dispatch(store, "unit.steps", {"n": 1, "sleep": 2.5, "k": k}, SCHEMA)
                for k in range(4)]
        wait_for(lambda: states(store, hids)["completed"] == 4, what="every completion")
    finally:
        code, log = stop(pool)
    assert code == 0, log
    assert all(dhp.status(store, h)["fence"] == 1 for h in hids), log
    assert " lost " not in log


def test_async_context_runs_calls_in_order_even_when_not_awaited_at_once(tmp_path):
    store = dhp.Store(tmp_path / "store")
    hid = dhp.dispatch(store, "order", {}, {"type": "object"})
    ctx = dhp.claim(store, hid, "w1", heartbeat_interval=0)

    async def fn(actx, inputs):
        first = actx.checkpoint({"i": 1})  # queued, not yet awaited
        second = actx.checkpoint({"i": 2})
        assert actx.handoff_id == hid  # the context's attributes pass through
        return [(await first)["seq"], (await second)["seq"]]

    assert aio.run(fn, ctx) == [1, 2]
    assert [r["state"]["i"] for r in dhp.checkpoints(store, hid)] == [1, 2]
    ctx.complete({})


def test_async_context_hands_a_store_error_to_the_coroutine(tmp_path):
    store = dhp.Store(tmp_path / "store")
    hid = dhp.dispatch(store, "lost", {}, {"type": "object"})
    ctx = dhp.claim(store, hid, "w1", ttl=0.2, heartbeat_interval=0)
    time.sleep(0.3)
    dhp.recover(store, hid, "w2", heartbeat_interval=0)  # w1's lease ran out: a new fence

    async def fn(actx, inputs):
        with pytest.raises(dhp.LeaseLost):
            await actx.checkpoint({"i": 1})
        return "refused"

    assert aio.run(fn, ctx) == "refused"


def test_cancel_all_ends_a_running_async_unit(tmp_path):
    store = dhp.Store(tmp_path / "store")
    hid = dhp.dispatch(store, "forever", {}, {"type": "object"})
    ctx = dhp.claim(store, hid, "w1", heartbeat_interval=0)
    started = threading.Event()

    async def fn(actx, inputs):
        started.set()
        await asyncio.sleep(3600)

    outcome = []
    unit = threading.Thread(target=lambda: outcome.append(_outcome(fn, ctx)), daemon=True)
    unit.start()
    started.wait(10)
    assert aio.cancel_all() == 1
    unit.join(10)
    assert outcome == ["cancelled"]
    ctx.release()


def _outcome(fn, ctx) -> str:
    import concurrent.futures

    try:
        aio.run(fn, ctx)
    except concurrent.futures.CancelledError:
        return "cancelled"
    return "returned"


def test_finish_releases_only_the_handoffs_still_held(tmp_path):
    from dhp.worker.slots import Slots

    store = dhp.Store(tmp_path / "store")
    hids = [dhp.dispatch(store, "held", {"k": k}, {"type": "object"}) for k in range(2)]
    slots = Slots(store, {}, units=3, stop=threading.Event(), out=open(os.devnull, "w"))
    held = dhp.claim(store, hids[0], slots.runners[0].worker_id, heartbeat_interval=0)
    done = dhp.claim(store, hids[1], slots.runners[1].worker_id, heartbeat_interval=0)
    done.complete({})
    # A unit still held and one its function completed already: one release.
    slots._running = {slots.runners[0]: held, slots.runners[1]: done}
    assert slots.finish(0) == 1
    assert dhp.status(store, hids[0])["state"] == "released"
    assert dhp.status(store, hids[1])["state"] == "completed"


def test_a_worker_process_grows_its_store_pool_to_its_units(store_location):
    store = dhp.Store(store_location)
    store.expect_threads(32)  # a worker with --units 32 says so before its first claim
    if store_location.startswith("postgresql://"):
        assert store.pool_max >= 32 + 4
    ctxs = []
    for k in range(32):
        hid = dhp.dispatch(store, "wide", {"k": k}, {"type": "object"})
        ctxs.append(dhp.claim(store, hid, f"w{k}", heartbeat_interval=0))
    errors = []

    def write(ctx):
        try:
            ctx.checkpoint({"k": 1})
            ctx.complete({})
        except Exception as exc:  # noqa: BLE001 (reported below)
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(c,)) for c in ctxs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
