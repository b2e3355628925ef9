"""A racing process for tests/test_race.py. It reads commands on stdin, one per line:

    claim|recover STORE HID START

waits until the store clock (shared by every process on the host) reaches START, so all
racers fire together, performs the operation under its own worker id and prints one line:
"won FENCE" or "lost CODE". It prints "ready" once imported. The winner keeps its lease
(and its heartbeats) until "quit".
"""

from __future__ import annotations

import sys
import time

from dhp import api as dhp
from dhp.core.clock import store_clock
from dhp.core.errors import DHPError


def main(name: str) -> None:
    stores: dict[str, object] = {}
    held = []
    print("ready", flush=True)
    for line in sys.stdin:
        parts = line.split()
        if not parts or parts[0] == "quit":
            break
        op, path, hid, start = parts[0], parts[1], parts[2], float(parts[3])
        store = stores.get(path) or stores.setdefault(path, dhp.Store(path))
        delay = start - store_clock()
        if delay > 0:
            time.sleep(delay)
        try:
            ctx = (dhp.claim if op == "claim" else dhp.recover)(store, hid, name)
            held.append(ctx)
            print(f"won {ctx.fence}", flush=True)
        except DHPError as exc:
            print(f"lost {exc.code}", flush=True)
    for ctx in held:
        if ctx.active:
            ctx.release()


if __name__ == "__main__":
    main(sys.argv[1])
