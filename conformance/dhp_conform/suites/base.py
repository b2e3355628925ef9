"""What a check is and how it records its outcome."""

from __future__ import annotations

import random
import time
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
    """The check cannot go on (a step it depends on failed); the reason says which. The
    requirements it had not judged yet are reported as not run, never as failed."""


@dataclass
class Run:
    harness: Harness
    seed: int
    quick: bool
    results: list[dict] = field(default_factory=list)
    scenarios: list[Scenario] = field(default_factory=list)
    order: dict[str, int] = field(default_factory=dict)  # check id -> its place in the run
    fresh_starts: dict[str, list[int]] = field(default_factory=dict)  # see back_on_track

    def origin(self, check: str, at: int) -> str:
        """The stretch of a check a failure found at history length `at` belongs to: its
        failures after the first are consequences, within one stretch."""
        return f"{check}#{sum(1 for start in self.fresh_starts.get(check, []) if start <= at)}"

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)


class Ctx:
    """The context of one running check."""

    def __init__(self, run: Run, check: Check):
        self.run, self.check = run, check
        self.rng = random.Random(f"{run.seed}:{check.id}")
        self.scenarios: list[Scenario] = []
        self.judged: set[str] = set()  # requirements this check has recorded an outcome for

    def back_on_track(self) -> None:
        """The check reached, by another way, the state its first way failed to reach: what
        it finds from here on is judged afresh, not as a consequence of that failure."""
        self.run.fresh_starts.setdefault(self.check.id, []).append(
            len(self.run.harness.history.events))

    @property
    def quick(self) -> bool:
        return self.run.quick

    def scenario(self, name: str, ttl: float = 1.0, clock: str = "system",
                 server: dict | None = None) -> Scenario:
        sc = self.run.harness.scenario(f"{self.check.suite}-{name}", ttl, clock, server)
        sc.facts["check"] = self.check.id
        self.scenarios.append(sc)
        self.run.scenarios.append(sc)
        return sc

    def record(self, requirement: str, passed: bool, reason: str = "",
               evidence: Any = None, warn: bool = False, label: str | None = None) -> bool:
        """One outcome; `label` names what ran when it is finer than the check (a vector)."""
        self._add({"requirement": requirement, "check": label or self.check.id,
                   "status": "PASS" if passed else ("WARN" if warn else "FAIL"),
                   **({} if passed else {"reason": reason or "failed"}),
                   **({} if evidence is None else {"evidence": evidence})})
        return passed

    def _add(self, result: dict) -> None:
        """Append a result with where it was found: the check it belongs to and how far the
        history had got (report.finalize orders a check's failures by it)."""
        if self.check.cls:
            result["class"] = self.check.cls
        result["_at"] = len(self.run.harness.history.events)
        result["_origin"] = self.run.origin(self.check.id, result["_at"])
        result["_built"] = result["requirement"] in self.check.requirements
        result["_order"] = self.run.order.get(self.check.id, 0)
        self.judged.add(result["requirement"])
        self.run.results.append(result)

    def not_run(self, requirement: str, reason: str, evidence: Any = None,
                label: str | None = None) -> None:
        """The check could not judge this requirement: neither a pass nor a failure."""
        self._add({"requirement": requirement, "check": label or self.check.id,
                   "status": "NOT_RUN",
                   "reason": f"could not run: {reason}",
                   **({} if evidence is None else {"evidence": evidence})})

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
        raise CheckAborted(f"{what} failed ({problem}), a step the check depends on",
                           self.evidence(reply))

    def expect_code(self, requirement: str, reply: Reply, code: str, what: str) -> bool:
        got = "ok" if reply.ok else (reply.code or f"unknown outcome ({reply.unknown})")
        return self.expect(requirement, not reply.ok and reply.code == code,
                           f"{what}: expected error {code}, got {got}", reply)

    def skip(self, requirement: str, reason: str) -> None:
        """Not applicable: an optional feature this implementation does not claim."""
        self._add({"requirement": requirement, "check": self.check.id, "status": "SKIP",
                   "reason": reason})

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
            if rid not in ctx.judged:
                ctx.not_run(rid, reason, evidence)
    except AdapterError as exc:  # the adapter broke the protocol: not judged, said so
        run.harness.adapter_errors.append(f"{check.id}: {exc}")
    except Exception as exc:  # noqa: BLE001 - an answer the check did not foresee
        # Implementations answer in shapes no check foresaw: a failure of the requirement the
        # check was built for, with its evidence, never a crash of the whole run; the others
        # it would have judged are not run.
        reason = f"check {check.id} could not judge the answers it got: {exc!r}"
        ctx.record(check.requirements[0], False, reason, traceback.format_exc(limit=3))
        for rid in check.requirements[1:]:
            if rid not in ctx.judged:
                ctx.not_run(rid, reason)
    finally:
        for sc in ctx.scenarios:
            sc.close()


# --- helpers shared by the suites ---------------------------------------------------------

SCHEMA = {"type": "object", "required": ["total"],
          "properties": {"total": {"type": "integer"}}, "additionalProperties": False}


def recovery_bound(ctx: Ctx) -> float | None:
    """The `recovery_bound_s` the adapter's hello declares (DHP-ADP-014), or None."""
    bound = (ctx.run.harness.hello or {}).get("recovery_bound_s")
    return bound if isinstance(bound, (int, float)) and not isinstance(bound, bool) else None


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


TAKEOVER_PASSES = 40  # supervisor passes (0.25 s apart) the kit waits for an orphan


def take_over(ctx: Ctx, proc: Any, hid: str, op: str, what: str,
              requirement: str = "DHP-LSE-003", supervisor: Any = None,
              **extra: Any) -> dict:
    """`op` (claim or recover) on a handoff whose lease has expired: it must be granted
    (`requirement`). When the implementation refuses it, that is judged, and the kit takes
    the handoff over another way the implementation declares (its supervisor orphans the
    expired lease, then claim or recover), so that the safety checks after the takeover still
    run; they are judged afresh, not as consequences of the refusal. `supervisor` is the
    process whose passes to use (default: one the kit adds to the scenario); `extra`, more
    arguments of the take (a ttl)."""
    reply = take(ctx, proc, hid, op, **extra)
    if ctx.expect(requirement, reply.ok, f"{what}: refused ({reply.code or reply.unknown}), "
                  "though the lease has expired, so the handoff is orphaned for every "
                  "decision", reply):
        return reply.data
    if "supervise" not in ctx.features or reply.unknown:
        raise CheckAborted(f"{what} was refused and the implementation declares no other way "
                           "to take an expired lease over (no feature supervise)",
                           ctx.evidence(reply))
    sc = proc.scenario
    sup = supervisor or sc.procs.get("kit-supervisor") or sc.spawn("kit-supervisor")
    for _ in range(TAKEOVER_PASSES):
        data = sup.call("supervise", {}).data
        if isinstance(data, dict) and hid in (data.get("orphaned") or []):
            break
        time.sleep(0.25)
    tried = []
    for way in dict.fromkeys((op, "recover", "claim")):
        again = take(ctx, proc, hid, way, **extra)
        tried.append(f"{way}: {again.code or again.unknown}" if not again.ok else way)
        if again.ok:
            sc.harness.notes.append(f"{ctx.check.id}: {what} was refused; the kit took the "
                                    f"handoff over with {way} after a pass of the "
                                    "implementation's supervisor, and went on")
            ctx.back_on_track()
            return again.data
    raise CheckAborted(f"{what} was refused, and after passes of the implementation's "
                       f"supervisor the takeover still failed ({'; '.join(tried)})",
                       ctx.evidence(reply))
