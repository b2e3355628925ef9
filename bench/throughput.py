"""Throughput with W worker processes pulling from one store, SQLite beside Postgres.

For each W in --workers (default 1,2,4,8,16) and each side, a fresh store gets W x
--per-worker handoffs; W worker processes start together and loop: `claim_next`, 10
checkpoints of 1 KB, `complete`, until the queue is empty. Each reports its claim latencies
(claim_next call to return) and every error by code. Afterwards the store is read: a handoff
claimed more than once (attempts > 1) is a lease that expired while its worker waited.

For each W the sides take turns, --rounds runs each (the first side alternating). Prints one
JSON line: per side and W, handoffs/s, checkpoints/s, p50/p99 claim latency in ms (medians of
the runs), errors by code and expired leases (summed), and the second side's handoffs/s over
the first's: the median of the per-turn ratios with their min-max spread. The original
dhp-protocol 1.3.0 has no claim_next and is not run here.
Usage: python bench/throughput.py [--workers 1,2,4,8,16] [--per-worker 25] [--rounds 3]
[--sides ours,ours_pg] [--quick]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

import _common as C

SCRIPT = "throughput.py"
KIND = "bench.throughput"
CHECKPOINTS = 10
STATE = {"pad": "x" * 1000}  # 1 KB states


def role_seed(side, args) -> None:
    store = side.open_store(args.root)
    for n in range(args.count):
        side.sdk.dispatch(store, task_kind=KIND, inputs={"n": n}, output_schema={})
    C.emit({"seeded": args.count})


def role_worker(side, args) -> None:
    DHPError = side.sdk.DHPError  # noqa: N806 - the SDK's exception class

    store = side.open_store(args.root)
    print("ready", flush=True)
    sys.stdin.readline()  # the start signal: every worker begins together
    latencies, errors, done = [], {}, 0
    started = time.monotonic()
    while True:
        t0 = time.perf_counter()
        try:
            ctx = side.sdk.claim_next(store, [KIND], f"w{args.rep}")
        except DHPError as exc:
            errors[exc.code] = errors.get(exc.code, 0) + 1
            continue
        latencies.append(time.perf_counter() - t0)
        if ctx is None:
            break
        try:
            for _ in range(CHECKPOINTS):
                ctx.checkpoint(STATE)
            ctx.complete({"ok": True})
            done += 1
        except DHPError as exc:
            errors[exc.code] = errors.get(exc.code, 0) + 1
    C.emit({"done": done, "seconds": time.monotonic() - started, "latencies": latencies,
            "errors": errors})


def role_attempts(side, args) -> None:
    store = side.open_store(args.root)
    rows = side.sdk.list_handoffs(store)
    C.emit({"reclaimed": sum(1 for r in rows if r["attempts"] > 1),
            "completed": sum(1 for r in rows if r["state"] == "completed")})


def one(side: str, workers: int, args) -> dict:
    root = C.scratch(f"throughput-{side}-{workers}")
    C.run_child(side, SCRIPT, "--role", "seed", "--root", root,
                "--count", workers * args.per_worker)
    procs = [subprocess.Popen(C.child_cmd(side, SCRIPT, "--role", "worker", "--root", root,
                                          "--rep", i),
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
             for i in range(workers)]
    for proc in procs:
        if proc.stdout.readline().strip() != "ready":
            raise RuntimeError(f"{side}: a worker did not start")
    t0 = time.monotonic()
    for proc in procs:
        proc.stdin.write("go\n")
        proc.stdin.flush()
    reports = [json.loads(proc.stdout.read().strip().splitlines()[-1]) for proc in procs]
    for proc in procs:
        proc.wait()
    wall = time.monotonic() - t0
    after = C.run_child(side, SCRIPT, "--role", "attempts", "--root", root)
    done = sum(r["done"] for r in reports)
    latencies = sorted(x for r in reports for x in r["latencies"])
    errors: dict[str, int] = {}
    for r in reports:
        for code, n in r["errors"].items():
            errors[code] = errors.get(code, 0) + n
    out = {"workers": workers, "handoffs": done, "seconds": round(wall, 3),
           "handoffs_per_s": round(done / wall, 1),
           "checkpoints_per_s": round(done * CHECKPOINTS / wall, 1),
           "claim_ms_p50": round(C.percentile(latencies, 50) * 1000, 2),
           "claim_ms_p99": round(C.percentile(latencies, 99) * 1000, 2),
           "errors": errors, "expired_leases": after["reclaimed"],
           "completed": after["completed"]}
    C.log(f"throughput {side} W={workers}: {out}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--role", help=argparse.SUPPRESS)
    ap.add_argument("--root", help=argparse.SUPPRESS)
    ap.add_argument("--rep", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--count", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--workers", default="1,2,4,8,16")
    ap.add_argument("--per-worker", type=int, default=25,
                    help="handoffs queued per worker process")
    ap.add_argument("--rounds", type=int, default=3,
                    help="runs per side and W, the sides taking turns")
    ap.add_argument("--sides", default="ours,ours_pg")
    args = C.parse(ap, {"workers": "1,2", "per_worker": 3, "rounds": 2})
    if args.child:
        side = C.load_side(args.child)
        {"seed": role_seed, "worker": role_worker, "attempts": role_attempts}[args.role](
            side, args)
        return
    run = C.Run("throughput", args)
    sides = args.sides.split(",")
    out = {"checkpoints_per_handoff": CHECKPOINTS, "state_bytes": len(json.dumps(STATE)),
           "per_worker": args.per_worker, "rounds": args.rounds}
    rows: dict[str, list] = {side: [] for side in sides}
    ratios = {}
    for w in (int(w) for w in args.workers.split(",")):
        got = C.interleave(sides, args.rounds, lambda side, r, w=w: one(side, w, args),
                           f"throughput W={w}")
        for side in sides:
            rows[side].append(combine(got[side]))
        for side in sides[1:]:
            ratios[str(w)] = C.paired([g["handoffs_per_s"] for g in got[side]],
                                      [g["handoffs_per_s"] for g in got[sides[0]]])
    out.update(rows)
    if len(sides) > 1:
        out[f"ratio_{sides[1]}_over_{sides[0]}"] = ratios
    run.finish(out)


def combine(runs: list[dict]) -> dict:
    """One W's runs of one side: medians of the rates and latencies, sums of the errors."""
    errors: dict[str, int] = {}
    for r in runs:
        for code, n in r["errors"].items():
            errors[code] = errors.get(code, 0) + n
    med = {k: round(statistics.median(r[k] for r in runs), 2) for k in
           ("handoffs_per_s", "checkpoints_per_s", "claim_ms_p50", "claim_ms_p99")}
    return {"workers": runs[0]["workers"], **med,
            "handoffs_per_s_runs": [r["handoffs_per_s"] for r in runs], "errors": errors,
            "expired_leases": sum(r["expired_leases"] for r in runs),
            "handoffs": sum(r["handoffs"] for r in runs),
            "completed": sum(r["completed"] for r in runs)}

if __name__ == "__main__":
    main()
