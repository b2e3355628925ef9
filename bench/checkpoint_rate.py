"""Checkpoint writes per second, one worker, ours and the original, at each one's durability.

Ours runs with its defaults, the durability the spec promises (DHP-CKP-009/011): every
checkpoint survives kill -9 of any process at once and a power loss once fsynced, which a
burst of checkpoints shares (at least one fsync per 0.1 s). Side `ours_fsync` is ours with
`fsync_interval=0` (every checkpoint fsynced before it is acknowledged), to show what that
stronger opt-in costs. The original runs with its defaults (reported in the output: WAL,
synchronous=FULL). A worker claims a fresh handoff (`with` block: background heartbeats on,
as a user runs it) and writes --count checkpoints (1,000; cut short after --seconds) of each
state size (100 B and 10 KB). Sides `sqlite_full` and `sqlite_normal` are the bare SQLite
commit limit for the same states (INSERT + COMMIT in WAL with synchronous FULL / NORMAL, no
protocol at all). One long-lived child per side; the sides take turns in windows (one window
= --count writes of each size on a fresh handoff) for --rounds rounds, the first side
alternating, and every ratio is the median of the per-window ratios with its min-max spread.

Then, per side, the rate on a handoff that already holds --history checkpoints (20,000),
alternating with a fresh handoff in the same process (medians of --rounds): whether a
write's cost grows with the history. There neither is the newest handoff with checkpoints
(see role_history), so `at_0` is also the rate of a worker beside others. Ours is seeded
through the SDK (ctx.checkpoint); the original through its store's add_checkpoint in one
transaction, because through its SDK every write re-reads the whole history and seeding
would take many minutes.

Each window also reports the bytes the writing process passed to write() per checkpoint
(/proc/self/io: the WAL frames and the share of WAL checkpoints into the database file).
Prints one JSON line: rates, CPU and bytes written per write, ratios to the original
(targets: ours >= 10, ours_fsync >= 2, bytes written <= 1), to the bare SQLite limits and,
per side, rate at history / rate at 0 (target for ours >= 0.8, i.e. within 20%).
Usage: python bench/checkpoint_rate.py [--count 1000] [--rounds 7] [--history 20000]
       [--sides ours,orig,ours_fsync,sqlite_full,sqlite_normal] [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import _common as C

SCRIPT = "checkpoint_rate.py"


def _rate(write, size: int, count: int, seconds: float, start: int) -> dict:
    """Rate and CPU per write over `count` writes, or fewer if they take over `seconds`."""
    for i in range(20):  # warm up: caches, first-write costs
        write(C.padded_state(size, start + i))
    states = [C.padded_state(size, start + 20 + n) for n in range(count)]
    n, written, begin, cpu = 0, C.written_bytes(), time.perf_counter(), time.process_time()
    deadline = begin + seconds
    now = begin
    while n < count and now < deadline:
        write(states[n])
        n += 1
        now = time.perf_counter()
    cpu = time.process_time() - cpu
    after = C.written_bytes()
    return {"per_s": round(n / (now - begin), 1), "writes": n,
            "cpu_us": round(cpu / n * 1e6, 1),
            "bytes_written": None if written is None else round((after - written) / n)}


def _median(values) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


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


def serve(name: str, args) -> None:
    """A long-lived child: each `rate` command measures one window on a fresh handoff."""
    root = C.scratch(f"ckpt-{name}")
    if name.startswith("sqlite_"):
        bare = C.BareSQLite(name, root)
        version, durability = bare.VERSION, bare.durability
    else:
        side = C.load_side(name)
        store = side.open_store(root)
        version, durability = side.VERSION, side.durability(store)
    tags = iter(range(10**9))

    def rate(size: int, count: int, seconds: float) -> dict:
        if name.startswith("sqlite_"):
            return _rate(bare.write, size, count, seconds, bare.seq)
        with side.claim(store, _fresh(side, store, f"w{next(tags)}"), "w") as ctx:
            got = _rate(lambda state: side.checkpoint(ctx, state), size, count, seconds, 0)
            side.complete(ctx, {"n": 1})
        return got

    C.serve({"rate": rate, "info": lambda: {"version": version, "durability": durability}})


def role_history(side, args) -> None:
    """Alternate a fresh handoff and one seeded with --history checkpoints, --rounds times (the
    first of the two alternating), so both rates see the same disk conditions.

    Neither is the newest handoff with checkpoints: the fresh ones are dispatched up front and
    a last handoff gets one checkpoint after the seeding. (Our SQLite store appends the newest
    handoff's checkpoints to the last page of their table, which is cheaper than an append in
    the middle of it: without this the seeded handoff would be judged by its position, not
    its history.)"""
    sizes = [int(s) for s in args.sizes.split(",")]
    store = side.open_store(C.scratch(f"ckpt-hist-{side.NAME}"))
    hid = _fresh(side, store, "history")
    fresh_ids = {(r, size): _fresh(side, store, f"r{r}-{size}")
                 for r in range(args.rounds) for size in sizes}
    fresh = {str(s): [] for s in sizes}
    seeded = {str(s): [] for s in sizes}
    with side.claim(store, hid, "w-history") as big:
        C.log(f"{side.NAME}: seeding {args.history} checkpoints")
        seed_s = _seed(side, store, hid, big, args.history)
        with side.claim(store, _fresh(side, store, "newest"), "w-newest") as ctx:
            side.checkpoint(ctx, C.padded_state(100, 0))
            side.complete(ctx, {"n": 1})
        for r in range(args.rounds):
            for size in sizes:
                for which in C.order(["fresh", "seeded"], r):  # first one alternates
                    if which == "seeded":
                        seeded[str(size)].append(_rate(
                            lambda state: side.checkpoint(big, state), size, args.count,
                            args.seconds, args.history + r * 10**6)["per_s"])
                        continue
                    with side.claim(store, fresh_ids[r, size], "w-0") as ctx:
                        fresh[str(size)].append(_rate(
                            lambda state, ctx=ctx: side.checkpoint(ctx, state), size,
                            args.count, args.seconds, 0)["per_s"])
                        side.complete(ctx, {"n": 1})
            C.log(f"{side.NAME}: round {r + 1}: fresh {fresh}, seeded {seeded}")
        side.complete(big, {"n": 1})
    med = {k: statistics.median(v) for k, v in fresh.items()}
    med_h = {k: statistics.median(v) for k, v in seeded.items()}
    C.emit({"seed_s": round(seed_s, 2), "at_0": med, "at_history": med_h,
            "at_0_runs": fresh, "at_history_runs": seeded,
            "history_over_0": {k: C.paired(seeded[k], fresh[k]) for k in med}})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--phase", help=argparse.SUPPRESS)
    ap.add_argument("--count", type=int, default=1000, help="writes per measured window")
    ap.add_argument("--seconds", type=float, default=10.0,
                    help="stop a window early after this long")
    ap.add_argument("--sizes", default="100,10240", help="state sizes in bytes")
    ap.add_argument("--rounds", type=int, default=7,
                    help="windows per side and size (sides alternate); medians kept")
    ap.add_argument("--history", type=int, default=20000,
                    help="checkpoints already in the handoff for the second measurement")
    ap.add_argument("--history-sides", default="ours,orig",
                    help="sides whose cost at --history is measured (0 to skip)")
    ap.add_argument("--sides", default="ours,orig,ours_fsync,sqlite_full,sqlite_normal",
                    help="sqlite_full / sqlite_normal: the bare SQLite commit limit")
    args = C.parse(ap, {"count": 100, "rounds": 3, "history": 500, "seconds": 5.0})
    if args.child:
        if args.serve:
            serve(args.child, args)
        else:
            role_history(C.load_side(args.child), args)
        return
    run = C.Run("checkpoint_rate", args)
    sides = args.sides.split(",")
    sizes = args.sizes.split(",")
    fwd = ["--count", args.count, "--seconds", args.seconds, "--sizes", args.sizes]
    out = {"count": args.count, "rounds": args.rounds, "history": args.history}
    children = C.drive(sides, SCRIPT)
    try:
        got = C.interleave(sides, args.rounds, lambda side, w: {
            size: children[side].ask("rate", size=int(size), count=args.count,
                                     seconds=args.seconds) for size in sizes},
            "checkpoint_rate")
        info = {side: children[side].ask("info") for side in sides}
    finally:
        C.close_all(children)
    per_s = {side: {s: [w[s]["per_s"] for w in got[side]] for s in sizes} for side in sides}
    for side in sides:
        out[side] = {**info[side],
                     "per_s": {s: statistics.median(per_s[side][s]) for s in sizes},
                     "cpu_us": {s: statistics.median(w[s]["cpu_us"] for w in got[side])
                                for s in sizes},
                     "bytes_written": {s: _median(w[s]["bytes_written"] for w in got[side])
                                       for s in sizes},
                     "per_s_runs": per_s[side]}
    for side in ("ours", "ours_fsync"):  # against the original and the bare commit limits
        for base in ("orig", "sqlite_full", "sqlite_normal"):
            if side in out and base in out:
                out[f"ratio_{side}_over_{base}"] = {
                    s: C.paired(per_s[side][s], per_s[base][s]) for s in sizes}
    if "ours" in out and "orig" in out and all(out[x]["bytes_written"][s] for x in ("ours", "orig")
                                               for s in sizes):
        out["ratio_bytes_written_ours_over_orig"] = {s: C.paired(
            [w[s]["bytes_written"] for w in got["ours"]],
            [w[s]["bytes_written"] for w in got["orig"]]) for s in sizes}
    if "ours" in out and "orig" in out:
        out["ratio_cpu_ours_over_orig"] = {s: C.paired(
            [w[s]["cpu_us"] for w in got["ours"]], [w[s]["cpu_us"] for w in got["orig"]])
            for s in sizes}
    if args.history:
        for side in sides:
            if side in args.history_sides.split(","):
                C.log(f"checkpoint_rate: {side} at {args.history} checkpoints")
                out[side]["history"] = C.run_child(
                    side, SCRIPT, "--phase", "history", "--history", args.history,
                    "--rounds", args.rounds, *fwd)
    targets = {}
    if "ratio_bytes_written_ours_over_orig" in out:
        targets["bytes_written_at_most_orig"] = all(
            v["median"] <= 1 for v in out["ratio_bytes_written_ours_over_orig"].values())
    for side, want in (("ours", 10), ("ours_fsync", 2)):
        if f"ratio_{side}_over_orig" in out:
            targets[f"{side}_{want}x_orig"] = all(
                v["median"] >= want for v in out[f"ratio_{side}_over_orig"].values())
    if "history" in out.get("ours", {}):
        targets["history_within_20pct"] = all(
            v["median"] >= 0.8 for v in out["ours"]["history"]["history_over_0"].values())
    out["targets_met"] = targets
    run.finish(out)


if __name__ == "__main__":
    sys.exit(main())
