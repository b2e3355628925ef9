"""The cost of one supervisor pass: it must follow the expired leases, not the running ones.

For each size (1,000, 5,000 and 20,000 running handoffs by default), per side:
- a holder process dispatches and claims the running handoffs and stays alive (so for ours
  their owner's liveness lock is held and only the lease decides): N - 10 with a one-hour
  lease, and, before each of --rounds rounds, 10 fresh ones with a 0.5 s lease;
- a supervisor process, after the 10 short leases have expired, runs one timed pass
  (ours: `dhp.supervisor`'s single-pass call; the original: its leader's `scan()`), and then
  one more with nothing expired (the idle cost of a pass at that size).

Running stays N in every round (the previous round's 10 are orphaned by then). Prints one
JSON line: per side and size the median pass time with 10 expired and with 0 expired, the
actions per pass, and the growth of the 10-expired pass from the smallest to the largest
size (a cost that follows the running handoffs grows about 20x from 1,000 to 20,000).
Ours is seeded through the SDK (one durable transaction per call); the original through its
SDK inside one transaction per batch, which its autocommit connection allows.
Usage: python bench/supervisor_pass.py [--sizes 1000,5000,20000] [--rounds 3] [--sides ours,orig]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
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
    print("ready", flush=True)
    for line in sys.stdin:
        if line.strip() != "expire":
            break
        for hid in spare[:EXPIRING]:
            side.plant_claim(store, hid, "holder", SHORT_TTL)
        spare = spare[EXPIRING:]
        print("ok", flush=True)


def role_supervisor(side, args) -> None:
    run_pass = side.supervisor_pass(args.root)
    print("ready", flush=True)
    for line in sys.stdin:
        if line.strip() != "pass":
            break
        begin = time.perf_counter()
        actions = run_pass()
        elapsed = time.perf_counter() - begin
        count = len(actions) if hasattr(actions, "__len__") else None
        print(json.dumps({"ms": elapsed * 1000, "actions": count}), flush=True)


class Child:
    """A role process driven line by line over stdin/stdout."""

    def __init__(self, side: str, role: str, *args: str):
        self.proc = subprocess.Popen(C.child_cmd(side, SCRIPT, "--role", role, *args),
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.expect("ready")

    def ask(self, command: str) -> str:
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return self.read()

    def read(self) -> str:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"child exited with {self.proc.wait()}")
        return line.strip()

    def expect(self, want: str) -> None:
        got = self.read()
        if got != want:
            raise RuntimeError(f"expected {want!r} from child, got {got!r}")

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("exit\n")
                self.proc.stdin.flush()
                self.proc.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()


def measure(side: str, running: int, rounds: int) -> dict:
    root = C.scratch(f"sup-{side}-{running}")
    holder = Child(side, "holder", "--root", root, "--running", str(running),
                   "--rounds", str(rounds))
    sup = None
    try:
        sup = Child(side, "supervisor", "--root", root)
        sup.ask("pass")  # warm-up: first pass may set things up (leadership, caches)
        busy, idle, actions = [], [], []
        for _ in range(rounds):
            holder.ask("expire")
            time.sleep(SHORT_TTL + 0.1)
            got = json.loads(sup.ask("pass"))
            busy.append(got["ms"])
            actions.append(got["actions"])
            idle.append(json.loads(sup.ask("pass"))["ms"])
    finally:
        for child in (sup, holder):
            if child is not None:
                child.close()
    out = {"running": running, "pass_10_expired_ms": round(statistics.median(busy), 2),
           "pass_0_expired_ms": round(statistics.median(idle), 2),
           "actions_per_pass": actions}
    C.log(f"{side} {running} running: 10 expired {out['pass_10_expired_ms']} ms, "
          f"0 expired {out['pass_0_expired_ms']} ms, actions {actions}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--role", help=argparse.SUPPRESS)
    ap.add_argument("--root", help=argparse.SUPPRESS)
    ap.add_argument("--running", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sizes", default="1000,5000,20000")
    ap.add_argument("--sides", default="ours,orig")
    args = ap.parse_args()
    if args.child:
        side = C.load_side(args.child)
        {"holder": role_holder, "supervisor": role_supervisor}[args.role](side, args)
        return
    sizes = [int(s) for s in args.sizes.split(",")]
    out = {"benchmark": "supervisor_pass", "expired_per_pass": EXPIRING, "rounds": args.rounds}
    for side in args.sides.split(","):
        C.log(f"supervisor_pass: {side}")
        results = [measure(side, n, args.rounds) for n in sizes]
        first, last = results[0], results[-1]
        out[side] = {"sizes": results,
                     "growth_10_expired_largest_over_smallest": C.ratio(
                         last["pass_10_expired_ms"], first["pass_10_expired_ms"]),
                     "running_ratio": round(last["running"] / first["running"], 1)}
    if "ours" in out and "orig" in out:
        out["ratio_orig_over_ours_10_expired"] = {
            str(o["running"]): C.ratio(g["pass_10_expired_ms"], o["pass_10_expired_ms"])
            for o, g in zip(out["ours"]["sizes"], out["orig"]["sizes"], strict=True)}
    C.emit(out)


if __name__ == "__main__":
    sys.exit(main())
