"""Checkpoint writes per second, one worker, ours and the original, at each one's durability.

Ours runs with its defaults, the durability the spec promises (DHP-CKP-009/011): every
checkpoint survives kill -9 of any process at once and a power loss once fsynced, which a
burst of checkpoints shares (at least one fsync per 0.1 s). Side `ours_fsync` is ours with
`fsync_interval=0` (every checkpoint fsynced before it is acknowledged), to show what that
stronger opt-in costs. The original runs with its defaults (reported in the output: WAL,
synchronous=FULL). A worker claims a fresh handoff (`with` block: background heartbeats on,
as a user runs it) and writes --count checkpoints (1,000; cut short after --seconds) of each
state size (100 B and 10 KB). Each side runs in its own process; the sides alternate over
--rounds rounds and the median is kept, because fsync latency on a shared machine drifts.

Then, per side, the rate on a handoff that already holds --history checkpoints (20,000),
alternating with a fresh handoff in the same process (medians of --rounds): whether a
write's cost grows with the history. Ours is seeded through the SDK (ctx.checkpoint); the
original through its store's add_checkpoint in one transaction, because through its SDK
every write re-reads the whole history and seeding would take many minutes.

Prints one JSON line: rates, ratios to the original (target for ours >= 5) and, per side,
rate at history / rate at 0 (target for ours >= 0.8, i.e. within 20%).
Usage: python bench/checkpoint_rate.py [--count 1000] [--rounds 3] [--history 20000]
       [--sides ours,orig,ours_fsync]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import _common as C

SCRIPT = "checkpoint_rate.py"


def _rate(side, ctx, size: int, count: int, seconds: float, start: int) -> dict:
    """Rate over `count` writes, or fewer if they take longer than `seconds`."""
    for i in range(20):  # warm up: caches, first-write costs
        side.checkpoint(ctx, C.padded_state(size, start + i))
    n, begin = 0, time.perf_counter()
    deadline = begin + seconds
    now = begin
    while n < count and now < deadline:
        side.checkpoint(ctx, C.padded_state(size, start + 20 + n))
        n += 1
        now = time.perf_counter()
    return {"per_s": round(n / (now - begin), 1), "writes": n}


def _seed(side, store, hid: str, ctx, count: int) -> float:
    begin = time.perf_counter()
    if side.NAME == "orig":
        side.begin_batch(store)
        for i in range(count):
            store.add_checkpoint(hid, C.padded_state(100, i))
        side.end_batch(store)
    else:
        for i in range(count):
            side.checkpoint(ctx, C.padded_state(100, i))
            if i % 5000 == 4999:
                C.log(f"  seeded {i + 1}")
    return time.perf_counter() - begin


def _fresh(side, store, tag: str) -> str:
    return side.dispatch(store, "bench.ckpt", {"tag": tag, "t": time.time()}, C.OUTPUT_SCHEMA)


def role_at0(side, args) -> None:
    """One rate per size, each on a fresh handoff (history grows only to --count)."""
    sizes = [int(s) for s in args.sizes.split(",")]
    store = side.open_store(C.scratch(f"ckpt-{side.NAME}"))
    out = {"version": side.VERSION, "durability": side.durability(store), "at_0": {}}
    for size in sizes:
        with side.claim(store, _fresh(side, store, f"a{size}"), f"w-{size}") as ctx:
            out["at_0"][str(size)] = _rate(side, ctx, size, args.count, args.seconds, 0)["per_s"]
            side.complete(ctx, {"n": 1})
    C.log(f"{side.NAME}: at 0: {out['at_0']}")
    C.emit(out)


def role_history(side, args) -> None:
    """Alternate a fresh handoff and one seeded with --history checkpoints, --rounds times, so
    both rates see the same disk conditions; medians are reported."""
    sizes = [int(s) for s in args.sizes.split(",")]
    store = side.open_store(C.scratch(f"ckpt-hist-{side.NAME}"))
    hid = _fresh(side, store, "history")
    fresh = {str(s): [] for s in sizes}
    seeded = {str(s): [] for s in sizes}
    with side.claim(store, hid, "w-history") as big:
        C.log(f"{side.NAME}: seeding {args.history} checkpoints")
        seed_s = _seed(side, store, hid, big, args.history)
        for r in range(args.rounds):
            for size in sizes:
                with side.claim(store, _fresh(side, store, f"r{r}-{size}"), "w-0") as ctx:
                    fresh[str(size)].append(
                        _rate(side, ctx, size, args.count, args.seconds, 0)["per_s"])
                    side.complete(ctx, {"n": 1})
                seeded[str(size)].append(_rate(side, big, size, args.count, args.seconds,
                                               args.history + r * 10**6)["per_s"])
            C.log(f"{side.NAME}: round {r + 1}: fresh {fresh}, seeded {seeded}")
        side.complete(big, {"n": 1})
    med = {k: statistics.median(v) for k, v in fresh.items()}
    med_h = {k: statistics.median(v) for k, v in seeded.items()}
    C.emit({"seed_s": round(seed_s, 2), "at_0": med, "at_history": med_h,
            "history_over_0": {k: C.ratio(med_h[k], med[k]) for k in med}})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--phase", help=argparse.SUPPRESS)
    ap.add_argument("--count", type=int, default=1000, help="writes per measured rate")
    ap.add_argument("--seconds", type=float, default=10.0,
                    help="stop a measurement early after this long")
    ap.add_argument("--sizes", default="100,10240", help="state sizes in bytes")
    ap.add_argument("--rounds", type=int, default=3,
                    help="measurements per rate (sides and handoffs alternate); medians kept")
    ap.add_argument("--history", type=int, default=20000,
                    help="checkpoints already in the handoff for the second measurement")
    ap.add_argument("--history-sides", default="ours,orig",
                    help="sides whose cost at --history is measured (0 to skip)")
    ap.add_argument("--sides", default="ours,orig,ours_fsync")
    args = ap.parse_args()
    if args.child:
        side = C.load_side(args.child)
        {"at0": role_at0, "history": role_history}[args.phase](side, args)
        return
    sides = args.sides.split(",")
    fwd = ["--count", args.count, "--seconds", args.seconds, "--sizes", args.sizes]
    out = {"benchmark": "checkpoint_rate", "count": args.count, "rounds": args.rounds,
           "history": args.history}
    runs = {side: [] for side in sides}
    for r in range(args.rounds):  # alternate the sides: both see the same disk conditions
        for side in sides:
            C.log(f"checkpoint_rate: {side}, round {r + 1}/{args.rounds}")
            runs[side].append(C.run_child(side, SCRIPT, "--phase", "at0", *fwd))
    for side in sides:
        sizes = runs[side][0]["at_0"]
        out[side] = {"version": runs[side][0]["version"],
                     "durability": runs[side][0]["durability"],
                     "per_s": {s: statistics.median(run["at_0"][s] for run in runs[side])
                               for s in sizes},
                     "per_s_runs": {s: [run["at_0"][s] for run in runs[side]] for s in sizes}}
    if args.history:
        for side in sides:
            if side in args.history_sides.split(","):
                C.log(f"checkpoint_rate: {side} at {args.history} checkpoints")
                out[side]["history"] = C.run_child(
                    side, SCRIPT, "--phase", "history", "--history", args.history,
                    "--rounds", args.rounds, *fwd)
    for side in sides:
        if side != "orig" and "orig" in out:
            out[f"ratio_{side}_over_orig"] = {
                s: C.ratio(out[side]["per_s"][s], out["orig"]["per_s"][s])
                for s in out[side]["per_s"]}
    if "ours" in out:
        targets = {}
        if "ratio_ours_over_orig" in out:
            targets["5x_orig"] = all(v >= 5 for v in out["ratio_ours_over_orig"].values())
        if "history" in out["ours"]:
            targets["history_within_20pct"] = all(
                v >= 0.8 for v in out["ours"]["history"]["history_over_0"].values())
        out["targets_met"] = targets
    C.emit(out)


if __name__ == "__main__":
    sys.exit(main())
