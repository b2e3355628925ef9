"""An independent pure model of the DHP/1.0 state machine, the oracle of the store tests.

Written from the contract's decision table (spec/states.md, spec/leases-fencing.md,
spec/budgets.md), deliberately without importing `dhp.core.machine`: the vectors and the stateful
test compare the reference against this second reading of the rules, so a slip in one of
them shows up as a disagreement instead of being copied into both.

`decide(record, op, now)` is the per-operation rule. `ModelHandoff` adds what a store keeps
beside the record (the intent, the checkpoint states, the result) so whole traces can run.

Where the contract is silent this model follows the reference's reading, stated here so the
spec can say it too:
- claim and recover also refuse (budget_exceeded + DLQ) when max_wall_clock_s has run out
  since the first claim (DHP-BUD-004), after the max_attempts check;
- requeue resets attempts, steps, spend and the wall-clock start (a fresh budget), keeps the
  fence and the checkpoints.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from jsonschema import Draft202012Validator

LIVE_STATES = ("pending", "claimed", "released", "orphaned")
ALL_STATES = LIVE_STATES + ("completed", "dead_lettered", "cancelled")
FENCED_WRITES = ("heartbeat", "checkpoint", "complete", "release")
# The record fields the vectors and the stateful test compare.
FIELDS = ("state", "owner", "fence", "lease_expires_at", "attempts", "steps", "spend",
          "first_claimed_at")


@dataclass
class Decision:
    outcome: str  # "accept" or "reject"
    error: str | None  # the spec error code of a rejection
    record: dict  # the record after the operation (the DLQ move for budget_exceeded)
    dlq_cap: str | None = None  # which budget cap sent it to the DLQ


def fresh_record(budget: dict | None = None) -> dict:
    return {"state": "pending", "owner": None, "fence": 0, "lease_expires_at": None,
            "attempts": 0, "steps": 0, "spend": 0, "first_claimed_at": None,
            "budget": dict(budget or {}), "dlq_reason": None, "not_before": None}


def backoff_wait(budget: dict, attempts: int) -> float:
    # DHP-SCH-004 at its longest (no jitter cut): the model cannot know the store's draw.
    if not budget.get("backoff_s"):
        return 0
    return min(budget.get("backoff_max_s", 3600), budget["backoff_s"] * 2 ** (attempts - 1))


def is_live(record: dict, now: float) -> bool:
    # Live strictly before the expiry instant (DHP-LSE-002).
    return record["lease_expires_at"] is not None and now < record["lease_expires_at"]


def effective_state(record: dict, now: float) -> str:
    # An expired claim counts as orphaned for every decision (DHP-LSE-003).
    if record["state"] == "claimed" and not is_live(record, now):
        return "orphaned"
    return record["state"]


def _accept(record: dict, **changes: Any) -> Decision:
    return Decision("accept", None, {**record, **changes})


def _reject(record: dict, code: str) -> Decision:
    return Decision("reject", code, dict(record))


def _park(record: dict, cap: str) -> Decision:
    parked = {**record, "state": "dead_lettered", "owner": None, "lease_expires_at": None,
              "dlq_reason": cap}
    return Decision("reject", "budget_exceeded", parked, dlq_cap=cap)


def _clock_ran_out(record: dict, now: float) -> bool:
    cap = record["budget"].get("max_wall_clock_s")
    start = record["first_claimed_at"]
    return cap is not None and start is not None and now - start > cap


def decide(record: dict | None, op: dict, now: float) -> Decision:
    """Apply one operation to a stored record at store time `now`."""
    name = op["name"]
    if record is None:
        return Decision("reject", "not_found", None)
    state = effective_state(record, now)
    budget = record["budget"]

    if name in ("claim", "recover"):
        owner_dead = name == "recover" and bool(op.get("owner_dead"))
        takeable = state in ("pending", "released", "orphaned") or (
            state == "claimed" and owner_dead)
        if not takeable:
            return _reject(record, "conflict")
        if record.get("not_before") is not None and now < record["not_before"]:
            return _reject(record, "conflict")  # DHP-SCH-001
        if budget.get("max_attempts") is not None and record["attempts"] >= budget[
                "max_attempts"]:
            return _park(record, "max_attempts")
        if _clock_ran_out(record, now):
            return _park(record, "max_wall_clock_s")
        first = record["first_claimed_at"] if record["first_claimed_at"] is not None else now
        return _accept(record, state="claimed", owner=op["worker"], fence=record["fence"] + 1,
                       attempts=record["attempts"] + 1, lease_expires_at=now + op["ttl"],
                       first_claimed_at=first, not_before=None)

    if name in FENCED_WRITES:
        delay = op.get("delay_s")
        if delay is not None and (op.get("backoff") or delay < 0):
            return _reject(record, "invalid_input")  # DHP-SCH-003, before any state check
        # The check order of DHP-FEN-006.
        if record["state"] == "cancelled":
            return _reject(record, "cancelled")
        if record["state"] == "dead_lettered":
            return _reject(record, "budget_exceeded")
        if (state != "claimed" or record["owner"] != op["worker"]
                or record["fence"] != op["fence"]):
            return _reject(record, "lease_lost")
        if _clock_ran_out(record, now):
            return _park(record, "max_wall_clock_s")
        if name == "heartbeat":
            return _accept(record, lease_expires_at=now + op["ttl"])
        if name == "checkpoint":
            spend = op.get("spend", 0)
            if budget.get("max_steps") is not None and record["steps"] + 1 > budget["max_steps"]:
                return _park(record, "max_steps")
            if budget.get("max_spend") is not None and \
                    record["spend"] + spend > budget["max_spend"]:
                return _park(record, "max_spend")
            return _accept(record, steps=record["steps"] + 1, spend=record["spend"] + spend,
                           lease_expires_at=now + op["ttl"])
        if name == "complete":
            if op.get("result_invalid"):
                return _reject(record, "schema_violation")
            return _accept(record, state="completed", owner=None, lease_expires_at=None)
        wait = backoff_wait(budget, record["attempts"]) if op.get("backoff") else delay or 0
        return _accept(record, state="released", owner=None, lease_expires_at=None,
                       not_before=now + wait if wait > 0 else None)

    if name == "cancel":
        if record["state"] == "completed":
            return _reject(record, "conflict")
        if record["state"] == "cancelled":
            return _accept(record)
        return _accept(record, state="cancelled", owner=None, lease_expires_at=None)

    if name == "requeue":
        if record["state"] != "dead_lettered":
            return _reject(record, "conflict")
        return _accept(record, state="pending", attempts=0, steps=0, spend=0,
                       first_claimed_at=None, dlq_reason=None, not_before=None)

    if name == "orphan":
        if state == "orphaned" and record["state"] == "claimed":
            return _accept(record, state="orphaned", owner=None, lease_expires_at=None)
        if state == "claimed" and op.get("owner_dead"):
            return _accept(record, state="orphaned", owner=None, lease_expires_at=None)
        return _reject(record, "conflict")

    raise ValueError(f"the model has no operation {name!r}")


def result_invalid(output_schema: dict, result: Any) -> bool:
    return any(True for _ in Draft202012Validator(output_schema).iter_errors(result))


@dataclass
class ModelHandoff:
    """One handoff as a store holds it: record, checkpoint states, result."""

    intent: dict
    record: dict = field(default_factory=dict)
    checkpoints: list = field(default_factory=list)  # (fence, state, spend) per checkpoint
    result: Any = None

    def __post_init__(self) -> None:
        if not self.record:
            self.record = fresh_record(self.intent.get("budget"))

    def apply(self, op: dict, now: float) -> Decision:
        """Run one operation; keeps checkpoints and the result in step with the record."""
        op = dict(op)
        if op["name"] == "complete":
            op["result_invalid"] = result_invalid(self.intent["output_schema"],
                                                  op.get("result"))
        decision = decide(self.record, op, now)
        if decision.record is not None:
            if decision.outcome == "accept" and op["name"] == "checkpoint":
                self.checkpoints.append((self.record["fence"], op.get("state"),
                                         op.get("spend", 0)))
            if decision.outcome == "accept" and op["name"] == "complete":
                self.result = op.get("result")
            self.record = decision.record
        return decision

    def last_checkpoint(self) -> Any:
        return self.checkpoints[-1][1] if self.checkpoints else None

    def status(self, now: float) -> dict:
        rec = self.record
        state = effective_state(rec, now)
        # Nobody owns an expired lease, whatever the stored record still names.
        owner = rec["owner"] if state == "claimed" else None
        waiting = rec.get("not_before") is not None and now < rec["not_before"] \
            and state in ("pending", "released", "orphaned")
        return {"state": state, "fence": rec["fence"], "owner": owner,
                "attempts": rec["attempts"], "steps": rec["steps"], "spend": rec["spend"],
                "checkpoints": len(self.checkpoints),
                "not_before_in": rec["not_before"] - now if waiting else None}
