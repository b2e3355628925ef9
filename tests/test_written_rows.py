"""The SQLite store's kept rows (dhp.store.written_rows): a write of a row this connection
wrote last skips reading it, and what it uses instead is exactly what the read would return."""

from __future__ import annotations

import math
import random
import sqlite3

import dhp
import pytest
from dhp.core import errors, operations
from dhp.store import sqlite as sqlite_store
from dhp.store import written_rows
from dhp.store.written_rows import UNKEPT, WrittenRows, stored_value
from hypothesis import given
from hypothesis import strategies as st

DECLARED = {"i": "INTEGER", "r": "REAL", "t": "TEXT", "b": "", "n": "NUMERIC"}


def test_affinities_follow_the_declared_types():
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE x (i INTEGER, r REAL, t TEXT, b, n NUMERIC, v VARCHAR(9), "
                 "d DOUBLE, bl BLOB, big BIGINT)")
    assert written_rows.affinities(conn, "x") == {
        "i": "INTEGER", "r": "REAL", "t": "TEXT", "b": "BLOB", "n": "NUMERIC", "v": "TEXT",
        "d": "REAL", "bl": "BLOB", "big": "INTEGER"}


values = st.one_of(st.none(), st.booleans(), st.integers(-2**62, 2**62),
                   st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8),
                   st.sampled_from(["12", "1.5", " 3", "1e3", "abc"]))


@given(value=values)
def test_a_kept_value_is_what_sqlite_returns(value):
    """stored_value predicts, per affinity, what a column returns after the value is written,
    or refuses to (UNKEPT); it never predicts wrong."""
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE x (" + ", ".join(f"{c} {t}" for c, t in DECLARED.items()) + ")")
    conn.execute("INSERT INTO x VALUES (?, ?, ?, ?, ?)", [value] * len(DECLARED))
    stored = conn.execute("SELECT * FROM x").fetchone()
    kinds = written_rows.affinities(conn, "x")
    for column, got in zip(DECLARED, stored, strict=True):
        kept = stored_value(value, kinds[column])
        if kept is not UNKEPT:
            assert (type(kept), kept) == (type(got), got) or (
                isinstance(got, float) and math.isnan(got) and math.isnan(kept)), \
                (column, value, kept, got)


def test_common_values_are_kept():
    assert stored_value(5, "REAL") == 5.0 and type(stored_value(5, "REAL")) is float
    assert type(stored_value(3.0, "INTEGER")) is int
    assert stored_value(2.5, "INTEGER") == 2.5
    assert stored_value("claimed", "TEXT") == "claimed"
    assert stored_value(True, "INTEGER") == 1
    assert stored_value(0, "BLOB") == 0 and type(stored_value(0.0, "BLOB")) is float
    assert stored_value(float("nan"), "REAL") is UNKEPT
    assert stored_value("1", "INTEGER") is UNKEPT


class Checked:
    """Every row a kept-rows lookup returns is compared, type by type, with a read."""

    def __init__(self, monkeypatch):
        self.hits = self.misses = 0
        lookup = WrittenRows.lookup

        def checked(rows, key, version):
            kept = lookup(rows, key, version)
            if kept is None:
                self.misses += 1
                return None
            self.hits += 1
            read = rows.conn.execute(sqlite_store._GET_LIGHT, (key,)).fetchone()
            assert [(type(v), v) for v in kept] == [(type(v), v) for v in read], key
            return kept

        monkeypatch.setattr(WrittenRows, "lookup", checked)


class TickClock:
    """A store clock that moves on each read, sometimes landing on whole seconds as ints (a
    REAL column returns them as floats)."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.t = 1000.0

    def __call__(self) -> float:
        self.t += self.rng.choice([0.001, 0.25, 1.0])
        return int(self.t) if self.rng.random() < 0.2 else self.t


def test_random_writes_use_kept_rows_only_when_they_equal_the_stored_ones(tmp_path,
                                                                          monkeypatch):
    """Several handoffs in one process, another connection writing now and then (a second
    store object on the same folder: its commits must make this one read again), ints and
    floats for ttl, spend, progress timeouts and the clock: every kept row used equals a
    read of the row."""
    checked = Checked(monkeypatch)
    rng = random.Random(7)
    clock = TickClock(rng)
    store = dhp.Store(tmp_path, clock=clock)
    other = dhp.Store(tmp_path, clock=clock)
    def dispatch(n: int) -> str:  # some with a progress timeout (its index key moves too)
        return dhp.dispatch(store, "k", {"n": n}, {"type": "object"},
                            progress_timeout_s=rng.choice([None, 7, 2.5]))

    hids = [dispatch(n) for n in range(4)]
    fences = {}
    for step in range(600):
        hid = rng.choice(hids)
        ttl = rng.choice([30, 30.0, 12.5])
        by = other if rng.random() < 0.1 else store
        action = rng.choice(["checkpoint"] * 6 + ["heartbeat"] * 2 + ["release", "take",
                                                                        "complete"])
        try:
            if action == "take" or hid not in fences:
                name = "recover" if rng.random() < 0.3 else "claim"
                row = operations.take(by, hid, name, "w", ttl)
                fences[hid] = row["record"]["fence"]
            elif action == "checkpoint":
                operations.write(by, hid, "checkpoint", "w", fences[hid], ttl=ttl,
                                 state={"step": step}, spend=rng.choice([0, 0.0, 1, 2.5]))
            elif action == "complete":
                operations.write(by, hid, "complete", "w", fences[hid], ttl=ttl,
                                 result={"done": step})
                hids.remove(hid)
                hids.append(dispatch(100 + step))
            else:
                operations.write(by, hid, action, "w", fences[hid], ttl=ttl)
        except errors.DHPError:
            fences.pop(hid, None)  # refused (not claimed, a newer fence): take it again
    assert checked.hits > 50 and checked.misses > 20, (checked.hits, checked.misses)
    assert dhp.check_integrity(store) == []


def _kept_after_a_checkpoint(tmp_path):
    """A store, and a claimed handoff's context whose checkpoint left its row kept."""
    store = dhp.Store(tmp_path)
    hid = dhp.dispatch(store, "k", {}, {"type": "object"})
    ctx = dhp.claim(store, hid, "w", heartbeat_interval=0)
    ctx.checkpoint({"i": 1})
    assert hid in store._written.rows
    return store, ctx


def test_a_commit_by_another_connection_makes_the_next_write_read_the_row(tmp_path):
    store, ctx = _kept_after_a_checkpoint(tmp_path)
    hid = ctx.handoff_id
    other = dhp.Store(tmp_path)
    dhp.cancel(other, hid)  # another connection changes the row
    seen: list[str] = []
    store._connection().set_trace_callback(seen.append)
    with pytest.raises(dhp.Cancelled):
        ctx.checkpoint({"i": 2})
    assert any(s.startswith("SELECT") and "FROM handoffs" in s for s in seen)
    assert dhp.status(store, hid)["state"] == "cancelled"


def test_a_rolled_back_write_keeps_no_rows(tmp_path):
    store, ctx = _kept_after_a_checkpoint(tmp_path)
    hid = ctx.handoff_id
    with pytest.raises(RuntimeError), store.transaction() as tx:
        record = tx.get(hid, envelope=False)["record"]
        tx.put_record(hid, dict(record, steps=99), None)
        raise RuntimeError("the body fails after its write")
    assert store._written.rows == {}
    assert dhp.status(store, hid)["steps"] == 1
    ctx.checkpoint({"i": 2})
    assert dhp.status(store, hid)["steps"] == 2


def test_rows_no_longer_claimed_are_not_kept(tmp_path):
    store, ctx = _kept_after_a_checkpoint(tmp_path)
    ctx.release()
    assert ctx.handoff_id not in store._written.rows


def test_at_most_cap_rows_are_kept(tmp_path, monkeypatch):
    monkeypatch.setattr(written_rows, "CAP", 3)
    store = dhp.Store(tmp_path)
    contexts = []
    for n in range(5):
        hid = dhp.dispatch(store, "k", {"n": n}, {"type": "object"})
        contexts.append(dhp.claim(store, hid, "w", heartbeat_interval=0))
    for ctx in contexts:
        ctx.checkpoint({"i": 1})
    assert list(store._written.rows) == [c.handoff_id for c in contexts[-3:]]
