"""The adapter's wiring (spec/adapter.md, DHP-ADP-*): handshake, framing, strict parsing,
errors, fence-explicit writes, returned records, the manual clock. These checks run first: an
adapter that breaks its framing makes every later finding doubtful."""

from __future__ import annotations

import time

from .. import ADAPTER_PROTOCOL, oracle
from ..harness import Proc
from .base import Check, Ctx, dispatch, state_mark, take, write

MISSING = "sha256:" + "0" * 64


def _framing_intact(ctx: Ctx, procs: list[Proc], what: str) -> None:
    """DHP-ADP-002 / DHP-ADP-008: every request got exactly one line back, nothing else."""
    for p in procs:
        proc = p.process
        ctx.expect("DHP-ADP-008", proc.broken is None,
                   f"{what}: {p.name}'s stdout carried a line that is not a response: "
                   f"{proc.broken}")
        ctx.expect("DHP-ADP-002", proc.stdout_lines == proc.requests,
                   f"{what}: {p.name} wrote {proc.stdout_lines} stdout lines for "
                   f"{proc.requests} requests; exactly one response per request")


def handshake(ctx: Ctx) -> None:
    sc = ctx.scenario("handshake", ttl=5.0)
    p = sc.spawn("p1", handshake=False)
    hello = p.call("hello", {"protocols": ["999", ADAPTER_PROTOCOL], "dhp": "1.0"})
    data = ctx.need(hello, "hello offering protocols 999 and 1")
    problems = oracle.schema_errors("adapter-hello", data)
    ctx.expect("DHP-ADP-003", not problems and data.get("protocol") == ADAPTER_PROTOCOL,
               f"hello offering ['999', '1'] must choose '1' and be valid against "
               f"schemas/adapter-hello.json: protocol {data.get('protocol')!r}, {problems[:3]}",
               hello)
    early = p.call("status", {"handoff_id": MISSING})
    ctx.expect_code("DHP-ADP-004", early, "invalid_input", "status before init")
    init = p.call("init", {"data": str(sc.data), "ttl": 5.0, "heartbeat_interval": None,
                           "process": p.name})
    ctx.expect_ok("DHP-ADP-004", init, "init after hello")
    q = sc.spawn("p2", handshake=False)
    none = q.call("hello", {"protocols": ["999"], "dhp": "1.0"})
    ctx.expect_code("DHP-ADP-003", none, "invalid_input",
                    "hello offering only an adapter protocol the adapter cannot speak")
    _framing_intact(ctx, [p, q], "handshake")


def unknown_op(ctx: Ctx) -> None:
    sc = ctx.scenario("unknown-op", ttl=5.0)
    p = sc.spawn("p1")
    ctx.expect_code("DHP-ADP-001", p.call("frobnicate", {"x": 1}), "invalid_input",
                    "a request with an unknown op")
    ctx.expect_code("DHP-ADP-001", p.call("claim", {"handoff_id": MISSING}), "invalid_input",
                    "claim without its worker argument")
    hid = dispatch(ctx, p)
    extra = p.call("status", {"handoff_id": hid, "zz_unknown_member": [1, 2]})
    ctx.expect_ok("DHP-ADP-001", extra, "status with an extra, undefined argument")
    ctx.expect("DHP-ADP-001", p.process.alive(), "the adapter exited after an unknown op")
    _framing_intact(ctx, [p], "unknown op")


def one_response(ctx: Ctx) -> None:
    """Requests in a row, then several in flight at once: each answered once, by id."""
    sc = ctx.scenario("framing", ttl=5.0)
    p = sc.spawn("p1")
    hid = dispatch(ctx, p)
    for _ in range(10):
        ctx.expect_ok("DHP-ADP-002", p.call("status", {"handoff_id": hid}), "status")
    handles = [p.send("status", {"handoff_id": hid if n % 2 else MISSING}) for n in range(6)]
    replies = [p.wait(h) for h in handles]
    for n, reply in enumerate(replies):
        right = reply.ok if n % 2 else reply.code == "not_found"
        ctx.expect("DHP-ADP-002", right, f"pipelined request {n}: the response does not answer "
                   "the request with its id", reply)
    time.sleep(0.1)  # a duplicate response would arrive now
    _framing_intact(ctx, [p], "requests in a row and pipelined")


def restart_sees_acked(ctx: Ctx) -> None:
    sc = ctx.scenario("restart", ttl=5.0)
    p = sc.spawn("p1")
    hid = dispatch(ctx, p)
    fence = ctx.need(take(ctx, p, hid), "claim")["fence"]
    mark = state_mark(ctx, "before-kill")
    ctx.need(write(p, "checkpoint", hid, fence, state=mark), "checkpoint")
    sc.restart(p)
    st = p.call("status", {"handoff_id": hid})
    last = p.call("last_checkpoint", {"handoff_id": hid})
    ctx.expect("DHP-ADP-004", st.ok and st.data.get("fence") == fence and last.ok
               and last.data.get("state") == mark,
               "a process restarted on the same data does not see what was acknowledged "
               "before the SIGKILL", st, last)


def errors(ctx: Ctx) -> None:
    sc = ctx.scenario("errors", ttl=5.0)
    p = sc.spawn("p1")
    for op, args in (("status", {"handoff_id": MISSING}),
                     ("claim", {"handoff_id": MISSING, "worker": p.worker}),
                     ("checkpoint", {"handoff_id": MISSING, "worker": p.worker, "fence": 1,
                                     "state": {}})):
        reply = p.call(op, args)
        err = reply.error or {}
        ctx.expect("DHP-ADP-005", reply.code == "not_found" and err.get("definite") is True
                   and isinstance(err.get("message"), str) and err.get("message"),
                   f"{op} of an unknown handoff must fail with the error object of not_found "
                   "(definite, with a message)", reply)


def fenced_writes(ctx: Ctx) -> None:
    """Writes act as the (worker, fence) they name, whatever the process holds: the store,
    not the adapter, refuses the wrong ones, and with lease_lost."""
    sc = ctx.scenario("explicit-fence", ttl=5.0)
    p, q = sc.spawn("p1"), sc.spawn("p2")
    hid = dispatch(ctx, p)
    first = ctx.need(take(ctx, p, hid), "claim")["fence"]
    cases = [("another worker, the current fence", write(p, "checkpoint", hid, first,
                                                          worker="someone-else",
                                                          state=state_mark(ctx, "x"))),
             ("the owner, a future fence", write(p, "heartbeat", hid, first + 1)),
             ("a process that holds nothing", write(q, "checkpoint", hid, first,
                                                    worker=q.worker, state=state_mark(ctx, "q")))]
    ctx.need(write(p, "release", hid, first), "release")
    second = ctx.need(take(ctx, p, hid), "claim again")["fence"]
    cases.append(("the same worker with its released fence",
                  write(p, "checkpoint", hid, first, state=state_mark(ctx, "old"))))
    for what, reply in cases:
        ctx.expect_code("DHP-ADP-006", reply, "lease_lost", f"checkpoint or heartbeat as {what}")
    ctx.expect_ok("DHP-ADP-006", write(p, "checkpoint", hid, second,
                                       state=state_mark(ctx, "new")),
                  "checkpoint with the current (worker, fence)")


def no_background_heartbeat(ctx: Ctx) -> None:
    ttl = 0.4
    sc = ctx.scenario("no-heartbeat", ttl=ttl)
    p = sc.spawn("p1")
    hid = dispatch(ctx, p)
    fence = ctx.need(take(ctx, p, hid), "claim")["fence"]
    time.sleep(ttl + 0.25)
    st = ctx.need(p.call("status", {"handoff_id": hid}), "status")
    ctx.expect("DHP-ADP-009", st["state"] == "orphaned",
               f"init had heartbeat_interval null, yet {ttl} s after the claim with no "
               f"heartbeat the handoff is {st['state']}, not orphaned: something heartbeats "
               "in the background")
    late = write(p, "heartbeat", hid, fence)
    ctx.expect_code("DHP-ADP-009", late, "lease_lost",
                    "heartbeat after the unrenewed lease ran out")


def returned_records(ctx: Ctx) -> None:
    sc = ctx.scenario("records", ttl=5.0)
    p = sc.spawn("p1")
    kind = f"conform.records.{ctx.rng.getrandbits(32)}"
    hid = dispatch(ctx, p, kind=kind)
    held = ctx.need(take(ctx, p, hid), "claim")
    ctx.expect("DHP-ADP-010", "last_checkpoint" in held and held["last_checkpoint"] is None,
               f"claim of a fresh handoff must return last_checkpoint null: {held!r}")
    ctx.expect("DHP-ADP-022", "last_seq" in held and held["last_seq"] is None,
               f"claim of a handoff without checkpoints must return last_seq null: {held!r}")
    fence, states, records = held["fence"], [state_mark(ctx, n) for n in range(2)], []
    for s in states:
        reply = write(p, "checkpoint", hid, fence, state=s, spend=0.25)
        record = (reply.data or {}).get("record") if reply.ok else None
        problems = oracle.schema_errors("checkpoint", record) if record is not None else ["none"]
        ctx.expect("DHP-ADP-010", not problems and record["state"] == s
                   and record["fence"] == fence and record["seq"] == len(records) + 1,
                   f"checkpoint must return the appended record (seq {len(records) + 1}, this "
                   f"state and fence): {problems[:3]}", reply)
        records.append(record)
    if all(records):
        ctx.expect("DHP-ADP-010", records[1].get("prev") == records[0].get("hash") is not None,
                   "the second returned record does not chain to the first")
    ctx.need(write(p, "release", hid, fence), "release")
    again = ctx.need(take(ctx, p, hid), "claim after release")
    ctx.expect("DHP-ADP-010", again.get("last_checkpoint") == states[-1],
               f"claim must return the last acknowledged state: {again.get('last_checkpoint')!r}")
    ctx.expect("DHP-ADP-022", again.get("last_seq") == 2,
               f"claim after two checkpoints must return last_seq 2: {again!r}")
    _null_state(ctx, p)
    if "claim_next" in ctx.features:
        ctx.need(write(p, "release", hid, again["fence"]), "release")
        nxt = p.call("claim_next", {"task_kinds": [kind], "worker": p.worker})
        ctx.expect("DHP-ADP-010", nxt.ok and isinstance(nxt.data, dict)
                   and nxt.data.get("handoff_id") == hid
                   and nxt.data.get("last_checkpoint") == states[-1],
                   "claim_next must return the handoff with its last acknowledged state", nxt)


def _null_state(ctx: Ctx, p) -> None:
    """A checkpoint whose state is null is told from no checkpoint by last_seq (DHP-ADP-022)."""
    hid = dispatch(ctx, p)
    fence = ctx.need(take(ctx, p, hid), "claim")["fence"]
    ctx.need(write(p, "checkpoint", hid, fence, state=None), "checkpoint with state null")
    ctx.need(write(p, "release", hid, fence), "release")
    held = ctx.need(take(ctx, p, hid), "claim after a checkpoint with state null")
    ctx.expect("DHP-ADP-022", held.get("last_checkpoint") is None and held.get("last_seq") == 1,
               "after one checkpoint whose state is null, claim must return last_checkpoint "
               f"null and last_seq 1: {held!r}")


STRICT = {
    "duplicate member": '{"task_kind": "a", "task_kind": "b", "inputs": {}, '
                        '"output_schema": {}, "budget": {}}',
    "NaN": '{"task_kind": "a", "inputs": {"x": NaN}, "output_schema": {}, "budget": {}}',
    "integer beyond 2^53-1": '{"task_kind": "a", "inputs": {"x": 9007199254740992}, '
                             '"output_schema": {}, "budget": {}}',
    "lone surrogate": '{"task_kind": "a", "inputs": {"x": "\\ud800"}, "output_schema": {}, '
                      '"budget": {}}',
    "budget null": '{"task_kind": "a", "inputs": {}, "output_schema": {}, "budget": null}',
}


def strict_parse(ctx: Ctx) -> None:
    sc = ctx.scenario("strict", ttl=5.0)
    p = sc.spawn("p1")
    for what, raw in STRICT.items():
        reply = p.call("dispatch", {"raw": what}, raw_args=raw)
        ctx.expect_code("DHP-ADP-011", reply, "invalid_input", f"dispatch whose args hold a "
                        f"{what}: {raw}")
    _framing_intact(ctx, [p], "strict parsing")


def manual_clock(ctx: Ctx) -> None:
    sc = ctx.scenario("manual-clock", ttl=5.0, clock="manual")
    p = sc.spawn("p1")
    hid = dispatch(ctx, p)
    ctx.need(p.advance_to(10), "advance_clock 10")
    ctx.need(take(ctx, p, hid, ttl=20), "claim with ttl 20")
    time.sleep(0.2)  # real time passes; the store clock must not
    st = ctx.need(p.call("status", {"handoff_id": hid}), "status")
    ctx.expect("DHP-ADP-013", st.get("lease_expires_in") == 20,
               f"with the manual clock standing still the lease must have exactly 20 s left, "
               f"not {st.get('lease_expires_in')!r}")
    ctx.need(p.advance_to(30), "advance_clock to the expiry instant")
    st = ctx.need(p.call("status", {"handoff_id": hid}), "status")
    ctx.expect("DHP-ADP-013", st["state"] == "orphaned", f"advance_clock by the whole ttl "
               f"left the handoff {st['state']}, not orphaned (the exact instant is expired)")
    back = p.call("advance_clock", {"seconds": -1})
    ctx.expect_code("DHP-ADP-013", back, "invalid_input", "advance_clock by -1 s")
    plain = ctx.scenario("system-clock", ttl=5.0).spawn("p1")
    ctx.expect_code("DHP-ADP-013", plain.call("advance_clock", {"seconds": 1}), "invalid_input",
                    "advance_clock in a process initialised with the system clock")


CHECKS = [
    Check("adapter", "handshake", ["DHP-ADP-003", "DHP-ADP-004"], handshake),
    Check("adapter", "unknown-op", ["DHP-ADP-001"], unknown_op),
    Check("adapter", "one-response-per-request", ["DHP-ADP-002", "DHP-ADP-008"], one_response),
    Check("adapter", "restart-sees-acknowledged", ["DHP-ADP-004"], restart_sees_acked),
    Check("adapter", "error-objects", ["DHP-ADP-005"], errors),
    Check("adapter", "fence-explicit-writes", ["DHP-ADP-006"], fenced_writes),
    Check("adapter", "no-background-heartbeat", ["DHP-ADP-009"], no_background_heartbeat),
    Check("adapter", "returned-records", ["DHP-ADP-010", "DHP-ADP-022"], returned_records),
    Check("adapter", "strict-parsing", ["DHP-ADP-011"], strict_parse),
    Check("adapter", "manual-clock", ["DHP-ADP-013"], manual_clock, feature="manual-clock"),
]
