"""The SDK against the real SQLite store: every call, its typed errors, the context manager,
budgets and the DLQ, cancellation, results, logs."""

from __future__ import annotations

import json
import time

import pytest
from dhp import api as dhp
from dhp.core import operations, schemas
from dhp.core.errors import (
    BudgetExceeded,
    Cancelled,
    Conflict,
    DHPError,
    IntegrityError,
    InvalidInput,
    LeaseLost,
    NotFound,
    SchemaViolation,
)

RESULT_SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"},
                                                   "s": {"type": "string"}},
                 "required": ["n", "s"], "additionalProperties": False}


@pytest.fixture
def store(tmp_path):
    s = dhp.Store(tmp_path / "store")
    yield s
    s.close()


def _dispatch(store, n=0, budget=None, kind="job"):
    return dhp.dispatch(store, task_kind=kind, inputs={"n": n}, output_schema=RESULT_SCHEMA,
                        budget=budget)


def _valid_status(status):
    assert schemas.errors("status", status) == [], status
    return status


@pytest.mark.covers("DHP-ID-004", "DHP-ID-001")
def test_dispatch_is_idempotent(store):
    hid = _dispatch(store)
    assert hid.startswith("sha256:") and len(hid) == 71
    ctx = dhp.claim(store, hid, "w1")
    before = dhp.status(store, hid)
    assert _dispatch(store) == hid  # same intent, same handoff, no change
    after = dhp.status(store, hid)
    assert after.pop("lease_expires_in") <= before.pop("lease_expires_in")
    assert after == before
    assert len(dhp.list_handoffs(store)) == 1
    assert dhp.envelope_of(store, hid)["intent"]["inputs"] == {"n": 0}
    ctx.release()
    assert _dispatch(store, n=1) != hid


@pytest.mark.covers("DHP-ID-002", "DHP-ID-003", "DHP-ENV-004", "DHP-ERR-001", "DHP-ERR-003")
def test_bad_dispatch_is_typed(store):
    with pytest.raises(InvalidInput) as caught:
        dhp.dispatch(store, "job", {"n": 1}, RESULT_SCHEMA, budget={"max_steps": 0})
    assert caught.value.requirement == "DHP-ID-003" and caught.value.definite
    with pytest.raises(InvalidInput, match="2020-12"):
        dhp.dispatch(store, "job", {}, {"type": "no-such-type"})
    with pytest.raises(InvalidInput):
        dhp.dispatch(store, "", {}, {})
    with pytest.raises(InvalidInput):
        dhp.dispatch(store, "job", {"x": float("nan")}, {})
    assert schemas.errors("error", caught.value.to_dict()) == []
    assert dhp.list_handoffs(store) == []


@pytest.mark.covers("DHP-FEN-001", "DHP-FEN-007", "DHP-STM-007", "DHP-FEN-005")
def test_claim_bumps_the_fence_and_conflicts(store):
    hid = _dispatch(store)
    ctx = dhp.claim(store, hid, "w1", ttl=2.0)
    assert (ctx.handoff_id, ctx.worker_id, ctx.fence) == (hid, "w1", 1)
    assert ctx.inputs == {"n": 0} and ctx.intent["task_kind"] == "job"
    assert ctx.last_checkpoint is None
    with pytest.raises(Conflict) as caught:
        dhp.claim(store, hid, "w2")
    assert caught.value.code == "conflict"
    with pytest.raises(Conflict):  # the owner (this very process) is alive
        dhp.recover(store, hid, "w2")
    status = _valid_status(dhp.status(store, hid))
    assert (status["state"], status["owner"], status["fence"], status["attempts"]) == \
        ("claimed", "w1", 1, 1)
    assert 1.0 < status["lease_expires_in"] <= 2.0
    ctx.release()
    status = _valid_status(dhp.status(store, hid))
    assert (status["state"], status["owner"], status["fence"]) == ("released", None, 1)
    ctx2 = dhp.claim(store, hid, "w2")
    assert ctx2.fence == 2
    ctx2.release()


@pytest.mark.covers("DHP-STM-003", "DHP-FEN-006", "DHP-ERR-002")
def test_unknown_handoff(store):
    missing = "sha256:" + "0" * 64
    for call in (lambda: dhp.claim(store, missing, "w"), lambda: dhp.status(store, missing),
                 lambda: dhp.last_checkpoint(store, missing), lambda: dhp.cancel(store, missing),
                 lambda: dhp.result(store, missing), lambda: dhp.requeue(store, missing)):
        with pytest.raises(NotFound) as caught:
            call()
        assert caught.value.code == "not_found"


@pytest.mark.covers("DHP-CKP-002", "DHP-CKP-003", "DHP-CKP-004", "DHP-CKP-006",
                    "DHP-CKP-010", "DHP-LSE-004")
def test_checkpoints_chain_and_resume(store):
    hid = _dispatch(store)
    with dhp.claim(store, hid, "w1") as ctx:
        records = [ctx.checkpoint({"page": i}, spend=0.5) for i in range(1, 4)]
    assert [r["seq"] for r in records] == [1, 2, 3]
    assert records[0]["prev"] == hid
    assert [r["prev"] for r in records[1:]] == [r["hash"] for r in records[:-1]]
    assert dhp.checkpoints(store, hid) == records
    assert dhp.last_checkpoint(store, hid) == {"page": 3}
    with dhp.recover(store, hid, "w2") as ctx:
        assert (ctx.fence, ctx.last_checkpoint, ctx.last_seq) == (2, {"page": 3}, 3)
        record = ctx.checkpoint({"page": 4})
        assert (record["seq"], record["fence"], record["prev"]) == (4, 2, records[-1]["hash"])
    status = _valid_status(dhp.status(store, hid))
    assert status["checkpoints"] == {"count": 4, "last_seq": 4}
    assert status["spend"] == 1.5 and status["steps"] == 4
    assert dhp.check_integrity(store) == []


@pytest.mark.covers("DHP-RES-001", "DHP-RES-002", "DHP-RES-003", "DHP-RES-004", "DHP-RES-005")
def test_complete_validates_and_happens_once(store, tmp_path):
    hid = _dispatch(store)
    ctx = dhp.claim(store, hid, "w1")
    ctx.checkpoint({"k": 1})
    with pytest.raises(SchemaViolation) as caught:
        ctx.complete({"n": "one", "extra": 1})
    paths = sorted(p["path"] for p in caught.value.details)
    assert paths == ["$", "$", "$.n"]  # every error: missing s, extra member, wrong type
    assert caught.value.requirement == "DHP-RES-002" and caught.value.code == "schema_violation"
    assert dhp.status(store, hid)["state"] == "claimed" and ctx.active  # kept, fix and retry
    record = ctx.complete({"n": 1, "s": "ok"})
    assert record["prev"] == dhp.checkpoints(store, hid)[-1]["hash"] and record["fence"] == 1
    with pytest.raises(LeaseLost):
        ctx.complete({"n": 2, "s": "again"})
    with pytest.raises(Conflict):
        dhp.claim(store, hid, "w2")
    store.close()
    reopened = dhp.Store(tmp_path / "store")
    assert dhp.result(reopened, hid) == {"n": 1, "s": "ok"}
    assert _valid_status(dhp.status(reopened, hid))["state"] == "completed"
    other = _dispatch(reopened, n=5)
    with pytest.raises(Conflict, match="no result"):
        dhp.result(reopened, other)
    reopened.close()


def test_with_block_releases_on_exception_and_on_plain_exit(store):
    hid = _dispatch(store)
    with pytest.raises(RuntimeError, match="boom"):
        with dhp.claim(store, hid, "w1") as ctx:
            ctx.checkpoint({"i": 1})
            raise RuntimeError("boom")
    assert not ctx.active
    assert (dhp.status(store, hid)["state"], dhp.status(store, hid)["owner"]) == \
        ("released", None)
    with dhp.claim(store, hid, "w2") as ctx:
        assert ctx.last_checkpoint == {"i": 1}
    assert dhp.status(store, hid)["state"] == "released"


@pytest.mark.covers("DHP-LSE-004")
def test_background_heartbeat_keeps_a_short_lease(store):
    hid = _dispatch(store)
    with dhp.claim(store, hid, "w1", ttl=0.5) as ctx:
        time.sleep(1.6)  # more than three TTLs with no call of ours
        assert ctx.lost is None
        ctx.checkpoint({"still": "mine"})
        assert dhp.status(store, hid)["state"] == "claimed"


@pytest.mark.covers("DHP-STM-006", "DHP-FEN-006")
def test_cancel_reaches_the_worker(store):
    hid = _dispatch(store)
    ctx = dhp.claim(store, hid, "w1", ttl=0.6)
    dhp.cancel(store, hid)
    deadline = time.monotonic() + 2.0
    while ctx.lost is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert isinstance(ctx.lost, Cancelled) and not ctx.active  # via its next heartbeat
    with pytest.raises(Cancelled):
        ctx.checkpoint({"too": "late"})
    assert dhp.checkpoints(store, hid) == []
    dhp.cancel(store, hid)  # idempotent
    with pytest.raises(Conflict):
        dhp.claim(store, hid, "w2")
    done = _dispatch(store, n=9)
    with dhp.claim(store, done, "w") as c:
        c.complete({"n": 9, "s": "x"})
    with pytest.raises(Conflict):
        dhp.cancel(store, done)
    # a write that arrives before any heartbeat learns it at once
    hid2 = _dispatch(store, n=2)
    ctx2 = dhp.claim(store, hid2, "w1")
    dhp.cancel(store, hid2)
    with pytest.raises(Cancelled):
        ctx2.checkpoint({})


@pytest.mark.covers("DHP-BUD-002", "DHP-BUD-005", "DHP-BUD-006", "DHP-BUD-007")
def test_max_steps_parks_in_the_dlq_and_requeue(store, tmp_path):
    hid = _dispatch(store, budget={"max_steps": 2})
    ctx = dhp.claim(store, hid, "w1")
    ctx.checkpoint({"i": 1})
    ctx.checkpoint({"i": 2})
    with pytest.raises(BudgetExceeded) as caught:
        ctx.checkpoint({"i": 3})
    assert caught.value.requirement == "DHP-BUD-002"
    with pytest.raises(BudgetExceeded):  # the context knows it lost the handoff
        ctx.heartbeat()
    status = _valid_status(dhp.status(store, hid))
    assert status["state"] == "dead_lettered" and status["fence"] == 1
    assert status["checkpoints"]["count"] == 2
    [entry] = dhp.dlq(store)
    assert entry["handoff_id"] == hid and entry["reason"].startswith("max_steps")
    assert entry["envelope"]["intent"]["budget"] == {"max_steps": 2}
    assert dhp.last_checkpoint(store, hid) == {"i": 2}
    dhp.export_log(store, hid, tmp_path / "dlq.jsonl")  # still exportable
    with pytest.raises(Conflict):
        dhp.claim(store, hid, "w2")
    dhp.requeue(store, hid)
    status = _valid_status(dhp.status(store, hid))
    assert (status["state"], status["attempts"], status["steps"], status["fence"]) == \
        ("pending", 0, 0, 1)
    assert dhp.dlq(store) == []
    with pytest.raises(Conflict):
        dhp.requeue(store, hid)
    with dhp.claim(store, hid, "w2") as ctx:
        assert ctx.fence == 2 and ctx.last_checkpoint == {"i": 2}
        assert ctx.checkpoint({"i": 3})["seq"] == 3


@pytest.mark.covers("DHP-BUD-001", "DHP-BUD-003")
def test_max_attempts_and_max_spend(store):
    hid = _dispatch(store, budget={"max_attempts": 2})
    dhp.claim(store, hid, "w1").release()
    dhp.claim(store, hid, "w2").release()
    with pytest.raises(BudgetExceeded) as caught:
        dhp.claim(store, hid, "w3")
    assert caught.value.requirement == "DHP-BUD-001"
    assert dhp.status(store, hid)["dlq_reason"].startswith("max_attempts")
    spend = _dispatch(store, n=1, budget={"max_spend": 1.0})
    ctx = dhp.claim(store, spend, "w1")
    ctx.checkpoint({}, spend=0.75)
    with pytest.raises(BudgetExceeded):
        ctx.checkpoint({}, spend=0.5)
    assert dhp.status(store, spend)["spend"] == 0.75
    with pytest.raises(InvalidInput):
        dhp.claim(store, _dispatch(store, n=3), "w").checkpoint({}, spend=-1)


def test_idempotency_key_is_stable_per_step_and_fence(store):
    hid = _dispatch(store)
    ctx = dhp.claim(store, hid, "w1")
    key = ctx.idempotency_key("charge-card")
    assert key == ctx.idempotency_key("charge-card") and len(key) == 64
    assert key != ctx.idempotency_key("send-mail") != ctx.idempotency_key(1)
    ctx.release()
    ctx2 = dhp.claim(store, hid, "w1")
    assert ctx2.idempotency_key("charge-card") != key  # new fence, new key
    ctx2.release()


@pytest.mark.covers("DHP-FEN-003", "DHP-FEN-004", "DHP-LSE-009")
def test_stale_writes_change_nothing(store):
    hid = _dispatch(store)
    old = dhp.claim(store, hid, "w1")
    old.checkpoint({"i": 1})
    old._finish()  # stop its heartbeats: let it go stale
    old_fence = old.fence
    store.ttl = 0.3
    with pytest.raises(Conflict):
        dhp.recover(store, hid, "w2")
    operations.simple(store, hid, "orphan", owner_dead=True)  # the supervisor's view
    new = dhp.recover(store, hid, "w2")
    for call in (lambda: old.checkpoint({"i": "stale"}), old.heartbeat,
                 lambda: old.complete({"n": 1, "s": "stale"}), old.release):
        with pytest.raises(LeaseLost):
            call()
    # the same worker id and fence from another process incarnation is fenced out too
    with pytest.raises(LeaseLost, match="incarnation"):
        operations.write(store, hid, "checkpoint", "w2", new.fence, state={},
                         incarnation="f" * 32)
    status = dhp.status(store, hid)
    assert (status["fence"], status["owner"], status["checkpoints"]["count"]) == \
        (old_fence + 1, "w2", 1)
    new.release()


@pytest.mark.covers("DHP-LSE-003")
def test_list_handoffs_filters(store):
    a = _dispatch(store, n=1, kind="a")
    b = _dispatch(store, n=2, kind="b")
    ctx = dhp.claim(store, b, "w", ttl=0.3, heartbeat_interval=5.0 * 0.05)
    ctx._finish()  # no more heartbeats: the lease lapses
    assert [s["handoff_id"] for s in dhp.list_handoffs(store, task_kind="a")] == [a]
    assert [s["handoff_id"] for s in dhp.list_handoffs(store, state="claimed")] == [b]
    time.sleep(0.35)
    assert [s["handoff_id"] for s in dhp.list_handoffs(store, state="orphaned")] == [b]
    assert _valid_status(dhp.status(store, b))["state"] == "orphaned"
    assert dhp.list_handoffs(store, state="claimed") == []
    with pytest.raises(InvalidInput):
        dhp.list_handoffs(store, state="running")


@pytest.mark.covers("DHP-LOG-008", "DHP-SEC-001")
def test_export_import_to_a_standby(store, tmp_path):
    hid = _dispatch(store)
    with dhp.claim(store, hid, "w1") as ctx:
        for i in range(3):
            ctx.checkpoint({"i": i})
    dhp.export_log(store, hid, tmp_path / "h.jsonl")
    standby = dhp.Store(tmp_path / "standby")
    assert dhp.import_log(standby, tmp_path / "h.jsonl") == hid
    assert dhp.import_log(standby, tmp_path / "h.jsonl") == hid  # twice is harmless
    status = _valid_status(dhp.status(standby, hid))
    assert (status["state"], status["fence"], status["checkpoints"]["count"]) == \
        ("orphaned", 1, 3)
    with dhp.recover(standby, hid, "standby") as ctx:
        assert (ctx.fence, ctx.last_checkpoint) == (2, {"i": 2})
        ctx.checkpoint({"i": 3})
        ctx.complete({"n": 3, "s": "done"})
    assert dhp.check_integrity(standby) == []
    dhp.export_log(standby, hid, tmp_path / "done.jsonl")
    third = dhp.Store(tmp_path / "third")
    dhp.import_log(third, tmp_path / "done.jsonl")
    assert dhp.result(third, hid) == {"n": 3, "s": "done"}
    # the original store can take the longer chain from the standby
    dhp.import_log(store, tmp_path / "done.jsonl")
    assert dhp.status(store, hid)["state"] == "completed"

    lines = (tmp_path / "h.jsonl").read_text().splitlines()
    record = json.loads(lines[2])
    record["record"]["state"] = {"i": "forged"}
    lines[2] = json.dumps(record)
    (tmp_path / "bad.jsonl").write_text("\n".join(lines) + "\n")
    fresh = dhp.Store(tmp_path / "fresh")
    with pytest.raises(IntegrityError):
        dhp.import_log(fresh, tmp_path / "bad.jsonl")
    assert dhp.list_handoffs(fresh) == []  # nothing stored from a bad log
    for s in (standby, third, fresh):
        s.close()


@pytest.mark.covers("DHP-ERR-001", "DHP-ERR-002", "DHP-ERR-003")
def test_every_raised_error_is_a_typed_protocol_error(store):
    hid = _dispatch(store, budget={"max_steps": 1})
    ctx = dhp.claim(store, hid, "w1")
    raised: list[DHPError] = []
    for call in (lambda: dhp.claim(store, hid, "w2"), lambda: ctx.complete({}),
                 lambda: ctx.checkpoint({}) and ctx.checkpoint({}),
                 lambda: dhp.status(store, "sha256:" + "1" * 64)):
        try:
            call()
        except DHPError as exc:
            raised.append(exc)
    assert [e.code for e in raised] == ["conflict", "schema_violation", "budget_exceeded",
                                       "not_found"]
    for exc in raised:
        assert schemas.errors("error", exc.to_dict()) == []
        assert exc.definite


@pytest.mark.covers("DHP-CJ-007", "DHP-CKP-002")
def test_a_state_that_is_not_json_is_refused_and_nothing_is_stored(store):
    ctx = dhp.claim(store, _dispatch(store, n=41), "w1")
    with pytest.raises(InvalidInput, match=r"\$\.state\.bad"):
        ctx.checkpoint({"bad": {1, 2}})
    assert dhp.checkpoints(store, ctx.handoff_id) == []
    assert dhp.status(store, ctx.handoff_id)["steps"] == 0
    assert ctx.checkpoint({"ok": True})["seq"] == 1  # the lease is kept, the chain starts at 1
    ctx.release()


@pytest.mark.covers("DHP-ID-004")
def test_dispatch_many_stores_all_in_one_go_with_the_ids_of_dispatch(store, tmp_path):
    items = [{"task_kind": "job", "inputs": {"n": n}, "output_schema": RESULT_SCHEMA}
             for n in range(5)]
    items.append(dict(items[0]))  # the same intent twice in one batch: one handoff
    ids = dhp.dispatch_many(store, items)
    other = dhp.Store(tmp_path / "other")
    assert ids == [_dispatch(other, n) for n in [0, 1, 2, 3, 4, 0]]
    assert len(dhp.list_handoffs(store)) == 5
    assert dhp.dispatch_many(store, items) == ids  # idempotent, like dispatch
    assert dhp.dispatch_many(store, []) == []
    for hid in ids:  # the stored envelope is the checked one (its text is built, not encoded)
        envelope = dhp.envelope_of(store, hid)
        assert schemas.errors("envelope", envelope) == []
        assert envelope["handoff_id"] == hid


@pytest.mark.covers("DHP-ID-002", "DHP-ENV-004")
@pytest.mark.parametrize("bad, message", [
    ({"task_kind": "job", "inputs": {}, "output_schema": {"type": 3}}, "output_schema"),
    ({"task_kind": "", "inputs": {}, "output_schema": {}}, "task_kind"),
    ({"task_kind": "job", "inputs": {}}, "items[1]"),
    ({"task_kind": "job", "inputs": {}, "output_schema": {}, "extra": 1}, "items[1]"),
])
def test_dispatch_many_stores_nothing_when_one_item_is_bad(store, bad, message):
    good = {"task_kind": "job", "inputs": {"n": 1}, "output_schema": RESULT_SCHEMA}
    with pytest.raises(InvalidInput, match=message.replace("[", r"\[")):
        dhp.dispatch_many(store, [good, bad])
    assert dhp.list_handoffs(store) == []
