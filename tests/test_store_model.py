"""A Hypothesis stateful test: the real SQLite store against the independent pure model
(tests/model.py), over every operation with three workers, fences current, current-1 and
current+1, a test clock that rules move across lease expiry (the exact instant included),
and budgets small enough that work lands in the dead-letter queue.

After every step the two agree on the outcome (error code) and on state, owner, fence,
lease, attempts, steps, spend, checkpoint count and last checkpoint; the fence never
decreases; no fence is handed out twice and at most one grant holds the live lease.

The same machine also runs with dhp.core.machine.decide as the implementation (fast, many more
examples), which checks the rules themselves apart from the storage.
"""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
from typing import Any

import pytest
from backends import dead_owner_token
from dhp.core import machine
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from model import FIELDS, ModelHandoff, effective_state

TTL = 10.0
WORKERS = ("w1", "w2", "w3")
SCHEMA = {"type": "object", "required": ["ok"], "properties": {"ok": {"type": "boolean"}}}
BUDGETS = st.fixed_dictionaries({}, optional={
    "max_attempts": st.sampled_from([1, 2, 3]),
    "max_steps": st.sampled_from([1, 2, 4]),
    "max_spend": st.sampled_from([1.0, 2.5]),
    "max_wall_clock_s": st.sampled_from([15, 40]),
})
REQUIREMENTS = ("DHP-STM-002", "DHP-STM-003", "DHP-STM-004", "DHP-STM-007", "DHP-FEN-001",
                "DHP-FEN-002", "DHP-FEN-003", "DHP-FEN-004", "DHP-FEN-006", "DHP-LSE-002",
                "DHP-LSE-003", "DHP-LSE-004", "DHP-BUD-001", "DHP-BUD-002", "DHP-BUD-003",
                "DHP-BUD-004", "DHP-BUD-005", "DHP-BUD-007", "DHP-RES-002", "DHP-CKP-010",
                "DHP-LSE-005", "DHP-STM-006")


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _intent(budget: dict) -> dict:
    return {"dhp": "1.0", "task_kind": "stateful", "inputs": {"n": secrets.token_hex(4)},
            "output_schema": SCHEMA, "budget": budget}


def _sdk():
    """The public SDK: `dhp` once it re-exports it, else the module it lives in."""
    import importlib

    import dhp
    return dhp if hasattr(dhp, "claim") else importlib.import_module("dhp.api")


class StoreImpl:
    """The real store (on the backend `location()` names) through the public SDK. Writes go
    through the TaskContext the claim handed out; a (worker, fence) that no live context
    holds (a stale or forged fence, or a process that has died) goes through the store's
    operations layer directly."""

    # A fresh store location per example: a temporary folder unless a test sets another.
    location: Any = staticmethod(lambda: tempfile.mkdtemp(prefix="dhp-stateful-"))

    def __init__(self, intent: dict, clock: FakeClock):
        from dhp.core import operations

        self.sdk, self.ops = _sdk(), operations
        self.where = StoreImpl.location()
        self.store = self.sdk.Store(self.where, ttl=TTL, clock=clock)
        self.hid = self.sdk.dispatch(self.store, task_kind=intent["task_kind"],
                                     inputs=intent["inputs"],
                                     output_schema=intent["output_schema"],
                                     budget=intent["budget"])
        self.contexts: dict[tuple[str, int], Any] = {}
        self.dead: list = []
        self.cached = False  # the last refusal came from a context's memory, not the store

    def perform(self, op: dict) -> str | None:
        name, self.cached = op["name"], False
        try:
            if name in ("claim", "recover"):
                ctx = getattr(self.sdk, name)(self.store, self.hid, op["worker"], ttl=TTL,
                                              heartbeat_interval=TTL * 0.99)
                self.contexts[(op["worker"], ctx.fence)] = ctx
            elif name in machine.WRITES:
                ctx = self.contexts.get((op["worker"], op["fence"]))
                if ctx is None:
                    self.ops.write(self.store, self.hid, name, op["worker"], op["fence"],
                                   ttl=TTL, state=op.get("state"), spend=op.get("spend", 0),
                                   result=op.get("result"))
                else:
                    self.cached = ctx.lost is not None
                    if name == "checkpoint":
                        ctx.checkpoint(op["state"], spend=op["spend"])
                    elif name == "complete":
                        ctx.complete(op["result"])
                    else:
                        getattr(ctx, name)()
            else:
                getattr(self.sdk, name)(self.store, self.hid)
        except Exception as exc:  # any failure: its code is compared with the model's
            return getattr(exc, "code", repr(exc))
        return None

    def kill_owner(self) -> None:
        """The owner's process dies: its liveness lock is left behind, unheld, and its
        context can no longer be used."""
        token = dead_owner_token(self.store)
        with self.store.transaction() as tx:
            row = tx.get(self.hid)
            tx.put_record(self.hid, row["record"], token)
            key = (row["record"]["owner"], row["record"]["fence"])
        if key in self.contexts:
            self.dead.append(self.contexts.pop(key))

    def snapshot(self) -> dict:
        with self.store.transaction(write=False) as tx:
            row = tx.get(self.hid)
            records = tx.checkpoints(self.hid)
        snap = {k: row["record"][k] for k in FIELDS}
        snap["checkpoints"] = [(r["fence"], r["state"], r["spend"]) for r in records]
        snap["result"] = row["result"]["result"] if row["result"] else None
        snap["status"] = self.sdk.status(self.store, self.hid)
        return snap

    def close(self) -> None:
        for ctx in [*self.contexts.values(), *self.dead]:
            ctx.__exit__(None, None, None)  # stops its heartbeat thread
        self.store.close()
        if "://" not in self.where:
            shutil.rmtree(self.where, ignore_errors=True)


class MachineImpl:
    """dhp.core.machine.decide with the bookkeeping of a store, kept in memory."""

    def __init__(self, intent: dict, clock: FakeClock):
        self.intent, self.clock = intent, clock
        self.record = machine.new_record(intent["budget"])
        self.checkpoints: list = []
        self.result: Any = None
        self.owner_dead = False
        self.cached = False

    def perform(self, op: dict) -> str | None:
        op = dict(op, ttl=TTL)
        if op["name"] == "complete":
            from jsonschema import Draft202012Validator
            op["result_errors"] = [{"path": "$", "message": e.message} for e in
                                   Draft202012Validator(SCHEMA).iter_errors(op["result"])]
        if op["name"] in ("recover", "orphan"):
            op["owner_dead"] = self.owner_dead
        out = machine.decide(self.record, op, self.clock())
        if out.accepted and op["name"] == "checkpoint":
            self.checkpoints.append((op["fence"], op["state"], op.get("spend", 0)))
        if out.accepted and op["name"] == "complete":
            self.result = op["result"]
        if out.accepted and op["name"] in ("claim", "recover"):
            self.owner_dead = False
        self.record = out.record
        return out.error.code if out.error else None

    def kill_owner(self) -> None:
        self.owner_dead = True

    def snapshot(self) -> dict:
        snap = {k: self.record[k] for k in FIELDS}
        snap["checkpoints"] = list(self.checkpoints)
        snap["result"] = self.result
        return snap

    def close(self) -> None:
        pass


class StoreVersusModel(RuleBasedStateMachine):
    implementation: type = StoreImpl

    def __init__(self) -> None:
        super().__init__()
        self.impl = None

    @initialize(budget=BUDGETS)
    def dispatch(self, budget: dict) -> None:
        self.clock = FakeClock()
        intent = _intent(budget)
        self.impl = self.implementation(intent, self.clock)
        self.model = ModelHandoff(intent)
        self.owner_dead = False
        self.grants: list[tuple[str, int]] = []
        self.highest_fence = 0

    def teardown(self) -> None:
        if self.impl is not None:
            self.impl.close()

    # --- both sides do the same thing ---------------------------------------------------------

    def both(self, op: dict) -> None:
        got = self.impl.perform(op)
        model_op = dict(op, ttl=TTL)
        if op["name"] in ("recover", "orphan"):
            model_op["owner_dead"] = self.owner_dead
        decision = self.model.apply(model_op, self.clock())
        if self.impl.cached:
            # A context that already lost its lease answers from memory (the SDK's choice);
            # its code may be older than the store's current verdict, but it is a refusal.
            assert got is not None and decision.outcome == "reject", f"{op}: {got} {decision}"
        else:
            assert got == decision.error, f"{op} at {self.clock()}: got {got}, model {decision}"
        if decision.outcome == "accept" and op["name"] in ("claim", "recover"):
            self.grants.append((op["worker"], self.model.record["fence"]))
            self.owner_dead = False

    def fence_for(self, delta: int) -> int:
        return self.model.record["fence"] + delta

    # --- time ---------------------------------------------------------------------------------

    @rule(dt=st.sampled_from([0.5, 1.0, 3.0, TTL / 2, TTL, TTL + 1]))
    def advance(self, dt: float) -> None:
        self.clock.now += dt

    @precondition(lambda self: self.model.record["lease_expires_at"] is not None
                  and self.model.record["lease_expires_at"] > self.clock.now)
    @rule()
    def to_the_expiry_instant(self) -> None:
        self.clock.now = self.model.record["lease_expires_at"]

    # --- operations ---------------------------------------------------------------------------

    @rule(worker=st.sampled_from(WORKERS))
    def claim(self, worker: str) -> None:
        self.both({"name": "claim", "worker": worker})

    @rule(worker=st.sampled_from(WORKERS))
    def recover(self, worker: str) -> None:
        self.both({"name": "recover", "worker": worker})

    @precondition(lambda self: self.model.record["state"] == "claimed")
    @rule()
    def owner_process_dies(self) -> None:
        self.impl.kill_owner()
        self.owner_dead = True

    @rule(worker=st.sampled_from(WORKERS), delta=st.sampled_from([-1, 0, 0, 1]))
    def heartbeat(self, worker: str, delta: int) -> None:
        self.both({"name": "heartbeat", "worker": worker, "fence": self.fence_for(delta)})

    @rule(worker=st.sampled_from(WORKERS), delta=st.sampled_from([-1, 0, 0, 1]),
          state=st.integers(0, 1000), spend=st.sampled_from([0, 0.5, 1.0]))
    def checkpoint(self, worker: str, delta: int, state: int, spend: float) -> None:
        self.both({"name": "checkpoint", "worker": worker, "fence": self.fence_for(delta),
                   "state": {"n": state}, "spend": spend})

    @rule(worker=st.sampled_from(WORKERS), delta=st.sampled_from([-1, 0, 0, 1]),
          valid=st.booleans())
    def complete(self, worker: str, delta: int, valid: bool) -> None:
        self.both({"name": "complete", "worker": worker, "fence": self.fence_for(delta),
                   "result": {"ok": True} if valid else {"ok": "no"}})

    @rule(worker=st.sampled_from(WORKERS), delta=st.sampled_from([-1, 0, 0, 1]))
    def release(self, worker: str, delta: int) -> None:
        self.both({"name": "release", "worker": worker, "fence": self.fence_for(delta)})

    @rule(roll=st.integers(0, 5))
    def cancel(self, roll: int) -> None:
        if roll == 0:  # rarely: a cancel ends the run's interesting part
            self.both({"name": "cancel"})

    @rule()
    def supervisor_orphans(self) -> None:
        self.both({"name": "orphan"})

    @rule()
    def requeue(self) -> None:
        self.both({"name": "requeue"})

    # --- what always holds --------------------------------------------------------------------

    @invariant()
    def agree(self) -> None:
        if self.impl is None:
            return
        snap = self.impl.snapshot()
        want = {k: self.model.record[k] for k in FIELDS}
        assert {k: snap[k] for k in FIELDS} == want
        assert snap["checkpoints"] == self.model.checkpoints
        assert snap["result"] == self.model.result
        if "status" in snap:
            mine = self.model.status(self.clock())
            status = dict(snap["status"], checkpoints=snap["status"]["checkpoints"]["count"])
            assert {k: status[k] for k in mine} == mine

    @invariant()
    def fence_never_decreases(self) -> None:
        if self.impl is None:
            return
        fence = self.impl.snapshot()["fence"]
        assert fence >= self.highest_fence
        self.highest_fence = fence

    @invariant()
    def one_owner_per_fence(self) -> None:
        if self.impl is None:
            return
        fences = [f for _, f in self.grants]
        assert len(fences) == len(set(fences)), "a fence was handed out twice"
        snap = self.impl.snapshot()
        holders = [g for g in self.grants if g == (snap["owner"], snap["fence"])
                   and effective_state(snap, self.clock()) == "claimed"]
        assert len(holders) <= 1
        if effective_state(snap, self.clock()) == "claimed":
            assert holders == [(snap["owner"], snap["fence"])]


class MachineVersusModel(StoreVersusModel):
    implementation = MachineImpl


@pytest.mark.covers(*REQUIREMENTS)
def test_store_against_model(backend, request, monkeypatch):
    examples = 100
    if backend == "postgres":
        # Each example costs a few hundred round trips to the server: fewer of them, unless
        # DHP_SLOW=1 asks for the full run.
        monkeypatch.setattr(StoreImpl, "location",
                            request.getfixturevalue("postgres_schemas").scratch)
        examples = 100 if os.environ.get("DHP_SLOW") == "1" else 10
    run_state_machine_as_test(StoreVersusModel, settings=settings(
        max_examples=examples, stateful_step_count=50, deadline=None,
        suppress_health_check=[HealthCheck.too_slow]))


@pytest.mark.covers(*REQUIREMENTS)
def test_machine_against_model():
    run_state_machine_as_test(MachineVersusModel, settings=settings(
        max_examples=300, stateful_step_count=50, deadline=None,
        suppress_health_check=[HealthCheck.too_slow]))
