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


def _two_failures(location: str) -> str:
    """A handoff dead-lettered after RuntimeError then ConnectionError (max_attempts 2)."""
    store = dhp.Store(location)
    hid = dhp.dispatch(store, "shown", {}, SCHEMA, {"max_attempts": 2})
    for error in (RuntimeError("boom"), ConnectionError("upstream returned 503")):
        dhp.claim(store, hid, "w1", heartbeat_interval=0).fail(error)
    store.close()
    return hid


def test_the_errors_are_shown_by_cli_mcp_dashboard_and_a2a(store_location, capsys):
    """`dhp status` (human and --json), `dhp dlq ls`, the MCP status and dlq tools, the
    dashboard's timeline and the A2A task's failed message show both errors, newest last."""
    from dhp.cli import commands
    from dhp.cli import main as cli

    hid = _two_failures(store_location)
    commands.register(cli.command)
    assert cli.main(["status", "--store", store_location, hid]) == 0
    out = capsys.readouterr().out
    assert out.index("RuntimeError: boom") < out.index("ConnectionError: upstream returned 503")
    assert cli.main(["--json", "status", "--store", store_location, hid]) == 0
    shown = json.loads(capsys.readouterr().out)["failures"]
    assert [f["type"] for f in shown] == ["RuntimeError", "ConnectionError"]
    assert cli.main(["dlq", "ls", "--store", store_location]) == 0
    out = capsys.readouterr().out
    assert "LAST ERROR" in out and "ConnectionError: upstream returned 503" in out

    pytest.importorskip("mcp")
    from dhp.agents import mcp_tools
    from dhp.agents.mcp_sessions import AgentSession
    from dhp_conform import oracle

    session = AgentSession(dhp.Store(store_location))
    try:
        for tool, args in (("status", {"handoff_id": hid}), ("dlq", {})):
            out = mcp_tools.call(session, tool, args)
            assert oracle.binding_errors(f"{tool}.result", out) == []
            status = out if tool == "status" else out["entries"][0]["status"]
            assert [(f["type"], f["message"]) for f in status["failures"]] == [
                ("RuntimeError", "boom"), ("ConnectionError", "upstream returned 503")]

        from dhp.observe.dashboard import handoff_detail
        failed = [e for e in handoff_detail(session.store, hid)["timeline"]
                  if e["what"] == "failed"]
        assert [e["detail"] for e in failed] == [
            "attempt 1: RuntimeError: boom", "attempt 2: ConnectionError: upstream returned 503"]
        assert failed[0]["fence"] == 1 and failed[0]["traceback"] == "RuntimeError: boom\n"

        pytest.importorskip("a2a")
        from dhp.agents.a2a_tasks import describe
        assert describe(dhp.status(session.store, hid), None) == (
            "dead-lettered: max_attempts; last error (attempt 2): "
            "ConnectionError: upstream returned 503")
    finally:
        session.end()


@pytest.mark.covers("DHP-BUD-012")
def test_failures_stay_out_of_the_portable_log(tmp_path):
    """An exported log holds no failure record, validates, and imports into another store,
    which starts its own records."""
    hid = _two_failures(str(tmp_path / "a"))
    store = dhp.Store(tmp_path / "a")
    dhp.export_log(store, hid, tmp_path / "h.jsonl")
    text = (tmp_path / "h.jsonl").read_text(encoding="utf-8")
    assert "boom" not in text and "failure" not in text
    other = dhp.Store(tmp_path / "b")
    assert dhp.import_log(other, tmp_path / "h.jsonl") == hid
    assert dhp.status(other, hid)["failures"] == []
    store.close()
    other.close()


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
