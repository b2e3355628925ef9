"""claim_next latency in a full store against an empty one, SQLite beside Postgres.

For each side: in an empty store, --probes handoffs are dispatched and taken one by one with
claim_next (each completed after its claim, so the next probe finds the next one); the
same in a store that also holds --completed completed and --pending pending handoffs of
another kind (the queue a real deployment carries). The claim must stay flat: its index
finds the oldest takeable row of the kinds asked for without reading the others.

The bulk rows are written through the store's transaction interface (StoreBackend.transaction
and Tx.insert, the calls dispatch itself makes), many per transaction, to seed 110,000
handoffs in minutes rather than hours; the measured claims go through the public SDK.

One long-lived child per side holds both stores; the sides take turns in windows of --probes
claims, and within a turn the two stores do too (first store and first side alternating).
Prints one JSON line: p50/p99 claim latency in ms over all windows, empty and full, and the
full/empty ratio of the per-window p50s (the median of the per-window ratios with their
min-max spread); the same for the second side's full store over the first's.
Usage: python bench/claim_latency.py [--completed 100000] [--pending 10000] [--probes 20]
[--windows 10] [--sides ours,ours_pg] [--quick]
"""

from __future__ import annotations

import argparse
import datetime as dt
import time

import _common as C

SCRIPT = "claim_latency.py"
BATCH = 2000


def seed(store, completed: int, pending: int) -> None:
    from dhp.core import machine
    from dhp.core.envelope import make_envelope

    now = dt.datetime.now(dt.timezone.utc)
    for start in range(0, completed + pending, BATCH):
        with store.transaction() as tx:
            for n in range(start, min(start + BATCH, completed + pending)):
                done = n < completed
                intent = {"dhp": "1.0", "task_kind": "bench.history" if done else "bench.other",
                          "inputs": {"n": n}, "output_schema": {}, "budget": {}}
                envelope = make_envelope(intent, created_at=now)
                record = machine.new_record({})
                if done:
                    record = dict(record, state="completed", fence=1, attempts=1)
                tx.insert(envelope["handoff_id"], envelope, record, envelope["created_at"])


def serve(side, args) -> None:
    """Two stores of one side, an empty one and a full one; each `probe` command dispatches
    `n` probe handoffs into one of them (untimed) and times claim_next on each."""
    stores = {"empty": side.open_store(C.scratch(f"claim-{side.NAME}-empty")),
              "full": side.open_store(C.scratch(f"claim-{side.NAME}-full"))}
    t0 = time.monotonic()
    seed(stores["full"], args.completed, args.pending)
    C.log(f"{side.NAME}: seeded {args.completed + args.pending} in {time.monotonic() - t0:.0f} s")
    sdk, counter = side.sdk, iter(range(10**9))

    def probe(store: str, n: int) -> dict:
        for _ in range(n):
            sdk.dispatch(stores[store], task_kind="bench.probe", inputs={"n": next(counter)},
                         output_schema={})
        out = []
        for _ in range(n):
            t0 = time.perf_counter()
            ctx = sdk.claim_next(stores[store], ["bench.probe"], "prober", heartbeat_interval=0)
            out.append(time.perf_counter() - t0)
            ctx.complete({})
        return {"latencies": out}

    probe("empty", 3)  # warm up both
    probe("full", 3)
    C.serve({"probe": probe})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--completed", type=int, default=100_000)
    ap.add_argument("--pending", type=int, default=10_000)
    ap.add_argument("--probes", type=int, default=20, help="claims per window")
    ap.add_argument("--windows", type=int, default=10,
                    help="windows per side and store, taking turns")
    ap.add_argument("--sides", default="ours,ours_pg")
    args = C.parse(ap, {"completed": 2000, "pending": 200, "probes": 10, "windows": 3})
    if args.child:
        serve(C.load_side(args.child), args)
        return
    run = C.Run("claim_latency", args)
    sides = args.sides.split(",")
    out = {"completed": args.completed, "pending": args.pending, "probes": args.probes,
           "windows": args.windows}
    children = C.drive(sides, SCRIPT, "--completed", args.completed, "--pending",
                       args.pending)
    try:
        # Within a turn the empty and the full store alternate which goes first too.
        got = C.interleave(sides, args.windows, lambda side, w: {
            store: children[side].ask("probe", store=store, n=args.probes)["latencies"]
            for store in C.order(["empty", "full"], w)}, "claim latency")
    finally:
        C.close_all(children)
    p50 = {side: {store: [C.percentile(w[store], 50) * 1000 for w in got[side]]
                  for store in ("empty", "full")} for side in sides}
    for side in sides:
        row = {}
        for store in ("empty", "full"):
            every = sorted(x for w in got[side] for x in w[store])
            row[store] = {"p50_ms": round(C.percentile(every, 50) * 1000, 3),
                          "p99_ms": round(C.percentile(every, 99) * 1000, 3)}
        row["ratio_p50_full_over_empty"] = C.paired(p50[side]["full"], p50[side]["empty"])
        out[side] = row
        C.log(f"claim latency {side}: {row}")
    for side in sides[1:]:
        out[f"ratio_p50_full_{side}_over_{sides[0]}"] = C.paired(p50[side]["full"],
                                                                 p50[sides[0]]["full"])
    run.finish(out)


if __name__ == "__main__":
    main()
