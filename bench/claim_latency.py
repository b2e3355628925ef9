"""claim_next latency in a full store against an empty one, SQLite beside Postgres.

For each side: in an empty store, --probes handoffs are dispatched and taken one by one with
claim_next (each released after its claim, so the next probe finds the next one). Then the
same in a store that also holds --completed completed and --pending pending handoffs of
another kind (the queue a real deployment carries). The claim must stay flat: its index
finds the oldest takeable row of the kinds asked for without reading the others.

The bulk rows are written through the store's transaction interface (StoreBackend.transaction
and Tx.insert, the calls dispatch itself makes), many per transaction, to seed 110,000
handoffs in minutes rather than hours; the measured claims go through the public SDK.

Prints one JSON line: p50/p99 claim latency in ms, empty and full, and their ratio.
Usage: python bench/claim_latency.py [--completed 100000] [--pending 10000] [--probes 200]
[--sides ours,ours_pg]
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


def probe(side, store, probes: int) -> list[float]:
    sdk = side.sdk
    for n in range(probes):
        sdk.dispatch(store, task_kind="bench.probe", inputs={"n": n}, output_schema={})
    out = []
    for _ in range(probes):
        t0 = time.perf_counter()
        ctx = sdk.claim_next(store, ["bench.probe"], "prober", heartbeat_interval=0)
        out.append(time.perf_counter() - t0)
        ctx.complete({})
    return out


def role_run(side, args) -> None:
    store = side.open_store(args.root)
    if args.completed or args.pending:
        t0 = time.monotonic()
        seed(store, args.completed, args.pending)
        C.log(f"{side.NAME}: seeded {args.completed + args.pending} in "
              f"{time.monotonic() - t0:.0f} s")
    C.emit({"latencies": probe(side, store, args.probes)})


def run(side: str, args, completed: int, pending: int) -> dict:
    root = C.scratch(f"claim-{side}-{completed}")
    got = C.run_child(side, SCRIPT, "--role", "run", "--root", root, "--completed", completed,
                      "--pending", pending, "--probes", args.probes)
    lat = sorted(got["latencies"])
    return {"p50_ms": round(C.percentile(lat, 50) * 1000, 3),
            "p99_ms": round(C.percentile(lat, 99) * 1000, 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--role", help=argparse.SUPPRESS)
    ap.add_argument("--root", help=argparse.SUPPRESS)
    ap.add_argument("--completed", type=int, default=100_000)
    ap.add_argument("--pending", type=int, default=10_000)
    ap.add_argument("--probes", type=int, default=200)
    ap.add_argument("--sides", default="ours,ours_pg")
    args = ap.parse_args()
    if args.child:
        role_run(C.load_side(args.child), args)
        return
    out = {"benchmark": "claim_latency", "completed": args.completed, "pending": args.pending,
           "probes": args.probes}
    for side in args.sides.split(","):
        empty = run(side, args, 0, 0)
        full = run(side, args, args.completed, args.pending)
        out[side] = {"empty": empty, "full": full,
                     "ratio_p50_full_over_empty": C.ratio(full["p50_ms"], empty["p50_ms"])}
        C.log(f"claim latency {side}: {out[side]}")
    C.emit(out)


if __name__ == "__main__":
    main()
