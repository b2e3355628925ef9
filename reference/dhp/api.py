"""The SDK: module-level functions over a store, and `TaskContext`, a worker's hold on one
handoff.

A `TaskContext` heartbeats in the background every `heartbeat_interval` (default ttl / 3;
0 turns it off) while it holds the lease: one schedule per process serves every context
(dhp.heartbeats), and a heartbeat blocked on one store delays no other context's. When the
store refuses a heartbeat (lease lost, handoff cancelled or dead-lettered) the context's
heartbeats stop and its next call raises that error, so cancellation reaches a running
worker at its next heartbeat or write. Leaving a `with` block by an exception, or without
`complete`, releases the lease at once.

SIGTERM drains: the first claim made in the main thread installs a SIGTERM handler (unless
the program has its own) that releases every lease of the process, then exits with status
143. `install_sigterm_drain()` installs it explicitly; `drain()` releases without exiting.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import os
import signal
import threading
import weakref
from collections.abc import Iterable, Iterator
from typing import Any

from dhp.core import failures, operations, results
from dhp.core.backend import StoreBackend
from dhp.core.canonical import canonical_json
from dhp.core.envelope import new_intent
from dhp.core.errors import (
    BudgetExceeded,
    Cancelled,
    Conflict,
    DHPError,
    InvalidInput,
    LeaseLost,
    NotFound,
    Unavailable,
)
from dhp.heartbeats import schedule as _heartbeats
from dhp.observe import tracing
from dhp.observe.tracing import traced
from dhp.store import Store

__all__ = [
    "Store", "StoreBackend", "TaskContext", "cancel", "check_integrity", "checkpoints", "claim",
    "claim_next", "dispatch", "dispatch_intent", "dispatch_many", "dlq", "drain",
    "envelope_of", "export_log", "import_log", "install_sigterm_drain", "iter_handoffs",
    "last_checkpoint", "list_handoffs", "orphan", "Page", "recover", "requeue", "result",
    "status",
]

_FATAL = (LeaseLost, Cancelled, BudgetExceeded, NotFound)
# Bytes a frame needs around a record's state or result: type, id, ids, hashes, counters.
FRAME_OVERHEAD = 1024
_live: weakref.WeakSet[TaskContext] = weakref.WeakSet()
# Re-entrant: the SIGTERM drain runs in the main thread, maybe while it holds the mutex.
_live_mutex = threading.RLock()


class TaskContext:
    """A claimed handoff. Attributes: handoff_id, worker_id, fence, attempt (the take's number
    since dispatch or requeue), envelope, intent, inputs, last_checkpoint (the state of the
    last checkpoint, or None), ttl, heartbeat_interval, ship_to (a shipper that receives
    every durable checkpoint and the result, or None), lease_event (this take's entry in the
    lease journal: `lost_s` and `how` say how long ago and how the previous owner was lost,
    dhp.core.journal)."""

    def __init__(self, store: StoreBackend, row: dict, worker_id: str, ttl: float,
                 heartbeat_interval: float, ship_to: Any = None):
        self.store = store
        self.ship_to = ship_to
        self.handoff_id: str = row["handoff_id"]
        self.worker_id = worker_id
        self.fence: int = row["record"]["fence"]
        self.attempt: int = row["record"]["attempts"]
        self.envelope: dict = row["envelope"]
        self.intent: dict = self.envelope["intent"]
        self.inputs: dict = self.intent["inputs"]
        last = row.get("last_checkpoint")
        self.last_checkpoint: Any = last["state"] if last else None
        self.last_seq: int = last["seq"] if last else 0
        self.lease_event: dict | None = row.get("lease_event")
        self.ttl = ttl
        self.heartbeat_interval = heartbeat_interval
        self._lost: DHPError | None = None
        self._done = False
        self._beats = None
        with _live_mutex:
            _live.add(self)
        if heartbeat_interval:
            self._beats = _heartbeats.every(heartbeat_interval, self._beat)

    def __repr__(self) -> str:
        return (f"TaskContext({self.handoff_id[:19]}..., worker={self.worker_id!r}, "
                f"fence={self.fence}, active={self.active})")

    @property
    def active(self) -> bool:
        """True while this context holds (or believes it holds) the lease."""
        return not self._done

    @property
    def lost(self) -> DHPError | None:
        """Why the lease was lost (LeaseLost, Cancelled, BudgetExceeded), or None."""
        return self._lost

    # --- the fenced writes ---

    def heartbeat(self) -> None:
        """Extend the lease to now + ttl on the store clock (DHP-LSE-004)."""
        self._write("heartbeat")

    @tracing.traced_checkpoint
    def checkpoint(self, state: Any, spend: int | float = 0) -> dict:
        """Record progress; returns the chained checkpoint record. Once this returns the
        checkpoint survives kill -9 of any process (DHP-CKP-009); a power loss can forget only
        the checkpoints of the store's last fsync interval (DHP-CKP-011)."""
        # A record that leaves the host is fsynced here first, so that no power loss can make
        # this store forget what a peer already holds.
        sync = "commit" if self.ship_to is not None else None
        record = self._write("checkpoint", state=state, spend=spend, sync=sync,
                             limits_=self._limits)
        self.last_checkpoint, self.last_seq = state, record["seq"]
        if self.ship_to is not None:  # buffered locally; never waits for the network
            self._ship(self.ship_to.ship_checkpoint, record, f"checkpoint seq {record['seq']}")
        return record

    @traced("complete", tracing.leased)
    def complete(self, result: Any) -> dict:
        """Validate `result` against the output schema and complete; returns the result
        record. On SchemaViolation nothing changes and the lease is kept (DHP-RES-002)."""
        record = self._write("complete", result=result, limits_=self._limits)
        self._finish()
        if self.ship_to is not None:
            self._ship(self.ship_to.ship_result, record, "the result")
        return record

    @property
    def _limits(self) -> Any:
        """The store's limits, narrowed to what the shipper's frames can carry, so a record
        that could not be shipped is refused before it is stored (DHP-LIM-003)."""
        max_frame = getattr(self.ship_to, "max_frame", None)
        if not max_frame:
            return None
        return self.store.limits.narrowed(max_record_bytes=max_frame - FRAME_OVERHEAD)

    def _ship(self, ship: Any, record: dict, what: str) -> None:
        try:
            ship(self.envelope, record)
        except DHPError as exc:  # stored here, not shippable: not a definite refusal
            raise Unavailable(f"{what} is stored in this store but cannot be shipped to the "
                              f"peer: {exc.message}", requirement=exc.requirement) from None

    @traced("release", tracing.leased)
    def release(self, *, delay_s: float | None = None, backoff: bool = False,
                failure: dict | None = None) -> None:
        """Give the handoff back (state released, fence kept) for another worker. `delay_s`
        keeps it from being taken for that many seconds; `backoff=True` says this attempt
        failed and waits the budget's backoff (DHP-SCH-003). `failure` ({type, message,
        traceback}) records why this attempt failed; when it was the last attempt the
        handoff goes to the DLQ now (DHP-BUD-008, DHP-BUD-011)."""
        self._write("release", delay_s=delay_s, backoff=backoff, failure=failure)
        self._finish()

    def fail(self, exc: BaseException) -> None:
        """This attempt failed with `exc`: release with the budget's backoff, recording the
        error's type, message and traceback (see release)."""
        self.release(backoff=True, failure=failures.of_exception(exc))

    def abandon(self) -> None:
        """Stop heartbeating and forget the lease without releasing it: its owner is going
        away (an MCP client session ended), and the lease is left for a recoverer."""
        self._finish()

    def idempotency_key(self, step: Any) -> str:
        """A key for side effects of `step` under this lease: lowercase hex of
        SHA-256(JCS({"fence", "handoff_id", "step"})). The same step gets a new key after a
        takeover (a new fence), so an external system can refuse the stale owner's call."""
        body = {"handoff_id": self.handoff_id, "step": step, "fence": self.fence}
        return hashlib.sha256(canonical_json(body)).hexdigest()

    def _write(self, name: str, **kwargs: Any) -> Any:
        # Even after a loss the store is asked again: it alone knows the current reason
        # (a lost lease may since have been cancelled, DHP-STM-006).
        liveness = self.store.liveness
        try:
            return operations.write(
                self.store, self.handoff_id, name, self.worker_id, self.fence, ttl=self.ttl,
                incarnation=liveness.token() if liveness is not None else None, **kwargs)
        except _FATAL as exc:
            self._lost = exc
            self._finish()
            raise

    # --- background heartbeat ---

    def _beat(self) -> bool:
        """One background heartbeat; False when this context's heartbeats end."""
        if self._done:
            return False
        try:
            self._write("heartbeat")
        except _FATAL:
            return False  # recorded by _write: the context's next call raises it
        except DHPError:
            pass  # store busy or unreachable: try again next time; the lease has slack
        return not self._done

    def _finish(self) -> None:
        self._done = True
        if self._beats is not None:
            self._beats.cancel()
        with _live_mutex:
            _live.discard(self)

    # --- context manager ---

    def __enter__(self) -> TaskContext:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        if not self._done:
            try:
                self.release()
            except DHPError:
                pass  # already lost; the block's own exception (if any) is what matters
        self._finish()
        return False


# --- SIGTERM drain --------------------------------------------------------------------------

def drain() -> int:
    """Release every lease this process holds; returns how many were released."""
    with _live_mutex:
        contexts = list(_live)
    released = 0
    for ctx in contexts:
        if ctx.store.in_transaction_on_this_thread():
            continue  # interrupted mid-transaction: the unwinding `with` block releases it
        try:
            ctx.release()
            released += 1
        except DHPError:
            pass
    return released


def _on_sigterm(signum: int, frame: Any) -> None:
    drain()
    raise SystemExit(128 + signum)


def install_sigterm_drain() -> None:
    """On SIGTERM, release every lease at once and exit with status 143 (must be called from
    the main thread)."""
    signal.signal(signal.SIGTERM, _on_sigterm)


_sigterm_decided = False  # the first claim in the main thread decided (looking up costs)


def _auto_install() -> None:
    global _sigterm_decided
    if _sigterm_decided or threading.current_thread() is not threading.main_thread():
        return
    _sigterm_decided = True
    if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        install_sigterm_drain()


def _forget_after_fork() -> None:
    global _live_mutex, _sigterm_decided
    _live_mutex = threading.RLock()
    _sigterm_decided = False  # a pool's child installs its own drain at its first claim
    _live.clear()  # the parent's leases are the parent's to release


os.register_at_fork(after_in_child=_forget_after_fork)


# --- SDK functions --------------------------------------------------------------------------

@traced("dispatch", tracing.dispatched)
def dispatch(store: StoreBackend, task_kind: str, inputs: dict, output_schema: dict,
             budget: dict | None = None, progress_timeout_s: float | None = None, *,
             delay_s: float | None = None,
             not_before: _dt.datetime | None = None) -> str:
    """Store a handoff (idempotent: the same intent returns the same id, DHP-ID-004).

    A new handoff can wait before its first run (DHP-SCH-002): `delay_s` seconds from now,
    or until `not_before`, a timezone-aware datetime (turned into a delay on this host's
    wall clock once, here; the store then counts it on its own clock)."""
    intent = new_intent(task_kind, inputs, output_schema, budget)  # checked once, below
    if not_before is not None:
        if delay_s is not None:
            raise InvalidInput("give dispatch either delay_s or not_before, not both")
        delay_s = seconds_until(not_before)
    return operations.dispatch(store, intent, progress_timeout_s=progress_timeout_s,
                               delay_s=delay_s)


def seconds_until(when: _dt.datetime) -> float:
    """Seconds from now until the aware datetime `when` (0 if it has passed)."""
    if not isinstance(when, _dt.datetime) or when.tzinfo is None:
        raise InvalidInput(f"not_before must be a timezone-aware datetime, not {when!r}",
                           requirement="DHP-SCH-002")
    return max(0.0, (when - _dt.datetime.now(_dt.timezone.utc)).total_seconds())


def dispatch_many(store: StoreBackend, items: Iterable[dict], *,
                  progress_timeout_s: float | None = None) -> list[str]:
    """Dispatch many handoffs in one transaction (one fsync for all): each item is a dict of
    `dispatch`'s arguments (task_kind, inputs, output_schema, optional budget). All are
    checked before any is stored, so one bad item stores none; returns the ids in order
    (idempotent like dispatch, DHP-ID-004)."""
    intents = []
    for i, item in enumerate(items):
        if not isinstance(item, dict) or not _ITEM_KEYS[0] <= set(item) <= _ITEM_KEYS[1]:
            raise InvalidInput(f"items[{i}]: expected a dict with task_kind, inputs, "
                               f"output_schema and optionally budget, not {item!r:.200}")
        intents.append(new_intent(item["task_kind"], item["inputs"], item["output_schema"],
                                  item.get("budget")))
    return operations.dispatch_many(store, intents, progress_timeout_s=progress_timeout_s)


_ITEM_KEYS = ({"task_kind", "inputs", "output_schema"},
              {"task_kind", "inputs", "output_schema", "budget"})


def dispatch_intent(store: StoreBackend, intent: Any,
                    progress_timeout_s: float | None = None, *,
                    delay_s: float | None = None) -> str:
    """Store the handoff of a whole intent as a client wrote it (five members, `dhp`
    included), checked as DHP-ENV-007 orders; anything else is refused, never repaired.
    `delay_s` delays a new handoff's first run (DHP-SCH-002)."""
    return operations.dispatch(store, intent, progress_timeout_s=progress_timeout_s,
                               delay_s=delay_s)


def _timing(store: StoreBackend, ttl: float | None,
            heartbeat_interval: float | None) -> tuple[float, float]:
    """Lease ttl and heartbeat interval; an interval of 0 turns the background heartbeat off
    (the caller heartbeats itself, as the conformance adapter does)."""
    if ttl is None:
        ttl = store.ttl
        default = store.default_heartbeat_interval
    else:
        operations.check_seconds("ttl", ttl)
        default = ttl / 3
    interval = default if heartbeat_interval is None else heartbeat_interval
    if interval == 0:
        return ttl, 0
    operations.check_seconds("heartbeat_interval", interval)
    if interval >= ttl:
        raise InvalidInput(f"heartbeat_interval {interval} must be shorter than the ttl {ttl}")
    return ttl, interval


def _context(store: StoreBackend, row: dict, worker_id: str, ttl: float, interval: float,
             ship_to: Any) -> TaskContext:
    _auto_install()
    # The envelope was just verified against the id: its completion need not read it again.
    results.remember(row["handoff_id"], row["envelope"]["intent"]["output_schema"])
    ctx = TaskContext(store, row, worker_id, ttl, interval, ship_to)
    if ship_to is not None:
        # The whole chain, so a checkpoint committed here but never buffered before a crash
        # still reaches the peer (DHP-TRN-025); the peer drops what it already has.
        ship_to.ship_chain(ctx.envelope, checkpoints(store, ctx.handoff_id))
    return ctx


@traced("claim", tracing.taken)
def claim(store: StoreBackend, handoff_id: str, worker_id: str, *, ttl: float | None = None,
          heartbeat_interval: float | None = None, ship_to: Any = None) -> TaskContext:
    """Take a pending, released or orphaned handoff (DHP-STM-007); bumps the fence.
    `ship_to` (a `dhp.NetShipper` or `dhp.FileShipper`) ships every checkpoint to a peer."""
    ttl, interval = _timing(store, ttl, heartbeat_interval)
    row = operations.take(store, handoff_id, "claim", worker_id, ttl)
    return _context(store, row, worker_id, ttl, interval, ship_to)


@traced("recover", tracing.taken)
def recover(store: StoreBackend, handoff_id: str, worker_id: str, *, ttl: float | None = None,
            heartbeat_interval: float | None = None, ship_to: Any = None) -> TaskContext:
    """Like claim, and also takes a live lease whose owner process is dead (DHP-LSE-005)."""
    ttl, interval = _timing(store, ttl, heartbeat_interval)
    row = operations.take(store, handoff_id, "recover", worker_id, ttl)
    return _context(store, row, worker_id, ttl, interval, ship_to)


@traced("claim_next", tracing.taken, quiet_when_none=True)
def claim_next(store: StoreBackend, task_kinds: str | list[str], worker_id: str, *,
               ttl: float | None = None, heartbeat_interval: float | None = None,
               ship_to: Any = None, wait: float | None = None,
               stop: threading.Event | None = None) -> TaskContext | None:
    """The next eligible pending, released or orphaned handoff of these kinds (or one whose
    owner is dead, DHP-SCH-005), or None. With `wait` (seconds), blocks until there is one
    or the time is up, without polling the store (spec/schedule.md); setting `stop` and
    then calling `store.announce_work()` ends the wait early."""
    ttl, interval = _timing(store, ttl, heartbeat_interval)
    kinds = [task_kinds] if isinstance(task_kinds, str) else list(task_kinds)
    row = operations.take_next(store, kinds, worker_id, ttl, wait=wait, stop=stop)
    return None if row is None else _context(store, row, worker_id, ttl, interval, ship_to)


def last_checkpoint(store: StoreBackend, handoff_id: str) -> Any:
    """The state of the last acknowledged checkpoint, or None (DHP-CKP-010)."""
    last = operations.get_row(store, handoff_id, verify=True)["last_checkpoint"]
    return last["state"] if last else None


def checkpoints(store: StoreBackend, handoff_id: str) -> list[dict]:
    """Every checkpoint record, in seq order."""
    operations.get_row(store, handoff_id)
    with store.transaction(write=False) as tx:
        return tx.checkpoints(handoff_id)


def status(store: StoreBackend, handoff_id: str) -> dict:
    """A snapshot valid against schemas/status.json."""
    return operations.status_of(operations.get_row(store, handoff_id, failures=True),
                                store.now())


def result(store: StoreBackend, handoff_id: str) -> Any:
    """The result of a completed handoff (DHP-RES-004); Conflict if it has none yet."""
    row = operations.get_row(store, handoff_id)
    if row["result"] is None:
        raise Conflict(f"handoff {handoff_id} is {row['record']['state']}; it has no result",
                       requirement="DHP-RES-004")
    return row["result"]["result"]


def envelope_of(store: StoreBackend, handoff_id: str) -> dict:
    """The stored envelope."""
    return operations.get_row(store, handoff_id)["envelope"]


@traced("cancel", tracing.by_id)
def cancel(store: StoreBackend, handoff_id: str) -> None:
    """Cancel (idempotent); the owner learns at its next heartbeat or write (DHP-STM-006)."""
    operations.simple(store, handoff_id, "cancel")


@traced("requeue", tracing.by_id)
def requeue(store: StoreBackend, handoff_id: str) -> None:
    """Move a dead-lettered handoff back to pending with its attempts reset (DHP-BUD-007)."""
    operations.simple(store, handoff_id, "requeue")


@traced("orphan", tracing.by_id)
def orphan(store: StoreBackend, handoff_id: str) -> bool:
    """The supervisor's move: orphan a claimed handoff whose lease expired, whose owner
    process is dead, or which made no progress in time. Conflict if none applies."""
    return operations.simple(store, handoff_id, "orphan")


class Page(list):
    """A page of status objects, newest first. `cursor`, passed as `after=`, gives the next
    page; it is None when nothing older is left."""

    cursor: str | None = None


def list_handoffs(store: StoreBackend, state: str | None = None,
                  task_kind: str | None = None, *, limit: int | None = None,
                  after: str | None = None) -> Page:
    """Status objects filtered by effective state and task kind, newest first: at most
    `limit` of them (None: all), starting after the cursor `after` of an earlier page.
    A page costs in proportion to its size, not to the store's; `iter_handoffs` streams."""
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)
                              or limit < 1):
        raise InvalidInput(f"limit must be a positive integer or None, not {limit!r}")
    page, last = Page(), None
    for item, cursor in operations.statuses(store, state=state, task_kind=task_kind,
                                            after=after):
        if len(page) == limit:  # one more exists: the page gets a cursor
            page.cursor = last
            break
        page.append(item)
        last = cursor
    return page


def iter_handoffs(store: StoreBackend, state: str | None = None,
                  task_kind: str | None = None, *, after: str | None = None
                  ) -> Iterator[dict]:
    """list_handoffs as a stream, in flat memory (a short read per page of rows)."""
    for item, _cursor in operations.statuses(store, state=state, task_kind=task_kind,
                                             after=after):
        yield item


def dlq(store: StoreBackend) -> list[dict]:
    """The dead-letter queue: status, reason and envelope of each entry (DHP-BUD-006)."""
    return [dict(row["status"], reason=row["record"]["dlq_reason"], envelope=row["envelope"])
            for row in operations.rows(store, state="dead_lettered")]


def export_log(store: StoreBackend, handoff_id: str, path: str | os.PathLike) -> None:
    """Write the handoff's portable JSON-lines log (header, checkpoints, result)."""
    operations.export_log(store, handoff_id, path)


def import_log(store: StoreBackend, path: str | os.PathLike) -> str:
    """Verify a log completely, then store what is new of it exactly as the transport
    ingests the same records, all or nothing (DHP-LOG-008, DHP-LOG-010): the handoff is
    then ready to recover. Returns its id."""
    from dhp.transport.file import ingest_file  # its imports cost start-up time elsewhere

    hid = ingest_file(store, path)["handoff_id"]
    store.announce_work()  # an orphaned handoff may now wait for a worker
    return hid


def check_integrity(store: StoreBackend) -> list[str]:
    """Problems in the store (engine check + every chain); empty when sound."""
    return operations.check_integrity(store)
