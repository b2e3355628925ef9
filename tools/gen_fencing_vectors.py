"""Write vectors/fencing.json and vectors/lifecycle.json.

Every expectation below is written out by hand from the contract's decision table (it is not
computed by dhp.core.machine or by tests/model.py, which the vectors then check). The helpers only
save typing: `acc(**changes)` is "accepted, the record becomes the input record with these
fields changed", `rej(code)` is "refused, the record is unchanged", `dlq(cap)` is "refused
with budget_exceeded, the record is the input record moved to the dead-letter queue".

Ids are permanent: append new cases at the end of a list, never renumber or reuse.
Run: python tools/gen_fencing_vectors.py   (then python tools/lint_vectors.py vectors);
python tools/gen_fencing_vectors.py --check exits 1 if either file is out of date.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOW = 100
TTL = 30
LIVE, EXACT, EXPIRED = 110, 100, 90  # lease_expires_at relative to NOW
SCHEMA = {"type": "object", "required": ["ok"], "properties": {"ok": {"type": "boolean"}},
          "additionalProperties": False}
GOOD, BAD = {"ok": True}, {"ok": "yes"}
FIELDS = ("state", "owner", "fence", "lease_expires_at", "attempts", "steps", "spend",
          "first_claimed_at")


def rec(state: str, **kw) -> dict:
    """A stored record that public operations can reach (fence >= attempts, and so on)."""
    base = {"state": state, "owner": None, "fence": 2, "lease_expires_at": None, "attempts": 2,
            "steps": 1, "spend": 0.5, "first_claimed_at": 40, "budget": {}}
    if state == "pending":
        base.update(fence=0, attempts=0, steps=0, spend=0, first_claimed_at=None)
    if state == "claimed":
        base.update(owner="w1", fence=3, attempts=3, steps=2, spend=1.5, lease_expires_at=LIVE)
    if state == "dead_lettered":
        base.update(budget={"max_attempts": 2}, dlq_reason="max_attempts")
    if state == "cancelled":
        base.update(fence=1, attempts=1)
    base.update(kw)
    return base


def claimed(lease: float = LIVE, **kw) -> dict:
    return rec("claimed", lease_expires_at=lease, **kw)


def acc(**changes) -> tuple:
    return ("accept", None, changes)


def rej(code: str) -> tuple:
    return ("reject", code, {})


def dlq(cap: str) -> tuple:
    return ("reject", "budget_exceeded",
            {"state": "dead_lettered", "owner": None, "lease_expires_at": None}, cap)


def took(record: dict, worker: str) -> tuple:
    """The accepted claim/recover of `record` by `worker` at NOW."""
    first = record["first_claimed_at"] if record["first_claimed_at"] is not None else NOW
    return acc(state="claimed", owner=worker, fence=record["fence"] + 1,
               attempts=record["attempts"] + 1, lease_expires_at=NOW + TTL,
               first_claimed_at=first)


def op(name: str, worker: str | None = None, fence: int | None = None, **kw) -> dict:
    out = {"name": name}
    if worker is not None:
        out["worker"] = worker
    if fence is not None:
        out["fence"] = fence
    if name in ("claim", "recover", "heartbeat", "checkpoint", "complete", "release"):
        out["ttl"] = TTL
    if name == "checkpoint":
        out.setdefault("state", {"page": 3})
        out["spend"] = 0.5
    out.update(kw)
    return out


# (description, requirements, record, op, expectation)
def fencing_cases() -> list[tuple]:
    c = claimed()
    cases = [
        # claim
        ("claim of a pending handoff takes fence 1 and a lease of now+ttl",
         ["DHP-STM-007", "DHP-FEN-001"], rec("pending"), op("claim", "w1"),
         took(rec("pending"), "w1")),
        ("claim of a claimed handoff with a live lease by another worker is a conflict",
         ["DHP-STM-007", "DHP-LSE-002"], c, op("claim", "w2"), rej("conflict")),
        ("claim by the current owner of its own live lease is a conflict",
         ["DHP-STM-007"], c, op("claim", "w1"), rej("conflict")),
        ("claim at the exact expiry instant takes over the lease",
         ["DHP-LSE-002", "DHP-LSE-003", "DHP-FEN-001"], claimed(EXACT), op("claim", "w2"),
         took(claimed(EXACT), "w2")),
        ("claim of a claimed handoff whose lease expired takes it over with fence+1",
         ["DHP-LSE-003", "DHP-FEN-001", "DHP-FEN-002"], claimed(EXPIRED), op("claim", "w2"),
         took(claimed(EXPIRED), "w2")),
        ("claim of a released handoff bumps the kept fence",
         ["DHP-STM-007", "DHP-FEN-001"], rec("released"), op("claim", "w2"),
         took(rec("released"), "w2")),
        ("claim of an orphaned handoff bumps the fence",
         ["DHP-STM-007", "DHP-FEN-001"], rec("orphaned"), op("claim", "w2"),
         took(rec("orphaned"), "w2")),
        ("claim of a completed handoff is a conflict and changes nothing",
         ["DHP-STM-004", "DHP-STM-007"], rec("completed"), op("claim", "w2"),
         rej("conflict")),
        ("claim of a dead-lettered handoff is a conflict",
         ["DHP-STM-005", "DHP-STM-007"], rec("dead_lettered"), op("claim", "w2"),
         rej("conflict")),
        ("claim of a cancelled handoff is a conflict",
         ["DHP-STM-004", "DHP-STM-007"], rec("cancelled"), op("claim", "w2"),
         rej("conflict")),
        ("claim with attempts one below max_attempts is accepted",
         ["DHP-BUD-001"], rec("released", budget={"max_attempts": 3}), op("claim", "w2"),
         took(rec("released"), "w2")),
        ("claim with attempts equal to max_attempts parks the handoff in the DLQ",
         ["DHP-BUD-001", "DHP-BUD-005"], rec("released", budget={"max_attempts": 2}),
         op("claim", "w2"), dlq("max_attempts")),
        ("claim of an expired lease with attempts exhausted parks the handoff in the DLQ",
         ["DHP-BUD-001", "DHP-BUD-005", "DHP-LSE-003"],
         claimed(EXPIRED, budget={"max_attempts": 3}), op("claim", "w2"), dlq("max_attempts")),
        ("claim of a pending handoff with max_attempts 1 is accepted",
         ["DHP-BUD-001"], rec("pending", budget={"max_attempts": 1}), op("claim", "w1"),
         took(rec("pending"), "w1")),
        ("claim after max_wall_clock_s has run out since the first claim parks the handoff",
         ["DHP-BUD-004", "DHP-BUD-005"], rec("released", budget={"max_wall_clock_s": 50}),
         op("claim", "w2"), dlq("max_wall_clock_s")),
        ("claim exactly max_wall_clock_s after the first claim is accepted",
         ["DHP-BUD-004"], rec("released", budget={"max_wall_clock_s": 60}), op("claim", "w2"),
         took(rec("released"), "w2")),
        # recover
        ("recover of a live lease whose owner is alive is a conflict",
         ["DHP-LSE-005", "DHP-STM-007"], c, op("recover", "w2", owner_dead=False),
         rej("conflict")),
        ("recover of a live lease whose owner is known dead takes it with fence+1",
         ["DHP-LSE-005", "DHP-FEN-001"], c, op("recover", "w2", owner_dead=True),
         took(c, "w2")),
        ("recover at the exact expiry instant takes the handoff",
         ["DHP-LSE-002", "DHP-LSE-003", "DHP-FEN-001"], claimed(EXACT), op("recover", "w2"),
         took(claimed(EXACT), "w2")),
        ("recover of an expired lease takes the handoff",
         ["DHP-LSE-003", "DHP-FEN-001"], claimed(EXPIRED), op("recover", "w2"),
         took(claimed(EXPIRED), "w2")),
        ("recover of an orphaned handoff takes it",
         ["DHP-STM-007", "DHP-FEN-001"], rec("orphaned"), op("recover", "w2"),
         took(rec("orphaned"), "w2")),
        ("recover of a released handoff takes it",
         ["DHP-STM-007", "DHP-FEN-001"], rec("released"), op("recover", "w2"),
         took(rec("released"), "w2")),
        ("recover of a pending handoff acts as a claim",
         ["DHP-STM-007", "DHP-FEN-001"], rec("pending"), op("recover", "w2"),
         took(rec("pending"), "w2")),
        ("recover of a completed handoff is a conflict even with a dead owner",
         ["DHP-STM-004", "DHP-STM-007"], rec("completed"), op("recover", "w2", owner_dead=True),
         rej("conflict")),
        ("recover of a dead-lettered handoff is a conflict",
         ["DHP-STM-005", "DHP-STM-007"], rec("dead_lettered"), op("recover", "w2"),
         rej("conflict")),
        ("recover of a cancelled handoff is a conflict",
         ["DHP-STM-004", "DHP-STM-007"], rec("cancelled"), op("recover", "w2"),
         rej("conflict")),
        ("recover from a dead owner with attempts exhausted parks the handoff in the DLQ",
         ["DHP-BUD-001", "DHP-BUD-005"], claimed(budget={"max_attempts": 3}),
         op("recover", "w2", owner_dead=True), dlq("max_attempts")),
        # heartbeat
        ("heartbeat by the owner with the current fence extends the lease to now+ttl",
         ["DHP-LSE-004", "DHP-FEN-003"], c, op("heartbeat", "w1", 3),
         acc(lease_expires_at=NOW + TTL)),
        ("heartbeat by another worker with the current fence is lease_lost",
         ["DHP-FEN-003", "DHP-FEN-004"], c, op("heartbeat", "w2", 3), rej("lease_lost")),
        ("heartbeat by the owner with a lower fence is lease_lost",
         ["DHP-FEN-003", "DHP-FEN-004"], c, op("heartbeat", "w1", 2), rej("lease_lost")),
        ("heartbeat by the owner with a higher fence is lease_lost",
         ["DHP-FEN-003", "DHP-FEN-004"], c, op("heartbeat", "w1", 4), rej("lease_lost")),
        ("heartbeat at the exact expiry instant is lease_lost",
         ["DHP-LSE-002", "DHP-FEN-004"], claimed(EXACT), op("heartbeat", "w1", 3),
         rej("lease_lost")),
        ("heartbeat after expiry is lease_lost and does not revive the lease",
         ["DHP-LSE-003", "DHP-FEN-004"], claimed(EXPIRED), op("heartbeat", "w1", 3),
         rej("lease_lost")),
        ("heartbeat to a pending handoff is lease_lost",
         ["DHP-FEN-003", "DHP-FEN-004"], rec("pending"), op("heartbeat", "w1", 0),
         rej("lease_lost")),
        ("heartbeat by the last owner of a released handoff is lease_lost",
         ["DHP-FEN-003", "DHP-FEN-004"], rec("released"), op("heartbeat", "w1", 2),
         rej("lease_lost")),
        ("heartbeat to an orphaned handoff is lease_lost",
         ["DHP-FEN-003", "DHP-FEN-004"], rec("orphaned"), op("heartbeat", "w1", 2),
         rej("lease_lost")),
        ("heartbeat to a completed handoff is lease_lost",
         ["DHP-STM-004", "DHP-FEN-004"], rec("completed"), op("heartbeat", "w1", 2),
         rej("lease_lost")),
        ("heartbeat to a dead-lettered handoff is budget_exceeded",
         ["DHP-FEN-006", "DHP-BUD-005"], rec("dead_lettered"), op("heartbeat", "w1", 2),
         rej("budget_exceeded")),
        ("heartbeat to a cancelled handoff is cancelled",
         ["DHP-FEN-006", "DHP-STM-006"], rec("cancelled"), op("heartbeat", "w1", 1),
         rej("cancelled")),
        ("heartbeat exactly max_wall_clock_s after the first claim is accepted",
         ["DHP-BUD-004"], claimed(budget={"max_wall_clock_s": 60}), op("heartbeat", "w1", 3),
         acc(lease_expires_at=NOW + TTL)),
        ("heartbeat past max_wall_clock_s parks the handoff in the DLQ",
         ["DHP-BUD-004", "DHP-BUD-005"], claimed(budget={"max_wall_clock_s": 59.5}),
         op("heartbeat", "w1", 3), dlq("max_wall_clock_s")),
        # checkpoint
        ("checkpoint by the owner with the current fence counts a step and its spend",
         ["DHP-FEN-003", "DHP-BUD-002", "DHP-BUD-003"], c, op("checkpoint", "w1", 3),
         acc(steps=3, spend=2.0, lease_expires_at=NOW + TTL)),
        ("checkpoint by another worker is lease_lost",
         ["DHP-FEN-003", "DHP-FEN-004"], c, op("checkpoint", "w2", 3), rej("lease_lost")),
        ("checkpoint with a lower fence is lease_lost",
         ["DHP-FEN-003", "DHP-FEN-004"], c, op("checkpoint", "w1", 2), rej("lease_lost")),
        ("checkpoint with a higher fence is lease_lost",
         ["DHP-FEN-003", "DHP-FEN-004"], c, op("checkpoint", "w1", 4), rej("lease_lost")),
        ("checkpoint at the exact expiry instant is lease_lost",
         ["DHP-LSE-002", "DHP-FEN-004"], claimed(EXACT), op("checkpoint", "w1", 3),
         rej("lease_lost")),
        ("checkpoint after expiry is lease_lost",
         ["DHP-LSE-003", "DHP-FEN-004"], claimed(EXPIRED), op("checkpoint", "w1", 3),
         rej("lease_lost")),
        ("checkpoint reaching max_steps exactly is accepted",
         ["DHP-BUD-002"], claimed(budget={"max_steps": 3}), op("checkpoint", "w1", 3),
         acc(steps=3, spend=2.0, lease_expires_at=NOW + TTL)),
        ("checkpoint beyond max_steps parks the handoff in the DLQ",
         ["DHP-BUD-002", "DHP-BUD-005"], claimed(budget={"max_steps": 2}),
         op("checkpoint", "w1", 3), dlq("max_steps")),
        ("checkpoint reaching max_spend exactly is accepted",
         ["DHP-BUD-003"], claimed(budget={"max_spend": 2.0}), op("checkpoint", "w1", 3),
         acc(steps=3, spend=2.0, lease_expires_at=NOW + TTL)),
        ("checkpoint whose spend would pass max_spend parks the handoff in the DLQ",
         ["DHP-BUD-003", "DHP-BUD-005"], claimed(budget={"max_spend": 1.75}),
         op("checkpoint", "w1", 3), dlq("max_spend")),
        ("checkpoint to a cancelled handoff is cancelled",
         ["DHP-FEN-006", "DHP-STM-006"], rec("cancelled"), op("checkpoint", "w1", 1),
         rej("cancelled")),
        ("checkpoint to a dead-lettered handoff is budget_exceeded",
         ["DHP-FEN-006", "DHP-BUD-005"], rec("dead_lettered"), op("checkpoint", "w1", 2),
         rej("budget_exceeded")),
        ("checkpoint by another worker past max_steps is lease_lost, not a DLQ move",
         ["DHP-FEN-006", "DHP-FEN-004"], claimed(budget={"max_steps": 2}),
         op("checkpoint", "w2", 3), rej("lease_lost")),
        ("checkpoint with a stale fence to a dead-lettered handoff is budget_exceeded",
         ["DHP-FEN-006"], rec("dead_lettered"), op("checkpoint", "w1", 1),
         rej("budget_exceeded")),
        ("checkpoint with a stale fence to a cancelled handoff is cancelled",
         ["DHP-FEN-006"], rec("cancelled"), op("checkpoint", "w9", 0), rej("cancelled")),
        ("checkpoint past max_wall_clock_s parks the handoff before the step is counted",
         ["DHP-BUD-004", "DHP-BUD-005"], claimed(budget={"max_wall_clock_s": 30}),
         op("checkpoint", "w1", 3), dlq("max_wall_clock_s")),
        # complete
        ("complete by the owner with a valid result completes and clears the owner",
         ["DHP-FEN-003", "DHP-RES-001"], c, op("complete", "w1", 3, result=GOOD),
         acc(state="completed", owner=None, lease_expires_at=None)),
        ("complete by another worker is lease_lost",
         ["DHP-FEN-003", "DHP-FEN-004"], c, op("complete", "w2", 3, result=GOOD),
         rej("lease_lost")),
        ("complete with a lower fence is lease_lost",
         ["DHP-FEN-003", "DHP-FEN-004"], c, op("complete", "w1", 2, result=GOOD),
         rej("lease_lost")),
        ("complete with a higher fence is lease_lost",
         ["DHP-FEN-003", "DHP-FEN-004"], c, op("complete", "w1", 4, result=GOOD),
         rej("lease_lost")),
        ("complete at the exact expiry instant is lease_lost",
         ["DHP-LSE-002", "DHP-FEN-004"], claimed(EXACT), op("complete", "w1", 3, result=GOOD),
         rej("lease_lost")),
        ("complete after expiry is lease_lost",
         ["DHP-LSE-003", "DHP-FEN-004"], claimed(EXPIRED),
         op("complete", "w1", 3, result=GOOD), rej("lease_lost")),
        ("complete with a result that violates output_schema keeps the handoff claimed",
         ["DHP-RES-002"], c, op("complete", "w1", 3, result=BAD), rej("schema_violation")),
        ("complete of an already completed handoff is lease_lost",
         ["DHP-RES-003", "DHP-STM-004"], rec("completed"),
         op("complete", "w1", 2, result=GOOD), rej("lease_lost")),
        ("complete to a cancelled handoff is cancelled",
         ["DHP-FEN-006", "DHP-STM-006"], rec("cancelled"), op("complete", "w1", 1, result=GOOD),
         rej("cancelled")),
        ("complete to a dead-lettered handoff is budget_exceeded",
         ["DHP-FEN-006", "DHP-BUD-005"], rec("dead_lettered"),
         op("complete", "w1", 2, result=GOOD), rej("budget_exceeded")),
        ("complete with a stale fence and an invalid result is lease_lost",
         ["DHP-FEN-006", "DHP-FEN-004"], c, op("complete", "w1", 2, result=BAD),
         rej("lease_lost")),
        # release
        ("release by the owner frees the handoff and keeps the fence",
         ["DHP-FEN-003", "DHP-STM-002", "DHP-FEN-002"], c, op("release", "w1", 3),
         acc(state="released", owner=None, lease_expires_at=None)),
        ("release by another worker is lease_lost",
         ["DHP-FEN-003", "DHP-FEN-004"], c, op("release", "w2", 3), rej("lease_lost")),
        ("release with a lower fence is lease_lost",
         ["DHP-FEN-003", "DHP-FEN-004"], c, op("release", "w1", 2), rej("lease_lost")),
        ("release with a higher fence is lease_lost",
         ["DHP-FEN-003", "DHP-FEN-004"], c, op("release", "w1", 4), rej("lease_lost")),
        ("release at the exact expiry instant is lease_lost",
         ["DHP-LSE-002", "DHP-FEN-004"], claimed(EXACT), op("release", "w1", 3),
         rej("lease_lost")),
        ("release after expiry is lease_lost",
         ["DHP-LSE-003", "DHP-FEN-004"], claimed(EXPIRED), op("release", "w1", 3),
         rej("lease_lost")),
        ("release of a released handoff is lease_lost",
         ["DHP-FEN-004", "DHP-STM-003"], rec("released"), op("release", "w1", 2),
         rej("lease_lost")),
        ("release of a cancelled handoff is cancelled",
         ["DHP-FEN-006", "DHP-STM-006"], rec("cancelled"), op("release", "w1", 1),
         rej("cancelled")),
        # cancel
        ("cancel of a pending handoff cancels it",
         ["DHP-STM-006"], rec("pending"), op("cancel"), acc(state="cancelled")),
        ("cancel of a claimed handoff cancels it and fences out the owner",
         ["DHP-STM-006"], c, op("cancel"),
         acc(state="cancelled", owner=None, lease_expires_at=None)),
        ("cancel of a released handoff cancels it",
         ["DHP-STM-006"], rec("released"), op("cancel"), acc(state="cancelled")),
        ("cancel of an orphaned handoff cancels it",
         ["DHP-STM-006"], rec("orphaned"), op("cancel"), acc(state="cancelled")),
        ("cancel of a claimed handoff with an expired lease cancels it",
         ["DHP-STM-006", "DHP-LSE-003"], claimed(EXPIRED), op("cancel"),
         acc(state="cancelled", owner=None, lease_expires_at=None)),
        ("cancel of a dead-lettered handoff cancels it",
         ["DHP-STM-006", "DHP-STM-005"], rec("dead_lettered"), op("cancel"),
         acc(state="cancelled")),
        ("cancel of a cancelled handoff is accepted and changes nothing",
         ["DHP-STM-006", "DHP-STM-004"], rec("cancelled"), op("cancel"), acc()),
        ("cancel of a completed handoff is a conflict",
         ["DHP-STM-006", "DHP-STM-004"], rec("completed"), op("cancel"), rej("conflict")),
    ]
    return cases


def fencing_suite() -> dict:
    tests = []
    for n, (desc, reqs, record, operation, expect) in enumerate(fencing_cases(), 1):
        outcome, error, changes = expect[0], expect[1], expect[2]
        after = {k: record[k] for k in FIELDS}
        after.update(changes)
        inp = {"record": record, "now": NOW, "op": operation}
        if operation["name"] == "complete":
            inp["output_schema"] = SCHEMA
        expected = {"outcome": outcome}
        if error:
            expected["error"] = error
        expected["record"] = after
        if len(expect) > 3:
            expected["dlq_reason"] = expect[3]
        tests.append({"id": f"fencing-{n:03d}", "description": desc, "requirements": reqs,
                      "input": inp, "expected": expected})
    return {
        "suite": "fencing",
        "description": (
            "The decision table of the store: given the stored record of a handoff, the "
            "store's clock `now` and one operation, the outcome and the record afterwards. "
            "input.record holds state, owner, fence, lease_expires_at, attempts, steps, spend "
            "(total reported so far), first_claimed_at and budget; fields a store keeps beyond "
            "these start at their dispatch values. input.op holds name, worker, fence, ttl, "
            "spend (checkpoint), state (checkpoint), result (complete, checked against "
            "input.output_schema) and owner_dead (a fact of the test's setup, not a request "
            "argument: the owner's process is dead, so the store's own probe of its liveness "
            "lock succeeds, DHP-LSE-010). expected.outcome is accept or reject; a rejection "
            "names the error code. expected.record lists the stored fields after the "
            "operation: for a plain rejection they equal the input, for budget_exceeded they "
            "show the move to dead_lettered. They are the stored record, not a status report: "
            "a stored claimed record whose lease has expired keeps its owner here, while "
            "status reports it orphaned with owner and lease_expires_in null (DHP-STM-008). "
            "expected.dlq_reason is the budget cap that the DLQ reason names first."),
        "tests": tests,
    }


# ---------------------------------------------------------------- lifecycle traces

def intent(kind: str = "fetch", budget: dict | None = None) -> dict:
    return {"dhp": "1.0", "task_kind": kind, "inputs": {"trace": kind},
            "output_schema": SCHEMA, "budget": budget or {}}


def ok(**kw) -> dict:
    return {"ok": True, **kw}


def err(code: str) -> dict:
    return {"error": code}


def s(at: float, name: str, expect: dict, **kw) -> dict:
    return {"at": at, "op": name, **kw, "expect": expect}


def lifecycle_cases() -> list[tuple]:
    t = 30  # ttl of every trace
    return [
        ("pending to claimed to completed, with the result retrievable",
         ["DHP-STM-002", "DHP-RES-004", "DHP-FEN-001"], intent("happy"), [
             s(0, "dispatch", ok(state="pending", fence=0)),
             s(1, "claim", ok(state="claimed", fence=1), worker="w1"),
             s(2, "checkpoint", ok(), worker="w1", fence=1, state={"page": 1}),
             s(3, "complete", ok(state="completed"), worker="w1", fence=1, result=GOOD),
             s(4, "status", ok(state="completed", fence=1, owner=None, attempts=1)),
             s(4, "result", ok(value=GOOD)),
         ]),
        ("dispatching the same intent twice yields one handoff whose state is untouched",
         ["DHP-ID-004"], intent("idem"), [
             s(0, "dispatch", ok(state="pending")),
             s(1, "claim", ok(fence=1), worker="w1"),
             s(2, "dispatch", ok(state="claimed", fence=1)),
             s(3, "status", ok(state="claimed", fence=1, owner="w1", attempts=1)),
         ]),
        ("claimed to released to claimed again with the fence bumped",
         ["DHP-STM-002", "DHP-FEN-001", "DHP-FEN-002"], intent("release"), [
             s(0, "dispatch", ok()),
             s(1, "claim", ok(fence=1), worker="w1"),
             s(2, "release", ok(state="released", fence=1), worker="w1", fence=1),
             s(3, "status", ok(state="released", owner=None, fence=1)),
             s(4, "claim", ok(state="claimed", fence=2), worker="w2"),
             s(5, "complete", ok(state="completed"), worker="w2", fence=2, result=GOOD),
         ]),
        ("an expired lease reads as orphaned and recover resumes from the last checkpoint",
         ["DHP-LSE-003", "DHP-STM-007", "DHP-CKP-010", "DHP-STM-008"], intent("expiry"), [
             s(0, "dispatch", ok()),
             s(1, "claim", ok(fence=1), worker="w1"),
             s(2, "checkpoint", ok(), worker="w1", fence=1, state={"page": 7}),
             s(31, "status", ok(state="claimed", fence=1, owner="w1")),
             s(32, "status", ok(state="orphaned", fence=1, owner=None)),
             s(33, "recover", ok(state="claimed", fence=2), worker="w2"),
             s(33, "last_checkpoint", ok(value={"page": 7})),
             s(34, "complete", ok(state="completed"), worker="w2", fence=2, result=GOOD),
         ]),
        ("a stale worker's writes after a recovery are lease_lost and change nothing",
         ["DHP-FEN-003", "DHP-FEN-004", "DHP-CKP-010"], intent("stale"), [
             s(0, "dispatch", ok()),
             s(1, "claim", ok(fence=1), worker="w1"),
             s(2, "checkpoint", ok(), worker="w1", fence=1, state={"page": 1}),
             s(40, "recover", ok(fence=2), worker="w2"),
             s(41, "checkpoint", err("lease_lost"), worker="w1", fence=1, state={"page": 99}),
             s(41, "heartbeat", err("lease_lost"), worker="w1", fence=1),
             s(41, "complete", err("lease_lost"), worker="w1", fence=1, result=GOOD),
             s(41, "release", err("lease_lost"), worker="w1", fence=1),
             s(42, "last_checkpoint", ok(value={"page": 1})),
             s(42, "status", ok(state="claimed", owner="w2", fence=2)),
         ]),
        ("claim takes over an expired lease like a worker pool picking up orphaned work",
         ["DHP-LSE-003", "DHP-FEN-001", "DHP-STM-007"], intent("takeover"), [
             s(0, "dispatch", ok()),
             s(1, "claim", ok(fence=1), worker="w1"),
             s(31, "claim", ok(state="claimed", fence=2), worker="w2"),
             s(32, "heartbeat", err("lease_lost"), worker="w1", fence=1),
             s(32, "status", ok(owner="w2", fence=2, attempts=2)),
         ]),
        ("heartbeats keep a lease alive past its first ttl",
         ["DHP-LSE-004"], intent("heartbeat"), [
             s(0, "dispatch", ok()),
             s(1, "claim", ok(fence=1), worker="w1"),
             s(25, "heartbeat", ok(), worker="w1", fence=1),
             s(50, "heartbeat", ok(), worker="w1", fence=1),
             s(79, "status", ok(state="claimed", owner="w1")),
             s(79, "claim", err("conflict"), worker="w2"),
             s(80, "status", ok(state="orphaned")),
         ]),
        ("a recover of a live lease with an owner that is alive is a conflict",
         ["DHP-LSE-005", "DHP-STM-007"], intent("alive"), [
             s(0, "dispatch", ok()),
             s(1, "claim", ok(fence=1), worker="w1"),
             s(2, "recover", err("conflict"), worker="w2", owner_dead=False),
             s(3, "status", ok(state="claimed", owner="w1", fence=1)),
         ]),
        ("a recover of a live lease whose owner died takes it before expiry",
         ["DHP-LSE-005", "DHP-FEN-001"], intent("dead-owner"), [
             s(0, "dispatch", ok()),
             s(1, "claim", ok(fence=1), worker="w1"),
             s(2, "recover", ok(state="claimed", fence=2), worker="w2", owner_dead=True),
             s(3, "checkpoint", err("lease_lost"), worker="w1", fence=1, state={"late": True}),
             s(3, "status", ok(owner="w2", fence=2)),
         ]),
        ("max_attempts exhausted by claims parks the handoff in the DLQ, and requeue revives it",
         ["DHP-BUD-001", "DHP-BUD-005", "DHP-BUD-007", "DHP-STM-005"],
         intent("attempts", {"max_attempts": 2}), [
             s(0, "dispatch", ok()),
             s(1, "claim", ok(fence=1), worker="w1"),
             s(2, "release", ok(), worker="w1", fence=1),
             s(3, "claim", ok(fence=2), worker="w2"),
             s(40, "claim", err("budget_exceeded"), worker="w3"),
             s(41, "status", ok(state="dead_lettered", owner=None, fence=2, attempts=2)),
             s(42, "requeue", ok(state="pending")),
             s(43, "status", ok(state="pending", fence=2, attempts=0)),
             s(44, "claim", ok(state="claimed", fence=3), worker="w3"),
         ]),
        ("max_steps exhausted by a checkpoint parks the handoff with its checkpoints intact",
         ["DHP-BUD-002", "DHP-BUD-005", "DHP-BUD-006"], intent("steps", {"max_steps": 2}), [
             s(0, "dispatch", ok()),
             s(1, "claim", ok(fence=1), worker="w1"),
             s(2, "checkpoint", ok(), worker="w1", fence=1, state={"step": 1}),
             s(3, "checkpoint", ok(), worker="w1", fence=1, state={"step": 2}),
             s(4, "checkpoint", err("budget_exceeded"), worker="w1", fence=1,
               state={"step": 3}),
             s(5, "status", ok(state="dead_lettered", owner=None, fence=1)),
             s(5, "last_checkpoint", ok(value={"step": 2})),
             s(6, "heartbeat", err("budget_exceeded"), worker="w1", fence=1),
         ]),
        ("max_spend exceeded by a checkpoint parks the handoff in the DLQ",
         ["DHP-BUD-003", "DHP-BUD-005"], intent("spend", {"max_spend": 1.0}), [
             s(0, "dispatch", ok()),
             s(1, "claim", ok(fence=1), worker="w1"),
             s(2, "checkpoint", ok(), worker="w1", fence=1, state={"a": 1}, spend=0.75),
             s(3, "checkpoint", err("budget_exceeded"), worker="w1", fence=1, state={"a": 2},
               spend=0.5),
             s(4, "status", ok(state="dead_lettered")),
             s(4, "last_checkpoint", ok(value={"a": 1})),
         ]),
        ("max_wall_clock_s exceeded by a heartbeat parks the handoff in the DLQ",
         ["DHP-BUD-004", "DHP-BUD-005"], intent("wall", {"max_wall_clock_s": 10}), [
             s(0, "dispatch", ok()),
             s(1, "claim", ok(fence=1), worker="w1"),
             s(11, "heartbeat", ok(), worker="w1", fence=1),
             s(12, "heartbeat", err("budget_exceeded"), worker="w1", fence=1),
             s(13, "status", ok(state="dead_lettered", owner=None)),
         ]),
        ("max_wall_clock_s counts from the first claim across a release and a new claim",
         ["DHP-BUD-004"], intent("wall-release", {"max_wall_clock_s": 10}), [
             s(0, "dispatch", ok()),
             s(1, "claim", ok(fence=1), worker="w1"),
             s(2, "release", ok(), worker="w1", fence=1),
             s(8, "claim", ok(fence=2), worker="w2"),
             s(12, "checkpoint", err("budget_exceeded"), worker="w2", fence=2, state={}),
             s(13, "status", ok(state="dead_lettered")),
         ]),
        ("a dead-lettered handoff is cancelled and then refuses requeue",
         ["DHP-STM-006", "DHP-STM-005", "DHP-STM-004"], intent("dlq-cancel",
                                                               {"max_attempts": 1}), [
             s(0, "dispatch", ok()),
             s(1, "claim", ok(fence=1), worker="w1"),
             s(2, "release", ok(), worker="w1", fence=1),
             s(3, "claim", err("budget_exceeded"), worker="w1"),
             s(4, "cancel", ok(state="cancelled")),
             s(5, "requeue", err("conflict")),
         ]),
        ("cancel of a pending handoff is final",
         ["DHP-STM-006", "DHP-STM-004"], intent("cancel-pending"), [
             s(0, "dispatch", ok()),
             s(1, "cancel", ok(state="cancelled")),
             s(2, "claim", err("conflict"), worker="w1"),
             s(3, "cancel", ok(state="cancelled")),
             s(4, "status", ok(state="cancelled")),
         ]),
        ("cancel reaches a running worker through its next write",
         ["DHP-STM-006", "DHP-FEN-006"], intent("cancel-claimed"), [
             s(0, "dispatch", ok()),
             s(1, "claim", ok(fence=1), worker="w1"),
             s(2, "cancel", ok(state="cancelled")),
             s(3, "heartbeat", err("cancelled"), worker="w1", fence=1),
             s(3, "checkpoint", err("cancelled"), worker="w1", fence=1, state={"x": 1}),
             s(3, "complete", err("cancelled"), worker="w1", fence=1, result=GOOD),
             s(4, "recover", err("conflict"), worker="w2", owner_dead=True),
         ]),
        ("cancel of a released handoff and of an orphaned one both succeed",
         ["DHP-STM-006", "DHP-LSE-003"], intent("cancel-released"), [
             s(0, "dispatch", ok()),
             s(1, "claim", ok(fence=1), worker="w1"),
             s(2, "release", ok(state="released"), worker="w1", fence=1),
             s(3, "cancel", ok(state="cancelled")),
             s(4, "release", err("cancelled"), worker="w1", fence=1),
         ]),
        ("cancel of a claimed handoff whose lease expired succeeds",
         ["DHP-STM-006", "DHP-LSE-003"], intent("cancel-orphaned"), [
             s(0, "dispatch", ok()),
             s(1, "claim", ok(fence=1), worker="w1"),
             s(40, "status", ok(state="orphaned")),
             s(41, "cancel", ok(state="cancelled")),
             s(42, "status", ok(state="cancelled", owner=None, fence=1)),
         ]),
        ("a second complete of the same handoff is refused and the first result stays",
         ["DHP-RES-003", "DHP-RES-004", "DHP-STM-004"], intent("twice"), [
             s(0, "dispatch", ok()),
             s(1, "claim", ok(fence=1), worker="w1"),
             s(2, "complete", ok(state="completed"), worker="w1", fence=1, result=GOOD),
             s(3, "complete", err("lease_lost"), worker="w1", fence=1, result={"ok": False}),
             s(4, "result", ok(value=GOOD)),
             s(5, "cancel", err("conflict")),
             s(6, "claim", err("conflict"), worker="w2"),
             s(6, "requeue", err("conflict")),
         ]),
        ("a result that violates the output schema keeps the handoff claimed for a retry",
         ["DHP-RES-001", "DHP-RES-002"], intent("schema"), [
             s(0, "dispatch", ok()),
             s(1, "claim", ok(fence=1), worker="w1"),
             s(2, "complete", err("schema_violation"), worker="w1", fence=1, result=BAD),
             s(3, "status", ok(state="claimed", owner="w1", fence=1)),
             s(4, "complete", ok(state="completed"), worker="w1", fence=1, result=GOOD),
             s(5, "result", ok(value=GOOD)),
         ]),
        ("requeue of a pending handoff is a conflict",
         ["DHP-STM-005"], intent("requeue-pending"), [
             s(0, "dispatch", ok()),
             s(1, "requeue", err("conflict")),
             s(2, "claim", ok(fence=1), worker="w1"),
             s(3, "requeue", err("conflict")),
             s(4, "status", ok(state="claimed", fence=1)),
         ]),
        ("a lease stays with one owner while live: a second claim is a conflict",
         ["DHP-FEN-005", "DHP-STM-007"], intent("one-owner"), [
             s(0, "dispatch", ok()),
             s(1, "claim", ok(fence=1), worker="w1"),
             s(2, "claim", err("conflict"), worker="w2"),
             s(2, "claim", err("conflict"), worker="w1"),
             s(3, "status", ok(state="claimed", owner="w1", fence=1, attempts=1)),
         ]),
        ("checkpoints carry over a release and a new claim, and the last one is returned",
         ["DHP-CKP-009", "DHP-CKP-010"], intent("carry"), [
             s(0, "dispatch", ok()),
             s(1, "claim", ok(fence=1), worker="w1"),
             s(2, "checkpoint", ok(), worker="w1", fence=1, state=[1]),
             s(3, "checkpoint", ok(), worker="w1", fence=1, state=[1, 2]),
             s(4, "release", ok(), worker="w1", fence=1),
             s(5, "last_checkpoint", ok(value=[1, 2])),
             s(6, "claim", ok(fence=2), worker="w2"),
             s(7, "checkpoint", ok(), worker="w2", fence=2, state=[1, 2, 3]),
             s(8, "last_checkpoint", ok(value=[1, 2, 3])),
             s(8, "status", ok(state="claimed", owner="w2", fence=2, attempts=2)),
         ]),
        ("a heartbeat with the exact expiry instant is lease_lost and the work is orphaned",
         ["DHP-LSE-002", "DHP-LSE-003"], intent("instant"), [
             s(0, "dispatch", ok()),
             s(1, "claim", ok(fence=1), worker="w1"),
             s(1 + t, "heartbeat", err("lease_lost"), worker="w1", fence=1),
             s(1 + t, "status", ok(state="orphaned", fence=1)),
             s(1 + t, "recover", ok(state="claimed", fence=2), worker="w1"),
             s(1 + t, "heartbeat", err("lease_lost"), worker="w1", fence=1),
             s(2 + t, "heartbeat", ok(), worker="w1", fence=2),
         ]),
        ("a requeued handoff gets a fresh step budget and keeps its checkpoints",
         ["DHP-BUD-007", "DHP-BUD-006"], intent("requeue-steps", {"max_steps": 1}), [
             s(0, "dispatch", ok()),
             s(1, "claim", ok(fence=1), worker="w1"),
             s(2, "checkpoint", ok(), worker="w1", fence=1, state="one"),
             s(3, "checkpoint", err("budget_exceeded"), worker="w1", fence=1, state="two"),
             s(4, "requeue", ok(state="pending")),
             s(5, "last_checkpoint", ok(value="one")),
             s(6, "claim", ok(fence=2), worker="w2"),
             s(7, "checkpoint", ok(), worker="w2", fence=2, state="two"),
             s(8, "complete", ok(state="completed"), worker="w2", fence=2, result=GOOD),
         ]),
        ("writes to an unknown handoff are not_found",
         ["DHP-FEN-006", "DHP-STM-003"], intent("unknown"), [
             s(0, "heartbeat", err("not_found"), worker="w1", fence=1),
             s(0, "claim", err("not_found"), worker="w1"),
             s(0, "status", err("not_found")),
             s(1, "dispatch", ok(state="pending", fence=0)),
         ]),
        ("a released handoff rejects writes by its last owner",
         ["DHP-FEN-004", "DHP-STM-003"], intent("released-write"), [
             s(0, "dispatch", ok()),
             s(1, "claim", ok(fence=1), worker="w1"),
             s(2, "release", ok(), worker="w1", fence=1),
             s(3, "checkpoint", err("lease_lost"), worker="w1", fence=1, state={}),
             s(3, "last_checkpoint", ok(value=None)),
             s(4, "status", ok(state="released", owner=None, fence=1)),
         ]),
    ]


def lifecycle_suite() -> dict:
    tests = []
    for n, (desc, reqs, the_intent, steps) in enumerate(lifecycle_cases(), 1):
        tests.append({"id": f"lifecycle-{n:03d}", "description": desc, "requirements": reqs,
                      "input": {"intent": the_intent, "ttl": 30, "steps": steps},
                      "expected": {"final_state": _final_state(steps)}})
    return {
        "suite": "lifecycle",
        "description": (
            "Traces of operations on one handoff with the expected outcome of every step. "
            "Run the steps in order; before each, set the store's clock to its `at` "
            "(seconds). dispatch uses input.intent; claim and recover take `worker` (recover "
            "also `owner_dead`: a fact of the setup, not a request argument: the owner's "
            "process is dead, so the store's own probe of its liveness lock succeeds, "
            "DHP-LSE-010), with lease ttl "
            "input.ttl; heartbeat, checkpoint (state, spend), complete (result) and release "
            "carry `worker` and `fence`. status, last_checkpoint and result read. "
            "expect {\"ok\": true} optionally adds `state` (the effective state "
            "afterwards), `fence`, `owner` (as status reports it: null unless the effective "
            "state is claimed, DHP-STM-008), `attempts` (afterwards) and `value` (what a "
            "read returned); "
            "expect {\"error\": code} names the refusal. expected.final_state is the "
            "effective state after the last step."),
        "tests": tests,
    }


def _final_state(steps: list[dict]) -> str | None:
    """The last state a trace states explicitly (a summary a runner can check at the end)."""
    for step in reversed(steps):
        if "state" in step["expect"]:
            return step["expect"]["state"]
    return None


def render(suite: dict) -> str:
    return json.dumps(suite, indent=1, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    from vector_files import main  # a sibling in tools/, on sys.path when run as a script

    sys.exit(main({ROOT / "vectors" / "fencing.json": render(fencing_suite()),
                   ROOT / "vectors" / "lifecycle.json": render(lifecycle_suite())},
                  sys.argv[1:], __file__))
