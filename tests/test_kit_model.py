"""The kit's own model of the state machine (dhp_conform.model, which the reach suite compares
implementations with) agrees with every fencing vector: a model that disagreed with the spec's
own decision table would fail correct implementations."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from dhp_conform.model import Handoff, status_differences

VECTORS = json.loads((Path(__file__).resolve().parent.parent / "vectors" / "fencing.json")
                     .read_text(encoding="utf-8"))["tests"]


def _model(record: dict) -> Handoff:
    h = Handoff("sha256:" + "0" * 64, "k", record["budget"])
    h.state, h.owner, h.fence = record["state"], record["owner"], record["fence"]
    h.expires, h.attempts = record["lease_expires_at"], record["attempts"]
    h.steps, h.spend, h.first_claim = record["steps"], record["spend"], record["first_claimed_at"]
    h.dlq_reason = record.get("dlq_reason")
    return h


@pytest.mark.parametrize("vector", VECTORS, ids=[v["id"] for v in VECTORS])
@pytest.mark.covers("DHP-STM-002", "DHP-FEN-006")
def test_model_agrees_with_the_fencing_vectors(vector):
    inp, expected = vector["input"], vector["expected"]
    h, op, now = _model(inp["record"]), inp["op"], inp["now"]
    name = op["name"]
    if name in ("claim", "recover"):
        out = h.take(name, op["worker"], op["ttl"], now, owner_dead=bool(op.get("owner_dead")))
    elif name == "cancel":
        out = h.cancel()
    else:
        valid = name != "complete" or jsonschema.Draft202012Validator(
            inp.get("output_schema") or {}).is_valid(op.get("result"))
        out = h.write(name, op["worker"], op["fence"], now, ttl=op.get("ttl"),
                      state=op.get("state") if name == "checkpoint" else op.get("result"),
                      spend=op.get("spend", 0), valid=valid)
    want = expected.get("error") if expected["outcome"] == "reject" else None
    assert out.code == want, f"{vector['id']}: model {out.code}, vector {want}"
    after = expected["record"]
    got = {"state": h.state, "owner": h.owner, "fence": h.fence, "attempts": h.attempts,
           "steps": h.steps, "spend": h.spend, "first_claimed_at": h.first_claim,
           "lease_expires_at": h.expires}
    assert not status_differences({k: after[k] for k in got if k in after}, got)
    if expected.get("dlq_reason"):
        assert h.dlq_reason == expected["dlq_reason"]


def test_status_comparison_names_the_differing_fields():
    h = Handoff("sha256:" + "1" * 64, "k", {})
    h.take("claim", "w", 10, 0)
    good = dict(h.status(4), lease_expires_in=6.0000001)
    assert status_differences(h.status(4), good) == {}
    bad = dict(good, attempts=2, owner="x")
    assert set(status_differences(h.status(4), bad)) == {"attempts", "owner"}
    expired = h.status(10)  # at the expiry instant: orphaned, the lease null or <= 0
    assert expired["state"] == "orphaned" and expired["owner"] is None
    assert status_differences(expired, dict(good, state="orphaned", owner=None,
                                            lease_expires_in=0)) == {}
    assert "lease_expires_in" in status_differences(expired, dict(
        good, state="orphaned", owner=None, lease_expires_in=0.5))
