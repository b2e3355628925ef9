"""CPU per claim + complete and per checkpoint, ours and the original, in turns.

Each window is a fresh child process per side that times, with the process's CPU clock (all
its threads, the background heartbeats included), --roundtrips claim + complete round trips
(a `with` block as a user writes it, schema-valid result) or --checkpoints checkpoints of
100 B on one claimed handoff. The sides take turns (A B, then B A, ...) for --rounds rounds;
the line printed holds each side's median and range in microseconds and the median of the
per-round ratios original / ours (above 1: ours costs less) with its range.

Set DHP_BENCH_TMP=/dev/shm to keep the stores on tmpfs, so fsync costs no CPU and the figure
is the implementation's own; on a disk the kernel's share of fsync is counted too.
Usage: python bench/cpu_per_op.py [--roundtrips 300] [--checkpoints 1000] [--rounds 8]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import _common as C

SCRIPT = "cpu_per_op.py"


def role_roundtrips(side, args) -> None:
    store = side.open_store(C.scratch(f"cpu-rt-{side.NAME}"))
    stamp = time.time()
    hids = [side.dispatch(store, "bench.cpu", {"i": i, "t": stamp}, C.OUTPUT_SCHEMA)
            for i in range(args.roundtrips + 20)]
    for i, hid in enumerate(hids):
        if i == 20:  # after a warm-up: imports, caches, the first thread
            begin = time.process_time()
        with side.claim(store, hid, "w-cpu") as ctx:
            side.complete(ctx, {"n": i})
    C.emit({"us": round((time.process_time() - begin) / args.roundtrips * 1e6, 1)})


def role_checkpoints(side, args) -> None:
    store = side.open_store(C.scratch(f"cpu-ck-{side.NAME}"))
    hid = side.dispatch(store, "bench.cpu", {"t": time.time()}, C.OUTPUT_SCHEMA)
    with side.claim(store, hid, "w-cpu") as ctx:
        for i in range(20):
            side.checkpoint(ctx, C.padded_state(100, i))
        begin = time.process_time()
        for i in range(args.checkpoints):
            side.checkpoint(ctx, C.padded_state(100, 20 + i))
        spent = time.process_time() - begin
        side.complete(ctx, {"n": 1})
    C.emit({"us": round(spent / args.checkpoints * 1e6, 1)})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--role", help=argparse.SUPPRESS)
    ap.add_argument("--roundtrips", type=int, default=300)
    ap.add_argument("--checkpoints", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=8)
    args = ap.parse_args()
    if args.child:
        role = {"roundtrips": role_roundtrips, "checkpoints": role_checkpoints}[args.role]
        role(C.load_side(args.child), args)
        return
    out = {"benchmark": "cpu_per_op", "roundtrips": args.roundtrips,
           "checkpoints": args.checkpoints, "rounds": args.rounds}
    for role in ("roundtrips", "checkpoints"):
        runs: dict[str, list[float]] = {"ours": [], "orig": []}
        for r in range(args.rounds):
            for side in ("ours", "orig") if r % 2 == 0 else ("orig", "ours"):
                C.log(f"cpu_per_op: {role} round {r + 1}/{args.rounds}: {side}")
                runs[side].append(C.run_child(side, SCRIPT, "--role", role, "--roundtrips",
                                              args.roundtrips, "--checkpoints",
                                              args.checkpoints)["us"])
        ratios = [o / u for o, u in zip(runs["orig"], runs["ours"], strict=True)]
        out[role] = {side: {"median_us": round(statistics.median(v), 1), "min_us": min(v),
                            "max_us": max(v)} for side, v in runs.items()}
        out[role]["orig_over_ours"] = {"median": round(statistics.median(ratios), 2),
                                       "min": round(min(ratios), 2),
                                       "max": round(max(ratios), 2)}
    C.emit(out)


if __name__ == "__main__":
    sys.exit(main())
