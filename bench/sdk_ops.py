"""SDK operation rates and a worker's memory, ours and the original, interleaved.

- dispatch: windows of --window dispatches with distinct inputs, one after another;
- claim + complete: windows of --window round trips on pre-dispatched handoffs (dispatched
  before the window, untimed), each claimed (`with` block, background heartbeat started as a
  user runs it) and completed with a schema-valid result;
- peak RSS of a worker process that claims one handoff and writes --checkpoints checkpoints of
  10 KB (resource.getrusage in that process; its RSS right after import and store open is
  reported too, so the growth caused by the work is visible).

One long-lived child per side holds a store; the sides take turns, window by window, for
--pairs pairs (alternating which goes first), and each window reports its wall and CPU time.
Side `sqlite_full` is the bare SQLite commit limit of the same disk in the same windows: one
fsynced INSERT + COMMIT per dispatch and two per claim + complete (the fewest durable commits
each needs). Rates and CPU per operation are medians over windows; ratios are medians of the
per-pair ratios with their min-max spread. Prints one JSON line.
Usage: python bench/sdk_ops.py [--window 100] [--pairs 11] [--sides ours,orig,sqlite_full]
       [--quick]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import time

import _common as C

SCRIPT = "sdk_ops.py"


def _maxrss_mib() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)  # KiB on Linux


def serve_bare(name: str) -> None:
    """The bare SQLite FULL limit of the same disk: a dispatch is one fsynced commit of an
    envelope-sized document, a claim + complete the two fsynced commits it needs at least."""
    bare = C.BareSQLite(name, C.scratch(f"ops-{name}"))
    doc = {"task_kind": "bench.ops", "inputs": {"i": 0}, "output_schema": C.OUTPUT_SCHEMA}

    def window(commits_per_op: int):
        def run(n: int) -> dict:
            cpu, wall = C.cpu_and_wall(lambda: [bare.write(doc) for _ in
                                                range(n * commits_per_op)])
            return {"cpu": cpu, "wall": wall, "n": n}
        return run

    C.serve({"dispatch": window(1), "roundtrip": window(2),
             "info": lambda: {"version": bare.VERSION, "durability": bare.durability}})


def serve(side, args) -> None:
    store = side.open_store(C.scratch(f"ops-{side.NAME}"))
    stamp, counter = time.time(), iter(range(10**9))

    def dispatch(n: int) -> dict:
        def step():
            for _ in range(n):
                side.dispatch(store, "bench.ops", {"i": next(counter), "t": stamp},
                              C.OUTPUT_SCHEMA)
        cpu, wall = C.cpu_and_wall(step)
        return {"cpu": cpu, "wall": wall, "n": n}

    def roundtrip(n: int) -> dict:
        hids = [side.dispatch(store, "bench.rt", {"i": next(counter), "t": stamp},
                              C.OUTPUT_SCHEMA) for _ in range(n)]

        def step():
            for i, hid in enumerate(hids):
                with side.claim(store, hid, "w-rt") as ctx:
                    side.complete(ctx, {"n": i})
        cpu, wall = C.cpu_and_wall(step)
        return {"cpu": cpu, "wall": wall, "n": n}

    def info() -> dict:
        return {"version": side.VERSION, "durability": side.durability(store)}

    dispatch(5)  # warm up: imports, schema compilation, first writes
    roundtrip(5)
    C.serve({"dispatch": dispatch, "roundtrip": roundtrip, "info": info})


def role_rss(side, args) -> None:
    store = side.open_store(C.scratch(f"rss-{side.NAME}"))
    hid = side.dispatch(store, "bench.rss", {"t": time.time()}, C.OUTPUT_SCHEMA)
    baseline = _maxrss_mib()
    with side.claim(store, hid, "w-rss") as ctx:
        for i in range(args.checkpoints):
            side.checkpoint(ctx, C.padded_state(10240, i))
        side.complete(ctx, {"n": args.checkpoints})
    C.emit({"rss_after_open_mib": baseline, "peak_rss_mib": _maxrss_mib()})


def _per_op(windows: list[dict]) -> dict:
    """Medians over windows: operations per second (wall) and CPU µs per operation."""
    return {"per_s": round(statistics.median(w["n"] / w["wall"] for w in windows), 1),
            "cpu_us": round(statistics.median(w["cpu"] / w["n"] * 1e6 for w in windows), 1),
            "per_s_windows": [round(w["n"] / w["wall"], 1) for w in windows],
            "cpu_us_windows": [round(w["cpu"] / w["n"] * 1e6, 1) for w in windows]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--role", help=argparse.SUPPRESS)
    ap.add_argument("--window", type=int, default=100, help="operations per timed window")
    ap.add_argument("--pairs", type=int, default=11, help="windows per side and operation")
    ap.add_argument("--checkpoints", type=int, default=1000)
    ap.add_argument("--sides", default="ours,orig,sqlite_full",
                    help="sqlite_full: the bare SQLite commit limit (one fsynced commit per "
                         "dispatch, two per claim + complete)")
    args = C.parse(ap, {"window": 20, "pairs": 3, "checkpoints": 100})
    if args.child:
        side = None if args.child.startswith("sqlite_") else C.load_side(args.child)
        if args.serve and args.child.startswith("sqlite_"):
            serve_bare(args.child)
        elif args.serve:
            serve(side, args)
        else:
            role_rss(side, args)
        return
    run = C.Run("sdk_ops", args)
    sides = args.sides.split(",")
    out = {"window": args.window, "pairs": args.pairs, "rss_checkpoints_10kb": args.checkpoints}
    children = C.drive(sides, SCRIPT)
    try:
        got = C.interleave(sides, args.pairs, lambda side, w: {
            op: children[side].ask(op, n=args.window) for op in ("dispatch", "roundtrip")},
            "sdk_ops")
        info = {side: children[side].ask("info") for side in sides}
    finally:
        C.close_all(children)
    for side in sides:
        dispatch = _per_op([w["dispatch"] for w in got[side]])
        rt = _per_op([w["roundtrip"] for w in got[side]])
        out[side] = {**info[side], "dispatch_per_s": dispatch["per_s"],
                     "dispatch_per_s_windows": dispatch["per_s_windows"],
                     "claim_complete_per_s": rt["per_s"],
                     "claim_complete_per_s_windows": rt["per_s_windows"]}
        if side.startswith("sqlite_"):
            continue
        out[side].update({"dispatch_cpu_us": dispatch["cpu_us"],
                          "dispatch_cpu_us_windows": dispatch["cpu_us_windows"],
                          "claim_complete_cpu_us": rt["cpu_us"],
                          "claim_complete_cpu_us_windows": rt["cpu_us_windows"]})
        out[side].update(C.run_child(side, SCRIPT, "--role", "rss", "--checkpoints",
                                     args.checkpoints))
    if "ours" in out and "orig" in out:
        def pair(op: str, key: str, ours_over_orig: bool) -> dict | None:
            ours = [w[op][key] / w[op]["n"] for w in got["ours"]]
            orig = [w[op][key] / w[op]["n"] for w in got["orig"]]
            return C.paired(orig, ours) if ours_over_orig else C.paired(ours, orig)
        # wall per op: orig/ours = rate ours/orig; CPU per op: ours/orig (below 1 favours ours)
        out["ratio"] = {
            "dispatch_ours_over_orig": pair("dispatch", "wall", True),
            "claim_complete_ours_over_orig": pair("roundtrip", "wall", True),
            "dispatch_cpu_ours_over_orig": pair("dispatch", "cpu", False),
            "claim_complete_cpu_ours_over_orig": pair("roundtrip", "cpu", False),
            "peak_rss_orig_over_ours": C.ratio(out["orig"]["peak_rss_mib"],
                                               out["ours"]["peak_rss_mib"])}
    if "ours" in out and "sqlite_full" in out:  # how close to the disk's commit limit
        def rate(side: str, op: str) -> list[float]:
            return [w[op]["n"] / w[op]["wall"] for w in got[side]]
        out.setdefault("ratio", {}).update({
            "dispatch_ours_over_sqlite_full": C.paired(rate("ours", "dispatch"),
                                                       rate("sqlite_full", "dispatch")),
            "claim_complete_ours_over_sqlite_full": C.paired(
                rate("ours", "roundtrip"), rate("sqlite_full", "roundtrip"))})
    run.finish(out)


if __name__ == "__main__":
    sys.exit(main())
