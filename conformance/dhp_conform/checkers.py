"""Invariant checkers over a scenario's history (Jepsen/Elle style).

Each checker reads only the history: what the kit asked, what the adapter answered, and which
faults the kit injected. An `info` completion (outcome unknown) is allowed to have happened or
not. A violation is a `Finding` naming the requirements, the smallest list of events that
proves it, and an explanation a person can follow.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from . import oracle
from .history import describe

TAKES = ("claim", "claim_next", "recover")
WRITES = ("heartbeat", "checkpoint", "complete", "release")
EXTENDS = ("heartbeat", "checkpoint")
SLACK = 0.05  # seconds of clock granularity forgiven in lease-timing judgements


@dataclass
class Finding:
    check: str
    requirements: list[str]
    events: list[dict]
    explanation: str

    def evidence(self) -> list[str]:
        return [describe(e) for e in self.events]


@dataclass
class Op:
    """An invocation paired with its completion."""

    invoke: dict
    done: dict | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.invoke["op"]

    @property
    def args(self) -> dict:
        return self.invoke.get("args") or {}

    @property
    def outcome(self) -> str:
        """ok, fail or info; an indefinite error (DHP-ERR-003) is an unknown outcome too."""
        if self.done is None:
            return "info"
        if self.done["type"] == "fail" and (self.done.get("error") or {}).get("definite") is False:
            return "info"
        return self.done["type"]

    @property
    def ok(self) -> bool:
        return self.outcome == "ok"

    @property
    def data(self) -> Any:
        return self.done.get("data") if self.done else None

    @property
    def t0(self) -> float:
        return self.invoke["time"]

    @property
    def t1(self) -> float:
        return self.done["time"] if self.done else float("inf")

    @property
    def handoff(self) -> str | None:
        if self.name == "claim_next":
            return self.data.get("handoff_id") if self.ok and self.data else None
        if self.name in ("dispatch", "import_log"):
            return self.data.get("handoff_id") if self.ok and self.data else None
        return self.args.get("handoff_id")

    @property
    def worker(self) -> str | None:
        return self.args.get("worker")

    @property
    def fence(self) -> int | None:
        if self.name in TAKES:
            return self.data.get("fence") if self.ok and self.data else None
        return self.args.get("fence")

    @property
    def events(self) -> list[dict]:
        return [self.invoke] + ([self.done] if self.done else [])


def pair(events: list[dict]) -> tuple[list[Op], list[dict]]:
    """Operations (in invocation order) and faults."""
    ops: dict[int, Op] = {}
    faults = []
    for e in events:
        if e["type"] == "invoke":
            ops[e["index"]] = Op(e)
        elif e["type"] in ("ok", "fail", "info"):
            if e["invoke"] in ops:
                ops[e["invoke"]].done = e
        elif e["type"] in ("kill", "stop", "cont", "start"):
            faults.append(e)
    return list(ops.values()), faults


def check_scenario(events: list[dict], ttl: float, timed: bool = True) -> list[Finding]:
    """`timed=False` for a scenario on a manual store clock: lease lengths then say nothing
    about real time, so the lease-timing judgements are left out."""
    ops, faults = pair(events)
    ctx = _Context(ops, faults, ttl)
    ctx.timed = timed
    findings: list[Finding] = []
    timing = (_live_owner,) if timed else ()
    for handoff in ctx.handoffs():
        for checker in (_fences, *timing, _stale_writes, _durable_checkpoints,
                        _records, _completion, _budgets, _terminal):
            findings.extend(checker(ctx, handoff))
    return findings


class _Context:
    def __init__(self, ops: list[Op], faults: list[dict], ttl: float):
        self.ops, self.faults, self.ttl = ops, faults, ttl
        self.timed = True
        self.by_handoff: dict[str, list[Op]] = {}
        self.dispatch: dict[str, Op] = {}
        for op in ops:
            h = op.handoff
            if h is None:
                continue
            self.by_handoff.setdefault(h, []).append(op)
            if op.name == "dispatch" and op.ok:
                self.dispatch.setdefault(h, op)

    def handoffs(self) -> list[str]:
        return list(self.by_handoff)

    def blind_takes(self, h: str) -> list[Op]:
        """`claim_next` requests whose outcome is unknown: the handoff they may have taken is
        not named, so each may have bumped the fence of any handoff of its task kinds."""
        dispatch = self.dispatch.get(h)
        kind = dispatch.args.get("task_kind") if dispatch else None
        return [op for op in self.ops if op.name == "claim_next" and op.outcome == "info"
                and (kind is None or kind in (op.args.get("task_kinds") or [kind]))]

    def of(self, h: str, *names: str) -> list[Op]:
        return [op for op in self.by_handoff.get(h, []) if op.name in names]

    def ttl_of(self, op: Op) -> float:
        return op.args.get("ttl") or self.ttl

    def killed(self, process: str, after: float, before: float) -> dict | None:
        for f in self.faults:
            if f["type"] == "kill" and f["process"] == process and after <= f["time"] <= before:
                return f
        return None


def _acked_takes(ctx: _Context, h: str) -> list[Op]:
    """Acknowledged takes in fence order. Not in answer order: a taker frozen between its
    commit and its answer is answered after takes that came later and got higher fences."""
    return sorted((op for op in ctx.of(h, *TAKES) if op.ok and isinstance(op.fence, int)),
                  key=lambda o: (o.fence, o.t1))


def _fences(ctx: _Context, h: str) -> list[Finding]:
    """DHP-FEN-001/002/005: every acked take has a fresh fence, exactly one above the last,
    and a take that began after another was answered has a higher fence."""
    out = []
    takes = _acked_takes(ctx, h)
    unknown = [op for op in ctx.of(h, *TAKES) if op.outcome == "info"] + ctx.blind_takes(h)
    # Real-time order first: b invoked after a was answered must have the higher fence (a
    # fence handed out again is then first of all a fence going backwards).
    backwards = [(a, b) for a in takes for b in takes if a.t1 < b.t0 and b.fence < a.fence]
    if backwards:
        a, b = backwards[0]
        out.append(Finding("history:fence-monotonic", ["DHP-FEN-002"], a.events + b.events,
                           f"{b.worker} was granted fence {b.fence} after {a.worker} had "
                           f"been granted {a.fence}: fences of {h} went backwards."))
    for a, b in zip(takes, takes[1:], strict=False):
        if b.fence == a.fence:
            first, then = sorted((a, b), key=lambda o: o.t1)
            out.append(Finding("history:one-owner-per-fence", ["DHP-FEN-005", "DHP-FEN-002"],
                               first.events + then.events,
                               f"Two takes of {h} were both granted fence {a.fence}: "
                               f"{first.worker} and then {then.worker}. A fence names exactly one "
                               "owner; the second take had to fail with conflict or get a new "
                               "fence."))
            continue
        between = sum(1 for u in unknown if u.t0 < b.t1 and u.t1 > a.t0)
        if b.fence - a.fence > 1 + between:
            out.append(Finding("history:fence-step", ["DHP-FEN-001"], a.events + b.events,
                               f"The fence of {h} jumped from {a.fence} to {b.fence} between "
                               f"two consecutive takes with {between} take(s) of unknown "
                               "outcome in flight: every claim or recover increments it by "
                               "exactly 1."))
    if takes and not unknown and takes[0].fence < 1:
        out.append(Finding("history:fence-step", ["DHP-FEN-001"], takes[0].events,
                           f"The first take of {h} was granted fence {takes[0].fence}; fences "
                           "start at 1."))
    return out


def _holder_ops(ctx: _Context, h: str, take: Op, names: tuple) -> list[Op]:
    return [op for op in ctx.of(h, *names)
            if op.worker == take.worker and op.fence == take.fence]


def _live_owner(ctx: _Context, h: str) -> list[Finding]:
    """DHP-FEN-005 / DHP-STM-007: nobody takes a handoff while another lease is certainly live."""
    out = []
    takes = _acked_takes(ctx, h)
    for a, b in zip(takes, takes[1:], strict=False):
        if b.fence is None or a.fence is None or b.fence <= a.fence:
            continue
        if a.t0 >= b.t1:  # a was taken after b was granted: the fences went backwards
            continue  # (fence-monotonic says so); b took no live lease of a's
        ended = [op for op in _holder_ops(ctx, h, a, ("release", "complete"))
                 if op.outcome in ("ok", "info") and op.t0 < b.t1]
        ended += [op for op in ctx.of(h, "cancel", "supervise") if op.ok and op.t0 < b.t1]
        if ended or ctx.killed(a.invoke["process"], a.t0, b.t1):
            continue
        extensions = [a] + [op for op in _holder_ops(ctx, h, a, EXTENDS)
                            if op.ok and op.t1 < b.t0]
        last = max(extensions, key=lambda op: op.t0 + ctx.ttl_of(op))
        live_until = last.t0 + ctx.ttl_of(last)
        if b.t1 < live_until - SLACK:
            out.append(Finding(
                "history:one-live-owner", ["DHP-FEN-005", "DHP-STM-007"],
                a.events + (last.events if last is not a else []) + b.events,
                f"{a.worker} held {h} with fence {a.fence}; its lease was extended at "
                f"t={last.t0:.3f} for {ctx.ttl_of(last):g} s, so it was certainly live until "
                f"t={live_until:.3f}. Its process was not killed and it did not release or "
                f"complete, yet {b.worker}'s {b.name} was granted fence {b.fence} at "
                f"t={b.t1:.3f}: two live owners at once."))
    return out


def _stale_writes(ctx: _Context, h: str) -> list[Finding]:
    """DHP-FEN-003/004: an accepted write carries the current owner's fence and a live lease."""
    out = []
    takes = [op for op in ctx.of(h, *TAKES)]
    for w in ctx.of(h, *WRITES):
        if not w.ok:
            continue
        mine = [t for t in takes if t.ok and t.worker == w.worker and t.fence == w.fence]
        maybe = [t for t in takes if t.outcome == "info" and t.worker == w.worker and t.t0 < w.t1]
        if not mine:
            if not maybe:
                out.append(Finding(
                    "history:no-stale-write", ["DHP-FEN-003"], w.events,
                    f"{w.name} by {w.worker} with fence {w.fence} on {h} was accepted, but that "
                    "worker was never granted that fence."))
            continue
        holder = mine[0]
        newer = [t for t in takes if t.ok and t.fence is not None and t.fence > w.fence
                 and t.t1 < w.t0]
        if newer:
            out.append(Finding(
                "history:no-stale-write", ["DHP-FEN-004", "DHP-FEN-003"],
                holder.events + newer[0].events + w.events,
                f"{holder.worker} was granted fence {holder.fence}; later {newer[0].worker} was "
                f"granted fence {newer[0].fence}. After that, {w.name} with the stale fence "
                f"{w.fence} was accepted; it had to fail with lease_lost and change nothing."))
            continue
        ended = [op for op in _holder_ops(ctx, h, holder, ("release", "complete"))
                 if op.ok and op.t1 < w.t0 and op is not w]
        if ended:
            out.append(Finding(
                "history:no-stale-write", ["DHP-FEN-003", "DHP-STM-004"],
                holder.events + ended[0].events + w.events,
                f"{w.worker} gave up its lease on {h} with {ended[0].name}, then its {w.name} "
                "with the same fence was still accepted: the lease no longer existed."))
            continue
        if not ctx.timed:
            continue
        extensions = [holder] + [op for op in _holder_ops(ctx, h, holder, EXTENDS)
                                 if op.outcome in ("ok", "info") and op.t0 < w.t1
                                 and op is not w]
        latest = max(op.t1 + ctx.ttl_of(op) for op in extensions)
        if w.t0 > latest + SLACK:
            out.append(Finding(
                "history:no-expired-write", ["DHP-FEN-003", "DHP-LSE-002"],
                holder.events + w.events,
                f"The lease of {w.worker} on {h} (fence {w.fence}) expired by t={latest:.3f} at "
                f"the latest, yet its {w.name} sent at t={w.t0:.3f} was accepted."))
    return out


def _take_found(data: dict) -> bool:
    """Whether a take found a checkpoint: last_seq says so (a checkpoint's state may be null,
    DHP-ADP-022); an adapter without it leaves only last_checkpoint to go by."""
    if "last_seq" in data:
        return data["last_seq"] is not None
    return data.get("last_checkpoint") is not None


def _durable_checkpoints(ctx: _Context, h: str) -> list[Finding]:
    """DHP-CKP-009/010: a read returns the last acknowledged checkpoint (rework <= 1)."""
    out = []
    if ctx.of(h, "import_log"):
        return out  # states written by an import are not in the history
    writes = ctx.of(h, "checkpoint")
    by_state: dict[bytes, list[Op]] = {}
    for w in writes:
        by_state.setdefault(oracle.canonical(w.args.get("state")), []).append(w)
    reads = [(op, op.data.get("state"), op.data.get("found", True)) for op in
             ctx.of(h, "last_checkpoint") if op.ok and isinstance(op.data, dict)]
    reads += [(op, op.data.get("last_checkpoint"), _take_found(op.data))
              for op in ctx.of(h, *TAKES) if op.ok and isinstance(op.data, dict)]
    for read, state, found in reads:
        acked = [w for w in writes if w.ok and w.t1 < read.t0]
        last = max(acked, key=lambda w: w.t1) if acked else None
        if not found:
            if last is not None:
                out.append(Finding(
                    "history:checkpoint-durable", ["DHP-CKP-009", "DHP-CKP-010"],
                    last.events + read.events,
                    f"A checkpoint of {h} was acknowledged at t={last.t1:.3f}, but {read.name} "
                    f"at t={read.t0:.3f} found no checkpoint at all: acknowledged work was lost."))
            continue
        sources = by_state.get(oracle.canonical(state), [])
        if not sources:
            out.append(Finding(
                "history:checkpoint-durable", ["DHP-CKP-010"], read.events,
                f"{read.name} of {h} returned a state that no checkpoint request ever wrote."))
            continue
        possible = [w for w in sources if w.outcome in ("ok", "info") and w.t0 < read.t1]
        if not possible:
            refused = sources[0]
            out.append(Finding(
                "history:rejected-write-changed-nothing", ["DHP-FEN-004", "DHP-STM-003"],
                refused.events + read.events,
                f"The checkpoint of {h} by {refused.worker} with fence {refused.fence} was "
                f"refused ({(refused.done or {}).get('error', {}).get('code')}), yet {read.name} "
                "returned its state: a rejected write changed the store."))
            continue
        if last is not None and all(w.t0 < last.t0 and w is not last for w in possible):
            out.append(Finding(
                "history:checkpoint-durable", ["DHP-CKP-009", "DHP-CKP-010"],
                possible[-1].events + last.events + read.events,
                f"{read.name} of {h} returned an older checkpoint than the last acknowledged one "
                f"(acknowledged at t={last.t1:.3f}): work after it was lost, more than one "
                "checkpoint of rework."))
    return out


def _records(ctx: _Context, h: str) -> list[Finding]:
    """DHP-CKP-001..007 on the records that acknowledged checkpoints return: each is well
    formed, hashed, carries the writer's fence and state, and links to its predecessor."""
    out = []
    acked = [op for op in ctx.of(h, "checkpoint")
             if op.ok and isinstance(op.data, dict) and "record" in op.data]
    by_seq = {}
    for op in acked:
        r = op.data["record"]
        problems = oracle.schema_errors("checkpoint", r)
        if problems:
            out.append(Finding("history:checkpoint-record", ["DHP-CKP-001"], op.events,
                               f"an acknowledged checkpoint of {h} returned a malformed "
                               f"record: {'; '.join(problems[:3])}."))
            continue
        body = {k: v for k, v in r.items() if k != "hash"}
        wrong = []
        if r["hash"] != oracle.digest(body):
            wrong.append(("DHP-CKP-005", f"its hash is not the digest of the record "
                                         f"({oracle.digest(body)})"))
        if r["handoff_id"] != h:
            wrong.append(("DHP-CKP-007", f"it names handoff {r['handoff_id']}"))
        if r["fence"] != op.fence:
            wrong.append(("DHP-CKP-006", f"it carries fence {r['fence']}, the writer's is "
                                         f"{op.fence}"))
        if oracle.canonical(r["state"]) != oracle.canonical(op.args.get("state")):
            wrong.append(("DHP-CKP-009", "its state is not the state written"))
        if r["seq"] == 1 and r["prev"] != h:
            wrong.append(("DHP-CKP-003", f"seq 1 has prev {r['prev']}, not the handoff id"))
        for rid, why in wrong:
            out.append(Finding("history:checkpoint-record", [rid], op.events,
                               f"The record returned for an acknowledged checkpoint of {h} "
                               f"(seq {r['seq']}) is wrong: {why}."))
        by_seq.setdefault(r["seq"], op)
    for seq, op in sorted(by_seq.items()):
        before = by_seq.get(seq - 1)
        if before is not None and op.data["record"]["prev"] != before.data["record"]["hash"]:
            out.append(Finding(
                "history:checkpoint-record", ["DHP-CKP-004"], before.events + op.events,
                f"Checkpoint seq {seq} of {h} has prev {op.data['record']['prev']}, but the "
                f"record of seq {seq - 1} has hash {before.data['record']['hash']}: the "
                "records are not hash-chained."))
    return out


def _completion(ctx: _Context, h: str) -> list[Finding]:
    """DHP-RES-001/003/004: one completion, schema-valid, durable."""
    out = []
    completes = [op for op in ctx.of(h, "complete") if op.ok]
    if len(completes) > 1:
        a, b = completes[0], completes[1]
        out.append(Finding("history:exactly-one-completion", ["DHP-RES-003"],
                           a.events + b.events,
                           f"{h} was completed twice: by {a.worker} (fence {a.fence}) and by "
                           f"{b.worker} (fence {b.fence})."))
    dispatch = ctx.dispatch.get(h)
    schema = dispatch.args.get("output_schema") if dispatch else None
    for op in ctx.of(h, "complete"):
        if schema is None or op.outcome == "info":
            continue
        problems = oracle.user_schema_errors(schema, op.args.get("result"))
        if op.ok and problems:
            out.append(Finding("history:result-valid", ["DHP-RES-001"], op.events,
                               f"complete of {h} was accepted with a result that does not match "
                               f"its output_schema: {'; '.join(problems[:3])}."))
        code = (op.done.get("error") or {}).get("code") if op.outcome == "fail" else None
        if code == "schema_violation" and not problems:
            out.append(Finding("history:result-valid", ["DHP-RES-001"], op.events,
                               f"complete of {h} was refused with schema_violation, but the "
                               "result is valid against the output_schema."))
    if completes:
        done = completes[0]
        for read in ctx.of(h, "result"):
            if not read.ok or read.t0 < done.t1 or not isinstance(read.data, dict):
                continue
            same = read.data.get("completed") and oracle.canonical(
                read.data.get("result")) == oracle.canonical(done.args.get("result"))
            if not same:
                out.append(Finding("history:result-durable", ["DHP-RES-004"],
                                   done.events + read.events,
                                   f"{h} was completed, but a later result read returned "
                                   f"{read.data!r} instead of the completed result."))
    return out


def _budgets(ctx: _Context, h: str) -> list[Finding]:
    """DHP-BUD-001..003: accepted work never exceeds a cap (counted since the last requeue)."""
    dispatch = ctx.dispatch.get(h)
    budget = (dispatch.args.get("budget") or {}) if dispatch else {}
    if not budget:
        return []
    out = []
    ops = sorted((op for op in ctx.by_handoff[h] if op.ok), key=lambda o: o.t1)
    takes, steps, spend = [], [], 0.0
    for op in ops:
        if op.name == "requeue":
            takes, steps, spend = [], [], 0.0
        elif op.name in TAKES:
            takes.append(op)
            cap = budget.get("max_attempts")
            if cap is not None and len(takes) > cap:
                out.append(Finding("history:budget", ["DHP-BUD-001"],
                                   [e for t in takes for e in t.events],
                                   f"{h} has max_attempts {cap}, yet {len(takes)} claims or "
                                   "recovers were granted."))
        elif op.name == "checkpoint":
            steps.append(op)
            spend += op.args.get("spend", 0)
            if budget.get("max_steps") is not None and len(steps) > budget["max_steps"]:
                out.append(Finding("history:budget", ["DHP-BUD-002"], op.events,
                                   f"{h} has max_steps {budget['max_steps']}, yet checkpoint "
                                   f"number {len(steps)} was accepted."))
            if budget.get("max_spend") is not None and spend > budget["max_spend"]:
                out.append(Finding("history:budget", ["DHP-BUD-003"], op.events,
                                   f"{h} has max_spend {budget['max_spend']}, yet accepted "
                                   f"checkpoints spent {spend:g}."))
    return out


def _terminal(ctx: _Context, h: str) -> list[Finding]:
    """DHP-STM-004/006: nothing is accepted after completion or cancellation."""
    out = []
    ops = ctx.by_handoff[h]
    ends = sorted((op for op in ops if op.ok and op.name in ("complete", "cancel")),
                  key=lambda o: o.t1)
    if not ends:
        return out
    end = ends[0]
    for op in ops:
        if op is end or not op.ok or op.t0 <= end.t1:
            continue
        bad = op.name in TAKES + WRITES + ("requeue",)
        if op.name == "cancel" and end.name == "complete":
            bad = True
        if bad:
            state = "completed" if end.name == "complete" else "cancelled"
            out.append(Finding("history:terminal", ["DHP-STM-004", "DHP-STM-006"],
                               end.events + op.events,
                               f"{h} was {state} at t={end.t1:.3f}; afterwards {op.name} was "
                               "accepted, but terminal states never change."))
            break
    return out
