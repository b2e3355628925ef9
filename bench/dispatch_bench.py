"""Dispatch latency with a store already holding --sizes handoffs, ours and the original.

For each size, one long-lived child per side fills its store (in transactions of 1,000, the
setup each side offers; the children fill one after the other), then the sides take turns
in windows of --window dispatches with distinct inputs, each its own durable transaction,
for --pairs pairs (the first side alternating). Per window: wall time per dispatch (median,
p95; the fsync of the new handoff is in it) and the process's CPU time per dispatch (what
the implementation itself costs, which a loaded disk blurs least). Prints one JSON line with
both sides and the ratios original / ours (above 1 favours ours): the median of per-window
ratios with their min-max spread.
Usage: python bench/dispatch_bench.py [--sizes 1000,100000] [--window 50] [--pairs 11]
       [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import _common as C

SCRIPT = "dispatch_bench.py"
FILL = 1000


def serve(side, args) -> None:
    store = side.open_store(C.scratch(f"dispatch-{side.NAME}-{args.size}"))
    stamp = time.time()
    for start in range(0, args.size, FILL):
        side.dispatch_many(store, "bench.fill", [{"i": i, "t": stamp} for i in
                                                 range(start, min(args.size, start + FILL))],
                           C.OUTPUT_SCHEMA)
    counter = iter(range(10**9))

    def window(n: int) -> dict:
        walls, cpu_begin = [], time.process_time()
        for _ in range(n):
            begin = time.perf_counter()
            side.dispatch(store, "bench.dispatch", {"i": next(counter), "t": stamp},
                          C.OUTPUT_SCHEMA)
            walls.append(time.perf_counter() - begin)
        return {"walls_ms": [w * 1000 for w in walls],
                "cpu_ms": (time.process_time() - cpu_begin) / n * 1000}

    window(5)  # warm up: schema compilation, caches
    C.serve({"window": window})


def measure(size: int, sides: list[str], args) -> dict:
    children = C.drive(sides, SCRIPT, "--size", size)
    try:
        got = C.interleave(sides, args.pairs,
                           lambda side, w: children[side].ask("window", n=args.window),
                           f"dispatch at {size}")
    finally:
        C.close_all(children)
    row: dict = {}
    for side in sides:
        row[side] = {"wall_ms": C.summary([x for w in got[side] for x in w["walls_ms"]], 3),
                     "cpu_ms_per_dispatch": round(statistics.median(
                         w["cpu_ms"] for w in got[side]), 3),
                     "cpu_ms_windows": [round(w["cpu_ms"], 3) for w in got[side]]}
    if "ours" in got and "orig" in got:
        def per_window(side: str, key) -> list[float]:
            return [key(w) for w in got[side]]

        def wall_median(w: dict) -> float:
            return statistics.median(w["walls_ms"])

        def cpu(w: dict) -> float:
            return w["cpu_ms"]

        row["orig_over_ours"] = {
            "cpu": C.paired(per_window("orig", cpu), per_window("ours", cpu)),
            "wall_median": C.paired(per_window("orig", wall_median),
                                    per_window("ours", wall_median))}
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--size", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--sizes", default="1000,100000")
    ap.add_argument("--window", type=int, default=50, help="dispatches per timed window")
    ap.add_argument("--pairs", type=int, default=11, help="windows per side and size")
    ap.add_argument("--sides", default="ours,orig")
    args = C.parse(ap, {"sizes": "1000", "window": 20, "pairs": 3})
    if args.child:
        serve(C.load_side(args.child), args)
        return
    run = C.Run("dispatch", args)
    sides = args.sides.split(",")
    out = {"window": args.window, "pairs": args.pairs}
    for size in (int(s) for s in args.sizes.split(",")):
        out[str(size)] = measure(size, sides, args)
    run.finish(out)


if __name__ == "__main__":
    sys.exit(main())
