"""SDK operation rates and a worker's memory, ours and the original.

- dispatch per second: --dispatches handoffs with distinct inputs, one after another.
- claim + complete round trips per second: --roundtrips pre-dispatched handoffs, each claimed
  (`with` block, background heartbeat started as a user runs it) and completed with a
  schema-valid result.
- peak RSS of a worker process that claims one handoff and writes --checkpoints checkpoints of
  10 KB (resource.getrusage in that process; its RSS right after import and store open is
  reported too, so the growth caused by the work is visible).

Every step runs in a fresh child process per side. Prints one JSON line with both sides and
the ratios (ours / original for rates, original / ours for memory: above 1 favours ours).
Usage: python bench/sdk_ops.py [--dispatches 1000] [--roundtrips 500] [--sides ours,orig]
"""

from __future__ import annotations

import argparse
import resource
import sys
import time

import _common as C

SCRIPT = "sdk_ops.py"


def _maxrss_mib() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)  # KiB on Linux


def role_rates(side, args) -> None:
    store = side.open_store(C.scratch(f"ops-{side.NAME}"))
    stamp = time.time()
    begin = time.perf_counter()
    for i in range(args.dispatches):
        side.dispatch(store, "bench.ops", {"i": i, "t": stamp}, C.OUTPUT_SCHEMA)
    dispatch_s = time.perf_counter() - begin
    C.log(f"{side.NAME}: {args.dispatches} dispatches in {dispatch_s:.2f} s")
    hids = [side.dispatch(store, "bench.rt", {"i": i, "t": stamp}, C.OUTPUT_SCHEMA)
            for i in range(args.roundtrips)]
    begin = time.perf_counter()
    for i, hid in enumerate(hids):
        with side.claim(store, hid, "w-rt") as ctx:
            side.complete(ctx, {"n": i})
    rt_s = time.perf_counter() - begin
    C.log(f"{side.NAME}: {args.roundtrips} claim+complete in {rt_s:.2f} s")
    C.emit({"version": side.VERSION, "durability": side.durability(store),
            "dispatch_per_s": round(args.dispatches / dispatch_s, 1),
            "claim_complete_per_s": round(args.roundtrips / rt_s, 1)})


def role_rss(side, args) -> None:
    store = side.open_store(C.scratch(f"rss-{side.NAME}"))
    hid = side.dispatch(store, "bench.rss", {"t": time.time()}, C.OUTPUT_SCHEMA)
    baseline = _maxrss_mib()
    with side.claim(store, hid, "w-rss") as ctx:
        for i in range(args.checkpoints):
            side.checkpoint(ctx, C.padded_state(10240, i))
        side.complete(ctx, {"n": args.checkpoints})
    C.emit({"rss_after_open_mib": baseline, "peak_rss_mib": _maxrss_mib()})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--role", help=argparse.SUPPRESS)
    ap.add_argument("--dispatches", type=int, default=1000)
    ap.add_argument("--roundtrips", type=int, default=500)
    ap.add_argument("--checkpoints", type=int, default=1000)
    ap.add_argument("--sides", default="ours,orig")
    args = ap.parse_args()
    if args.child:
        {"rates": role_rates, "rss": role_rss}[args.role](C.load_side(args.child), args)
        return
    out = {"benchmark": "sdk_ops", "dispatches": args.dispatches,
           "roundtrips": args.roundtrips, "rss_checkpoints_10kb": args.checkpoints}
    for side in args.sides.split(","):
        C.log(f"sdk_ops: {side}")
        out[side] = C.run_child(side, SCRIPT, "--role", "rates", "--dispatches",
                                args.dispatches, "--roundtrips", args.roundtrips)
        out[side].update(C.run_child(side, SCRIPT, "--role", "rss", "--checkpoints",
                                     args.checkpoints))
    if "ours" in out and "orig" in out:
        ours, orig = out["ours"], out["orig"]
        out["ratio"] = {
            "dispatch_ours_over_orig": C.ratio(ours["dispatch_per_s"], orig["dispatch_per_s"]),
            "claim_complete_ours_over_orig": C.ratio(ours["claim_complete_per_s"],
                                                     orig["claim_complete_per_s"]),
            "peak_rss_orig_over_ours": C.ratio(orig["peak_rss_mib"], ours["peak_rss_mib"])}
    C.emit(out)


if __name__ == "__main__":
    sys.exit(main())
