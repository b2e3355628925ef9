"""Dispatch latency with a store already holding --sizes handoffs, ours and the original.

Each side and size runs in a fresh child process: the store is filled (in transactions of
1,000, the setup each side offers), then --dispatches handoffs with distinct inputs are
dispatched one by one, each its own durable transaction, and timed: wall time (median, p95;
the fsync of the new handoff is in it) and the process's CPU time per dispatch (what the
implementation itself costs, which a loaded disk does not blur). Rounds alternate the sides,
and the best round of each counts. Prints one JSON line with both sides and the ratios
(original / ours: above 1 favours ours).
Usage: python bench/dispatch_bench.py [--sizes 1000,100000] [--dispatches 500] [--rounds 2]
"""

from __future__ import annotations

import argparse
import sys
import time

import _common as C

SCRIPT = "dispatch_bench.py"
FILL = 1000


def role(side, args) -> None:
    store = side.open_store(C.scratch(f"dispatch-{side.NAME}-{args.size}"))
    stamp = time.time()
    for start in range(0, args.size, FILL):
        side.dispatch_many(store, "bench.fill", [{"i": i, "t": stamp} for i in
                                                 range(start, min(args.size, start + FILL))],
                           C.OUTPUT_SCHEMA)
    walls, cpu_begin = [], time.process_time()
    for i in range(args.dispatches):
        begin = time.perf_counter()
        side.dispatch(store, "bench.dispatch", {"i": i, "t": stamp}, C.OUTPUT_SCHEMA)
        walls.append(time.perf_counter() - begin)
    cpu = (time.process_time() - cpu_begin) / args.dispatches
    C.emit({"wall_ms": C.summary([w * 1000 for w in walls], 3),
            "cpu_ms_per_dispatch": round(cpu * 1000, 3)})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--size", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--sizes", default="1000,100000")
    ap.add_argument("--dispatches", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--sides", default="ours,orig")
    args = ap.parse_args()
    if args.child:
        role(C.load_side(args.child), args)
        return
    out = {"benchmark": "dispatch", "dispatches": args.dispatches, "rounds": args.rounds}
    for size in (int(s) for s in args.sizes.split(",")):
        best: dict[str, dict] = {}
        for r in range(args.rounds):
            for side in args.sides.split(","):
                C.log(f"dispatch: {side}, {size} in the store, round {r + 1}")
                got = C.run_child(side, SCRIPT, "--size", size, "--dispatches",
                                  args.dispatches)
                if side not in best or got["cpu_ms_per_dispatch"] < \
                        best[side]["cpu_ms_per_dispatch"]:
                    best[side] = got
        row = dict(best)
        if "ours" in best and "orig" in best:
            row["orig_over_ours"] = {
                "cpu": C.ratio(best["orig"]["cpu_ms_per_dispatch"],
                               best["ours"]["cpu_ms_per_dispatch"]),
                "wall_median": C.ratio(best["orig"]["wall_ms"]["median"],
                                       best["ours"]["wall_ms"]["median"])}
        out[str(size)] = row
    C.emit(out)


if __name__ == "__main__":
    sys.exit(main())
