"""A worker process for the failover tests, driven by the test through argv, stdin and
signals. Every line it prints is flushed at once, so the test sees each acknowledgement.

    worker.py STORE HID WORKER_ID MODE [TTL [CHECKPOINTS]]

MODE hold:   claim, checkpoint CHECKPOINTS times (print "ack SEQ" after each), print "ready",
             then idle (heartbeating) until killed or signalled.
MODE zombie: like hold, but with a heartbeat interval of 0.9 * TTL so the test can SIGSTOP it
             between heartbeats; after "ready" it waits for a line on stdin, then tries every
             write once and prints one JSON line {"checkpoint": code, ...} ("ok" if accepted).
"""

from __future__ import annotations

import json
import sys
import time

from dhp import api as dhp
from dhp.core.errors import DHPError


def say(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def attempt(call) -> str:
    try:
        call()
        return "ok"
    except DHPError as exc:
        return exc.code


def main(argv: list[str]) -> None:
    store_path, hid, worker_id, mode = argv[:4]
    ttl = float(argv[4]) if len(argv) > 4 else None
    count = int(argv[5]) if len(argv) > 5 else 3
    store = dhp.Store(store_path)
    interval = 0.9 * ttl if mode == "zombie" and ttl else None
    ctx = dhp.claim(store, hid, worker_id, ttl=ttl, heartbeat_interval=interval)
    say(f"fence {ctx.fence}")
    for i in range(count):
        record = ctx.checkpoint({"step": i + 1, "by": worker_id})
        say(f"ack {record['seq']}")
    say("ready")
    if mode == "hold":
        while True:
            time.sleep(60)
    sys.stdin.readline()
    outcome = {
        "checkpoint": attempt(lambda: ctx.checkpoint({"step": "late", "by": worker_id})),
        "heartbeat": attempt(ctx.heartbeat),
        "complete": attempt(lambda: ctx.complete({"late": True})),
        "release": attempt(ctx.release),
    }
    say(json.dumps(outcome, sort_keys=True))


if __name__ == "__main__":
    main(sys.argv[1:])
