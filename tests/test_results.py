"""Result validation's caches (dhp.core.results): a completion judged by the output schema
its claim verified, compiled schemas and remembered handoffs bounded, a caller's schema
always judged by what it holds now."""

from __future__ import annotations

import json
import sqlite3

import pytest
from dhp import api as dhp
from dhp.core import results
from dhp.core.errors import SchemaViolation
from dhp.store.sqlite import DB_FILE

SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}


@pytest.mark.covers("DHP-RES-001", "DHP-SEC-004")
def test_a_completion_is_judged_by_the_schema_its_claim_verified(tmp_path):
    store = dhp.Store(tmp_path)
    hid = dhp.dispatch(store, "r", {}, SCHEMA)
    with dhp.claim(store, hid, "w", heartbeat_interval=0) as ctx:
        # The stored envelope is edited after the claim verified it: its schema would now
        # accept anything, but the completion is judged by the verified one.
        envelope = dhp.envelope_of(store, hid)
        envelope["intent"]["output_schema"] = {}
        with sqlite3.connect(tmp_path / DB_FILE) as conn:
            conn.execute("UPDATE handoffs SET envelope = ? WHERE id = ?",
                         (json.dumps(envelope), hid))
        with pytest.raises(SchemaViolation):
            ctx.complete({"n": "not an integer"})
        assert dhp.status(store, hid)["state"] == "claimed"
        ctx.complete({"n": 1})
    store.close()


def test_a_completion_without_a_claim_here_reads_the_schema(tmp_path):
    store = dhp.Store(tmp_path)
    hid = dhp.dispatch(store, "r", {"other": 1}, SCHEMA)
    ctx = dhp.claim(store, hid, "w", heartbeat_interval=0)
    results._handoffs.pop(hid)  # as if claimed by a process that forgot it
    with pytest.raises(SchemaViolation):
        ctx.complete({"n": "x"})
    ctx.complete({"n": 2})
    store.close()


def test_caches_are_bounded(monkeypatch):
    monkeypatch.setattr(results, "MAX_HANDOFFS", 5)
    for i in range(20):
        results.remember(f"sha256:{i:064x}", {"type": "object", "title": f"t{i % 3}"})
    assert len(results._handoffs) == 5
    assert results.schema_of(f"sha256:{19:064x}") == {"type": "object", "title": "t1"}
    assert results.schema_of(f"sha256:{0:064x}") is None
    assert results._check_of_text.cache_info().maxsize == results.MAX_SCHEMAS


def test_a_callers_schema_is_judged_by_what_it_holds_now():
    schema = {"type": "object", "required": ["a"]}
    assert results.result_errors(schema, {}) != []
    schema["required"] = []
    assert results.result_errors(schema, {}) == []
    own = results._check_of(schema).validator.schema  # this module's copy, found by identity
    assert own == schema and own is not schema
    assert results.result_errors(own, {}) == []
