"""Write vectors/schedule.json: lifecycle traces of delays, backoff and claim_next
(spec/schedule.md).

The traces have the lifecycle suite's form (tools/gen_fencing_vectors.py) plus what a schedule
needs: dispatch may carry `delay_s`; release may carry `delay_s` or `backoff`; `claim_next`
takes `worker` and reads the intent's task_kind (its `value` null means it took nothing);
status may expect `not_before_in`. Every expected instant is worked out here from the
formula of DHP-SCH-004 (`wait`, below), not by dhp.core.machine, which the vectors then check.

Ids are permanent: append new cases at the end, never renumber or reuse.
Run: python tools/gen_schedule_vectors.py; --check exits 1 if the file is out of date.
"""

from __future__ import annotations

import sys
from pathlib import Path

from gen_fencing_vectors import GOOD, err, intent, ok, render, s

ROOT = Path(__file__).resolve().parent.parent
TTL = 30
EPS = 0.001  # a moment before an instant


def wait(backoff_s: float, attempts: int, cap: float = 3600.0) -> float:
    """DHP-SCH-004 without jitter: min(cap, backoff_s * 2^(attempts - 1))."""
    return min(cap, backoff_s * 2 ** (attempts - 1))


def schedule_cases() -> list[tuple]:
    retry = {"max_attempts": 6, "backoff_s": 2, "backoff_max_s": 5}
    w1, w2, w3 = wait(2, 1, 5), wait(2, 2, 5), wait(2, 3, 5)  # 2, 4, then the cap 5
    jitter = {"backoff_s": 8, "backoff_jitter": 0.5}
    return [
        ("a delayed dispatch is refused before its instant and taken at it",
         ["DHP-SCH-001", "DHP-SCH-002"], intent("delayed"), [
             s(0, "dispatch", ok(state="pending", not_before_in=10), delay_s=10),
             s(10 - EPS, "claim", err("conflict"), worker="w1"),
             s(10 - EPS, "status", ok(state="pending", fence=0, attempts=0)),
             s(10, "claim", ok(state="claimed", fence=1), worker="w1"),
             s(11, "complete", ok(state="completed"), worker="w1", fence=1, result=GOOD),
         ]),
        ("claim_next passes over a delayed dispatch until its instant",
         ["DHP-SCH-001", "DHP-SCH-002"], intent("delayed-next"), [
             s(0, "dispatch", ok(not_before_in=5), delay_s=5),
             s(4, "claim_next", ok(value=None), worker="w1"),
             s(4, "status", ok(state="pending", not_before_in=1)),
             s(5, "claim_next", ok(fence=1, state="claimed"), worker="w1"),
         ]),
        ("a dispatch of an intent already stored keeps its first delay",
         ["DHP-SCH-002", "DHP-ID-004"], intent("redispatch"), [
             s(0, "dispatch", ok(not_before_in=10), delay_s=10),
             s(2, "dispatch", ok(not_before_in=8), delay_s=100),
             s(10, "claim", ok(fence=1, state="claimed"), worker="w1"),
         ]),
        ("a release with delay_s keeps the handoff from every take for that long",
         ["DHP-SCH-001", "DHP-SCH-003"], intent("release-delay"), [
             s(0, "dispatch", ok()),
             s(1, "claim", ok(fence=1), worker="w1"),
             s(2, "release", ok(state="released", not_before_in=7), worker="w1", fence=1,
               delay_s=7),
             s(9 - EPS, "claim", err("conflict"), worker="w2"),
             s(9 - EPS, "recover", err("conflict"), worker="w2"),
             s(9 - EPS, "claim_next", ok(value=None), worker="w2"),
             s(9, "claim", ok(state="claimed", fence=2, attempts=2), worker="w2"),
         ]),
        ("a release without delay_s or backoff is takeable at once",
         ["DHP-SCH-003"], intent("release-now", {"backoff_s": 60}), [
             s(0, "dispatch", ok()),
             s(1, "claim", ok(fence=1), worker="w1"),
             s(2, "release", ok(state="released", not_before_in=None), worker="w1", fence=1),
             s(2, "claim_next", ok(fence=2, state="claimed"), worker="w2"),
         ]),
        ("failed attempts wait backoff_s doubled per attempt, capped by backoff_max_s",
         ["DHP-SCH-003", "DHP-SCH-004"], intent("backoff", retry), [
             s(0, "dispatch", ok()),
             s(1, "claim", ok(fence=1, attempts=1), worker="w1"),
             s(2, "release", ok(state="released", not_before_in=w1), worker="w1", fence=1,
               backoff=True),
             s(2 + w1 - EPS, "claim", err("conflict"), worker="w2"),
             s(2 + w1, "claim", ok(fence=2, attempts=2), worker="w2"),
             s(2 + w1, "release", ok(not_before_in=w2), worker="w2", fence=2, backoff=True),
             s(2 + w1 + w2 - EPS, "claim_next", ok(value=None), worker="w3"),
             s(2 + w1 + w2, "claim_next", ok(fence=3, attempts=3), worker="w3"),
             s(2 + w1 + w2, "release", ok(not_before_in=w3), worker="w3", fence=3,
               backoff=True),
             s(2 + w1 + w2 + w3, "claim", ok(fence=4, state="claimed"), worker="w4"),
         ]),
        ("a backoff with jitter waits more than the cut wait and at most the full one",
         ["DHP-SCH-004"], intent("jitter", jitter), [
             s(0, "dispatch", ok()),
             s(1, "claim", ok(fence=1), worker="w1"),
             s(2, "release", ok(state="released"), worker="w1", fence=1, backoff=True),
             s(2 + 8 * 0.5 - EPS, "claim", err("conflict"), worker="w2"),
             s(2 + 8, "claim", ok(fence=2, state="claimed"), worker="w2"),
         ]),
        ("a budget without backoff_s waits nothing after a failed attempt",
         ["DHP-SCH-004"], intent("no-backoff", {"max_attempts": 3}), [
             s(0, "dispatch", ok()),
             s(1, "claim", ok(fence=1), worker="w1"),
             s(2, "release", ok(state="released"), worker="w1", fence=1, backoff=True),
             s(2, "claim", ok(fence=2, state="claimed"), worker="w2"),
         ]),
        ("a release with both delay_s and backoff is invalid_input and changes nothing",
         ["DHP-SCH-003", "DHP-STM-003"], intent("both"), [
             s(0, "dispatch", ok()),
             s(1, "claim", ok(fence=1), worker="w1"),
             s(2, "release", err("invalid_input"), worker="w1", fence=1, delay_s=1,
               backoff=True),
             s(2, "release", err("invalid_input"), worker="w1", fence=1, delay_s=-1),
             s(3, "status", ok(state="claimed", owner="w1", fence=1)),
         ]),
        ("attempts that run out during a backoff are parked at its instant, then requeued",
         ["DHP-SCH-001", "DHP-STM-005"], intent("requeue-wait",
                                                {"max_attempts": 1, "backoff_s": 100}), [
             s(0, "dispatch", ok()),
             s(1, "claim", ok(fence=1), worker="w1"),
             s(2, "release", ok(not_before_in=100), worker="w1", fence=1, backoff=True),
             s(102, "claim", err("budget_exceeded"), worker="w2"),
             s(103, "requeue", ok(state="pending")),
             s(103, "claim", ok(fence=2, state="claimed"), worker="w2"),
         ]),
        ("claim_next takes a live-leased handoff whose owner process died, as a recover",
         ["DHP-SCH-005"], intent("dead-owner"), [
             s(0, "dispatch", ok()),
             s(1, "claim", ok(fence=1), worker="w1"),
             s(1, "status", ok(state="claimed", owner="w1")),
             s(3, "claim_next", ok(fence=2, state="claimed", owner="w2", attempts=2),
               worker="w2", owner_dead=True),
             s(4, "checkpoint", err("lease_lost"), worker="w1", fence=1, state={"page": 2}),
         ]),
        ("a dispatch with a delay_s below 0 is invalid_input and stores nothing",
         ["DHP-SCH-002"], intent("negative-delay"), [
             s(0, "dispatch", err("invalid_input"), delay_s=-5),
             s(0, "status", err("not_found")),
         ]),
    ]


def schedule_suite() -> dict:
    tests = []
    for n, (desc, reqs, the_intent, steps) in enumerate(schedule_cases(), 1):
        final = next((st["expect"]["state"] for st in reversed(steps)
                      if "state" in st["expect"]), None)
        tests.append({"id": f"schedule-{n:03d}", "description": desc, "requirements": reqs,
                      "input": {"intent": the_intent, "ttl": TTL, "steps": steps},
                      "expected": {"final_state": final}})
    return {
        "suite": "schedule",
        "description": (
            "Lifecycle traces (see the lifecycle suite for the step form) of delays, backoff "
            "and claim_next (spec/schedule.md). Also: dispatch may carry `delay_s`; release "
            "may carry `delay_s` or `backoff` (true: the attempt failed); `claim_next` takes "
            "`worker`, asks for the intent's task_kind only, and its `value` null means it "
            "took nothing; a `claim_next` with `owner_dead` runs after the process that made "
            "the previous take has died (its liveness lock is free, its lease still live); "
            "expect may add `not_before_in` (the status's seconds left). Backoff jitter is "
            "random, so those traces only probe instants whose outcome it cannot change."),
        "tests": tests,
    }


if __name__ == "__main__":
    from vector_files import main  # a sibling in tools/, on sys.path when run as a script

    sys.exit(main({ROOT / "vectors" / "schedule.json": render(schedule_suite())},
                  sys.argv[1:], __file__))
