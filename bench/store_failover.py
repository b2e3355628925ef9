"""Store high availability on a real primary and synchronous standby (tests/pg_rig.py, the
steps of docs/guide/high-availability.md): the failover's cost, and what a distant standby
costs each acknowledged write.

1. Failover (--reps times, a fresh pair each): a worker checkpoints in a loop through the
   store URL naming both servers; the primary's processes are SIGKILLed and the standby is
   promoted at once (`pg_ctl promote -w`, as a failover manager would after detecting the
   death). Measured from the kill: the promotion done (`pg_ctl` looks every 0.1 s), and the
   first checkpoint begun after the kill and acknowledged, by the new primary, to the same
   store object. Also: calls answered `unavailable` in
   between, and acknowledged checkpoints missing from the new primary's chain (must be 0).
2. Distance (root only): the standby in a network namespace behind an emulated round trip
   (tc netem, half each way) of --rtt ms; W = 1 and 4 workers (threads, each its own
   handoff) checkpoint for --seconds: acknowledged checkpoints per second and the median
   checkpoint latency.

    python bench/store_failover.py [--reps 5] [--rtt 0,5,25] [--seconds 5] [--quick]

Prints one line of JSON.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))
import _common as C  # noqa: E402
import dhp  # noqa: E402
import pg_rig  # noqa: E402
from _common import log  # noqa: E402


def one_failover() -> dict:
    with pg_rig.PgPair() as pair:
        store = dhp.Store(pair.url())
        hid = dhp.dispatch(store, task_kind="bench.ha", inputs={}, output_schema={},
                           budget={})
        acked: list[tuple[float, int, float]] = []  # (begun, n, acknowledged)
        unknown = 0
        killed_at: list[float] = []
        with dhp.claim(store, hid, worker_id="w1") as ctx:
            def fail_over() -> None:
                killed_at.append(pair.kill_primary())
                pair.promote()
                killed_at.append(time.monotonic())

            timer = threading.Timer(1.0, fail_over)
            timer.start()
            n, deadline = 0, time.monotonic() + 60
            while time.monotonic() < deadline:
                # Done at the first write begun after the kill: only the new primary can
                # have taken it (one begun before may have committed on the old primary).
                if killed_at and acked and acked[-1][0] > killed_at[0]:
                    break
                began = time.monotonic()
                try:
                    ctx.checkpoint({"n": n + 1})
                except dhp.Unavailable:
                    unknown += 1
                    time.sleep(0.01)  # how often a worker would retry
                    continue
                n += 1
                acked.append((began, n, time.monotonic()))
            timer.join()  # the new primary can answer before `pg_ctl promote -w` returns
            ctx.complete({})
        chain = {c["state"]["n"] for c in dhp.checkpoints(store, hid)}
        store.close()
    kill, promoted = killed_at
    return {"promoted_s": promoted - kill, "first_write_s": acked[-1][2] - kill,
            "unavailable_calls": unknown,
            "lost_checkpoints": len({x for _, x, _ in acked} - chain)}


def rate_at(rtt_ms: float, seconds: float, workers: int) -> dict:
    with pg_rig.PgPair(rtt_ms=rtt_ms) as pair:
        store = dhp.Store(pair.url())
        times: list[float] = []
        lock = threading.Lock()
        stop = time.monotonic() + seconds

        def work(i: int) -> None:
            hid = dhp.dispatch(store, task_kind="bench.ha", inputs={"i": i}, output_schema={},
                               budget={})
            with dhp.claim(store, hid, worker_id=f"w{i}") as ctx:
                n = 0
                while time.monotonic() < stop:
                    began = time.monotonic()
                    ctx.checkpoint({"n": n})
                    n += 1
                    with lock:
                        times.append(time.monotonic() - began)
                ctx.complete({})

        threads = [threading.Thread(target=work, args=(i,)) for i in range(workers)]
        began = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.monotonic() - began
        store.close()
    return {"workers": workers, "checkpoints": len(times),
            "per_s": round(len(times) / wall, 1),
            "median_ms": round(C.percentile(times, 50) * 1000, 2),
            "p95_ms": round(C.percentile(times, 95) * 1000, 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5, help="failovers, a fresh pair each")
    ap.add_argument("--rtt", default="0,5,25", help="round trips to the standby, ms")
    ap.add_argument("--seconds", type=float, default=5.0, help="checkpointing per setting")
    args = C.parse(ap, {"reps": 2, "seconds": 1.5})
    if (why := pg_rig.missing()) is not None:
        raise SystemExit(f"store_failover: the rig cannot run: {why}")
    run = C.Run("store_failover", args)
    failovers = []
    for rep in range(args.reps):
        failovers.append(one_failover())
        log(f"failover {rep + 1}/{args.reps}: {failovers[-1]}")
    result: dict = {"reps": args.reps, "failovers": failovers}
    for key in ("promoted_s", "first_write_s"):
        result[key] = C.summary([f[key] for f in failovers])
    result["lost_checkpoints"] = sum(f["lost_checkpoints"] for f in failovers)
    rates = []
    if os.geteuid() == 0:
        for rtt in [float(x) for x in args.rtt.split(",") if x]:
            for workers in (1, 4):
                rates.append({"rtt_ms": rtt, **rate_at(rtt, args.seconds, workers)})
                log(f"rtt {rtt:g} ms: {rates[-1]}")
    else:
        log("not root: no network namespace, so no emulated round trip")
    result["rates"] = rates
    run.finish(result)


if __name__ == "__main__":
    main()
