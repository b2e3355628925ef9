"""One worker: take the next handoff of the registered kinds, run its function, complete it,
and go on, until told to stop.

Waiting uses claim_next's wait (no busy polling; spec/schedule.md). What happens to a taken
handoff:
- the function returns: the value is the result, completed (validated by the output schema);
- the function raises, or returns a result the schema refuses: the attempt failed; the
  handoff is released with the budget's backoff (DHP-SCH-003) and the error's type, message
  and traceback (a failure record, DHP-BUD-008); the last of max_attempts goes to the DLQ
  with that release (DHP-BUD-011);
- a write is refused with lease_lost, cancelled or budget_exceeded: the handoff is no longer
  ours; nothing more is written;
- the worker is told to stop (SIGTERM) and the grace time runs out: `Drain` interrupts the
  function and the handoff is released at once, without a backoff, for another worker.

One log line per event: take, complete, fail, lost, release.
"""

from __future__ import annotations

import concurrent.futures
import datetime as _dt
import sys
import threading
import time
from typing import TextIO

from dhp import api
from dhp.core.backend import StoreBackend
from dhp.core.errors import BudgetExceeded, Cancelled, DHPError, LeaseLost, SchemaViolation
from dhp.worker import aio
from dhp.worker.task import Task

_LOST = (LeaseLost, Cancelled, BudgetExceeded)
# Exit codes of `dhp worker` and of each of its processes (cli/worker.py documents them).
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_UNAVAILABLE = 0, 1, 2, 3
# How long one claim_next waits before the loop looks at `stop` again; stopping also rings
# the store's doorbell, so this only bounds a missed ring.
WAIT_S = 60.0


class Drain(BaseException):
    """Raised in a worker to give its handoff back now (the SIGTERM grace time is over)."""


def log_line(out: TextIO, who: str, event: str, text: str) -> None:
    """One line: UTC time, worker, event, details."""
    now = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    out.write(f"{now[:-4]}Z {who} {event} {text}\n")
    out.flush()


class Runner:
    """The loop of one worker (a process, or a thread of a process)."""

    def __init__(self, store: StoreBackend, tasks: dict[str, Task], worker_id: str, *,
                 stop: threading.Event, out: TextIO = sys.stderr, ttl: float | None = None):
        self.store = store
        self.tasks = tasks
        self.worker_id = worker_id
        self.stop = stop
        self.out = out
        self.ttl = ttl
        self.busy = False  # running a function (a drain must interrupt or wait for it)

    def log(self, event: str, text: str) -> None:
        log_line(self.out, self.worker_id, event, text)

    def run_until_stopped(self) -> int:
        """run() until stopped or drained; an error of the store ends it, logged, with the
        exit code (3 when the store is unavailable, else 1)."""
        try:
            self.run()
        except Drain:
            pass
        except DHPError as exc:
            self.log("error", str(exc))
            return EXIT_FAILED if exc.definite else EXIT_UNAVAILABLE
        return EXIT_OK

    def run(self) -> None:
        while not self.stop.is_set():
            ctx = self.take()
            if ctx is None:
                continue
            if self.stop.is_set():  # woken by the stop's ring and took work: give it back
                self._release(ctx, "stopping")
                return
            self.run_one(ctx)

    def take(self, wait: float | None = WAIT_S) -> api.TaskContext | None:
        return api.claim_next(self.store, list(self.tasks), self.worker_id, ttl=self.ttl,
                              wait=wait, stop=self.stop)

    def run_one(self, ctx: api.TaskContext) -> None:
        task = self.tasks[ctx.intent["task_kind"]]
        label = f"{task.kind} {ctx.handoff_id[:19]}"
        start = time.monotonic()
        resume = f"from checkpoint {ctx.last_seq}" if ctx.last_seq else "from the start"
        self.log("take", f"{label} fence={ctx.fence} {resume}")
        self.busy = True
        try:
            try:
                result = aio.run(task.fn, ctx) if task.is_async else task(ctx, ctx.inputs)
            finally:
                self.busy = False
            if ctx.active:  # the function may have completed or released by itself
                ctx.complete(result)
            self.log("complete", f"{label} in {time.monotonic() - start:.3f}s")
        except _LOST as exc:
            self.log("lost", f"{label}: {exc}")
        except Drain:
            self._release(ctx, "drained")
            raise
        except concurrent.futures.CancelledError:  # an async unit the drain cancelled
            self._release(ctx, "drained")
        except Exception as exc:  # noqa: BLE001 (the task's failure, whatever it is)
            self._fail(ctx, label, exc)

    def _fail(self, ctx: api.TaskContext, label: str, exc: Exception) -> None:
        why = str(exc) if isinstance(exc, SchemaViolation) else f"{type(exc).__name__}: {exc}"
        try:
            ctx.fail(exc)  # recorded with the release; the last attempt goes to the DLQ
        except _LOST as lost:
            self.log("lost", f"{label}: {lost}")
            return
        except DHPError as failed:
            self.log("fail", f"{label}: {why}; could not release ({failed})")
            return
        status = api.status(self.store, ctx.handoff_id)
        wait = status.get("not_before_in")
        cap = ctx.intent["budget"].get("max_attempts")
        tries = f"attempt {status['attempts']}" + (f" of {cap}" if cap else "")
        if status["state"] == "dead_lettered":
            then = f"dead-lettered: {status['dlq_reason']}"
        else:
            then = f"retry in {wait:.3f}s" if wait else "retry now"
        self.log("fail", f"{label}: {why} ({tries}; {then})")

    def _release(self, ctx: api.TaskContext, why: str) -> bool:
        """Give the handoff back unless it is finished already; whether it was."""
        if not ctx.active:
            return False
        label = f"{ctx.intent['task_kind']} {ctx.handoff_id[:19]}"
        try:
            ctx.release()
        except DHPError as exc:
            self.log("lost", f"{label}: {exc}")
            return False
        self.log("release", f"{label} ({why})")
        return True
