"""Issue 10: one bad handoff must never freeze a store, break shipping or exhaust the transport
server; tampering is caught where work resumes (spec/limits.md, security.md, transport.md)."""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
import sys
import threading
import time

import dhp
import pytest
from dhp import api
from dhp.cli.main import main as dhp_main
from dhp.cli.transport import main as transport_main
from dhp.core import chain, limits, operations
from dhp.core.envelope import envelope_and_text
from dhp.core.errors import (
    Conflict,
    IntegrityError,
    InvalidInput,
    SchemaViolation,
    StoreCorrupt,
    Unavailable,
)
from dhp.core.logfile import write_log
from dhp.store.sqlite import DB_FILE
from dhp.transport import server as net
from dhp.transport.shipper import NetShipper
from transport_helpers import SECRET, RawClient, envelope, frame

KIND = "hardening"


def _dispatch(store, inputs=None, schema=None, budget=None):
    return api.dispatch(store, KIND, inputs or {"n": 1}, schema or {}, budget)


# The checkpoints of the handoff with id ? (the SQLite store's key, migration 7).
CHECKPOINT = "key >> 32 = (SELECT num FROM handoffs WHERE id = ?)"


def _sql(store, statement, *args):
    with sqlite3.connect(store.path / DB_FILE) as conn:
        conn.execute(statement, args)


# --- sizes and limits ------------------------------------------------------------------------

@pytest.mark.covers("DHP-LIM-001", "DHP-LIM-003")
def test_over_limit_values_are_refused_before_anything_is_stored(tmp_path):
    store = api.Store(tmp_path, limits=dhp.Limits(max_inputs_bytes=100, max_state_bytes=100,
                                                  max_result_bytes=100))
    with pytest.raises(InvalidInput) as info:
        _dispatch(store, {"big": "x" * 200})
    assert info.value.requirement == "DHP-LIM-003" and "inputs" in info.value.message
    assert api.list_handoffs(store) == []
    hid = _dispatch(store)
    with api.claim(store, hid, "w1", heartbeat_interval=0) as ctx:
        with pytest.raises(InvalidInput, match="state is"):
            ctx.checkpoint({"big": "x" * 200})
        with pytest.raises(InvalidInput, match="result is"):
            ctx.complete({"big": "x" * 200})
        assert api.checkpoints(store, hid) == [] and api.status(store, hid)["state"] == "claimed"
        ctx.checkpoint({"ok": 1})
        ctx.complete({"ok": 1})
    store.close()


def _nested(depth: int) -> dict:
    value: dict = {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


@pytest.mark.covers("DHP-LIM-003", "DHP-LIM-004")
@pytest.mark.parametrize("inputs", [
    {"s": "x" * 40}, {"s": "x" * 80}, {"s": "é" * 30}, {"s": "é" * 300}, _nested(4),
    _nested(5), _nested(6), {"a": [[1], [2], [3]]}, {"a": [[[[[[1]]]]]]}, {"a": "{[{[{[x"}])
def test_the_limits_check_from_the_envelope_text_judges_as_the_full_one(inputs):
    """Dispatch checks limits from the envelope's canonical text when it can (short, ASCII,
    few brackets); every verdict must equal the one from encoding each member again, at limits
    on both sides of each threshold."""
    intent = {"dhp": "1.0", "task_kind": KIND, "inputs": inputs, "output_schema": {},
              "budget": {}}
    _, text = envelope_and_text(intent)
    size = len(chain.canonical_parsed(inputs))
    brackets = text.count("{") + text.count("[")
    taken = 0
    for max_bytes in (size - 1, size, len(text) - 1, len(text)):
        for depth in (1, 4, 5, 6, brackets - 1, brackets):
            bounds = dhp.Limits(max_inputs_bytes=max_bytes, max_schema_bytes=len(text),
                                max_depth=depth)

            def verdict(*args, bounds=bounds):
                try:
                    bounds.check_intent(intent, *args)
                except InvalidInput as exc:
                    return exc.requirement, exc.message
                return None

            assert verdict(text) == verdict(), (max_bytes, depth)
            taken += text.isascii() and len(text) <= max_bytes and brackets <= depth
    assert bool(taken) == text.isascii()  # the short cut was taken where it applies


@pytest.mark.covers("DHP-LIM-001")
def test_default_limits_keep_every_value_inside_a_log_line(tmp_path):
    store = api.Store(tmp_path)
    assert store.limits == dhp.Limits()
    with pytest.raises(InvalidInput, match="inputs is"):
        _dispatch(store, {"big": "x" * (4 * 1024 * 1024)})
    store.close()


@pytest.mark.covers("DHP-LIM-002")
@pytest.mark.parametrize("bad", [{"max_state_bytes": 16 * 1024 * 1024}, {"max_depth": 1000},
                                 {"max_inputs_bytes": 12 * 1024 * 1024,
                                  "max_schema_bytes": 5 * 1024 * 1024},
                                 {"max_result_bytes": 0}])
def test_limits_above_the_ceilings_are_refused(bad):
    with pytest.raises(InvalidInput):
        dhp.Limits(**bad)


@pytest.mark.covers("DHP-LIM-003", "DHP-LIM-009")
def test_a_shipping_worker_refuses_what_its_frames_cannot_carry(tmp_path):
    store = api.Store(tmp_path / "a")
    hid = _dispatch(store)
    shipper = NetShipper("127.0.0.1", 1, local_logpath=tmp_path / "buf", secret=SECRET,
                         max_frame=80_000)
    try:
        with api.claim(store, hid, "w1", heartbeat_interval=0, ship_to=shipper) as ctx:
            with pytest.raises(InvalidInput, match="state is"):
                ctx.checkpoint({"big": "x" * 100_000})
            assert api.checkpoints(store, hid) == []  # refused before it was stored
        # A record that reaches the shipper too big: the handoff is unshippable from then on,
        # and flush() no longer says everything was delivered.
        env = api.envelope_of(store, hid)
        big = chain.make_record(hid, 1, 1, {"big": "x" * 100_000}, 0, hid)
        with pytest.raises(InvalidInput, match="can no longer be shipped"):
            shipper.ship_checkpoint(env, big)
        with pytest.raises(InvalidInput):
            shipper.ship_checkpoint(env, chain.make_record(hid, 2, 1, {}, 0, big["hash"]))
        assert hid in shipper.unshippable and shipper.flush(0.5) is False
    finally:
        shipper.close(timeout=0.1)
        store.close()


def test_a_checkpoint_stored_but_not_shippable_is_not_reported_as_refused(tmp_path):
    store = api.Store(tmp_path / "a")
    hid = _dispatch(store)

    class Broken:
        def ship_chain(self, envelope, records):
            return []

        def ship_checkpoint(self, envelope, record):
            raise InvalidInput("no room")

    with api.claim(store, hid, "w1", heartbeat_interval=0, ship_to=Broken()) as ctx:
        with pytest.raises(Unavailable, match="stored in this store but cannot be shipped"):
            ctx.checkpoint({"n": 1})
        assert [r["seq"] for r in api.checkpoints(store, hid)] == [1]
    store.close()


@pytest.mark.covers("DHP-LIM-005")
def test_spend_total_stays_a_finite_json_number(tmp_path, capsys):
    store = api.Store(tmp_path)
    hid = _dispatch(store)
    with api.claim(store, hid, "w1", heartbeat_interval=0) as ctx:
        with pytest.raises(InvalidInput) as info:
            ctx.checkpoint({}, spend=1e308)  # above 2**53-1 on its own
        assert info.value.requirement == "DHP-LIM-005"
        with pytest.raises(InvalidInput):
            ctx.checkpoint({}, spend=10**21)  # was a raw OverflowError
        ctx.checkpoint({}, spend=limits.MAX_SPEND)
        with pytest.raises(InvalidInput, match="running total"):
            ctx.checkpoint({}, spend=1)
    assert api.status(store, hid)["spend"] == limits.MAX_SPEND
    store.close()
    assert dhp_main(["ls", "--json", "--store", str(tmp_path)]) == 0
    json.loads(capsys.readouterr().out, parse_constant=lambda c: pytest.fail(c))


def test_cli_never_prints_non_json_under_json(tmp_path, capsys):
    store = api.Store(tmp_path)
    hid = _dispatch(store)
    store.close()
    _sql(store, "UPDATE handoffs SET spend = ?", float("inf"))  # written by an old release
    assert dhp_main(["status", hid, "--json", "--store", str(tmp_path)]) != 0
    out = capsys.readouterr().out
    assert "Infinity" not in out and "error" in json.loads(out)


@pytest.mark.covers("DHP-LIM-004", "DHP-LIM-007")
def test_deep_huge_and_non_unicode_input_is_invalid_input(tmp_path):
    store = api.Store(tmp_path)
    deep: object = 1
    for _ in range(10_000):
        deep = [deep]
    for bad in ({"deep": deep}, {"huge": 10**400}):
        with pytest.raises(InvalidInput):
            _dispatch(store, bad)
    hid = _dispatch(store)
    for worker in ("w\ud800", "w\x00", "x" * 201, "X" + operations.EARLIER_INCARNATION):
        with pytest.raises(InvalidInput) as info:
            api.claim(store, hid, worker)
        assert info.value.requirement == "DHP-LIM-007"
    with api.claim(store, hid, "w1", heartbeat_interval=0) as ctx:
        with pytest.raises(InvalidInput) as info:
            ctx.checkpoint({"deep": deep})
        assert info.value.requirement == "DHP-LIM-004" and "$.state" in info.value.message
    assert len(api.list_handoffs(store)) == 1 and api.checkpoints(store, hid) == []
    store.close()


@pytest.mark.covers("DHP-LIM-006")
def test_the_largest_fence_is_refused_at_import_and_never_passed(tmp_path):
    store = api.Store(tmp_path / "s")
    env = dhp.make_envelope(dhp.make_intent(KIND, {"n": 2}, {}))
    hid = env["handoff_id"]
    log = tmp_path / "top.jsonl"
    write_log(log, env, [chain.make_record(hid, 1, limits.MAX_FENCE, {}, 0, hid)])
    with pytest.raises(InvalidInput) as info:
        api.import_log(store, log)
    assert info.value.requirement == "DHP-LIM-006"
    assert api.list_handoffs(store) == []
    hid = _dispatch(store)
    with store.transaction() as tx:
        row = tx.get(hid)
        tx.put_record(hid, dict(row["record"], fence=limits.MAX_FENCE), None)
    with pytest.raises(Conflict) as info:
        api.claim(store, hid, "w1")
    assert info.value.requirement == "DHP-LIM-006"
    store.close()


# --- time under the lock ---------------------------------------------------------------------

@pytest.mark.covers("DHP-LIM-008")
def test_result_validation_runs_outside_the_lock_and_within_a_budget(tmp_path, monkeypatch):
    store = api.Store(tmp_path)
    schema = {"type": "string", "pattern": "^(a+)+$"}
    hid = _dispatch(store, schema=schema)
    seen = []
    real = operations.results.result_errors

    def watched(output_schema, result, **kw):
        seen.append(store.in_transaction_on_this_thread())
        # a short budget for the catastrophic case only: a loaded machine may take longer
        # than that to compile the schema in a fresh helper for the valid one
        return real(output_schema, result, budget_s=0.5 if result.endswith("!") else 60)

    monkeypatch.setattr(operations.results, "result_errors", watched)
    with api.claim(store, hid, "w1", ttl=120, heartbeat_interval=0) as ctx:
        with pytest.raises(SchemaViolation, match="budget of 0.5 s"):
            ctx.complete("a" * 40 + "!")  # catastrophic backtracking: years, unbounded
        assert api.status(store, hid)["state"] == "claimed"  # nothing changed, lease kept
        ctx.complete("aaa")
    assert seen == [False, False]
    store.close()


# --- tampering, caught where work resumes ----------------------------------------------------

@pytest.mark.covers("DHP-SEC-004")
def test_a_changed_last_checkpoint_or_envelope_is_not_resumed(tmp_path):
    store = api.Store(tmp_path)
    hid = _dispatch(store)
    with api.claim(store, hid, "w1", heartbeat_interval=0) as ctx:
        ctx.checkpoint({"page": 1})
        ctx.checkpoint({"page": 2})
    _sql(store, "UPDATE checkpoints SET record = json_set(record, '$.state.page', 99) "
         f"WHERE {CHECKPOINT} AND key & 4294967295 = 2", hid)
    with pytest.raises(IntegrityError) as info:
        api.last_checkpoint(store, hid)
    assert info.value.requirement == "DHP-SEC-004"
    before = api.status(store, hid)
    with pytest.raises(IntegrityError):
        api.recover(store, hid, "w2")
    assert api.status(store, hid)["fence"] == before["fence"]  # nothing changed

    other = _dispatch(store, {"n": 7})
    _sql(store, "UPDATE handoffs SET envelope = json_set(envelope, '$.intent.inputs.n', 8) "
         "WHERE id = ?", other)
    with pytest.raises(IntegrityError, match="does not hash"):
        api.claim(store, other, "w2")
    assert any(other in p for p in api.check_integrity(store))
    store.close()


@pytest.mark.covers("DHP-SEC-005")
def test_check_integrity_reports_every_kind_of_damage(tmp_path):
    store = api.Store(tmp_path)
    ids = [_dispatch(store, {"n": i}) for i in range(6)]
    for hid in ids:
        with api.claim(store, hid, "w1", heartbeat_interval=0) as ctx:
            ctx.checkpoint({"a": 1})
            ctx.checkpoint({"a": 2})
            if hid == ids[2]:
                ctx.complete({})
    assert api.check_integrity(store) == []
    _sql(store, "UPDATE handoffs SET fence = 0 WHERE id = ?", ids[0])
    _sql(store, "UPDATE handoffs SET state = 'flying' WHERE id = ?", ids[1])
    _sql(store, "UPDATE handoffs SET result = NULL WHERE id = ?", ids[2])
    _sql(store, f"DELETE FROM checkpoints WHERE {CHECKPOINT} AND key & 4294967295 = 2", ids[3])
    _sql(store, f"UPDATE checkpoints SET record = '{{not json' WHERE {CHECKPOINT}", ids[4])
    problems = api.check_integrity(store)
    for hid, words in zip(ids, ("fence", "does not exist", "without a result", "deleted",
                                "not JSON"), strict=False):
        assert any(p.startswith(hid) and words in p for p in problems), (words, problems)
    assert not any(p.startswith(ids[5]) for p in problems)
    with pytest.raises(StoreCorrupt):
        api.checkpoints(store, ids[4])  # a typed error, not a raw JSONDecodeError
    store.close()


@pytest.mark.covers("DHP-SEC-005")
def test_a_damaged_database_is_reported_and_dhp_exits_corrupt(tmp_path, capsys):
    store = api.Store(tmp_path / "s")
    for i in range(200):
        _dispatch(store, {"n": i, "pad": "p" * 500})
    store.close()
    db = tmp_path / "s" / DB_FILE
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    data = bytearray(db.read_bytes())
    data[8192:8192 + 4096] = b"\xff" * 4096  # one page of the table's b-tree
    db.write_bytes(bytes(data))
    store = api.Store(tmp_path / "s")
    problems = api.check_integrity(store)  # never a raw sqlite3.DatabaseError
    assert problems
    store.close()
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / DB_FILE).write_bytes(b"this is not a database" * 100)
    assert dhp_main(["ls", "--store", str(tmp_path / "junk")]) == 4
    assert "corrupt" in dhp_main.__module__ or "damaged" in capsys.readouterr().err


@pytest.mark.covers("DHP-LSE-005")
def test_liveness_locks_belong_to_the_database_not_the_folder(tmp_path):
    first = api.Store(tmp_path / "a")
    hid = _dispatch(first)
    (tmp_path / "b").mkdir()
    os.symlink(tmp_path / "a" / DB_FILE, tmp_path / "b" / DB_FILE)
    code = ("import sys, time; from dhp import api; s = api.Store(sys.argv[1]); "
            "api.claim(s, sys.argv[2], 'owner', ttl=60); print('claimed', flush=True); "
            "time.sleep(60)")
    owner = subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "a"), hid],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert owner.stdout.readline().strip() == "claimed"
        second = api.Store(tmp_path / "b")
        assert second.liveness.folder == first.liveness.folder
        with pytest.raises(Conflict):  # the owner lives: its lease is not taken
            api.recover(second, hid, "thief")
        second.close()
    finally:
        owner.kill()
        owner.wait()
        first.close()


# --- the transport server before authentication ----------------------------------------------

@pytest.fixture
def small_server(tmp_path):
    srv = net.TransportServer(tmp_path / "peer", port=0, secret=SECRET, max_per_peer=200,
                              idle_timeout=1.0).start()
    yield srv
    srv.stop()


def _closed(sock: socket.socket, timeout: float = 10) -> bytes:
    sock.settimeout(timeout)
    got = b""
    try:
        while chunk := sock.recv(65536):
            got += chunk
    except OSError:
        pass
    return got


@pytest.mark.covers("DHP-TRN-033")
def test_a_big_frame_before_authentication_is_refused_at_a_few_kib(small_server):
    sock = socket.create_connection(("127.0.0.1", small_server.port), timeout=10)
    try:
        sock.sendall(b'{"type":"hello","pad":"' + b"x" * 100_000)
    except OSError:
        pass
    reply = _closed(sock)
    sock.close()
    assert b"4096" in reply and b"invalid_input" in reply


@pytest.mark.covers("DHP-TRN-034")
def test_connections_per_peer_are_bounded_and_idle_ones_need_no_thread(tmp_path):
    with net.TransportServer(tmp_path / "peer", port=0, secret=SECRET, max_per_peer=50) as srv:
        threads = threading.active_count()
        idle = [socket.create_connection(("127.0.0.1", srv.port), timeout=10)
                for _ in range(50)]
        extra = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
        assert _closed(extra) == b""  # the 51st from this address is cut at once
        assert threading.active_count() <= threads + 1  # no thread per connection
        for s in idle:
            s.close()
        deadline = time.monotonic() + 10
        while srv._open and time.monotonic() < deadline:
            time.sleep(0.05)
        client = RawClient(srv.port)  # served again once they are gone
        client.send(frame("envelope", 0, envelope("per-peer")))
        assert client.answers(1)[0]["type"] == "ack"
        client.close()
        extra.close()


@pytest.mark.covers("DHP-TRN-035")
def test_an_authenticated_dribbler_is_closed_after_the_idle_timeout(small_server):
    client = RawClient(small_server.port)
    started = time.monotonic()
    closed = False
    try:
        while time.monotonic() - started < 30:
            client.sock.sendall(b" ")  # bytes, never a whole frame
            time.sleep(0.2)
    except OSError:
        closed = True
    assert closed or client.closed(5)
    client.close()


def test_shape_rejections_are_logged_and_deep_frames_get_an_error_frame(small_server, caplog):
    client = RawClient(small_server.port)
    client.send({"type": "checkpoint", "id": 5})  # no record: refused for its shape
    answer = client.answers(1)[0]
    assert answer["type"] == "error" and answer["id"] == 5
    assert any("rejected frame 5" in r.getMessage() for r in caplog.records)
    client.send(b'{"type":"checkpoint","id":6,"record":' + b"[" * 100_000 + b"]" * 100_000
                + b"}\n")
    reply = _closed(client.sock)
    assert b'"type":"error"' in reply
    client.close()


@pytest.mark.covers("DHP-TRN-013")
def test_the_cli_generates_a_secret_the_server_accepts(tmp_path, capsys):
    path = tmp_path / "secret"
    assert transport_main(["--generate-secret", str(path)]) == 0
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert len(net.load_secret(path)) == 64
    assert transport_main(["--generate-secret", str(path)]) == 2  # never overwritten


# --- the kit's limits suite ------------------------------------------------------------------

@pytest.mark.covers("DHP-LIM-001", "DHP-LIM-003", "DHP-LIM-004", "DHP-LIM-005", "DHP-LIM-006",
                    "DHP-LIM-007")
def test_the_kit_limits_suite_passes_on_the_reference(tmp_path):
    from test_conform import conform

    code, report, output = conform(tmp_path, "--suite", "limits")
    assert code == 0, output
    judged = {r["requirement"] for r in report["results"]
              if r["check"].startswith("limits:") and r["status"] == "PASS"}
    assert {f"DHP-LIM-00{n}" for n in (1, 3, 4, 5, 6, 7)} <= judged, output


def test_a_store_locked_past_its_busy_timeout_is_unavailable_and_keeps_its_work(
        tmp_path, monkeypatch):
    """Another connection holding the write lock longer than the busy timeout makes a write
    fail with `unavailable` (retry later, outcome known: nothing stored), not `internal`."""
    from dhp.store import sqlite as sqlite_store

    monkeypatch.setattr(sqlite_store, "BUSY_TIMEOUT_S", 0.1)
    store = dhp.Store(tmp_path / "s")
    kept = dhp.dispatch(store, "k", {"n": 1}, {"type": "object"})
    blocker = sqlite3.connect(tmp_path / "s" / DB_FILE, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")  # the write lock, held
    try:
        with pytest.raises(dhp.Unavailable):
            dhp.dispatch(store, "k", {"n": 2}, {"type": "object"})
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    assert [h["handoff_id"] for h in dhp.list_handoffs(store)] == [kept]
    dhp.dispatch(store, "k", {"n": 2}, {"type": "object"})  # and works once the lock is free
    store.close()


def test_a_store_sqlite_cannot_open_is_unavailable_not_internal(tmp_path):
    """SQLite's operational errors (here: the database file is a folder) are `unavailable`,
    with the store named: the caller may fix the place and retry."""
    (tmp_path / "s" / DB_FILE).mkdir(parents=True)
    with pytest.raises(dhp.Unavailable, match="cannot open the store"):
        dhp.Store(tmp_path / "s")
