"""The DHP MCP server on the official `mcp` SDK's low-level `Server` (spec/mcp.md).

The low-level server is used, not MCPServer, because the tools' argument and result schemas
come from schemas/mcp-tools.json (the single source of truth) rather than from Python type
hints. Tools run in worker threads (the store is synchronous); each call is routed to its
client's `AgentSession` by `locate`, which the transport decides (mcp_cli.py).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp.server import Server
from mcp.shared.exceptions import MCPError

from dhp import __version__, api
from dhp.agents import mcp_tools
from dhp.agents.mcp_sessions import AgentSession
from dhp.core.errors import DHPError
from dhp.core.handoff_ids import check_id, resolve_id

GUIDE = Path(__file__).with_name("guide.md")
GUIDE_URI = "dhp://guide"
# The id part may be a unique prefix, as in the tools (DHP-MCP-013).
HANDOFF_URI = re.compile(r"^dhp://handoffs/([^/]+)/(status|checkpoints|log)$")
TEMPLATES = {
    "status": ("application/json", "The handoff's status (schemas/status.json)."),
    "checkpoints": ("application/json", "Every checkpoint record of the handoff, in seq order "
                                        "(schemas/checkpoint.json)."),
    "log": ("application/jsonl", "The handoff's portable JSON-lines log: envelope, "
                                 "checkpoints, result (spec: log)."),
}
INSTRUCTIONS = ("DHP keeps agent work alive across agent deaths. Claim work (claim, claim_next "
                "or recover) to get a lease token, checkpoint your progress with it after each "
                "costly step, and complete with a result that satisfies the output schema. If "
                "a tool answers lease_lost, stop: another agent has taken the work over. Read "
                f"the resource {GUIDE_URI} for the full guide.")

# Returns the session for a call and a function to run after it.
Locate = Callable[[Any, str, Any], tuple[AgentSession, Callable[[], None]]]


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


@cache
def tools() -> list[types.Tool]:
    return [types.Tool(
        name=name, description=mcp_tools.DESCRIPTIONS[name],
        input_schema=mcp_tools.tool_schema(f"{name}.args"),
        output_schema=mcp_tools.tool_schema(f"{name}.result"),
        annotations=types.ToolAnnotations(
            read_only_hint=name in mcp_tools.READ_ONLY,
            destructive_hint=name == "cancel",
            idempotent_hint=name in mcp_tools.READ_ONLY or name in ("dispatch", "cancel"),
            open_world_hint=False))
        for name in mcp_tools.names()]


def tool_result(session: AgentSession, name: str, arguments: Any) -> types.CallToolResult:
    """One tool call as the SDK's result: structured content and the same as JSON text, or
    an error result (isError) carrying the error object and the next step (DHP-MCP-004)."""
    try:
        data = mcp_tools.call(session, name, arguments)
    except mcp_tools.ToolFailure as failure:
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=failure.text())],
            structured_content=failure.content, is_error=True)
    return types.CallToolResult(content=[types.TextContent(type="text", text=_json(data))],
                                structured_content=data)


def read_resource(session: AgentSession, uri: str) -> tuple[str, str]:
    """(mime type, text) of a resource."""
    if uri == GUIDE_URI:
        return "text/markdown", GUIDE.read_text(encoding="utf-8")
    match = HANDOFF_URI.match(uri)
    if not match:
        raise MCPError(code=types.INVALID_PARAMS, message=f"unknown resource {uri!r}: the "
                       f"resources are {GUIDE_URI} and dhp://handoffs/{{handoff_id}}/"
                       "status|checkpoints|log")
    ref, part = match.groups()
    try:
        hid = resolve_id(session.store, check_id(ref, "handoff_id"))
        if part == "status":
            text = _json(api.status(session.store, hid))
        elif part == "checkpoints":
            text = _json(api.checkpoints(session.store, hid))
        else:
            text = mcp_tools.exported_log(session, hid)
    except DHPError as exc:
        raise MCPError(code=types.INVALID_PARAMS, message=str(exc)) from None
    return TEMPLATES[part][0], text


def resume_prompt(session: AgentSession, arguments: dict[str, str]) -> types.GetPromptResult:
    worker = arguments.get("worker_id") or "agent"
    try:
        hid = resolve_id(session.store, check_id(arguments.get("handoff_id"), "handoff_id"))
        status = api.status(session.store, hid)
        last = api.last_checkpoint(session.store, hid)
        inputs = api.envelope_of(session.store, hid)["intent"]["inputs"]
    except DHPError as exc:
        raise MCPError(code=types.INVALID_PARAMS, message=str(exc)) from None
    take = "recover" if status["state"] in ("claimed", "orphaned") else "claim"
    text = (
        f"You are resuming DHP handoff {hid} ({status['task_kind']}), now {status['state']} "
        f"with {status['checkpoints']['count']} checkpoint(s).\n\n"
        f"1. Call `{take}` with handoff_id {hid} and worker_id {worker!r}. Keep the `lease` it "
        "returns; every write needs it. If it answers conflict, the previous holder is still "
        "alive: wait or pick other work with claim_next.\n"
        "2. Resume from `last_checkpoint` in its answer (below as it is now). Do not redo work "
        "it records as done.\n"
        "3. After each step that would be costly to redo, call `checkpoint` with the lease and "
        "a state holding everything another agent needs to continue.\n"
        "4. When done, call `complete` with a result that satisfies `output_schema`.\n"
        "5. If any call answers lease_lost, cancelled or budget_exceeded, stop working on it.\n\n"
        f"Inputs: {_json(inputs)}\nLast checkpoint: {_json(last)}")
    return types.GetPromptResult(
        description=f"Resume {hid} from its last checkpoint",
        messages=[types.PromptMessage(role="user",
                                      content=types.TextContent(type="text", text=text))])


def _resource_page(session: AgentSession, after: str | None) -> api.Page:
    try:
        return api.list_handoffs(session.store, limit=mcp_tools.LIST_LIMIT, after=after)
    except (DHPError, OverflowError):
        raise MCPError(code=types.INVALID_PARAMS, message=f"bad cursor {after!r}: pass the "
                       "nextCursor an earlier resources/list returned, unchanged") from None


PROMPTS = [types.Prompt(
    name="resume_handoff",
    description="How to resume a DHP handoff from its last checkpoint: take it over, read the "
                "checkpoint, continue, checkpoint, complete.",
    arguments=[types.PromptArgument(name="handoff_id", description="The handoff to resume: its id "
                                    "or a unique prefix of it (at least 4 hex digits).",
                                    required=True),
               types.PromptArgument(name="worker_id", description="Your worker name.",
                                    required=False)])]


def build(locate: Locate) -> Server:
    """The MCP server; `locate(ctx, tool_or_purpose, arguments)` gives the session. Nothing
    is compiled here: each tool's validator is built at its first call, so the first
    tools/list is answered as soon as the SDK is loaded."""

    async def in_session(ctx: Any, purpose: str, arguments: Any, fn: Callable, *args: Any):
        session, after = locate(ctx, purpose, arguments)
        try:
            return await anyio.to_thread.run_sync(fn, session, *args)
        finally:
            after()

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools())

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        return await in_session(ctx, params.name, params.arguments, tool_result, params.name,
                                params.arguments)

    async def list_resources(ctx: Any, params: Any) -> types.ListResourcesResult:
        # Paged like the list tool, newest first: a big store never floods the client.
        after = getattr(params, "cursor", None) if params is not None else None
        found = await in_session(ctx, "list", None, _resource_page, after)
        return types.ListResourcesResult(next_cursor=found.cursor, resources=[
            types.Resource(name="guide", uri=GUIDE_URI, mime_type="text/markdown",
                           description="How an agent works with DHP: when to dispatch, how "
                                       "often to checkpoint, what to put in a checkpoint, how "
                                       "to recover."),
            *(types.Resource(name=f"{h['task_kind']} {h['handoff_id'][7:19]}",
                             uri=f"dhp://handoffs/{h['handoff_id']}/status",
                             mime_type="application/json",
                             description=f"Status of handoff {h['handoff_id']} ({h['state']}).")
              for h in found)])

    async def list_templates(ctx: Any, params: Any) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(resource_templates=[
            types.ResourceTemplate(name=f"handoff {part}", mime_type=mime, description=desc,
                                   uri_template=f"dhp://handoffs/{{handoff_id}}/{part}")
            for part, (mime, desc) in TEMPLATES.items()])

    async def read(ctx: Any, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        uri = str(params.uri)
        mime, text = await in_session(ctx, "read", None, read_resource, uri)
        return types.ReadResourceResult(contents=[
            types.TextResourceContents(uri=uri, mime_type=mime, text=text)])

    async def list_prompts(ctx: Any, params: Any) -> types.ListPromptsResult:
        return types.ListPromptsResult(prompts=PROMPTS)

    async def get_prompt(ctx: Any, params: types.GetPromptRequestParams) -> types.GetPromptResult:
        if params.name != "resume_handoff":
            raise MCPError(code=types.INVALID_PARAMS, message=f"unknown prompt {params.name!r}; "
                           "the prompt is resume_handoff")
        return await in_session(ctx, "read", None, resume_prompt, params.arguments or {})

    return Server("dhp-mcp", version=__version__, instructions=INSTRUCTIONS,
                  on_list_tools=list_tools, on_call_tool=call_tool,
                  on_list_resources=list_resources, on_list_resource_templates=list_templates,
                  on_read_resource=read, on_list_prompts=list_prompts,
                  on_get_prompt=get_prompt)
