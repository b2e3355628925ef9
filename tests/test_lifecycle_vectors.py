"""Every lifecycle trace (vectors/lifecycle.json, and the schedule suite's traces of delays,
backoff and claim_next in vectors/schedule.json), step by step, against the independent
model (tests/model.py) and against the real store on each backend (SQLite, Postgres) with a
test clock: once through the store's operations layer (dhp.core.operations, the code every
SDK call ends in) and once through the public SDK (dhp.Store, dhp.claim, ctx.checkpoint, ...).

A recover with `owner_dead: true` needs a dead owner: on the store, the claim that made that
owner runs in a forked child process that then exits, so its liveness lock is really gone
(on Postgres the server frees it a moment after the exit: the driver waits for that).
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any

import pytest
from dhp_conform.suites.decisions import dying_takes
from model import ModelHandoff

VECTORS = Path(__file__).resolve().parent.parent / "vectors" / "lifecycle.json"
SUITE = json.loads(VECTORS.read_text(encoding="utf-8"))
TESTS = SUITE["tests"]
SCHEDULE = json.loads((VECTORS.parent / "schedule.json").read_text(encoding="utf-8"))["tests"]
TAKES = ("claim", "recover", "claim_next")
WRITES = ("heartbeat", "checkpoint", "complete", "release")
COMPARED = ("state", "fence", "owner", "attempts", "not_before_in")


def sdk():
    """The public SDK: `dhp` once it re-exports it, else the module it lives in."""
    import importlib

    import dhp
    if hasattr(dhp, "claim"):
        return dhp
    try:
        return importlib.import_module("dhp.api")
    except ImportError:
        pytest.skip("the SDK (reference/dhp/api.py) is not written yet")


def quiet_interval(ttl: float) -> float:
    """The longest background heartbeat interval the SDK allows: the tests finish long
    before it fires, so no heartbeat moves a lease behind the test clock's back."""
    return ttl * 0.99


def _params():
    return [pytest.param(t, id=t["id"], marks=pytest.mark.covers(*t["requirements"]))
            for t in TESTS + SCHEDULE]


def _release_args(step: dict) -> dict:
    return {k: step[k] for k in ("delay_s", "backoff") if k in step}


class FakeClock:
    def __init__(self, now: float = 0.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


class Refused(Exception):
    def __init__(self, code: str):
        super().__init__(code)
        self.code = code


# --- drivers: one per way of running a trace -------------------------------------------------

class ModelDriver:
    def __init__(self, intent: dict, ttl: float, clock: FakeClock):
        self.intent, self.ttl, self.clock = intent, ttl, clock
        self.handoff: ModelHandoff | None = None

    def _apply(self, op: dict) -> dict:
        if self.handoff is None:
            raise Refused("not_found")
        decision = self.handoff.apply(op, self.clock())
        if decision.outcome == "reject":
            raise Refused(decision.error)
        return decision.record

    def dispatch(self, delay_s: float | None = None) -> None:
        if delay_s is not None and delay_s < 0:
            raise Refused("invalid_input")
        if self.handoff is None:
            self.handoff = ModelHandoff(self.intent)
            if delay_s:
                self.handoff.record["not_before"] = self.clock() + delay_s

    def take(self, name: str, worker: str, owner_dead: bool, in_child: bool) -> int | None:
        if name == "claim_next":  # one handoff: take it as a claim, or a dead owner's
            name = "recover" if owner_dead else "claim"
            try:
                return self.take(name, worker, owner_dead, in_child)
            except Refused as refused:
                if refused.code == "conflict":
                    return None  # nothing it may take
                raise
        op = {"name": name, "worker": worker, "ttl": self.ttl, "owner_dead": owner_dead}
        return self._apply(op)["fence"]

    def write(self, name: str, worker: str, fence: int, step: dict) -> None:
        self._apply({"name": name, "worker": worker, "fence": fence, "ttl": self.ttl,
                     "state": step.get("state"), "spend": step.get("spend", 0),
                     "result": step.get("result"), **_release_args(step)})

    def simple(self, name: str) -> None:
        self._apply({"name": name})

    def status(self) -> dict:
        if self.handoff is None:
            raise Refused("not_found")
        return self.handoff.status(self.clock())

    def last_checkpoint(self) -> Any:
        return self.handoff.last_checkpoint()

    def result(self) -> Any:
        return self.handoff.result


class OpsDriver:
    """The real store through dhp.core.operations."""

    def __init__(self, intent: dict, ttl: float, clock: FakeClock, location: str):
        from dhp.core import operations
        from dhp.core.canonical import handoff_id
        from dhp.store import Store

        self.ops = operations
        self.intent, self.ttl, self.clock = intent, ttl, clock
        self.backend = Store(location, ttl=ttl, clock=clock)
        self.hid = handoff_id(intent)

    def close(self) -> None:
        self.backend.close()

    def dispatch(self, delay_s: float | None = None) -> None:
        assert self.ops.dispatch(self.backend, self.intent, delay_s=delay_s) == self.hid

    def _take(self, name: str, worker: str) -> int | None:
        if name == "claim_next":
            row = self.ops.take_next(self.backend, [self.intent["task_kind"]], worker, self.ttl)
        else:
            row = self.ops.take(self.backend, self.hid, name, worker, self.ttl)
        return None if row is None else row["record"]["fence"]

    def take(self, name: str, worker: str, owner_dead: bool, in_child: bool) -> int | None:
        if in_child:
            return _in_child(self.backend, lambda: self._take(name, worker))
        return self._take(name, worker)

    def write(self, name: str, worker: str, fence: int, step: dict) -> None:
        self.ops.write(self.backend, self.hid, name, worker, fence, ttl=self.ttl,
                       state=step.get("state"), spend=step.get("spend", 0),
                       result=step.get("result"), **_release_args(step))

    def simple(self, name: str) -> None:
        self.ops.simple(self.backend, self.hid, name)

    def _row(self) -> dict:
        return self.ops.get_row(self.backend, self.hid)

    def status(self) -> dict:
        return self.ops.status_of(self._row(), self.backend.now())

    def last_checkpoint(self) -> Any:
        last = self._row()["last_checkpoint"]
        return None if last is None else last["state"]

    def result(self) -> Any:
        return self._row()["result"]["result"]


class SdkDriver(OpsDriver):
    """The real store through the public SDK; writes go through the TaskContext that the
    claim returned, and only a (worker, fence) that no claim handed out (a forged or
    dead process's fence) goes through the operations layer."""

    def __init__(self, intent: dict, ttl: float, clock: FakeClock, location: str):
        from dhp.core.backend import StoreBackend

        self.dhp = sdk()
        super().__init__(intent, ttl, clock, location)
        self.backend.close()
        self.store = self.dhp.Store(location, ttl=ttl, clock=clock)
        self.backend = self.store if isinstance(self.store, StoreBackend) else self.store.backend
        self.contexts: dict[tuple[str, int], Any] = {}

    def close(self) -> None:
        for ctx in self.contexts.values():
            ctx.__exit__(None, None, None)  # stops its heartbeat thread
        super().close()

    def dispatch(self, delay_s: float | None = None) -> None:
        hid = self.dhp.dispatch(self.store, task_kind=self.intent["task_kind"],
                                inputs=self.intent["inputs"],
                                output_schema=self.intent["output_schema"],
                                budget=self.intent["budget"], delay_s=delay_s)
        assert hid == self.hid

    def _sdk_take(self, name: str, worker: str) -> Any:
        which = [self.intent["task_kind"]] if name == "claim_next" else self.hid
        return getattr(self.dhp, name)(self.store, which, worker, ttl=self.ttl,
                                       heartbeat_interval=quiet_interval(self.ttl))

    def take(self, name: str, worker: str, owner_dead: bool, in_child: bool) -> int | None:
        if in_child:
            return _in_child(self.backend, lambda: self._sdk_take(name, worker).fence)
        ctx = self._sdk_take(name, worker)
        if ctx is None:
            return None
        self.contexts[(worker, ctx.fence)] = ctx
        return ctx.fence

    def write(self, name: str, worker: str, fence: int, step: dict) -> None:
        ctx = self.contexts.get((worker, fence))
        if ctx is None:
            return super().write(name, worker, fence, step)
        if name == "checkpoint":
            ctx.checkpoint(step.get("state"), spend=step.get("spend", 0))
        elif name == "complete":
            ctx.complete(step.get("result"))
        elif name == "release":
            ctx.release(**_release_args(step))
        else:
            getattr(ctx, name)()

    def simple(self, name: str) -> None:
        getattr(self.dhp, name)(self.store, self.hid)

    def status(self) -> dict:
        return self.dhp.status(self.store, self.hid)

    def last_checkpoint(self) -> Any:
        return self.dhp.last_checkpoint(self.store, self.hid)

    def result(self) -> Any:
        return self.dhp.result(self.store, self.hid)


def _in_child(backend, action) -> int:
    """Run `action` in a forked child that then exits (its liveness lock dies with it);
    return the fence it took once the store sees the child dead, or raise its refusal."""
    from dhp.store.liveness import incarnation

    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never return into pytest
        try:
            reply = {"fence": action(), "token": incarnation()}
        except BaseException as exc:  # report every failure to the parent
            reply = {"error": getattr(exc, "code", repr(exc))}
        os.write(write, json.dumps(reply).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        reply = json.loads(pipe.read() or b'{"error": "child died"}')
    os.waitpid(pid, 0)
    if "error" in reply:
        raise Refused(reply["error"])
    deadline = time.monotonic() + 30
    while not backend.liveness.owner_dead(reply["token"]):
        assert time.monotonic() < deadline, "the child's liveness lock outlived it by 30 s"
        time.sleep(0.01)
    return reply["fence"]


# --- the trace runner --------------------------------------------------------------------------

def _perform(driver, step: dict, in_child: bool) -> Any:
    name = step["op"]
    if name == "dispatch":
        return driver.dispatch(step.get("delay_s"))
    if name in TAKES:
        return driver.take(name, step["worker"], bool(step.get("owner_dead")), in_child)
    if name in WRITES:
        return driver.write(name, step["worker"], step["fence"], step)
    if name in ("cancel", "requeue"):
        return driver.simple(name)
    if name == "status":
        return driver.status()
    return getattr(driver, name)()  # last_checkpoint, result


def run_trace(driver, clock: FakeClock, vector: dict) -> None:
    steps = vector["input"]["steps"]
    dying = dying_takes(steps)
    for i, step in enumerate(steps):
        where = f"{vector['id']} step {i} ({step['op']} at {step['at']})"
        clock.now = step["at"]
        expect = step["expect"]
        try:
            value = _perform(driver, step, i in dying)
            error = None
        except Exception as exc:  # any failure: its code is what the trace checks
            value, error = None, getattr(exc, "code", repr(exc))
        assert error == expect.get("error"), f"{where}: got {error!r}"
        if error:
            continue
        if "value" in expect:
            assert value == expect["value"], where
        if step["op"] in TAKES and "fence" in expect:
            assert value == expect["fence"], where
        wanted = {k: expect[k] for k in COMPARED if k in expect}
        if wanted:
            status = driver.status()
            got = {k: status.get(k) for k in wanted}
            assert all(_same(got[k], v) for k, v in wanted.items()), f"{where}: {got}"
    final = vector["expected"]["final_state"]
    if final is not None:
        assert driver.status()["state"] == final, f"{vector['id']}: final state"


def _same(got: Any, want: Any) -> bool:
    if isinstance(want, float) and isinstance(got, (int, float)):
        return math.isclose(got, want, abs_tol=1e-6)
    return got == want


def test_suite_shape():
    assert SUITE["suite"] == "lifecycle"
    assert len(TESTS) >= 24
    assert [t["id"] for t in TESTS] == [f"lifecycle-{n:03d}" for n in range(1, len(TESTS) + 1)]
    ops = {s["op"] for t in TESTS for s in t["input"]["steps"]}
    assert ops == {"dispatch", "claim", "recover", "heartbeat", "checkpoint", "complete",
                   "release", "cancel", "requeue", "status", "last_checkpoint", "result"}


@pytest.mark.parametrize("vector", _params())
def test_model(vector):
    clock = FakeClock()
    run_trace(ModelDriver(vector["input"]["intent"], vector["input"]["ttl"], clock), clock,
              vector)


@pytest.mark.parametrize("vector", _params())
def test_store_operations(vector, scratch_location):
    pytest.importorskip("dhp.store.sqlite", reason="the SQLite store (dhp.store.sqlite) is "
                        "not written yet")
    clock = FakeClock()
    driver = OpsDriver(vector["input"]["intent"], vector["input"]["ttl"], clock,
                       scratch_location)
    try:
        run_trace(driver, clock, vector)
    finally:
        driver.close()


@pytest.mark.parametrize("vector", _params())
def test_store_sdk(vector, scratch_location):
    clock = FakeClock()
    driver = SdkDriver(vector["input"]["intent"], vector["input"]["ttl"], clock,
                       scratch_location)
    try:
        run_trace(driver, clock, vector)
    finally:
        driver.close()
