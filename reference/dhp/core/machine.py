"""The DHP state machine as one pure function (spec/states.md, spec/leases-fencing.md).

`decide(record, op, now)` takes the stored record of a handoff, an operation and the store's
clock, and returns what the store must do: accept with the new record, or reject with the
spec's error code. Every store backend runs this same function inside one atomic
transaction, so the rules live in exactly one place and the fencing and lifecycle vectors
test the code the stores really run.

A record is a dict with: state, owner, fence, lease_expires_at, attempts, steps, spend,
first_claimed_at, last_progress_at, budget, dlq_reason, progress_timeout_s, not_before (the
instant before which nobody may take it, or None: spec/schedule.md). Times are seconds on the
store clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dhp.core.errors import (
    BudgetExceeded,
    Cancelled,
    Conflict,
    DHPError,
    InvalidInput,
    LeaseLost,
    NotFound,
    SchemaViolation,
)
from dhp.core.limits import MAX_FENCE, MAX_SPEND

STATES = ("pending", "claimed", "released", "orphaned", "completed", "dead_lettered",
          "cancelled")
TERMINAL = frozenset({"completed", "cancelled"})
TAKEABLE = frozenset({"pending", "released", "orphaned"})
WRITES = frozenset({"heartbeat", "checkpoint", "complete", "release"})
OPERATIONS = ("claim", "recover", "heartbeat", "checkpoint", "complete", "release", "cancel",
              "requeue", "orphan", "park")


@dataclass(frozen=True)
class Outcome:
    accepted: bool
    record: dict | None  # the record to store (unchanged on a plain rejection)
    error: DHPError | None = None
    changed: bool = True


# Backoff defaults (DHP-SCH-004): the cap when the budget names none, and the base of the
# exponent, so attempt n waits backoff_s * 2 ** (n - 1).
DEFAULT_BACKOFF_MAX_S = 3600.0
BACKOFF_FACTOR = 2.0


def new_record(budget: dict, progress_timeout_s: float | None = None,
               not_before: float | None = None) -> dict:
    """The stored record of a freshly dispatched handoff."""
    return {"state": "pending", "owner": None, "fence": 0, "lease_expires_at": None,
            "attempts": 0, "steps": 0, "spend": 0, "first_claimed_at": None,
            "last_progress_at": None, "budget": dict(budget), "dlq_reason": None,
            "progress_timeout_s": progress_timeout_s, "not_before": not_before}


def eligible(record: dict, now: float) -> bool:
    """DHP-SCH-001: a handoff may be taken only from its not_before instant on."""
    not_before = record.get("not_before")
    return not_before is None or now >= not_before


def partly_done(record: dict, now: float) -> bool:
    """DHP-STM-013: a candidate claim_next takes before fresh work: its owner lost it (an
    expired lease, an orphan) or gave it back with progress (released with a checkpoint)."""
    state = record["state"]
    if state == "claimed":
        return record["lease_expires_at"] <= now
    return eligible(record, now) and (
        state == "orphaned" or state == "released" and record["steps"] > 0)


def backoff_delay(budget: dict, attempts: int, draw: float = 0.0) -> float:
    """DHP-SCH-004: the wait after failed attempt number `attempts` (1 for the first),
    shortened by up to backoff_jitter of itself; `draw` in [0, 1) is the random part."""
    base = budget.get("backoff_s")
    if not base or attempts < 1:
        return 0.0
    cap = budget.get("backoff_max_s", DEFAULT_BACKOFF_MAX_S)
    # min() before the power would overflow: 2 ** 1100 is not a float.
    delay = min(cap, base * BACKOFF_FACTOR ** min(attempts - 1, 1023))
    return delay * (1 - budget.get("backoff_jitter", 0) * draw)


def lease_live(record: dict, now: float) -> bool:
    """DHP-LSE-002: live strictly before the expiry instant."""
    expires = record.get("lease_expires_at")
    return expires is not None and now < expires


def effective_state(record: dict, now: float) -> str:
    """DHP-LSE-003: a claimed handoff whose lease has expired is orphaned."""
    if record["state"] == "claimed" and not lease_live(record, now):
        return "orphaned"
    return record["state"]


def decide(record: dict | None, op: dict, now: float) -> Outcome:
    name = op["name"]
    if name not in OPERATIONS:
        raise ValueError(f"unknown operation {name!r}")
    if record is None:
        return _reject(None, NotFound("no handoff with this id", requirement="DHP-STM-003"))
    if name in ("claim", "recover"):
        return _take(record, op, now)
    if name in WRITES:
        return _write(record, op, now)
    return {"cancel": _cancel, "requeue": _requeue, "orphan": _orphan,
            "park": _park}[name](record, op, now)


def _reject(record: dict | None, error: DHPError) -> Outcome:
    return Outcome(False, record, error, changed=False)


def _parked(record: dict, cap: str) -> dict:
    """The record moved to the DLQ; the stored reason is the cap's name (DHP-BUD-006)."""
    return dict(record, state="dead_lettered", owner=None, lease_expires_at=None,
                dlq_reason=cap)


def _dead_letter(record: dict, cap: str, why: str, requirement: str) -> Outcome:
    """BUD-005: the refusal and the move to the DLQ are one outcome, stored atomically."""
    error = BudgetExceeded(f"{why}; the handoff is now dead_lettered",
                           requirement=requirement, details={"reason": cap})
    return Outcome(False, _parked(record, cap), error, changed=True)


def _wall_clock_exceeded(record: dict, now: float) -> str | None:
    cap = record["budget"].get("max_wall_clock_s")
    started = record.get("first_claimed_at")
    if cap is not None and started is not None and now - started > cap:
        return f"max_wall_clock_s {cap} exceeded ({now - started:.3f}s since first claim)"
    return None


def _take(record: dict, op: dict, now: float) -> Outcome:
    """claim and recover (DHP-STM-007, DHP-FEN-001)."""
    state = effective_state(record, now)
    if state == "claimed" and not (op["name"] == "recover" and op.get("owner_dead")):
        return _reject(record, Conflict(
            f"handoff is claimed by {record['owner']} with a live lease",
            requirement="DHP-STM-007"))
    if state in TERMINAL or state == "dead_lettered":
        return _reject(record, Conflict(f"handoff is {state}", requirement="DHP-STM-007"))
    if record["fence"] >= MAX_FENCE:
        return _reject(record, Conflict(
            f"the fence is {record['fence']}, the largest allowed: no further claim or recover "
            "can be fenced", requirement="DHP-LIM-006"))
    if not eligible(record, now):
        return _reject(record, Conflict(
            f"handoff is {state} and not eligible for another "
            f"{record['not_before'] - now:.3f}s (not_before)", requirement="DHP-SCH-001",
            details={"not_before_in": record["not_before"] - now}))
    cap = record["budget"].get("max_attempts")
    if cap is not None and record["attempts"] >= cap:
        return _dead_letter(record, "max_attempts", f"max_attempts {cap} exhausted",
                            "DHP-BUD-001")
    reason = _wall_clock_exceeded(record, now)
    if reason:
        return _dead_letter(record, "max_wall_clock_s", reason, "DHP-BUD-004")
    taken = dict(record, state="claimed", owner=op["worker"], fence=record["fence"] + 1,
                 lease_expires_at=now + op["ttl"], attempts=record["attempts"] + 1,
                 first_claimed_at=record["first_claimed_at"] if
                 record["first_claimed_at"] is not None else now,
                 last_progress_at=now, not_before=None)
    return Outcome(True, taken)


def _write(record: dict, op: dict, now: float) -> Outcome:
    """heartbeat, checkpoint, complete, release: the fenced writes (DHP-FEN-003, DHP-FEN-006)."""
    state = record["state"]
    if state == "cancelled":
        return _reject(record, Cancelled("handoff was cancelled", requirement="DHP-STM-006"))
    if state == "dead_lettered":
        return _reject(record, BudgetExceeded(
            f"handoff is dead_lettered: {record.get('dlq_reason')}", requirement="DHP-BUD-005"))
    if state != "claimed" or record["owner"] != op["worker"] or record["fence"] != op["fence"] \
            or not lease_live(record, now):
        return _reject(record, LeaseLost(_why_lost(record, op, now), requirement="DHP-FEN-004"))
    reason = _wall_clock_exceeded(record, now)
    if reason:
        return _dead_letter(record, "max_wall_clock_s", reason, "DHP-BUD-004")
    name = op["name"]
    if name == "heartbeat":
        return Outcome(True, dict(record, lease_expires_at=now + op["ttl"]))
    if name == "release":
        return _release(record, op, now)
    if name == "checkpoint":
        return _checkpoint(record, op, now)
    problems = op.get("result_errors") or []
    if problems:
        listing = "; ".join(f"{p['path']}: {p['message']}" for p in problems)
        return _reject(record, SchemaViolation(
            f"result does not match output_schema: {listing}", requirement="DHP-RES-002",
            details=problems))
    return Outcome(True, dict(record, state="completed", owner=None, lease_expires_at=None))


def _checkpoint(record: dict, op: dict, now: float) -> Outcome:
    budget = record["budget"]
    spend = op.get("spend", 0)
    if budget.get("max_steps") is not None and record["steps"] + 1 > budget["max_steps"]:
        return _dead_letter(record, "max_steps", f"max_steps {budget['max_steps']} exhausted",
                            "DHP-BUD-002")
    if record["spend"] + spend > MAX_SPEND:
        return _reject(record, InvalidInput(
            f"spend {spend!r} would take the running total {record['spend']!r} past the largest "
            f"allowed, {MAX_SPEND}", requirement="DHP-LIM-005"))
    if budget.get("max_spend") is not None and record["spend"] + spend > budget["max_spend"]:
        return _dead_letter(record, "max_spend", f"max_spend {budget['max_spend']} would be "
                            f"exceeded ({record['spend']} spent + {spend})", "DHP-BUD-003")
    return Outcome(True, dict(record, steps=record["steps"] + 1, spend=record["spend"] + spend,
                              lease_expires_at=now + op["ttl"], last_progress_at=now))


def _release(record: dict, op: dict, now: float) -> Outcome:
    """A release; one that reports a failed attempt (`failed`) when no attempt is left parks
    the handoff in the DLQ at once, rather than at the next take (DHP-BUD-011)."""
    cap = record["budget"].get("max_attempts")
    if op.get("failed") and cap is not None and record["attempts"] >= cap:
        return Outcome(True, _parked(record, "max_attempts"))
    return Outcome(True, dict(record, state="released", owner=None, lease_expires_at=None,
                              not_before=_release_not_before(record, op, now)))


def _release_not_before(record: dict, op: dict, now: float) -> float | None:
    """DHP-SCH-003: a release may delay the next take, by `delay_s` or, for a failed
    attempt (`backoff`), by the budget's backoff."""
    if op.get("backoff"):
        delay = backoff_delay(record["budget"], record["attempts"], op.get("draw", 0.0))
    else:
        delay = op.get("delay_s") or 0
    return now + delay if delay > 0 else None


def _why_lost(record: dict, op: dict, now: float) -> str:
    if record["state"] != "claimed":
        return f"handoff is {record['state']}, not claimed by {op['worker']}"
    if record["owner"] != op["worker"]:
        return f"lease is held by {record['owner']}, not {op['worker']}"
    if record["fence"] != op["fence"]:
        return f"fence {op['fence']} is stale; the current fence is {record['fence']}"
    return f"lease expired {now - record['lease_expires_at']:.3f}s ago"


def _cancel(record: dict, op: dict, now: float) -> Outcome:
    """DHP-STM-006: cancel is idempotent and fences out the owner."""
    if record["state"] == "completed":
        return _reject(record, Conflict("handoff is already completed",
                                        requirement="DHP-STM-006"))
    if record["state"] == "cancelled":
        return Outcome(True, record, changed=False)
    return Outcome(True, dict(record, state="cancelled", owner=None, lease_expires_at=None))


def _requeue(record: dict, op: dict, now: float) -> Outcome:
    """DHP-BUD-007: only dead-lettered work is requeued, with a fresh attempt count."""
    if record["state"] != "dead_lettered":
        return _reject(record, Conflict(f"handoff is {record['state']}, not dead_lettered",
                                        requirement="DHP-STM-005"))
    return Outcome(True, dict(record, state="pending", attempts=0, steps=0, spend=0,
                              first_claimed_at=None, dlq_reason=None, not_before=None))


def _orphan(record: dict, op: dict, now: float) -> Outcome:
    """The supervisor's move: claimed -> orphaned when the lease expired, the owner is known
    dead (DHP-LSE-005), or it made no progress within its progress timeout (DHP-LSE-007)."""
    if record["state"] != "claimed":
        return _reject(record, Conflict(f"handoff is {record['state']}, not claimed",
                                        requirement="DHP-STM-002"))
    timeout = record.get("progress_timeout_s")
    stalled = timeout is not None and now - record["last_progress_at"] > timeout
    if lease_live(record, now) and not op.get("owner_dead") and not stalled:
        return _reject(record, Conflict("lease is live and the owner is alive",
                                        requirement="DHP-LSE-005"))
    return Outcome(True, dict(record, state="orphaned", owner=None, lease_expires_at=None))


def _park(record: dict, op: dict, now: float) -> Outcome:
    """The supervisor's budget sweep: work that can make no more progress (wall clock spent,
    or attempts used up with nobody holding it) goes to the DLQ now rather than at its next
    write or claim (DHP-BUD-004, DHP-BUD-001)."""
    state = effective_state(record, now)
    if state in ("claimed", "released", "orphaned") and _wall_clock_exceeded(record, now):
        return Outcome(True, _parked(record, "max_wall_clock_s"))
    cap = record["budget"].get("max_attempts")
    if state in TAKEABLE and cap is not None and record["attempts"] >= cap:
        return Outcome(True, _parked(record, "max_attempts"))
    return _reject(record, Conflict(f"handoff is {state} with budget left",
                                    requirement="DHP-BUD-005"))


def describe(record: dict) -> dict[str, Any]:
    """The parts of a record that vectors compare."""
    return {k: record[k] for k in ("state", "owner", "fence", "attempts")}
