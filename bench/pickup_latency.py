"""Pickup latency: a dispatch to a waiting worker holding it, on SQLite and on Postgres.

A worker process waits in claim_next(wait=...) with the idle recheck at 60 s, so only the
doorbell (FIFOs on SQLite, LISTEN/NOTIFY on Postgres) can wake it in time. This process
dispatches one handoff, waits until the worker reports the claim, completes nothing (the
worker completes it), pauses --gap seconds so the worker is waiting again, and goes on.
Latency: from just before the dispatch call to the claim returning in the worker (both read
CLOCK_MONOTONIC, which every process of the host shares). The stores take turns in windows
of --window dispatches.

    python bench/pickup_latency.py [--n 200] [--window 20] [--gap 0.02] [--quick]

Prints one line of JSON: p50 / p99 / max in ms per store, and the targets (p50 <= 20 ms,
p99 <= 100 ms) met or not.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402
import dhp  # noqa: E402
from _common import log, scratch  # noqa: E402

KIND = "bench.pickup"
TARGET_P50_MS, TARGET_P99_MS = 20.0, 100.0
WORKER = """
import sys, time, dhp
from dhp.core import operations
operations.IDLE_RECHECK_S = 60.0
store = dhp.Store(sys.argv[1])
print("ready", flush=True)
while True:
    ctx = dhp.claim_next(store, "bench.pickup", "picker", wait=120, heartbeat_interval=0)
    took = time.monotonic()
    if ctx is None:
        break
    ctx.complete({})
    if ctx.inputs.get("last"):
        break
    print(took, flush=True)
"""


def location(store: str) -> str:
    if store == "sqlite":
        return scratch("pickup")
    import side_ours_pg

    return side_ours_pg.location(scratch("pickup-pg"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200, help="dispatches per store")
    ap.add_argument("--window", type=int, default=20, help="dispatches per turn")
    ap.add_argument("--gap", type=float, default=0.02, help="pause after each claim (s)")
    args = C.parse(ap, {"n": 20, "window": 10})
    run = C.Run("pickup_latency", args)
    stores = ("sqlite", "postgres")
    opened, workers = {}, {}
    for name in stores:
        where = location(name)
        opened[name] = dhp.Store(where)
        workers[name] = subprocess.Popen([sys.executable, "-c", WORKER, where],
                                         stdout=subprocess.PIPE, text=True)
        assert workers[name].stdout.readline() == "ready\n"
    latencies: dict[str, list[float]] = {name: [] for name in stores}
    nonce = time.time()
    try:
        for turn in range(0, args.n, args.window):
            for name in stores if turn // args.window % 2 == 0 else stores[::-1]:
                log(f"{name}: dispatches {turn + 1}..{min(turn + args.window, args.n)}")
                for i in range(turn, min(turn + args.window, args.n)):
                    time.sleep(args.gap)
                    sent = time.monotonic()
                    dhp.dispatch(opened[name], KIND, {"i": i, "nonce": nonce}, {})
                    took = float(workers[name].stdout.readline())
                    latencies[name].append((took - sent) * 1000)
    finally:
        for name in stores:
            dhp.dispatch(opened[name], KIND, {"last": True, "nonce": nonce}, {})
            workers[name].wait(60)
            opened[name].close()
    result = {"n": args.n, "gap_s": args.gap, "idle_recheck_s": 60.0,
              "target_ms": {"p50": TARGET_P50_MS, "p99": TARGET_P99_MS}}
    for name in stores:
        values = latencies[name]
        p50, p99 = C.percentile(values, 50), C.percentile(values, 99)
        result[name] = {"p50_ms": round(p50, 2), "p99_ms": round(p99, 2),
                        "max_ms": round(max(values), 2), "n": len(values),
                        "targets_met": p50 <= TARGET_P50_MS and p99 <= TARGET_P99_MS}
    run.finish(result)


if __name__ == "__main__":
    main()
