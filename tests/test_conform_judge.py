"""How the kit judges: no false positives on histories a correct implementation can produce,
findings attributed to the requirement their check was built for, and verdicts that say which
requirements no check judged."""

from __future__ import annotations

import pytest
from dhp_conform import checkers

H = "sha256:" + "c" * 64
KIND = "conform.chaos"


def _event(i, t, kind, op, process="p", **kw):
    return {"index": i, "time": t, "type": kind, "op": op, "process": process,
            "scenario": "s", **kw}


def _blind_take_history(outcome: dict) -> list[dict]:
    """Replayed from a chaos run of the reference: c1 takes the handoff with claim_next
    (fence 1) and is killed; c2's claim_next takes it (fence 2) but c2 is killed before it
    answers, so no event names the handoff; c3's recover then gets fence 3."""
    dispatch = {"task_kind": KIND, "inputs": {"n": 0}, "output_schema": {}, "budget": {}}
    take = {"task_kinds": [KIND]}
    return [
        _event(0, 0.00, "invoke", "dispatch", "feeder", args=dispatch),
        _event(1, 0.01, "ok", "dispatch", "feeder", invoke=0, data={"handoff_id": H}),
        _event(2, 0.02, "invoke", "claim_next", "c1", args=dict(take, worker="c1.1")),
        _event(3, 0.03, "ok", "claim_next", "c1", invoke=2,
               data={"handoff_id": H, "fence": 1, "last_checkpoint": None}),
        _event(4, 0.10, "kill", None, "c1", detail="SIGKILL c1 (worker c1.1)"),
        _event(5, 1.20, "invoke", "claim_next", "c2", args=dict(take, worker="c2.1")),
        _event(6, 1.21, *outcome["event"], "claim_next", "c2", invoke=5, **outcome["fields"]),
        _event(7, 1.22, "kill", None, "c2", detail="SIGKILL c2 (worker c2.1)"),
        _event(8, 2.50, "invoke", "recover", "c3", args={"handoff_id": H, "worker": "c3.1"}),
        _event(9, 2.51, "ok", "recover", "c3", invoke=8,
               data={"handoff_id": H, "fence": 3, "last_checkpoint": None}),
    ]


KILLED = {"event": ("info",), "fields": {"why": "c2 was killed by the kit (SIGKILL)"}}
INDEFINITE = {"event": ("fail",), "fields": {"error": {
    "code": "internal", "message": "lost", "definite": False}}}
NOTHING = {"event": ("ok",), "fields": {"data": None}}


@pytest.mark.covers("DHP-FEN-001")
@pytest.mark.parametrize("outcome", [KILLED, INDEFINITE], ids=["killed", "indefinite-error"])
def test_a_blind_claim_next_of_unknown_outcome_may_have_bumped_the_fence(outcome):
    assert checkers.check_scenario(_blind_take_history(outcome), ttl=1.0) == []


@pytest.mark.covers("DHP-FEN-001")
def test_a_fence_jump_with_no_take_in_flight_is_still_found():
    findings = checkers.check_scenario(_blind_take_history(NOTHING), ttl=1.0)
    assert [f.check for f in findings] == ["history:fence-step"]
    assert findings[0].requirements[0] == "DHP-FEN-001"
    assert "0 take(s) of unknown outcome" in findings[0].explanation


@pytest.mark.covers("DHP-FEN-001")
def test_a_blind_take_of_another_task_kind_explains_no_jump():
    events = _blind_take_history(KILLED)
    events[5]["args"] = {"task_kinds": ["other.kind"], "worker": "c2.1"}
    assert [f.check for f in checkers.check_scenario(events, ttl=1.0)] == ["history:fence-step"]
