"""Failure records (spec/budgets.md, "Failed attempts"; issue 24): why each failed attempt
failed is kept in the store with the release, fenced, bounded, and shown by status, the DLQ
listing, the MCP tools and the dashboard."""

from __future__ import annotations

import io
import json
import threading

import dhp
import pytest
from dhp.core import failures, operations
from dhp.worker import REGISTRY
from dhp.worker.runtime import Runner
from dhp_data import path as data_path
from jsonschema import Draft202012Validator
from referencing import Registry, Resource

SCHEMA = {"type": "object"}


def _status_validator() -> Draft202012Validator:
    schemas = {}
    for name in ("status", "failure"):
        doc = json.loads(data_path("schemas", f"{name}.json").read_text(encoding="utf-8"))
        schemas[doc["$id"]] = Resource.from_contents(doc)
    registry = Registry().with_resources(schemas.items())
    return Draft202012Validator(schemas["urn:dhp:1.0:schema:status"].contents,
                                registry=registry)


def _boom_task(kind: str, errors: list[BaseException]):
    """A task that raises the next of `errors` at each attempt, max_attempts = len(errors)."""
    @dhp.task(kind, output_schema=SCHEMA, budget={"max_attempts": len(errors)})
    def boom(ctx, inputs):
        raise errors[ctx.attempt - 1]
    return boom


@pytest.mark.covers("DHP-BUD-008", "DHP-BUD-011")
def test_a_task_that_raises_twice_shows_both_errors(store_location):
    """The issue's scenario: RuntimeError then ConnectionError with max_attempts 2; status,
    the DLQ listing and the log show both, newest last, and the last attempt's log line
    says it was dead-lettered, not that it will be retried."""
    task = _boom_task("boom.twice", [RuntimeError("boom"),
                                     ConnectionError("upstream returned 503")])
    try:
        store = dhp.Store(store_location)
        hid = task.dispatch(store, {})
        out = io.StringIO()
        runner = Runner(store, {"boom.twice": task}, "w1", stop=threading.Event(), out=out)
        runner.run_one(runner.take())
        assert "(attempt 1 of 2; retry now)" in out.getvalue()
        runner.run_one(runner.take())
        log = out.getvalue()
        assert "ConnectionError: upstream returned 503 (attempt 2 of 2; dead-lettered: " \
            "max_attempts)" in log and "retry" not in log.splitlines()[-1]
        status = dhp.status(store, hid)
        assert status["state"] == "dead_lettered" and status["dlq_reason"] == "max_attempts"
        assert [(f["type"], f["message"], f["attempt"], f["fence"], f["worker"])
                for f in status["failures"]] == [
            ("RuntimeError", "boom", 1, 1, "w1"),
            ("ConnectionError", "upstream returned 503", 2, 2, "w1")]
        assert 'raise errors[ctx.attempt - 1]' in status["failures"][0]["traceback"]
        _status_validator().validate(status)
        (entry,) = dhp.dlq(store)
        assert [f["type"] for f in entry["failures"]] == ["RuntimeError", "ConnectionError"]
        store.close()
    finally:
        REGISTRY.pop("boom.twice", None)


@pytest.mark.covers("DHP-BUD-009")
def test_a_stale_fence_cannot_record_a_failure(store_location):
    store = dhp.Store(store_location)
    hid = dhp.dispatch(store, "k", {}, SCHEMA)
    old = operations.take(store, hid, "claim", "w1", 30.0)
    operations.simple(store, hid, "orphan", owner_dead=True)
    operations.take(store, hid, "recover", "w2", 30.0)
    with pytest.raises(dhp.LeaseLost):
        operations.write(store, hid, "release", "w1", old["record"]["fence"],
                         failure={"type": "ValueError", "message": "late"})
    status = dhp.status(store, hid)
    assert status["failures"] == [] and status["owner"] == "w2"
    store.close()


@pytest.mark.covers("DHP-BUD-010")
def test_the_records_are_bounded_per_handoff_and_in_size(store_location):
    store = dhp.Store(store_location)
    hid = dhp.dispatch(store, "k", {}, SCHEMA)
    long = {"type": "E" * 500, "message": "m" * 10_000, "traceback": "t" * 10_000 + "END"}
    for n in range(failures.CAP + 5):
        ctx = dhp.claim(store, hid, "w", heartbeat_interval=0)
        ctx.release(failure=dict(long, message=f"{n} " + long["message"]))
    kept = dhp.status(store, hid)["failures"]
    assert len(kept) == failures.CAP
    assert [f["attempt"] for f in kept] == list(range(6, failures.CAP + 6))
    assert kept[-1]["message"].startswith(f"{failures.CAP + 4} ")
    assert len(kept[-1]["message"]) == failures.MAX_MESSAGE
    assert len(kept[-1]["type"]) == failures.MAX_TYPE
    assert len(kept[-1]["traceback"]) == failures.MAX_TRACEBACK
    assert kept[-1]["traceback"].endswith("END")  # the innermost frames are kept
    store.close()


@pytest.mark.parametrize("bad, match", [
    ("boom", "must be an object"),
    ({"message": "no type"}, "failure.type"),
    ({"type": "E", "message": 3}, "failure.message"),
    ({"type": "E", "message": "m", "stack": []}, "unknown members"),
])
def test_a_bad_failure_is_refused_and_changes_nothing(tmp_path, bad, match):
    store = dhp.Store(tmp_path / "s")
    hid = dhp.dispatch(store, "k", {}, SCHEMA)
    ctx = dhp.claim(store, hid, "w", heartbeat_interval=0)
    with pytest.raises(dhp.InvalidInput, match=match):
        ctx.release(failure=bad)
    status = dhp.status(store, hid)
    assert status["state"] == "claimed" and status["failures"] == []
    ctx.release()
    store.close()


def test_odd_text_is_kept_as_text(store_location):
    """A NUL (which Postgres refuses in text) or a lone surrogate cannot make the release
    fail or corrupt the store."""
    store = dhp.Store(store_location)
    hid = dhp.dispatch(store, "k", {}, SCHEMA)
    ctx = dhp.claim(store, hid, "w", heartbeat_interval=0)
    ctx.release(failure={"type": "E\x00", "message": "bad \ud800 byte", "traceback": None})
    (kept,) = dhp.status(store, hid)["failures"]
    assert kept["type"] == "E\ufffd" and kept["message"] == "bad ? byte"
    assert dhp.check_integrity(store) == []
    store.close()
