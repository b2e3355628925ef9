"""Every fencing vector, three times: against dhp.core.machine.decide (the function every store
runs), against the independent model in tests/model.py, and against the real store on each
backend, SQLite and Postgres (record seeded through the store's own transaction, operation
performed through the store's operations with a test clock, record read back)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from backends import dead_owner_token
from dhp.core import machine
from dhp.store import Store
from jsonschema import Draft202012Validator
from model import FIELDS
from model import decide as model_decide

VECTORS = Path(__file__).resolve().parent.parent / "vectors" / "fencing.json"
SUITE = json.loads(VECTORS.read_text(encoding="utf-8"))
TESTS = SUITE["tests"]


def _params():
    return [pytest.param(t, id=t["id"], marks=pytest.mark.covers(*t["requirements"]))
            for t in TESTS]


def _result_errors(vector: dict) -> list[dict]:
    op = vector["input"]["op"]
    if op["name"] != "complete":
        return []
    validator = Draft202012Validator(vector["input"]["output_schema"])
    return [{"path": "$" + "".join(f"/{p}" for p in e.absolute_path), "message": e.message}
            for e in validator.iter_errors(op.get("result"))]


def _full_record(vector: dict) -> dict:
    """The vector's record with the fields it leaves out at their dispatch values."""
    given = vector["input"]["record"]
    return dict(machine.new_record(given["budget"]), **given)


def _check_record(got: dict, vector: dict, where: str) -> None:
    want = vector["expected"]["record"]
    assert {k: got[k] for k in FIELDS} == want, f"{vector['id']} ({where}): record differs"
    cap = vector["expected"].get("dlq_reason")
    if cap is not None:
        reason = got.get("dlq_reason") or ""
        assert reason.startswith(cap), f"{vector['id']} ({where}): dlq reason {reason!r}"


def test_suite_shape():
    assert SUITE["suite"] == "fencing"
    assert len(TESTS) >= 48
    ids = [t["id"] for t in TESTS]
    assert ids == [f"fencing-{n:03d}" for n in range(1, len(ids) + 1)]
    assert len({t["description"] for t in TESTS}) == len(TESTS)
    ops = {t["input"]["op"]["name"] for t in TESTS}
    assert ops == {"claim", "recover", "heartbeat", "checkpoint", "complete", "release",
                   "cancel"}
    assert {t["input"]["record"]["state"] for t in TESTS} == set(machine.STATES)


@pytest.mark.parametrize("vector", _params())
def test_machine(vector):
    inp, expected = vector["input"], vector["expected"]
    op = dict(inp["op"], result_errors=_result_errors(vector))
    out = machine.decide(_full_record(vector), op, inp["now"])
    assert ("accept" if out.accepted else "reject") == expected["outcome"], out.error
    assert (out.error.code if out.error else None) == expected.get("error")
    _check_record(out.record, vector, "machine")
    if expected["outcome"] == "reject" and expected.get("error") != "budget_exceeded":
        assert not out.changed  # DHP-STM-003 / DHP-FEN-004: a plain refusal changes nothing
    if out.error is not None:
        assert out.error.definite


@pytest.mark.parametrize("vector", _params())
def test_model(vector):
    inp, expected = vector["input"], vector["expected"]
    op = dict(inp["op"], result_invalid=bool(_result_errors(vector)))
    out = model_decide(_full_record(vector), op, inp["now"])
    assert out.outcome == expected["outcome"]
    assert out.error == expected.get("error")
    _check_record(out.record, vector, "model")


# --- against the real store ------------------------------------------------------------------

class FakeClock:
    """The store clock under the test's control."""

    def __init__(self, now: float):
        self.now = now

    def __call__(self) -> float:
        return self.now


def _owner_token(backend, vector: dict) -> str | None:
    """The liveness token stored with a claimed record: this process's (alive) unless the
    vector says the owner is dead, then the token of a lock nobody holds."""
    if vector["input"]["record"]["state"] != "claimed":
        return None
    if vector["input"]["op"].get("owner_dead"):
        return dead_owner_token(backend)
    return backend.liveness.token()


@pytest.mark.parametrize("vector", _params())
def test_store(vector, scratch_location):
    from dhp.core import operations

    inp, expected = vector["input"], vector["expected"]
    op = inp["op"]
    clock = FakeClock(inp["now"])
    backend = Store(scratch_location, clock=clock)
    try:
        intent = {"dhp": "1.0", "task_kind": "fencing", "inputs": {"vector": vector["id"]},
                  "output_schema": inp.get("output_schema", {}),
                  "budget": inp["record"]["budget"]}
        hid = operations.dispatch(backend, intent)
        seeded = _full_record(vector)
        seeded["last_progress_at"] = seeded["first_claimed_at"]
        with backend.transaction() as tx:
            row = tx.get(hid)
            record = {k: seeded.get(k, v) for k, v in row["record"].items()}
            tx.put_record(hid, record, _owner_token(backend, vector))

        error = None
        try:
            if op["name"] in ("claim", "recover"):
                operations.take(backend, hid, op["name"], op["worker"], op["ttl"])
            elif op["name"] in machine.WRITES:
                operations.write(backend, hid, op["name"], op["worker"], op["fence"],
                                 ttl=op["ttl"], state=op.get("state"),
                                 spend=op.get("spend", 0), result=op.get("result"))
            else:
                operations.simple(backend, hid, op["name"])
        except Exception as exc:  # any failure: its code is what the vector checks
            error = getattr(exc, "code", repr(exc))

        assert error == expected.get("error")
        assert ("reject" if error else "accept") == expected["outcome"]
        with backend.transaction(write=False) as tx:
            row = tx.get(hid)
            checkpoints = tx.checkpoints(hid)
        _check_record(row["record"], vector, "store")
        wrote_checkpoint = op["name"] == "checkpoint" and expected["outcome"] == "accept"
        assert [c["fence"] for c in checkpoints] == ([op["fence"]] if wrote_checkpoint else [])
        if wrote_checkpoint:
            assert checkpoints[0]["state"] == op["state"]
            assert checkpoints[0]["spend"] == op["spend"]
        completed = op["name"] == "complete" and expected["outcome"] == "accept"
        assert (row["result"] is not None) == completed
        if completed:
            assert row["result"]["result"] == op["result"]
            assert row["result"]["fence"] == op["fence"]
    finally:
        backend.close()


def test_files_match_their_generator():
    """vectors/fencing.json and lifecycle.json are what tools/gen_fencing_vectors.py writes,
    so nobody edits one and forgets the other."""
    import importlib.util

    path = VECTORS.parent.parent / "tools" / "gen_fencing_vectors.py"
    if not path.exists():
        pytest.skip("tools/ is not shipped with an installed package")
    spec = importlib.util.spec_from_file_location("gen_fencing_vectors", path)
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    assert gen.fencing_suite() == SUITE
    lifecycle = json.loads((VECTORS.parent / "lifecycle.json").read_text(encoding="utf-8"))
    assert gen.lifecycle_suite() == lifecycle
