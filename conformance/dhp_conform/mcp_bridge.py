"""An agent for the kit's MCP profile: `python -m dhp_conform.mcp_bridge -- SERVER-TEMPLATE...`.

It speaks the kit's adapter protocol (spec/adapter.md) on stdin/stdout, so the harness can
drive, SIGKILL and restart it like any adapter, and turns each operation into a tool call of
the MCP binding (spec/mcp.md) in one MCP client session opened at `init`: with a server it
starts over stdio, or, when the kit serves the scenario over streamable HTTP, with that
server's URL (read from the scenario folder's scenario.json, see mcp_http). Killing this
process is an agent dying mid-task: over stdio its server sees the pipe close, over HTTP the
server must notice by itself (DHP-MCP-020).

Fenced writes name (worker, fence) as the adapter protocol does; the bridge presents them as
the lease token {handoff_id, worker_id, fence} and never remembers a lease by worker name.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from .mcp_client import Session, ToolReply, scenario_session
from .mcp_http import read_params

FEATURES = ["claim_next", "export_log", "liveness"]


class BridgeError(Exception):
    def __init__(self, code: str, message: str, definite: bool = True):
        super().__init__(message)
        self.error = {"code": code, "message": message, "definite": definite}


class Bridge:
    def __init__(self, template: list[str]):
        self.template = template
        self.session: Session | None = None

    async def close(self) -> None:
        if self.session is not None:
            await self.session.__aexit__(None, None, None)

    async def tool(self, name: str, arguments: dict) -> Any:
        if self.session is None:
            raise BridgeError("invalid_input", f"{name} before init")
        reply: ToolReply = await self.session.call(name, arguments)
        if reply.problem:
            raise BridgeError("internal", reply.problem, definite=False)
        if reply.ok:
            return reply.content
        error = reply.content.get("error") if isinstance(reply.content, dict) else None
        if not isinstance(error, dict):
            raise BridgeError("internal", f"{name}: an error result without an error object: "
                              f"{reply.text[:200]!r}", definite=False)
        raise BridgeFailure(error)

    # --- the adapter operations ------------------------------------------------------------
    async def op_hello(self, args: dict) -> dict:
        return {"protocol": "1", "dhp": "1.0",
                "implementation": {"name": f"MCP server: {self.template[0]}", "language": "mcp",
                                   "version": "binding 1.0"},
                # The store checks run through the tools are evidence for the binding; the
                # store class itself is an adapter's (DHP-ADP-*), which an MCP server is not.
                "classes": ["mcp-server"], "features": FEATURES}

    async def op_init(self, args: dict) -> dict:
        if args.get("clock", "system") != "system":
            raise BridgeError("invalid_input", "the MCP binding has no manual clock")
        data = Path(args["data"])
        params = read_params(data) or {"values": {"data": str(data), "ttl": float(args["ttl"])}}
        errlog = open(data / f"mcp-server-{args.get('process', 'agent')}.log", "a")  # noqa: SIM115
        self.session = scenario_session(self.template, params, errlog=errlog)
        await self.session.__aenter__()
        # Warm up (the client's tool list, the server's first calls) so that the first
        # timed operation of a check measures the server, not its start-up.
        await self.session.tools()
        for tool in ("status", "recover", "claim"):
            await self.session.call(tool, {"handoff_id": "sha256:" + "0" * 64,
                                           "worker_id": "warm-up"})
        return {}

    async def op_dispatch(self, a: dict) -> dict:
        args = {k: a[k] for k in ("task_kind", "inputs", "output_schema", "budget",
                                  "progress_timeout_s") if k in a}
        return {"handoff_id": (await self.tool("dispatch", args))["handoff_id"]}

    async def _take(self, name: str, a: dict) -> dict | None:
        args = {"worker_id": a["worker"], **{k: a[k] for k in ("handoff_id", "task_kinds", "ttl")
                                               if k in a}}
        taken = await self.tool(name, args)
        lease = taken["lease"]
        if lease is None:
            return None
        return {"handoff_id": lease["handoff_id"], "worker": lease["worker_id"],
                "fence": lease["fence"], "last_checkpoint": taken["last_checkpoint"]}

    async def op_claim(self, a: dict) -> dict | None:
        return await self._take("claim", a)

    async def op_claim_next(self, a: dict) -> dict | None:
        return await self._take("claim_next", a)

    async def op_recover(self, a: dict) -> dict | None:
        return await self._take("recover", a)

    async def _write(self, name: str, a: dict, **extra: Any) -> dict:
        lease = {"handoff_id": a["handoff_id"], "worker_id": a["worker"], "fence": a["fence"]}
        await self.tool(name, {"lease": lease, **extra})
        return {}

    async def op_heartbeat(self, a: dict) -> dict:
        return await self._write("heartbeat", a)

    async def op_checkpoint(self, a: dict) -> dict:
        return await self._write("checkpoint", a, state=a["state"], spend=a.get("spend", 0))

    async def op_complete(self, a: dict) -> dict:
        return await self._write("complete", a, result=a["result"])

    async def op_release(self, a: dict) -> dict:
        return await self._write("release", a)

    async def op_status(self, a: dict) -> dict:
        return await self.tool("status", {"handoff_id": a["handoff_id"]})

    async def op_last_checkpoint(self, a: dict) -> dict:
        last = await self.tool("last_checkpoint", {"handoff_id": a["handoff_id"]})
        found = last["seq"] > 0
        return {"found": found, "state": last["state"], "seq": last["seq"] if found else None}

    async def op_result(self, a: dict) -> dict:
        try:
            got = await self.tool("result", {"handoff_id": a["handoff_id"]})
        except BridgeFailure as exc:
            if exc.error.get("code") == "conflict":
                return {"completed": False, "result": None}
            raise
        return {"completed": True, "result": got["result"]}

    async def op_cancel(self, a: dict) -> dict:
        await self.tool("cancel", {"handoff_id": a["handoff_id"]})
        return {}

    async def op_requeue(self, a: dict) -> dict:
        await self.tool("requeue", {"handoff_id": a["handoff_id"]})
        return {}

    async def op_dlq(self, a: dict) -> dict:
        entries = (await self.tool("dlq", {}))["entries"]
        return {"entries": [dict(e["status"], reason=e["reason"]) for e in entries]}

    async def op_export_log(self, a: dict) -> dict:
        """The binding's log resource, written where the kit wants the file."""
        uri = f"dhp://handoffs/{a['handoff_id']}/log"
        try:
            read = await self.session.client.read_resource(uri)
        except Exception as exc:  # noqa: BLE001 - the SDK raises MCPError for a refusal
            raise BridgeError("not_found", f"reading {uri} failed: {exc}") from None
        Path(a["path"]).write_text(read.contents[0].text, encoding="utf-8")
        return {"path": a["path"]}

    # --- the loop --------------------------------------------------------------------------
    async def handle(self, line: str) -> dict:
        try:
            request = json.loads(line)
            rid, op, args = request["id"], request["op"], request.get("args") or {}
        except (ValueError, KeyError, TypeError) as exc:
            return {"id": 0, "ok": False, "error": {"code": "invalid_input", "definite": True,
                                                   "message": f"not a request line: {exc}"}}
        method = getattr(self, f"op_{op}", None)
        try:
            if method is None:
                raise BridgeError("invalid_input", f"the MCP binding has no operation {op!r}")
            return {"id": rid, "ok": True, "data": await method(args)}
        except BridgeFailure as exc:
            return {"id": rid, "ok": False, "error": exc.error}
        except BridgeError as exc:
            return {"id": rid, "ok": False, "error": exc.error}
        except KeyError as exc:
            return {"id": rid, "ok": False, "error": {
                "code": "invalid_input", "definite": True, "message": f"missing argument {exc}"}}
        except Exception as exc:  # noqa: BLE001 - the session broke: the outcome is unknown
            return {"id": rid, "ok": False, "error": {
                "code": "unavailable", "definite": False,
                "message": f"the MCP session failed: {type(exc).__name__}: {exc}"}}


class BridgeFailure(Exception):
    """The server refused with an error result; `error` is its error object."""

    def __init__(self, error: dict):
        super().__init__(error.get("message"))
        self.error = error


async def serve(template: list[str]) -> None:
    bridge = Bridge(template)
    loop = asyncio.get_running_loop()
    try:
        while True:
            line = await loop.run_in_executor(None, sys.stdin.readline)
            if not line:
                break
            if not line.strip():
                continue
            response = await bridge.handle(line)
            sys.stdout.write(json.dumps(response, ensure_ascii=False) + "\n")
            sys.stdout.flush()
    finally:
        await bridge.close()


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--"]:
        args = args[1:]
    if not args:
        print("usage: python -m dhp_conform.mcp_bridge -- SERVER-COMMAND-TEMPLATE...",
              file=sys.stderr)
        return 2
    asyncio.run(serve(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
