"""The agent servers under many idle clients (issue 22): `dhp-mcp --http` with 1,000 idle MCP
sessions and then 1,000 open event streams, and `dhp-a2a` with 1,000 open task streams; the
server's resident memory, open descriptors and threads at each point, and the latency of one
more call while they are open. The caps are raised past 1,000 for the run (the defaults refuse
earlier, per address and in total: that is what they are for).

    python bench/server_load.py [--clients 1000] [--store DIR_OR_URL] [--quick]

Prints one line of JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import _common as C
import httpx

MCP_HEADERS = {"Accept": "application/json, text/event-stream",
               "Content-Type": "application/json"}
A2A_HEADERS = {"A2A-Version": "1.0", "content-type": "application/json"}
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "bench", "version": "1"}}}
CAPS = ["--max-connections", "4096", "--max-connections-per-address", "4096",
        "--max-streams", "4096", "--max-streams-per-address", "4096"]


def process_use(pid: int) -> dict:
    status = Path(f"/proc/{pid}/status").read_text()
    return {"rss_mb": round(int(re.search(r"VmRSS:\s+(\d+)", status).group(1)) / 1024, 1),
            "fds": len(list(Path(f"/proc/{pid}/fd").iterdir())),
            "threads": int(re.search(r"Threads:\s+(\d+)", status).group(1))}


def start(argv: list[str]) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-m", *argv], stderr=subprocess.PIPE, text=True)
    line = proc.stderr.readline()
    match = re.search(r"(http://\S+?)(?:\s|$)", line)
    if match is None:
        proc.kill()
        raise SystemExit(f"the server did not start: {line}{proc.stderr.read()}")
    return proc, match.group(1)


async def latency(call, n: int = 20) -> dict:
    times = []
    for _ in range(n):
        began = time.perf_counter()
        await call()
        times.append((time.perf_counter() - began) * 1000)
    return {"median_ms": round(statistics.median(times), 2), "max_ms": round(max(times), 2)}


async def with_streams(http: httpx.AsyncClient, pid: int, settle_s: float, name: str,
                       call, requests: list) -> dict:
    """Open every request as a stream, let them settle, measure the server and one more
    call (`name`), then close them."""
    streams = [await http.send(request, stream=True) for request in requests]
    await asyncio.sleep(settle_s)
    use = dict(process_use(pid), n=sum(r.status_code == 200 for r in streams),
               **{name: await latency(call)})
    for r in streams:
        await r.aclose()
    return use


async def mcp_case(store: str, clients: int) -> dict:
    proc, url = start(["dhp.agents.mcp_cli", "--root", store, "--http", "127.0.0.1:0",
                       "--max-sessions", str(clients + 10), "--max-sessions-per-address",
                       str(clients + 10), *CAPS])
    out: dict = {}
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=clients * 2)
    try:
        async with httpx.AsyncClient(timeout=120, limits=limits) as http:
            async def session() -> str:
                r = await http.post(url, json=INIT, headers=MCP_HEADERS)
                sid = r.headers["mcp-session-id"]
                headers = {**MCP_HEADERS, "Mcp-Session-Id": sid}
                await http.post(url, headers=headers, json={
                    "jsonrpc": "2.0", "method": "notifications/initialized"})
                await health(sid)
                return sid

            async def health(sid: str) -> None:
                r = await http.post(url, headers={**MCP_HEADERS, "Mcp-Session-Id": sid},
                                    json={"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                                          "params": {"name": "health", "arguments": {}}})
                if r.status_code != 200:
                    raise RuntimeError(f"health: {r.status_code} {r.text[:200]}")

            out["idle_server"] = process_use(proc.pid)
            sids = []
            for start_at in range(0, clients, 50):  # 50 handshakes at a time
                sids += await asyncio.gather(*(session() for _ in range(
                    min(50, clients - start_at))))
            await asyncio.sleep(1)
            out["sessions"] = dict(process_use(proc.pid), n=len(sids),
                                   health=await latency(lambda: health(sids[0])))
            C.log(f"mcp: {len(sids)} idle sessions: {out['sessions']}")
            out["streams"] = await with_streams(
                http, proc.pid, 1, "health", lambda: health(sids[0]),
                [http.build_request("GET", url, headers={
                    "Accept": "text/event-stream", "Mcp-Session-Id": sid}) for sid in sids])
            C.log(f"mcp: open event streams: {out['streams']}")
    finally:
        proc.terminate()
        proc.wait(60)
    return out


def rpc(method: str, params: dict) -> dict:
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}


async def a2a_case(store: str, clients: int) -> dict:
    tasks_db = Path(C.scratch("a2a-tasks")) / "tasks.sqlite3"
    proc, url = start(["dhp.agents.a2a_server", "--store", store, "--tasks-db",
                       str(tasks_db), "--bind", "127.0.0.1:0", *CAPS])
    url = url.rstrip("/") + "/"
    out: dict = {}
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=clients * 2)
    message = {"message": {"role": "ROLE_USER", "messageId": "m1", "parts": [{"data": {
        "task_kind": "bench.never", "inputs": {"at": time.time_ns() % 10**12},
        "output_schema": {"type": "object"}}}]},
        "configuration": {"returnImmediately": True}}
    try:
        async with httpx.AsyncClient(timeout=120, limits=limits) as http:
            sent = (await http.post(url, headers=A2A_HEADERS,
                                    json=rpc("SendMessage", message))).json()
            task_id = (sent["result"].get("task") or sent["result"])["id"]

            async def get_task() -> None:
                r = await http.post(url, headers=A2A_HEADERS,
                                    json=rpc("GetTask", {"id": task_id}))
                if r.status_code != 200 or "error" in r.json():
                    raise RuntimeError(f"GetTask: {r.status_code} {r.text[:200]}")

            out["idle_server"] = process_use(proc.pid)
            out["streams"] = await with_streams(  # 3 s: past a keepalive round
                http, proc.pid, 3, "get_task", get_task,
                [http.build_request("POST", url, headers=A2A_HEADERS,
                                    json=rpc("SubscribeToTask", {"id": task_id}))
                 for _ in range(clients)])
            C.log(f"a2a: open task streams: {out['streams']}")
    finally:
        proc.terminate()
        proc.wait(60)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--clients", type=int, default=1000)
    p.add_argument("--store", default=None, help="a folder or a postgresql:// URL "
                                                 "(default: a fresh folder)")
    args = C.parse(p, {"clients": 100})
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)  # the children inherit it
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 16384)), hard))
    run = C.Run("server_load", args)
    store = args.store or C.scratch("server-load")
    import dhp

    dhp.dispatch(dhp.Store(store), "bench.init", {}, {"type": "object"})
    results = {"clients": args.clients, "mcp": asyncio.run(mcp_case(store, args.clients))}
    try:
        import a2a  # noqa: F401
    except ImportError:
        results["a2a"] = {"skipped": "the a2a extra is not installed"}
    else:
        results["a2a"] = asyncio.run(a2a_case(store, args.clients))
    run.finish(results)


if __name__ == "__main__":
    main()
