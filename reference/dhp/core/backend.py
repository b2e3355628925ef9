"""The `StoreBackend` interface: the few primitives a store must provide.

Every operation of the protocol (operations.py) is written once on top of these: it opens a
transaction, reads the handoff's row, asks `machine.decide` what to do and persists the
outcome through the transaction. A backend only has to make a transaction atomic,
serialised against concurrent writers (in other processes too) and durable when it commits,
and to provide a clock that every process using the store shares (DHP-LSE-001).

A row is a dict: `envelope`, `task_kind`, `record` (the machine's record, see
machine.new_record), `owner_incarnation`, `result` (the result record or None), `created_at`
(RFC 3339 text, metadata) and `updated_at` (store clock).
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from dhp.core import machine
from dhp.core.errors import InvalidInput
from dhp.core.limits import DEFAULT as DEFAULT_LIMITS
from dhp.core.limits import Limits

DEFAULT_TTL = 5.0
# The longest a burst of checkpoints goes without an fsync (sync="batch"), in seconds.
DEFAULT_FSYNC_INTERVAL = 0.1
SYNCS = ("commit", "batch", "none")


class Tx(ABC):
    """One open transaction. Writes become visible and durable together at commit."""

    # True once this transaction wrote a takeable handoff (mark_takeable): its commit then
    # wakes every waiter (StoreBackend.work_waiter); on a server store the wake-up is sent
    # in the same transaction, so it is delivered exactly when the work becomes visible.
    announce: bool = False

    def mark_takeable(self, record: dict) -> None:
        """Called by put_record and insert for every record they write: a record left
        pending, released or orphaned makes its commit announce work. (A not_before in the
        future announces too: the waiter looks once and then sleeps until it falls due.)"""
        if record["state"] in machine.TAKEABLE:
            self.announce = True

    @abstractmethod
    def get(self, handoff_id: str, *, envelope: bool = True) -> dict | None:
        """The handoff's row, or None; with envelope=False its envelope and result are left
        out (None), which keeps a fenced write's cost independent of the inputs' size."""

    @abstractmethod
    def insert(self, handoff_id: str, envelope: dict, record: dict, created_at: str) -> None:
        """Store a new handoff."""

    def insert_new(self, rows: list[tuple[str, dict, dict, str, str | None]]) -> None:
        """Store each `(handoff_id, envelope, record, created_at, envelope_text)` whose id is
        not stored yet and skip the others (idempotent dispatch, DHP-ID-004). The text, when
        given, is the envelope's JSON, which the store may keep instead of encoding it; a
        backend may write them all in one statement."""
        for hid, envelope, record, created_at, _text in rows:
            if self.get(hid, envelope=False) is None:
                self.insert(hid, envelope, record, created_at)

    @abstractmethod
    def put_record(self, handoff_id: str, record: dict, owner_incarnation: str | None) -> None:
        """Replace the handoff's record (state, owner, fence, lease, counters)."""

    @abstractmethod
    def last_link(self, handoff_id: str) -> tuple[int, str] | None:
        """(seq, hash) of the last checkpoint, without reading its state: the chain link a
        new checkpoint needs."""

    @abstractmethod
    def last_checkpoint(self, handoff_id: str) -> dict | None:
        """The checkpoint record with the highest seq; O(1) in the length of the history."""

    @abstractmethod
    def append_checkpoint(self, record: dict, *, text: str | None = None) -> None:
        """Add a checkpoint record; a second record with the same (handoff_id, seq) fails.
        `text`, when given, is the record's JSON text (its canonical form, from the chain
        verifier that hashed it), which the store may keep instead of encoding `record`."""

    def append_checkpoints(self, records: list[tuple[dict, str | None]]) -> None:
        """`append_checkpoint` for each `(record, text)`, in order; a backend may write them
        in one statement."""
        for record, text in records:
            self.append_checkpoint(record, text=text)

    @abstractmethod
    def checkpoints(self, handoff_id: str) -> list[dict]:
        """Every checkpoint record of the handoff in seq order."""

    @abstractmethod
    def chain_head(self, handoff_id: str) -> tuple[int, str] | None:
        """(seq, hash) of the last checkpoint as the handoff's own row records it, written
        with each append in the same transaction, or None before any: what a take compares
        the last checkpoint it reads with, so a rolled back checkpoints table is seen
        (DHP-SEC-010). O(1)."""

    def checkpoint_hash(self, handoff_id: str, seq: int) -> str | None:
        """The hash of checkpoint `seq`, or None: the link a resumed checkpoint is checked
        against (DHP-SEC-004). A backend should answer in O(1)."""
        found = [r for r in self.checkpoints(handoff_id) if r.get("seq") == seq]
        return found[0].get("hash") if found else None

    def handoff_ids(self) -> list[str]:
        """Every handoff id, oldest first, without reading (or parsing) the rows: the
        integrity check reads each row on its own so one damaged row cannot hide the rest."""
        return [row["handoff_id"] for row in self.select()]

    @abstractmethod
    def put_result(self, handoff_id: str, result_record: dict) -> None:
        """Store the result record of a completion."""

    @abstractmethod
    def select(self, *, states: tuple[str, ...] | None = None,
               task_kinds: tuple[str, ...] | None = None,
               expired_before: float | None = None, limit: int | None = None) -> list[dict]:
        """Rows whose stored state is in `states` and kind in `task_kinds` (None: any), oldest
        first. With `expired_before`, only claimed rows whose lease expires at or before it
        (the supervisor's scan; cost follows the expired rows)."""

    def select_page(self, *, states: tuple[str, ...] | None = None,
                    task_kinds: tuple[str, ...] | None = None, after: str | None = None,
                    limit: int) -> list[dict]:
        """Up to `limit` rows like `select`, newest first, without envelope and result, each
        with a `cursor`: text that, passed as `after`, continues with the next older row (a
        listing's page). This default reads every row; a backend should override it with an
        indexed read whose cost follows `limit`."""
        rows = self.select(states=states, task_kinds=task_kinds)
        end = len(rows) if after is None else _position(after)
        out = []
        for position in range(min(end, len(rows)) - 1, max(end - limit, 0) - 1, -1):
            row = dict(rows[position], envelope=None, result=None, cursor=str(position))
            out.append(row)
        return out

    def ids_with_prefix(self, prefix: str, *, limit: int) -> list[str]:
        """Up to `limit` stored handoff ids that start with `prefix`, in id order (a CLI
        takes a unique prefix for an id). This default reads every row; a backend should
        override it with an indexed range read."""
        return sorted(r["handoff_id"] for r in self.select()
                      if r["handoff_id"].startswith(prefix))[:limit]

    # The lease journal (dhp.core.journal): written in the transaction of each take and
    # orphan, read by the dashboard's timeline and the takeover-delay metric.

    @abstractmethod
    def add_lease_event(self, entry: dict) -> None:
        """Append `entry` (journal.entry) to its handoff's journal, and drop that handoff's
        oldest entries beyond journal.CAP."""

    @abstractmethod
    def lease_events(self, handoff_id: str, *, last: int | None = None) -> list[dict]:
        """The handoff's journal entries (only its `last` ones when given), oldest first,
        each with its `id`."""

    @abstractmethod
    def lease_events_after(self, after: int, limit: int) -> list[dict]:
        """Up to `limit` journal entries of any handoff whose `id` is above `after`, in id
        order. Ids only grow, so a reader that keeps the highest id it saw follows the
        journal (on a store whose writers do not commit in id order, a reader should look a
        little behind it)."""

    # Failure records (dhp.core.failures): written in the transaction of a failed attempt's
    # release, read by status, the DLQ listing, the dashboard and the metrics.

    @abstractmethod
    def add_failure(self, entry: dict) -> None:
        """Append `entry` (failures.entry) to its handoff's failure records, and drop that
        handoff's oldest records beyond failures.CAP."""

    @abstractmethod
    def failures(self, handoff_id: str) -> list[dict]:
        """The handoff's failure records (failures.FIELDS), oldest first."""

    @abstractmethod
    def owner_incarnations(self) -> list[str]:
        """The distinct liveness tokens of the owners of claimed handoffs."""

    def pick_next(self, task_kinds: tuple[str, ...]) -> tuple[dict | None, bool,
                                                             float | None] | None:
        """What claim_next takes next, picked and locked by one statement that reads the
        store's clock and probes owners' liveness itself (then `store.now()` is the clock
        it read after the lock): `(row, owner_dead, None)`, or `(None, False, due)` with
        the instant the next row falls due (next_due). None (the default) when the backend
        has no such statement: claim_next then runs the scans below."""
        return None

    # The three scans of claim_next (operations.take_next). These defaults are correct on
    # any backend; a backend overrides them with one indexed query each.

    def next_resumable(self, task_kinds: tuple[str, ...], now: float) -> dict | None:
        """The oldest dispatched row of these kinds that is partly done at `now`
        (DHP-STM-013): orphaned, or released with a checkpoint (steps > 0), and eligible at
        `now`; or claimed with its lease expired."""
        for row in self.select(task_kinds=task_kinds):
            if machine.partly_done(row["record"], now):
                return row
        return None

    def next_takeable(self, task_kinds: tuple[str, ...], now: float) -> dict | None:
        """The oldest dispatched row of these kinds that claim_next may take at `now`
        (DHP-STM-009): the pending, released and orphaned rows eligible at `now` (their
        not_before is None or <= now, DHP-SCH-001) and the claimed rows whose lease has
        expired. claim_next asks next_resumable first (DHP-STM-013)."""
        for row in self.select(task_kinds=task_kinds):
            record = row["record"]
            if record["state"] in machine.TAKEABLE and machine.eligible(record, now) or (
                    record["state"] == "claimed" and record["lease_expires_at"] <= now):
                return row
        return None

    def claimed_by(self, incarnation: str, task_kinds: tuple[str, ...]) -> dict | None:
        """The oldest claimed row of these kinds whose owner is this liveness token."""
        for row in self.select(states=("claimed",), task_kinds=task_kinds):
            if row["owner_incarnation"] == incarnation:
                return row
        return None

    def next_due(self, task_kinds: tuple[str, ...], now: float) -> float | None:
        """The earliest instant after `now` at which a row of these kinds becomes takeable
        without any write: a not_before that passes or a lease that expires; None if none."""
        times = [r["record"]["not_before"] if r["record"]["state"] != "claimed"
                 else r["record"]["lease_expires_at"]
                 for r in self.select(states=(*sorted(machine.TAKEABLE), "claimed"),
                                      task_kinds=task_kinds)]
        return min((t for t in times if t is not None and t > now), default=None)

    # The supervisor's storage: its leadership row and the indexed scans of a pass, each
    # costing in proportion to the handoffs it finds (ids, oldest first).

    @abstractmethod
    def get_leader(self, name: str) -> dict | None:
        """The leadership row `name` ({holder, incarnation, fence, expires_at}) or None;
        concurrent leadership transactions are serialised from here to their commit."""

    @abstractmethod
    def put_leader(self, name: str, holder: str, incarnation: str | None, fence: int,
                   expires_at: float) -> None:
        """Create or replace the leadership row `name`."""

    @abstractmethod
    def claimed_by_incarnation(self, token: str, limit: int) -> list[str]:
        """Claimed handoffs whose owner process is `token`."""

    @abstractmethod
    def stalled(self, now: float, limit: int) -> list[str]:
        """Claimed handoffs past their progress deadline (DHP-LSE-007)."""

    @abstractmethod
    def over_wall_clock(self, now: float, limit: int) -> list[str]:
        """Live handoffs past their wall-clock budget (DHP-BUD-004)."""


def _position(cursor: str) -> int:
    if not cursor.isdigit():
        raise InvalidInput(f"bad cursor {cursor!r}: pass the cursor a listing returned")
    return int(cursor)


class StoreBackend(ABC):
    """A store. `ttl` and `heartbeat_interval` are the defaults for claims made on it."""

    location: str = ""  # what dhp.Store() opens it by: a folder path or a URL
    ttl: float = DEFAULT_TTL
    heartbeat_interval: float | None = None
    # An object with token() (hold this process's liveness lock; its id),
    # owner_dead(token), for_session() (a lock of its own for one client session of a
    # server, with close()), or None.
    liveness: Any = None
    limits: Limits = DEFAULT_LIMITS  # sizes and depth this store accepts (DHP-LIM-001)

    @abstractmethod
    def transaction(self, *, write: bool = True,
                    sync: str = "commit") -> AbstractContextManager[Tx]:
        """A transaction; committed when the block ends normally, rolled back on an exception.
        `write` takes the write lock at the start (claims must not interleave).

        Every commit survives kill -9 of any process. `sync` says when it must also survive
        a power loss (DHP-CKP-011): "commit" before the commit returns; "batch" may share one
        fsync with the "batch" writes of one fsync interval (checkpoints); "none" whenever a
        later commit syncs (heartbeats: losing one only shortens a lease)."""

    @abstractmethod
    def now(self) -> float:
        """The store clock, in seconds (DHP-LSE-001, DHP-LSE-006)."""

    @abstractmethod
    def close(self) -> None:
        """Release the backend's connections."""

    @abstractmethod
    def storage_check(self) -> list[str]:
        """Problems the storage engine finds in its own files (empty when sound); the chain
        check of the records on top of it is operations.check_integrity."""

    def kept_lease(self, handoff_id: str) -> dict | None:
        """The row of a lease this process holds, as its own last committed write left it:
        {"record", "owner_incarnation", "link": (seq, hash) of the last checkpoint or None},
        or None when not kept (the default: a backend that keeps none)."""
        return None

    def checkpoint_kept(self, handoff_id: str, kept: dict, record: dict, ttl: float,
                        checkpoint: dict, text: str) -> bool:
        """Store `checkpoint` (its JSON `text`) and `record`, the checkpoint's outcome of the
        kept row `kept` (kept_lease), in one step, only if the stored row and its last
        link are still the kept ones and, on the store's clock, the lease is live and the
        wall-clock cap not passed; the record's lease end and last progress are then that
        clock's now + ttl and now. True when stored; False (nothing changed) otherwise, and
        the caller takes the full path. The default stores nothing."""
        return False

    def announce_work(self) -> None:
        """Wake this store's waiters (work_waiter) in every process, outside any transaction:
        for what the store cannot see (a pool's child died, a worker is told to stop).
        Commits that leave work takeable announce by themselves (Tx.mark_takeable). A
        backend without a wake-up channel leaves this empty; its waiters then find the work
        at their next periodic look (operations.IDLE_RECHECK_S)."""
        return None

    def expect_threads(self, n: int) -> None:
        """This process will make store calls from about `n` threads at once (a worker
        running n units): a backend with a connection pool sizes it so they need not queue
        for a connection. The default does nothing (one connection serves every thread)."""
        return None

    def work_waiter(self) -> AbstractContextManager[Callable[[float], bool]]:
        """A registration for announce_work: `with store.work_waiter() as wait:` and then
        `wait(seconds)` blocks until an announcement made after the registration, or the
        time is up (returns whether it was woken). The default only sleeps."""
        return nullcontext(_sleep)

    def in_transaction_on_this_thread(self) -> bool:
        """True while the calling thread is inside one of this store's transactions (a
        signal handler must not start another one then)."""
        return False

    @property
    def default_heartbeat_interval(self) -> float:
        return self.heartbeat_interval if self.heartbeat_interval else self.ttl / 3

    def __enter__(self) -> StoreBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _sleep(seconds: float) -> bool:
    time.sleep(seconds)
    return False
