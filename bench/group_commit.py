"""Group commit: W writer processes on one store, every checkpoint fsynced, sharing fsyncs.

For each W in --workers (default 1,2,4,8) and each mode, group commit on and off, a fresh
store of ours with `fsync_interval=0` (every checkpoint fsynced before it is acknowledged)
and W long-lived writer processes, each with its own claimed handoff. A window: every writer
of one mode writes --per-window checkpoints of 100 B as fast as it can, all starting
together; the window's rate is all their checkpoints over the time from the first writer's
start to the last one's end (CLOCK_MONOTONIC, shared by the processes). The two modes take
turns window by window, the first alternating. "Off" is the store with group commit switched
off (a private attribute the writer sets, `_group_commit = False`: every process fsyncs each
of its own commits, as before group commit); "on" is the store as shipped.

`--flush-ms X` makes every fsync of the WAL a slow device's: the writer holds an exclusive
flock on one file shared by every writer of the run (a device flushes one request at a
time) and sleeps X ms after the real fdatasync, so concurrent flushes queue as they would on
a disk whose flush takes X ms (a network volume, a disk without a write cache). Both modes
get the same device.

Prints one JSON line: per mode and W, checkpoints/s (median of the windows, with every
window's rate), the fsyncs the writers made per checkpoint and the syncs another process's
fsync covered per checkpoint (from the stores' counters, `sync_stats()`), and on / off
checkpoints/s per W as the median of the per-window ratios with their min-max spread.
Usage: python bench/group_commit.py [--workers 1,2,4,8] [--per-window 300] [--windows 7]
[--quick]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import _common as C

SCRIPT = "group_commit.py"
KIND = "bench.group_commit"
STATE_BYTES = 100
MODES = ("on", "off")


def role_writer(args) -> None:
    """One writer: a store with fsync_interval=0, its own handoff claimed, then a window of
    checkpoints per command."""
    side = C.load_side("ours")
    store = side.sdk.Store(args.root, fsync_interval=0)
    if args.mode == "off":
        store._group_commit = False  # private, for this benchmark: fsync every commit alone
    if args.flush_ms:
        slow_device(args.root, args.flush_ms / 1000)
    hid = side.dispatch(store, KIND, {"writer": os.getpid()}, {})
    ctx = side.claim(store, hid, f"w{os.getpid()}", ttl=60)  # heartbeats every 20 s
    states = [C.padded_state(STATE_BYTES, i) for i in range(args.per_window)]

    def write(count: int) -> dict:
        before = store.sync_stats()
        started = time.monotonic()
        for state in states[:count]:
            side.checkpoint(ctx, state)
        ended = time.monotonic()
        after = store.sync_stats()
        return {"start": started, "end": ended, "checkpoints": count,
                "fsyncs": after["fsyncs"] - before["fsyncs"],
                "shared": after["shared"] - before["shared"]}

    C.serve({"write": write})


def slow_device(root: str, seconds: float) -> None:
    """Every fsync of the store's WAL, in this process, as on a device that flushes one
    request at a time and takes `seconds` for each (see --flush-ms)."""
    import fcntl

    from dhp.store import wal_sync

    device = os.open(os.path.join(os.path.dirname(root), "device.lock"),
                     os.O_RDWR | os.O_CREAT, 0o600)
    real = wal_sync._fdatasync

    def flush(fd: int) -> None:
        fcntl.flock(device, fcntl.LOCK_EX)
        try:
            real(fd)
            time.sleep(seconds)
        finally:
            fcntl.flock(device, fcntl.LOCK_UN)

    wal_sync._fdatasync = flush


def window(writers: list[C.Driven], count: int) -> dict:
    """Every writer of one mode writes `count` checkpoints, all starting together."""
    for writer in writers:
        writer.send("write", count=count)
    got = [writer.receive() for writer in writers]
    total = sum(g["checkpoints"] for g in got)
    seconds = max(g["end"] for g in got) - min(g["start"] for g in got)
    return {"checkpoints": total, "seconds": seconds, "per_s": total / seconds,
            "fsyncs_per_checkpoint": sum(g["fsyncs"] for g in got) / total,
            "shared_per_checkpoint": sum(g["shared"] for g in got) / total,
            "synced": sum(g["fsyncs"] + g["shared"] for g in got)}


def combine(workers: int, runs: list[dict]) -> dict:
    med = {k: round(statistics.median(r[k] for r in runs), 4 if "per_checkpoint" in k else 1)
           for k in ("per_s", "fsyncs_per_checkpoint", "shared_per_checkpoint")}
    return {"workers": workers, "checkpoints_per_s": med["per_s"],
            "checkpoints_per_s_runs": [round(r["per_s"], 1) for r in runs],
            "fsyncs_per_checkpoint": med["fsyncs_per_checkpoint"],
            "fsyncs_per_checkpoint_runs": [round(r["fsyncs_per_checkpoint"], 4) for r in runs],
            "shared_per_checkpoint": med["shared_per_checkpoint"],
            "checkpoints": sum(r["checkpoints"] for r in runs),
            # every checkpoint was synced, by its writer's fsync or by a shared one
            "unsynced": sum(r["checkpoints"] - r["synced"] for r in runs)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--root", help=argparse.SUPPRESS)
    ap.add_argument("--mode", choices=MODES, help=argparse.SUPPRESS)
    ap.add_argument("--workers", default="1,2,4,8")
    ap.add_argument("--per-window", type=int, default=300,
                    help="checkpoints per writer process per window")
    ap.add_argument("--windows", type=int, default=7,
                    help="windows per mode and W, the modes taking turns")
    ap.add_argument("--flush-ms", type=float, default=0,
                    help="make each fsync a slow device's flush of this many ms (see above)")
    args = C.parse(ap, {"workers": "1,2", "per_window": 20, "windows": 2})
    if args.child:
        role_writer(args)
        return
    run = C.Run("group_commit", args)
    out = {"state_bytes": STATE_BYTES, "per_window": args.per_window,
           "windows": args.windows, "fsync_interval": 0, "flush_ms": args.flush_ms}
    rows: dict[str, list] = {mode: [] for mode in MODES}
    ratios = {}
    for w in (int(w) for w in args.workers.split(",")):
        pools: dict[str, list[C.Driven]] = {}
        try:
            for mode in MODES:
                root = C.scratch(f"group-commit-{mode}-{w}")
                C.log(f"group_commit W={w}: starting {w} writers, group commit {mode}")
                pools[mode] = []
                for _ in range(w):
                    pools[mode].append(C.Driven("ours", SCRIPT, "--root", root,
                                                "--mode", mode, "--per-window",
                                                args.per_window, "--flush-ms",
                                                args.flush_ms))
            got = C.interleave(list(MODES), args.windows,
                               lambda mode, i, pools=pools: window(pools[mode], args.per_window),
                               f"group_commit W={w}")
        finally:
            for pool in pools.values():
                C.close_all(dict(enumerate(pool)))
        for mode in MODES:
            rows[mode].append(combine(w, got[mode]))
            C.log(f"group_commit W={w} {mode}: {rows[mode][-1]}")
        ratios[str(w)] = C.paired([g["per_s"] for g in got["on"]],
                                  [g["per_s"] for g in got["off"]])
    out.update(rows)
    out["ratio_on_over_off"] = ratios
    run.finish(out)


if __name__ == "__main__":
    main()
