"""Many units at once in one worker process.

One taker (the thread calling `run`) claims a handoff whenever a slot is free and starts a
thread for it; that thread runs the function (a sync one directly, an async one on the
process's event loop, dhp.worker.aio), completes, and claims the next with one look (no
wait), so that under load the slots claim in parallel; when it finds none it frees the
slot. Threads, not only
asyncio, because most task functions are plain blocking code (HTTP clients, SDKs, model
calls) and the store's calls block too; an async function still gets the loop.

Only the taker waits for work, on the store's doorbell (claim_next's wait): an idle process
makes the reads of one waiter, and a ring wakes one claimer, not one per slot. Each unit has
its own worker id (`<host>-u<slot>-<pid>`: the pid stays last), lease and fence; the
process's heartbeat schedule beats every lease from threads of its own, so a slow function
never delays another unit's heartbeat. All units share the process's liveness lock: a
kill -9 frees every one of its handoffs at once.

Stopping (`wake` after `stop` is set, from a signal handler too): the taker claims nothing
more; `finish(grace)` waits up to `grace` seconds for the running units, then cancels the
async ones and releases every handoff still held, with its checkpoints, for another worker.
"""

from __future__ import annotations

import os
import queue
import socket
import sys
import threading
import time
from typing import TextIO

from dhp.core.backend import StoreBackend
from dhp.core.errors import DHPError
from dhp.worker import aio
from dhp.worker.runtime import EXIT_FAILED, EXIT_OK, EXIT_UNAVAILABLE, Runner, log_line
from dhp.worker.task import Task

# Units at once per worker process unless told: agent work mostly waits on the network.
DEFAULT_UNITS = 16


class Slots:
    def __init__(self, store: StoreBackend, tasks: dict[str, Task], *, units: int,
                 stop: threading.Event, out: TextIO = sys.stderr, ttl: float | None = None):
        self.store = store
        host, pid = socket.gethostname(), os.getpid()
        self.worker_id = f"{host}-{pid}"
        self.stop = stop
        self.out = out
        # One unit keeps the process's id (as before); more get one id per slot.
        ids = [self.worker_id] if units == 1 else \
            [f"{host}-u{i + 1}-{pid}" for i in range(units)]
        self.runners = [Runner(store, tasks, i, stop=stop, out=out, ttl=ttl) for i in ids]
        self._free: queue.SimpleQueue = queue.SimpleQueue()  # reentrant: a handler puts
        for runner in self.runners:
            self._free.put(runner)
        self._mutex = threading.Lock()
        self._running: dict[Runner, object] = {}  # runner -> its TaskContext
        self._hurry = threading.Event()
        store.expect_threads(units)

    @property
    def busy(self) -> int:
        return len(self._running)

    def wake(self) -> None:
        """End the taker's wait (for a free slot or for work); signal handlers call it."""
        self._free.put(None)
        self.store.announce_work()

    def hurry(self) -> None:
        """End finish()'s grace now (a second SIGTERM, or the parent died)."""
        self._hurry.set()
        self._free.put(None)

    def run(self) -> int:
        """Take and start units until stopped; an error of the store ends it, logged, with
        the exit code (3 when the store is unavailable, else 1)."""
        try:
            while not self.stop.is_set():
                runner = self._free.get()
                if runner is None or self.stop.is_set():
                    break
                ctx = runner.take()
                if ctx is None:
                    self._free.put(runner)
                    continue
                if self.stop.is_set():  # woken by the stop's ring and took work: give it back
                    runner._release(ctx, "stopping")
                    break
                with self._mutex:
                    self._running[runner] = ctx
                threading.Thread(target=self._unit, args=(runner, ctx), daemon=True,
                                 name=f"dhp-unit-{runner.worker_id}").start()
        except DHPError as exc:
            log_line(self.out, self.worker_id, "error", str(exc))
            return EXIT_FAILED if exc.definite else EXIT_UNAVAILABLE
        return EXIT_OK

    def _unit(self, runner: Runner, ctx) -> None:
        """Run the unit, then, while there is work, the next: each busy slot claims its own
        next unit with one look (claims run in parallel under load); only the taker waits."""
        try:
            while ctx is not None:
                try:
                    runner.run_one(ctx)
                    ctx = None if self.stop.is_set() else runner.take(wait=None)
                except BaseException as exc:  # noqa: BLE001 (logged; the slot goes on)
                    runner.log("error", f"{type(exc).__name__}: {exc}")
                    ctx = None
                with self._mutex:
                    if ctx is None:
                        self._running.pop(runner, None)
                    else:
                        self._running[runner] = ctx
                if ctx is not None and self.stop.is_set():
                    runner._release(ctx, "stopping")
                    ctx = None
        finally:
            with self._mutex:
                self._running.pop(runner, None)
            self._free.put(runner)

    def finish(self, grace: float) -> int:
        """After run(): wait up to `grace` seconds for the running units, then cancel and
        release the rest; how many were released."""
        deadline = time.monotonic() + grace
        while self.busy and not self._hurry.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                self._free.get(timeout=left)  # a unit ended (or a hurry)
            except queue.Empty:
                break
        with self._mutex:
            held = list(self._running.items())
        if not held:
            return 0
        aio.cancel_all()
        return sum(runner._release(ctx, "drained") for runner, ctx in held)
