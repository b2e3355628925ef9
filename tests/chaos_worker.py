"""A worker process for the kill tests (test_chaos.py, test_supervisor.py).

  chaos_worker.py loop STORE HANDOFF_ID STEPS
      Recover the handoff (waiting while its owner is alive), resume after the last
      checkpoint and run steps 1..STEPS, one checkpoint each, then complete. It does steps
      only as the test grants them on stdin ("go N": N more steps), so the test decides when
      the work happens and can kill it in the middle of a checkpoint. Prints (flushed):
        standing_by                       started, about to recover
        start FENCE NEXT_STEP             owns the handoff, resumes at NEXT_STEP
        begin STEP                        about to checkpoint STEP
        ack SEQ FENCE HASH                checkpoint SEQ acknowledged by the store
        done FENCE                        completion acknowledged
        idle                              nothing left to recover
  chaos_worker.py hold STORE HANDOFF_ID TTL
      Claim the handoff with lease TTL, print "claimed FENCE", then keep it (heartbeating)
      until killed.

A step's state is {"step": s, "total": sum of value(1..s)}: a lost, repeated or reordered
step changes every later total, so the final result checks the whole history.
"""

from __future__ import annotations

import os
import sys
import time

from dhp import api
from dhp.core.errors import Conflict

OUTPUT_SCHEMA = {"type": "object", "required": ["steps", "total"],
                 "properties": {"steps": {"type": "integer"}, "total": {"type": "integer"}}}


def value(step: int) -> int:
    return (step * 7919) % 1013


def say(*parts: object) -> None:
    # One write per line: a kill can then only cut off a whole line, never half of one.
    sys.stdout.write(" ".join(map(str, parts)) + "\n")
    sys.stdout.flush()


def recover_when_free(store, hid: str, worker: str):
    """Recover as soon as the owner is gone; None when the handoff is finished."""
    while True:
        try:
            return api.recover(store, hid, worker)
        except Conflict:
            if api.status(store, hid)["state"] in ("completed", "cancelled"):
                return None
            time.sleep(0.002)  # the owner's liveness lock is held: it is alive


def loop(store_path: str, hid: str, steps: int) -> int:
    store = api.Store(store_path, ttl=5.0)
    worker = f"chaos-{os.getpid()}"
    say("standing_by")
    ctx = recover_when_free(store, hid, worker)
    if ctx is None:
        say("idle")
        return 0
    last = ctx.last_checkpoint
    step, total = (last["step"], last["total"]) if last else (0, 0)
    say("start", ctx.fence, step + 1)
    granted = 0
    while step < steps:
        if granted == 0:
            line = sys.stdin.readline()
            if not line:
                return 3  # the test went away
            granted = int(line.split()[1])
        step, total = step + 1, total + value(step + 1)
        say("begin", step)
        record = ctx.checkpoint({"step": step, "total": total})
        say("ack", record["seq"], record["fence"], record["hash"])
        granted -= 1
    ctx.complete({"steps": steps, "total": total})
    say("done", ctx.fence)
    return 0


def hold(store_path: str, hid: str, ttl: float) -> int:
    store = api.Store(store_path, ttl=ttl)
    ctx = api.claim(store, hid, f"holder-{os.getpid()}", ttl=ttl)
    say("claimed", ctx.fence)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    mode, store_arg, hid_arg, number = sys.argv[1:5]
    if mode == "loop":
        sys.exit(loop(store_arg, hid_arg, int(number)))
    sys.exit(hold(store_arg, hid_arg, float(number)))
