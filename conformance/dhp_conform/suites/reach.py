"""Reach: every operation from every state the spec defines its outcome in, at the instants
that decide it (feature manual-clock).

Each case builds one handoff into a starting state with ordinary operations (pending, claimed
with a checkpoint, released, completed, cancelled, dead-lettered, requeued; with and without
a wall-clock cap, with a progress timeout), then runs one probe operation at a chosen store
instant (inside the lease, at the exact expiry instant, after it), then a late write of the
first owner. The kit's own model (dhp_conform.model) runs beside it: every answer, every field
of `status` (schemas/status.json), `last_checkpoint`, `result`, the records a take or a write
returns, and the schema violations listed in `details` must match it after every step.

A case stops at its first difference and names the requirement of that step; what would have
followed from it is not judged again. States and results carry floats that must come back as
they went in.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any

from .. import oracle
from ..harness import Reply
from ..model import Handoff, Outcome, status_differences
from . import reach_io
from .base import Check, Ctx
from .decisions import Bench

RESULT_SCHEMA = {"type": "object", "required": ["total"],
                 "properties": {"total": {"type": "number"}}, "additionalProperties": False}
GOOD_RESULT = {"total": 0.1}
BAD_RESULT = {"total": "seven", "extra": True}  # two violations: details must list both
TTL = 10.0
OWNER, STANDBY, INTRUDER = "reach-owner", "reach-standby", "reach-intruder"

# The requirement a wrong status field breaks, after an accepted step.
FIELD_REQUIREMENT = {"state": "DHP-STM-002", "owner": "DHP-STM-002", "fence": "DHP-FEN-002",
                     "attempts": "DHP-BUD-001", "steps": "DHP-BUD-002", "spend": "DHP-BUD-003",
                     "checkpoints": "DHP-CKP-009", "lease_expires_in": "DHP-LSE-004",
                     "dlq_reason": "DHP-BUD-006", "handoff_id": "DHP-ADP-007",
                     "task_kind": "DHP-ADP-007", "(status)": "DHP-ADP-007"}


class Differs(Exception):
    """args: requirement, reason, replies. `instant`: the requirement whose boundary the step
    was exactly on, if any."""

    instant: str | None = None


@dataclass(frozen=True)
class Start:
    name: str
    budget: dict
    steps: tuple  # (at, op, who) of the build
    probes: tuple  # instants of the probe
    progress_timeout: float | None = None


def _float_state(label: str) -> dict:
    return {"step": label, "ratio": 0.1, "tiny": 1e-7, "big": 12345.678901, "neg": -2.5}


CLAIMED = ((0, "dispatch", None), (0, "claim", OWNER), (1, "checkpoint", OWNER))
DLQ = ((0, "dispatch", None), (0, "claim", OWNER), (0.5, "checkpoint", OWNER),
       (1, "release", OWNER), (2, "claim", STANDBY))
STARTS = [
    Start("pending", {}, ((0, "dispatch", None),), (5,)),
    Start("claimed", {}, CLAIMED, (10.5, 11, 14)),
    Start("released", {}, CLAIMED + ((2, "release", OWNER),), (5,)),
    Start("completed", {}, CLAIMED + ((2, "complete", OWNER),), (5,)),
    Start("cancelled", {}, CLAIMED + ((2, "cancel", None),), (5,)),
    Start("dead-lettered", {"max_attempts": 1}, DLQ, (5,)),
    Start("requeued", {"max_attempts": 1}, DLQ + ((3, "requeue", None),), (5,)),
    # the wall clock runs out after 12 (at 12, 12 - 0 is not more than 12), the steps at once
    Start("last-attempt", {"max_attempts": 1}, CLAIMED, (10.5, 12)),
    Start("capped", {"max_wall_clock_s": 12, "max_steps": 1, "max_spend": 1}, CLAIMED,
          (10.5, 11, 12, 14)),
    Start("capped-released", {"max_wall_clock_s": 11, "max_attempts": 2},
          CLAIMED + ((2, "release", OWNER),), (11, 12)),
    # no progress since 1: stalled after 6 (not at 6), lease live until 31
    Start("stalled", {}, ((0, "dispatch", None), (0, "claim", OWNER), (1, "checkpoint", OWNER)),
          (6, 6.5), progress_timeout=5),
]
QUICK = ("claimed", "requeued", "last-attempt", "capped-released", "stalled")
QUICK_PROBES = {"stalled": ("supervise",)}  # --quick: only what this start is there for
PROBES = ("claim", "recover", "claim_next", "heartbeat", "checkpoint", "checkpoint-intruder",
          "checkpoint-overspend", "complete", "complete-invalid", "release", "cancel", "requeue",
          "supervise")
FEATURE = {"claim_next": "claim_next", "supervise": "supervise"}


class Walk:
    """Runs steps on the adapter and on the model and compares them."""

    def __init__(self, ctx: Ctx, bench: Bench):
        self.ctx, self.bench, self.cases = ctx, bench, 0
        self.alternative: Handoff | None = None  # another model state the spec allows
        self.built: set[str] = set()  # starts whose build was compared read by read

    def run(self, start: Start, probe: str, at: float) -> None:
        self.cases += 1
        label = f"{start.name}/{probe}@{at:g}"
        args = {"task_kind": f"conform.reach.{self.cases}", "inputs": {"case": label},
                "output_schema": RESULT_SCHEMA, "budget": start.budget}
        if start.progress_timeout is not None:
            args["progress_timeout_s"] = start.progress_timeout
        self.h = Handoff(oracle.handoff_id(oracle.intent_of(args)), args["task_kind"],
                         start.budget, start.progress_timeout)
        self.dispatch_args, self.label = args, label
        self.holder: tuple[str, int] | None = None  # the last (worker, fence) granted
        self.bench.next_vector()
        # Every case of a start builds it the same way: its reads are compared once.
        reads, self.built = start.name not in self.built, self.built | {start.name}
        for t, op, who in start.steps:
            self.step(t, op, who, "building the start", reads=reads)
        first = self.holder
        self.step(at, probe, STANDBY if probe in ("claim", "recover", "claim_next") else None,
                  "the probe")
        if first is not None:  # the first owner's late completion after whatever happened
            self.holder = first
            self.step(at + 0.25, "complete", OWNER, "the first owner's late write")

    # --- one step -------------------------------------------------------------------------
    def step(self, t: float, op: str, who: str | None, phase: str, reads: bool = True) -> None:
        instant = self._instant(t)
        try:
            self._step(t, op, who, f"{self.label}: {phase}, {op} at {t:g}", reads)
        except Differs as exc:
            exc.instant = instant
            raise

    def _instant(self, t: float) -> str | None:
        """The requirement whose boundary `t` is exactly on, if any."""
        h = self.h
        if h.expires is not None and t == h.expires:
            return "DHP-LSE-002"
        cap = h.budget.get("max_wall_clock_s")
        if cap is not None and h.first_claim is not None and t - h.first_claim == cap:
            return "DHP-BUD-004"
        if h.progress_timeout is not None and h.state == "claimed" \
                and t - h.progress == h.progress_timeout:
            return "DHP-LSE-007"
        return None

    def _step(self, t: float, op: str, who: str | None, where: str, reads: bool) -> None:
        h, main = self.h, self.bench.main
        before = copy.deepcopy(h)
        self.bench.at(main, t)
        base = op.split("-")[0]
        if op == "dispatch":
            reply = main.call("dispatch", self.dispatch_args)
            out = Outcome(None, "DHP-ID-001")
            if reply.ok and (reply.data or {}).get("handoff_id") != h.hid:
                raise Differs("DHP-ID-001", f"{where}: dispatch returned "
                              f"{(reply.data or {}).get('handoff_id')}, not {h.hid}", [reply])
        elif base in ("claim", "recover", "claim_next"):
            reply, out = self._take(op, who, t, where)
        elif base in ("heartbeat", "checkpoint", "complete", "release"):
            reply, out = self._write(op, t, where)
        elif op == "cancel":
            reply, out = main.call("cancel", {"handoff_id": h.hid}), h.cancel()
        elif op == "requeue":
            reply, out = main.call("requeue", {"handoff_id": h.hid}), h.requeue()
        elif op == "supervise":
            reply, out = self._supervise(t, where)
        else:
            raise ValueError(op)
        self._compare_outcome(reply, out, where, before.effective(t))
        if reads:
            self._compare_status(t, where, reply, out, before)

    def _take(self, op: str, who: str, t: float, where: str) -> tuple[Reply, Outcome]:
        h, main = self.h, self.bench.main
        if op == "claim_next":
            reply = main.call("claim_next", {"task_kinds": [h.task_kind], "worker": who,
                                             "ttl": TTL})
            unparked = copy.deepcopy(h)
            taken = h.take("claim", who, TTL, t)
            want_null = taken.code is not None
            if taken.code == "budget_exceeded":  # claim_next may park it or leave it be
                self.alternative = unparked
            out = Outcome(None, taken.requirement)  # nothing claimable: null, not an error
            if reply.ok and (reply.data is None) != want_null:
                raise Differs("DHP-STM-007", f"{where}: claim_next answered {reply.data!r}; "
                              f"the only handoff of its kind is {'not ' if want_null else ''}"
                              "claimable", [reply])
        else:
            reply = main.call(op, {"handoff_id": h.hid, "worker": who, "ttl": TTL})
            out = h.take(op, who, TTL, t)
        if reply.ok and out.code is None and h.owner == who:
            data = reply.data or {}
            if data.get("fence") != h.fence or data.get("handoff_id") != h.hid:
                raise Differs("DHP-FEN-001", f"{where}: granted {data!r}, expected fence "
                              f"{h.fence} of {h.hid}", [reply])
            if data.get("last_checkpoint") != h.last_state:
                raise Differs("DHP-ADP-010", f"{where}: last_checkpoint "
                              f"{data.get('last_checkpoint')!r}, expected {h.last_state!r}",
                              [reply])
            self.holder = (who, h.fence)
        return reply, out

    def _write(self, op: str, t: float, where: str) -> tuple[Reply, Outcome]:
        h, main = self.h, self.bench.main
        base = op.split("-")[0]
        worker, fence = self.holder or (OWNER, 0)
        if op == "checkpoint-intruder":
            worker = INTRUDER
        args = {"handoff_id": h.hid, "worker": worker, "fence": fence}
        kw: dict[str, Any] = {"ttl": TTL}
        if base == "checkpoint":
            spend = 2 if op == "checkpoint-overspend" else 0.25
            args.update(state=_float_state(f"{where}"), spend=spend, ttl=TTL)
            kw.update(state=args["state"], spend=spend)
        elif base == "complete":
            valid = op != "complete-invalid"
            args["result"] = GOOD_RESULT if valid else BAD_RESULT
            kw.update(state=args["result"], valid=valid)
        elif base == "heartbeat":
            args["ttl"] = TTL
        reply = main.call(base, args)
        out = h.write(base, worker, fence, t, **kw)
        if reply.ok and out.code is None and base == "checkpoint":
            record = (reply.data or {}).get("record") or {}
            got = {k: record.get(k) for k in ("seq", "fence", "state")}
            want = {"seq": h.count, "fence": fence, "state": args["state"]}
            if got != want:
                raise Differs("DHP-CKP-009", f"{where}: the returned record has {got}, "
                              f"expected {want}", [reply])
        if not reply.ok and out.code == "schema_violation":
            details = (reply.error or {}).get("details")
            if not isinstance(details, list) or len(details) < 2 \
                    or "total" not in json.dumps(details):
                raise Differs("DHP-RES-002", f"{where}: a result with two violations (total "
                              f"is a string, an extra member) got details {details!r}; they "
                              "must list every violation with its JSON path", [reply])
        return reply, out

    def _supervise(self, t: float, where: str) -> tuple[Reply, Outcome]:
        h = self.h
        reply = self.bench.main.call("supervise", {})
        out = h.supervise(t)
        if reply.ok:
            data = reply.data if isinstance(reply.data, dict) else {}
            orphaned = h.hid in (data.get("orphaned") or [])
            if data.get("leader") is False:
                raise Differs("DHP-ADP-015", f"{where}: the only supervisor did not lead",
                              [reply])
            if orphaned != (out.moved == "orphaned") and out.moved != "dead_lettered":
                raise Differs(out.requirement, f"{where}: the pass "
                              f"{'orphaned' if orphaned else 'did not orphan'} the handoff",
                              [reply])
        return reply, out

    # --- comparisons ----------------------------------------------------------------------
    def _compare_outcome(self, reply: Reply, out: Outcome, where: str, was: str) -> None:
        got = "ok" if reply.ok else (reply.code or f"unknown outcome ({reply.unknown})")
        want = out.code or "ok"
        if got != want:
            raise Differs(out.requirement, f"{where}: expected {want}, got {got} (the handoff was "
                          f"{was})", [reply])

    def _compare_status(self, t: float, where: str, after: Reply, out: Outcome,
                        before: Handoff) -> None:
        h = self.h
        st = self.bench.main.call("status", {"handoff_id": h.hid})
        if not st.ok:
            raise Differs("DHP-STM-003", f"{where}: status afterwards failed ({st!r})",
                          [after, st])
        wrong = status_differences(h.status(t), st.data)
        alternative, self.alternative = self.alternative, None
        if wrong and alternative is not None \
                and not status_differences(alternative.status(t), st.data):
            self.h = h = alternative
            wrong = {}
        if wrong:
            field = next(iter(wrong))
            rejected = out.code is not None and out.code != "budget_exceeded" \
                and field != "lease_expires_in"  # that one moves with time alone
            requirement = out.requirement if after.op == "supervise" else \
                ("DHP-FEN-004" if after.op in ("heartbeat", "checkpoint", "complete",
                                               "release") else "DHP-STM-003") if rejected \
                else "DHP-FEN-001" if field == "fence" and after.op in ("claim", "recover",
                                                                        "claim_next") \
                else "DHP-LSE-003" if field == "state" and h.effective(t) == "orphaned" \
                and h.state == "claimed" else FIELD_REQUIREMENT.get(field, "DHP-STM-002")
            detail = ", ".join(f"{k} {g!r} (expected {w!r})" for k, (g, w) in wrong.items())
            raise Differs(requirement, f"{where}: status afterwards has {detail}", [after, st])
        last = self.bench.main.call("last_checkpoint", {"handoff_id": h.hid})
        want = {"found": h.count > 0, "state": h.last_state, "seq": h.count or None}
        if not last.ok or {k: (last.data or {}).get(k) for k in want} != want:
            raise Differs("DHP-CKP-009", f"{where}: last_checkpoint afterwards is "
                          f"{last.data if last.ok else last!r}, expected {want}", [after, last])
        if h.state == "completed" and before.state != "completed":
            res = self.bench.main.call("result", {"handoff_id": h.hid})
            if not res.ok or (res.data or {}).get("result") != h.result:
                raise Differs("DHP-RES-004", f"{where}: result afterwards is "
                              f"{res.data if res.ok else res!r}, expected {h.result!r}",
                              [after, res])


def state_walk(ctx: Ctx) -> None:
    bench = Bench(ctx, "state-walk", ttl=TTL)
    walk = Walk(ctx, bench)
    starts = [s for s in STARTS if s.name in QUICK] if ctx.quick else STARTS
    probes = [p for p in PROBES if FEATURE.get(p, p) in ctx.features or p not in FEATURE]
    found: list[tuple[str, Differs]] = []
    for start in starts:
        for probe in probes:
            if ctx.quick and probe not in QUICK_PROBES.get(start.name, (probe,)):
                continue
            for at in start.probes:
                try:
                    walk.run(start, probe, at)
                except Differs as exc:
                    found.append((probe, exc))
    # A difference exactly on a boundary is that boundary's fault only when the same probe
    # operation is right everywhere off the boundaries.
    wrong_off = {probe for probe, exc in found if exc.instant is None}
    failed: set[str] = set()
    for probe, exc in found:
        requirement, reason, replies = exc.args
        if exc.instant and probe not in wrong_off:
            reason = f"{reason} (exactly on the boundary of {exc.instant}; {probe} is right " \
                     "everywhere off the boundaries)"
            requirement = exc.instant
        failed.add(requirement)
        ctx.record(requirement, False, reason, ctx.evidence(*replies))
    ctx.run.harness.notes.append(
        f"reach state walk: {walk.cases} cases ({len(starts)} starting states x "
        f"{len(probes)} probe operations x their instants), every status field compared")
    for requirement in ctx.check.requirements:
        if requirement in SUPERVISE and "supervise" not in probes:
            ctx.skip(requirement, "the implementation does not claim the feature supervise")
        elif requirement not in failed:
            ctx.record(requirement, True)


WALK_REQUIREMENTS = sorted({
    "DHP-STM-002", "DHP-STM-003", "DHP-STM-005", "DHP-STM-006", "DHP-STM-007", "DHP-FEN-001",
    "DHP-FEN-002", "DHP-FEN-003", "DHP-FEN-004", "DHP-FEN-006", "DHP-LSE-002", "DHP-LSE-003",
    "DHP-LSE-004", "DHP-BUD-001", "DHP-BUD-002", "DHP-BUD-003", "DHP-BUD-004", "DHP-BUD-006",
    "DHP-BUD-007", "DHP-RES-001", "DHP-RES-002", "DHP-RES-004", "DHP-CKP-009", "DHP-ADP-007",
    "DHP-ADP-010", "DHP-ID-001", "DHP-LSE-001"})

# Judged by the supervise probe when the implementation claims the feature supervise.
SUPERVISE = ["DHP-SUP-001", "DHP-SUP-002", "DHP-SUP-004", "DHP-SUP-005", "DHP-SUP-006",
             "DHP-SUP-007", "DHP-LSE-007"]

CHECKS = [
    *reach_io.CHECKS,
    Check("reach", "state-walk", WALK_REQUIREMENTS + SUPERVISE, state_walk,
          feature="manual-clock"),
]
