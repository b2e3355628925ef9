"""CPU per write, WAL bytes per checkpoint and SQL statements per write, ours and the original.

What a write costs the machine apart from waiting for the disk (which the rate benchmarks
include): the process's CPU time (user + system, every thread, so background heartbeats
count) per dispatch, per claim + complete round trip (`with` block as a user writes it,
schema-valid result) and per checkpoint of --size bytes on one claimed handoff, each side at
its default durability; the bytes a checkpoint adds to the SQLite write-ahead log (the WAL is
truncated, then --wal-count checkpoints are written, fewer than one autocheckpoint holds);
and, for ours, the SQL statements each operation runs (SQLite's statement trace, installed
after the timing so it costs the timed loop nothing).

A window is one fresh child process per (operation, side) doing --count operations after a
warm-up; for each operation the sides take turns for --pairs windows (A B, B A, ...). Every
ratio (ours / original: below 1 favours ours) is the median of the per-window ratios with
its min-max spread. --places runs the whole set twice: `disk` (stores in the run's scratch
folder, so the kernel's share of each fsync is counted) and `tmpfs` (stores in /dev/shm,
where an fsync costs nothing: the implementation's own CPU). Targets (issue 17), judged on
the medians: CPU per dispatch and per claim + complete at most the original's, per checkpoint
at most half of it, WAL bytes per checkpoint at most the original's. Prints one JSON line.
Usage: python bench/write_cost.py [--count 1000] [--pairs 5] [--size 100]
       [--places disk,tmpfs] [--ops dispatch,claim_complete,checkpoint] [--quick]
"""

from __future__ import annotations

import argparse
import atexit
import os
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

import _common as C

SCRIPT = "write_cost.py"
OPS = ("dispatch", "claim_complete", "checkpoint")
SIDES = ("ours", "orig")
TMPFS = "/dev/shm"
# The most ours may cost, as a fraction of the original's (issue 17).
TARGETS = {"dispatch": 1.0, "claim_complete": 1.0, "checkpoint": 0.5, "wal_bytes": 1.0}
WARM_UP = 20


# ------------------------------------------------------------------ child: one window

def _db_file(store) -> Path:
    path = Path(getattr(store, "backend", store).path)  # ours: a folder; the original: a file
    return path / "dhp.sqlite3" if path.is_dir() else path


def _statements(store, probe) -> dict:
    """The SQL statements one more operation runs (ours only: the original's connection is
    not ours to instrument)."""
    backend = getattr(store, "backend", store)
    if not hasattr(backend, "_connection"):
        return {}
    seen: list[str] = []
    connection = backend._connection()
    connection.set_trace_callback(seen.append)
    probe()
    connection.set_trace_callback(None)
    return {"statements": len(seen)}


def _cpu_us(step, count: int) -> float:
    """CPU µs per call of step(i), over count calls after WARM_UP untimed ones."""
    for i in range(WARM_UP):
        step(i)
    begin = time.process_time()
    for i in range(WARM_UP, WARM_UP + count):
        step(i)
    return round((time.process_time() - begin) / count * 1e6, 1)


def _wal_bytes(store, write, count: int) -> float:
    """WAL bytes per write(i), from a WAL truncated just before."""
    wal = Path(f"{_db_file(store)}-wal")
    with sqlite3.connect(_db_file(store), timeout=30) as other:
        busy = other.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
    if busy or wal.stat().st_size:
        raise RuntimeError("the WAL could not be truncated")
    for i in range(count):
        write(i)
    return round(wal.stat().st_size / count)


def window(side, args) -> None:
    root = (tempfile.mkdtemp(prefix=f"cost-{side.NAME}-", dir=args.tmp) if args.tmp
            else C.scratch(f"cost-{side.NAME}"))
    store = side.open_store(root)
    stamp, n = time.time(), args.count + WARM_UP
    out: dict = {"version": side.VERSION, "durability": side.durability(store)}

    def dispatch(i: int) -> str:
        return side.dispatch(store, "bench.cost", {"i": i, "t": stamp, "op": args.op},
                             C.OUTPUT_SCHEMA)

    if args.op == "dispatch":
        out["cpu_us"] = _cpu_us(dispatch, args.count)
        out.update(_statements(store, lambda: dispatch(-1)))
    elif args.op == "claim_complete":
        hids = [dispatch(i) for i in range(n + 1)]  # untimed; the last one for the probe

        def round_trip(i: int) -> None:
            with side.claim(store, hids[i], "w-cost") as ctx:
                side.complete(ctx, {"n": i})

        out["cpu_us"] = _cpu_us(round_trip, args.count)
        out.update(_statements(store, lambda: round_trip(n)))
    else:
        with side.claim(store, dispatch(0), "w-cost") as ctx:
            def checkpoint(i: int) -> None:
                side.checkpoint(ctx, C.padded_state(args.size, i))

            out["cpu_us"] = _cpu_us(checkpoint, args.count)
            out["wal_bytes"] = _wal_bytes(store, lambda i: checkpoint(n + i), args.wal_count)
            out.update(_statements(store, lambda: checkpoint(-1)))
            side.complete(ctx, {"n": 1})
    C.emit(out)


# ------------------------------------------------------------------ parent

def _tmpfs_folder() -> str | None:
    """This run's folder on tmpfs, removed at exit (unless DHP_BENCH_KEEP); None without one."""
    if not os.path.isdir(TMPFS):
        return None
    path = tempfile.mkdtemp(prefix="dhp-bench-", dir=TMPFS)
    if not os.environ.get("DHP_BENCH_KEEP"):
        atexit.register(shutil.rmtree, path, True)
    return path


def _median(windows: list[dict], key: str):
    values = [w[key] for w in windows if w.get(key) is not None]
    return round(statistics.median(values), 1) if values else None


def _ours_over_orig(got: dict[str, list[dict]], key: str) -> dict | None:
    """Per-window ratios ours / original of one figure: median and spread."""
    return C.paired([w.get(key) for w in got["ours"]], [w.get(key) for w in got["orig"]])


def measure(place: str, sides: list[str], ops: list[str], args, info: dict) -> dict:
    """One place's windows, operation by operation, the sides taking turns; each side's
    version and durability go in `info`."""
    tmp = _tmpfs_folder() if place == "tmpfs" else None
    if place == "tmpfs" and tmp is None:
        return {"skipped": f"no {TMPFS} on this machine"}
    forward = ["--count", args.count, "--size", args.size, "--wal-count", args.wal_count,
               *(["--tmp", tmp] if tmp else [])]
    out: dict = {"folder": tmp or "scratch (DHP_BENCH_TMP or the system temp folder)"}
    for op in ops:
        got = C.interleave(sides, args.pairs, lambda side, w, op=op: C.run_child(
            side, SCRIPT, "--op", op, *forward), f"write_cost {place} {op}")
        row: dict = {}
        for side in sides:
            windows = got[side]
            row[side] = {"cpu_us": _median(windows, "cpu_us"),
                         "cpu_us_windows": [w["cpu_us"] for w in windows]}
            info[side] = {key: windows[0][key] for key in ("version", "durability")}
            for key in ("wal_bytes", "statements"):
                if windows[0].get(key) is not None:
                    row[side][key] = _median(windows, key)
        if "ours" in sides and "orig" in sides:
            row["cpu_ours_over_orig"] = _ours_over_orig(got, "cpu_us")
            if "wal_bytes" in row["ours"]:
                row["wal_bytes_ours_over_orig"] = _ours_over_orig(got, "wal_bytes")
        out[op] = row
    out["targets_met"] = {
        key: out[op][ratio]["median"] <= TARGETS[key]
        for key, op, ratio in (("dispatch", "dispatch", "cpu_ours_over_orig"),
                               ("claim_complete", "claim_complete", "cpu_ours_over_orig"),
                               ("checkpoint", "checkpoint", "cpu_ours_over_orig"),
                               ("wal_bytes", "checkpoint", "wal_bytes_ours_over_orig"))
        if out.get(op, {}).get(ratio)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--op", help=argparse.SUPPRESS)
    ap.add_argument("--tmp", help=argparse.SUPPRESS)
    ap.add_argument("--count", type=int, default=1000, help="operations timed per window")
    ap.add_argument("--pairs", type=int, default=5, help="windows per side, operation, place")
    ap.add_argument("--size", type=int, default=100, help="checkpoint state size in bytes")
    ap.add_argument("--wal-count", type=int, default=50,
                    help="checkpoints whose WAL growth is measured")
    ap.add_argument("--ops", default=",".join(OPS))
    ap.add_argument("--sides", default=",".join(SIDES))
    ap.add_argument("--places", default="disk,tmpfs",
                    help="disk: the run's scratch folder (fsync's kernel CPU counted); "
                         f"tmpfs: {TMPFS} (the implementation's own CPU)")
    args = C.parse(ap, {"count": 100, "pairs": 2, "wal_count": 20})
    if args.child:
        window(C.load_side(args.child), args)
        return
    run = C.Run("write_cost", args)
    sides, ops = args.sides.split(","), args.ops.split(",")
    out: dict = {"count": args.count, "pairs": args.pairs, "size": args.size,
                 "wal_count": args.wal_count, "targets": TARGETS}
    info: dict = {}
    for place in args.places.split(","):
        if place not in ("disk", "tmpfs"):
            ap.error(f"unknown place {place!r}: expected disk or tmpfs")
        out[place] = measure(place, sides, ops, args, info)
    run.finish({**out, **info})


if __name__ == "__main__":
    sys.exit(main())
