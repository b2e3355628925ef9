"""kill -9 a worker mid-job; a standby recovers at once and resumes from the last checkpoint.

Run without arguments. The program starts a copy of itself as the worker process
(`kill_and_recover.py worker HANDOFF_ID`), which SIGKILLs itself right after step 3.
"""

import os
import signal
import subprocess
import sys
import time

import dhp

STEPS = 6


def work(ctx, who):
    """Do the remaining steps, one checkpoint each; the worker dies after step 3."""
    state = ctx.last_checkpoint or {"done": []}
    for step in range(len(state["done"]) + 1, STEPS + 1):
        state = {"done": state["done"] + [step]}
        ctx.checkpoint(state)
        print(f"{who}: step {step} checkpointed (fence {ctx.fence})", flush=True)
        if who == "worker" and step == 3:
            os.kill(os.getpid(), signal.SIGKILL)  # no cleanup, no release: a real crash
    ctx.complete({"steps": len(state["done"])})


def main():
    store = dhp.Store("./data")
    hid = dhp.dispatch(store, "demo.steps", {"steps": STEPS},
                       {"type": "object", "required": ["steps"]})
    worker = subprocess.run([sys.executable, __file__, "worker", hid])
    print("worker exit status:", worker.returncode)  # -9: killed by SIGKILL

    # The dead worker's 5 s lease is still live, but its liveness lock is free,
    # so recover takes the handoff at once, under a higher fence.
    started = time.monotonic()
    with dhp.recover(store, hid, worker_id="standby") as ctx:
        print("standby: recovered in under a second:", time.monotonic() - started < 1.0)
        print("standby: resuming from", ctx.last_checkpoint)
        work(ctx, "standby")
    print("result:", dhp.result(store, hid))
    print("checkpoints:", len(dhp.checkpoints(store, hid)))  # 6: no step done twice


if __name__ == "__main__":
    if sys.argv[1:2] == ["worker"]:
        with dhp.claim(dhp.Store("./data"), sys.argv[2], worker_id="worker") as ctx:
            work(ctx, "worker")
    else:
        main()
