"""An agent process for the MCP tests: it starts `dhp-mcp` over stdio with the official SDK's
client, takes a handoff (claim, or recover when told), checkpoints every step, and completes.

    python tests/mcp_agent.py ROOT HANDOFF_ID WORKER STEPS [--recover] [--hold]
                              [--store LOCATION | --url URL [--mode legacy|auto]]

Each step appends `{"worker", "step"}` to ROOT/steps.jsonl *before* it checkpoints (so a test
counts rework), then prints `checkpointed N` on stdout. `--hold` stops after the last
checkpoint and waits (to be killed) instead of completing. `--store` starts the stdio server on
another store (a postgresql:// URL) than ROOT; `--url` talks to a `dhp-mcp --http` server
instead of starting one over stdio (ROOT is then only where steps.jsonl goes); `--mode`
is the client's protocol era (legacy: stateful sessions with an event stream; auto: the
2026 era, stateless requests).
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client


def server(root: str, ttl: float = 5.0) -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable,
                                 args=["-m", "dhp.agents.mcp_cli", "--root", root,
                                       "--create", "--ttl", str(ttl)])


def _flag(name: str) -> str | None:
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else None


def connect(root: str) -> Client:
    url = _flag("--url")
    if url is None:
        return Client(server(_flag("--store") or root), read_timeout_seconds=60)
    return Client(streamable_http_client(url), mode=_flag("--mode") or "legacy",
                  read_timeout_seconds=60)


async def run(root: str, hid: str, worker: str, steps: int, recover: bool, hold: bool) -> int:
    async with connect(root) as client:
        taken = await client.call_tool("recover" if recover else "claim",
                                       {"handoff_id": hid, "worker_id": worker})
        if taken.is_error:
            print(f"take failed: {taken.content[0].text}", flush=True)
            return 1
        lease = taken.structured_content["lease"]
        last = taken.structured_content["last_checkpoint"] or {"step": 0}
        for step in range(last["step"] + 1, steps + 1):
            with open(Path(root) / "steps.jsonl", "a") as f:
                f.write(json.dumps({"worker": worker, "step": step}) + "\n")
            done = await client.call_tool("checkpoint", {"lease": lease,
                                                         "state": {"step": step}})
            if done.is_error:
                print(f"checkpoint failed: {done.content[0].text}", flush=True)
                return 1
            print(f"checkpointed {step}", flush=True)
        if hold:
            await asyncio.sleep(3600)
        result = await client.call_tool("complete", {"lease": lease,
                                                     "result": {"total": steps}})
        print("completed" if not result.is_error else result.content[0].text, flush=True)
        return 0 if not result.is_error else 1


if __name__ == "__main__":
    root, hid, worker, steps = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    sys.exit(asyncio.run(run(root, hid, worker, steps, "--recover" in sys.argv,
                             "--hold" in sys.argv)))
