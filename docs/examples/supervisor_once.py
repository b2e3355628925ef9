"""One supervisor pass (`dhp-supervisor --store ROOT --id ID --once`) over three handoffs: a crashed
worker's (orphaned at once: its liveness lock is free), one whose lease expired and whose
attempts are used up (orphaned, then parked in the dead-letter queue), and a healthy one
(left alone). The supervisor prints one JSON line per action."""

import json
import os
import signal
import subprocess
import sys
import time

import dhp

if sys.argv[1:2] == ["worker"]:  # a worker that claims a handoff and then crashes
    dhp.claim(dhp.Store("./data"), sys.argv[2], "crashy", ttl=30)
    os.kill(os.getpid(), signal.SIGKILL)

store = dhp.Store("./data")
crashed = dhp.dispatch(store, "job", {"name": "crashed"}, {})
exhausted = dhp.dispatch(store, "job", {"name": "exhausted"}, {}, {"max_attempts": 1})
healthy = dhp.dispatch(store, "job", {"name": "healthy"}, {})
names = {crashed: "crashed", exhausted: "exhausted", healthy: "healthy"}

subprocess.run([sys.executable, __file__, "worker", crashed])  # holds a 30 s lease, then dies
stuck = dhp.claim(store, exhausted, "stuck", ttl=0.3, heartbeat_interval=0)  # never beats
ok = dhp.claim(store, healthy, "healthy")  # heartbeats in the background
time.sleep(0.4)

run = subprocess.run(["dhp-supervisor", "--store", "./data", "--id", "sup-1", "--once"],
                     capture_output=True, text=True, check=True)
for line in run.stdout.splitlines():
    event = json.loads(line)
    print(event["action"], names.get(event["handoff_id"], "-"), "fence", event["fence"])

for hid, name in names.items():
    print(name, dhp.status(store, hid)["state"])
ok.release()
