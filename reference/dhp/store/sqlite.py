"""The embedded store: SQLite in WAL mode, created on first use (no setup).

Durability. The database runs with `journal_mode=WAL` and `synchronous=NORMAL`: every commit
is written to the WAL before it returns, so it survives kill -9 of any process (DHP-CKP-009).
What survives a power loss or kernel crash depends on the transaction's `sync`
(DHP-CKP-011): dispatches, claims (every fence bump), completions, releases, cancels, DLQ
moves and supervisor actions are fsynced before they are acknowledged: after the COMMIT the
store fsyncs the WAL itself, which is what `synchronous=FULL` would do inside the COMMIT, but
without holding the write lock meanwhile (other writers go on; one fsync covers every commit
written before it). A checkpoint ("batch") is fsynced too unless this process fsynced less
than `fsync_interval` (0.1 s) ago; then it waits for the next fsync, which the next write or
heartbeat after the interval makes. So a burst of checkpoints shares one fsync per interval,
and a power loss can forget at most the checkpoints acknowledged within one interval after
the last fsync (the WAL keeps a prefix: a synced commit makes every earlier one durable).
Processes writing to one store share fsyncs (group commit, dhp.store.wal_sync).
Heartbeats ("none") never need an fsync of their own; losing one only shortens a lease. Where
WAL mode is unavailable (a file system without shared memory) every commit runs at FULL.

Writes. put_record rewrites only the columns whose values changed (a checkpoint: the lease,
the counters and the progress time), so the indexes whose keys did not move are not
rewritten: each would cost a page in the WAL. A write of a row this process wrote last, with
no other process's commit since, does not read it back (dhp.store.written_rows): a checkpoint
is BEGIN, INSERT, UPDATE, COMMIT and one `PRAGMA data_version`.

Checkpoints are keyed by one integer, the handoff's row number * 2^32 + seq (migration 7),
so the checkpoints of the newest handoff, or of the one a lone worker is on, go onto the last
page of their table: about 2.2 WAL pages per checkpoint with the handoff's row. A store
holds at most 2^31 - 1 handoffs and 2^32 - 1 checkpoints per handoff; past either the write
is refused and nothing is stored.

Concurrency. Every write transaction starts with `BEGIN IMMEDIATE`, taking SQLite's single
write lock up front, so concurrent claimers in any number of processes are serialised and
each sees the previous winner's row (DHP-FEN-005). Waiting for the lock is bounded by a
generous busy timeout (30 s); running out of it is `unavailable`.

Clock. Leases are judged by clock.store_clock() (CLOCK_BOOTTIME, shared by every process on
the host, unmoved by wall-clock steps). Its values mean nothing after a reboot, so the
host's boot id is kept in `meta`; when a store opens under a new boot id, every claimed
handoff is orphaned in one transaction (every process that owned one died in the reboot)
and its clock-based times are rebased onto the new clock.

Versioning. `meta.schema_version` counts the entries of MIGRATIONS applied, in order, on open.
A store written by a newer release (higher version) is refused rather than misread.
"""

from __future__ import annotations

import functools
import json
import math
import operator
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from itertools import compress
from pathlib import Path

from dhp.core import failures, journal, machine
from dhp.core.backend import DEFAULT_FSYNC_INTERVAL, DEFAULT_TTL, SYNCS, StoreBackend, Tx
from dhp.core.clock import boot_id, store_clock
from dhp.core.errors import Internal, InvalidInput, StoreCorrupt, Unavailable
from dhp.core.limits import Limits
from dhp.store import doorbell, liveness
from dhp.store.wal_sync import WalSync
from dhp.store.written_rows import UNKEPT, WrittenRows, affinities, stored_value

DB_FILE = "dhp.sqlite3"
BUSY_TIMEOUT_S = 30.0

# The columns of a handoff's row after its id, as migration 1 made them (migration 7 makes
# the table again with them), and the supervisor's indexes (migrations 2 and 7).
_HANDOFF_COLUMNS = """
        envelope TEXT NOT NULL,
        task_kind TEXT NOT NULL,
        state TEXT NOT NULL,
        owner TEXT,
        fence INTEGER NOT NULL,
        lease_expires_at REAL,
        attempts INTEGER NOT NULL,
        steps INTEGER NOT NULL,
        spend NOT NULL,
        first_claimed_at REAL,
        last_progress_at REAL,
        budget TEXT NOT NULL,
        dlq_reason TEXT,
        progress_timeout_s REAL,
        owner_incarnation TEXT,
        result TEXT,
        created_at TEXT NOT NULL,
        updated_at REAL NOT NULL"""
_SUPERVISOR_INDEXES = """
    CREATE INDEX supervisor_by_incarnation ON handoffs(owner_incarnation)
        WHERE state = 'claimed';
    CREATE INDEX supervisor_by_progress_deadline
        ON handoffs(last_progress_at + progress_timeout_s)
        WHERE state = 'claimed' AND progress_timeout_s IS NOT NULL;
    CREATE INDEX supervisor_by_wall_clock_deadline
        ON handoffs(first_claimed_at + json_extract(budget, '$.max_wall_clock_s'))
        WHERE state IN ('claimed', 'released', 'orphaned') AND first_claimed_at IS NOT NULL;
"""

# Each entry is one migration: the SQL that takes the schema from version i to i + 1.
MIGRATIONS: list[str] = [
    f"""
    CREATE TABLE handoffs (
        id TEXT PRIMARY KEY,{_HANDOFF_COLUMNS}
    );
    CREATE INDEX handoffs_by_kind ON handoffs(state, task_kind);
    CREATE INDEX handoffs_by_lease ON handoffs(state, lease_expires_at);
    CREATE TABLE checkpoints (
        handoff_id TEXT NOT NULL,
        seq INTEGER NOT NULL,
        fence INTEGER NOT NULL,
        record TEXT NOT NULL,
        PRIMARY KEY (handoff_id, seq)
    ) WITHOUT ROWID;
    """,
    # 2: the supervisor's leadership row and the partial indexes behind its scans.
    """
    CREATE TABLE supervisor_leadership (
        name TEXT PRIMARY KEY,
        holder TEXT NOT NULL,
        incarnation TEXT,
        fence INTEGER NOT NULL,
        expires_at REAL NOT NULL
    );
    """ + _SUPERVISOR_INDEXES,
    # 3: not_before, the instant before which a handoff may not be taken (spec/schedule.md).
    """
    ALTER TABLE handoffs ADD COLUMN not_before REAL;
    """,
    # 4: the lease journal (dhp.core.journal): every take and orphan, a few per handoff.
    # AUTOINCREMENT: an id is never reused after the oldest entries are dropped.
    """
    CREATE TABLE lease_journal (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        handoff_id TEXT NOT NULL,
        event TEXT NOT NULL,
        fence INTEGER NOT NULL,
        worker TEXT,
        at REAL NOT NULL,
        wall TEXT NOT NULL,
        lost_s REAL,
        how TEXT
    );
    CREATE INDEX lease_journal_by_handoff ON lease_journal(handoff_id, id);
    """,
    # 5: the lease index holds only rows with a lease (claimed), so a dispatch, whose row has
    # none, writes one index page less; every query on it compares lease_expires_at, which
    # lets SQLite use the partial index as it used the full one.
    """
    DROP INDEX handoffs_by_lease;
    CREATE INDEX handoffs_by_lease ON handoffs(state, lease_expires_at)
        WHERE lease_expires_at IS NOT NULL;
    """,
    # 6: the lease index keys on lease_due, a lower bound of lease_expires_at that put_record
    # moves only when it falls behind (_due_key): a checkpoint, which extends the lease,
    # then rewrites no index page (one WAL frame in four). A scan for expired leases asks
    # for both bounds (lease_due <= now AND lease_expires_at <= now), and misses none: an
    # expired lease has a lease_due at or before its expiry.
    """
    ALTER TABLE handoffs ADD COLUMN lease_due REAL;
    UPDATE handoffs SET lease_due = lease_expires_at;
    DROP INDEX handoffs_by_lease;
    CREATE INDEX handoffs_by_lease ON handoffs(state, lease_due) WHERE lease_due IS NOT NULL;
    """,
    # 7: checkpoints keyed by one integer, num * 2^32 + seq, where num is the handoff's row
    # number, now an explicit INTEGER PRIMARY KEY (the rowid it had, which VACUUM may then no
    # longer renumber). In a rowid table, appending to the checkpoints of the handoff with
    # the highest num (the newest, or the one a single worker is on) adds to the last page,
    # or starts a new one; in the WITHOUT ROWID tree of (handoff_id, seq) an append into a
    # full page rewrote up to three sibling pages and their parent: 3.4 WAL frames per
    # checkpoint, now about 2.2. The handoffs a store holds are bounded by the CHECK so
    # that no key overflows; append_checkpoint refuses a seq of 2^32 or more. The indexes
    # of migrations 2 and 6 are made again on the new table. _check_before_7 refuses a
    # store whose checkpoints this cannot carry over.
    f"""
    CREATE TABLE handoffs_7 (
        num INTEGER PRIMARY KEY CHECK (num < 2147483648),
        id TEXT NOT NULL UNIQUE,{_HANDOFF_COLUMNS},
        not_before REAL,
        lease_due REAL
    );
    INSERT INTO handoffs_7 SELECT rowid, * FROM handoffs ORDER BY rowid;
    CREATE TABLE checkpoints_7 (
        key INTEGER PRIMARY KEY,
        fence INTEGER NOT NULL,
        record TEXT NOT NULL
    );
    INSERT INTO checkpoints_7 SELECT (h.num << 32) + c.seq, c.fence, c.record
        FROM checkpoints c JOIN handoffs_7 h ON h.id = c.handoff_id ORDER BY 1;
    DROP TABLE checkpoints;
    DROP TABLE handoffs;
    ALTER TABLE handoffs_7 RENAME TO handoffs;
    ALTER TABLE checkpoints_7 RENAME TO checkpoints;
    CREATE INDEX handoffs_by_kind ON handoffs(state, task_kind);
    CREATE INDEX handoffs_by_lease ON handoffs(state, lease_due) WHERE lease_due IS NOT NULL;
    """ + _SUPERVISOR_INDEXES,
    # 8: the progress deadline's index keys on progress_due, a lower bound of
    # last_progress_at + progress_timeout_s that put_record moves as it moves lease_due
    # (_due_key): a checkpoint of a handoff with a progress timeout, which moves the
    # deadline, then rewrites no index page either. stalled() asks for both bounds and
    # misses none.
    """
    ALTER TABLE handoffs ADD COLUMN progress_due REAL;
    UPDATE handoffs SET progress_due = last_progress_at + progress_timeout_s;
    DROP INDEX supervisor_by_progress_deadline;
    CREATE INDEX supervisor_by_progress_deadline ON handoffs(progress_due)
        WHERE state = 'claimed' AND progress_due IS NOT NULL;
    """,
    # 9: failure records (dhp.core.failures): why each failed attempt failed, the last few
    # per handoff. A new table: no existing row changes.
    """
    CREATE TABLE failures (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        handoff_id TEXT NOT NULL,
        attempt INTEGER NOT NULL,
        fence INTEGER NOT NULL,
        worker TEXT NOT NULL,
        at REAL NOT NULL,
        wall TEXT NOT NULL,
        type TEXT NOT NULL,
        message TEXT NOT NULL,
        traceback TEXT
    );
    CREATE INDEX failures_by_handoff ON failures(handoff_id, id);
    """,
    # 10: the chain's head (seq and hash of the last checkpoint) kept on the handoff's row,
    # against which a take checks the last checkpoint it reads (DHP-SEC-010): a checkpoints
    # table rolled back is then seen. Filled from the stored chains (a damaged record: NULL).
    """
    ALTER TABLE handoffs ADD COLUMN chain_seq INTEGER;
    ALTER TABLE handoffs ADD COLUMN chain_hash TEXT;
    UPDATE handoffs AS h SET
        chain_seq = (SELECT key & 4294967295 FROM checkpoints WHERE key BETWEEN h.num << 32
                     AND (h.num << 32) + 4294967295 ORDER BY key DESC LIMIT 1),
        chain_hash = (SELECT CASE WHEN json_valid(record) THEN json_extract(record, '$.hash')
                      END FROM checkpoints WHERE key BETWEEN h.num << 32
                      AND (h.num << 32) + 4294967295 ORDER BY key DESC LIMIT 1);
    """,
]
SCHEMA_VERSION = len(MIGRATIONS)

# Migration 7's checkpoint key: num * SEQ_SPAN + seq.
SEQ_SPAN = 2**32
MAX_HANDOFFS = 2**31 - 1

# The machine's record, one column per member (budget as JSON text).
RECORD_COLUMNS = ("state", "owner", "fence", "lease_expires_at", "attempts", "steps", "spend",
                  "first_claimed_at", "last_progress_at", "budget", "dlq_reason",
                  "progress_timeout_s", "not_before")
_ROW_COLUMNS = ("id", "envelope", "task_kind", *RECORD_COLUMNS, "owner_incarnation", "lease_due",
                "progress_due", "result", "created_at", "updated_at")
_SELECT = f"SELECT {', '.join(_ROW_COLUMNS)} FROM handoffs"
_INSERT_COLUMNS = ("id", "envelope", "task_kind", *RECORD_COLUMNS, "created_at", "updated_at",
                   "lease_due", "progress_due")
_INSERT = (f"INSERT INTO handoffs ({', '.join(_INSERT_COLUMNS)}) "
           f"VALUES ({', '.join('?' * len(_INSERT_COLUMNS))})")
_INSERT_NEW = _INSERT + " ON CONFLICT (id) DO NOTHING"
# A checkpoint's key from its handoff's num (migration 7), found by id in the statement.
_INSERT_CHECKPOINT = ("INSERT INTO checkpoints (key, fence, record) "
                      "SELECT (num << 32) + ?, ?, ? FROM handoffs WHERE id = ?")
# The keys of the checkpoints of the handoff `h`, and a checkpoint's seq.
_KEYS_OF = "key BETWEEN h.num << 32 AND (h.num << 32) + 4294967295"
_SEQ = "key & 4294967295"
# The same row without the envelope and result, which a fenced write does not need.
_SELECT_LIGHT = "SELECT " + ", ".join(
    "NULL" if c in ("envelope", "result") else c for c in _ROW_COLUMNS) + " FROM handoffs"
# get(envelope=False): that row and the link of its last checkpoint (seq, hash), which a
# checkpoint or a completion needs next: one statement instead of two on the hot path.
_LAST = f"FROM checkpoints WHERE {_KEYS_OF} ORDER BY key DESC LIMIT 1"
_GET_LIGHT = (_SELECT_LIGHT.replace(" FROM handoffs", f", (SELECT {_SEQ} {_LAST}), "
                                    f"(SELECT json_extract(record, '$.hash') {_LAST}) "
                                    "FROM handoffs h WHERE id = ?"))


def _dumps(obj: object) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def _loads(text: str | None, what: str, handoff_id: str) -> object:
    """Stored JSON text; StoreCorrupt (not a raw decode error) when it was damaged."""
    if text is None:
        return None
    if text == "{}":  # an empty budget, the usual one
        return {}
    try:
        return json.loads(text)
    except (ValueError, TypeError, RecursionError) as exc:
        raise StoreCorrupt(f"{handoff_id}: the stored {what} is not JSON ({exc}): the store was "
                           "damaged or edited", requirement="DHP-SEC-005") from None


def _row(values: tuple) -> dict:
    if len(values) != _N_ROW:
        raise Internal(f"a row of {len(values)} columns; the store reads {_N_ROW}")
    hid = values[0]
    record = dict(zip(RECORD_COLUMNS, values[_RECORD], strict=True))
    record["budget"] = _loads(record["budget"], "budget", hid)
    envelope, result = values[1], values[_RESULT]
    return {"handoff_id": hid,
            "envelope": None if envelope is None else _loads(envelope, "envelope", hid),
            "task_kind": values[2], "record": record, "owner_incarnation": values[_OWNER],
            "result": None if result is None else _loads(result, "result record", hid),
            "created_at": values[-2], "updated_at": values[-1]}


def _record_values(record: dict) -> list:
    if record.keys() != _RECORD_KEYS:
        raise Internal(f"record members {sorted(record)} do not match the store's columns")
    values = [record[k] for k in RECORD_COLUMNS]
    budget = values[_BUDGET]
    values[_BUDGET] = "{}" if budget == {} else _dumps(budget)
    return values


_N_ROW = len(_ROW_COLUMNS)
_RECORD = slice(3, 3 + len(RECORD_COLUMNS))  # where a read row holds the record's columns
_RESULT = _ROW_COLUMNS.index("result")
_OWNER = _ROW_COLUMNS.index("owner_incarnation")
_STATE = _ROW_COLUMNS.index("state")
_BUDGET = RECORD_COLUMNS.index("budget")
_RECORD_KEYS = frozenset(RECORD_COLUMNS)
# What put_record writes, and where a read row holds it (_ROW_COLUMNS after id, envelope and
# task_kind).
_PUT_COLUMNS = (*RECORD_COLUMNS, "owner_incarnation", "lease_due", "progress_due")
_STORED = slice(3, 3 + len(_PUT_COLUMNS))
_PUT_INDEXES = range(len(_PUT_COLUMNS))
_ALL_COLUMNS = tuple(_PUT_INDEXES)
_LEASE = RECORD_COLUMNS.index("lease_expires_at")
_LAST_PROGRESS = RECORD_COLUMNS.index("last_progress_at")
_PROGRESS_TIMEOUT = RECORD_COLUMNS.index("progress_timeout_s")
_DUE = _PUT_COLUMNS.index("lease_due")
_PROGRESS_DUE = _PUT_COLUMNS.index("progress_due")


def _due_key(deadline: float | None, due: float | None, now: float) -> float | None:
    """The index key of a deadline (the lease's end, migration 6; the progress deadline,
    migration 8) for a row whose deadline is now `deadline` and whose key was `due`: kept
    while it is still a lower bound of the deadline and at least half the deadline's
    remaining time away, else moved to the deadline. A worker that writes more often than
    half that time (heartbeats every ttl/3) so never shows in a scan for passed deadlines
    before its deadline has passed, and a burst of checkpoints moves the key once per half."""
    if deadline is None or due is None or not now + (deadline - now) / 2 <= due <= deadline:
        return deadline
    return due


def _progress_deadline(columns: list) -> float | None:
    """last_progress_at + progress_timeout_s of a record's columns, None without either."""
    last, timeout = columns[_LAST_PROGRESS], columns[_PROGRESS_TIMEOUT]
    return None if last is None or timeout is None else last + timeout


def _checkpoint_values(record: dict, text: str | None) -> tuple:
    """_INSERT_CHECKPOINT's parameters; a seq that migration 7's key cannot hold is refused."""
    seq = record["seq"]
    if not 0 < seq < SEQ_SPAN:
        raise InvalidInput(f"checkpoint seq {seq} of {record['handoff_id']}: a SQLite store "
                           f"holds at most {SEQ_SPAN - 1:,} checkpoints per handoff")
    return (seq, record["fence"], _dumps(record) if text is None else text,
            record["handoff_id"])


@functools.lru_cache(maxsize=256)
def _positions(changed: tuple[int, ...]) -> tuple[int, ...]:
    """Where a row holds these columns (indexes into _PUT_COLUMNS) and updated_at."""
    return (*(_STORED.start + i for i in changed), _N_ROW - 1)


@functools.lru_cache(maxsize=256)
def _update_sql(changed: tuple[int, ...], with_result: bool, with_head: bool = False) -> str:
    """The UPDATE of put_record that sets these columns (indexes into _PUT_COLUMNS), and
    the result and the chain's head (migration 9) when they are pending."""
    sets = "".join(f"{_PUT_COLUMNS[i]} = ?, " for i in changed)
    return (f"UPDATE handoffs SET {sets}{'result = ?, ' if with_result else ''}"
            f"{'chain_seq = ?, chain_hash = ?, ' if with_head else ''}updated_at = ? "
            "WHERE id = ?")


# A claim whose lease has expired at ? (twice: the lease index's lower bound, migration 6).
_EXPIRED = "state = 'claimed' AND lease_due <= ? AND lease_expires_at <= ?"


class SQLiteTx(Tx):
    def __init__(self, conn: sqlite3.Connection, now: Callable[[], float],
                 written: WrittenRows | None = None):
        self.conn = conn
        self._now = now
        # The stored values of the rows read for a write (get, the takes' scans): put_record
        # writes only the columns that differ, so no index whose key did not move is
        # rewritten (each one is a page in the WAL).
        self._stored: dict[str, tuple] = {}
        # The rows this connection wrote in earlier transactions (None: none kept); the rows
        # this one read, whole; and the rows it wrote as get(envelope=False) now reads them
        # (None: written, not kept), which after_commit keeps.
        self._written = written
        self._rows: dict[str, tuple] = {}
        self._wrote: dict[str, tuple | None] = {}
        self._accounted = 0  # rows changed by put_record and append_checkpoint
        self.changes_before = conn.total_changes  # the connection's total_changes at BEGIN
        self._version: int | None = None  # PRAGMA data_version, once read
        # Result text of put_result, written by the row's next UPDATE (one statement and one
        # row rewrite for a completion) or before anything reads the row.
        self._results: dict[str, str] = {}
        # The last checkpoint's (seq, hash) read with a row by get(envelope=False), and moved
        # by append_checkpoint.
        self._links: dict[str, tuple[int, str] | None] = {}
        # The chain's new head (seq, hash) after append_checkpoint, written like a result:
        # by the row's next UPDATE, or before a read or the commit (DHP-SEC-010).
        self._heads: dict[str, tuple[int, str]] = {}

    def _read(self, values: tuple) -> dict:
        self._stored[values[0]] = values[_STORED]
        self._rows[values[0]] = values
        return _row(values)

    def _data_version(self) -> int:
        if self._version is None:
            self._version = self._written.version()
        return self._version

    def get(self, handoff_id: str, *, envelope: bool = True) -> dict | None:
        self._write_results()
        if envelope:
            found = self.conn.execute(f"{_SELECT} WHERE id = ?", (handoff_id,)).fetchone()
            return self._read(found) if found else None
        found = None
        if self._written is not None:
            found = self._written.lookup(handoff_id, self._data_version)
        if found is None:
            found = self.conn.execute(_GET_LIGHT, (handoff_id,)).fetchone()
        if not found:
            return None
        self._links[handoff_id] = None if found[_N_ROW] is None else found[_N_ROW:]
        return self._read(found[:_N_ROW])

    def insert(self, handoff_id: str, envelope: dict, record: dict, created_at: str) -> None:
        self.conn.execute(_INSERT, self._values(handoff_id, envelope, record, created_at))

    def insert_new(self, rows: list[tuple[str, dict, dict, str, str | None]]) -> None:
        if len(rows) == 1:  # the usual dispatch: execute costs less than executemany
            self.conn.execute(_INSERT_NEW, self._values(*rows[0]))
        else:
            self.conn.executemany(_INSERT_NEW, [self._values(*row) for row in rows])

    def _values(self, handoff_id: str, envelope: dict, record: dict, created_at: str,
                text: str | None = None) -> list:
        self.mark_takeable(record)
        columns = _record_values(record)
        return [handoff_id, _dumps(envelope) if text is None else text,
                envelope["intent"]["task_kind"], *columns, created_at, self._now(),
                record["lease_expires_at"], _progress_deadline(columns)]

    def put_record(self, handoff_id: str, record: dict, owner_incarnation: str | None) -> None:
        self.mark_takeable(record)
        columns = _record_values(record)
        old = self._stored.get(handoff_id)
        now = self._now()
        new = (*columns, owner_incarnation,
               _due_key(columns[_LEASE], None if old is None else old[_DUE], now),
               _due_key(_progress_deadline(columns), None if old is None else old[_PROGRESS_DUE],
                        now))
        # Compared with the type too: 0 and 0.0 are equal but read back differently. (The
        # maps and compress compare the columns pairwise at C speed: this runs per write.)
        changed = _ALL_COLUMNS if old is None else tuple(compress(
            _PUT_INDEXES, map(operator.or_, map(operator.ne, new, old),
                              map(operator.is_not, map(type, new), map(type, old)))))
        values = [new[i] for i in changed]
        result = self._results.pop(handoff_id, None)
        if result is not None:
            values.append(result)
        head = self._heads.pop(handoff_id, None)
        if head is not None:
            values.extend(head)
        cur = self.conn.execute(_update_sql(changed, result is not None, head is not None),
                                [*values, now, handoff_id])
        if cur.rowcount != 1:
            raise Internal(f"update of {handoff_id} touched {cur.rowcount} rows")
        self._stored[handoff_id] = new
        self._accounted += 1
        if self._written is not None:
            # Popped: only a row read from the store and written once here is kept, so that
            # every column but those just set is as the store returned it.
            row = self._rows.pop(handoff_id, None)
            link = self._links.get(handoff_id, ())
            self._wrote[handoff_id] = None if row is None or link == () \
                else self._kept(row, new, changed, now, link)

    def _kept(self, row: tuple, new: tuple, changed: tuple[int, ...], now: float,
              link: tuple[int, str] | None) -> tuple | None:
        """The row as get(envelope=False) reads it once `row` was updated to `new` at `now`,
        with the last checkpoint's `link`; None where that is not certain."""
        if new[_STATE - _STORED.start] != "claimed":
            return None  # kept for the writes of a lease only
        written = self._written
        kept = [row[0], None, row[2], *new, None, row[-2], now, *(link or (None, None))]
        for i in _positions(changed):  # converted where SQLite converts
            value = kept[i]
            if type(value) is not written.native[i]:
                value = kept[i] = stored_value(value, written.kinds[i])
                if value is UNKEPT:
                    return None
            elif value != value:  # NaN, which SQLite stores as NULL
                return None
        return tuple(kept)

    def last_link(self, handoff_id: str) -> tuple[int, str] | None:
        if handoff_id in self._links:
            return self._links[handoff_id]
        return self.conn.execute(
            f"SELECT {_SEQ}, json_extract(record, '$.hash') FROM handoffs h, checkpoints "
            f"WHERE h.id = ? AND {_KEYS_OF} ORDER BY key DESC LIMIT 1", (handoff_id,)).fetchone()

    def last_checkpoint(self, handoff_id: str) -> dict | None:
        found = self.conn.execute(
            f"SELECT record FROM handoffs h, checkpoints WHERE h.id = ? AND {_KEYS_OF} "
            "ORDER BY key DESC LIMIT 1", (handoff_id,)).fetchone()
        return _loads(found[0], "last checkpoint", handoff_id) if found else None

    def checkpoint_hash(self, handoff_id: str, seq: int) -> str | None:
        if not 0 <= seq < SEQ_SPAN:
            return None
        found = self.conn.execute(
            "SELECT record FROM handoffs h, checkpoints WHERE h.id = ? "
            "AND key = (h.num << 32) + ?", (handoff_id, seq)).fetchone()
        record = _loads(found[0], f"checkpoint seq {seq}", handoff_id) if found else None
        return record.get("hash") if isinstance(record, dict) else None

    def append_checkpoint(self, record: dict, *, text: str | None = None) -> None:
        hid = record["handoff_id"]
        if hid in self._links:
            self._links[hid] = (stored_value(record["seq"], "INTEGER"), record["hash"])
        self._wrote[hid] = None  # its link moved: kept again only by a put_record after this
        self._accounted += 1
        cur = self.conn.execute(_INSERT_CHECKPOINT, _checkpoint_values(record, text))
        if cur.rowcount != 1:
            raise Internal(f"checkpoint seq {record['seq']} of {hid}: no such handoff")
        self._heads[hid] = (record["seq"], record["hash"])

    def append_checkpoints(self, records: list[tuple[dict, str | None]]) -> None:
        self._links.clear()
        self.conn.executemany(_INSERT_CHECKPOINT,
                              [_checkpoint_values(r, text) for r, text in records])
        for record, _text in records:
            self._heads[record["handoff_id"]] = (record["seq"], record["hash"])

    def chain_head(self, handoff_id: str) -> tuple[int, str] | None:
        self._write_results()
        found = self.conn.execute("SELECT chain_seq, chain_hash FROM handoffs WHERE id = ?",
                                  (handoff_id,)).fetchone()
        return None if found is None or found[0] is None else (found[0], found[1])

    def checkpoints(self, handoff_id: str) -> list[dict]:
        rows = self.conn.execute(
            f"SELECT {_SEQ}, record FROM handoffs h, checkpoints WHERE h.id = ? AND {_KEYS_OF} "
            "ORDER BY key", (handoff_id,))
        return [_loads(r[1], f"checkpoint seq {r[0]}", handoff_id) for r in rows]

    def handoff_ids(self) -> list[str]:
        return [r[0] for r in self.conn.execute("SELECT id FROM handoffs ORDER BY rowid")]

    def before_commit(self) -> None:
        """Write what is pending, and learn the data_version that rows kept at this commit
        hold at (while the write lock is held, no other connection can commit)."""
        self._write_results()
        if self._written is not None and any(self._wrote.values()):
            self._data_version()

    def after_commit(self) -> None:
        """Keep the rows this transaction wrote (with their last checkpoint's link)."""
        written = self._written
        if written is None or self.conn.total_changes == self.changes_before:
            return
        changes = (self.changes_before, self.conn.total_changes)
        written.settle(self._wrote, self._version, changes,
                       changes[1] - changes[0] == self._accounted)

    def put_result(self, handoff_id: str, result_record: dict) -> None:
        self._results[handoff_id] = _dumps(result_record)

    def _write_results(self) -> None:
        """Write the results no put_record has taken yet (before a read, and at commit)."""
        while self._results:
            handoff_id, text = self._results.popitem()
            self.conn.execute("UPDATE handoffs SET result = ? WHERE id = ?", (text, handoff_id))
        while self._heads:
            handoff_id, (seq, digest) = self._heads.popitem()
            self.conn.execute("UPDATE handoffs SET chain_seq = ?, chain_hash = ? WHERE id = ?",
                              (seq, digest, handoff_id))

    def select(self, *, states: tuple[str, ...] | None = None,
               task_kinds: tuple[str, ...] | None = None,
               expired_before: float | None = None, limit: int | None = None) -> list[dict]:
        where, args = [], []
        if expired_before is not None:
            states = ("claimed",)
            where.append("lease_due <= ? AND lease_expires_at <= ?")  # migration 6
            args.extend((expired_before, expired_before))
        for column, values in (("state", states), ("task_kind", task_kinds)):
            if values is not None:
                where.append(f"{column} IN ({', '.join('?' * len(values))})")
                args.extend(values)
        sql = _SELECT + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY rowid"
        if limit is not None:
            sql += " LIMIT ?"
            args.append(limit)
        self._write_results()
        return [_row(r) for r in self.conn.execute(sql, args)]

    def select_page(self, *, states: tuple[str, ...] | None = None,
                    task_kinds: tuple[str, ...] | None = None, after: str | None = None,
                    limit: int) -> list[dict]:
        where, args = [], []
        for column, values in (("state", states), ("task_kind", task_kinds)):
            if values is not None:
                where.append(f"{column} IN ({', '.join('?' * len(values))})")
                args.extend(values)
        if after is not None:  # the rowid of the last row of the previous page
            if not after.isdigit():
                raise InvalidInput(f"bad cursor {after!r}: pass the cursor a listing returned")
            where.append("rowid < ?")
            args.append(int(after))
        sql = (f"SELECT rowid, {_SELECT_LIGHT[len('SELECT '):]}"
               + (" WHERE " + " AND ".join(where) if where else "")
               + " ORDER BY rowid DESC LIMIT ?")
        self._write_results()
        return [dict(_row(r[1:]), cursor=str(r[0]))
                for r in self.conn.execute(sql, [*args, limit])]

    def ids_with_prefix(self, prefix: str, *, limit: int) -> list[str]:
        rows = self.conn.execute("SELECT id FROM handoffs WHERE id >= ? AND id < ? ORDER BY id "
                                 "LIMIT ?", (prefix, prefix + "~", limit))  # "~" > any digit
        return [r[0] for r in rows]

    def owner_incarnations(self) -> list[str]:
        # One seek of the partial index per owner, not a read of every claimed row: a pass
        # costs what the number of processes does, not the number of running handoffs.
        index = "handoffs INDEXED BY supervisor_by_incarnation WHERE state = 'claimed'"
        rows = self.conn.execute(
            f"WITH RECURSIVE owners(o) AS (SELECT min(owner_incarnation) FROM {index} "
            f"UNION ALL SELECT (SELECT min(owner_incarnation) FROM {index} "
            "AND owner_incarnation > o) FROM owners WHERE o IS NOT NULL) "
            "SELECT o FROM owners WHERE o IS NOT NULL")
        return [r[0] for r in rows]

    def _first(self, where: str, args: list, task_kinds: tuple[str, ...]) -> dict | None:
        kinds = ", ".join("?" * len(task_kinds))
        self._write_results()
        found = self.conn.execute(f"{_SELECT} WHERE {where} AND task_kind IN ({kinds}) "
                                  "ORDER BY rowid LIMIT 1", [*args, *task_kinds]).fetchone()
        return self._read(found) if found else None

    def next_resumable(self, task_kinds: tuple[str, ...], now: float) -> dict | None:
        # Written so that the planner reads handoffs_by_kind for these two states only.
        return self._first("(state IN ('orphaned', 'released') "
                           "AND (state = 'orphaned' OR steps > 0) "
                           f"AND (not_before IS NULL OR not_before <= ?) OR {_EXPIRED})",
                           [now, now, now], task_kinds)

    def next_takeable(self, task_kinds: tuple[str, ...], now: float) -> dict | None:
        return self._first("(state IN ('pending', 'released', 'orphaned') "
                           f"AND (not_before IS NULL OR not_before <= ?) OR {_EXPIRED})",
                           [now, now, now], task_kinds)

    def claimed_by(self, incarnation: str, task_kinds: tuple[str, ...]) -> dict | None:
        return self._first("state = 'claimed' AND owner_incarnation = ?", [incarnation],
                           task_kinds)

    def next_due(self, task_kinds: tuple[str, ...], now: float) -> float | None:
        kinds = ", ".join("?" * len(task_kinds))
        return self.conn.execute(
            "SELECT MIN(CASE WHEN state = 'claimed' THEN lease_expires_at ELSE not_before END) "
            f"FROM handoffs WHERE state IN ('pending', 'released', 'orphaned', 'claimed') "
            f"AND task_kind IN ({kinds}) AND CASE WHEN state = 'claimed' THEN lease_expires_at "
            "ELSE not_before END > ?", [*task_kinds, now]).fetchone()[0]

    # --- the lease journal (migration 4) ---

    def add_lease_event(self, entry: dict) -> None:
        hid = entry["handoff_id"]
        self.conn.execute(f"INSERT INTO lease_journal ({', '.join(journal.FIELDS)}) "
                          f"VALUES ({', '.join('?' * len(journal.FIELDS))})",
                          [entry[k] for k in journal.FIELDS])
        self.conn.execute(
            "DELETE FROM lease_journal WHERE handoff_id = ? AND id <= (SELECT id FROM "
            "lease_journal WHERE handoff_id = ? ORDER BY id DESC LIMIT 1 OFFSET ?)",
            (hid, hid, journal.CAP))

    def lease_events(self, handoff_id: str, *, last: int | None = None) -> list[dict]:
        rows = self.conn.execute(
            f"SELECT id, {', '.join(journal.FIELDS)} FROM lease_journal WHERE handoff_id = ? "
            "ORDER BY id DESC LIMIT ?", (handoff_id, -1 if last is None else last))
        return [dict(zip(("id", *journal.FIELDS), r, strict=True)) for r in rows][::-1]

    def lease_events_after(self, after: int, limit: int) -> list[dict]:
        rows = self.conn.execute(
            f"SELECT id, {', '.join(journal.FIELDS)} FROM lease_journal WHERE id > ? "
            "ORDER BY id LIMIT ?", (after, limit))
        return [dict(zip(("id", *journal.FIELDS), r, strict=True)) for r in rows]

    # --- failure records (migration 9) ---

    def add_failure(self, entry: dict) -> None:
        hid = entry["handoff_id"]
        self.conn.execute(f"INSERT INTO failures ({', '.join(failures.FIELDS)}) "
                          f"VALUES ({', '.join('?' * len(failures.FIELDS))})",
                          [entry[k] for k in failures.FIELDS])
        self.conn.execute(
            "DELETE FROM failures WHERE handoff_id = ? AND id <= (SELECT id FROM "
            "failures WHERE handoff_id = ? ORDER BY id DESC LIMIT 1 OFFSET ?)",
            (hid, hid, failures.CAP))

    def failures(self, handoff_id: str) -> list[dict]:
        rows = self.conn.execute(
            f"SELECT {', '.join(failures.FIELDS)} FROM failures WHERE handoff_id = ? "
            "ORDER BY id", (handoff_id,))
        return [dict(zip(failures.FIELDS, r, strict=True)) for r in rows]

    # --- the supervisor's storage (every scan backed by a partial index, migration 2) ---

    def get_leader(self, name: str) -> dict | None:
        row = self.conn.execute(
            "SELECT holder, incarnation, fence, expires_at FROM supervisor_leadership "
            "WHERE name = ?", (name,)).fetchone()
        if row is None:
            return None
        return dict(zip(("holder", "incarnation", "fence", "expires_at"), row, strict=True))

    def put_leader(self, name: str, holder: str, incarnation: str | None, fence: int,
                   expires_at: float) -> None:
        self.conn.execute(
            "INSERT INTO supervisor_leadership (name, holder, incarnation, fence, expires_at) "
            "VALUES (?, ?, ?, ?, ?) ON CONFLICT(name) DO UPDATE SET holder = excluded.holder, "
            "incarnation = excluded.incarnation, fence = excluded.fence, "
            "expires_at = excluded.expires_at", (name, holder, incarnation, fence, expires_at))

    def claimed_by_incarnation(self, token: str, limit: int) -> list[str]:
        rows = self.conn.execute(
            "SELECT id FROM handoffs INDEXED BY supervisor_by_incarnation "
            "WHERE state = 'claimed' AND owner_incarnation = ? LIMIT ?", (token, limit))
        return [r[0] for r in rows]

    def stalled(self, now: float, limit: int) -> list[str]:
        rows = self.conn.execute(
            "SELECT id FROM handoffs INDEXED BY supervisor_by_progress_deadline "
            "WHERE state = 'claimed' AND progress_due IS NOT NULL AND progress_due < ? "
            "AND last_progress_at + progress_timeout_s < ? LIMIT ?", (now, now, limit))
        return [r[0] for r in rows]

    def over_wall_clock(self, now: float, limit: int) -> list[str]:
        rows = self.conn.execute(
            "SELECT id FROM handoffs INDEXED BY supervisor_by_wall_clock_deadline "
            "WHERE state IN ('claimed', 'released', 'orphaned') AND first_claimed_at IS NOT NULL "
            "AND first_claimed_at + json_extract(budget, '$.max_wall_clock_s') < ? LIMIT ?",
            (now, limit))
        return [r[0] for r in rows]



_CORRUPT = ("SQLITE_CORRUPT", "SQLITE_NOTADB")

# This process's pid, kept without a system call per transaction: a connection must not cross
# fork(), so every transaction compares it with the pid its connection was opened in.
_pid = os.getpid()


def _after_fork_in_child() -> None:
    global _pid
    _pid = os.getpid()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _store_error(exc: sqlite3.Error, where: str) -> Exception:
    """The typed error of an SQLite failure: a damaged file is StoreCorrupt (retrying cannot
    help), a busy or locked one Unavailable, anything else Internal."""
    name = getattr(exc, "sqlite_errorname", None) or ""  # e.g. SQLITE_CORRUPT_INDEX
    if name.startswith(_CORRUPT) or "malformed" in str(exc) or "not a database" in str(exc):
        return StoreCorrupt(f"{where}: the database file is damaged or not a DHP store ({exc});"
                            " retrying cannot help: restore a backup, or export what still "
                            "verifies", requirement="DHP-SEC-005")
    if isinstance(exc, sqlite3.IntegrityError) and "num < 2147483648" in str(exc):
        return Unavailable(f"{where}: a SQLite store holds at most {MAX_HANDOFFS:,} handoffs "
                           "(schema 7), and this one is full")
    if isinstance(exc, sqlite3.OperationalError):
        return Unavailable(f"{where}: {exc}")
    return Internal(f"{where}: {exc}")


class SQLiteStore(StoreBackend):
    """A store in folder `path`: `<path>/dhp.sqlite3` and the liveness locks beside it."""

    def __init__(self, path: str | os.PathLike, *, ttl: float = DEFAULT_TTL,
                 heartbeat_interval: float | None = None,
                 fsync_interval: float = DEFAULT_FSYNC_INTERVAL,
                 clock: Callable[[], float] | None = None, limits: Limits | None = None):
        self.path = Path(path)
        self.location = str(self.path)
        self._wake = os.path.join(self.location, doorbell.FOLDER)  # announce_work's folder
        if self.path.exists() and not self.path.is_dir():
            raise InvalidInput(f"store path {self.path} exists and is not a folder")
        self.ttl = ttl
        if limits is not None:
            if not isinstance(limits, Limits):
                raise InvalidInput(f"limits must be a dhp.Limits, not {limits!r}",
                                   requirement="DHP-LIM-001")
            self.limits = limits
        self.heartbeat_interval = heartbeat_interval
        self.fsync_interval = fsync_interval
        self._synced_at = -math.inf  # time.monotonic() of this process's last fsynced commit
        self._unsynced = False  # a checkpoint committed since then waits for an fsync
        self._clock = clock or store_clock
        self._lock = threading.RLock()
        self._busy_thread: int | None = None
        self._conn: sqlite3.Connection | None = None
        self._written: WrittenRows | None = None  # the rows its connection wrote
        # This process's syncs of the WAL, which transaction() makes (None: not in WAL mode).
        self._wal_sync: WalSync | None = None
        self._group_commit = True  # False: every sync is an fsync of this process's own
        self._pid = -1
        self._connection()  # create and migrate now, so errors surface at open
        try:  # made now, so announce_work never stats a folder that is not there
            os.mkdir(self._wake)
        except OSError:
            pass  # there already, or a read-only folder: a waiter makes it
        # Keyed to the database file itself, not to the folder it was reached through: a
        # symlinked dhp.sqlite3 must share its owners' liveness locks (DHP-LSE-005).
        self.liveness = liveness.for_folder(
            Path(os.path.realpath(self.path / DB_FILE)).parent / "liveness")

    def __repr__(self) -> str:
        return f"SQLiteStore({str(self.path)!r})"

    def now(self) -> float:
        return self._clock()

    def in_transaction_on_this_thread(self) -> bool:
        return self._busy_thread == threading.get_ident()

    def _connection(self) -> sqlite3.Connection:
        # A connection must not cross fork(): a child opens its own.
        if self._conn is None or self._pid != _pid:
            self.path.mkdir(parents=True, exist_ok=True)
            try:
                conn = sqlite3.connect(self.path / DB_FILE, timeout=BUSY_TIMEOUT_S,
                                       isolation_level=None, check_same_thread=False)
                mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
                # In WAL mode a commit at NORMAL is a commit at FULL without its fsync of the
                # WAL, which transaction() makes itself when one is due. In any other mode
                # (a file system without shared memory) every commit is fsynced by SQLite.
                wal = mode.lower() == "wal"
                conn.execute(f"PRAGMA synchronous={'NORMAL' if wal else 'FULL'}")
                self._migrate(conn)
            except sqlite3.Error as exc:
                raise _store_error(exc, f"cannot open the store at {self.path}") from None
            self._close_wal()  # the previous connection's (or the parent process's)
            if wal:
                self._wal_sync = WalSync(os.path.realpath(self.path / DB_FILE) + "-wal")
            self._conn, self._pid = conn, _pid
            self._written = WrittenRows(conn, tuple(map(affinities(conn, "handoffs").get,
                                                        _ROW_COLUMNS)))
            self._synced_at, self._unsynced = -math.inf, False  # a new process: nothing yet
        return self._conn

    def _migrate(self, conn: sqlite3.Connection) -> None:
        if self._up_to_date(conn):
            return  # a plain read: opening a store never waits for a writer (WAL)
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute("CREATE TABLE IF NOT EXISTS meta "
                         "(key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            meta = dict(conn.execute("SELECT key, value FROM meta"))
            version = int(meta.get("schema_version", 0))
            if version > len(MIGRATIONS):
                raise Unavailable(
                    f"the store at {self.path} has schema version {version}; this release "
                    f"reads up to {len(MIGRATIONS)}: upgrade durable-handoff")
            for number, step in enumerate(MIGRATIONS[version:], start=version + 1):
                if number == 7:
                    self._check_before_7(conn)
                for statement in step.split(";"):
                    if statement.strip():
                        conn.execute(statement)
            conn.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)",
                         (str(len(MIGRATIONS)),))
            current_boot = boot_id()
            if meta.get("boot_id") not in (None, current_boot):
                self._after_reboot(SQLiteTx(conn, self.now))
            conn.execute("INSERT OR REPLACE INTO meta VALUES ('boot_id', ?)", (current_boot,))
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    def _check_before_7(self, conn: sqlite3.Connection) -> None:
        """Refuse, changing nothing, a store whose checkpoints migration 7 cannot key: one
        without its handoff (the store was edited), a seq of 2^32 or more, or a handoff past
        the 2^31 - 1 the new key allows."""
        bad = conn.execute(
            "SELECT count(*) FROM checkpoints c LEFT JOIN handoffs h ON h.id = c.handoff_id "
            "WHERE h.id IS NULL OR c.seq NOT BETWEEN 1 AND ?", (SEQ_SPAN - 1,)).fetchone()[0]
        last = conn.execute("SELECT max(rowid) FROM handoffs").fetchone()[0] or 0
        if bad or last > MAX_HANDOFFS:
            raise Unavailable(
                f"cannot upgrade the store at {self.path} to schema 7: {bad} checkpoints have no "
                f"handoff or a seq past {SEQ_SPAN - 1:,}, and its last handoff is number "
                f"{last:,} of at most {MAX_HANDOFFS:,}; the store is unchanged: export its "
                "handoffs with the release that wrote it")

    @staticmethod
    def _up_to_date(conn: sqlite3.Connection) -> bool:
        try:
            meta = dict(conn.execute("SELECT key, value FROM meta"))
        except sqlite3.OperationalError:
            return False  # a new store: no meta table yet
        return meta.get("schema_version") == str(len(MIGRATIONS)) \
            and meta.get("boot_id") == boot_id()

    def _after_reboot(self, tx: SQLiteTx) -> None:
        """Every owner died in the reboot: orphan their handoffs, rebase clock times."""
        now = self.now()
        for row in tx.select(states=("claimed",)):
            record = row["record"]
            outcome = machine.decide(record, {"name": "orphan", "owner_dead": True}, now)
            rebased = dict(outcome.record, last_progress_at=now)
            if record["first_claimed_at"] is not None:
                # Count the time used before the reboot, not the downtime.
                used = max(0.0, row["updated_at"] - record["first_claimed_at"])
                rebased["first_claimed_at"] = now - used
            tx.put_record(row["handoff_id"], rebased, None)

    def _fsync_needed(self, sync: str) -> bool:
        if sync == "commit":
            return True
        # A heartbeat ("none") syncs too once a checkpoint has waited an interval: the
        # heartbeat after a burst of checkpoints puts the burst's tail on disk.
        waiting = sync == "batch" or self._unsynced
        return waiting and time.monotonic() - self._synced_at >= self.fsync_interval

    def _committed(self, sync: str, fsynced: bool) -> None:
        if fsynced:
            self._synced_at, self._unsynced = time.monotonic(), False
        elif sync == "batch":
            self._unsynced = True

    def transaction(self, *, write: bool = True, sync: str = "commit") -> _Transaction:
        if sync not in SYNCS:
            raise Internal(f"unknown sync {sync!r}; expected one of {SYNCS}")
        return _Transaction(self, write, sync)

    def _sync_wal(self) -> None:
        """Make this process's commits so far durable: an fsync of the WAL, this process's or
        one another process started after our commit (dhp.store.wal_sync). The write lock is
        free meanwhile, so other writers need not wait for the disk."""
        if self._wal_sync is None:
            return  # SQLite fsynced the commit itself (synchronous=FULL)
        try:
            self._wal_sync.sync(share=self._group_commit)
        except OSError as exc:
            raise Unavailable(f"store {self.path}: fsync of the WAL failed: {exc}") from None

    def sync_stats(self) -> dict[str, int]:
        """This process's syncs of the WAL on its current connection: `fsyncs` it made, and
        `shared` ones another process's fsync covered (for tests and bench/group_commit.py;
        not part of the public API)."""
        sync = self._wal_sync
        return {"fsyncs": sync.fsyncs if sync else 0, "shared": sync.shared if sync else 0}

    def _close_wal(self) -> None:
        if self._wal_sync is not None:
            self._wal_sync.close()
            self._wal_sync = None

    def announce_work(self) -> None:
        doorbell.ring(self._wake)

    def work_waiter(self) -> doorbell.Waiter:
        return doorbell.Waiter(self.path / doorbell.FOLDER)

    def storage_check(self) -> list[str]:
        try:
            with self._lock:
                rows = self._connection().execute("PRAGMA integrity_check").fetchall()
        except sqlite3.Error as exc:  # a page too damaged for the check itself
            return [f"sqlite integrity_check failed: {exc}"]
        found = [r[0] for r in rows]
        return [] if found == ["ok"] else [f"sqlite integrity_check: {p}" for p in found]

    def schema_version(self) -> int:
        with self._lock:
            row = self._connection().execute(
                "SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        return int(row[0])

    def close(self) -> None:
        with self._lock:
            if self._conn is not None and self._pid == _pid:
                self._conn.close()
                self._close_wal()
            self._conn = None


class _Transaction:
    """SQLiteStore.transaction(): one transaction on the store's connection, committed on a
    clean exit and rolled back on any exception. A class rather than a generator context
    manager because every write runs one."""

    __slots__ = ("store", "write", "sync", "conn", "tx")

    def __init__(self, store: SQLiteStore, write: bool, sync: str):
        self.store, self.write, self.sync = store, write, sync

    def __enter__(self) -> SQLiteTx:
        store = self.store
        store._lock.acquire()  # held until __exit__
        try:
            if store._busy_thread == threading.get_ident():
                raise Internal("nested store transaction")
            conn = self.conn = store._connection()
            try:
                conn.execute("BEGIN IMMEDIATE" if self.write else "BEGIN")
            except sqlite3.Error as exc:
                raise Unavailable(f"store {store.path} is busy: {exc}") from None
        except BaseException:
            store._lock.release()
            raise
        store._busy_thread = threading.get_ident()
        self.tx = SQLiteTx(conn, store.now, store._written)
        return self.tx

    def __exit__(self, kind: type | None, exc: BaseException | None, trace: object) -> None:
        store, conn = self.store, self.conn
        try:
            try:
                if exc is None:
                    self.tx.before_commit()
                    conn.execute("COMMIT")
            except BaseException as failed:
                exc = failed
            if exc is not None:
                store._written.clear()
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                if isinstance(exc, sqlite3.Error):
                    raise _store_error(exc, f"store {store.path}") from None
                if kind is None:
                    raise exc
                return  # the body's exception goes on
            self.tx.after_commit()
            if conn.total_changes != self.tx.changes_before:  # an empty commit syncs nothing
                fsync = store._fsync_needed(self.sync)
                if fsync:
                    store._sync_wal()
                store._committed(self.sync, fsync)
        finally:
            store._busy_thread = None
            store._lock.release()
        if self.tx.announce:  # committed and synced: ring now (a FIFO is no transaction)
            store.announce_work()
