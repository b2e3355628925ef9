"""`async def` tasks: one event loop per worker process runs every async unit.

The loop runs in a daemon thread of its own, started by the first async unit. Each unit is
still taken, heartbeated and finished by its own thread (dhp.worker.slots); that thread hands
the coroutine to the loop and then serves the unit's store calls, so the loop never waits
on the store: `await ctx.checkpoint(state)` queues the call to the unit's thread and awaits
its answer. A call starts as soon as it is made and the calls of one unit run in the order
made (a checkpoint never overtakes an earlier one), even if it is not awaited at once.
Heartbeats never touch the loop (dhp.heartbeats), so a coroutine that blocks the loop delays
the other async units, but never a lease.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import queue
import threading
from typing import Any

from dhp import api

_mutex = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None
_running: set[concurrent.futures.Future] = set()  # the async units now on the loop


class AsyncTaskContext:
    """What an `async def` task receives: the `TaskContext`'s attributes (handoff_id, fence,
    inputs, last_checkpoint, idempotency_key(), ...), and its writes as awaitables:
    `await ctx.checkpoint(state)`, `ctx.complete(result)`, `ctx.release(...)`,
    `ctx.heartbeat()`."""

    def __init__(self, ctx: api.TaskContext, loop: asyncio.AbstractEventLoop):
        self._ctx = ctx
        self._loop = loop
        self._calls: queue.SimpleQueue = queue.SimpleQueue()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ctx, name)

    def __repr__(self) -> str:
        return f"Async{self._ctx!r}"

    def checkpoint(self, state: Any, spend: int | float = 0) -> asyncio.Future:
        return self._call(self._ctx.checkpoint, state, spend)

    def complete(self, result: Any) -> asyncio.Future:
        return self._call(self._ctx.complete, result)

    def release(self, *, delay_s: float | None = None, backoff: bool = False) -> asyncio.Future:
        return self._call(self._ctx.release, delay_s=delay_s, backoff=backoff)

    def heartbeat(self) -> asyncio.Future:
        return self._call(self._ctx.heartbeat)

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> asyncio.Future:
        answer = self._loop.create_future()
        self._calls.put((fn, args, kwargs, answer))
        return answer

    def serve(self, unit: concurrent.futures.Future) -> None:
        """Run the unit's store calls in this thread until its coroutine has ended."""
        unit.add_done_callback(lambda _: self._calls.put(None))
        while (call := self._calls.get()) is not None:
            fn, args, kwargs, answer = call
            try:
                value, error = fn(*args, **kwargs), None
            except Exception as exc:  # noqa: BLE001 (handed to the awaiting coroutine)
                value, error = None, exc
            self._loop.call_soon_threadsafe(_settle, answer, value, error)


def _settle(answer: asyncio.Future, value: Any, error: BaseException | None) -> None:
    if answer.cancelled():
        return
    if error is not None:
        answer.set_exception(error)
    else:
        answer.set_result(value)


def loop() -> asyncio.AbstractEventLoop:
    """This process's event loop for async units, started on first use."""
    global _loop
    with _mutex:
        if _loop is None:
            _loop = asyncio.new_event_loop()
            threading.Thread(target=_loop.run_forever, name="dhp-asyncio", daemon=True).start()
        return _loop


def run(fn: Any, ctx: api.TaskContext) -> Any:
    """Run the coroutine function `fn(actx, inputs)` of a unit on the loop; serve its store
    calls in this thread meanwhile; its return value (or exception). A unit cancelled by
    `cancel_all` raises concurrent.futures.CancelledError."""
    actx = AsyncTaskContext(ctx, loop())
    with _mutex:  # listed before its coroutine can run, so cancel_all always sees it
        unit = asyncio.run_coroutine_threadsafe(fn(actx, ctx.inputs), actx._loop)
        _running.add(unit)
    try:
        actx.serve(unit)
        return unit.result()
    finally:
        with _mutex:
            _running.discard(unit)


def cancel_all() -> int:
    """Cancel every async unit of this process (a drain whose time is up); how many."""
    with _mutex:
        units = list(_running)
    return sum(unit.cancel() for unit in units)


def _forget_after_fork() -> None:
    global _mutex, _loop
    _mutex, _loop = threading.Lock(), None  # the parent's loop thread is not the child's
    _running.clear()


os.register_at_fork(after_in_child=_forget_after_fork)
