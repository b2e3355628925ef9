"""`dhp-a2a` under two attacks of issue 22: a 60 MB request body (peak RSS of the server while
it is refused) and many never-ending streams (GetTask latency from another address while they
are open, and how many were refused by the per-address cap). Prints one line of JSON.

    python bench/a2a_limits.py [--store URL_OR_DIR] [--streams 1000] [--addresses 8]

Streams come from 127.0.0.2.. (one source address each block), GetTask from 127.0.0.1. With
the defaults (128 streams and connections per address, 512 in total) most of 1,000
streams are refused, and so is a GetTask once 512 are open; `--streams 480 --addresses 4`
measures GetTask latency just under the caps.
Run it against the previous code with PYTHONPATH=OLD_TREE/reference to compare.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

HEADERS = {"A2A-Version": "1.0", "content-type": "application/json"}


def start(store: str, tasks_db: Path, extra: list[str]) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-m", "dhp.agents.a2a_server", "--store", store,
                             "--tasks-db", str(tasks_db), "--bind", "127.0.0.1:0", *extra],
                            stderr=subprocess.PIPE, text=True)
    line = proc.stderr.readline()
    return proc, re.search(r"http://\S+/", line).group(0)


def peak_rss_mb(pid: int) -> float:
    text = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmHWM:\s+(\d+)", text).group(1)) / 1024


def rpc(method: str, params: dict) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).encode()


def big_body(url: str, size: int) -> dict:
    """Send `size` bytes as one request with its length declared; the answer's status."""
    host, port = re.match(r"http://([^:/]+):(\d+)/", url).groups()
    started = time.monotonic()
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(f"POST / HTTP/1.1\r\nHost: {host}:{port}\r\ncontent-type: application/json"
                     f"\r\ncontent-length: {size}\r\n\r\n".encode())
        chunk = b" " * (1 << 20)
        sent = 0
        try:
            while sent < size:
                sock.sendall(chunk)
                sent += len(chunk)
        except OSError:
            pass  # the server answered and closed: it did not read the rest
        answer = sock.recv(200).decode("latin-1")
    return {"status": answer.split(" ")[1] if answer else None, "sent_mb": sent >> 20,
            "seconds": round(time.monotonic() - started, 3)}


async def get_latency(url: str, task_id: str, n: int = 20) -> dict:
    times, statuses = [], set()
    async with httpx.AsyncClient(timeout=60) as client:
        for _ in range(n):
            started = time.monotonic()
            try:
                response = await client.post(url, content=rpc("GetTask", {"id": task_id}),
                                             headers=HEADERS)
                statuses.add(str(response.status_code))
            except httpx.HTTPError as exc:  # e.g. refused by the connection cap
                statuses.add(type(exc).__name__)
            times.append(time.monotonic() - started)
    return {"median_s": round(statistics.median(times), 4), "max_s": round(max(times), 4),
            "answers": sorted(statuses)}


async def open_streams(url: str, task_id: str, n: int, addresses: int) -> tuple[list, dict]:
    """n SubscribeToTask streams from 127.0.0.2.. spread over `addresses` source addresses;
    (open responses with their clients, count of answers by status)."""
    clients = [httpx.AsyncClient(
        timeout=60, limits=httpx.Limits(max_connections=None),
        transport=httpx.AsyncHTTPTransport(local_address=f"127.0.0.{i + 2}"))
        for i in range(addresses)]
    body = rpc("SubscribeToTask", {"id": task_id})

    async def one(i: int):
        client = clients[i % addresses]
        request = client.build_request("POST", url, content=body, headers=HEADERS)
        return await client.send(request, stream=True)

    responses = await asyncio.gather(*(one(i) for i in range(n)), return_exceptions=True)
    counts: dict[str, int] = {}
    for r in responses:
        key = str(r.status_code) if isinstance(r, httpx.Response) else type(r).__name__
        counts[key] = counts.get(key, 0) + 1
    return [clients, responses], counts


async def streams_case(url: str, task_id: str, n: int, addresses: int) -> dict:
    baseline = await get_latency(url, task_id)
    held, counts = await open_streams(url, task_id, n, addresses)
    await asyncio.sleep(3)  # the streams poll and send their keepalives
    loaded = await get_latency(url, task_id)
    clients, responses = held
    for r in responses:
        if isinstance(r, httpx.Response):
            await r.aclose()
    for c in clients:
        await c.aclose()
    return {"streams_tried": n, "answers": counts, "get_task_idle": baseline,
            "get_task_with_streams": loaded}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--store", help="a folder or postgresql:// URL (default: a temp folder)")
    p.add_argument("--streams", type=int, default=1000)
    p.add_argument("--addresses", type=int, default=8)
    p.add_argument("--body-mb", type=int, default=60)
    args = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="a2a-bench-"))
    store = args.store or str(tmp / "store")
    proc, url = start(store, tmp / "tasks.db", [])
    try:
        before = peak_rss_mb(proc.pid)
        refused = big_body(url, args.body_mb << 20)
        body = {"rss_before_mb": round(before, 1), "peak_rss_after_mb":
                round(peak_rss_mb(proc.pid), 1), "answer": refused}
        intent = {"task_kind": "bench.never", "inputs": {"t": time.time()},
                  "output_schema": {"type": "object"}}
        sent = httpx.post(url, headers=HEADERS, timeout=60, content=rpc("SendMessage", {
            "message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"data": intent}]},
            "configuration": {"returnImmediately": True}})).json()
        task_id = sent["result"]["task"]["id"]
        streams = asyncio.run(streams_case(url, task_id, args.streams, args.addresses))
    finally:
        proc.terminate()
        proc.wait(30)
    print(json.dumps({"bench": "a2a_limits", "store": "postgres" if "://" in store else
                      "sqlite", "body_mb": args.body_mb, "big_body": body, **streams}))


if __name__ == "__main__":
    main()
