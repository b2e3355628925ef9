"""CPU per write and WAL bytes per checkpoint, ours and the original, interleaved.

What a write costs the machine, apart from the disk's fsync latency (which the rate
benchmarks include): the process's CPU time (user + system, every thread, so background
heartbeats count) per dispatch, per claim + complete round trip (`with` block, as a user runs
it) and per checkpoint of --size bytes, each side at its default durability; and the bytes a
checkpoint adds to the SQLite write-ahead log (the WAL is truncated first, then --wal-count
checkpoints are written, fewer than one autocheckpoint holds). For ours it also counts the SQL
statements each operation runs (SQLite's statement trace).

Each (operation, side) runs in a fresh child process; the sides alternate in every round
(A B A B ...), and a ratio is taken per round (original / ours: above 1 favours ours). Prints
one JSON line: per side the median of the rounds, per operation the median of the per-round
ratios with their min and max, and the raw fsync rate of the disk measured in the same run.
Usage: python bench/write_cost.py [--count 1000] [--rounds 5] [--size 100] [--sides ours,orig]
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

import _common as C

SCRIPT = "write_cost.py"
OPS = ("dispatch", "claim_complete", "checkpoint")


def _db_file(store) -> Path:
    path = Path(getattr(store, "backend", store).path)  # ours: a folder; the original: a file
    return path / "dhp.sqlite3" if path.is_dir() else path


def _statements(store):
    """A list that SQLite's trace fills with every statement ours runs (None for the
    original, whose connection is not ours to instrument)."""
    backend = getattr(store, "backend", store)
    if not hasattr(backend, "_connection"):
        return None
    seen: list[str] = []
    backend._connection().set_trace_callback(seen.append)
    return seen


def _cpu_per_op(fn, count: int) -> float:
    begin = time.process_time()
    for i in range(count):
        fn(i)
    return (time.process_time() - begin) / count * 1e6


def _count(seen: list[str] | None, probe) -> dict:
    """The number of SQL statements one more operation runs (ours only)."""
    if seen is None:
        return {}
    seen.clear()
    probe()
    return {"statements": len(seen)}


def role(side, args) -> None:
    store = side.open_store(C.scratch(f"cost-{side.NAME}"))
    stamp = time.time()
    out: dict = {"version": side.VERSION}
    seen = _statements(store)

    def dispatch(i: int) -> str:
        return side.dispatch(store, "bench.cost", {"i": i, "t": stamp, "op": args.op},
                             C.OUTPUT_SCHEMA)

    if args.op == "dispatch":
        for i in range(20):
            dispatch(-1 - i)
        out["cpu_us"] = _cpu_per_op(dispatch, args.count)
        out.update(_count(seen, lambda: dispatch(10**9)))
    elif args.op == "claim_complete":
        hids = [dispatch(i) for i in range(args.count + 21)]

        def round_trip(i: int) -> None:
            with side.claim(store, hids[i], "w-cost") as ctx:
                side.complete(ctx, {"n": i})

        for i in range(20):
            round_trip(args.count + i)
        out["cpu_us"] = _cpu_per_op(round_trip, args.count)
        out.update(_count(seen, lambda: round_trip(args.count + 20)))
    else:
        with side.claim(store, dispatch(0), "w-cost") as ctx:
            for i in range(20):
                side.checkpoint(ctx, C.padded_state(args.size, i))
            out["cpu_us"] = _cpu_per_op(
                lambda i: side.checkpoint(ctx, C.padded_state(args.size, 100 + i)), args.count)
            out["wal_bytes"] = _wal_bytes(store, ctx, side, args)
            out.update(_count(seen, lambda: side.checkpoint(ctx, C.padded_state(args.size, 1))))
            side.complete(ctx, {"n": 1})
    out["cpu_us"] = round(out["cpu_us"], 1)
    C.emit(out)


def _wal_bytes(store, ctx, side, args) -> float:
    """Bytes per checkpoint appended to the WAL, from an empty WAL."""
    wal = Path(str(_db_file(store)) + "-wal")
    with sqlite3.connect(_db_file(store), timeout=30) as other:
        busy = other.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
    if busy or wal.stat().st_size:
        raise RuntimeError(f"{side.NAME}: the WAL could not be truncated")
    for i in range(args.wal_count):
        side.checkpoint(ctx, C.padded_state(args.size, 10**6 + i))
    return round(wal.stat().st_size / args.wal_count)


def fsync_rate(seconds: float = 1.0) -> float:
    """The disk's raw rate of 4 KiB write + fsync, in the folder the stores use."""
    fd, path = tempfile.mkstemp(dir=C.scratch("fsync"))
    try:
        n, begin = 0, time.perf_counter()
        while time.perf_counter() - begin < seconds:
            os.pwrite(fd, b"x" * 4096, 0)
            os.fsync(fd)
            n += 1
        return round(n / (time.perf_counter() - begin), 1)
    finally:
        os.close(fd)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--op", help=argparse.SUPPRESS)
    ap.add_argument("--count", type=int, default=1000, help="operations timed per child")
    ap.add_argument("--size", type=int, default=100, help="checkpoint state size in bytes")
    ap.add_argument("--wal-count", type=int, default=50,
                    help="checkpoints whose WAL growth is measured")
    ap.add_argument("--rounds", type=int, default=5, help="A B pairs per operation")
    ap.add_argument("--ops", default=",".join(OPS))
    ap.add_argument("--sides", default="ours,orig")
    args = ap.parse_args()
    if args.child:
        role(C.load_side(args.child), args)
        return
    sides, ops = args.sides.split(","), args.ops.split(",")
    fwd = ["--count", args.count, "--size", args.size, "--wal-count", args.wal_count]
    runs: dict = {op: {side: [] for side in sides} for op in ops}
    fsyncs = [fsync_rate()]
    for r in range(args.rounds):
        for op in ops:
            for side in sides:
                C.log(f"write_cost: {op}, {side}, round {r + 1}/{args.rounds}")
                runs[op][side].append(C.run_child(side, SCRIPT, "--op", op, *fwd))
        fsyncs.append(fsync_rate())
    out: dict = {"benchmark": "write_cost", "count": args.count, "rounds": args.rounds,
                 "size": args.size, "disk_fsync_per_s": statistics.median(fsyncs),
                 "disk_fsync_per_s_runs": fsyncs}
    for op in ops:
        row: dict = {}
        for side in sides:
            got = runs[op][side]
            row[side] = {key: statistics.median(g[key] for g in got)
                         for key in ("cpu_us", "wal_bytes", "statements") if key in got[0]}
            row[side]["cpu_us_runs"] = [g["cpu_us"] for g in got]
        if "ours" in sides and "orig" in sides:
            pairs = [C.ratio(b["cpu_us"], a["cpu_us"])
                     for a, b in zip(runs[op]["ours"], runs[op]["orig"], strict=True)]
            row["cpu_orig_over_ours"] = {"median": statistics.median(pairs),
                                         "min": min(pairs), "max": max(pairs)}
        out[op] = row
    C.emit(out)


if __name__ == "__main__":
    sys.exit(main())
