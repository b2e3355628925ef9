"""Schedule, in real time: claim_next's wait (DHP-SCH-006) ends when another process
dispatches work, and answers null when the time is up (DHP-STM-009: a claim_next, waiting or
not, takes a candidate or answers that there is none). The delays, backoff and dead-owner
takes at exact instants are the schedule vectors (suites/decisions.py)."""

from __future__ import annotations

import time

from .base import SCHEMA, Check, Ctx

WAIT_S = 20.0  # far longer than the dispatch comes after: a waiter that sleeps it out shows


def wait_wakes_on_dispatch(ctx: Ctx) -> None:
    sc = ctx.scenario("wait", ttl=30.0)
    waiter, dispatcher = sc.spawn("waiter"), sc.spawn("dispatcher")
    kind = "conform.wait"
    quiet = time.monotonic()
    empty = waiter.call("claim_next", {"task_kinds": [kind], "worker": waiter.worker,
                                       "wait": 0.5})
    # whatever the wait, a claim_next with no candidate answers that there is none (a MUST);
    # only how promptly a wait ends is a SHOULD
    ctx.expect("DHP-STM-009", empty.ok and empty.data is None,
               "claim_next with wait 0.5 and no work must answer null when the time is up",
               empty)
    ctx.expect("DHP-SCH-006", time.monotonic() - quiet >= 0.45,
               "claim_next with wait 0.5 and no work answered before the time was up", empty)
    handle = waiter.send("claim_next", {"task_kinds": [kind], "worker": waiter.worker,
                                        "wait": WAIT_S})
    time.sleep(0.3)  # the waiter is waiting now (or has not started: it must find it then)
    made = ctx.need(dispatcher.call("dispatch", {"task_kind": kind, "inputs": {"n": 1},
                                                 "output_schema": SCHEMA, "budget": {}}),
                    "dispatch")
    dispatched = time.monotonic()
    got = waiter.wait(handle, timeout=WAIT_S + 30)
    took = time.monotonic() - dispatched
    ctx.expect("DHP-STM-009", got.ok and isinstance(got.data, dict)
               and got.data.get("handoff_id") == made["handoff_id"],
               "the waiting claim_next did not take the handoff another process dispatched "
               "while it waited, a candidate when its wait ended", got)
    ctx.expect("DHP-SCH-006", took < WAIT_S / 2,
               f"the waiting claim_next answered {took:.1f}s after the dispatch: it slept "
               f"out its wait of {WAIT_S:.0f}s instead of waking", got)


CHECKS = [
    Check("schedule", "claim-next-waits", ["DHP-STM-009", "DHP-SCH-006"], wait_wakes_on_dispatch,
          feature="schedule"),
]
