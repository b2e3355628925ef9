"""The SQLite store: creation, versioning, durability settings, the store clock, reboots,
integrity checks, claim_next and the O(1) checkpoint path."""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time

import pytest
from dhp import api as dhp
from dhp.core import clock, operations
from dhp.core.errors import BudgetExceeded, IntegrityError, InvalidInput, LeaseLost, Unavailable
from dhp.store import sqlite as sqlite_store

SCHEMA = {"type": "object"}


class TestClock:
    """A store clock the test moves by hand (unit tests of lease expiry only)."""

    __test__ = False

    def __init__(self, now: float = 1000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


def _db(path) -> sqlite3.Connection:
    return sqlite3.connect(path / sqlite_store.DB_FILE)


def test_created_on_first_use_in_wal_mode(tmp_path):
    store = dhp.Store(tmp_path / "new" / "store")
    assert (tmp_path / "new" / "store" / sqlite_store.DB_FILE).is_file()
    assert store.schema_version() == sqlite_store.SCHEMA_VERSION == len(sqlite_store.MIGRATIONS)
    with store.transaction(write=False) as tx:
        assert tx.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        # NORMAL: the fsync of the WAL a commit needs is the store's own (test_store_sync.py)
        assert tx.conn.execute("PRAGMA synchronous").fetchone()[0] == 1
    store.close()
    again = dhp.Store(tmp_path / "new" / "store")  # reopening migrates nothing twice
    assert again.schema_version() == sqlite_store.SCHEMA_VERSION
    again.close()


def test_writes_run_no_pragma_and_rewrite_only_changed_columns(tmp_path):
    store = dhp.Store(tmp_path)
    hid = dhp.dispatch(store, "k", {}, SCHEMA)
    ctx = dhp.claim(store, hid, "w", heartbeat_interval=0)
    seen: list[str] = []
    store._connection().set_trace_callback(seen.append)
    ctx.heartbeat()
    heartbeat = len(seen)
    ctx.checkpoint({"i": 1})
    store._connection().set_trace_callback(None)
    # No setting changes per write: data_version is only read (whether another connection
    # committed since, written_rows.py).
    assert {s for s in seen if s.startswith("PRAGMA")} == {"PRAGMA data_version"}
    # The checkpoint reads no row: the heartbeat just wrote it, and nothing else has since.
    assert [s for s in seen[:heartbeat] if s.startswith("SELECT")]
    assert not [s for s in seen[heartbeat:] if s.startswith("SELECT")]
    updates = [s.split(" WHERE ")[0] for s in seen if s.startswith("UPDATE")]
    assert [[part.split(" = ")[0] for part in u.removeprefix("UPDATE handoffs SET ").split(", ")]
            for u in updates] == [["lease_expires_at", "updated_at"],
                                  ["lease_expires_at", "steps", "last_progress_at",
                                   "chain_seq", "chain_hash", "updated_at"]]  # one UPDATE
    ctx.release()
    row = dhp.status(store, hid)
    assert (row["state"], row["steps"], row["checkpoints"]["count"]) == ("released", 1, 1)


def test_a_column_equal_in_value_but_not_in_type_is_rewritten(tmp_path):
    """put_record skips unchanged columns; 0 and 0.0 compare equal but read back differently,
    so a change of type alone is written too, and a result waiting for the row's UPDATE is
    seen by a read in the same transaction."""
    store = dhp.Store(tmp_path)
    hid = dhp.dispatch(store, "k", {}, SCHEMA)
    with store.transaction() as tx:
        record = tx.get(hid)["record"]
        assert type(record["spend"]) is int
        tx.put_record(hid, dict(record, spend=0.0), None)
        tx.put_result(hid, {"placeholder": True})
        assert tx.get(hid)["result"] == {"placeholder": True}
        tx.put_record(hid, dict(record, spend=0.0, steps=2), None)
    with store.transaction(write=False) as tx:
        row = tx.get(hid)
    assert type(row["record"]["spend"]) is float and row["record"]["steps"] == 2
    assert row["result"] == {"placeholder": True}
    store.close()


@pytest.mark.covers("DHP-LSE-013", "DHP-LSE-014")
def test_newer_schema_version_is_refused(tmp_path):
    dhp.Store(tmp_path).close()
    with _db(tmp_path) as conn:
        conn.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    with pytest.raises(Unavailable, match="schema version 99"):
        dhp.Store(tmp_path)


def test_migrations_apply_in_order(tmp_path, monkeypatch):
    dhp.Store(tmp_path).close()
    step = "ALTER TABLE handoffs ADD COLUMN note TEXT; CREATE INDEX by_note ON handoffs(note)"
    monkeypatch.setattr(sqlite_store, "MIGRATIONS", [*sqlite_store.MIGRATIONS, step])
    store = dhp.Store(tmp_path)
    assert store.schema_version() == len(sqlite_store.MIGRATIONS)
    with store.transaction(write=False) as tx:
        columns = [r[1] for r in tx.conn.execute("PRAGMA table_info(handoffs)")]
    assert "note" in columns
    store.close()


def _schema_at(version: int) -> dict[str, str]:
    """The CREATE statement of each table and index of a store at `version`, as the
    migrations up to it make them."""
    conn = sqlite3.connect(":memory:")
    for step in sqlite_store.MIGRATIONS[:version]:
        conn.executescript(step)
    return dict(conn.execute("SELECT name, sql FROM sqlite_schema WHERE sql IS NOT NULL "
                             "AND name NOT LIKE 'sqlite_%'"))


def _before_7(conn: sqlite3.Connection) -> None:
    """Undo migration 7: handoffs keyed by id again, checkpoints by (handoff_id, seq)."""
    old = _schema_at(6)
    indexes = [name for name, sql in old.items() if sql.startswith("CREATE INDEX")
               and " ON handoffs" in sql]
    conn.executescript("".join(f"DROP INDEX {name};" for name in indexes)
                       + "ALTER TABLE handoffs RENAME TO h7; ALTER TABLE checkpoints RENAME TO c7;"
                       + old["handoffs"] + ";" + old["checkpoints"] + ";")
    columns = ", ".join(row[1] for row in conn.execute("PRAGMA table_info(handoffs)"))
    conn.executescript(
        f"INSERT INTO handoffs (rowid, {columns}) SELECT num, {columns} FROM h7;"
        "INSERT INTO checkpoints SELECT h.id, c.key & 4294967295, c.fence, c.record "
        "FROM c7 c JOIN h7 h ON h.num = c.key >> 32; DROP TABLE c7; DROP TABLE h7;"
        + "".join(old[name] + ";" for name in indexes))


def _as_version(path, version: int) -> None:
    """Make a store written by this release what a release at schema `version` (4 to 9)
    wrote: no chain head columns (migration 10); at 8 and below no failures table (migration
    9); at 7 and below no progress_due column (migration 8); at 6 and below before migration
    7's keys; at 5 and below no lease_due column (migration 6), and at 4 a lease index over
    every row (migration 5)."""
    with _db(path) as conn:
        conn.executescript("ALTER TABLE handoffs DROP COLUMN chain_seq; "
                           "ALTER TABLE handoffs DROP COLUMN chain_hash; "
                           "UPDATE meta SET value = '9' WHERE key = 'schema_version'")
    if version == 9:
        return
    with _db(path) as conn:
        conn.executescript("DROP TABLE failures; "
                           "UPDATE meta SET value = '8' WHERE key = 'schema_version'")
    if version >= 8:
        return
    with _db(path) as conn:
        conn.executescript("DROP INDEX supervisor_by_progress_deadline; "
                           "ALTER TABLE handoffs DROP COLUMN progress_due; "
                           + _schema_at(7)["supervisor_by_progress_deadline"])
        if version <= 6:
            _before_7(conn)
        conn.execute(f"UPDATE meta SET value = '{version}' WHERE key = 'schema_version'")
    if version >= 6:
        return
    where = " WHERE lease_expires_at IS NOT NULL" if version == 5 else ""
    with _db(path) as conn:
        conn.executescript(
            "DROP INDEX handoffs_by_lease; ALTER TABLE handoffs DROP COLUMN lease_due; "
            f"CREATE INDEX handoffs_by_lease ON handoffs(state, lease_expires_at){where}; "
            f"UPDATE meta SET value = '{version}' WHERE key = 'schema_version'")


def _status(store, hid: str) -> dict:
    status = dhp.status(store, hid)
    del status["lease_expires_in"]  # read against the clock
    return status


def _filled(path) -> tuple[list[str], dict]:
    """A store with a completed handoff, a claimed one with checkpoints, a released one and a
    pending one; and what the API reads of each."""
    store = dhp.Store(path)
    ids = [dhp.dispatch(store, "k", {"n": n}, SCHEMA) for n in range(4)]
    with dhp.claim(store, ids[0], "w", heartbeat_interval=0) as ctx:
        ctx.checkpoint({"i": 0})
        ctx.complete({"done": True})
    ctx = dhp.claim(store, ids[1], "w", ttl=0.5, heartbeat_interval=0)
    for i in range(40):  # more than a page of checkpoints
        ctx.checkpoint({"i": i, "pad": "x" * 200})
    with dhp.claim(store, ids[2], "w", heartbeat_interval=0) as ctx:
        ctx.checkpoint({"i": 2})
        ctx.release()
    seen = {hid: (_status(store, hid), dhp.checkpoints(store, hid)) for hid in ids}
    seen["order"] = [row["handoff_id"] for row in dhp.list_handoffs(store)]
    store.close()
    return ids, seen


@pytest.mark.covers("DHP-CKP-008")
def test_a_store_of_schema_6_upgrades_to_integer_checkpoint_keys(tmp_path):
    """Migration 7: every handoff keeps its row number (listing order and cursors), every
    checkpoint its record; the chains verify and grow on, and VACUUM renumbers nothing."""
    ids, seen = _filled(tmp_path)
    _as_version(tmp_path, 6)
    with _db(tmp_path) as conn:
        assert conn.execute("SELECT count(*) FROM checkpoints WHERE handoff_id = ?",
                            (ids[1],)).fetchone()[0] == 40
    store = dhp.Store(tmp_path)
    assert store.schema_version() == sqlite_store.SCHEMA_VERSION
    for hid in ids:
        status, records = seen[hid]
        assert dhp.checkpoints(store, hid) == records
        assert _status(store, hid) == status
    assert [row["handoff_id"] for row in dhp.list_handoffs(store)] == seen["order"]
    assert dhp.check_integrity(store) == []
    store.close()
    with _db(tmp_path) as conn:
        conn.execute("VACUUM")
        assert conn.execute("SELECT key >> 32, count(*) FROM checkpoints GROUP BY 1 "
                            "ORDER BY 1").fetchall() == [(1, 1), (2, 40), (3, 1)]
    store = dhp.Store(tmp_path)
    time.sleep(0.5)  # the claim's lease runs out
    ctx = dhp.recover(store, ids[1], "w2", heartbeat_interval=0)
    assert ctx.last_checkpoint == {"i": 39, "pad": "x" * 200}
    assert ctx.checkpoint({"i": 40})["seq"] == 41
    assert dhp.check_integrity(store) == []
    store.close()


def test_a_store_whose_checkpoints_migration_7_cannot_key_is_refused_unchanged(tmp_path):
    ids, _ = _filled(tmp_path)
    _as_version(tmp_path, 6)
    with _db(tmp_path) as conn:  # a checkpoint whose handoff is gone: the store was edited
        conn.execute("UPDATE checkpoints SET handoff_id = 'sha256:' || hex(zeroblob(32)) "
                     "WHERE handoff_id = ? AND seq = 40", (ids[1],))
    with pytest.raises(Unavailable, match="1 checkpoints have no handoff.*the store is "
                                          "unchanged"):
        dhp.Store(tmp_path)
    with _db(tmp_path) as conn:
        assert conn.execute("SELECT value FROM meta WHERE key = 'schema_version'"
                            ).fetchone() == ("6",)
        assert conn.execute("SELECT count(*) FROM checkpoints").fetchone() == (42,)


def test_the_integer_keys_limits_are_refused_with_what_was_passed(tmp_path):
    """Migration 7's key holds 2^32 - 1 checkpoints per handoff and 2^31 - 1 handoffs; past
    either, the write is refused, naming the limit, and nothing is stored."""
    store = dhp.Store(tmp_path)
    hid = dhp.dispatch(store, "k", {}, SCHEMA)
    ctx = dhp.claim(store, hid, "w", heartbeat_interval=0)
    last = ctx.checkpoint({"i": 1})
    with _db(tmp_path) as conn:  # as if the handoff had written 2^32 - 1 checkpoints
        conn.execute("UPDATE checkpoints SET key = key + 4294967294")
    assert ctx.checkpoint  # the context is still live
    with pytest.raises(InvalidInput, match="at most 4,294,967,295 checkpoints per handoff"):
        ctx.checkpoint({"i": 2})
    assert dhp.status(store, hid)["steps"] == 1
    with _db(tmp_path) as conn:
        assert conn.execute("SELECT key & 4294967295, json_extract(record, '$.hash') "
                            "FROM checkpoints").fetchall() == [(4294967295, last["hash"])]
        conn.execute("UPDATE handoffs SET num = 2147483647")
    with pytest.raises(Unavailable, match="at most 2,147,483,647 handoffs"):
        dhp.dispatch(store, "k", {"one": "too many"}, SCHEMA)
    assert [row["handoff_id"] for row in dhp.list_handoffs(store)] == [hid]
    store.close()


def test_a_store_of_schema_4_upgrades_to_the_partial_lease_index(tmp_path):
    """Migrations 5 and 6: a claimed handoff of a store written at version 4 keeps being
    found by the lease scan, and a dispatch no longer puts its row in the lease index."""
    old = dhp.Store(tmp_path)
    hid = dhp.dispatch(old, "k", {}, SCHEMA)
    operations.take(old, hid, "claim", "w", 0.01)
    old.close()
    _as_version(tmp_path, 4)
    store = dhp.Store(tmp_path)
    assert store.schema_version() == len(sqlite_store.MIGRATIONS)
    dhp.dispatch(store, "k", {"second": True}, SCHEMA)
    time.sleep(0.02)
    with store.transaction(write=False) as tx:
        assert [r["handoff_id"] for r in tx.select(expired_before=store.now())] == [hid]
        indexed = tx.conn.execute("SELECT count(*) FROM handoffs INDEXED BY handoffs_by_lease "
                                  "WHERE lease_due IS NOT NULL").fetchone()[0]
    assert indexed == 1  # the claimed row, not the pending one
    ctx = dhp.claim_next(store, ["k"], "w2", heartbeat_interval=0)
    assert ctx.handoff_id == hid  # the expired claim, the oldest takeable
    ctx.release()
    store.close()


def _lease_columns(store, hid: str) -> tuple:
    with store.transaction(write=False) as tx:
        return tx.conn.execute("SELECT lease_expires_at, lease_due FROM handoffs WHERE id = ?",
                               (hid,)).fetchone()


def test_a_store_of_schema_5_upgrades_to_the_lease_due_index(tmp_path):
    """Migration 6: the lease index keys on lease_due, filled from the lease of every row a
    store at version 5 holds, so its expired claims are still found."""
    tick = TestClock(100.0)
    old = dhp.Store(tmp_path, clock=tick)
    expired, live = (dhp.dispatch(old, "k", {"n": n}, SCHEMA) for n in range(2))
    operations.take(old, expired, "claim", "w", 1.0)
    operations.take(old, live, "claim", "w", 60.0)
    old.close()
    _as_version(tmp_path, 5)
    tick.now = 102.0
    store = dhp.Store(tmp_path, clock=tick)
    assert store.schema_version() == sqlite_store.SCHEMA_VERSION
    assert _lease_columns(store, expired) == (101.0, 101.0)
    with store.transaction(write=False) as tx:
        assert [r["handoff_id"] for r in tx.select(expired_before=tick.now)] == [expired]
    assert dhp.claim_next(store, ["k"], "w2", heartbeat_interval=0).handoff_id == expired
    store.close()


def test_checkpoints_move_the_lease_index_once_per_half_ttl(tmp_path):
    """A checkpoint extends the lease; its key in the lease index (lease_due, a lower bound of
    the lease) moves only once the lease has run half its time past it, so a burst of
    checkpoints rewrites no index page, and an expired lease is always found."""
    tick = TestClock(100.0)
    store = dhp.Store(tmp_path, clock=tick)
    hid = dhp.dispatch(store, "k", {}, SCHEMA)
    ctx = dhp.claim(store, hid, "w", ttl=10.0, heartbeat_interval=0)
    assert _lease_columns(store, hid) == (110.0, 110.0)
    tick.now = 101.0
    ctx.checkpoint({"i": 1})
    assert _lease_columns(store, hid) == (111.0, 110.0)  # 110 is still >= 101 + 10/2
    tick.now = 105.5
    ctx.checkpoint({"i": 2})
    assert _lease_columns(store, hid) == (115.5, 115.5)  # 110 < 105.5 + 5: moved
    tick.now = 115.0
    with store.transaction(write=False) as tx:
        assert tx.select(expired_before=tick.now) == []  # lease_due passed, the lease not
    assert dhp.claim_next(store, ["k"], "w2", heartbeat_interval=0) is None
    tick.now = 115.5  # the expiry instant: expired (DHP-LSE-002)
    with store.transaction(write=False) as tx:
        assert [r["handoff_id"] for r in tx.select(expired_before=tick.now)] == [hid]
    store.close()


def test_a_store_of_schema_7_upgrades_to_the_progress_due_index(tmp_path):
    """Migration 8: the progress deadline's index keys on progress_due, filled from the
    deadline of every row a store at version 7 holds, so its stalled handoffs are found."""
    tick = TestClock(100.0)
    old = dhp.Store(tmp_path, clock=tick)
    stalled, busy, untimed = (dhp.dispatch(old, "k", {"n": n}, SCHEMA, progress_timeout_s=t)
                              for n, t in enumerate((1.0, 60.0, None)))
    for hid in (stalled, busy, untimed):
        operations.take(old, hid, "claim", "w", 600.0)
    old.close()
    _as_version(tmp_path, 7)
    tick.now = 102.0
    store = dhp.Store(tmp_path, clock=tick)
    assert store.schema_version() == sqlite_store.SCHEMA_VERSION
    with store.transaction(write=False) as tx:
        assert tx.conn.execute("SELECT progress_due FROM handoffs ORDER BY num").fetchall() \
            == [(101.0,), (160.0,), (None,)]
        assert tx.stalled(tick.now, 10) == [stalled]
    store.close()


def test_checkpoints_move_the_progress_index_once_per_half_timeout(tmp_path):
    """A checkpoint moves the progress deadline; its key in the supervisor's index
    (progress_due, a lower bound of it) moves only once half the time to the deadline has
    passed it, and a stalled handoff is always found, at the instant after its deadline."""
    tick = TestClock(100.0)
    store = dhp.Store(tmp_path, clock=tick)
    hid = dhp.dispatch(store, "k", {}, SCHEMA, progress_timeout_s=10.0)
    ctx = dhp.claim(store, hid, "w", ttl=60.0, heartbeat_interval=0)

    def columns():
        with store.transaction(write=False) as tx:
            return tx.conn.execute("SELECT last_progress_at + progress_timeout_s, "
                                   "progress_due FROM handoffs").fetchone()

    assert columns() == (110.0, 110.0)
    tick.now = 101.0
    ctx.checkpoint({"i": 1})
    assert columns() == (111.0, 110.0)  # 110 is still >= 101 + 10/2
    tick.now = 108.0
    ctx.heartbeat()  # no progress, the deadline stays; 110 is still >= 108 + 3/2
    assert columns() == (111.0, 110.0)
    tick.now = 109.5
    ctx.heartbeat()  # 110 < 109.5 + 1.5/2: the key is pulled up to the deadline
    assert columns() == (111.0, 111.0)
    tick.now = 111.0
    with store.transaction(write=False) as tx:
        assert tx.stalled(tick.now, 10) == []  # the deadline instant: not past it yet
    tick.now = 111.5
    with store.transaction(write=False) as tx:
        assert tx.stalled(tick.now, 10) == [hid]
    store.close()


def test_the_expired_lease_scan_agrees_with_the_leases(tmp_path):
    """Whatever the writes, ttls and clock steps, the scans that use the lease index find
    exactly the claimed rows whose lease_expires_at has passed, and the supervisor's scan of
    the progress index exactly those whose progress deadline has passed."""
    rng = random.Random(7)
    tick = TestClock(100.0)
    store = dhp.Store(tmp_path, clock=tick)
    hids = [dhp.dispatch(store, "k", {"n": n}, SCHEMA,
                         progress_timeout_s=rng.choice([None, 1.0, 4.0])) for n in range(12)]
    leases: dict[str, tuple[str, int]] = {}
    for _ in range(400):
        hid = rng.choice(hids)
        try:
            if hid in leases and rng.random() < 0.8:
                worker, fence = leases[hid]
                name = rng.choice(["checkpoint", "heartbeat", "checkpoint", "release"])
                operations.write(store, hid, name, worker, fence, ttl=rng.choice([0.5, 3, 20]),
                                 state={"x": 1} if name == "checkpoint" else None)
                if name == "release":
                    del leases[hid]
            else:
                row = operations.take(store, hid, "recover" if hid in leases else "claim",
                                      "w", rng.choice([0.5, 3, 20]))
                leases[hid] = ("w", row["record"]["fence"])
        except (LeaseLost, dhp.Conflict):
            leases.pop(hid, None)
        tick.now += rng.choice([0.0, 0.1, 0.4, 1.0, 2.5])
        with store.transaction(write=False) as tx:
            expected = sorted(
                r["handoff_id"] for r in tx.select(states=("claimed",))
                if r["record"]["lease_expires_at"] <= tick.now)
            assert sorted(r["handoff_id"] for r in tx.select(expired_before=tick.now)) == \
                expected
            due = tx.conn.execute("SELECT count(*) FROM handoffs WHERE lease_due IS NOT "
                                  "lease_expires_at AND NOT lease_due < lease_expires_at"
                                  ).fetchone()[0]
            assert due == 0  # lease_due is null with the lease, else at most the lease
            stalled = sorted(
                r["handoff_id"] for r in tx.select(states=("claimed",))
                if r["record"]["progress_timeout_s"] is not None
                and r["record"]["last_progress_at"] + r["record"]["progress_timeout_s"]
                < tick.now)
            assert sorted(tx.stalled(tick.now, 100)) == stalled
            due = tx.conn.execute("SELECT count(*) FROM handoffs WHERE progress_due IS NOT "
                                  "last_progress_at + progress_timeout_s AND NOT progress_due "
                                  "< last_progress_at + progress_timeout_s").fetchone()[0]
            assert due == 0
    store.close()


def test_store_locations(tmp_path):
    with pytest.raises(InvalidInput, match="unknown store location"):
        dhp.Store("redis://localhost")
    (tmp_path / "file").write_text("x")
    with pytest.raises(InvalidInput, match="not a folder"):
        dhp.Store(tmp_path / "file")
    with pytest.raises(InvalidInput, match="shorter than the ttl"):
        dhp.Store(tmp_path / "s", ttl=1.0, heartbeat_interval=1.0)


@pytest.mark.covers("DHP-LSE-001", "DHP-LSE-002", "DHP-LSE-003")
def test_lease_expiry_on_the_store_clock(tmp_path):
    tick = TestClock(1000.0)
    store = dhp.Store(tmp_path, clock=tick)
    hid = dhp.dispatch(store, "k", {}, SCHEMA)
    row = operations.take(store, hid, "claim", "w1", 5.0)
    fence = row["record"]["fence"]
    tick.now = 1004.999
    assert dhp.status(store, hid)["state"] == "claimed"
    operations.write(store, hid, "heartbeat", "w1", fence, ttl=5.0)  # extends to 1009.999
    tick.now = 1009.999  # the exact expiry instant is expired
    assert dhp.status(store, hid)["state"] == "orphaned"
    assert dhp.list_handoffs(store, state="orphaned")[0]["handoff_id"] == hid
    assert dhp.list_handoffs(store, state="claimed") == []
    with pytest.raises(LeaseLost, match="expired"):
        operations.write(store, hid, "checkpoint", "w1", fence, ttl=5.0, state={})
    row = operations.take(store, hid, "claim", "w2", 5.0)
    assert row["record"]["fence"] == fence + 1


@pytest.mark.covers("DHP-LSE-006", "DHP-LSE-012")
def test_wall_clock_step_moves_no_lease(tmp_path, monkeypatch):
    assert clock._CLOCK_ID in (getattr(time, "CLOCK_BOOTTIME", None), time.CLOCK_MONOTONIC)
    store = dhp.Store(tmp_path)
    hid = dhp.dispatch(store, "k", {}, SCHEMA)
    ctx = dhp.claim(store, hid, "w", ttl=5.0)
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + 86400.0)  # the date jumps a day ahead
    assert 4.0 < dhp.status(store, hid)["lease_expires_in"] <= 5.0
    ctx.checkpoint({"ok": True})
    monkeypatch.setattr(time, "time", lambda: real() - 86400.0)  # and a day back
    assert 4.0 < dhp.status(store, hid)["lease_expires_in"] <= 5.0
    ctx.release()


@pytest.mark.covers("DHP-LSE-008")
def test_reboot_expires_every_lease(tmp_path):
    tick = TestClock(5000.0)
    store = dhp.Store(tmp_path, clock=tick)
    hid = dhp.dispatch(store, "k", {}, SCHEMA, budget={"max_wall_clock_s": 100})
    operations.take(store, hid, "claim", "w1", 60.0)
    tick.now = 5030.0
    operations.write(store, hid, "checkpoint", "w1", 1, ttl=60.0, state={"i": 1})
    other = dhp.dispatch(store, "k", {"n": 2}, SCHEMA)
    store.close()
    with _db(tmp_path) as conn:
        conn.execute("UPDATE meta SET value = 'an-earlier-boot' WHERE key = 'boot_id'")
    tick.now = 12.0  # the boot clock restarted near zero
    store = dhp.Store(tmp_path, clock=tick)
    status = dhp.status(store, hid)
    assert (status["state"], status["owner"], status["fence"]) == ("orphaned", None, 1)
    assert dhp.status(store, other)["state"] == "pending"
    with store.transaction(write=False) as tx:
        record = tx.get(hid)["record"]
        assert tx.conn.execute("SELECT value FROM meta WHERE key='boot_id'").fetchone()[0] \
            == clock.boot_id()
    assert record["first_claimed_at"] == pytest.approx(12.0 - 30.0)  # 30 s used before
    row = operations.take(store, hid, "recover", "w2", 5.0)
    assert row["record"]["fence"] == 2 and row["last_checkpoint"]["state"] == {"i": 1}
    store.close()


@pytest.mark.covers("DHP-CKP-008")
def test_integrity_check_finds_a_changed_checkpoint(tmp_path):
    store = dhp.Store(tmp_path)
    hid = dhp.dispatch(store, "k", {}, SCHEMA)
    with dhp.claim(store, hid, "w") as ctx:
        for i in range(3):
            ctx.checkpoint({"i": i})
        ctx.complete({"done": True})
    assert dhp.check_integrity(store) == []
    store.close()
    with _db(tmp_path) as conn:
        seq_2 = "key & 4294967295 = 2"
        raw = conn.execute(f"SELECT record FROM checkpoints WHERE {seq_2}").fetchone()[0]
        changed = json.loads(raw)
        changed["state"] = {"i": 99}
        conn.execute(f"UPDATE checkpoints SET record = ? WHERE {seq_2}", (json.dumps(changed),))
    store = dhp.Store(tmp_path)
    problems = dhp.check_integrity(store)
    assert len(problems) == 1 and hid in problems[0] and "integrity_error" in problems[0]
    store.close()


def test_the_checkpoint_path_reads_rows_by_key_and_never_scans(tmp_path):
    """A checkpoint write costs O(1) in the history: its reads of the chain (the row with its
    last link, the last record) are key lookups, never a scan; the takes and the lease scan
    use their indexes."""
    store = dhp.Store(tmp_path)
    hid = dhp.dispatch(store, "k", {}, SCHEMA)
    with dhp.claim(store, hid, "w", heartbeat_interval=0) as ctx:
        ctx.checkpoint({"i": 1})
    seen: list[str] = []
    with store.transaction(write=False) as tx:
        tx.conn.set_trace_callback(seen.append)
        tx.last_link(hid)  # before get, which reads the link with the row
        tx.get(hid, envelope=False)
        tx.last_checkpoint(hid)
        tx.checkpoint_hash(hid, 1)
        tx.conn.set_trace_callback(None)
        plans = [" ".join(str(r[-1]) for r in tx.conn.execute(f"EXPLAIN QUERY PLAN {sql}"))
                 for sql in seen if sql.startswith("SELECT")]
        claim_plan = " ".join(str(r[-1]) for r in tx.conn.execute(
            "EXPLAIN QUERY PLAN SELECT id FROM handoffs WHERE state IN ('pending') "
            "AND task_kind IN ('k') ORDER BY rowid LIMIT 1"))
        scan_plan = " ".join(str(r[-1]) for r in tx.conn.execute(
            "EXPLAIN QUERY PLAN SELECT id FROM handoffs WHERE state = 'claimed' "
            "AND lease_due <= 5 AND lease_expires_at <= 5"))
    assert len(plans) == 4
    for plan in plans:
        assert "SCAN" not in plan and "INTEGER PRIMARY KEY" in plan, plan
    assert "handoffs_by_kind" in claim_plan
    assert "handoffs_by_lease" in scan_plan
    store.close()


@pytest.mark.covers("DHP-STM-009", "DHP-STM-011", "DHP-STM-012", "DHP-STM-013")
def test_claim_next_takes_the_oldest_of_the_kinds(tmp_path):
    tick = TestClock(100.0)
    store = dhp.Store(tmp_path, clock=tick)
    assert dhp.claim_next(store, ["a"], "w") is None
    exhausted = dhp.dispatch(store, "a", {"n": 0}, SCHEMA, budget={"max_attempts": 1})
    operations.take(store, exhausted, "claim", "w0", 1.0)
    operations.write(store, exhausted, "release", "w0", 1)
    other_kind = dhp.dispatch(store, "b", {"n": 1}, SCHEMA)
    first = dhp.dispatch(store, "a", {"n": 2}, SCHEMA)
    second = dhp.dispatch(store, "a", {"n": 3}, SCHEMA)
    ctx = dhp.claim_next(store, ["a"], "w1", ttl=10.0)
    # the exhausted one was dead-lettered on the way, not handed out
    assert ctx.handoff_id == first
    assert dhp.status(store, exhausted)["state"] == "dead_lettered"
    ctx2 = dhp.claim_next(store, "a", "w2", ttl=10.0)
    assert ctx2.handoff_id == second
    assert dhp.claim_next(store, ["a"], "w3") is None
    tick.now = 110.0  # both leases expired: the older dispatch goes first, as orphaned
    ctx3 = dhp.claim_next(store, ["a"], "w3", ttl=10.0)
    assert (ctx3.handoff_id, ctx3.fence) == (first, 2)
    late = dhp.dispatch(store, "a", {"n": 4}, SCHEMA)
    ctx4 = dhp.claim_next(store, ["a"], "w4", ttl=10.0)
    assert (ctx4.handoff_id, ctx4.fence) == (second, 2)  # an expired lease before newer work
    assert dhp.claim_next(store, ["a"], "w5", ttl=10.0).handoff_id == late
    assert dhp.status(store, other_kind)["state"] == "pending"
    for c in (ctx, ctx2, ctx3, ctx4):
        c._finish()
    for bad in ([], ["a", 7]):
        with pytest.raises(InvalidInput) as caught:
            dhp.claim_next(store, bad, "w")
        assert caught.value.requirement == "DHP-STM-012"
    store.close()


@pytest.mark.covers("DHP-LSE-012")
def test_every_process_reads_the_same_store_clock():
    """DHP-LSE-012 (a): another process's reading falls between two readings of this one."""
    before = clock.store_clock()
    child = subprocess.run([sys.executable, "-c", "from dhp.core import clock; "
                            "print(repr(clock.store_clock()))"], capture_output=True, text=True,
                           timeout=60, check=True)
    after = clock.store_clock()
    assert before <= float(child.stdout) <= after


HOLDER = """
import os, sys, threading, time
from pathlib import Path
from dhp import api
store = api.Store(sys.argv[1])
token = store.liveness.token()
lock = next(p for p in Path(sys.argv[1]).rglob("*") if p.name.startswith(token))
# Ordinary work must not release the lock (DHP-LSE-011 c): another descriptor of the same
# file opened and closed (which drops a POSIX fcntl record lock), a thread started.
os.close(os.open(lock, os.O_RDONLY))
threading.Thread(target=time.sleep, args=(0.1,)).start()
print(token, flush=True)
time.sleep(600)
"""


@pytest.mark.covers("DHP-LSE-011", "DHP-LSE-005")
def test_liveness_lock_is_held_for_life_and_free_at_death(tmp_path):
    """The embedded store's liveness lock has the properties of DHP-LSE-011: held while the
    process lives, through its ordinary work; probed without waiting; free once it is
    killed."""
    store = dhp.Store(tmp_path)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path)],
                              stdout=subprocess.PIPE, text=True)
    try:
        token = holder.stdout.readline().strip()
        assert token, "the holder printed no token"
        assert store.liveness.owner_dead(token) is False  # returns at once: held
        assert store.liveness.owner_dead(token) is False  # a probe does not take it over
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(timeout=30)
        assert store.liveness.owner_dead(token) is True
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
        store.close()


@pytest.mark.covers("DHP-BUD-004", "DHP-BUD-005")
def test_wall_clock_budget_on_the_store_clock(tmp_path):
    tick = TestClock(0.0)
    store = dhp.Store(tmp_path, clock=tick)
    hid = dhp.dispatch(store, "k", {}, SCHEMA, budget={"max_wall_clock_s": 10})
    operations.take(store, hid, "claim", "w", 100.0)
    tick.now = 10.0
    operations.write(store, hid, "checkpoint", "w", 1, ttl=100.0, state={"at": 10})
    tick.now = 10.5
    with pytest.raises(BudgetExceeded) as caught:
        operations.write(store, hid, "checkpoint", "w", 1, ttl=100.0, state={"at": 10.5})
    assert caught.value.requirement == "DHP-BUD-004"
    status = dhp.status(store, hid)
    assert status["state"] == "dead_lettered" and status["dlq_reason"].startswith(
        "max_wall_clock_s")
    assert status["checkpoints"]["count"] == 1
    store.close()


def test_owner_incarnations_seeks_each_owner_once(tmp_path):
    """The supervisor's list of owners to probe: the distinct owners of claimed handoffs,
    found by one seek of the partial index per owner, never by reading every claimed row."""
    store = dhp.Store(tmp_path)
    rng = random.Random(3)
    dhp.dispatch_many(store, [{"task_kind": "k", "inputs": {"n": n}, "output_schema": SCHEMA}
                              for n in range(300)])
    owners = [f"{n:032x}" for n in range(5)]
    with _db(tmp_path) as conn:
        for num in range(1, 301):
            state = rng.choice(["claimed", "claimed", "released", "pending"])
            conn.execute("UPDATE handoffs SET state = ?, owner_incarnation = ? WHERE num = ?",
                         (state, rng.choice([*owners, None]), num))
        expected = {r[0] for r in conn.execute(
            "SELECT DISTINCT owner_incarnation FROM handoffs WHERE state = 'claimed' "
            "AND owner_incarnation IS NOT NULL")}
    seen: list[str] = []
    with store.transaction(write=False) as tx:
        tx.conn.set_trace_callback(seen.append)
        found = tx.owner_incarnations()
        tx.conn.set_trace_callback(None)
        plan = " ".join(str(r[-1]) for r in tx.conn.execute(f"EXPLAIN QUERY PLAN {seen[0]}"))
    assert sorted(found) == sorted(expected) and len(found) == len(set(found)) > 2
    assert "SCAN handoffs" not in plan and "supervisor_by_incarnation" in plan
    with _db(tmp_path) as conn:
        conn.execute("UPDATE handoffs SET state = 'released'")
    with store.transaction(write=False) as tx:
        assert tx.owner_incarnations() == []
    store.close()


def test_a_store_of_schema_8_upgrades_to_failure_records(tmp_path):
    """Migration 9: a new table; every handoff, checkpoint and status of a store at version 8
    is kept, each status now with no failure, and a failed attempt is then recorded."""
    ids, seen = _filled(tmp_path)
    _as_version(tmp_path, 8)
    store = dhp.Store(tmp_path)
    assert store.schema_version() == sqlite_store.SCHEMA_VERSION
    for hid in ids:
        assert _status(store, hid) == dict(seen[hid][0], failures=[])
        assert dhp.checkpoints(store, hid) == seen[hid][1]
    assert [row["handoff_id"] for row in dhp.list_handoffs(store)] == seen["order"]
    ctx = dhp.claim(store, ids[3], "w", heartbeat_interval=0)
    ctx.release(failure={"type": "E", "message": "after the upgrade"})
    assert [f["message"] for f in dhp.status(store, ids[3])["failures"]] == ["after the upgrade"]
    assert dhp.check_integrity(store) == []
    store.close()


@pytest.mark.covers("DHP-SEC-010")
def test_a_store_of_schema_8_gets_the_chain_heads_of_its_handoffs(tmp_path):
    """Migration 10 fills each handoff's chain head from its stored chain, so a rollback of
    checkpoints made before the upgrade is refused too, and intact work resumes."""
    ids, seen = _filled(tmp_path)
    _as_version(tmp_path, 8)
    store = dhp.Store(tmp_path)
    assert store.schema_version() == sqlite_store.SCHEMA_VERSION
    with store.transaction(write=False) as tx:
        assert [tx.chain_head(hid) and tx.chain_head(hid)[0] for hid in ids] == [1, 40, 1, None]
    assert dhp.checkpoints(store, ids[2]) == seen[ids[2]][1]
    with _db(tmp_path) as conn:
        conn.execute("DELETE FROM checkpoints WHERE key = ((SELECT num FROM handoffs "
                     "WHERE id = ?) << 32) + 40", (ids[1],))
    time.sleep(0.5)  # the claim's lease runs out
    with pytest.raises(IntegrityError, match="rolled back"):
        dhp.recover(store, ids[1], "w2", heartbeat_interval=0)
    with dhp.claim(store, ids[2], "w2", heartbeat_interval=0) as ctx:
        assert ctx.last_checkpoint == {"i": 2}
        ctx.complete({"done": True})
    store.close()
