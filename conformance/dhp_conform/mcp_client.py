"""The kit's side of the MCP binding (spec/mcp.md): a client session of the official `mcp`
SDK, either with a server it starts over stdio or with a server over streamable HTTP
(`mcp_http`), and its tool calls.

The server command is a template: `{data}` becomes the scenario's data folder (empty: the
server creates its store there) and `{ttl}` the lease length, e.g.
`dhp-mcp --root {data} --create --ttl {ttl}` (the other placeholders: mcp_http). A tool call
answers a `ToolReply`: the structured content of a success, or of an error result
({"error", "next_step"}).
"""

from __future__ import annotations

import os
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .mcp_http import fill

TOOLS = ["dispatch", "claim", "claim_next", "recover", "checkpoint", "heartbeat", "complete",
         "release", "status", "last_checkpoint", "result", "cancel", "list", "dlq", "requeue",
         "health"]


def sdk_missing() -> str | None:
    """Why the MCP profile cannot run here, or None."""
    try:
        import mcp  # noqa: F401
    except ImportError:
        return "the MCP profile needs the official MCP SDK: pip install 'mcp>=2.3'"
    return None


def command(template: list[str], data: Path, ttl: float) -> list[str]:
    return fill(template, {"data": data, "ttl": float(ttl)})


def scenario_session(template: list[str], params: dict, *, mode: str | None = None,
                     **kwargs: Any) -> Session:
    """A session with a scenario's server (mcp_http.Servers.prepare wrote `params`): over
    HTTP to its URL, else with a server of its own over stdio."""
    if params.get("url"):
        return Session(url=params["url"], mode=mode or params.get("mode", "legacy"),
                       token=params.get("token"), timeout=kwargs.get("timeout", 30.0))
    return Session(fill(template, params["values"]), **kwargs)


@dataclass
class ToolReply:
    tool: str
    ok: bool
    content: Any  # structured content: the result, or {"error", "next_step"}
    text: str = ""
    problem: str | None = None  # the reply itself breaks the binding (no structured content)

    @property
    def code(self) -> str | None:
        if self.ok or not isinstance(self.content, dict):
            return None
        error = self.content.get("error")
        return error.get("code") if isinstance(error, dict) else None


class Session:
    """One MCP client session (async context manager): with a server started from `argv`
    over stdio, or, given `url`, over streamable HTTP. `mode` "legacy" is a stateful session
    that keeps an event stream open; "auto" lets the SDK use stateless requests."""

    def __init__(self, argv: list[str] | None = None, *, url: str | None = None,
                 mode: str = "legacy", token: str | None = None,
                 env: dict[str, str] | None = None, cwd: str | None = None, errlog: Any = None,
                 timeout: float = 30.0):
        self.argv, self.env, self.cwd = argv, env, cwd
        self.url, self.mode, self.token = url, mode, token
        self.errlog, self.timeout = errlog, timeout
        self._stack: AsyncExitStack | None = None
        self.client: Any = None

    def _transport(self) -> Any:
        if self.url is not None:
            import httpx2
            from mcp.client.streamable_http import streamable_http_client

            headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
            return streamable_http_client(self.url, http_client=httpx2.AsyncClient(
                headers=headers, timeout=self.timeout))
        from mcp.client.stdio import StdioServerParameters, stdio_client

        params = StdioServerParameters(command=self.argv[0], args=self.argv[1:],
                                       env=dict(self.env or os.environ), cwd=self.cwd)
        return stdio_client(params, errlog=self.errlog) if self.errlog else stdio_client(params)

    async def __aenter__(self) -> Session:
        from mcp import Client

        self._stack = AsyncExitStack()
        await self._stack.__aenter__()
        try:
            mode = {"mode": self.mode} if self.url is not None else {}
            self.client = await self._stack.enter_async_context(
                Client(self._transport(), read_timeout_seconds=self.timeout, **mode))
        except BaseException:
            await self._stack.aclose()
            raise
        return self

    async def __aexit__(self, *exc: Any) -> None:
        if self._stack is not None:
            await self._stack.aclose()

    async def call(self, tool: str, arguments: dict) -> ToolReply:
        result = await self.client.call_tool(tool, arguments)
        text = "".join(getattr(c, "text", "") for c in result.content or [])
        content = result.structured_content
        if content is None:
            return ToolReply(tool, False, None, text,
                             problem=f"{tool} answered without structured content: {text[:200]!r}")
        return ToolReply(tool, not result.is_error, content, text)

    async def tools(self) -> list[Any]:
        return list((await self.client.list_tools()).tools)

    async def read(self, uri: str) -> str | None:
        """The text of a resource, or None when the server refuses to read it."""
        from mcp.shared.exceptions import MCPError

        try:
            result = await self.client.read_resource(uri)
        except MCPError:
            return None
        return "".join(getattr(c, "text", "") for c in result.contents or [])
