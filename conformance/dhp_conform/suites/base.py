"""What a check is and how it records its outcome."""

from __future__ import annotations

import random
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..harness import Harness, Reply, Scenario
from ..history import describe
from ..process import AdapterError


@dataclass
class Check:
    suite: str
    name: str
    requirements: list[str]
    run: Callable[[Ctx], None]
    # Optional feature(s) the check needs: skipped, saying which, unless all are claimed.
    feature: str | tuple[str, ...] | None = None
    cls: str | None = None  # the conformance class judged, when not the requirement's own
    timing: bool = False  # judges real time: runs alone, never beside other checks

    @property
    def id(self) -> str:
        return f"{self.suite}:{self.name}"

    @property
    def features(self) -> tuple[str, ...]:
        if self.feature is None:
            return ()
        return (self.feature,) if isinstance(self.feature, str) else self.feature


class CheckAborted(Exception):
    """The check cannot go on (a step it depends on failed); the reason says which."""


@dataclass
class Run:
    harness: Harness
    seed: int
    quick: bool
    results: list[dict] = field(default_factory=list)
    scenarios: list[Scenario] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)


class Ctx:
    """The context of one running check."""

    def __init__(self, run: Run, check: Check):
        self.run, self.check = run, check
        self.rng = random.Random(f"{run.seed}:{check.id}")
        self.scenarios: list[Scenario] = []

    @property
    def quick(self) -> bool:
        return self.run.quick

    def scenario(self, name: str, ttl: float = 1.0, clock: str = "system") -> Scenario:
        sc = self.run.harness.scenario(f"{self.check.suite}-{name}", ttl, clock)
        sc.facts["check"] = self.check.id
        self.scenarios.append(sc)
        self.run.scenarios.append(sc)
        return sc

    def record(self, requirement: str, passed: bool, reason: str = "",
               evidence: Any = None, warn: bool = False, label: str | None = None) -> bool:
        """One outcome; `label` names what ran when it is finer than the check (a vector)."""
        result = {"requirement": requirement, "check": label or self.check.id,
                  "status": "PASS" if passed else ("WARN" if warn else "FAIL")}
        if self.check.cls:
            result["class"] = self.check.cls
        if not passed:
            result["reason"] = reason or "failed"
        if evidence is not None:
            result["evidence"] = evidence
        self.run.results.append(result)
        return passed

    def expect(self, requirement: str, condition: bool, reason: str, *replies: Reply) -> bool:
        return self.record(requirement, bool(condition), reason,
                           self.evidence(*replies) if not condition else None)

    def evidence(self, *replies: Reply) -> list[str]:
        events = self.run.harness.history.events
        return [describe(events[i]) for r in replies for i in r.events]

    def need(self, reply: Reply, what: str) -> Any:
        """The data of a step the check depends on; abort the check if it failed."""
        if reply.ok:
            return reply.data
        problem = reply.unknown or f"{reply.code}: {(reply.error or {}).get('message')}"
        raise CheckAborted(f"{what} failed ({problem}); the check could not go on",
                           self.evidence(reply))

    def expect_code(self, requirement: str, reply: Reply, code: str, what: str) -> bool:
        got = "ok" if reply.ok else (reply.code or f"unknown outcome ({reply.unknown})")
        return self.expect(requirement, not reply.ok and reply.code == code,
                           f"{what}: expected error {code}, got {got}", reply)

    def skip(self, requirement: str, reason: str) -> None:
        """Not applicable: an optional feature this implementation does not claim."""
        result = {"requirement": requirement, "check": self.check.id, "status": "SKIP",
                  "reason": reason}
        if self.check.cls:
            result["class"] = self.check.cls
        self.run.results.append(result)

    @property
    def features(self) -> set[str]:
        return self.run.harness.features

    def expect_ok(self, requirement: str, reply: Reply, what: str) -> bool:
        got = reply.unknown or f"{reply.code}: {(reply.error or {}).get('message')}"
        return self.expect(requirement, reply.ok, f"{what}: expected ok, got {got}", reply)


def run_check(run: Run, check: Check) -> None:
    ctx = Ctx(run, check)
    try:
        check.run(ctx)
    except CheckAborted as exc:
        reason, evidence = exc.args[0], exc.args[1] if len(exc.args) > 1 else None
        for rid in check.requirements:
            ctx.record(rid, False, reason, evidence)
    except AdapterError as exc:  # the adapter broke the protocol: not judged, said so
        run.harness.adapter_errors.append(f"{check.id}: {exc}")
    except Exception as exc:  # noqa: BLE001 - an answer the check did not foresee
        # Implementations answer in shapes no check foresaw; that is a failure of the
        # implementation to be reported with its evidence, never a crash of the whole run.
        reason = f"check {check.id} could not judge the answers it got: {exc!r}"
        for rid in check.requirements:
            ctx.record(rid, False, reason, traceback.format_exc(limit=3))
    finally:
        for sc in ctx.scenarios:
            sc.close()


# --- helpers shared by the suites ---------------------------------------------------------

SCHEMA = {"type": "object", "required": ["total"],
          "properties": {"total": {"type": "integer"}}, "additionalProperties": False}


def dispatch(ctx: Ctx, proc: Any, inputs: dict | None = None, budget: dict | None = None,
             kind: str = "conform.sum") -> str:
    args = {"task_kind": kind, "inputs": inputs if inputs is not None else {"n": ctx.rng.random()},
            "output_schema": SCHEMA, "budget": budget or {}}
    data = ctx.need(proc.call("dispatch", args), "dispatch")
    return data["handoff_id"]


def take(ctx: Ctx, proc: Any, hid: str, op: str = "claim", **extra: Any) -> Reply:
    return proc.call(op, {"handoff_id": hid, "worker": proc.worker, **extra})


def write(proc: Any, op: str, hid: str, fence: int, worker: str | None = None,
          **extra: Any) -> Reply:
    return proc.call(op, {"handoff_id": hid, "worker": worker or proc.worker, "fence": fence,
                          **extra})


def state_mark(ctx: Ctx, label: str) -> dict:
    """A unique checkpoint state, so the checker can tell every write apart."""
    return {"step": label, "mark": ctx.rng.getrandbits(48)}
