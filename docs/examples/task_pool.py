"""A task function and a pool running it: `dhp worker task_pool` imports this module, takes
work of its kinds, runs `fetch`, and completes. Run as a script, it starts that pool, kills
one of its worker processes with SIGKILL mid-task and watches the pool finish the work from
the last checkpoint: no supervisor, no loop of our own."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import dhp

PAGES = {"type": "object", "required": ["pages"]}


@dhp.task("pages.fetch", output_schema=PAGES,
          budget={"max_attempts": 5, "backoff_s": 1, "backoff_jitter": 0.5})
def fetch(ctx, inputs):
    state = ctx.last_checkpoint or {"page": 0}  # resume where the last worker stopped
    for page in range(state["page"] + 1, inputs["pages"] + 1):
        time.sleep(0.05)  # fetch the page here
        ctx.checkpoint({"page": page})
    return {"pages": inputs["pages"]}


def wait_until(test):
    while not test():
        time.sleep(0.01)


if __name__ == "__main__":
    store_path = Path("./data").resolve()
    store = dhp.Store(store_path)
    # The pool: two worker processes, run from this file's folder so it can import us.
    pool = subprocess.Popen(["dhp", "worker", "task_pool", "--store", str(store_path),
                             "--concurrency", "2"], cwd=Path(__file__).parent,
                            stderr=subprocess.DEVNULL)
    ids = [fetch.dispatch(store, {"site": site, "pages": 40}) for site in ("a", "b", "c")]
    print(f"dispatched {len(ids)} handoffs of {fetch.kind}")

    wait_until(lambda: dhp.status(store, ids[0])["checkpoints"]["count"] >= 10)
    owner = dhp.status(store, ids[0])["owner"]  # "...-<pid>": the pid of its process
    os.kill(int(owner.rsplit("-", 1)[1]), signal.SIGKILL)
    print("killed the worker process holding the first handoff, after 10 pages")

    wait_until(lambda: dhp.status(store, ids[0])["fence"] == 2)
    print("another worker of the pool took it over, fence 2")
    wait_until(lambda: all(dhp.status(store, h)["state"] == "completed" for h in ids))
    for hid in ids:
        pages = [r["state"]["page"] for r in dhp.checkpoints(store, hid)]
        print(dhp.result(store, hid), "each page once:", pages == list(range(1, 41)))

    pool.send_signal(signal.SIGTERM)  # drain: finish or release, then exit
    print("pool exit status:", pool.wait())
    sys.exit(0)
