"""Many units at once in one worker process (issue 23): N small units drained by one
`dhp worker` process running U of them at once, on SQLite and on Postgres. Ours only.

Each unit sleeps 2 ms (simulated I/O), checkpoints, sleeps 2 ms more and returns: a claim,
a checkpoint and a completion, with 4 ms of waiting. The N handoffs are dispatched first;
then `dhp worker bench_units --units U` starts, and the clock runs from its start line to
its N-th `complete` line (read from its log: nothing polls the store meanwhile). The CPU is
the user + system time of the worker's processes (the pool's parent and its child, start-up
included) divided by N; the Postgres server's own CPU is not in it. The async row runs the
same unit as an `async def` task (`await asyncio.sleep`, `await ctx.checkpoint`).

    python bench/worker_concurrency.py [--units 1,8,32] [--n 1000] [--quick]

Prints one line of JSON.
"""

from __future__ import annotations

import argparse
import os
import resource
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402
import dhp  # noqa: E402
from _common import log, scratch  # noqa: E402
from side_ours_pg import location as pg_location  # noqa: E402

TASKS = textwrap.dedent('''
    import asyncio, time
    import dhp

    @dhp.task("bench.unit", output_schema={"type": "object"})
    def unit(ctx, inputs):
        time.sleep(0.002)
        ctx.checkpoint({"half": 1})
        time.sleep(0.002)
        return {"k": inputs["k"]}

    @dhp.task("bench.unit_async", output_schema={"type": "object"})
    async def unit_async(ctx, inputs):
        await asyncio.sleep(0.002)
        await ctx.checkpoint({"half": 1})
        await asyncio.sleep(0.002)
        return {"k": inputs["k"]}
''')


def cpu_of_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def drain(store_name: str, units: int, n: int, kind: str) -> dict:
    folder = Path(scratch(f"conc-{store_name}-{units}"))
    where = str(folder / "store") if store_name == "sqlite" else pg_location(str(folder))
    (folder / "bench_units.py").write_text(TASKS)
    store = dhp.Store(where)
    dhp.dispatch_many(store, [{"task_kind": kind, "inputs": {"k": k}, "output_schema":
                               {"type": "object"}} for k in range(n)])
    cpu_before = cpu_of_children()
    pool = subprocess.Popen([sys.executable, "-m", "dhp.cli.main", "worker", "bench_units",
                             "--store", where, "--kinds", kind, "--units", str(units)],
                            cwd=folder, stderr=subprocess.PIPE, text=True)
    done, lost = 0, 0
    started = ended = None
    for line in pool.stderr:
        if started is None and " start " in line:
            started = time.monotonic()
        elif " complete " in line:
            done += 1
            if done == n:
                ended = time.monotonic()
                break
        elif " lost " in line or " fail " in line or " error " in line:
            lost += 1
    pool.send_signal(signal.SIGTERM)
    pool.communicate(timeout=120)
    cpu = cpu_of_children() - cpu_before
    left = sum(1 for h in dhp.iter_handoffs(store) if h["state"] != "completed")
    store.close()
    if ended is None or left:
        raise SystemExit(f"{store_name} U={units}: {done} of {n} completed, {left} left")
    seconds = ended - started
    row = {"store": store_name, "units": units, "kind": kind, "n": n,
           "seconds": round(seconds, 3), "units_per_s": round(n / seconds, 1),
           "cpu_ms_per_unit": round(1000 * cpu / n, 3), "lost_or_failed": lost}
    log(f"{store_name} U={units} {kind}: {row['units_per_s']} units/s, "
        f"{row['cpu_ms_per_unit']} ms CPU per unit")
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--units", default="1,8,32", help="units at once per run (default 1,8,32)")
    ap.add_argument("--n", type=int, default=1000, help="units per run (default 1000)")
    ap.add_argument("--stores", default="sqlite,postgres")
    ap.add_argument("--quick", action="store_true", help="200 units per run")
    args = ap.parse_args()
    n = 200 if args.quick else args.n
    run = C.Run("worker_concurrency", args)
    rows = []
    for store_name in args.stores.split(","):
        for units in [int(u) for u in args.units.split(",")]:
            rows.append(drain(store_name, units, n, "bench.unit"))
        rows.append(drain(store_name, max(int(u) for u in args.units.split(",")), n,
                          "bench.unit_async"))
    run.finish({"n": n, "io_ms_per_unit": 4, "rows": rows,
                "processes": 1, "cpus": os.cpu_count()})


if __name__ == "__main__":
    main()
