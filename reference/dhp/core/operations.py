"""The protocol's operations on any `StoreBackend`, written once.

Each operation is one transaction: read the row, ask `machine.decide` (the only place the
rules live), persist the outcome when it changed anything (for a budget refusal that change
is the move to the DLQ, committed in the same transaction, DHP-BUD-005), and only then raise
the rejection. Checkpoint records get their seq, prev and hash from dhp.core.chain; results are
validated against the output schema before `decide` sees them (DHP-RES-001).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import math
import time
from collections.abc import Iterator
from typing import Any

from dhp.core import chain, failures, journal, limits, machine, results
from dhp.core.backend import StoreBackend
from dhp.core.envelope import check_envelope, envelope_and_text
from dhp.core.errors import (
    Conflict,
    DHPError,
    IntegrityError,
    Internal,
    InvalidInput,
    NotFound,
    StoreCorrupt,
)

# --- argument checks ------------------------------------------------------------------------

# What the store writes as the worker of a write from another process incarnation of the
# same worker id (so the write is fenced out); reserved, never a worker id (DHP-LIM-007).
EARLIER_INCARNATION = " (an earlier process incarnation)"


def check_worker(worker: Any) -> str:
    """A worker id: 1 to 200 characters of Unicode text, no control characters, not one the
    store uses itself (DHP-LIM-007)."""
    if not isinstance(worker, str) or not worker:
        raise InvalidInput(f"worker_id must be a non-empty string, not {worker!r}",
                           requirement="DHP-FEN-003")
    why = None
    if len(worker) > limits.MAX_WORKER_ID:
        why = f"has {len(worker)} characters; at most {limits.MAX_WORKER_ID} are allowed"
    elif not worker.isprintable() and any(
            c < " " or "\x7f" <= c <= "\x9f" or "\ud800" <= c <= "\udfff" for c in worker):
        why = "holds a control character or a lone surrogate (not Unicode text)"
    elif worker.endswith(EARLIER_INCARNATION):
        why = f"ends with {EARLIER_INCARNATION.strip()!r}, which the store reserves"
    if why:
        raise InvalidInput(f"worker_id {worker[:60]!r} {why}", requirement="DHP-LIM-007")
    return worker


def check_seconds(name: str, value: Any, *, allow_none: bool = False) -> float | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not _finite(value) or value <= 0:
        raise InvalidInput(f"{name} must be a positive number of seconds, not {_shown(value)}")
    return value


def check_delay(name: str, value: Any) -> float | None:
    """A wait in seconds: None or a finite number >= 0 (DHP-SCH-002, DHP-SCH-003)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not _finite(value) or value < 0:
        raise InvalidInput(f"{name} must be a number of seconds >= 0, not {_shown(value)}",
                           requirement="DHP-SCH-002")
    return value


def _finite(value: int | float) -> bool:
    """math.isfinite, false for an integer beyond every double (10**400), where isfinite
    raises OverflowError: no JSON number the store can keep (DHP-CJ-006)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def _shown(value: Any) -> str:
    """A value for a message: a huge integer by its size, not its 400 digits."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**30:
        return f"an integer of {len(str(abs(value)))} digits"
    return repr(value)


def check_spend(spend: Any) -> int | float:
    if isinstance(spend, bool) or not isinstance(spend, (int, float)) \
            or not _finite(spend) or spend < 0:
        raise InvalidInput(f"spend must be a finite number >= 0, not {_shown(spend)}",
                           requirement="DHP-BUD-003")
    if spend > limits.MAX_SPEND:
        raise InvalidInput(f"spend {_shown(spend)} is above the largest allowed, "
                           f"{limits.MAX_SPEND}", requirement="DHP-LIM-005")
    return spend


def _raise(outcome: machine.Outcome, hid: str) -> None:
    if not outcome.accepted:
        if isinstance(outcome.error, NotFound):
            raise unknown_handoff(hid)  # the message that names the id
        raise outcome.error or Internal("rejected without an error")


# --- dispatch and the takes -----------------------------------------------------------------

def dispatch(backend: StoreBackend, intent: dict, *,
             progress_timeout_s: float | None = None, delay_s: float | None = None) -> str:
    """Store a new handoff, or return the existing one of the same intent (DHP-ID-004).
    `delay_s` makes a new handoff eligible only that many store-clock seconds from now
    (DHP-SCH-002)."""
    return dispatch_many(backend, [intent], progress_timeout_s=progress_timeout_s,
                         delay_s=delay_s)[0]


def dispatch_many(backend: StoreBackend, intents: list[dict], *,
                  progress_timeout_s: float | None = None,
                  delay_s: float | None = None) -> list[str]:
    """dispatch for each intent in one transaction (one fsync): every intent is checked
    before anything is stored, so a bad one stores none. Returns the ids in order."""
    check_seconds("progress_timeout_s", progress_timeout_s, allow_none=True)
    check_delay("delay_s", delay_s)
    now = _dt.datetime.now(_dt.timezone.utc)
    not_before = backend.now() + delay_s if delay_s else None
    rows = []
    for intent in intents:
        envelope, text = envelope_and_text(intent, created_at=now)
        backend.limits.check_intent(intent, text)  # DHP-LIM-003, before anything is stored
        rows.append((envelope["handoff_id"], envelope,
                     machine.new_record(intent["budget"], progress_timeout_s, not_before),
                     envelope["created_at"], text))
    if rows:
        with backend.transaction() as tx:
            tx.insert_new(rows)  # its commit announces the new work (Tx.mark_takeable)
    return [row[0] for row in rows]


def take(backend: StoreBackend, hid: str, name: str, worker: str, ttl: float) -> dict:
    """claim or recover. Returns the taken row, with `last_checkpoint`."""
    check_worker(worker)
    check_seconds("ttl", ttl)
    token = backend.liveness.token() if backend.liveness else None
    with backend.transaction() as tx:
        row = tx.get(hid)
        now = backend.now()
        op = {"name": name, "worker": worker, "ttl": ttl}
        if name == "recover" and row is not None and backend.liveness is not None \
                and row["record"]["state"] == "claimed" \
                and machine.lease_live(row["record"], now):
            op["owner_dead"] = backend.liveness.owner_dead(row["owner_incarnation"])
        outcome = machine.decide(row["record"] if row else None, op, now)
        if outcome.accepted:
            last = verified_for_resume(tx, row)  # before anything changes (DHP-SEC-004)
        if outcome.changed:
            tx.put_record(hid, outcome.record, token if outcome.accepted else None)
        if outcome.accepted:
            event = journal.taken(tx, hid, row["record"], outcome.record, name, worker, now,
                                  owner_dead=op.get("owner_dead", False))
            row = dict(row, record=outcome.record, owner_incarnation=token,
                       last_checkpoint=last, lease_event=event)
    _raise(outcome, hid)
    return row


# The longest an idle claim_next(wait=...) sleeps without looking at the store, when nothing
# announces work and no not_before or lease expiry of its kinds is due sooner. It bounds how
# late a waiter sees work that nobody announces: a dead owner in a process that no pool
# watches, or a write by a backend without announcements (spec/schedule.md).
IDLE_RECHECK_S = 10.0


def take_next(backend: StoreBackend, task_kinds: list[str] | tuple[str, ...], worker: str,
              ttl: float, *, wait: float | None = None, stop: Any = None) -> dict | None:
    """claim_next: the oldest partly done handoff of these kinds (orphaned, an expired claim,
    released with a checkpoint; DHP-STM-013), else a claim whose owner is dead (DHP-SCH-005,
    DHP-SCH-008), else the oldest other eligible candidate (DHP-STM-009), or None. Work
    whose budget forbids the claim is moved to the DLQ on the way and the search goes on
    (DHP-STM-011). With `wait` (seconds), blocks until a handoff can be taken or the time
    is up, waking when work is announced or falls due, and at least every IDLE_RECHECK_S;
    `stop` (a threading.Event) ends the wait early when set (and the store announced)."""
    check_worker(worker)
    check_seconds("ttl", ttl)
    check_delay("wait", wait)
    kinds = tuple(task_kinds)
    if not kinds or not all(isinstance(k, str) for k in kinds):
        raise InvalidInput(f"task_kinds must be a non-empty list of strings, not {task_kinds!r}",
                           requirement="DHP-STM-012")
    row, _ = _take_next_once(backend, kinds, worker, ttl)
    if row is not None or not wait:
        return row
    deadline = time.monotonic() + wait
    with backend.work_waiter() as sleep:
        while stop is None or not stop.is_set():
            # Registered first and then looked: an announcement in between is not lost.
            row, due_in = _take_next_once(backend, kinds, worker, ttl)
            left = deadline - time.monotonic()
            if row is not None or left <= 0:
                return row
            sleep(min(t for t in (left, IDLE_RECHECK_S, due_in) if t is not None))
    return None


def _take_next_once(backend: StoreBackend, kinds: tuple[str, ...], worker: str,
                    ttl: float) -> tuple[dict | None, float | None]:
    """One look: (the taken row, None), or (None, seconds until something falls due)."""
    token = backend.liveness.token() if backend.liveness else None
    with backend.transaction() as tx:
        while True:
            # Partly done work first, then a dead owner's (whatever the backlog), then fresh
            # work (DHP-STM-013, DHP-SCH-008), oldest first: one statement on a backend that
            # has it (Tx.pick_next), else one indexed scan each.
            picked = tx.pick_next(kinds)
            now = backend.now()
            row, dead, due = picked if picked is not None else _scan_next(backend, tx, kinds,
                                                                          now)
            if row is None:
                return None, None if due is None else max(0.0, due - now)
            op = {"name": "recover", "owner_dead": True} if dead else {"name": "claim"}
            outcome = machine.decide(row["record"], dict(op, worker=worker, ttl=ttl), now)
            if not outcome.changed:
                raise Internal(f"claim_next picked {row['handoff_id']} but could not take it: "
                               f"{outcome.error}")
            last = verified_for_resume(tx, row) if outcome.accepted else None
            tx.put_record(row["handoff_id"], outcome.record,
                          token if outcome.accepted else None)
            if outcome.accepted:
                event = journal.taken(tx, row["handoff_id"], row["record"], outcome.record,
                                      "claim_next", worker, now,
                                      owner_dead=op.get("owner_dead", False))
                return dict(row, record=outcome.record, owner_incarnation=token,
                            last_checkpoint=last, lease_event=event), None


def verified_for_resume(tx: Any, row: dict) -> dict | None:
    """The last checkpoint of a handoff a worker is about to resume, checked in O(1) of the
    history (DHP-SEC-004): the envelope hashes to the id, the record's own hash covers its
    content and its `prev` is the hash of the record before it; and it is the chain's head
    the handoff's row records (DHP-SEC-010), so trailing records removed or the last one
    replaced by an older one are seen too. IntegrityError, before anything changes, when
    any fails."""
    hid = row["handoff_id"]
    envelope = row["envelope"]
    intent = envelope.get("intent") if isinstance(envelope, dict) else None
    if not isinstance(intent, dict) or envelope.get("handoff_id") != hid \
            or "sha256:" + hashlib.sha256(chain.canonical_parsed(intent)).hexdigest() != hid:
        raise IntegrityError(f"{hid}: the stored envelope does not hash to the handoff id: its "
                             "intent was changed in the store", requirement="DHP-SEC-004")
    # The head is read first: a chain only grows, so a checkpoint committed between the two
    # reads (a read transaction's statements may see different commits) makes the last
    # record newer than the head, never older.
    head = tx.chain_head(hid)
    last = tx.last_checkpoint(hid)
    _check_head(hid, head, last)
    if last is None:
        return None
    try:
        chain.verify_record(last)  # shape and own hash (DHP-CKP-005)
    except (IntegrityError, InvalidInput) as exc:
        raise IntegrityError(f"{hid}: the last checkpoint is damaged: {exc.message}",
                             requirement="DHP-SEC-004") from None
    seq = last["seq"]
    want = hid if seq == 1 else tx.checkpoint_hash(hid, seq - 1)
    if last["handoff_id"] != hid or last["prev"] != want:
        raise IntegrityError(f"{hid}: the last checkpoint (seq {seq}) does not link to the "
                             "record before it: a record was changed or removed",
                             requirement="DHP-SEC-004")
    return last


def _check_head(hid: str, head: tuple[int, str] | None, last: dict | None) -> None:
    """DHP-SEC-010: the last checkpoint read is not older than the head the row recorded."""
    if head is None:
        return
    seq = last.get("seq") if isinstance(last, dict) else None
    if not isinstance(seq, int) or seq < head[0] \
            or seq == head[0] and last.get("hash") != head[1]:
        found = "no checkpoint" if last is None else f"seq {seq!r} ({last.get('hash')!r})"
        raise IntegrityError(
            f"{hid}: the handoff's row records checkpoint seq {head[0]} ({head[1]}) as the "
            f"last one, but the checkpoints hold {found}: the checkpoints were rolled back "
            "or replaced in the store", requirement="DHP-SEC-010")


def _scan_next(backend: StoreBackend, tx: Any, kinds: tuple[str, ...],
               now: float) -> tuple[dict | None, bool, float | None]:
    """Tx.pick_next's answer from the three scans."""
    row = tx.next_resumable(kinds, now)
    if row is not None:
        return row, False, None
    row = _dead_owners_row(backend, tx, kinds)
    if row is not None:
        return row, True, None
    row = tx.next_takeable(kinds, now)
    return (row, False, None) if row is not None else (None, False, tx.next_due(kinds, now))


def _dead_owners_row(backend: StoreBackend, tx: Any, kinds: tuple[str, ...]) -> dict | None:
    """A claimed row of these kinds whose owner process is certainly dead (its liveness lock
    is free, DHP-SCH-005), or None."""
    if backend.liveness is None:
        return None
    for token in tx.owner_incarnations():
        if backend.liveness.owner_dead(token):
            row = tx.claimed_by(token, kinds)
            if row is not None:
                return row
    return None


# --- the fenced writes ----------------------------------------------------------------------

def _draw() -> float:
    import random  # only a release with backoff needs it (start-up time of every command)

    return random.random()


# When each fenced write must survive a power loss (backend.transaction, DHP-CKP-011).
WRITE_SYNC = {"heartbeat": "none", "checkpoint": "batch"}


def write(backend: StoreBackend, hid: str, name: str, worker: str, fence: int, *,
          ttl: float | None = None, state: Any = None, spend: int | float = 0,
          result: Any = None, incarnation: str | None = None,
          sync: str | None = None, limits_: limits.Limits | None = None,
          delay_s: float | None = None, backoff: bool = False,
          failure: dict | None = None) -> dict | None:
    """heartbeat / checkpoint / complete / release by (worker, fence) (DHP-FEN-003).

    `incarnation`, when given, must also match the process that claimed: a restarted
    process reusing a worker id and an old fence is fenced out too. `sync` overrides when the
    write must reach the disk (backend.transaction; by default heartbeats "none", checkpoints
    "batch", the rest "commit"). `limits_` narrows the store's limits for this write (a
    shipper's frame size). A release may delay the next take by `delay_s`, or, after a
    failed attempt (`backoff`), by the budget's backoff (DHP-SCH-003). A release may carry
    the attempt's `failure` ({type, message, traceback}): it is recorded with the release,
    and the release of a failed last attempt moves the handoff to the DLQ (DHP-BUD-008,
    DHP-BUD-011). Returns the new
    checkpoint record for `checkpoint`, the result record for `complete`.

    Everything that costs time in proportion to the value (encoding it, checking its size,
    validating a result) happens before the write lock is taken (DHP-LIM-003, DHP-LIM-008)."""
    check_worker(worker)
    bounds = limits_ or backend.limits
    text = problems = None
    if name == "checkpoint":
        check_spend(spend)
        text = bounds.encode("state", state, bounds.max_state_bytes)
    if name == "complete":
        text = bounds.encode("result", result, bounds.max_result_bytes)
        problems = result_problems(backend, hid, result)
    check_delay("delay_s", delay_s)
    failure = failures.check(failure)
    if failure is not None and name != "release":
        raise InvalidInput(f"only a release carries a failure, not {name}",
                           requirement="DHP-BUD-008")
    if delay_s is not None and backoff:
        raise InvalidInput("give a release either delay_s or backoff, not both",
                           requirement="DHP-SCH-003")
    ttl = backend.ttl if ttl is None else check_seconds("ttl", ttl)
    sync = sync or WRITE_SYNC.get(name, "commit")
    if name == "checkpoint":
        made = _kept_checkpoint(backend, hid, worker, fence, ttl, spend, state, text,
                                incarnation)
        if made is not None:
            return made
    with backend.transaction(sync=sync) as tx:
        row = tx.get(hid, envelope=False)
        now = backend.now()
        op = {"name": name, "worker": worker, "fence": fence, "ttl": ttl, "spend": spend,
              "delay_s": delay_s, "backoff": backoff, "failed": failure is not None,
              "draw": _draw() if backoff else 0.0}
        if row is not None and incarnation is not None \
                and row["owner_incarnation"] not in (None, incarnation):
            op["worker"] = worker + EARLIER_INCARNATION
        if name == "complete" and row is not None:
            op["result_errors"] = problems
        outcome = machine.decide(row["record"] if row else None, op, now)
        made = None
        if outcome.accepted and name in ("checkpoint", "complete"):
            seq, prev = tx.last_link(hid) or (0, hid)
            if name == "checkpoint":
                made, made_text = chain.checkpoint_and_text(hid, seq + 1, fence, state, spend,
                                                            prev, state_text=text)
                tx.append_checkpoint(made, text=made_text)
            else:
                made = chain.make_result_record(hid, fence, result, prev, result_text=text)
                tx.put_result(hid, made)
        if outcome.accepted and failure is not None:  # fenced with the release (DHP-BUD-009)
            record = row["record"]
            tx.add_failure(failures.entry(hid, failure, record["attempts"], record["fence"],
                                          worker, now))
        if outcome.changed:
            keep = outcome.accepted and name in ("heartbeat", "checkpoint")
            tx.put_record(hid, outcome.record, row["owner_incarnation"] if keep else None)
    _raise(outcome, hid)
    return made


def _kept_checkpoint(backend: StoreBackend, hid: str, worker: str, fence: int, ttl: float,
                     spend: int | float, state: Any, text: bytes,
                     incarnation: str | None) -> dict | None:
    """A checkpoint decided on the row this process last wrote (backend.kept_lease) and
    stored by one compare-and-set (backend.checkpoint_kept), or None: then nothing was
    written and write takes the full path, which decides on the stored row. The rules are
    machine.decide's; the ones that depend on the clock (a live lease, the wall-clock cap)
    the store applies with its own clock in the same statement, so they are judged here at
    the row's last progress, an instant the lease was live."""
    kept = backend.kept_lease(hid)
    if kept is None or incarnation is not None \
            and kept["owner_incarnation"] not in (None, incarnation):
        return None
    record = kept["record"]
    op = {"name": "checkpoint", "worker": worker, "fence": fence, "ttl": ttl, "spend": spend}
    outcome = machine.decide(record, op, record["last_progress_at"])
    if not outcome.accepted:
        return None
    seq, prev = kept["link"] or (0, hid)
    made, made_text = chain.checkpoint_and_text(hid, seq + 1, fence, state, spend, prev,
                                                state_text=text)
    if backend.checkpoint_kept(hid, kept, outcome.record, ttl, made, made_text):
        return made
    return None


def result_problems(backend: StoreBackend, hid: str, result: Any) -> list[dict] | None:
    """The result's violations of the handoff's output schema, read and judged outside any
    write transaction (the schema is part of the identity, so it cannot change meanwhile);
    None for an unknown handoff (the write then fails with not_found). The schema of a
    handoff this process took is known without reading (results.remember)."""
    schema = results.schema_of(hid)
    if schema is not None:
        return results.result_errors(schema, result)
    with backend.transaction(write=False) as tx:
        row = tx.get(hid)
    if row is None:
        return None
    return result_errors(row["envelope"], result)


def result_errors(envelope: dict, result: Any) -> list[dict]:
    """Every violation of the output schema, with its JSON path (DHP-RES-002), at a bounded
    cost (DHP-LIM-008)."""
    return results.result_errors(envelope["intent"]["output_schema"], result)


# --- operator operations --------------------------------------------------------------------

def simple(backend: StoreBackend, hid: str, name: str, **extra: Any) -> bool:
    """cancel / requeue / orphan. Returns whether anything changed."""
    with backend.transaction() as tx:
        row = tx.get(hid)
        now = backend.now()
        op = {"name": name, **extra}
        if name == "orphan" and row is not None and backend.liveness is not None \
                and row["record"]["state"] == "claimed" and "owner_dead" not in extra:
            op["owner_dead"] = backend.liveness.owner_dead(row["owner_incarnation"])
        outcome = machine.decide(row["record"] if row else None, op, now)
        if outcome.changed:
            tx.put_record(hid, outcome.record, None)
            if name == "orphan" and outcome.accepted:
                journal.orphaned(tx, hid, row["record"], now,
                                 owner_dead=op.get("owner_dead", False))
    _raise(outcome, hid)
    return outcome.changed


# --- reading --------------------------------------------------------------------------------

def unknown_handoff(hid: str) -> NotFound:
    """The one error every command and call gives for an id the store does not hold."""
    return NotFound(f"no handoff {hid} in this store", requirement="DHP-STM-003")


def get_row(backend: StoreBackend, hid: str, *, verify: bool = False,
            failures: bool = False) -> dict:
    """The handoff's row with its last checkpoint; with `verify`, checked as work about to
    resume from it is (verified_for_resume); with `failures`, its failure records too (a
    read of their own: only the status shows them)."""
    with backend.transaction(write=False) as tx:
        row = tx.get(hid)
        if row is not None:
            row["last_checkpoint"] = verified_for_resume(tx, row) if verify \
                else tx.last_checkpoint(hid)
            if failures:
                row["failures"] = tx.failures(hid)
    if row is None:
        raise unknown_handoff(hid)
    return row


def status_of(row: dict, now: float) -> dict:
    """The status object of a row read with its last checkpoint (schemas/status.json); with
    its failure records when the row holds them (a listing's rows do not)."""
    record = row["record"]
    state = machine.effective_state(record, now)
    last = row.get("last_checkpoint")
    expires = record["lease_expires_at"]
    held = state == "claimed"  # owner and lease only while the lease is live (DHP-STM-008)
    return {
        "handoff_id": row["handoff_id"], "state": state, "task_kind": row["task_kind"],
        "fence": record["fence"], "owner": record["owner"] if held else None,
        "attempts": record["attempts"],
        "checkpoints": {"count": last["seq"] if last else 0,
                        "last_seq": last["seq"] if last else None},
        "lease_expires_in": round(expires - now, 6) if held else None,
        "spend": record["spend"], "steps": record["steps"], "dlq_reason": record["dlq_reason"],
        "not_before_in": _not_before_in(record, state, now),
        **({"failures": [failures.shown(f, now) for f in row["failures"]]}
           if "failures" in row else {}),
    }


def _not_before_in(record: dict, state: str, now: float) -> float | None:
    """Seconds until a waiting handoff may be taken (DHP-SCH-001), or None."""
    not_before = record.get("not_before")
    if state not in machine.TAKEABLE or not_before is None or not_before <= now:
        return None
    return round(not_before - now, 6)


LIST_PAGE = 200  # rows per read transaction of a listing


def statuses(backend: StoreBackend, *, state: str | None = None, task_kind: str | None = None,
             after: str | None = None, created: bool = False) -> Iterator[tuple[dict, str]]:
    """Yield `(status, cursor)` newest first, filtered by effective state and kind, reading
    LIST_PAGE rows per short read transaction: memory stays flat at any store size, and the
    cursor, passed back as `after`, resumes after that item. With `created`, each status
    also holds the handoff's `created_at` (RFC 3339 metadata, for its age)."""
    stored = _stored_states(state)
    kinds = None if task_kind is None else (task_kind,)
    while True:
        with backend.transaction(write=False) as tx:
            now = backend.now()
            found = tx.select_page(states=stored, task_kinds=kinds, after=after,
                                   limit=LIST_PAGE)
            for row in found:
                link = tx.last_link(row["handoff_id"])
                row["last_checkpoint"] = {"seq": link[0]} if link else None  # all status uses
        for row in found:
            item = status_of(row, now)
            if created:
                item["created_at"] = row["created_at"]
            if state is None or item["state"] == state:
                yield item, row["cursor"]
        if len(found) < LIST_PAGE:
            return
        after = found[-1]["cursor"]


def _stored_states(state: str | None) -> tuple[str, ...] | None:
    """The stored states whose rows can have effective state `state` (an expired claim is
    orphaned; a stored orphan is never claimed, so listing the claimed skips them unread)."""
    if state is not None and state not in machine.STATES:
        raise InvalidInput(f"unknown state {state!r}; states are {', '.join(machine.STATES)}",
                           requirement="DHP-STM-001")
    return None if state is None else \
        ("claimed", "orphaned") if state == "orphaned" else (state,)


def rows(backend: StoreBackend, *, state: str | None = None,
         task_kind: str | None = None) -> list[dict]:
    """Full rows (envelope included) with their status, filtered by effective state and kind,
    oldest first."""
    stored = _stored_states(state)
    with backend.transaction(write=False) as tx:
        now = backend.now()
        found = tx.select(states=stored,
                          task_kinds=None if task_kind is None else (task_kind,))
        for row in found:
            row["last_checkpoint"] = tx.last_checkpoint(row["handoff_id"])
            row["failures"] = tx.failures(row["handoff_id"])
    out = []
    for row in found:
        item = status_of(row, now)
        if state is None or item["state"] == state:
            out.append(dict(row, status=item))
    return out


def check_integrity(backend: StoreBackend) -> list[str]:
    """Every problem in the store: the engine's own check, then each handoff on its own (its
    envelope, record and checkpoint chain, DHP-CKP-008, DHP-SEC-005). Empty when sound. Never
    raises for what it finds: a store too damaged to read is itself reported."""
    problems = list(backend.storage_check())
    try:
        with backend.transaction(write=False) as tx:
            for hid in tx.handoff_ids():
                problems += [f"{hid}: {p}" for p in _handoff_problems(tx, hid)]
    except DHPError as exc:
        problems.append(f"the store cannot be read: {exc}")
    return problems


def _handoff_problems(tx: Any, hid: str) -> list[str]:
    try:
        row = tx.get(hid)
        records = tx.checkpoints(hid)
    except StoreCorrupt as exc:
        return [exc.message.removeprefix(f"{hid}: ")]
    found = []
    record, result = row["record"], row["result"]
    envelope = row["envelope"]
    try:
        if not isinstance(envelope, dict) or envelope.get("handoff_id") != hid:
            raise Conflict("the envelope's id differs from the row's id")
        check_envelope(envelope)  # the envelope hashes to its id (DHP-ENV-002)
    except DHPError as exc:
        found.append(f"envelope: {exc}")
    try:
        chain.verify_chain(hid, records, result)
    except DHPError as exc:
        found.append(f"chain: {exc}")
    state = record["state"]
    if state not in machine.STATES:
        found.append(f"state {state!r} does not exist (states: {', '.join(machine.STATES)})")
    if (state == "completed") != (result is not None):
        found.append("completed without a result record" if state == "completed"
                     else f"{state} but holds a result record")
    chain_fence = max([r.get("fence", 0) for r in records if isinstance(r, dict)]
                      + [result.get("fence", 0) if isinstance(result, dict) else 0])
    if not isinstance(record["fence"], int) or record["fence"] < chain_fence:
        found.append(f"stored fence {record['fence']!r} is below fence {chain_fence} in the "
                     "chain: a fence would be issued twice (DHP-FEN-001)")
    if records and isinstance(records[-1], dict) and isinstance(record["steps"], int) \
            and records[-1].get("seq", 0) < record["steps"]:
        found.append(f"{record['steps']} checkpoints were made but the chain ends at seq "
                     f"{records[-1].get('seq')}: the last checkpoints were deleted")
    elif not records and record["steps"]:
        found.append(f"{record['steps']} checkpoints were made but none is stored")
    return found


# --- the portable log -----------------------------------------------------------------------

def export_log(backend: StoreBackend, hid: str, path: Any) -> None:
    from dhp.core.logfile import write_log
    with backend.transaction(write=False) as tx:
        row = tx.get(hid)
        records = tx.checkpoints(hid) if row else []
    if row is None:
        raise unknown_handoff(hid)
    write_log(path, row["envelope"], records, row["result"])
