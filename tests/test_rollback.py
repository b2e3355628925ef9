"""Issue 24, point 7: a checkpoints table rolled back (trailing rows deleted, or the last row
replaced by an older valid record) is refused where work resumes (DHP-SEC-010), on both
stores, and nothing changes."""

from __future__ import annotations

import sqlite3

import pytest
from dhp import api
from dhp.core.errors import BudgetExceeded, IntegrityError
from dhp.store.sqlite import DB_FILE

KIND = "rollback"
# The checkpoints of the handoff with id ? (the SQLite store's key, migration 7).
OF = "key >> 32 = (SELECT num FROM handoffs WHERE id = ?)"


def _sql(store, statements: list[tuple[str, tuple]]) -> None:
    """Edit the store behind its back, as a partial restore or a lost write would."""
    if hasattr(store, "path"):
        with sqlite3.connect(store.path / DB_FILE) as conn:
            for sql, args in statements:
                conn.execute(sql, args)
        return
    import psycopg

    with psycopg.connect(store.conninfo, autocommit=True) as conn:
        for sql, args in statements:
            conn.execute(sql.replace("{s}", store.quoted_schema), args)


def _delete_last(store, hid: str) -> None:
    if hasattr(store, "path"):
        _sql(store, [(f"DELETE FROM checkpoints WHERE {OF} AND key & 4294967295 = 3", (hid,))])
    else:
        _sql(store, [("DELETE FROM {s}.checkpoints WHERE handoff_id = %s AND seq = 3", (hid,))])


def _replace_last_by_older(store, hid: str) -> None:
    """Row 3 holds checkpoint 2 (a valid record, whose link to 1 holds), and row 2 is gone."""
    if hasattr(store, "path"):
        _sql(store, [(f"UPDATE checkpoints SET record = (SELECT record FROM checkpoints "
                      f"WHERE {OF} AND key & 4294967295 = 2) WHERE {OF} "
                      "AND key & 4294967295 = 3", (hid, hid)),
                     (f"DELETE FROM checkpoints WHERE {OF} AND key & 4294967295 = 2", (hid,))])
    else:
        _sql(store, [("UPDATE {s}.checkpoints AS c SET record = o.record, hash = o.hash "
                      "FROM {s}.checkpoints AS o WHERE c.handoff_id = %s AND c.seq = 3 "
                      "AND o.handoff_id = c.handoff_id AND o.seq = 2", (hid,)),
                     ("DELETE FROM {s}.checkpoints WHERE handoff_id = %s AND seq = 2", (hid,))])


def _released_with_three_checkpoints(store) -> str:
    hid = api.dispatch(store, KIND, {"n": 1}, {}, None)
    with api.claim(store, hid, "w1", heartbeat_interval=0) as ctx:
        for page in (1, 2, 3):
            ctx.checkpoint({"page": page})
        ctx.release()
    return hid


@pytest.mark.covers("DHP-SEC-010")
@pytest.mark.parametrize("rollback", [_delete_last, _replace_last_by_older])
def test_a_rolled_back_chain_is_refused_at_every_take(store_location, rollback):
    store = api.Store(store_location)
    hid = _released_with_three_checkpoints(store)
    assert api.last_checkpoint(store, hid) == {"page": 3}
    rollback(store, hid)
    before = (api.status(store, hid), api.checkpoints(store, hid))
    takes = {"claim": lambda: api.claim(store, hid, "w2", heartbeat_interval=0),
             "recover": lambda: api.recover(store, hid, "w2", heartbeat_interval=0),
             "claim_next": lambda: api.claim_next(store, KIND, "w2", heartbeat_interval=0),
             "last_checkpoint": lambda: api.last_checkpoint(store, hid)}
    for name, take in takes.items():
        with pytest.raises(IntegrityError) as info:
            take()
        assert info.value.requirement == "DHP-SEC-010", name
        assert info.value.code == "integrity_error"
        assert "rolled back" in info.value.message and "seq 3" in info.value.message
    assert (api.status(store, hid), api.checkpoints(store, hid)) == before  # nothing changed
    store.close()


@pytest.mark.covers("DHP-SEC-010")
def test_an_intact_chain_resumes_after_requeue_and_import(store_location, tmp_path):
    """The head follows every way a chain grows: fenced checkpoints, a requeue (the step
    count restarts, the chain does not), an imported log."""
    store = api.Store(store_location)
    hid = api.dispatch(store, KIND, {"n": 2}, {}, {"max_steps": 2})
    with api.claim(store, hid, "w1", heartbeat_interval=0) as ctx:
        ctx.checkpoint({"page": 1})
        ctx.checkpoint({"page": 2})
        with pytest.raises(BudgetExceeded):
            ctx.checkpoint({"page": 3})  # max_steps: dead-lettered
    api.requeue(store, hid)
    with api.claim(store, hid, "w2", heartbeat_interval=0) as ctx:
        assert ctx.last_checkpoint == {"page": 2}
        ctx.checkpoint({"page": 3})
        ctx.release()
    api.export_log(store, hid, tmp_path / "h.jsonl")
    other = api.Store(tmp_path / "other")
    api.import_log(other, tmp_path / "h.jsonl")
    for s in (store, other):
        with api.claim(s, hid, "w3", heartbeat_interval=0) as ctx:
            assert ctx.last_checkpoint == {"page": 3}
            ctx.complete({})
        s.close()
