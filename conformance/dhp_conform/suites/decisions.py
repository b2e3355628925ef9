"""The decision-table vectors through the adapter, at their exact store-clock instants
(feature manual-clock, DHP-ADP-013).

vectors/lifecycle.json holds traces: every step runs at its `at`. vectors/fencing.json holds
one operation on a given stored record: the kit first builds that record with ordinary
operations (dispatch, claims and releases up to the fence, checkpoints up to the steps and
spend, then release / complete / cancel / a budget refusal for the state), then runs the
operation at `now` and compares the outcome and the status afterwards. A record that no
sequence of operations can build (for instance fence and attempts apart, which takes a requeue
out of the DLQ) is not sent; the run summary counts such vectors and says why.

Many vectors share one store and one adapter process: each has its own handoff and its own
stretch of the manual clock (its times shifted by a whole number of seconds), and decisions
depend only on differences of times. A step whose owner a later step declares dead
(owner_dead) runs in a separate process that the kit then SIGKILLs, so the death is real.
"""

from __future__ import annotations

import json
import math
import time
from typing import Any

import dhp_data

from .. import oracle
from ..harness import Proc, Reply
from .base import Check, CheckAborted, Ctx, recovery_bound

TAKES = ("claim", "recover", "claim_next")
WRITES = ("heartbeat", "checkpoint", "complete", "release")
EXTENDS = ("heartbeat", "checkpoint")


def load(suite: str) -> list[dict]:
    path = dhp_data.path("vectors", f"{suite}.json")
    return json.loads(path.read_text(encoding="utf-8"))["tests"] if path.exists() else []


def cited(suite: str) -> list[str]:
    return sorted({r for t in load(suite) for r in t["requirements"]})


class Unreachable(Exception):
    """The vector cannot be expressed through the adapter; the message says why."""


class Mismatch(Exception):
    """The implementation's answer differs from the vector's; args: reason, replies."""


class NotDetected(Mismatch):
    """A take from a killed owner whose lease is live was refused with `conflict` (claim_next:
    took nothing), as by a store that does not detect dead owners: a miss of the SHOULD
    `requirement` (DHP-LSE-005, or DHP-SCH-005 for claim_next), not of the vector's MUSTs,
    which it leaves unjudged."""

    def __init__(self, requirement: str, reason: str, replies: list):
        super().__init__(reason, replies)
        self.requirement = requirement


def _death_missed(op: str, reply: Reply, where: str, wanted: str) -> None:
    """Raise NotDetected if `reply` is the answer of a store blind to the owner's death: a
    conflict, or for claim_next none taken."""
    if not reply.ok and reply.code == "conflict" \
            or op == "claim_next" and reply.ok and reply.data is None:
        got = _got(reply) if not reply.ok else "none taken"
        raise NotDetected("DHP-SCH-005" if op == "claim_next" else "DHP-LSE-005",
                          f"{where}: the owner's process was SIGKILLed and its lease is live; "
                          f"expected {wanted} (its death detected through the liveness lock), "
                          f"got {got}, as from a store that waits for the lease", [reply])


class Bench:
    """One manual-clock scenario that many vectors share."""

    def __init__(self, ctx: Ctx, name: str, ttl: float = 30.0):
        self.ctx = ctx
        self.sc = ctx.scenario(name, ttl=ttl, clock="manual")
        self.main = self.sc.spawn("main")
        self.base = 0.0
        self._doomed = 0

    def next_vector(self) -> None:
        procs = [p for p in self.sc.procs.values() if p.process.alive()]
        self.base = math.ceil(max(p.clock for p in procs)) + 1000.0

    def at(self, proc: Proc, t: float) -> None:
        reply = proc.advance_to(self.base + t)
        if reply is not None and not reply.ok:
            raise CheckAborted(f"advance_clock failed: {reply!r}", self.ctx.evidence(reply))

    def doomed(self) -> Proc:
        """A fresh process whose take the kit kills right after (its owner really dies)."""
        self._doomed += 1
        return self.sc.spawn(f"doomed{self._doomed}")

    def kill(self, proc: Proc) -> None:
        self.sc.kill(proc)

    def take_from_dead(self, proc: Proc, name: str, args: dict) -> Reply:
        """A take that a vector says finds its owner dead (the kit has just SIGKILLed it), whose
        outcome (accepted, or refused for a reason of its own such as an exhausted budget)
        rests on that death. A store may learn of a death a moment later (a server store sees
        the dead client's session end), and DHP-ADP-014 gives it until the adapter's declared
        `recovery_bound_s`: retry a take that found nothing (a refusal changes nothing,
        DHP-STM-003) until then, about every 20 ms. With no bound declared, one try."""
        bound = recovery_bound(self.ctx)
        reply = proc.call(name, args)
        if bound is None:
            return reply
        deadline = time.monotonic() + bound
        while time.monotonic() < deadline and (reply.code == "conflict" or (
                name == "claim_next" and reply.ok and reply.data is None)):
            time.sleep(0.02)
            reply = proc.call(name, args)
        return reply

    def status(self, hid: str, t: float) -> Reply:
        self.at(self.main, t)
        return self.main.call("status", {"handoff_id": hid})


def _write_args(hid: str, name: str, src: dict, ttl: float | None) -> dict:
    args = {"handoff_id": hid, "worker": src["worker"], "fence": src["fence"]}
    if name in EXTENDS and ttl is not None:
        args["ttl"] = ttl
    if name == "checkpoint":
        args["state"] = src.get("state")
        if "spend" in src:
            args["spend"] = src["spend"]
    if name == "complete":
        args["result"] = src.get("result")
    if name == "release":  # the schedule suite's delays (DHP-SCH-003)
        args.update({k: src[k] for k in ("delay_s", "backoff") if k in src})
    return args


def _got(reply: Reply) -> str:
    if reply.ok:
        return "ok"
    return reply.code or f"unknown outcome ({reply.unknown})"


def _record_outcome(ctx: Ctx, vector: dict, run) -> None:
    """Run one vector; record PASS / FAIL for each requirement it cites."""
    label = vector["id"]
    try:
        run()  # Unreachable passes through: the caller counts it
    except NotDetected as exc:
        reason, replies = exc.args
        ctx.record(exc.requirement, False, f"{label} ({vector['description']}): {reason}",
                   ctx.evidence(*replies), label=label)
        for rid in vector["requirements"]:
            if rid != exc.requirement:
                ctx.not_run(rid, f"{label} could not go on: {reason}", label=label)
        return
    except Mismatch as exc:
        reason, replies = exc.args[0], exc.args[1] if len(exc.args) > 1 else []
        for rid in vector["requirements"]:
            ctx.record(rid, False, f"{label} ({vector['description']}): {reason}",
                       ctx.evidence(*replies), label=label)
        return
    for rid in vector["requirements"]:
        ctx.record(rid, True, label=label)


# --- lifecycle traces ------------------------------------------------------------------------

def dying_takes(steps: list[dict]) -> set[int]:
    """Indexes of the takes whose owner a later step declares dead (owner_dead: true).
    Also how the reference's own vector runner reads a trace (tests/test_lifecycle_vectors)."""
    out, last_take = set(), None
    for i, step in enumerate(steps):
        if step["op"] in ("recover", "claim_next") and step.get("owner_dead") \
                and last_take is not None:
            out.add(last_take)
        if step["op"] in TAKES and "error" not in step["expect"]:
            last_take = i
    return out


def _trace(bench: Bench, vector: dict) -> None:
    steps, ttl = vector["input"]["steps"], vector["input"]["ttl"]
    intent = vector["input"]["intent"]
    hid = oracle.handoff_id(intent)
    dying = dying_takes(steps)
    if dying and "liveness" not in bench.ctx.features:
        raise Unreachable("a step recovers from a dead owner (owner_dead), which needs the "
                          "feature liveness")
    bench.next_vector()
    held_until = None  # a lease of a process the kit killed is live at least until then
    for i, step in enumerate(steps):
        where = f"step {i} ({step['op']} at {step['at']})"
        proc = bench.doomed() if i in dying else bench.main
        bench.at(proc, step["at"])
        name = step["op"]
        if name == "dispatch":
            delay = {"delay_s": step["delay_s"]} if "delay_s" in step else {}
            reply = proc.call("dispatch", {**intent, **delay})
        elif name in TAKES:
            args = {"task_kinds": [intent["task_kind"]]} if name == "claim_next" \
                else {"handoff_id": hid}
            args.update(worker=step["worker"], ttl=ttl)
            dead = step.get("owner_dead") and step["expect"].get("error") != "conflict"
            reply = bench.take_from_dead(proc, name, args) if dead else proc.call(name, args)
        elif name in WRITES:
            reply = proc.call(name, _write_args(hid, name, step, ttl))
        else:
            reply = proc.call(name, {"handoff_id": hid})
        if i in dying:
            bench.kill(proc)
            held_until = step["at"] + ttl
        expect = step["expect"]
        if step.get("owner_dead") and expect.get("error") != "conflict" \
                and held_until is not None and step["at"] < held_until:
            _death_missed(name, reply, where, expect.get("error", "ok"))
        if "error" in expect:
            if reply.ok or reply.code != expect["error"]:
                raise Mismatch(f"{where}: expected {expect['error']}, got {_got(reply)}",
                               [reply])
            continue
        if not reply.ok:
            raise Mismatch(f"{where}: expected ok, got {_got(reply)}", [reply])
        data = reply.data if isinstance(reply.data, dict) else {}
        if name == "dispatch" and data.get("handoff_id") != hid:
            raise Mismatch(f"{where}: dispatch returned {data.get('handoff_id')}, the "
                           f"intent's id is {hid}", [reply])
        if "value" in expect:
            value = data.get("state") if name == "last_checkpoint" else data.get("result") \
                if name == "result" else reply.data if name == "claim_next" else data
            if value != expect["value"]:
                raise Mismatch(f"{where}: read {value!r}, expected {expect['value']!r}",
                               [reply])
        if name in TAKES and "fence" in expect and data.get("fence") != expect["fence"]:
            raise Mismatch(f"{where}: granted fence {data.get('fence')}, expected "
                           f"{expect['fence']}", [reply])
        wanted = {k: expect[k] for k in ("state", "fence", "owner", "attempts", "not_before_in")
                  if k in expect}
        if wanted:
            _compare_status(bench, hid, step["at"], wanted, where, reply)
    final = vector["expected"].get("final_state")
    if final is not None:
        last = steps[-1]["at"] if steps else 0
        _compare_status(bench, hid, last, {"state": final}, "final state", None)


def _compare_status(bench: Bench, hid: str, t: float, wanted: dict, where: str,
                    after: Reply | None) -> None:
    st = bench.status(hid, t)
    replies = [r for r in (after, st) if r is not None]
    if not st.ok or not isinstance(st.data, dict):
        raise Mismatch(f"{where}: status failed ({_got(st)})", replies)
    got = {k: st.data.get(k) for k in wanted}
    wrong = {k: (got[k], v) for k, v in wanted.items() if not _same(got[k], v)}
    if wrong:
        detail = ", ".join(f"{k} {g!r} (expected {w!r})" for k, (g, w) in wrong.items())
        raise Mismatch(f"{where}: status afterwards has {detail}", replies)


def _same(got: Any, want: Any) -> bool:
    if isinstance(want, (int, float)) and not isinstance(want, bool) \
            and isinstance(got, (int, float)) and not isinstance(got, bool):
        return math.isclose(got, want, rel_tol=0, abs_tol=1e-6)
    return got == want


def lifecycle_traces(ctx: Ctx) -> None:
    bench = Bench(ctx, "lifecycle-traces")
    _run_all(ctx, bench, "lifecycle", load("lifecycle"), _trace)


def schedule_traces(ctx: Ctx) -> None:
    """vectors/schedule.json: delays, backoff and claim_next, at their exact instants."""
    bench = Bench(ctx, "schedule-traces")
    _run_all(ctx, bench, "schedule", load("schedule"), _trace)


# --- the fencing decision table --------------------------------------------------------------

def _example_result(schema: dict, candidates: list) -> Any:
    for value in candidates:
        if not oracle.user_schema_errors(schema, value):
            return value
    raise Unreachable("no valid result is known for its output_schema, so the completed "
                      "record cannot be built")


def _need(reply: Reply, what: str) -> dict:
    if not reply.ok:
        raise Mismatch(f"building the stored record: {what} was refused ({_got(reply)}); "
                       "it had to be accepted", [reply])
    return reply.data if isinstance(reply.data, dict) else {}


def _build(bench: Bench, vector: dict, hid: str, intent: dict) -> None:
    """Reach the vector's stored record with ordinary operations (times before `now`)."""
    inp = vector["input"]
    r, op, now = inp["record"], inp["op"], inp["now"]
    state, fence, fc, exp = r["state"], r["fence"], r["first_claimed_at"], r["lease_expires_at"]
    # a dead owner matters only while it holds the lease: only then is the take made in a
    # process that the kit kills
    owner_dead = op["name"] == "recover" and op.get("owner_dead") and state == "claimed"
    if fence != r["attempts"]:
        raise Unreachable("fence and attempts differ; only a requeue out of the DLQ separates "
                          "them, which resets steps and spend")
    if fence == 0 and (state != "pending" or r["steps"] or r["spend"]):
        raise Unreachable(f"a {state} record with steps but fence 0")
    if fence and (fc is None or fc > now):
        raise Unreachable("a claimed-before record without a first claim before now")
    if owner_dead and "liveness" not in bench.ctx.features:
        raise Unreachable("recover from a dead owner needs the feature liveness")
    if state == "claimed" and (exp is None or exp <= fc):
        raise Unreachable("a claimed record whose lease ends before its first claim")
    if state == "orphaned" and now - fc <= 1:
        raise Unreachable("an orphaned record claimed less than 1 s before now")
    bench.at(bench.main, 0)
    _need(bench.main.call("dispatch", intent), "dispatch")
    main = bench.main
    for k in range(1, fence + 1):
        last = k == fence
        proc = bench.doomed() if last and owner_dead else main
        worker = r["owner"] if last and state == "claimed" else f"setup{k}"
        ttl = exp - fc if last and state == "claimed" else 1.0 if state == "orphaned" else 30.0
        bench.at(proc, fc)
        got = _need(proc.call("claim", {"handoff_id": hid, "worker": worker, "ttl": ttl}),
                    f"claim {k}")
        if got.get("fence") != k:
            raise Mismatch(f"building the stored record: claim {k} was granted fence "
                           f"{got.get('fence')}, not {k}", [])
        held = {"worker": worker, "fence": k}
        if not last:
            _need(proc.call("release", _write_args(hid, "release", held, None)), "release")
            continue
        for s in range(r["steps"]):
            step = dict(held, state={"setup_step": s + 1}, spend=r["spend"] if s == 0 else 0)
            _need(proc.call("checkpoint", _write_args(hid, "checkpoint", step, ttl)),
                  f"checkpoint {s + 1}")
        if owner_dead:
            bench.kill(proc)
        _finish(bench, vector, hid, held, intent)


def _finish(bench: Bench, vector: dict, hid: str, held: dict, intent: dict) -> None:
    """Move the freshly built claim to the record's state."""
    r, op = vector["input"]["record"], vector["input"]["op"]
    main, state = bench.main, r["state"]
    if state == "released":
        _need(main.call("release", _write_args(hid, "release", held, None)), "release")
    elif state == "completed":
        known = [op["result"]] if op.get("result") is not None else []
        result = _example_result(intent["output_schema"], known + [{"ok": True}, {}])
        _need(main.call("complete", _write_args(hid, "complete", dict(held, result=result),
                                                None)), "complete")
    elif state == "cancelled":
        _need(main.call("cancel", {"handoff_id": hid}), "cancel")
    elif state == "dead_lettered":
        reason, budget = r.get("dlq_reason"), r["budget"]
        if reason == "max_attempts" and budget.get("max_attempts") == r["attempts"]:
            _need(main.call("release", _write_args(hid, "release", held, None)), "release")
            over = main.call("claim", {"handoff_id": hid, "worker": "setup-over", "ttl": 30.0})
        elif reason == "max_steps" and budget.get("max_steps") == r["steps"]:
            over = main.call("checkpoint", _write_args(
                hid, "checkpoint", dict(held, state={"over": True}, spend=0), 30.0))
        else:
            raise Unreachable(f"a DLQ entry for {reason} with this budget")
        if over.ok or over.code != "budget_exceeded":
            raise Mismatch("building the stored record: the move to the DLQ was expected "
                           f"(budget_exceeded), got {_got(over)}", [over])


def _decision(bench: Bench, vector: dict) -> None:
    inp, expected = vector["input"], vector["expected"]
    r, op, now = inp["record"], inp["op"], inp["now"]
    intent = {"dhp": "1.0", "task_kind": "conform.fencing-vector",
              "inputs": {"vector": vector["id"]},
              "output_schema": inp.get("output_schema") or {}, "budget": r["budget"]}
    hid = oracle.handoff_id(intent)
    bench.next_vector()
    _build(bench, vector, hid, intent)
    bench.at(bench.main, now)
    name = op["name"]
    if name in TAKES:
        args = {"handoff_id": hid, "worker": op["worker"], "ttl": op["ttl"]}
        dead = op.get("owner_dead") and expected.get("error") != "conflict"
        reply = bench.take_from_dead(bench.main, name, args) if dead \
            else bench.main.call(name, args)
    elif name in WRITES:
        reply = bench.main.call(name, _write_args(hid, name, op, op.get("ttl")))
    else:
        reply = bench.main.call(name, {"handoff_id": hid})
    where = f"{name} at {now}"
    if op.get("owner_dead") and expected.get("error") != "conflict" \
            and r["state"] == "claimed" and (r["lease_expires_at"] or 0) > now:
        _death_missed(name, reply, where, expected.get("error", "accept"))
    if expected["outcome"] == "accept" and not reply.ok:
        raise Mismatch(f"{where}: expected accept, got {_got(reply)}", [reply])
    if expected["outcome"] == "reject" and (reply.ok or reply.code != expected["error"]):
        raise Mismatch(f"{where}: expected {expected['error']}, got {_got(reply)}", [reply])
    after = expected["record"]
    expires = after.get("lease_expires_at")
    live = after["state"] == "claimed" and expires is not None and now < expires
    state = "orphaned" if after["state"] == "claimed" and not live else after["state"]
    wanted = {"state": state, "fence": after["fence"], "attempts": after["attempts"],
              "steps": after["steps"], "spend": after["spend"],
              "owner": after["owner"] if live else None,  # DHP-STM-008
              "lease_expires_in": expires - now if live else None}
    _compare_status(bench, hid, now, wanted, f"after {where}", reply)
    if expected.get("dlq_reason"):
        st = bench.status(hid, now)
        got = (st.data or {}).get("dlq_reason") if st.ok else None
        if not isinstance(got, str) or expected["dlq_reason"] not in got:
            raise Mismatch(f"after {where}: dlq_reason {got!r} does not name "
                           f"{expected['dlq_reason']}", [reply, st])


def fencing_table(ctx: Ctx) -> None:
    bench = Bench(ctx, "fencing-table")
    _run_all(ctx, bench, "fencing", load("fencing"), _decision)


def _run_all(ctx: Ctx, bench: Bench, suite: str, vectors: list[dict], one) -> None:
    unreachable: dict[str, str] = {}
    for vector in vectors:
        try:
            _record_outcome(ctx, vector, lambda v=vector: one(bench, v))
        except Unreachable as exc:
            unreachable[vector["id"]] = str(exc)
    note_sent(ctx, suite, len(vectors), unreachable)


def note_sent(ctx: Ctx, suite: str, total: int, unsent: dict[str, str],
              how: str = "through the adapter") -> None:
    """The run's note on a vector suite: how many were sent, and why the others were not."""
    note = f"{suite} vectors: {total - len(unsent)} of {total} sent {how}"
    if unsent:
        why: dict[str, list[str]] = {}
        for vid, reason in unsent.items():
            why.setdefault(reason, []).append(vid)
        note += f"; {len(unsent)} cannot be: " + "; ".join(
            f"{', '.join(ids)} ({reason})" for reason, ids in why.items())
    ctx.run.harness.notes.append(note)


CHECKS = [
    Check("vectors", "lifecycle-traces", cited("lifecycle") + ["DHP-ADP-013"],
          lifecycle_traces, feature="manual-clock"),
    Check("vectors", "schedule-traces", cited("schedule") + ["DHP-ADP-013", "DHP-SCH-007"],
          schedule_traces, feature=("schedule", "manual-clock")),
    Check("vectors", "fencing-table", cited("fencing") + ["DHP-ADP-013"], fencing_table,
          feature="manual-clock"),
]
