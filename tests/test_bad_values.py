"""Values no store can keep are refused as invalid_input naming the member, the same on both
backends and through MCP, and change nothing: a control character in a task kind
(DHP-ID-006; a NUL was `internal` on Postgres and stored on SQLite) and a spend beyond every
double (10**400 raised a bare OverflowError)."""

from __future__ import annotations

import asyncio

import dhp
import pytest


@pytest.mark.covers("DHP-ID-006")
@pytest.mark.parametrize("kind", ["etl\x00import", "etl\x1bimport", "etl\x7f", "\n"])
def test_a_control_character_in_a_task_kind_is_invalid_input(store_location, kind):
    store = dhp.Store(store_location)
    try:
        with pytest.raises(dhp.InvalidInput, match=r"\$\.task_kind: a task kind must not "
                                                    "contain a control character") as info:
            dhp.dispatch(store, kind, {}, {}, {})
        assert info.value.requirement == "DHP-ID-006"
        assert dhp.list_handoffs(store) == []
        dhp.dispatch(store, "etl.import-é", {}, {}, {})  # any other character is fine
    finally:
        store.close()


@pytest.mark.parametrize("spend", [10**400, -10**400])
def test_a_spend_beyond_every_double_is_invalid_input(store_location, spend):
    store = dhp.Store(store_location)
    try:
        hid = dhp.dispatch(store, "t", {}, {}, {"max_spend": 10})
        with dhp.claim(store, hid, "w1") as ctx:
            with pytest.raises(dhp.InvalidInput, match="spend must be a finite number >= 0, "
                                                       "not an integer of 401 digits"):
                ctx.checkpoint({"n": 1}, spend=spend)
            ctx.checkpoint({"n": 2}, spend=1)  # the lease is intact
        status = dhp.status(store, hid)
        assert status["spend"] == 1 and status["checkpoints"]["count"] == 1
    finally:
        store.close()


def test_through_mcp_both_are_invalid_input(tmp_path):
    pytest.importorskip("mcp", reason="the MCP server tests need the mcp extra")
    from mcp import Client
    from mcp_agent import server

    async def go():
        async with Client(server(str(tmp_path)), read_timeout_seconds=60) as c:
            bad = await c.call_tool("dispatch", {"task_kind": "a\x00b", "inputs": {},
                                                 "output_schema": {}})
            assert bad.is_error, bad
            error = bad.structured_content["error"]
            assert error["code"] == "invalid_input" and "$.task_kind" in error["message"]
            hid = (await c.call_tool("dispatch", {"task_kind": "t", "inputs": {},
                                                  "output_schema": {}})
                   ).structured_content["handoff_id"]
            lease = (await c.call_tool("claim", {"handoff_id": hid, "worker_id": "w"})
                     ).structured_content["lease"]
            bad = await c.call_tool("checkpoint", {"lease": lease, "state": 1,
                                                   "spend": 10**400})
            assert bad.is_error, bad
            error = bad.structured_content["error"]
            assert error["code"] == "invalid_input" and "spend" in error["message"], error
    asyncio.run(go())
