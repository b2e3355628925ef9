"""The MCP tool layer called in-process (dhp.agents.mcp_tools.call, no SDK, no subprocess):
list pages, handoff ids by unique prefix in tools, resources and the prompt, and a complete
retried after its answer was lost (spec/mcp.md DHP-MCP-012..014)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("mcp", reason="the MCP server tests need the mcp extra")

from dhp import api  # noqa: E402
from dhp.agents import mcp_server, mcp_tools  # noqa: E402
from dhp.agents.mcp_sessions import AgentSession  # noqa: E402
from dhp_conform import oracle  # noqa: E402
from mcp.shared.exceptions import MCPError  # noqa: E402

SCHEMA = {"type": "object", "required": ["total"], "properties": {"total": {"type": "integer"}}}


@pytest.fixture
def session(tmp_path):
    s = AgentSession(api.Store(tmp_path / "store"))
    yield s
    s.end()


def call(session: AgentSession, tool: str, args: dict) -> dict:
    """The result (checked against the binding's schema), or the error object."""
    try:
        out = mcp_tools.call(session, tool, args)
    except mcp_tools.ToolFailure as failure:
        assert oracle.binding_errors("tool_error", failure.content) == []
        return failure.content["error"]
    assert oracle.binding_errors(f"{tool}.result", out) == [], (tool, out)
    return out


def dispatch(session: AgentSession, n: int, kind: str = "test.tools") -> str:
    return call(session, "dispatch", {"task_kind": kind, "inputs": {"n": n},
                                      "output_schema": SCHEMA})["handoff_id"]


def colliding(kind: str = "test.tools") -> tuple[int, int]:
    """Two inputs n whose handoff ids share their first 4 hex digits."""
    seen: dict[str, int] = {}
    for n in range(100_000):
        head = oracle.handoff_id(oracle.intent_of({"task_kind": kind, "inputs": {"n": n},
                                                   "output_schema": SCHEMA}))[7:11]
        if head in seen:
            return seen[head], n
        seen[head] = n
    raise AssertionError("unreachable")


# --- list pages (DHP-MCP-012) -------------------------------------------------------------------

@pytest.mark.covers("DHP-MCP-012")
def test_list_pages_newest_first_with_a_cursor(session):
    made = [dispatch(session, n) for n in range(7)]
    dispatch(session, 99, kind="test.other")
    seen, cursor, pages = [], None, 0
    while True:
        args = {"task_kind": "test.tools", "limit": 3, **({"cursor": cursor} if cursor else {})}
        page = call(session, "list", args)
        assert len(page["handoffs"]) <= 3
        seen += [h["handoff_id"] for h in page["handoffs"]]
        pages, cursor = pages + 1, page["next_cursor"]
        if cursor is None:
            break
    assert seen == made[::-1] and pages == 3


@pytest.mark.covers("DHP-MCP-012")
def test_list_has_a_small_default_page_and_a_bounded_limit(session):
    for n in range(mcp_tools.LIST_LIMIT + 1):
        dispatch(session, n)
    page = call(session, "list", {})
    assert len(page["handoffs"]) == 50 and page["next_cursor"] is not None
    assert call(session, "list", {"cursor": page["next_cursor"]})["next_cursor"] is None
    too_many = call(session, "list", {"limit": 501})
    assert too_many["code"] == "invalid_input" and "limit" in too_many["message"]


@pytest.mark.covers("DHP-MCP-012")
@pytest.mark.parametrize("cursor", ["zz", "9" * 40, "-1"])
def test_a_bad_cursor_is_invalid_input_naming_the_cursor(session, cursor):
    dispatch(session, 1)
    error = call(session, "list", {"cursor": cursor})
    assert error["code"] == "invalid_input" and "cursor" in error["message"], error


def test_resources_list_is_paged_too(session):
    for n in range(mcp_tools.LIST_LIMIT + 2):
        dispatch(session, n)
    first = mcp_server._resource_page(session, None)
    assert len(first) == mcp_tools.LIST_LIMIT and first.cursor is not None
    assert len(mcp_server._resource_page(session, first.cursor)) == 2
    with pytest.raises(MCPError, match="bad cursor"):
        mcp_server._resource_page(session, "nope")


# --- ids by unique prefix (DHP-MCP-013) ------------------------------------------------------

@pytest.mark.covers("DHP-MCP-013")
@pytest.mark.parametrize("cut", [slice(7, 11), slice(7, 19), slice(0, 19), slice(0, 71)])
def test_every_handoff_id_argument_takes_a_unique_prefix(session, cut):
    hid = dispatch(session, 1)
    ref = hid[cut]
    assert call(session, "status", {"handoff_id": ref})["handoff_id"] == hid
    assert call(session, "last_checkpoint", {"handoff_id": ref})["handoff_id"] == hid
    taken = call(session, "claim", {"handoff_id": ref, "worker_id": "w"})
    assert taken["lease"]["handoff_id"] == hid  # the token always holds the full id
    call(session, "complete", {"lease": taken["lease"], "result": {"total": 1}})
    assert call(session, "result", {"handoff_id": ref}) == {"handoff_id": hid,
                                                           "result": {"total": 1}}
    other = dispatch(session, 2)
    assert call(session, "cancel", {"handoff_id": other[7:15]})["status"]["state"] == "cancelled"
    taken = call(session, "claim", {"handoff_id": dispatch(session, 3)[7:15], "worker_id": "w"})
    call(session, "release", {"lease": taken["lease"]})
    assert call(session, "recover", {"handoff_id": taken["lease"]["handoff_id"][7:15],
                                     "worker_id": "v"})["lease"]["fence"] == 2


@pytest.mark.covers("DHP-MCP-013")
def test_an_ambiguous_prefix_lists_candidates_and_an_unknown_one_is_not_found(session):
    a, b = colliding()
    ids = sorted([dispatch(session, a), dispatch(session, b)])
    error = call(session, "status", {"handoff_id": ids[0][7:11]})
    assert error["code"] == "invalid_input" and "ambiguous" in error["message"]
    assert all(h in error["message"] for h in ids), error
    unknown = next(p for p in ("0000", "ffff", "0f0f") if not any(h[7:].startswith(p)
                                                                  for h in ids))
    error = call(session, "claim", {"handoff_id": unknown, "worker_id": "w"})
    assert error["code"] == "not_found" and unknown in error["message"]
    error = call(session, "status", {"handoff_id": "abc"})  # under 4 digits: malformed
    assert error["code"] == "invalid_input" and "handoff_id" in error["message"]


@pytest.mark.covers("DHP-MCP-013")
def test_resources_and_the_prompt_take_a_prefix(session):
    hid = dispatch(session, 1)
    for part in ("status", "checkpoints", "log"):
        mime, text = mcp_server.read_resource(session, f"dhp://handoffs/{hid[7:15]}/{part}")
        assert hid in text or part == "checkpoints"
    assert json.loads(mcp_server.read_resource(
        session, f"dhp://handoffs/{hid[:15]}/status")[1])["handoff_id"] == hid
    with pytest.raises(MCPError, match="no handoff 0000"):
        mcp_server.read_resource(session, "dhp://handoffs/0000/status")
    with pytest.raises(MCPError, match="bad handoff_id"):
        mcp_server.read_resource(session, "dhp://handoffs/xyz/status")
    prompt = mcp_server.resume_prompt(session, {"handoff_id": hid[7:15]})
    assert hid in prompt.messages[0].content.text
    with pytest.raises(MCPError, match="bad handoff_id"):
        mcp_server.resume_prompt(session, {})


# --- a complete retried after its answer was lost (DHP-MCP-014) -------------------------------

@pytest.mark.covers("DHP-MCP-014")
def test_a_retried_complete_with_the_same_result_is_a_success(session):
    hid = dispatch(session, 1)
    lease = call(session, "claim", {"handoff_id": hid, "worker_id": "w"})["lease"]
    assert call(session, "complete", {"lease": lease, "result": {"total": 3}}) == {
        "handoff_id": hid, "state": "completed"}
    again = call(session, "complete", {"lease": lease, "result": {"total": 3.0}})  # same JSON
    assert again == {"handoff_id": hid, "state": "completed", "already_completed": True,
                     "result": {"total": 3}}


@pytest.mark.covers("DHP-MCP-014", "DHP-MCP-009")
def test_any_other_complete_of_a_completed_handoff_is_still_refused(session, tmp_path):
    hid = dispatch(session, 1)
    lease = call(session, "claim", {"handoff_id": hid, "worker_id": "w"})["lease"]
    call(session, "complete", {"lease": lease, "result": {"total": 3}})
    assert call(session, "complete", {"lease": lease, "result": {"total": 4}})["code"] \
        == "lease_lost"
    stale = dict(lease, fence=lease["fence"] + 1)
    assert call(session, "complete", {"lease": stale, "result": {"total": 3}})["code"] \
        == "lease_lost"
    other = AgentSession(api.Store(tmp_path / "store"))
    try:
        assert call(other, "complete", {"lease": lease, "result": {"total": 3}})["code"] \
            == "lease_lost"
    finally:
        other.end()
    assert call(session, "result", {"handoff_id": hid})["result"] == {"total": 3}


# --- start-up: nothing heavy before the first tool call ---------------------------------------

STDIO_PATH = """
import sys, tempfile
from dhp.agents import mcp_cli, mcp_server, mcp_tools
from dhp import api
from dhp.agents.mcp_sessions import AgentSession
session = AgentSession(api.Store(tempfile.mkdtemp()))
mcp_server.build(lambda ctx, purpose, arguments: (session, lambda: None))
assert mcp_server.tools()
before = sorted(m for m in sys.modules if m.split(".")[0] == "jsonschema")
mcp_tools.call(session, "health", {})
after = "jsonschema" in sys.modules
session.end()
print(before, after)
"""


def test_the_stdio_server_answers_tools_list_without_compiling_validators():
    """What the first tools/list of a stdio session needs does not import jsonschema and its
    format checkers: each tool's validator is built at its first call. (uvicorn and starlette
    come with the SDK's own imports: bench/README.md, start-up.)"""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", STDIO_PATH], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[] True"


@pytest.mark.covers("DHP-BUD-008", "DHP-BUD-011")
def test_release_with_a_failure_keeps_why_and_the_last_attempt_dead_letters(session):
    """An agent says why its attempt failed; status and dlq show it; the last allowed attempt
    goes to the dead-letter queue at once."""
    hid = call(session, "dispatch", {"task_kind": "k", "inputs": {"n": 1},
                                     "output_schema": SCHEMA,
                                     "budget": {"max_attempts": 2}})["handoff_id"]
    lease = call(session, "claim", {"handoff_id": hid, "worker_id": "a"})["lease"]
    why = {"type": "UpstreamError", "message": "the API answered 503"}
    assert call(session, "release", {"lease": lease, "failure": why}) == {
        "handoff_id": hid, "state": "released"}
    failures = call(session, "status", {"handoff_id": hid})["failures"]
    assert [(f["type"], f["message"], f["attempt"]) for f in failures] == [
        ("UpstreamError", "the API answered 503", 1)]
    other = call(session, "dispatch", {"task_kind": "k", "inputs": {"n": 2},
                                       "output_schema": SCHEMA,
                                       "budget": {"max_attempts": 1}})["handoff_id"]
    lease = call(session, "claim", {"handoff_id": other, "worker_id": "a"})["lease"]
    assert call(session, "release", {"lease": lease, "failure": why})["state"] \
        == "dead_lettered"
    parked = call(session, "dlq", {})
    entry = next(e for e in parked["entries"] if e["status"]["handoff_id"] == other)
    assert entry["reason"] == "max_attempts"
    assert entry["status"]["failures"][-1]["message"] == "the API answered 503"
    assert call(session, "release", {"lease": lease, "failure": {"type": ""}})["code"] \
        == "invalid_input"
