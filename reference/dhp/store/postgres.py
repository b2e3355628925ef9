"""The server store: PostgreSQL through psycopg 3, one store for a fleet of hosts.

Location. `postgresql://user@host:port/db?schema=dhp`: every libpq URL parameter works;
`schema` (ours, default `dhp`) names the schema that holds the store's tables, so one database
can hold several stores.

Versioning. `<schema>.meta.schema_version` counts the entries of MIGRATIONS applied. Opening a
store reads the version without a lock; when it is behind, the migration runs in one
transaction under a transaction-level advisory lock, so concurrent openers migrate it exactly
once (the losers see the new version when they get the lock and do nothing).

Concurrency. A write transaction takes a row lock on the handoff it reads (`SELECT ... FOR
UPDATE`), so writers of different handoffs never wait for each other, and concurrent claimers
of one handoff are serialised on its row (DHP-FEN-005). `claim_next` and the supervisor's scans
pick rows with `FOR UPDATE SKIP LOCKED`, so N workers pulling from one queue never queue
behind each other. Leadership decisions are serialised by a transaction advisory lock.

Round trips. Under load every round trip waits for the server's process to be scheduled, so
they are what failover and throughput cost. A write transaction runs in pipeline mode (BEGIN
travels with its first statement, the writes with COMMIT); the statement that locks a row
also reads the server's clock and, for a claimed row, probes its owner's liveness lock, and
the last checkpoint links come back in the same round trip. A fenced write (checkpoint,
heartbeat, complete), a recover and a claim_next are two round trips each (claim_next's
pick, with its scans and liveness probes, is one statement: _pick_sql); a read is one
statement. A checkpoint of a lease this process holds is one: the store keeps the row its
last write left (kept_lease), the rules are decided on it, and one statement updates the
row only if it is still that row, with a live lease on the server's clock
(checkpoint_kept); if not, nothing is written and the full path reads the row.

Connections. A psycopg_pool pool per process (re-made in a forked child). A connection error,
a statement timeout or a session that reached a read-only standby is `unavailable` (retryable,
outcome unknown): the broken connection is dropped, the pool's idle ones are checked, and
while the server is away the pool tries to connect every 0.2 s, so the next call works once
it is back, or once a standby named in a multi-host URL is promoted (DHP-SRV-013). A commit
whose wait for the synchronous standby was cancelled is `unavailable` too (DHP-SRV-012).
Every session sets a statement timeout, an idle-in-transaction timeout (so a worker stopped
inside a transaction cannot hold a row lock for long) and TCP keepalives on both ends.

Clock (DHP-SRV-001, DHP-SRV-002). Every lease decision is taken with the database server's
clock, `clock_timestamp()`, read on the transaction's own connection after its row lock was
taken (by the same statement, as the locked row comes out); no client's clock is ever used.
Fencing keeps safety independent of that clock.

Durability (DHP-SRV-004). Dispatches, claims, checkpoints, completions and every other change
commit with `synchronous_commit = on`: acknowledged means flushed to the server's WAL (the
server's group commit shares one flush among concurrent committers). Heartbeats commit with
`synchronous_commit = off`: losing one only shortens a lease.

Liveness (DHP-SRV-003): see dhp.store.pg_liveness.

Waking idle workers: a commit that leaves work takeable notifies the store's channel in the
same transaction; see dhp.store.pg_doorbell.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool, PoolTimeout

from dhp.core import failures, journal
from dhp.core.backend import DEFAULT_TTL, SYNCS, StoreBackend, Tx
from dhp.core.errors import Internal, Unavailable
from dhp.store.liveness import incarnation
from dhp.store.missing import no_store
from dhp.store.pg_doorbell import PgDoorbell, Waiter, channel_for
from dhp.store.pg_liveness import PgLiveness, advisory_key, probe_sql
from dhp.store.pg_location import connect_failure, split_location

# Session settings of every connection: bounded waits, and keepalives so that the server
# notices a vanished client (its row and advisory locks are freed) and the client a vanished
# server. Seconds / milliseconds as Postgres reads them.
STATEMENT_TIMEOUT_MS = 30_000
# A client paused inside a transaction holds its row locks until this ends its session: kept
# below the shortest lease people run (the kit's 1 s), so that a frozen owner or supervisor
# leader delays its successor's take by no more than its own lease would (DHP-SUP-012).
# Our transactions never idle on purpose; only a stalled client reaches it.
IDLE_IN_TRANSACTION_MS = 1_000
SERVER_KEEPALIVES = {"tcp_keepalives_idle": 5, "tcp_keepalives_interval": 1,
                     "tcp_keepalives_count": 3, "tcp_user_timeout": 10_000}
CLIENT_KEEPALIVES = {"keepalives": 1, "keepalives_idle": 5, "keepalives_interval": 1,
                     "keepalives_count": 3, "tcp_user_timeout": 10_000, "connect_timeout": 10}
POOL_MAX = 4  # per process: the main thread, heartbeat threads, a supervisor
# While the server is away the pool tries to connect every RECONNECT_S: its own backoff
# (1 s, 2 s, 4 s, ...) would keep workers away from a standby promoted in a fraction of a
# second for up to the outage's length again (DHP-SRV-013). It gives up after RECONNECT_S,
# and _try_again starts the next attempt.
RECONNECT_S = 0.2
POOL_WAIT_S = 10.0  # the longest a call waits for a connection (server restarting, pool busy)

# Each entry is one migration: the statements that take the schema from version i to i + 1.
# `{s}` is the store's (validated, quoted) schema.
MIGRATIONS: list[str] = [
    """
    CREATE TABLE {s}.handoffs (
        id text PRIMARY KEY,
        seq bigserial NOT NULL,
        envelope text NOT NULL,
        task_kind text NOT NULL,
        state text NOT NULL,
        owner text,
        fence bigint NOT NULL,
        lease_expires_at double precision,
        attempts integer NOT NULL,
        steps integer NOT NULL,
        spend double precision NOT NULL,
        first_claimed_at double precision,
        last_progress_at double precision,
        budget jsonb NOT NULL,
        dlq_reason text,
        progress_timeout_s double precision,
        owner_incarnation text,
        result text,
        created_at text NOT NULL,
        updated_at double precision NOT NULL
    );
    CREATE INDEX handoffs_order ON {s}.handoffs (seq);
    CREATE INDEX handoffs_by_state ON {s}.handoffs (state, task_kind, seq);
    CREATE INDEX handoffs_takeable ON {s}.handoffs (task_kind, seq)
        WHERE state IN ('pending', 'released', 'orphaned');
    CREATE INDEX handoffs_by_lease ON {s}.handoffs (lease_expires_at)
        WHERE state = 'claimed';
    CREATE INDEX handoffs_by_incarnation ON {s}.handoffs (owner_incarnation)
        WHERE state = 'claimed';
    CREATE INDEX handoffs_by_progress_deadline
        ON {s}.handoffs ((last_progress_at + progress_timeout_s))
        WHERE state = 'claimed' AND progress_timeout_s IS NOT NULL;
    CREATE INDEX handoffs_by_wall_clock_deadline
        ON {s}.handoffs ((first_claimed_at + (budget ->> 'max_wall_clock_s')::float8))
        WHERE state IN ('claimed', 'released', 'orphaned') AND first_claimed_at IS NOT NULL;
    CREATE TABLE {s}.checkpoints (
        handoff_id text NOT NULL,
        seq integer NOT NULL,
        fence bigint NOT NULL,
        hash text NOT NULL,
        record text NOT NULL,
        PRIMARY KEY (handoff_id, seq)
    );
    CREATE TABLE {s}.supervisor_leadership (
        name text PRIMARY KEY,
        holder text NOT NULL,
        incarnation text,
        fence bigint NOT NULL,
        expires_at double precision NOT NULL
    )
    """,
    # 2: delays and retries (DHP-SCH-001): a take waits until not_before (store clock).
    """
    ALTER TABLE {s}.handoffs ADD COLUMN not_before double precision
    """,
    # 3: the lease journal (dhp.core.journal): every take and orphan, a few per handoff.
    """
    CREATE TABLE {s}.lease_journal (
        id bigserial PRIMARY KEY,
        handoff_id text NOT NULL,
        event text NOT NULL,
        fence bigint NOT NULL,
        worker text,
        at double precision NOT NULL,
        wall text NOT NULL,
        lost_s double precision,
        how text
    );
    CREATE INDEX lease_journal_by_handoff ON {s}.lease_journal (handoff_id, id)
    """,
    # 4: failure records (dhp.core.failures): why each failed attempt failed, the last few
    # per handoff. A new table: no existing row changes.
    """
    CREATE TABLE {s}.failures (
        id bigserial PRIMARY KEY,
        handoff_id text NOT NULL,
        attempt bigint NOT NULL,
        fence bigint NOT NULL,
        worker text NOT NULL,
        at double precision NOT NULL,
        wall text NOT NULL,
        type text NOT NULL,
        message text NOT NULL,
        traceback text
    );
    CREATE INDEX failures_by_handoff ON {s}.failures (handoff_id, id)
    """,
    # 5: the chain's head (seq and hash of the last checkpoint) kept on the handoff's row,
    # against which a take checks the last checkpoint it reads (DHP-SEC-010).
    """
    ALTER TABLE {s}.handoffs ADD COLUMN chain_seq integer, ADD COLUMN chain_hash text;
    UPDATE {s}.handoffs AS h SET (chain_seq, chain_hash) = (SELECT seq, hash
        FROM {s}.checkpoints AS c WHERE c.handoff_id = h.id ORDER BY seq DESC LIMIT 1)
    """,
    # 6: a checkpoint or a heartbeat can be a HOT update (the row's new version on its page,
    # no index touched): the lease and progress-deadline indexes key on lease_due and
    # progress_due, lower bounds of lease_expires_at and last_progress_at +
    # progress_timeout_s that put_record moves only when they fall behind (_due_sql), and
    # pages are left 30% free for the new versions. A scan for passed deadlines asks for
    # both bounds and misses none (as the SQLite store's migrations 6 and 8). claim_next's
    # first look, for partly done work, reads an index of the orphaned and released rows
    # only (through handoffs_takeable it read every pending row of the kind).
    """
    ALTER TABLE {s}.handoffs ADD COLUMN lease_due double precision,
        ADD COLUMN progress_due double precision;
    UPDATE {s}.handoffs SET lease_due = lease_expires_at,
        progress_due = last_progress_at + progress_timeout_s;
    DROP INDEX {s}.handoffs_by_lease;
    CREATE INDEX handoffs_by_lease ON {s}.handoffs (lease_due) WHERE state = 'claimed';
    DROP INDEX {s}.handoffs_by_progress_deadline;
    CREATE INDEX handoffs_by_progress_deadline ON {s}.handoffs (progress_due)
        WHERE state = 'claimed' AND progress_due IS NOT NULL;
    CREATE INDEX handoffs_partly_done ON {s}.handoffs (task_kind, seq)
        WHERE state IN ('orphaned', 'released');
    ALTER TABLE {s}.handoffs SET (fillfactor = 70)
    """,
]
SCHEMA_VERSION = len(MIGRATIONS)

RECORD_COLUMNS = ("state", "owner", "fence", "lease_expires_at", "attempts", "steps", "spend",
                  "first_claimed_at", "last_progress_at", "budget", "dlq_reason",
                  "progress_timeout_s", "not_before")
_ROW_COLUMNS = ("id", "envelope", "task_kind", *RECORD_COLUMNS, "owner_incarnation", "result",
                "created_at", "updated_at")
_CLOCK = "extract(epoch FROM clock_timestamp())::float8"


def _due_sql(key: str, deadline: str, now: str) -> str:
    """The new index key of a deadline (migration 4), as the SQLite store's _due_key: the
    old key `key` kept while it is a lower bound of the new `deadline` at least half the
    deadline's remaining time away, else the deadline. A worker writing more often than
    that (heartbeats every ttl/3) never shows in a scan for passed deadlines before its
    deadline has passed, and a run of checkpoints moves the key once per half."""
    return (f"CASE WHEN {deadline} IS NULL OR {key} IS NULL OR NOT {key} BETWEEN {now} + "
            f"({deadline} - {now}) / 2 AND {deadline} THEN {deadline} ELSE {key} END")


def _dumps(obj: object) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def _number(value: float) -> int | float:
    # spend is a double in the table; integral values read back as the ints they were.
    return int(value) if value.is_integer() and abs(value) < 2 ** 53 else value


def _row(values: tuple) -> dict:
    raw = dict(zip(_ROW_COLUMNS, values, strict=True))
    record = {k: raw[k] for k in RECORD_COLUMNS}
    record["spend"] = _number(record["spend"])
    envelope = raw["envelope"]
    return {"handoff_id": raw["id"], "envelope": json.loads(envelope) if envelope else None,
            "task_kind": raw["task_kind"], "record": record,
            "owner_incarnation": raw["owner_incarnation"],
            "result": json.loads(raw["result"]) if raw["result"] is not None else None,
            "created_at": raw["created_at"], "updated_at": raw["updated_at"]}


def _record_values(record: dict) -> list:
    if set(record) != set(RECORD_COLUMNS):
        raise Internal(f"record members {sorted(record)} do not match the store's columns")
    return [Jsonb(record[k]) if k == "budget" else record[k] for k in RECORD_COLUMNS]


def _due_keys(record: dict) -> tuple[float | None, float | None]:
    """lease_due and progress_due of a new row: its deadlines (migration 4)."""
    last, timeout = record["last_progress_at"], record["progress_timeout_s"]
    return record["lease_expires_at"], None if last is None or timeout is None else last + timeout


def _options(settings: dict[str, Any]) -> str:
    return " ".join(f"-c {k}={v}" for k, v in settings.items())


# The last two checkpoints of a handoff, newest first, the newest with its record when
# asked: the links a fenced write (last_link) and a resume (last_checkpoint, checkpoint_hash)
# need, read in the round trip of the row itself.
_LINKS = ("SELECT seq, hash, CASE WHEN %s AND n = 1 THEN record END FROM (SELECT seq, hash, "
          "record, row_number() OVER (ORDER BY seq DESC) AS n FROM {s}.checkpoints "
          "WHERE handoff_id = %s ORDER BY seq DESC LIMIT 2) AS last ORDER BY seq DESC")


def _pick_sql(kinds: str) -> str:
    """claim_next's pick (PostgresTx.pick_next) in one statement: the first row of the
    first branch that has one, each branch an indexed scan, oldest dispatch first, that
    locks its row skipping rows others hold: partly done work (DHP-STM-013), then a claim
    whose owner's liveness lock is free (DHP-SCH-008; the owners are read by a loose index
    scan and probed as owner_dead does), then any other takeable row (DHP-STM-009); else a
    row of NULLs carrying next_due. UNION ALL under LIMIT 1 stops at the first branch with
    a row, so the later scans and probes run only when the earlier find nothing. The
    server's clock is read once for the eligibility tests and again as the row comes out,
    after its lock; the picked id is left in a transaction setting for the links statement
    pipelined behind this one (_PICKED_LINKS). `{clock}`: the server's clock, or the test
    clock's reading that replaces it."""
    cols = ", ".join(_ROW_COLUMNS)

    def branch(pri: int, where: str) -> str:
        return (f"(SELECT {cols}, {pri} AS pri, NULL::float8 AS due FROM (SELECT {cols} "
                f"FROM {{s}}.handoffs WHERE ({where}) AND {kinds} ORDER BY seq LIMIT 1 "
                "FOR UPDATE SKIP LOCKED) AS b)")

    # The clock as a parameter of the plan (an InitPlan), which index scans can compare.
    now = "(SELECT t FROM c)"
    expired = f"state = 'claimed' AND lease_due <= {now} AND lease_expires_at <= {now}"
    eligible = f"(not_before IS NULL OR not_before <= {now})"
    due = "CASE WHEN state = 'claimed' THEN lease_expires_at ELSE not_before END"
    nulls = ", ".join(["NULL"] * len(_ROW_COLUMNS))
    return (
        "WITH RECURSIVE c AS (SELECT {clock} AS t), owners(o) AS ((SELECT "
        "owner_incarnation FROM {s}.handoffs WHERE state = 'claimed' AND owner_incarnation "
        "IS NOT NULL ORDER BY 1 LIMIT 1) UNION ALL SELECT (SELECT owner_incarnation FROM "
        "{s}.handoffs WHERE state = 'claimed' AND owner_incarnation > o ORDER BY 1 LIMIT 1) "
        f"FROM owners WHERE o IS NOT NULL) SELECT p.*, {_CLOCK}, "
        "set_config('dhp.picked', coalesce(p.id, ''), true) FROM ("
        + branch(0, "state IN ('orphaned', 'released') AND (state = 'orphaned' OR steps > 0) "
                    f"AND {eligible} OR {expired}")
        + " UNION ALL "
        + branch(1, "state = 'claimed' AND owner_incarnation IN (SELECT o FROM owners WHERE "
                    "o IS NOT NULL AND o <> %(me)s AND o ~ '^[0-9a-f]{32}$' AND "
                    f"{probe_sql('o')})")
        + " UNION ALL "
        # An expired claim is branch 0's: one this branch could lock, that one would have.
        + branch(2, f"state IN ('pending', 'released', 'orphaned') AND {eligible}")
        + f" UNION ALL (SELECT {nulls}, 3, (SELECT MIN({due}) FROM {{s}}.handoffs WHERE "
        f"state IN ('pending', 'released', 'orphaned', 'claimed') AND {kinds} "
        f"AND {due} > {now})) LIMIT 1) AS p")


# By the kinds' test: one kind (an equality, so that each branch reads its index in seq
# order within the kind and stops at its first row), or any of several.
_PICK = {True: _pick_sql("task_kind = %(kinds)s"), False: _pick_sql("task_kind = ANY(%(kinds)s)")}

KEPT_CAP = 1024  # leases kept at most (kept_lease), the oldest dropped first

# A checkpoint of a kept lease (PostgresStore.checkpoint_kept) in one statement: the row is
# updated only if it is still as kept (owner, fence, incarnation, steps, spend, budget) with
# the same last link, its lease live and its wall-clock cap not passed on the server's
# clock (or the test clock); the record is inserted only with that update.
_CHECKPOINT_KEPT = (
    "WITH c AS (SELECT {stamp} AS t), u AS (UPDATE {{s}}.handoffs AS h SET "
    "steps = %(steps)s, spend = %(spend)s, lease_expires_at = c.t + %(ttl)s, "
    "last_progress_at = c.t, updated_at = c.t, chain_seq = %(seq)s, chain_hash = %(hash)s, "
    "lease_due = {lease_due}, progress_due = {progress_due} FROM c "
    "WHERE h.id = %(id)s AND h.state = 'claimed' AND h.owner = %(owner)s "
    "AND h.fence = %(fence)s AND h.owner_incarnation = %(inc)s AND h.steps = %(old_steps)s "
    "AND h.spend = %(old_spend)s AND h.budget = %(budget)s AND c.t < h.lease_expires_at "
    "AND coalesce(c.t - h.first_claimed_at <= (h.budget ->> 'max_wall_clock_s')::float8, "
    "true) AND (SELECT hash FROM {{s}}.checkpoints WHERE handoff_id = h.id ORDER BY seq "
    "DESC LIMIT 1) IS NOT DISTINCT FROM %(last_hash)s RETURNING h.id) "
    "INSERT INTO {{s}}.checkpoints (handoff_id, seq, fence, hash, record) "
    "SELECT id, %(seq)s, %(fence)s, %(hash)s, %(text)s FROM u RETURNING (SELECT t FROM c)"
).format(stamp="{stamp}", lease_due=_due_sql("h.lease_due", "c.t + %(ttl)s", "c.t"),
         progress_due=_due_sql("h.progress_due", "c.t + h.progress_timeout_s", "c.t"))
_PICKED_LINKS = _LINKS.replace("handoff_id = %s", "handoff_id = current_setting('dhp.picked')")
_PICKED_HEAD = ("SELECT chain_seq, chain_hash FROM {s}.handoffs "
                "WHERE id = current_setting('dhp.picked')")


class PostgresTx(Tx):
    """A transaction on one connection. A write transaction runs in pipeline mode: its
    statements are sent as they are made and the client waits only for what it reads, so
    a fenced write costs two round trips (read the row, then write and commit together).
    A read runs in autocommit: READ COMMITTED gives every statement its own snapshot either
    way, so BEGIN and COMMIT would only cost round trips."""

    def __init__(self, store: PostgresStore, conn: psycopg.Connection, write: bool):
        self.store = store
        self.conn = conn
        self.write = write
        self.s = store.quoted_schema
        # The server's clock read by the statement that took the last row lock, after the
        # lock (store.now() takes it once, if no other statement ran since).
        self.clock_at_lock: float | None = None
        # handoff id -> (rows of _LINKS, whether the newest has its record) or a cursor
        # whose result is on its way (pipelined behind the row's own statement).
        self._links: dict[str, tuple[Any, bool]] = {}
        # owner token -> whether its liveness lock was free when probed with its row lock
        # (PgLiveness.owner_dead); a free lock stays this transaction's until it ends.
        self.probes: dict[str, bool] = {}
        self.pipeline: psycopg.Pipeline | None = None  # set for a write transaction
        # The chain's head read with a row (in a read, in the row's snapshot; in a take,
        # a cursor pipelined behind the row's lock).
        self._heads: dict[str, Any] = {}
        self._unsynced = False
        # What this transaction wrote, kept by the store once it commits (kept_lease):
        # handoff id -> (record, owner_incarnation), and -> (seq, hash) of a new last link.
        self.wrote: dict[str, tuple[dict, str | None]] = {}
        self.wrote_links: dict[str, tuple[int, str]] = {}

    def _execute(self, sql: str, args: Any = None) -> psycopg.Cursor:
        self.clock_at_lock = None
        self._unsynced = self.pipeline is not None
        return self.conn.execute(sql.replace("{s}", self.s), args)

    def _sync(self) -> None:
        """Before a write transaction reads a result: a Sync, not the flush a pipelined fetch
        sends. Only after a Sync does the server count the time until the client's next
        statement as idle in a transaction, so that a client paused while it holds row locks
        is ended by idle_in_transaction_session_timeout (DHP-SRV-009); after a flush it
        would wait for it, locks held, for ever. Same round trip: the results come with it."""
        if self._unsynced:
            self._unsynced = False
            self.pipeline.sync()

    def _all(self, sql: str, args: Any = None) -> list[tuple]:
        cur = self._execute(sql, args)
        self._sync()
        return cur.fetchall()

    def _one(self, sql: str, args: Any = None) -> tuple | None:
        cur = self._execute(sql, args)
        self._sync()
        return cur.fetchone()

    def _select(self, envelope: bool = True) -> str:
        cols = ", ".join("NULL" if not envelope and c in ("envelope", "result") else c
                         for c in _ROW_COLUMNS)
        return f"SELECT {cols} FROM {{s}}.handoffs"

    def get(self, handoff_id: str, *, envelope: bool = True) -> dict | None:
        if not self.write:
            return self._get_read(handoff_id)
        # The row lock, then in the same statement the server's clock and, for a claimed
        # row, the probe of its owner's liveness lock (owner_dead): the outer query reads
        # them as the locked row comes out of the inner one, after any wait for the lock.
        # The links follow in the same round trip, as a statement of their own so that
        # they see what the lock's previous holder committed.
        probe = f"CASE WHEN state = 'claimed' THEN {probe_sql('owner_incarnation')} END" \
            if envelope else "NULL"
        cur = self._execute(f"SELECT *, {_CLOCK}, {probe} FROM ({self._select(envelope)} "
                            "WHERE id = %s FOR UPDATE) AS locked", (handoff_id,))
        self._links[handoff_id] = (self.conn.execute(_LINKS.replace("{s}", self.s),
                                                     (envelope, handoff_id)), envelope)
        if envelope:  # a take: the chain's head it checks (DHP-SEC-010), same round trip
            self._heads[handoff_id] = self.conn.execute(
                f"SELECT chain_seq, chain_hash FROM {self.s}.handoffs WHERE id = %s",
                (handoff_id,))
        self._sync()
        found = cur.fetchone()
        if found is None:
            return None
        row = _row(found[:-2])
        self.clock_at_lock = found[-2]
        if found[-1] is not None:
            self.probes[row["owner_incarnation"]] = found[-1]
        return row

    def _get_read(self, handoff_id: str) -> dict | None:
        # One statement, one snapshot: the row and its last two links.
        found = self._one(
            f"SELECT {', '.join('h.' + c for c in _ROW_COLUMNS)}, l.seq, l.hash, l.record, "
            "p.hash, h.chain_seq, h.chain_hash FROM {s}.handoffs AS h "
            "LEFT JOIN LATERAL (SELECT seq, hash, record "
            "FROM {s}.checkpoints WHERE handoff_id = h.id ORDER BY seq DESC LIMIT 1) AS l "
            "ON true LEFT JOIN LATERAL (SELECT hash FROM {s}.checkpoints "
            "WHERE handoff_id = h.id AND seq = l.seq - 1) AS p ON true WHERE h.id = %s",
            (handoff_id,))
        if found is None:
            return None
        seq, last_hash, record, prev_hash, *head = found[len(_ROW_COLUMNS):]
        self._heads[handoff_id] = None if head[0] is None else tuple(head)  # same snapshot
        links = [] if seq is None else [(seq, last_hash, record)] + (
            [(seq - 1, prev_hash, None)] if prev_hash is not None else [])
        self._links[handoff_id] = (links, True)
        return _row(found[:len(_ROW_COLUMNS)])

    def _links_of(self, handoff_id: str, record: bool) -> list[tuple]:
        cached, with_record = self._links.get(handoff_id, (None, False))
        if cached is not None and not isinstance(cached, list):
            self._sync()
            cached = cached.fetchall()  # arrived with the row
            self._links[handoff_id] = (cached, with_record)
        if cached is None or record and not with_record:
            cached = self._all(_LINKS, (record, handoff_id))
            self._links[handoff_id] = (cached, record)
        return cached

    def insert(self, handoff_id: str, envelope: dict, record: dict, created_at: str) -> None:
        self.insert_new([(handoff_id, envelope, record, created_at, None)])

    def insert_new(self, rows: list[tuple[str, dict, dict, str, str | None]]) -> None:
        # A concurrent dispatch of the same intent inserted it first: same handoff (DHP-ID-004).
        cols = ("id", "envelope", "task_kind", *RECORD_COLUMNS, "lease_due", "progress_due",
                "created_at", "updated_at")
        stamp, stamp_args = self._stamp()
        for row in rows:
            self.mark_takeable(row[2])
        with self.conn.cursor() as cur:
            cur.executemany(
                f"INSERT INTO {self.s}.handoffs ({', '.join(cols)}) VALUES "
                f"({', '.join(['%s'] * (len(cols) - 1))}, {stamp}) ON CONFLICT (id) DO NOTHING",
                [[hid, _dumps(envelope) if text is None else text,
                  envelope["intent"]["task_kind"], *_record_values(record),
                  *_due_keys(record), created_at, *stamp_args]
                 for hid, envelope, record, created_at, text in rows])

    def _stamp(self) -> tuple[str, list]:
        # updated_at: the server's clock, or the test clock that replaces it.
        return (_CLOCK, []) if self.store.clock is None else ("%s", [self.store.clock()])

    def put_record(self, handoff_id: str, record: dict, owner_incarnation: str | None) -> None:
        # Sent, not waited for: the row is locked by this transaction (get), and an error
        # surfaces at the commit, before anything is acknowledged.
        self.mark_takeable(record)
        self.wrote[handoff_id] = (record, owner_incarnation)
        sets = ", ".join(f"{c} = %s" for c in (*RECORD_COLUMNS, "owner_incarnation"))
        stamp, stamp_args = self._stamp()
        self._execute(
            f"UPDATE {{s}}.handoffs SET {sets}, updated_at = n.now, "
            f"lease_due = {_due_sql('lease_due', 'n.lease', 'n.now')}, "
            f"progress_due = {_due_sql('progress_due', 'n.progress', 'n.now')} "
            f"FROM (SELECT %s::float8 AS lease, %s::float8 AS progress, {stamp} AS now) AS n "
            "WHERE id = %s",
            [*_record_values(record), owner_incarnation, *_due_keys(record), *stamp_args,
             handoff_id])

    def last_link(self, handoff_id: str) -> tuple[int, str] | None:
        links = self._links_of(handoff_id, record=False)
        return (links[0][0], links[0][1]) if links else None

    def last_checkpoint(self, handoff_id: str) -> dict | None:
        links = self._links_of(handoff_id, record=True)
        return json.loads(links[0][2]) if links else None

    def checkpoint_hash(self, handoff_id: str, seq: int) -> str | None:
        for link in self._links_of(handoff_id, record=False):
            if link[0] == seq:
                return link[1]
        found = self._one("SELECT hash FROM {s}.checkpoints WHERE handoff_id = %s AND seq = %s",
                          (handoff_id, seq))
        return found[0] if found else None

    def append_checkpoint(self, record: dict, *, text: str | None = None) -> None:
        self.append_checkpoints([(record, text)])

    def append_checkpoints(self, records: list[tuple[dict, str | None]]) -> None:
        for r, _text in records:
            self._links.pop(r["handoff_id"], None)
            self._heads.pop(r["handoff_id"], None)
            self.wrote_links[r["handoff_id"]] = (r["seq"], r["hash"])
        with self.conn.cursor() as cur:
            cur.executemany(
                f"INSERT INTO {self.s}.checkpoints (handoff_id, seq, fence, hash, record) "
                "VALUES (%s, %s, %s, %s, %s)",
                [(r["handoff_id"], r["seq"], r["fence"], r["hash"],
                  _dumps(r) if text is None else text) for r, text in records])
            # The chain's new head on the row, which the take checks (DHP-SEC-010).
            heads = {r["handoff_id"]: (r["seq"], r["hash"]) for r, _text in records}
            cur.executemany(f"UPDATE {self.s}.handoffs SET chain_seq = %s, chain_hash = %s "
                            "WHERE id = %s", [(*head, hid) for hid, head in heads.items()])

    def chain_head(self, handoff_id: str) -> tuple[int, str] | None:
        head = self._heads.get(handoff_id, False)
        if head is None or isinstance(head, tuple):
            return head
        if head is not False:  # a cursor that arrived with the row (get)
            self._sync()
            found = head.fetchone()
            self._heads[handoff_id] = head = \
                None if found is None or found[0] is None else (found[0], found[1])
            return head
        found = self._one("SELECT chain_seq, chain_hash FROM {s}.handoffs WHERE id = %s",
                          (handoff_id,))
        return None if found is None or found[0] is None else (found[0], found[1])

    def last_link_known(self, handoff_id: str) -> tuple[int, str] | None | bool:
        """The handoff's last link as this transaction left it, None when it has no
        checkpoint, False when this transaction does not know."""
        if handoff_id in self.wrote_links:
            return self.wrote_links[handoff_id]
        cached = self._links.get(handoff_id, (None, False))[0]
        if not isinstance(cached, list):
            return False
        return (cached[0][0], cached[0][1]) if cached else None

    def checkpoints(self, handoff_id: str) -> list[dict]:
        rows = self._all("SELECT record FROM {s}.checkpoints WHERE handoff_id = %s "
                         "ORDER BY seq", (handoff_id,))
        return [json.loads(r[0]) for r in rows]

    def put_result(self, handoff_id: str, result_record: dict) -> None:
        self._execute("UPDATE {s}.handoffs SET result = %s WHERE id = %s",
                      (_dumps(result_record), handoff_id))

    def select(self, *, states: tuple[str, ...] | None = None,
               task_kinds: tuple[str, ...] | None = None,
               expired_before: float | None = None, limit: int | None = None) -> list[dict]:
        where, args = [], []
        if expired_before is not None:
            states = ("claimed",)
            where.append("lease_due <= %s AND lease_expires_at <= %s")  # migration 4
            args += [expired_before, expired_before]
        for column, values in (("state", states), ("task_kind", task_kinds)):
            if values is not None:
                where.append(f"{column} = ANY(%s)")
                args.append(list(values))
        sql = self._select() + (" WHERE " + " AND ".join(where) if where else "") \
            + " ORDER BY seq"
        if limit is not None:
            sql += " LIMIT %s"
            args.append(limit)
        if self.write:
            # claim_next and the supervisor's scans: a row another writer holds is skipped,
            # so N workers pulling from one queue never queue behind each other.
            sql += " FOR UPDATE SKIP LOCKED"
        return [_row(r) for r in self._all(sql, args)]

    # --- claim_next's pick: one statement (_pick_sql) ---

    def pick_next(self, task_kinds: tuple[str, ...]) -> tuple[dict | None, bool,
                                                             float | None]:
        # One round trip (with the BEGIN before it): the pick, and behind it the picked
        # row's links, a statement of their own so that they see what the lock's previous
        # holder committed (as in get).
        clock = self.store.clock  # tests only: the clock that replaces the server's
        one = len(task_kinds) == 1
        cur = self._execute(_PICK[one].replace("{clock}", _CLOCK if clock is None
                                               else "%(now)s"),
                            {"kinds": task_kinds[0] if one else list(task_kinds),
                             "me": incarnation(),
                             "now": None if clock is None else float(clock())})
        links = self.conn.execute(_PICKED_LINKS.replace("{s}", self.s), (True,))
        head = self.conn.execute(_PICKED_HEAD.replace("{s}", self.s))  # DHP-SEC-010
        self._sync()
        found = cur.fetchone()
        picked_links = links.fetchall()
        picked_head = head.fetchone()
        n = len(_ROW_COLUMNS)
        self.clock_at_lock = found[n + 2]
        if found[0] is None:
            return None, False, found[n + 1]
        row = _row(found[:n])
        self._links[row["handoff_id"]] = (picked_links, True)
        self._heads[row["handoff_id"]] = None if picked_head is None or picked_head[0] is None \
            else tuple(picked_head)
        return row, found[n] == 1, None

    def owner_incarnations(self) -> list[str]:
        # One probe of the partial index per owner (a loose index scan), not a read of every
        # claimed row: a pass costs what the number of processes does.
        rows = self._all(
            "WITH RECURSIVE owners(o) AS ((SELECT owner_incarnation FROM {s}.handoffs "
            "WHERE state = 'claimed' AND owner_incarnation IS NOT NULL ORDER BY 1 LIMIT 1) "
            "UNION ALL SELECT (SELECT owner_incarnation FROM {s}.handoffs WHERE state = "
            "'claimed' AND owner_incarnation > o ORDER BY 1 LIMIT 1) FROM owners "
            "WHERE o IS NOT NULL) SELECT o FROM owners WHERE o IS NOT NULL")
        return [r[0] for r in rows]

    # --- the lease journal (migration 3) --------------------------------------------------

    def add_lease_event(self, entry: dict) -> None:
        # One round trip: the DELETE sees the rows from before the INSERT (one snapshot), so
        # it keeps CAP - 1 of them besides the new one.
        hid = entry["handoff_id"]
        self.conn.execute(
            f"WITH added AS (INSERT INTO {self.s}.lease_journal ({', '.join(journal.FIELDS)}) "
            f"VALUES ({', '.join(['%s'] * len(journal.FIELDS))})) "
            f"DELETE FROM {self.s}.lease_journal WHERE handoff_id = %s AND id <= (SELECT id "
            f"FROM {self.s}.lease_journal WHERE handoff_id = %s ORDER BY id DESC LIMIT 1 "
            "OFFSET %s)", [*(entry[k] for k in journal.FIELDS), hid, hid, journal.CAP - 1])

    def lease_events(self, handoff_id: str, *, last: int | None = None) -> list[dict]:
        rows = self._all(f"SELECT id, {', '.join(journal.FIELDS)} FROM {{s}}.lease_journal "
                         "WHERE handoff_id = %s ORDER BY id DESC LIMIT %s", (handoff_id, last))
        return [dict(zip(("id", *journal.FIELDS), r, strict=True)) for r in rows][::-1]

    def add_failure(self, entry: dict) -> None:
        # One round trip, as add_lease_event: the DELETE keeps CAP - 1 older records.
        hid = entry["handoff_id"]
        self._execute(
            f"WITH added AS (INSERT INTO {self.s}.failures ({', '.join(failures.FIELDS)}) "
            f"VALUES ({', '.join(['%s'] * len(failures.FIELDS))})) "
            f"DELETE FROM {self.s}.failures WHERE handoff_id = %s AND id <= (SELECT id "
            f"FROM {self.s}.failures WHERE handoff_id = %s ORDER BY id DESC LIMIT 1 "
            "OFFSET %s)", [*(entry[k] for k in failures.FIELDS), hid, hid, failures.CAP - 1])

    def failures(self, handoff_id: str) -> list[dict]:
        rows = self._all(f"SELECT {', '.join(failures.FIELDS)} FROM {{s}}.failures "
                         "WHERE handoff_id = %s ORDER BY id", (handoff_id,))
        return [dict(zip(failures.FIELDS, r, strict=True)) for r in rows]

    def lease_events_after(self, after: int, limit: int) -> list[dict]:
        rows = self._all(f"SELECT id, {', '.join(journal.FIELDS)} FROM {{s}}.lease_journal "
                         "WHERE id > %s ORDER BY id LIMIT %s", (after, limit))
        return [dict(zip(("id", *journal.FIELDS), r, strict=True)) for r in rows]

    # --- the supervisor's storage -------------------------------------------------------
    # Each scan locks what it returns (skipping rows a writer holds), and the lock re-reads
    # the row: a row that no longer matches (recovered since the statement began) is left out.

    def get_leader(self, name: str) -> dict | None:
        # Leadership decisions are serialised like claims of one handoff are (the row may
        # not exist yet, so a row lock cannot do it).
        self._all("SELECT pg_advisory_xact_lock(%s)",
                  (advisory_key(f"leadership {self.s} {name}"),))
        row = self._one("SELECT holder, incarnation, fence, expires_at "
                        "FROM {s}.supervisor_leadership WHERE name = %s", (name,))
        if row is None:
            return None
        return dict(zip(("holder", "incarnation", "fence", "expires_at"), row, strict=True))

    def put_leader(self, name: str, holder: str, incarnation: str | None, fence: int,
                   expires_at: float) -> None:
        self._execute("INSERT INTO {s}.supervisor_leadership "
                      "(name, holder, incarnation, fence, expires_at) VALUES (%s, %s, %s, %s, %s) "
                      "ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, "
                      "incarnation = excluded.incarnation, fence = excluded.fence, "
                      "expires_at = excluded.expires_at",
                      (name, holder, incarnation, fence, expires_at))

    def claimed_by_incarnation(self, token: str, limit: int) -> list[str]:
        return [r[0] for r in self._all(
            "SELECT id FROM {s}.handoffs WHERE state = 'claimed' AND owner_incarnation = %s "
            "ORDER BY seq LIMIT %s FOR UPDATE SKIP LOCKED", (token, limit))]

    def stalled(self, now: float, limit: int) -> list[str]:
        return [r[0] for r in self._all(
            "SELECT id FROM {s}.handoffs WHERE state = 'claimed' "
            "AND progress_timeout_s IS NOT NULL "
            "AND progress_due < %s AND last_progress_at + progress_timeout_s < %s "
            "ORDER BY seq LIMIT %s FOR UPDATE SKIP LOCKED", (now, now, limit))]

    def over_wall_clock(self, now: float, limit: int) -> list[str]:
        return [r[0] for r in self._all(
            "SELECT id FROM {s}.handoffs "
            "WHERE state IN ('claimed', 'released', 'orphaned') AND first_claimed_at IS NOT NULL "
            "AND first_claimed_at + (budget ->> 'max_wall_clock_s')::float8 < %s "
            "ORDER BY seq LIMIT %s FOR UPDATE SKIP LOCKED", (now, limit))]


@contextmanager
def _pipelined_transaction(conn: psycopg.Connection, sync: str,
                           tx: PostgresTx) -> Iterator[psycopg.Pipeline]:
    """BEGIN ... COMMIT in pipeline mode: BEGIN goes out with the first statement and COMMIT
    with the last writes, in one round trip, whose answer is the acknowledgement. (Not
    conn.transaction(): inside a pipeline it syncs after BEGIN, one round trip more.) When
    the transaction left work takeable, its notification goes with the COMMIT: the server
    delivers it at the commit, and never for a rollback."""
    try:
        with conn.pipeline() as pipeline:
            conn.execute("BEGIN")
            if sync == "none":  # a heartbeat: losing one only shortens a lease
                conn.execute("SET LOCAL synchronous_commit = off")
            try:
                yield pipeline
            except BaseException:
                _roll_back(conn)  # sent with the sync at the pipeline's end
                raise
            if tx.announce:
                conn.execute("SELECT pg_notify(%s, '')", (tx.store.doorbell.channel,))
            conn.execute("COMMIT")
        _refuse_unreplicated(conn)
    except BaseException:
        # When a statement failed the server skipped what followed it (the ROLLBACK too):
        # the transaction is open and aborted. End it so the pool gets the connection idle.
        if conn.info.transaction_status in (psycopg.pq.TransactionStatus.INTRANS,
                                            psycopg.pq.TransactionStatus.INERROR):
            _roll_back(conn)
        raise


# A commit whose wait for the synchronous standby was cancelled (the statement timeout, a
# cancel request) is committed on the primary only, and the server says so only in a warning:
# it is not acknowledged, its outcome is unknown (DHP-SRV-012).
_UNREPLICATED = "canceling wait for synchronous replication"


def _watch_replication(conn: psycopg.Connection) -> None:
    """The pool's configure hook: note the server's warning on the connection."""
    conn.dhp_unreplicated = False

    def note(diag: psycopg.errors.Diagnostic) -> None:
        if (diag.message_primary or "").startswith(_UNREPLICATED):
            conn.dhp_unreplicated = True

    conn.add_notice_handler(note)


def _refuse_unreplicated(conn: psycopg.Connection) -> None:
    if getattr(conn, "dhp_unreplicated", False):
        conn.dhp_unreplicated = False
        raise Unavailable("the commit was cancelled while it waited for the synchronous "
                          "standby: it may be on the primary only (outcome unknown)")


def _try_again(pool: ConnectionPool) -> None:
    if not pool.closed:
        pool.check()  # an empty pool grows again: a new connection attempt at once


def _roll_back(conn: psycopg.Connection) -> None:
    try:
        conn.execute("ROLLBACK")
    except psycopg.Error:
        pass  # a broken connection: the server ends its transaction, the pool drops it


class PostgresStore(StoreBackend):
    """A store in schema `schema` of the Postgres database at `url`."""

    def __init__(self, url: str, *, ttl: float = DEFAULT_TTL,
                 heartbeat_interval: float | None = None,
                 clock: Callable[[], float] | None = None, pool_max: int = POOL_MAX,
                 create: bool = True):
        self.url = self.location = url
        self.create = create  # False: a schema without the store's tables is "no store"
        self.conninfo, self.schema = split_location(url)
        self.quoted_schema = f'"{self.schema}"'
        self.ttl = ttl
        self.heartbeat_interval = heartbeat_interval
        self.clock = clock  # tests only: replaces the server's clock
        self.pool_max = pool_max
        self._kwargs = {**CLIENT_KEEPALIVES, "autocommit": True,
                        "application_name": f"dhp {self.schema}", "options": _options({
            "synchronous_commit": "on", "statement_timeout": STATEMENT_TIMEOUT_MS,
            "idle_in_transaction_session_timeout": IDLE_IN_TRANSACTION_MS,
            **SERVER_KEEPALIVES})}
        self._local = threading.local()
        # Leases this process holds, as its last committed write left them (kept_lease).
        self._kept: dict[str, dict] = {}
        self._pool: ConnectionPool | None = None
        self._pid = -1
        self._mutex = threading.Lock()
        self.liveness = PgLiveness(self.conninfo, self._kwargs, self)
        self.doorbell = PgDoorbell(self.conninfo, self._kwargs, channel_for(self.schema))
        self._migrate()

    def __repr__(self) -> str:
        return f"PostgresStore({self.display_url()!r})"

    def display_url(self) -> str:
        """The location without a password."""
        parts = urlsplit(self.url)
        if parts.password:
            host = parts.netloc.rsplit("@", 1)[1]
            parts = parts._replace(netloc=f"{parts.username}:***@{host}")
        return urlunsplit(parts)

    # --- connections ---

    def _pool_here(self) -> ConnectionPool:
        # A pool must not cross fork(): a child makes its own (the parent's sockets are left
        # alone; psycopg does not close a connection inherited across fork).
        with self._mutex:
            if self._pool is None or self._pid != os.getpid():
                self._kept.clear()  # a forked child holds none of its parent's leases
                self._pool = ConnectionPool(self.conninfo, kwargs=self._kwargs, min_size=1,
                                            max_size=self.pool_max, open=True, timeout=POOL_WAIT_S,
                                            name=f"dhp-{self.schema}",
                                            configure=_watch_replication,
                                            reconnect_timeout=RECONNECT_S,
                                            reconnect_failed=_try_again)
                self._pid = os.getpid()
            return self._pool

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection]:
        """A connection of this thread's open transaction, else one from the pool; server
        and pool errors become `unavailable`."""
        current = getattr(self._local, "tx", None)
        if current is not None:
            yield current.conn
            return
        pool = self._pool_here()
        try:
            with pool.connection() as conn:
                yield conn
        except (psycopg.OperationalError, PoolTimeout,
                psycopg.errors.ReadOnlySqlTransaction) as exc:
            # Read-only: this session reached a server that is (now) a standby; another
            # connection finds the primary (target_session_attrs=read-write).
            self._after_failure(pool)
            raise Unavailable(f"store {self.display_url()}: {exc}".strip()) from None
        except psycopg.Error as exc:
            raise Internal(f"store {self.display_url()}: {exc}") from None

    def _after_failure(self, pool: ConnectionPool) -> None:
        # The server may have restarted: drop every broken idle connection now, so the next
        # call gets a working one (or a fresh error) instead of another dead socket.
        try:
            pool.check()
        except Exception:  # noqa: BLE001 (the original error is what the caller sees)
            pass

    def _migrate(self) -> None:
        # A connection of its own, not the pool's: a wrong URL or a server that is down
        # fails here at once with the driver's reason.
        try:
            with psycopg.connect(self.conninfo, **self._kwargs) as conn:
                self._migrate_on(conn)
        except psycopg.Error as exc:
            raise connect_failure(str(exc), self.display_url(),
                                  malformed=isinstance(exc, psycopg.ProgrammingError)) from None

    def _migrate_on(self, conn: psycopg.Connection) -> None:
        version = self._version(conn)
        if version == len(MIGRATIONS):
            return  # a plain read: opening an up-to-date store takes no lock
        if version is None and not self.create:
            raise no_store(self.display_url(), f"schema {self.schema} does not exist or holds "
                           "no DHP tables")
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)",
                         (advisory_key(f"migrate {self.schema}"),))
            s = self.quoted_schema
            conn.execute(f"CREATE SCHEMA IF NOT EXISTS {s}")
            conn.execute(f"CREATE TABLE IF NOT EXISTS {s}.meta "
                         "(key text PRIMARY KEY, value text NOT NULL)")
            version = self._version(conn) or 0
            if version > len(MIGRATIONS):
                raise Unavailable(
                    f"the store {self.display_url()} has schema version {version}; this "
                    f"release reads up to {len(MIGRATIONS)}: upgrade durable-handoff")
            for step in MIGRATIONS[version:]:
                conn.execute(step.replace("{s}", s))  # no parameters: one round trip
            conn.execute(f"INSERT INTO {s}.meta VALUES ('schema_version', %s) "
                         "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                         (str(len(MIGRATIONS)),))

    def _version(self, conn: psycopg.Connection) -> int | None:
        exists = conn.execute("SELECT to_regclass(%s)", (f"{self.quoted_schema}.meta",))
        if exists.fetchone()[0] is None:
            return None
        row = conn.execute(f"SELECT value FROM {self.quoted_schema}.meta "
                           "WHERE key = 'schema_version'").fetchone()
        return int(row[0]) if row else None

    def schema_version(self) -> int:
        with self.connection() as conn:
            return self._version(conn) or 0

    # --- the StoreBackend interface ---

    def now(self) -> float:
        if self.clock is not None:
            return self.clock()
        tx = getattr(self._local, "tx", None)
        if tx is not None and tx.clock_at_lock is not None:
            # Read with the row lock just taken, and no statement ran since: what a query
            # now would return, less one round trip.
            now, tx.clock_at_lock = tx.clock_at_lock, None
            return now
        with self.connection() as conn:
            return conn.execute(f"SELECT {_CLOCK}").fetchone()[0]

    def probed(self, token: str) -> bool | None:
        """Whether the liveness lock of `token` was free, if this thread's transaction
        probed it with a row lock (PostgresTx.get), else None."""
        tx = getattr(self._local, "tx", None)
        return tx.probes.get(token) if tx is not None else None

    def in_transaction_on_this_thread(self) -> bool:
        return getattr(self._local, "tx", None) is not None

    @contextmanager
    def transaction(self, *, write: bool = True, sync: str = "commit") -> Iterator[Tx]:
        if sync not in SYNCS:
            raise Internal(f"unknown sync {sync!r}; expected one of {SYNCS}")
        if self.in_transaction_on_this_thread():
            raise Internal("nested store transaction")
        with self.connection() as conn:
            self._local.tx = tx = PostgresTx(self, conn, write)
            try:
                if not write:
                    yield tx
                    return
                with _pipelined_transaction(conn, sync, tx) as tx.pipeline:
                    yield tx
                self._keep(tx)
            finally:
                self._local.tx = None

    def expect_threads(self, n: int) -> None:
        # Each unit's write holds a connection for one transaction; the rest of POOL_MAX
        # serves the heartbeats, the taker and a supervisor.
        with self._mutex:
            self.pool_max = max(self.pool_max, n + POOL_MAX)
            if self._pool is not None and self._pid == os.getpid():
                self._pool.resize(1, self.pool_max)

    def _keep(self, tx: PostgresTx) -> None:
        """After a commit: keep the leases it left this process holding, drop the rest."""
        with self._mutex:
            for hid, (record, incarnation) in tx.wrote.items():
                link = tx.last_link_known(hid)
                if record["state"] != "claimed" or incarnation is None or link is False:
                    self._kept.pop(hid, None)
                    continue
                if hid not in self._kept and len(self._kept) >= KEPT_CAP:
                    self._kept.pop(next(iter(self._kept)))
                self._kept[hid] = {"record": record, "owner_incarnation": incarnation,
                                   "link": link}

    def kept_lease(self, handoff_id: str) -> dict | None:
        with self._mutex:
            return self._kept.get(handoff_id) if self._pid == os.getpid() else None

    def checkpoint_kept(self, handoff_id: str, kept: dict, record: dict, ttl: float,
                        checkpoint: dict, text: str) -> bool:
        # One round trip: BEGIN, the statement and COMMIT go out together (pipelined).
        old = kept["record"]
        link = kept["link"]
        args = {"id": handoff_id, "owner": old["owner"], "fence": old["fence"],
                "inc": kept["owner_incarnation"], "old_steps": old["steps"],
                "old_spend": old["spend"], "budget": Jsonb(old["budget"]),
                "last_hash": link[1] if link else None, "steps": record["steps"],
                "spend": record["spend"], "ttl": ttl, "seq": checkpoint["seq"],
                "hash": checkpoint["hash"], "text": text,
                "clock": None if self.clock is None else self.clock()}
        stamp = _CLOCK if self.clock is None else "%(clock)s::float8"
        try:
            with self.transaction() as tx:
                cur = tx._execute(_CHECKPOINT_KEPT.replace("{stamp}", stamp), args)
            found = cur.fetchone()
        except BaseException:
            with self._mutex:
                self._kept.pop(handoff_id, None)
            raise
        with self._mutex:
            if found is None:  # the row moved on: the full path reads it
                self._kept.pop(handoff_id, None)
                return False
            now = found[0]
            self._kept[handoff_id] = {
                "record": dict(record, lease_expires_at=now + ttl, last_progress_at=now),
                "owner_incarnation": kept["owner_incarnation"],
                "link": (checkpoint["seq"], checkpoint["hash"])}
        return True

    def announce_work(self) -> None:
        # This process's waiters at once (a signal handler may call this, even inside a
        # transaction of this thread); the other processes' through the server.
        self.doorbell.ring_here()
        if self.in_transaction_on_this_thread():
            return
        try:
            with self.connection() as conn:
                conn.execute("SELECT pg_notify(%s, '')", (self.doorbell.channel,))
        except Unavailable:
            pass  # the others find the work at their next look (IDLE_RECHECK_S)

    def work_waiter(self) -> Waiter:
        return self.doorbell.waiter()

    def storage_check(self) -> list[str]:
        # The server checks its own pages (checksums, WAL); nothing is kept outside it.
        # What can be wrong at this level is the schema itself.
        version = self.schema_version()
        if version != len(MIGRATIONS):
            return [f"schema {self.schema} is at version {version}, expected {len(MIGRATIONS)}"]
        return []

    def close(self) -> None:
        self.doorbell.close()
        with self._mutex:
            if self._pool is not None and self._pid == os.getpid():
                self._pool.close()
            self._pool = None

