"""SIGTERM drains: a worker being shut down (a deploy, a scale-in, `kill PID`) releases its
leases at once, so a standby can start without waiting for them to expire."""

import subprocess
import sys
import time

import dhp

if sys.argv[1:2] == ["worker"]:
    with dhp.claim(dhp.Store("./data"), sys.argv[2], "worker") as ctx:
        ctx.checkpoint({"batch": 1})
        print("worker: checkpointed batch 1", flush=True)
        time.sleep(60)  # busy with batch 2 when SIGTERM arrives
    sys.exit(0)

store = dhp.Store("./data")
hid = dhp.dispatch(store, "batch.run", {"batches": 2}, {"type": "object"})
worker = subprocess.Popen([sys.executable, __file__, "worker", hid], stdout=subprocess.PIPE,
                          text=True)
print(worker.stdout.readline(), end="")
worker.terminate()  # SIGTERM
print("worker exit status:", worker.wait())  # 143 = 128 + SIGTERM
print("state:", dhp.status(store, hid)["state"])  # released at once, not in 5 s
with dhp.claim(store, hid, "standby") as ctx:
    print("standby resumes from", ctx.last_checkpoint)
    ctx.complete({"batches": 2})
