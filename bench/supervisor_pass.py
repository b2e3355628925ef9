"""The cost of one supervisor pass: it must follow the expired leases, not the running ones.

For each size (1,000, 5,000 and 20,000 running handoffs by default), per side:
- a holder process dispatches and claims the running handoffs and stays alive (so for ours
  their owner's liveness lock is held and only the lease decides): N - 10 with a one-hour
  lease, and, before each of --rounds rounds, 10 fresh ones with a 0.5 s lease;
- a supervisor process, after the 10 short leases have expired, runs one timed pass
  (ours: `dhp.supervisor`'s single-pass call; the original: its leader's `scan()`), and then
  one more with nothing expired (the idle cost of a pass at that size).

Running stays N in every round (the previous round's 10 are orphaned by then). Both sides
are set up before the rounds start and take turns within each round (the first side
alternating). Prints one JSON line: per side and size the median pass time with 10 expired
and with 0 expired, the actions per pass, the median of the per-round ratios original / ours
with their min-max spread, and the growth of the 10-expired pass from the smallest to the largest
size (a cost that follows the running handoffs grows about 20x from 1,000 to 20,000).
Ours is seeded through the SDK (one durable transaction per call); the original through its
SDK inside one transaction per batch, which its autocommit connection allows.
Usage: python bench/supervisor_pass.py [--sizes 1000,5000,20000] [--rounds 5] [--sides ours,orig]
       [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import _common as C

SCRIPT = "supervisor_pass.py"
EXPIRING = 10
SHORT_TTL = 0.5


def role_holder(side, args) -> None:
    store = side.open_store(args.root)
    stamp = time.time()

    def fresh(n: int, tag: str) -> list[str]:
        side.begin_batch(store)
        hids = [side.dispatch(store, "bench.sup", {"tag": tag, "i": i, "t": stamp},
                              C.OUTPUT_SCHEMA) for i in range(n)]
        side.end_batch(store)
        return hids

    long_lived = fresh(args.running - EXPIRING, "long")
    spare = fresh(EXPIRING * args.rounds, "short")
    begin = time.perf_counter()
    batch = 1000
    for start in range(0, len(long_lived), batch):
        side.begin_batch(store)
        for hid in long_lived[start:start + batch]:
            side.plant_claim(store, hid, "holder", 3600.0)  # no heartbeat threads
        side.end_batch(store)
    C.log(f"{side.NAME}: holder claimed {len(long_lived)} in {time.perf_counter() - begin:.1f} s")

    def expire() -> dict:
        """Plant the next 10 claims with a short lease (they expire unrenewed)."""
        for hid in spare[:EXPIRING]:
            side.plant_claim(store, hid, "holder", SHORT_TTL)
        del spare[:EXPIRING]
        return {}

    C.serve({"expire": expire})


def role_supervisor(side, args) -> None:
    run_pass = side.supervisor_pass(args.root)

    def one_pass() -> dict:
        begin = time.perf_counter()
        actions = run_pass()
        elapsed = time.perf_counter() - begin
        return {"ms": elapsed * 1000,
                "actions": len(actions) if hasattr(actions, "__len__") else None}

    C.serve({"pass": one_pass})


def measure(sides: list[str], running: int, rounds: int) -> dict:
    """Every side's holder and supervisor set up first (one after the other), then rounds in
    which the sides take turns: their 10 short leases planted together, then, after they
    expired, one pass per side with 10 expired and one with 0, the first side alternating."""
    holders: dict[str, C.Driven] = {}
    sups: dict[str, C.Driven] = {}
    try:
        for side in sides:
            root = C.scratch(f"sup-{side}-{running}")
            holders[side] = C.Driven(side, SCRIPT, "--role", "holder", "--root", root,
                                     "--running", running, "--rounds", rounds)
            sups[side] = C.Driven(side, SCRIPT, "--role", "supervisor", "--root", root)
            sups[side].ask("pass")  # warm-up: first pass may set things up (leadership)
        busy: dict[str, list] = {side: [] for side in sides}
        idle: dict[str, list] = {side: [] for side in sides}
        actions: dict[str, list] = {side: [] for side in sides}
        for r in range(rounds):
            for side in sides:
                holders[side].ask("expire")
            time.sleep(SHORT_TTL + 0.1)
            for side in C.order(sides, r):
                got = sups[side].ask("pass")
                busy[side].append(got["ms"])
                actions[side].append(got["actions"])
            for side in C.order(sides, r):
                idle[side].append(sups[side].ask("pass")["ms"])
    finally:
        for child in [*sups.values(), *holders.values()]:
            child.close()
    out = {}
    for side in sides:
        out[side] = {"running": running,
                     "pass_10_expired_ms": round(statistics.median(busy[side]), 2),
                     "pass_0_expired_ms": round(statistics.median(idle[side]), 2),
                     "pass_10_expired_ms_runs": [round(x, 2) for x in busy[side]],
                     "actions_per_pass": actions[side]}
        C.log(f"{side} {running} running: {out[side]}")
    if "ours" in out and "orig" in out:
        out["orig_over_ours_10_expired"] = C.paired(busy["orig"], busy["ours"], 1)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--role", help=argparse.SUPPRESS)
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--root", help=argparse.SUPPRESS)
    ap.add_argument("--running", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--sizes", default="1000,5000,20000")
    ap.add_argument("--sides", default="ours,orig")
    args = C.parse(ap, {"sizes": "200,1000", "rounds": 2})
    if args.child:
        side = C.load_side(args.child)
        {"holder": role_holder, "supervisor": role_supervisor}[args.role](side, args)
        return
    run = C.Run("supervisor_pass", args)
    sizes = [int(s) for s in args.sizes.split(",")]
    sides = args.sides.split(",")
    out = {"expired_per_pass": EXPIRING, "rounds": args.rounds}
    per_size = [measure(sides, n, args.rounds) for n in sizes]
    for side in sides:
        results = [row[side] for row in per_size]
        first, last = results[0], results[-1]
        out[side] = {"sizes": results,
                     "growth_10_expired_largest_over_smallest": C.ratio(
                         last["pass_10_expired_ms"], first["pass_10_expired_ms"]),
                     "running_ratio": round(last["running"] / first["running"], 1)}
    if "ours" in out and "orig" in out:
        out["ratio_orig_over_ours_10_expired"] = {
            str(n): row["orig_over_ours_10_expired"] for n, row in zip(sizes, per_size,
                                                                       strict=True)}
    run.finish(out)

if __name__ == "__main__":
    sys.exit(main())
