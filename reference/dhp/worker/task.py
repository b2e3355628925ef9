"""`@dhp.task`: a function registered as the code of one task kind.

    @dhp.task("pages.fetch", output_schema={"type": "object"}, budget={"max_attempts": 5,
              "backoff_s": 1, "backoff_jitter": 0.5})
    def fetch(ctx, inputs):
        state = ctx.last_checkpoint or {"page": 0}
        ...
        ctx.checkpoint(state)
        return {"pages": state["page"]}          # the result, validated by complete

    fetch.dispatch(store, {"n": 60})             # one handoff of this kind

The function gets the `TaskContext` of the claimed handoff and its inputs; its return value
is the result. `dhp worker MODULE` runs the registered functions (dhp.worker.runtime). An
`async def` function runs on the worker process's event loop and awaits its writes
(`await ctx.checkpoint(state)`; dhp.worker.aio).
"""

from __future__ import annotations

import datetime as _dt
import inspect
from collections.abc import Callable
from typing import Any

from dhp import api
from dhp.core.backend import StoreBackend
from dhp.core.envelope import make_intent
from dhp.core.errors import InvalidInput

# Every task kind registered by @task in this process, in registration order.
REGISTRY: dict[str, Task] = {}


class Task:
    """A task kind and the function that does it. Call it like the function."""

    def __init__(self, kind: str, fn: Callable[[api.TaskContext, Any], Any], *,
                 output_schema: dict, budget: dict | None = None,
                 progress_timeout_s: float | None = None):
        # The intent check names any bad member now, at import, not at the first dispatch.
        make_intent(kind, {}, output_schema, budget)
        self.kind = kind
        self.fn = fn
        self.is_async = inspect.iscoroutinefunction(fn)  # run on the loop (dhp.worker.aio)
        self.output_schema = output_schema
        self.budget = dict(budget or {})
        self.progress_timeout_s = progress_timeout_s
        self.__name__ = getattr(fn, "__name__", kind)
        self.__doc__ = getattr(fn, "__doc__", None)

    def __repr__(self) -> str:
        return f"<dhp.task {self.kind!r} {self.fn.__module__}.{self.__name__}>"

    def __call__(self, ctx: api.TaskContext, inputs: Any) -> Any:
        return self.fn(ctx, inputs)

    def dispatch(self, store: StoreBackend, inputs: dict, *, delay_s: float | None = None,
                 not_before: _dt.datetime | None = None) -> str:
        """Dispatch one handoff of this kind (idempotent: the same inputs give the same id);
        `delay_s` or `not_before` delays its first run (DHP-SCH-002)."""
        return api.dispatch(store, self.kind, inputs, self.output_schema, self.budget,
                            self.progress_timeout_s, delay_s=delay_s, not_before=not_before)


def task(kind: str, *, output_schema: dict, budget: dict | None = None,
         progress_timeout_s: float | None = None) -> Callable[[Callable], Task]:
    """Register `fn(ctx, inputs) -> result` as the code of task kind `kind`.

    `output_schema` (required) is the JSON Schema (draft 2020-12) every result must satisfy;
    `{}` accepts any JSON value. A result it refuses fails the attempt, as an exception does.

    `budget` is the intent's budget: caps (max_attempts, ...) and the backoff between failed
    attempts (backoff_s, backoff_max_s, backoff_jitter; spec/schedule.md)."""
    def register(fn: Callable) -> Task:
        made = Task(kind, fn, output_schema=output_schema, budget=budget,
                    progress_timeout_s=progress_timeout_s)
        known = REGISTRY.get(kind)
        if known is not None and _where(known.fn) != _where(fn):
            raise InvalidInput(f"task kind {kind!r} is already registered by "
                               f"{_where(known.fn)}; {_where(fn)} cannot take it too")
        REGISTRY[kind] = made
        return made
    return register


def _where(fn: Callable) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', fn)}"
