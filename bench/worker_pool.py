"""The worker runtime: what an idle worker costs the store, how fast a waiting worker sees new
work, and how fast a `dhp worker` pool resumes a killed worker's handoff. Ours only: the
original dhp-protocol 1.3.0 has no worker runtime, no waiting claim and no claim_next.

- idle_reads_per_minute: store transactions made by one claim_next(wait=...) on an idle
  store (`idle`), and while another live process holds a handoff of the same kind with
  background heartbeats (`other_busy`: the waiter also wakes when that lease could lapse).
- wake_latency_s: a child process dispatches; from its dispatch returning to the waiter in
  this process holding the handoff (CLOCK_MONOTONIC is shared by every process on the host).
- pool_failover_s: `dhp worker --concurrency 2` runs a task that checkpoints every 50 ms;
  kill -9 of the worker holding it, at a random moment, to the first checkpoint of the
  sibling that took it over; no supervisor runs. `rework` counts checkpoints written twice.

    python bench/worker_pool.py [--idle-seconds 60] [--reps 10] [--quick]

Prints one line of JSON.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402
import dhp  # noqa: E402
from _common import log, scratch, summary  # noqa: E402

KIND = "bench.count"
SCHEMA = {"type": "object"}
TASKS = textwrap.dedent('''
    import time
    import dhp

    @dhp.task("bench.count", output_schema={"type": "object"})
    def count(ctx, inputs):
        i = (ctx.last_checkpoint or {"i": 0})["i"]
        while i < inputs["n"]:
            time.sleep(0.05)
            i += 1
            ctx.checkpoint({"i": i, "t": time.monotonic(), "fence": ctx.fence})
        return {"n": i}
''')


def counted(store) -> list[int]:
    """Count the store's transactions from now on."""
    count = [0]
    real = store.transaction

    def transaction(*args, **kwargs):
        count[0] += 1
        return real(*args, **kwargs)

    store.transaction = transaction
    return count


def idle_reads(folder: Path, seconds: float, busy: bool) -> float:
    store = dhp.Store(folder)
    holder = None
    if busy:
        hid = dhp.dispatch(store, KIND, {"held": True}, SCHEMA)
        code = ("import sys, time, dhp; s = dhp.Store(sys.argv[1]); "
                "c = dhp.claim(s, sys.argv[2], 'holder'); print('ok', flush=True); "
                "time.sleep(3600)")
        holder = subprocess.Popen([sys.executable, "-c", code, str(folder), hid],
                                  stdout=subprocess.PIPE, text=True)
        holder.stdout.readline()
    reads = counted(store)
    try:
        assert dhp.claim_next(store, KIND, "idle", wait=seconds) is None
    finally:
        if holder is not None:
            holder.kill()
            holder.wait()
    return reads[0] * 60.0 / seconds


def wake_latency(folder: Path, reps: int) -> list[float]:
    store = dhp.Store(folder)
    code = ("import sys, time, dhp; s = dhp.Store(sys.argv[1]); time.sleep(float(sys.argv[3]));"
            "dhp.dispatch(s, 'bench.wake', {'n': int(sys.argv[2])}, {'type': 'object'}); "
            "print(time.monotonic(), flush=True)")
    out = []
    for n in range(reps):
        child = subprocess.Popen([sys.executable, "-c", code, str(folder), str(n),
                                  str(random.uniform(0.2, 0.6))], stdout=subprocess.PIPE,
                                 text=True)
        ctx = dhp.claim_next(store, "bench.wake", "waiter", wait=60)
        got = time.monotonic()
        dispatched = float(child.stdout.readline())
        child.wait()
        ctx.complete({})
        out.append(got - dispatched)
    return out


def pool_failover(folder: Path, reps: int) -> tuple[list[float], int]:
    (folder / "bench_tasks.py").write_text(TASKS)
    pool = subprocess.Popen([sys.executable, "-m", "dhp.cli.main", "worker", "bench_tasks",
                             "--store", str(folder / "store"), "--create", "--concurrency", "2",
                             "--ttl", "60"], cwd=folder, stderr=subprocess.DEVNULL)
    time.sleep(2.0)
    store = dhp.Store(folder / "store")
    latencies, rework = [], 0
    try:
        for n in range(reps):
            hid = dhp.dispatch(store, KIND, {"n": 60, "rep": n}, SCHEMA)
            while dhp.status(store, hid)["checkpoints"]["count"] < 5:
                time.sleep(0.01)
            time.sleep(random.uniform(0.0, 1.0))
            owner = dhp.status(store, hid)["owner"]
            killed = time.monotonic()
            os.kill(int(owner.rsplit("-", 1)[1]), signal.SIGKILL)
            while dhp.status(store, hid)["state"] != "completed":
                time.sleep(0.05)
            records = dhp.checkpoints(store, hid)
            first = next(r for r in records if r["fence"] == 2)
            latencies.append(first["state"]["t"] - killed)
            rework += len(records) - len({r["state"]["i"] for r in records})
            log(f"pool failover {n + 1}/{reps}: {latencies[-1]:.3f}s")
    finally:
        pool.send_signal(signal.SIGTERM)
        pool.wait(60)
    return latencies, rework


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--idle-seconds", type=float, default=60.0)
    parser.add_argument("--reps", type=int, default=10)
    args = C.parse(parser, {"idle_seconds": 12.0, "reps": 2})
    run = C.Run("worker_pool", args)
    log(f"idle waiter, {args.idle_seconds:.0f}s on an idle store")
    idle = idle_reads(Path(scratch("idle")), args.idle_seconds, busy=False)
    log(f"idle waiter, {args.idle_seconds:.0f}s beside a busy handoff")
    busy = idle_reads(Path(scratch("busy")), args.idle_seconds, busy=True)
    log("wake latency")
    wakes = wake_latency(Path(scratch("wake")), args.reps * 2)
    log("pool failover")
    failovers, rework = pool_failover(Path(scratch("pool")), args.reps)
    run.finish({"idle_seconds": args.idle_seconds, "idle_reads_per_minute": {"idle": round(idle, 1),
                                                                "other_busy": round(busy, 1)},
          "wake_latency_s": {**summary(wakes), "runs": [round(v, 4) for v in wakes]},
          "pool_failover_s": {**summary(failovers), "runs": [round(v, 4) for v in failovers]},
          "rework_checkpoints": rework, "supervisor": False})


if __name__ == "__main__":
    threading.current_thread().name = "bench"
    main()
