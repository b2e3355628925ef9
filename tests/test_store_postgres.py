"""What only the Postgres store has: its URL, migrations under an advisory lock, row locks
(writers of different handoffs never wait for each other), SKIP LOCKED claims, the server's
clock, reconnection after the server drops every session, and its session advisory liveness
lock. Everything the stores share is proved by the tests parametrised over both backends."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from dhp import api as dhp
from dhp.core import clock as host_clock
from dhp.core import operations
from dhp.core.errors import Conflict, InvalidInput, LeaseLost, Unavailable

pytestmark = pytest.mark.usefixtures("postgres_schemas")
psycopg = pytest.importorskip("psycopg", reason="the postgres extra (psycopg) is not installed")
from dhp.store import postgres as pg  # noqa: E402 (needs psycopg)
from dhp.store.pg_liveness import process_lock  # noqa: E402

HERE = Path(__file__).resolve().parent
WORKER = HERE / "chaos_worker.py"


class ManualClock:
    __test__ = False

    def __init__(self, now: float = 1000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def url(postgres_schemas) -> str:
    return postgres_schemas.location()


def sql(query: str, *args):
    from backends import PG_URL

    with psycopg.connect(PG_URL, autocommit=True) as conn:
        cur = conn.execute(query, args or None)
        return cur.fetchall() if cur.description else []


def test_location_url_and_schema(url, postgres_schemas):
    store = dhp.Store(url)
    assert store.schema == url.rsplit("schema=", 1)[1]
    assert store.schema_version() == pg.SCHEMA_VERSION
    assert dhp.check_integrity(store) == []
    store.close()
    assert pg.split_location("postgresql://u:pw@h:5/db?sslmode=disable&schema=s1") == \
        ("postgresql://u:pw@h:5/db?sslmode=disable", "s1")
    assert pg.split_location("postgres://h/db")[1] == "dhp"
    with pytest.raises(InvalidInput, match="lower-case SQL identifier"):
        dhp.Store(postgres_schemas.url_for('x"; DROP TABLE y; --'))
    masked = pg.PostgresStore.display_url(type("S", (), {"url": "postgresql://u:secret@h/db"}))
    assert masked == "postgresql://u:***@h/db"
    with pytest.raises(Unavailable):  # nothing listens there: a clear, retryable error
        dhp.Store("postgresql://postgres@127.0.0.1:1/test?connect_timeout=2")


@pytest.mark.covers("DHP-SRV-010")
def test_concurrent_openers_migrate_exactly_once(url, monkeypatch):
    """Eight stores opened at once on a schema at an older version: the one migration step
    runs once (it counts its own runs), every opener ends at the new version."""
    dhp.Store(url).close()
    step = ("CREATE TABLE {s}.migration_runs (n integer); "
            "INSERT INTO {s}.migration_runs VALUES (1)")
    monkeypatch.setattr(pg, "MIGRATIONS", [*pg.MIGRATIONS, step])
    stores, errors = [], []
    start = threading.Barrier(8)

    def open_one():
        start.wait()
        try:
            stores.append(dhp.Store(url))
        except Exception as exc:  # noqa: BLE001 (reported below)
            errors.append(exc)

    threads = [threading.Thread(target=open_one) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    schema = stores[0].schema
    assert sql(f'SELECT count(*) FROM "{schema}".migration_runs') == [(1,)]
    assert {s.schema_version() for s in stores} == {len(pg.MIGRATIONS)}
    for s in stores:
        s.close()
    sql(f"UPDATE \"{schema}\".meta SET value = '100' WHERE key = 'schema_version'")
    with pytest.raises(Unavailable, match="schema version 100"):  # a newer release's
        dhp.Store(url)


def _as_version_3(s: str) -> None:
    """Undo migrations 6 (lower-bound keys, fillfactor), 5 (chain heads) and 4 (failure
    records): the schema `s` (quoted) as version 3 wrote it."""
    sql(f"DROP INDEX {s}.handoffs_by_lease; DROP INDEX {s}.handoffs_by_progress_deadline; "
        f"DROP INDEX {s}.handoffs_partly_done; "
        f"ALTER TABLE {s}.handoffs DROP COLUMN lease_due, DROP COLUMN progress_due, "
        "DROP COLUMN chain_seq, DROP COLUMN chain_hash, RESET (fillfactor); "
        f"DROP TABLE {s}.failures; "
        f"CREATE INDEX handoffs_by_lease ON {s}.handoffs (lease_expires_at) "
        "WHERE state = 'claimed'; "
        f"CREATE INDEX handoffs_by_progress_deadline ON {s}.handoffs "
        "((last_progress_at + progress_timeout_s)) "
        "WHERE state = 'claimed' AND progress_timeout_s IS NOT NULL; "
        f"UPDATE {s}.meta SET value = '3' WHERE key = 'schema_version'")


def test_a_store_of_schema_3_upgrades_to_the_lower_bound_deadline_keys(url):
    """Migration 6 (with 4 and 5) on a store as version 3 wrote it (no lease_due or
    progress_due, the lease and progress indexes on the deadlines themselves): every row and
    checkpoint is kept, the keys start at the deadlines, the scans for passed deadlines find
    the same handoffs through the new indexes, and partly done work has an index of its own."""
    clock = ManualClock()
    store = pg.PostgresStore(url, clock=clock)
    hids = [dhp.dispatch(store, "m4", {"i": i}, {}, progress_timeout_s=30) for i in range(4)]
    for i, hid in enumerate(hids[:3]):
        ctx = dhp.claim(store, hid, f"w{i}", ttl=10, heartbeat_interval=0)
        ctx.checkpoint({"n": i})
    store.close()
    s = f'"{store.schema}"'
    _as_version_3(s)
    before = sql(f"SELECT * FROM {s}.handoffs ORDER BY seq")
    checkpoints = sql(f"SELECT * FROM {s}.checkpoints ORDER BY handoff_id, seq")
    store = pg.PostgresStore(url, clock=clock)
    assert store.schema_version() == pg.SCHEMA_VERSION == 6
    after = sql(f"SELECT * FROM {s}.handoffs ORDER BY seq")
    assert [row[:-4] for row in after] == before  # + chain_seq, chain_hash, the two keys
    assert sql(f"SELECT lease_due, progress_due FROM {s}.handoffs ORDER BY seq") == sql(
        f"SELECT lease_expires_at, last_progress_at + progress_timeout_s FROM {s}.handoffs "
        "ORDER BY seq")
    assert sql(f"SELECT * FROM {s}.checkpoints ORDER BY handoff_id, seq") == checkpoints
    assert "lease_due" in sql("SELECT indexdef FROM pg_indexes WHERE schemaname = %s "
                              "AND indexname = 'handoffs_by_lease'", store.schema)[0][0]
    assert sql("SELECT count(*) FROM pg_indexes WHERE schemaname = %s "
               "AND indexname = 'handoffs_partly_done'", store.schema) == [(1,)]
    with store.transaction() as tx:
        assert [r["handoff_id"] for r in tx.select(expired_before=clock.now + 10)] == hids[:3]
        assert tx.stalled(clock.now + 31, 10) == hids[:3]
        assert tx.stalled(clock.now + 29, 10) == []
    clock.now += 11  # every lease has expired: claim_next takes the oldest one first
    assert dhp.claim_next(store, "m4", "w9", heartbeat_interval=0).handoff_id == hids[0]
    store.close()


def test_a_checkpoint_moves_the_lease_key_only_when_it_falls_behind(url):
    """lease_due stays while it is a lower bound at least half the lease's remaining time
    away (no index entry to write: the update can be HOT), and moves to the lease's end
    once it falls behind that; the scans never miss an expired lease."""
    clock = ManualClock()
    store = pg.PostgresStore(url, clock=clock)
    hid = dhp.dispatch(store, "due", {}, {})
    ctx = dhp.claim(store, hid, "w1", ttl=10, heartbeat_interval=0)

    def keys():
        return sql(f'SELECT lease_due, lease_expires_at FROM "{store.schema}".handoffs')[0]

    assert keys() == (1010.0, 1010.0)
    clock.now += 2
    ctx.checkpoint({"n": 1})
    assert keys() == (1010.0, 1012.0)  # 1010 is past 1002 + 10/2: kept
    clock.now += 4
    ctx.checkpoint({"n": 2})
    assert keys() == (1016.0, 1016.0)  # 1010 is before 1006 + 10/2: moved
    with store.transaction() as tx:
        assert tx.select(expired_before=1015.9) == []
        assert len(tx.select(expired_before=1016)) == 1
    store.close()


def _hold_row(store, hid: str, held: threading.Event, release: threading.Event):
    """A write transaction that holds the handoff's row lock until `release`."""
    with store.transaction() as tx:
        tx.get(hid)
        held.set()
        release.wait(60)


def _waiting_on_a_lock(schema: str) -> bool:
    return bool(sql("SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                    "AND application_name = %s", f"dhp {schema}"))


@pytest.mark.covers("DHP-FEN-005", "DHP-SRV-008")
def test_writers_of_different_handoffs_never_wait_for_each_other(url):
    store, other = dhp.Store(url), dhp.Store(url)
    a, b = (dhp.dispatch(store, "rows", {"n": n}, {}) for n in (1, 2))
    ctx_a = dhp.claim(store, a, "wa", heartbeat_interval=0)
    ctx_b = dhp.claim(store, b, "wb", heartbeat_interval=0)
    held, release = threading.Event(), threading.Event()
    holder = threading.Thread(target=_hold_row, args=(other, a, held, release))
    holder.start()
    try:
        assert held.wait(30)
        ctx_b.checkpoint({"b": 1})  # another handoff: done while a's row is locked
        blocked = threading.Thread(target=ctx_a.checkpoint, args=({"a": 1},))
        blocked.start()
        deadline = time.monotonic() + 30
        while not _waiting_on_a_lock(store.schema):  # the same handoff waits for the lock
            assert time.monotonic() < deadline, "the write on a locked row did not wait"
            time.sleep(0.02)
        assert blocked.is_alive()
    finally:
        release.set()
        holder.join(30)
    blocked.join(30)
    assert [c["state"] for c in dhp.checkpoints(store, a)] == [{"a": 1}]
    store.close()
    other.close()


@pytest.mark.covers("DHP-SRV-008")
def test_claim_next_skips_a_row_another_writer_holds(url):
    store, other = dhp.Store(url), dhp.Store(url)
    first, second = (dhp.dispatch(store, "queue", {"n": n}, {}) for n in (1, 2))
    held, release = threading.Event(), threading.Event()
    holder = threading.Thread(target=_hold_row, args=(other, first, held, release))
    holder.start()
    try:
        assert held.wait(30)
        ctx = dhp.claim_next(store, ["queue"], "w", heartbeat_interval=0)
        assert ctx.handoff_id == second  # the oldest one is locked: skipped, not waited for
    finally:
        release.set()
        holder.join(30)
    assert dhp.claim_next(store, ["queue"], "w2", heartbeat_interval=0).handoff_id == first
    store.close()
    other.close()


@pytest.mark.covers("DHP-SRV-001", "DHP-LSE-001")
def test_leases_are_judged_by_the_server_clock_never_the_client(url, monkeypatch):
    def no_client_clock():
        raise AssertionError("a lease decision read this host's clock")

    monkeypatch.setattr(host_clock, "store_clock", no_client_clock)
    store = dhp.Store(url, ttl=5.0)
    hid = dhp.dispatch(store, "clock", {}, {})
    ctx = dhp.claim(store, hid, "w", heartbeat_interval=0)
    server_now = sql("SELECT extract(epoch FROM clock_timestamp())::float8")[0][0]
    status = dhp.status(store, hid)
    assert 0 < status["lease_expires_in"] <= 5.0
    record = operations.get_row(store, hid)["record"]
    assert abs(record["lease_expires_at"] - 5.0 - server_now) < 60  # server epoch seconds
    ctx.release()
    store.close()


@pytest.mark.covers("DHP-SRV-002", "DHP-SRV-003", "DHP-FEN-003")
def test_a_step_of_the_server_clock_only_moves_leases(url):
    """A step forward expires a lease early: the owner is fenced out, never two owners. A step
    back lengthens it: nobody may take it meanwhile."""
    tick = ManualClock(1000.0)
    store = dhp.Store(url, ttl=5.0, clock=tick)
    hid = dhp.dispatch(store, "clock", {"step": 1}, {})
    owner = operations.take(store, hid, "claim", "w1", 5.0)["record"]["fence"]
    tick.now -= 3600.0  # the server's clock steps back an hour: the lease lasts longer
    with pytest.raises(Conflict):
        operations.take(store, hid, "recover", "w2", 5.0)
    operations.write(store, hid, "checkpoint", "w1", owner, ttl=5.0, state={"n": 1})
    tick.now += 3600.0 + 86400.0  # and a day forward: it expired early
    fence = operations.take(store, hid, "recover", "w2", 5.0)["record"]["fence"]
    assert fence == owner + 1
    with pytest.raises(LeaseLost):  # the first owner's late write is refused
        operations.write(store, hid, "checkpoint", "w1", owner, ttl=5.0, state={"n": 2})
    assert [c["fence"] for c in dhp.checkpoints(store, hid)] == [owner]
    store.close()


def _terminate_sessions(schema: str) -> int:
    """What a server restart does to this store's clients: every session ends. Only this
    test's sessions (the store's and this process's liveness lock) are hit, so other users
    of the server go on."""
    rows = sql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
               "WHERE application_name = %s OR application_name LIKE %s",
               f"dhp {schema}", f"dhp-liveness {os.getpid()}")
    return len(rows)


@pytest.mark.covers("DHP-SRV-005", "DHP-SRV-009", "DHP-CKP-009")
def test_sessions_dropped_mid_run_workers_come_back_and_nothing_is_lost(url):
    """The server drops every session of the store while a worker checkpoints: the write in
    flight fails as `unavailable` (retryable), the next one works, the liveness lock is taken
    again, the lease was never lost and every acknowledged checkpoint is there."""
    store = dhp.Store(url, ttl=10.0)
    hid = dhp.dispatch(store, "restart", {}, {})
    ctx = dhp.claim(store, hid, "w", heartbeat_interval=0.5)
    lock = process_lock(store.conninfo, {})
    locked = lock.locked
    acked, failures = [], 0
    for n in range(40):
        if n == 15:
            assert _terminate_sessions(store.schema) >= 1
        while True:
            try:
                acked.append(ctx.checkpoint({"n": n})["seq"])
                break
            except Unavailable:
                failures += 1
                assert failures < 50, "the store did not come back"
                time.sleep(0.1)
    deadline = time.monotonic() + 30
    while lock.locked == locked or lock.conn is None:
        assert time.monotonic() < deadline, "the liveness lock was not taken again"
        time.sleep(0.05)
    stored = dhp.checkpoints(store, hid)
    assert [c["state"]["n"] for c in stored][-1] == 39
    assert set(acked) <= {c["seq"] for c in stored}
    assert dhp.status(store, hid)["owner"] == "w"  # the lease survived
    ctx.complete({})
    store.close()


@pytest.mark.covers("DHP-SRV-004", "DHP-LSE-005")
def test_liveness_is_a_session_advisory_lock(url):
    """A worker process holds an advisory lock for as long as it lives; kill -9 frees it and
    recover takes over at once, well inside the 30 s lease."""
    store = dhp.Store(url)
    hid = dhp.dispatch(store, "liveness", {}, {})
    proc = subprocess.Popen([sys.executable, str(WORKER), "hold", url, hid, "30"],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().split()[:1] == ["claimed"]
        token = operations.get_row(store, hid)["owner_incarnation"]
        assert sql("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
                   "AND granted")[0][0] >= 1
        assert not store.liveness.owner_dead(token)
        with pytest.raises(Conflict):
            dhp.recover(store, hid, "standby")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 10
        while True:
            try:
                ctx = dhp.recover(store, hid, "standby")
                break
            except Conflict:
                assert time.monotonic() < deadline
                time.sleep(0.01)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    assert ctx.fence == 2
    ctx.complete({})
    store.close()


@pytest.mark.covers("DHP-SRV-006", "DHP-SRV-007", "DHP-SRV-009", "DHP-CKP-011")
def test_acknowledged_means_flushed_and_every_wait_is_bounded(url):
    """Every transaction but a heartbeat's commits with synchronous_commit on (flushed to the
    WAL before it returns); every session bounds statements and idle transactions."""
    store = dhp.Store(url)
    for sync, expected in (("commit", "on"), ("batch", "on"), ("none", "off")):
        with store.transaction(sync=sync) as tx:
            assert tx.conn.execute("SHOW synchronous_commit").fetchone()[0] == expected
    with store.transaction(write=False) as tx:
        timeouts = [tx.conn.execute(f"SHOW {name}").fetchone()[0] for name in
                    ("statement_timeout", "idle_in_transaction_session_timeout",
                     "tcp_keepalives_idle")]
    assert timeouts == ["30s", "1s", "5"]
    store.close()


def _round_trips(trace: Path) -> int:
    """Round trips in a libpq protocol trace: each time the client sends after the server
    answered (a pipeline sends several statements before it waits)."""
    trips, last = 0, "B"
    for line in trace.read_text().splitlines():
        direction = line[:1]
        if direction == "F" and last == "B":
            trips += 1
        if direction in ("F", "B"):
            last = direction
    return trips


def _traced(store: pg.PostgresStore, trace: Path) -> Path:
    """Trace the protocol of the store's one pooled connection into `trace`."""
    with store._pool_here().connection() as conn:
        conn.pgconn.trace(os.open(trace, os.O_WRONLY | os.O_CREAT))
        conn.pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS)
    return trace


def test_a_recover_and_a_completion_are_two_round_trips_a_checkpoint_one(url, tmp_path):
    """Under load every round trip waits for the server's process to be scheduled: their
    number is what failover costs (kill -9 to the standby's first checkpoint is a recover,
    a read of the last checkpoint and a checkpoint). A checkpoint of a lease this process
    took is one compare-and-set (checkpoint_kept). Counted in the protocol trace of the
    store's one pooled connection."""
    from backends import dead_owner_token

    store = pg.PostgresStore(url, pool_max=1)
    hid = dhp.dispatch(store, "trips", {}, {})
    dhp.claim(store, hid, "w1", heartbeat_interval=0).checkpoint({"n": 1})
    with store.transaction() as tx:  # the owner's process dies
        tx.put_record(hid, tx.get(hid)["record"], dead_owner_token(store))
    trace = _traced(store, tmp_path / "trace")
    trips = []

    def counted(step):
        before = _round_trips(trace)
        got = step()
        trips.append(_round_trips(trace) - before)
        return got

    ctx = counted(lambda: dhp.recover(store, hid, "w2", heartbeat_interval=0))
    counted(lambda: dhp.last_checkpoint(store, hid))
    counted(lambda: ctx.checkpoint({"n": 2}))
    counted(lambda: ctx.complete({}))
    assert trips == [2, 1, 1, 2]  # complete uses the output schema verified at the take
    assert dhp.status(store, hid)["state"] == "completed"
    with store._pool_here().connection() as conn:
        conn.pgconn.untrace()
    store.close()


def test_claim_next_is_two_round_trips_picking_in_one_statement(url, tmp_path):
    """claim_next picks, locks and probes in one statement (PostgresTx.pick_next): one round
    trip for the pick (with BEGIN and the picked row's links), one for the take and COMMIT,
    whether it takes fresh work, partly done work or a dead owner's (with nothing to take,
    the pick returns next_due and COMMIT ends the empty transaction)."""
    from backends import dead_owner_token

    store = pg.PostgresStore(url, pool_max=1)
    fresh, partly, dead = (dhp.dispatch(store, "pick", {"i": i}, {}) for i in range(3))
    ctx = dhp.claim(store, partly, "w0", heartbeat_interval=0)
    ctx.checkpoint({"n": 1})
    ctx.release()
    dhp.claim(store, dead, "w0", heartbeat_interval=0)
    with store.transaction() as tx:  # its owner's process dies
        tx.put_record(dead, tx.get(dead)["record"], dead_owner_token(store))
    trace = _traced(store, tmp_path / "trace")
    taken, trips = [], []
    for _ in range(4):
        before = _round_trips(trace)
        ctx = dhp.claim_next(store, "pick", "w1", heartbeat_interval=0)
        trips.append(_round_trips(trace) - before)
        taken.append(ctx and ctx.handoff_id)
    assert taken == [partly, dead, fresh, None]
    assert trips == [2, 2, 2, 2]
    with store._pool_here().connection() as conn:
        conn.pgconn.untrace()
    store.close()


def test_a_kept_lease_whose_row_moved_on_takes_the_full_path(url):
    """checkpoint_kept writes only while the row and its last link are as this process
    left them and the lease is live on the store's clock; otherwise nothing is written by
    it and the full path decides on the stored row: a cancel by another process, a lease
    expired on the store's clock, a budget cap, a removed last link."""
    clock = ManualClock()
    store = pg.PostgresStore(url, clock=clock)
    other = pg.PostgresStore(url, clock=clock)  # another process: keeps nothing of ours
    ids = [dhp.dispatch(store, "kept", {"i": i}, {}, budget={"max_steps": 3})
           for i in range(4)]
    ctxs = [dhp.claim(store, hid, "w1", ttl=10, heartbeat_interval=0) for hid in ids]
    for ctx in ctxs:
        ctx.checkpoint({"n": 1})
        assert store.kept_lease(ctx.handoff_id)["link"][0] == 1
    dhp.cancel(other, ids[0])
    with pytest.raises(dhp.Cancelled):
        ctxs[0].checkpoint({"n": 2})
    clock.now += 10  # the lease has expired on the store's clock, not on the kept record
    with pytest.raises(LeaseLost):
        ctxs[1].checkpoint({"n": 2})
    clock.now -= 10
    ctxs[2].checkpoint({"n": 2})
    ctxs[2].checkpoint({"n": 3})
    with pytest.raises(dhp.BudgetExceeded):  # the 4th step: to the DLQ, by the full path
        ctxs[2].checkpoint({"n": 4})
    assert dhp.status(store, ids[2])["state"] == "dead_lettered"
    sql(f'DELETE FROM "{store.schema}".checkpoints WHERE handoff_id = %s', ids[3])
    # Not seq 2 linked to the removed record: the full path reads the links there are.
    assert ctxs[3].checkpoint({"n": 2})["seq"] == 1
    assert [len(dhp.checkpoints(store, hid)) for hid in ids] == [1, 1, 3, 1]
    store.close()
    other.close()


@pytest.mark.covers("DHP-SRV-009")
def test_a_client_paused_inside_a_write_transaction_loses_its_row_lock(url):
    """A process SIGSTOPped while its write transaction holds a handoff's row lock (between
    reading the row and writing it) must not keep the lock: the server ends its session as
    idle in a transaction, and another process's write of that handoff goes through. With
    the lock kept, the write would wait out the statement timeout and fail unavailable."""
    store = dhp.Store(url)
    hid = dhp.dispatch(store, "pg.paused", {}, {})
    holder = subprocess.Popen(
        [sys.executable, "-c", (
            "import sys, time, dhp\n"
            "store = dhp.Store(sys.argv[1])\n"
            "with store.transaction() as tx:\n"
            "    tx.get(sys.argv[2])\n"
            "    print('locked', flush=True)\n"
            "    time.sleep(3600)\n"), url, hid],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        os.kill(holder.pid, signal.SIGSTOP)
        ctx = dhp.claim(store, hid, "w", heartbeat_interval=0)  # waits for the row lock
        assert ctx.fence == 1
        ctx.release()
    finally:
        holder.kill()
        holder.wait()
    store.close()


def test_owner_incarnations_are_the_distinct_owners_of_claimed_handoffs(url):
    """The supervisor's owners to probe (found by a loose scan of the partial owner index, one
    probe per owner): exactly the distinct owners of claimed handoffs."""
    store = dhp.Store(url)
    schema = url.rsplit("schema=", 1)[1]
    dhp.dispatch_many(store, [{"task_kind": "k", "inputs": {"n": n}, "output_schema": {}}
                              for n in range(200)])
    owners = [f"{n:032x}" for n in range(4)]
    sql(f"UPDATE {schema}.handoffs SET state = (ARRAY['claimed', 'claimed', 'released'])"
        "[1 + seq %% 3], owner_incarnation = (ARRAY[%s, %s, %s, %s, NULL])[1 + seq %% 5]",
        *owners)
    expected = {r[0] for r in sql(f"SELECT DISTINCT owner_incarnation FROM {schema}.handoffs "
                                  "WHERE state = 'claimed' AND owner_incarnation IS NOT NULL")}
    with store.transaction(write=False) as tx:
        found = tx.owner_incarnations()
    assert sorted(found) == sorted(expected) == owners
    sql(f"UPDATE {schema}.handoffs SET state = 'released'")
    with store.transaction(write=False) as tx:
        assert tx.owner_incarnations() == []
    store.close()


def test_a_store_of_schema_3_upgrades_to_failure_records(url):
    """Postgres migrations 4 to 6 (a new table, the chain heads, the keys); every handoff and
    checkpoint of a store at version 3 is kept, each status now with no failure, and a failed
    attempt is then recorded."""
    store = dhp.Store(url)
    done, claimed, pending = (dhp.dispatch(store, "k", {"n": n}, {"type": "object"})
                              for n in range(3))
    with dhp.claim(store, done, "w", heartbeat_interval=0) as ctx:
        ctx.checkpoint({"i": 0})
        ctx.complete({"done": True})
    ctx = dhp.claim(store, claimed, "w", ttl=600, heartbeat_interval=0)
    ctx.checkpoint({"i": 1})
    before = {h: (dhp.status(store, h), dhp.checkpoints(store, h))
              for h in (done, claimed, pending)}
    schema = store.schema
    store.close()
    _as_version_3(f'"{schema}"')
    store = dhp.Store(url)
    assert store.schema_version() == pg.SCHEMA_VERSION == 6
    for hid, (status, records) in before.items():
        now = dhp.status(store, hid)
        assert now["failures"] == [] and now["state"] == status["state"]
        assert {k: v for k, v in now.items() if k not in ("failures", "lease_expires_in")} \
            == {k: v for k, v in status.items() if k not in ("failures", "lease_expires_in")}
        assert dhp.checkpoints(store, hid) == records
    dhp.claim(store, pending, "w", heartbeat_interval=0).release(
        failure={"type": "E", "message": "after the upgrade"})
    assert [f["message"] for f in dhp.status(store, pending)["failures"]] \
        == ["after the upgrade"]
    assert dhp.check_integrity(store) == []
    store.close()
