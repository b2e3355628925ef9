"""Behaviours the mutation run (tools/mutation.py, bench/mutation/) found that no test held:
each test here kills a mutant that the module's own test files let survive."""

from __future__ import annotations

import pytest
from dhp import InvalidInput, api

KIND = "mutation.found"


def _nested(depth: int, objects: bool) -> object:
    value: object = 0
    for _ in range(depth):
        value = {"k": value} if objects else [value]
    return value


@pytest.mark.covers("DHP-LIM-001", "DHP-LIM-004")
@pytest.mark.parametrize("objects", [False, True], ids=["arrays", "objects"])
def test_the_depth_limit_counts_objects_as_well_as_arrays(tmp_path, objects):
    """Inputs are `{"deep": ...}`: one level for the outer object. 128 levels (the default
    limit) are stored; 129 are refused, naming the path, whether the levels are objects or
    arrays (a walk that counted only arrays let any depth of objects through)."""
    store = api.Store(tmp_path)
    try:
        api.dispatch(store, KIND, {"deep": _nested(127, objects)}, {}, None)
        with pytest.raises(InvalidInput) as info:
            api.dispatch(store, KIND, {"deep": _nested(128, objects), "n": 2}, {}, None)
        assert info.value.requirement == "DHP-LIM-004"
        assert "$.inputs.deep" in info.value.message
        assert len(api.list_handoffs(store)) == 1
    finally:
        store.close()


@pytest.mark.covers("DHP-TRN-017")
def test_a_failed_group_commit_fails_only_its_own_requests(tmp_path, monkeypatch):
    """Ingest commits the requests that queued up meanwhile together (group commit), and an
    atomic one (a whole log) alone after them. When the shared transaction fails, its
    requests get the error, and the atomic request queued behind them is still served: it
    must neither get their error nor come back empty."""
    import threading
    import time

    import dhp
    from dhp.transport.file import STORED, Ingest

    store = api.Store(tmp_path)
    ingest = Ingest(store)
    envs = [dhp.make_envelope(dhp.make_intent(KIND, {"n": n}, {})) for n in range(2)]
    real, calls = store.transaction, []

    def failing_once(*args, **kwargs):
        calls.append(kwargs)
        if len(calls) == 1:
            raise OSError("disk full (injected)")
        return real(*args, **kwargs)

    monkeypatch.setattr(store, "transaction", failing_once)
    outcome: dict = {}

    def apply(name, env, atomic):
        try:
            outcome[name] = ingest.apply([("envelope", env)], atomic=atomic)
        except Exception as exc:  # noqa: BLE001 - the outcome under test
            outcome[name] = exc

    threads = [threading.Thread(target=apply, args=("shared", envs[0], False)),
               threading.Thread(target=apply, args=("whole", envs[1], True))]
    with ingest._lock:  # both queue up before either commits
        for t in threads:
            t.start()
        deadline = time.monotonic() + 30
        while len(ingest._queue) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(ingest._queue) == 2
    for t in threads:
        t.join(30)
    try:
        assert isinstance(outcome["shared"], OSError)
        assert outcome["whole"] == [STORED]
        assert [h["handoff_id"] for h in api.list_handoffs(store)] == [envs[1]["handoff_id"]]
    finally:
        monkeypatch.undo()
        store.close()
