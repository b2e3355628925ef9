"""kill -9 to standby resumed, default settings, for ours and the original.

Each repetition: a worker process claims a handoff and checkpoints a counter every
--interval seconds; a standby process is already running, polling `recover` every --poll
seconds as a user would; at a random moment (uniform in --kill-window seconds after the
standby is ready) the worker gets SIGKILL. Latency is from the kill to the moment the
standby's first checkpoint after recovery (its resumed checkpoint) is acknowledged. Both
sides use their default lease and heartbeat settings. The original needs its supervisor to
orphan the lease before `recover` can succeed, so one `dhp-supervisor` (default intervals)
runs for its whole series; ours runs none (a recoverer needs no supervisor).

The sides take turns repetition by repetition (A B, B A, ...), each in its own store; the
original's supervisor runs through the whole run. Prints one JSON line: median/p95 per side,
the median of the per-repetition ratios (original / ours) with their min-max spread, plus a
lost-checkpoint count (a resumed state older than the last one the worker saw acknowledged;
must be 0).
Usage: python bench/failover.py [--reps 20] [--sides ours,orig] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time

import _common as C

SCRIPT = "failover.py"


# ---------------------------------------------------------------- child roles (one side each)

def role_setup(side, args) -> None:
    store = side.open_store(args.root)
    hid = side.dispatch(store, "bench.failover", {"rep": args.rep, "nonce": time.time()},
                        C.OUTPUT_SCHEMA)
    C.emit({"hid": hid, "durability": side.durability(store)})


def role_worker(side, args) -> None:
    store = side.open_store(args.root)
    ctx = side.claim(store, args.hid, f"worker-{args.rep}-{os.getpid()}")
    with ctx:
        n = 0
        while True:  # runs until SIGKILL
            n += 1
            side.checkpoint(ctx, {"n": n})
            print(f"ack {n}", flush=True)
            time.sleep(args.interval)


def role_standby(side, args) -> None:
    store = side.open_store(args.root)
    wid = f"standby-{args.rep}-{os.getpid()}"
    polls = 0
    ctx = None
    while ctx is None:
        ctx = side.try_recover(store, args.hid, wid)
        polls += 1
        if polls == 1:
            print("ready", flush=True)  # first poll done: the owner was alive
        if ctx is None:
            time.sleep(args.poll)
    with ctx:
        state = side.last_checkpoint(store, args.hid) or {"n": 0}
        side.checkpoint(ctx, {"n": state["n"] + 1})
        resumed_at = time.monotonic()  # CLOCK_MONOTONIC: one clock for every process
        side.complete(ctx, {"n": state["n"] + 1})
    C.emit({"resumed_at": resumed_at, "resumed_from": state["n"], "polls": polls})


# ---------------------------------------------------------------- parent: one series per side

def _read_lines(stream, sink: list) -> None:
    for line in stream:
        sink.append(line.strip())


def _reader(proc) -> tuple[list, threading.Thread]:
    sink: list = []
    thread = threading.Thread(target=_read_lines, args=(proc.stdout, sink), daemon=True)
    thread.start()
    return sink, thread


def _wait_line(reader: tuple[list, threading.Thread], want, proc, timeout: float,
               what: str) -> str:
    sink, thread = reader
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        exited = proc.poll() is not None
        if exited:
            thread.join(5)  # its last lines may still be on their way through the pipe
        for line in list(sink):
            if want(line):
                return line
        if exited:
            raise RuntimeError(f"{what} exited early with {proc.returncode}")
        time.sleep(0.005)
    raise RuntimeError(f"{what}: timed out after {timeout} s")


def one_rep(side: str, root: str, rep: int, args, rng: random.Random) -> dict:
    setup = C.run_child(side, SCRIPT, "--role", "setup", "--root", root, "--rep", rep)
    hid = setup["hid"]
    common = ["--root", root, "--hid", hid, "--rep", str(rep)]
    worker = subprocess.Popen(
        C.child_cmd(side, SCRIPT, "--role", "worker", "--interval", args.interval, *common),
        stdout=subprocess.PIPE, text=True)
    wreader = _reader(worker)
    standby = None
    try:
        _wait_line(wreader, lambda s: s.startswith("ack"), worker, 60, "worker")
        standby = subprocess.Popen(
            C.child_cmd(side, SCRIPT, "--role", "standby", "--poll", args.poll, *common),
            stdout=subprocess.PIPE, text=True)
        sreader = _reader(standby)
        _wait_line(sreader, lambda s: s == "ready", standby, 60, "standby")
        time.sleep(rng.uniform(*args.kill_window))
        killed_at = time.monotonic()
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait()
        wreader[1].join(5)
        acked = [int(s.split()[1]) for s in wreader[0] if s.startswith("ack")]
        line = _wait_line(sreader, lambda s: s.startswith("{"), standby, 120, "standby")
        standby.wait(timeout=30)
    finally:
        for proc in (worker, standby):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
    got = json.loads(line)
    latency = got["resumed_at"] - killed_at
    lost = got["resumed_from"] < max(acked)
    C.log(f"{side} rep {rep + 1}: {latency:.3f} s (worker acked {max(acked)}, "
          f"standby resumed from {got['resumed_from']}, {got['polls']} polls)")
    return {"latency": latency, "lost": lost, "durability": setup["durability"]}


class Series:
    """One side's store and, for a side that needs it, its supervisor, for the whole run."""

    def __init__(self, side: str):
        self.side, self.root, self.sup = side, C.scratch(f"failover-{side}"), None
        self.info = C.run_child(side, SCRIPT, "--role", "info", "--root", self.root)
        if self.info["supervisor_cmd"]:
            self.sup = subprocess.Popen(self.info["supervisor_cmd"], stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)

    def close(self) -> None:
        if self.sup is not None:
            self.sup.terminate()
            self.sup.wait()

    def report(self, reps: list[dict]) -> dict:
        return {"latency_s": C.summary([r["latency"] for r in reps], 3),
                "latencies_s": [round(r["latency"], 4) for r in reps],
                "lost_checkpoints": sum(r["lost"] for r in reps),
                "durability": reps[0]["durability"], "supervisor": self.sup is not None,
                "version": self.info["version"]}


def role_info(side, args) -> None:
    C.emit({"supervisor_cmd": side.supervisor_cmd(args.root) if side.SUPERVISOR_NEEDED else None,
            "version": side.VERSION})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--role", help=argparse.SUPPRESS)
    ap.add_argument("--root", help=argparse.SUPPRESS)
    ap.add_argument("--hid", help=argparse.SUPPRESS)
    ap.add_argument("--rep", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--sides", default="ours,orig")
    ap.add_argument("--interval", type=float, default=0.05,
                    help="worker: seconds between checkpoints")
    ap.add_argument("--poll", type=float, default=0.05, help="standby: seconds between polls")
    ap.add_argument("--kill-window", type=float, nargs=2, default=(0.5, 2.5),
                    help="kill at a uniform random delay in this range after the standby is up")
    ap.add_argument("--seed", type=int, default=1)
    args = C.parse(ap, {"reps": 2, "kill_window": (0.2, 0.6)})
    if args.child:
        side = C.load_side(args.child)
        {"setup": role_setup, "worker": role_worker, "standby": role_standby,
         "info": role_info}[args.role](side, args)
        return
    run = C.Run("failover", args)
    rng = random.Random(args.seed)
    sides = args.sides.split(",")
    out = {"reps": args.reps, "poll_s": args.poll, "checkpoint_interval_s": args.interval,
           "kill_window_s": list(args.kill_window)}
    series: dict[str, Series] = {}
    try:
        for side in sides:
            series[side] = Series(side)
        reps = C.interleave(sides, args.reps,
                            lambda side, i: one_rep(side, series[side].root, i, args, rng))
    finally:
        for one in series.values():
            one.close()
    for side in sides:
        out[side] = series[side].report(reps[side])
    for side in sides:  # each rep of a side is paired with the other sides' rep of that turn
        if side != "ours" and "ours" in out:
            out[f"ratio_{side}_over_ours"] = C.paired(
                [r["latency"] for r in reps[side]], [r["latency"] for r in reps["ours"]], 1)
    if "ours" in out:
        lat = out["ours"]["latency_s"]
        out["target_met"] = lat["median"] < 0.5 and lat["p95"] < 1.0
    run.finish(out)


if __name__ == "__main__":
    sys.exit(main())
