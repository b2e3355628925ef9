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
