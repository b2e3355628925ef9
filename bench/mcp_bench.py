"""dhp-mcp: tool-call latency over stdio against the same call through the SDK in-process, and
recovery after an agent is killed. Ours only (the original has no MCP server).

- latency: one MCP client session (the official SDK's `Client`) with `dhp-mcp` over stdio;
  `--calls` checkpoint calls of a 100 B state on one held lease, then `--calls` claim_next
  calls on pre-dispatched handoffs; each call timed from the client's call to its parsed
  result. In-process: the same number of `ctx.checkpoint(...)` and `dhp.claim_next(...)`
  calls of the SDK on a store of its own. p50 and p99 of each.
- recovery: `--reps` times for each transport and store, an agent process
  (tests/mcp_agent.py: an SDK client) claims a handoff and checkpoints; a standby's session
  is already open; the agent gets SIGKILL and the standby retries `recover` every 20 ms.
  Time from just before the kill to the standby's successful recover (lease TTL 30 s, so
  only the server's judgement of the agent's death can explain it). Transports: `stdio`
  (the agent starts its own dhp-mcp, which sees stdin hang up), `http_stream` (one dhp-mcp
  --http; the agent's stateful session keeps its event stream open, whose close the server
  sees) and `http_no_stream` (the 2026 era's stateless requests: the server judges the agent
  dead after --agent-timeout, 8 s by default). Stores: a folder and a Postgres schema
  ($DHP_BENCH_POSTGRES, default postgresql://postgres@127.0.0.1:5432/test; skipped with the
  reason when there is no server).

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


PG_SERVER = os.environ.get("DHP_BENCH_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
TRANSPORTS = ("stdio", "http_stream", "http_no_stream")


def pg_location() -> str | None:
    """A fresh schema on the Postgres server, or None when there is none."""
    try:
        import psycopg

        psycopg.connect(PG_SERVER, connect_timeout=3).close()
    except Exception as exc:  # noqa: BLE001 - any reason is reported, never fatal
        C.log(f"no Postgres for the recovery runs: {exc}")
        return None
    return f"{PG_SERVER}{'&' if '?' in PG_SERVER else '?'}schema=dhp_bench_mcp_{os.getpid()}"


def drop_schema(location: str) -> None:
    import psycopg

    schema = location.rsplit("schema=", 1)[1]
    with psycopg.connect(PG_SERVER, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def start_http(store: str) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-m", "dhp.agents.mcp_cli", "--root", store,
                             "--ttl", "30", "--http", "127.0.0.1:0"], stderr=subprocess.PIPE,
                            text=True)
    line = proc.stderr.readline()
    return proc, line.rsplit(" ", 1)[1].strip()


def client_for(transport: str, store: str, url: str | None):
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    if transport == "stdio":
        return Client(server(store), read_timeout_seconds=120)
    mode = "legacy" if transport == "http_stream" else "auto"
    return Client(streamable_http_client(url), mode=mode, read_timeout_seconds=120)


async def recovery(reps: int, transport: str, store: str) -> dict:
    agent_script = str(C.REPO / "tests" / "mcp_agent.py")
    times = []
    http, url = start_http(store) if transport != "stdio" else (None, None)
    flags = {"stdio": ["--store", store], "http_stream": ["--url", url, "--mode", "legacy"],
             "http_no_stream": ["--url", url, "--mode", "auto"]}[transport]
    try:
        async with client_for(transport, store, url) as standby:
            for rep in range(reps):
                made = await standby.call_tool("dispatch", {
                    "task_kind": "bench.rec", "inputs": {"rep": rep, "how": transport},
                    "output_schema": SCHEMA})
                hid = made.structured_content["handoff_id"]
                agent = subprocess.Popen([sys.executable, agent_script, C.scratch("mcp-steps"),
                                          hid, "agent", "3", "--hold", *flags],
                                         stdout=subprocess.PIPE, text=True)
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
                C.log(f"recovery {transport} {rep + 1}/{reps}: {times[-1] * 1000:.1f} ms")
    finally:
        if http is not None:
            http.terminate()
            http.wait()
    return C.summary(times)


def recoveries(reps: int) -> dict:
    import dhp

    stores = {"sqlite": C.scratch("mcp-recovery")}
    pg = pg_location()
    if pg is not None:
        stores["postgres"] = pg
    for store in stores.values():  # made by a dispatch, as a user would
        dhp.dispatch(dhp.Store(store), "bench.init", {}, SCHEMA)
    out: dict = {}
    try:
        for name, store in stores.items():
            for transport in TRANSPORTS:
                C.log(f"recovery after kill -9 of an agent: {transport} on {name}")
                out[f"{transport}_{name}"] = asyncio.run(recovery(reps, transport, store))
    finally:
        if pg is not None:
            drop_schema(pg)
    return out


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
    rec = recoveries(args.reps)
    run.finish({"calls": args.calls, "reps": args.reps, "stdio": stdio, "in_process_sdk": sdk,
            "overhead_p50_ms": {op: round(stdio[op]["p50_ms"] - sdk[op]["p50_ms"], 3)
                                for op in ("checkpoint", "claim_next")},
            "recovery_after_agent_kill_s": rec})


if __name__ == "__main__":
    main()
