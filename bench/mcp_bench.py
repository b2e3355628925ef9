"""dhp-mcp: tool-call latency over stdio against the same call through the SDK in-process, and
recovery after an agent is killed. Ours only (the original has no MCP server).

- latency: one MCP client session (the official SDK's `Client`) with `dhp-mcp` over stdio;
  `--calls` checkpoint calls of a 100 B state on one held lease, then `--calls` claim_next
  calls on pre-dispatched handoffs; each call timed from the client's call to its parsed
  result. In-process: the same number of `ctx.checkpoint(...)` and `dhp.claim_next(...)`
  calls of the SDK on a store of its own. p50 and p99 of each.
- recovery: `--reps` times, an agent process (tests/mcp_agent.py: an SDK client that starts
  its own dhp-mcp) claims a handoff and checkpoints; a standby's session is already open;
  the agent gets SIGKILL and the standby retries `recover` every 20 ms. Time from just
  before the kill to the standby's successful recover (lease TTL 30 s, so only the session's
  end can explain it).

Prints one JSON line. Usage: python bench/mcp_bench.py [--calls 500] [--reps 10] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import time

import _common as C

STATE = {"blob": "x" * 80, "step": 0}  # ~100 B canonical
SCHEMA = {"type": "object"}


def stats(values: list[float]) -> dict:
    ms = [v * 1000 for v in values]
    return {"n": len(ms), "p50_ms": round(C.percentile(ms, 50), 3),
            "p99_ms": round(C.percentile(ms, 99), 3), "max_ms": round(max(ms), 3)}


def server(root: str, ttl: float = 30.0):
    from mcp.client.stdio import StdioServerParameters

    return StdioServerParameters(command=sys.executable, args=[
        "-m", "dhp.agents.mcp_cli", "--root", root, "--create", "--ttl", str(ttl)])


async def over_stdio(calls: int) -> dict:
    from mcp import Client

    root = C.scratch("mcp-stdio")
    async with Client(server(root), read_timeout_seconds=120) as c:
        async def timed(tool: str, args: dict) -> tuple[float, object]:
            began = time.perf_counter()
            result = await c.call_tool(tool, args)
            took = time.perf_counter() - began
            if result.is_error:
                raise RuntimeError(f"{tool}: {result.content[0].text}")
            return took, result.structured_content

        hid = (await timed("dispatch", {"task_kind": "bench.cp", "inputs": {},
                                        "output_schema": SCHEMA}))[1]["handoff_id"]
        lease = (await timed("claim", {"handoff_id": hid, "worker_id": "b"}))[1]["lease"]
        for _ in range(20):  # warm up the server's code paths
            await timed("checkpoint", {"lease": lease, "state": STATE})
        checkpoint = [(await timed("checkpoint", {"lease": lease, "state": dict(STATE, step=i)}))[0]
                      for i in range(calls)]
        for i in range(calls):
            await timed("dispatch", {"task_kind": "bench.next", "inputs": {"i": i},
                                     "output_schema": SCHEMA})
        claim_next = [(await timed("claim_next", {"task_kinds": ["bench.next"],
                                                  "worker_id": "b"}))[0] for _ in range(calls)]
    return {"checkpoint": stats(checkpoint), "claim_next": stats(claim_next)}


def in_process(calls: int) -> dict:
    import dhp

    store = dhp.Store(C.scratch("mcp-sdk"), ttl=30.0)
    hid = dhp.dispatch(store, "bench.cp", {}, SCHEMA)
    ctx = dhp.claim(store, hid, "b")
    for _ in range(20):
        ctx.checkpoint(STATE)
    checkpoint = []
    for i in range(calls):
        began = time.perf_counter()
        ctx.checkpoint(dict(STATE, step=i))
        checkpoint.append(time.perf_counter() - began)
    for i in range(calls):
        dhp.dispatch(store, "bench.next", {"i": i}, SCHEMA)
    claim_next, held = [], []
    for _ in range(calls):
        began = time.perf_counter()
        held.append(dhp.claim_next(store, ["bench.next"], "b", heartbeat_interval=0))
        claim_next.append(time.perf_counter() - began)
    return {"checkpoint": stats(checkpoint), "claim_next": stats(claim_next)}


async def recovery(reps: int) -> dict:
    from mcp import Client

    agent_script = str(C.REPO / "tests" / "mcp_agent.py")
    times = []
    for rep in range(reps):
        root = C.scratch("mcp-recovery")
        async with Client(server(root), read_timeout_seconds=120) as standby:
            made = await standby.call_tool("dispatch", {"task_kind": "bench.rec",
                                                        "inputs": {"rep": rep},
                                                        "output_schema": SCHEMA})
            hid = made.structured_content["handoff_id"]
            agent = subprocess.Popen([sys.executable, agent_script, root, hid, "agent", "3",
                                      "--hold"], stdout=subprocess.PIPE, text=True)
            for line in agent.stdout:
                if line.strip() == "checkpointed 3":
                    break
            killed_at = time.monotonic()
            os.kill(agent.pid, signal.SIGKILL)
            while True:
                got = await standby.call_tool("recover", {"handoff_id": hid,
                                                          "worker_id": "standby"})
                if not got.is_error:
                    times.append(time.monotonic() - killed_at)
                    break
                if time.monotonic() - killed_at > 60:
                    raise RuntimeError(f"no recovery within 60 s: {got.content[0].text}")
                await asyncio.sleep(0.02)
            agent.wait()
            C.log(f"recovery {rep + 1}/{reps}: {times[-1] * 1000:.1f} ms")
    return C.summary(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--calls", type=int, default=500)
    p.add_argument("--reps", type=int, default=10)
    args = C.parse(p, {"calls": 30, "reps": 2})
    run = C.Run("mcp", args)
    C.log(f"stdio: {args.calls} checkpoint and claim_next calls")
    stdio = asyncio.run(over_stdio(args.calls))
    C.log("in-process SDK")
    sdk = in_process(args.calls)
    C.log(f"recovery after kill -9 of an agent: {args.reps} reps")
    rec = asyncio.run(recovery(args.reps))
    run.finish({"calls": args.calls, "reps": args.reps, "stdio": stdio, "in_process_sdk": sdk,
            "overhead_p50_ms": {op: round(stdio[op]["p50_ms"] - sdk[op]["p50_ms"], 3)
                                for op in ("checkpoint", "claim_next")},
            "recovery_after_agent_kill_s": rec})


if __name__ == "__main__":
    main()
