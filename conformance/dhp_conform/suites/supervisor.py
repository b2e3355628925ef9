"""The supervisor (feature supervise, class supervisor): passes through the adapter's
`supervise` op, one adapter process per supervisor (DHP-ADP-015), judged under the
supervisor's own requirements (DHP-SUP-*). An expired lease is orphaned, a dead owner's lease
is orphaned at once, a stalled one too, a live lease never is, not even when its owner is
paused; work out of wall-clock time and orphans out of attempts are parked; a handoff that
changed since it expired is judged as it is now; at most one supervisor leads, a paused leader
wakes up deposed, a follower takes over at its first pass after the leader's lease, and every
new term has a new leadership fence."""

from __future__ import annotations

import time

from .base import (
    Check,
    CheckAborted,
    Ctx,
    dispatch,
    recovery_bound,
    state_mark,
    take,
    take_over,
    write,
)


def _pass(ctx: Ctx, sup, what: str) -> dict:
    reply = sup.call("supervise", {})
    data = ctx.need(reply, what)
    if not isinstance(data, dict) or not isinstance(data.get("orphaned"), list):
        ctx.record("DHP-ADP-015", False, f"{what}: supervise must answer "
                   f"{{\"orphaned\": [...]}}, got {data!r}")
        data = {"orphaned": []}
    events = sup.scenario.harness.history.events
    return dict(data, _t0=events[reply.events[0]]["time"], _t1=events[reply.events[-1]]["time"],
                _reply=reply)


def _state(ctx: Ctx, proc, hid: str) -> dict:
    data = ctx.need(proc.call("status", {"handoff_id": hid}), "status")
    return data if isinstance(data, dict) else {}


def _parked(ctx: Ctx, rid: str, data: dict, st: dict, hid: str, reason: str,
            what: str) -> None:
    """`hid` must be in the dead-letter queue with `reason` after the pass `data`."""
    listed = data.get("dead_lettered")
    ctx.expect(rid, st.get("state") == "dead_lettered" and st.get("dlq_reason") == reason
               and (listed is None or hid in listed),
               f"{what}: after the leading supervisor's pass the handoff is "
               f"{st.get('state')} (dlq_reason {st.get('dlq_reason')!r}"
               + ("" if listed is None else f", the pass dead-lettered {listed}")
               + f"); it had to be dead_lettered with reason {reason}", data["_reply"])


def _sent(proc, reply) -> float:
    """When the kit sent the request of `reply` (a lease it granted ends no earlier than
    this plus its length)."""
    return proc.scenario.harness.history.events[reply.events[0]]["time"]


def expired(ctx: Ctx) -> None:
    lease = 0.4
    sc = ctx.scenario("expired", ttl=1.0)
    w, s = sc.spawn("worker"), sc.spawn("sup")
    hid = dispatch(ctx, w)
    claim = take(ctx, w, hid, ttl=lease)
    ctx.need(claim, "claim")
    early = _pass(ctx, s, "supervise while the lease is live")
    if early["_t1"] < _sent(w, claim) + lease - 0.05:  # only if the pass surely saw it live
        ctx.expect("DHP-SUP-002", hid not in early["orphaned"],
                   "a supervisor pass orphaned a handoff whose lease was live", early["_reply"])
    time.sleep(lease + 0.15)
    late = _pass(ctx, s, "supervise after the lease expired")
    ctx.expect("DHP-SUP-001", hid in late["orphaned"],
               f"a supervisor pass {lease + 0.15:g} s after a {lease:g} s lease did not orphan "
               f"it (orphaned: {late['orphaned']})", late["_reply"])
    ctx.expect("DHP-ADP-015", late.get("leader", True) is not False,
               "the only supervisor process did not lead its pass", late["_reply"])
    again = take(ctx, s, hid)
    ctx.expect_ok("DHP-STM-007", again, "claim of the orphaned handoff")


def dead_owner(ctx: Ctx) -> None:
    if "liveness" not in ctx.features:
        for rid in ("DHP-LSE-005", "DHP-LSE-011"):
            ctx.skip(rid, "the implementation does not claim the feature liveness")
        return
    sc = ctx.scenario("dead-owner", ttl=30.0)
    w, s = sc.spawn("worker"), sc.spawn("sup")
    hid = dispatch(ctx, w)
    ctx.need(take(ctx, w, hid), "claim with a 30 s lease")
    sc.kill(w)
    data = _pass(ctx, s, "supervise after the owner was killed")
    seen = hid in data["orphaned"]
    for rid in ("DHP-SUP-003", "DHP-LSE-005"):  # SHOULDs: a miss is a warning
        ctx.expect(rid, seen, "the owner's process was SIGKILLed, yet a supervisor pass did "
                   f"not orphan its handoff before the lease ran out (orphaned: "
                   f"{data['orphaned']})", data["_reply"])
    if seen:  # the death freed the lock (DHP-LSE-011 a, b)
        ctx.record("DHP-LSE-011", True)
    else:  # a supervisor that does not probe the locks misses a SHOULD, not the MUST
        ctx.not_run("DHP-LSE-011", "the supervisor did not orphan the killed owner's handoff, "
                    "so whether its death freed the liveness lock cannot be told")


def live_leases(ctx: Ctx) -> None:
    sc = ctx.scenario("live", ttl=30.0)
    w, z, s = sc.spawn("worker"), sc.spawn("paused"), sc.spawn("sup")
    mine, paused = dispatch(ctx, w), dispatch(ctx, w)
    fence = ctx.need(take(ctx, w, mine), "claim")["fence"]
    zfence = ctx.need(take(ctx, z, paused), "claim by the process to pause")["fence"]
    sc.stop(z)
    orphaned: list = []
    for n in range(2):
        orphaned += _pass(ctx, s, f"supervise pass {n + 1}")["orphaned"]
    sc.cont(z)
    for hid, who in ((mine, "a running owner"), (paused, "a paused (SIGSTOP) owner")):
        ctx.expect("DHP-SUP-002", hid not in orphaned,
                   f"a supervisor orphaned the live lease of {who}")
    if "liveness" in ctx.features:  # a living holder keeps its lock (DHP-LSE-011 b)
        ctx.expect("DHP-LSE-011", paused not in orphaned, "a supervisor orphaned the lease of "
                   "a paused (SIGSTOP), living owner: it took the liveness lock of a process "
                   "that holds it")
    ctx.expect_ok("DHP-SUP-002", write(w, "checkpoint", mine, fence, state=state_mark(ctx, "w")),
                  "the running owner's checkpoint after the supervisor passes")
    ctx.expect_ok("DHP-SUP-002", write(z, "checkpoint", paused, zfence,
                                       state=state_mark(ctx, "z")),
                  "the resumed owner's checkpoint after the supervisor passes")


def leader_killed(ctx: Ctx) -> None:
    lease = 0.4
    sc = ctx.scenario("leader-killed", ttl=1.0)
    s1, s2, w = sc.spawn("sup1"), sc.spawn("sup2"), sc.spawn("worker")
    terms = _Terms(ctx, sc.ttl)
    started = time.monotonic()  # the leader's lease runs at least until sc.ttl after this
    first, second = _pass(ctx, s1, "first supervisor's pass"), _pass(ctx, s2, "second's pass")
    terms.add(s1, first)
    terms.add(s2, second)
    leader, other = (s2, s1) if second.get("leader") and not first.get("leader") else (s1, s2)
    sc.kill(leader)
    if "liveness" in ctx.features:  # the dead leader's liveness lock is free at once
        # A store may learn of the death a moment later (a server store: when the server
        # ends the dead client's session): passes are retried within the adapter's
        # recovery_bound_s (DHP-ADP-014), but only inside the dead leader's lease.
        until = min(time.monotonic() + (recovery_bound(ctx) or 0), started + sc.ttl - 0.2)
        early = _pass(ctx, other, "the other supervisor's pass right after the kill")
        while not early.get("leader") and time.monotonic() < until:
            time.sleep(0.02)
            early = _pass(ctx, other, "the other supervisor's pass right after the kill")
        terms.add(other, early)
        ctx.expect("DHP-SUP-013", early.get("leader") is True,
                   "the leading supervisor process was SIGKILLed, so its liveness lock is "
                   "free, yet the other supervisor's next pass (inside the dead leader's "
                   f"{sc.ttl:g} s leadership lease) did not take the leadership",
                   early["_reply"])
    hid = dispatch(ctx, w)
    ctx.need(take(ctx, w, hid, ttl=lease), "claim")
    time.sleep(max(lease, sc.ttl) + 0.15)  # the handoff's lease and the leadership expired
    deadline = time.monotonic() + sc.ttl * 3 + 2
    taken, passes = False, 0
    while not taken and time.monotonic() < deadline:
        passes += 1
        data = _pass(ctx, other, f"surviving supervisor's pass {passes}")
        terms.add(other, data)
        if passes == 1:
            ctx.expect("DHP-SUP-012", data.get("leader", True) is not False,
                       "the leading supervisor process was SIGKILLed and its leadership lease "
                       "has expired, yet the other supervisor's next pass did not take the "
                       "leadership", data["_reply"])
        taken = hid in data["orphaned"]
        if not taken:
            time.sleep(0.1)
    ctx.expect("DHP-ADP-015", taken, f"after the leading supervisor process was SIGKILLed, "
               f"{passes} passes of the other one over {sc.ttl * 3 + 2:g} s did not orphan an "
               "expired lease: nobody took over")
    sc.restart(leader)
    back = _pass(ctx, leader, "the restarted supervisor's pass")
    terms.add(leader, back)
    ctx.expect("DHP-SUP-007", hid not in back["orphaned"],
               "the restarted supervisor orphaned the handoff a second time", back["_reply"])
    time.sleep(sc.ttl + 0.15)  # the survivor's leadership lapses: the restarted one takes it
    terms.add(leader, _pass(ctx, leader, "the restarted supervisor's pass after a lease"))
    # Killed while leading and restarted at once under the same ID, inside the dead
    # incarnation's lease: a new term or none yet, never the old one (DHP-SUP-014).
    sc.kill(leader)
    sc.restart(leader)
    terms.add(leader, _pass(ctx, leader, "the supervisor restarted at once after a kill"))
    time.sleep(sc.ttl + 0.15)
    terms.add(leader, _pass(ctx, leader, "its pass once the dead incarnation's lease ran out"))
    terms.judge()


class _Terms:
    """The leadership fences the passes reported (`leader_fence`), judged at the end: a new
    term (another process, or a new incarnation of one) gets the highest fence so far plus
    one; the holder's next pass keeps its fence (a renewal) or, if its lease lapsed in
    between, takes the next one; no fence is ever issued to two terms (DHP-SUP-010, 014)."""

    def __init__(self, ctx: Ctx, ttl: float):
        self.ctx, self.ttl = ctx, ttl
        self.passes: list[tuple[str, dict]] = []

    def add(self, proc, data: dict, lapsed: bool = False) -> None:
        """`lapsed`: the kit kept this process paused for longer than its leadership lease
        since its last pass, so if it led then, its lease ran out and nobody renewed it."""
        if data.get("leader") and "leader_fence" in data:
            self.passes.append((f"{proc.name}#{proc.incarnation}", dict(data, _lapsed=lapsed)))

    def judge(self) -> None:
        ctx = self.ctx
        if not self.passes:
            for rid in ("DHP-SUP-010", "DHP-SUP-014"):
                ctx.not_run(rid, "the adapter's supervise answers carry no leader_fence, so "
                            "the leadership fences cannot be compared")
            return
        owner: dict[int, str] = {}
        holder, top, last = None, 0, None
        for term, data in self.passes:
            got, reply = data["leader_fence"], data["_reply"]
            process = term.split("#")[0]
            if got in owner and owner[got] != term:
                rid = "DHP-SUP-014" if owner[got].split("#")[0] == process else "DHP-SUP-010"
                ctx.expect(rid, False, f"{term} leads under leadership fence {got}, which was "
                           f"issued to {owner[got]} before: a fence is never issued twice, "
                           "and a restarted supervisor starts a new term", reply)
            elif term == holder and data["_lapsed"]:
                ctx.expect("DHP-SUP-010", got == top + 1,
                           f"{term} led under leadership fence {top}, was then paused past its "
                           f"{self.ttl:g} s leadership lease with no other supervisor passing, "
                           f"and led again under fence {got}: its lease had expired, so taking "
                           f"it again is a new term under {top + 1}, not a renewal", reply)
            elif term == holder and data["_t1"] < last["_t0"] + self.ttl - 0.1:
                ctx.expect("DHP-SUP-010", got == top,
                           f"{term} led again under leadership fence {got} within its "
                           f"{self.ttl:g} s leadership lease of fence {top}: a renewal by the "
                           f"holder keeps {top}", last["_reply"], reply)
            elif term == holder:  # the lease may or may not have lapsed in between
                ctx.expect("DHP-SUP-010", got in (top, top + 1),
                           f"{term} led again under leadership fence {got}; it held {top}, so "
                           f"a renewal keeps {top} and a new term takes {top + 1}", reply)
            else:
                restarted = any(t.split("#")[0] == process for t in owner.values())
                ctx.expect("DHP-SUP-014" if restarted else "DHP-SUP-010",
                           isinstance(got, int) and got == top + 1,
                           f"{term} took the leadership as a new term under fence {got}; the "
                           f"highest fence issued before was {top}, so it had to be {top + 1}",
                           reply)
            owner.setdefault(got, term)
            holder, last = term, data
            top = max(top, got) if isinstance(got, int) else top


def budgets(ctx: Ctx) -> None:
    """DHP-SUP-005/006: work out of wall-clock time is parked in whatever live state it is;
    an orphan whose attempts are used up is parked in the same step."""
    cap = 0.6
    sc = ctx.scenario("budgets", ttl=30.0)
    w, s = sc.spawn("worker"), sc.spawn("sup")
    claimed = dispatch(ctx, w, budget={"max_wall_clock_s": cap})
    released = dispatch(ctx, w, budget={"max_wall_clock_s": cap})
    roomy = dispatch(ctx, w, budget={"max_wall_clock_s": 3600})
    spent = dispatch(ctx, w, budget={"max_attempts": 1})
    ctx.need(take(ctx, w, claimed), "claim")
    fence = ctx.need(take(ctx, w, released), "claim")["fence"]
    ctx.need(write(w, "release", released, fence), "release")
    ctx.need(take(ctx, w, roomy), "claim")
    ctx.need(take(ctx, w, spent, ttl=0.3), "claim with a 0.3 s lease")
    time.sleep(cap + 0.2)
    data = _pass(ctx, s, "supervise after the wall clock ran out")
    for hid, what in ((claimed, "a claimed handoff past its max_wall_clock_s"),
                      (released, "a released handoff past its max_wall_clock_s")):
        _parked(ctx, "DHP-SUP-005", data, _state(ctx, s, hid), hid, "max_wall_clock_s", what)
    st = _state(ctx, s, roomy)
    ctx.expect("DHP-SUP-005", st.get("state") == "claimed",
               f"a claimed handoff with an hour of wall clock left is {st.get('state')} "
               f"(dlq_reason {st.get('dlq_reason')!r}) after a pass", data["_reply"])
    ctx.expect("DHP-SUP-001", spent in data["orphaned"],
               f"the pass did not orphan an expired lease (orphaned: {data['orphaned']})",
               data["_reply"])
    _parked(ctx, "DHP-SUP-006", data, _state(ctx, s, spent), spent, "max_attempts",
            "an expired lease whose max_attempts (1) was used up")
    lists = {k: data.get(k) for k in ("orphaned", "dead_lettered")}
    ctx.expect("DHP-ADP-023", all(isinstance(v, list) for v in lists.values()),
               f"supervise must answer both lists, got {lists}", data["_reply"])
    ctx.expect("DHP-SUP-017", all(spent in (v or []) for v in lists.values()),
               f"a handoff the pass orphaned and parked must be in both lists: {lists}",
               data["_reply"])


def stalled(ctx: Ctx) -> None:
    """DHP-SUP-004: a live lease without progress for longer than its progress timeout."""
    sc = ctx.scenario("stalled", ttl=30.0)
    w, s = sc.spawn("worker"), sc.spawn("sup")
    args = {"task_kind": "conform.sum", "inputs": {"n": ctx.rng.random()},
            "output_schema": {"type": "object"}, "budget": {}, "progress_timeout_s": 0.4}
    hid = ctx.need(w.call("dispatch", args), "dispatch with progress_timeout_s 0.4")["handoff_id"]
    busy = dispatch(ctx, w)
    ctx.need(take(ctx, w, hid), "claim with a 30 s lease")
    fence = ctx.need(take(ctx, w, busy), "claim with a 30 s lease")["fence"]
    time.sleep(0.6)
    data = _pass(ctx, s, "supervise after 0.6 s without progress")
    ctx.expect("DHP-SUP-004", hid in data["orphaned"],
               f"a handoff with no checkpoint for 0.6 s (progress timeout 0.4 s) was not "
               f"orphaned (orphaned: {data['orphaned']})", data["_reply"])
    ctx.expect("DHP-SUP-002", busy not in data["orphaned"],
               "a pass orphaned a live lease with no progress timeout", data["_reply"])
    ctx.expect_ok("DHP-SUP-002", write(w, "checkpoint", busy, fence, state=state_mark(ctx, "b")),
                  "checkpoint of the live lease after the pass")


def changed_since(ctx: Ctx) -> None:
    """DHP-SUP-007: a handoff that changed after its lease expired (recovered, completed,
    cancelled) is judged as it is now."""
    sc = ctx.scenario("changed", ttl=30.0)
    w1, w2, s = sc.spawn("w1"), sc.spawn("w2"), sc.spawn("sup")
    hids = [dispatch(ctx, w1) for _ in range(3)]
    for hid in hids:
        ctx.need(take(ctx, w1, hid, ttl=0.3), "claim with a 0.3 s lease")
    time.sleep(0.45)
    recovered, completed, cancelled = hids
    fence = take_over(ctx, w2, recovered, "recover", "recover after expiry", supervisor=s)["fence"]
    done = take_over(ctx, w2, completed, "recover", "recover after expiry", supervisor=s)["fence"]
    ctx.need(write(w2, "complete", completed, done, result={"total": 1}), "complete")
    if not w2.call("cancel", {"handoff_id": cancelled}).ok:  # cancel is not everyone's
        hids.remove(cancelled)
    data = _pass(ctx, s, "supervise after the changes")
    touched = sorted(set(data["orphaned"] + (data.get("dead_lettered") or [])) & set(hids))
    ctx.expect("DHP-SUP-007", not touched,
               f"the pass acted on handoffs that had been recovered, completed or cancelled "
               f"since their first lease expired: {touched}", data["_reply"])
    ctx.expect_ok("DHP-SUP-007", write(w2, "checkpoint", recovered, fence,
                                       state=state_mark(ctx, "r")),
                  "the new owner's checkpoint after the pass")
    for hid, state in ((completed, "completed"), (cancelled, "cancelled")):
        if hid not in hids:
            continue
        got = _state(ctx, s, hid).get("state")
        ctx.expect("DHP-SUP-007", got == state, f"a {state} handoff is {got} after a pass")


def deposed(ctx: Ctx) -> None:
    """DHP-SUP-009/011/012: a leader paused past its leadership lease is replaced at the
    follower's first pass after the lease, and wakes up deposed: it leads nothing and changes
    nothing while the new leader's lease is live."""
    ttl = 1.5
    sc = ctx.scenario("deposed", ttl=ttl)
    s1, s2, w = sc.spawn("sup1"), sc.spawn("sup2"), sc.spawn("worker")
    first = _pass(ctx, s1, "first supervisor's pass")
    if first.get("leader") is False:
        raise CheckAborted("the first supervisor process did not lead its first pass on a "
                           "store without a leader", [repr(first["_reply"])])
    follow = _pass(ctx, s2, "second supervisor's pass while the first leads")
    if follow["_t1"] < first["_t0"] + ttl - 0.1:
        ctx.expect("DHP-SUP-009", not follow.get("leader"),
                   "two supervisor processes both led a pass within one leadership lease",
                   first["_reply"], follow["_reply"])
    hid = dispatch(ctx, w)
    ctx.need(take(ctx, w, hid, ttl=0.3), "claim with a 0.3 s lease")
    sc.stop(s1)
    time.sleep(ttl + 0.3)
    took = _pass(ctx, s2, "the follower's first pass after the paused leader's lease")
    ctx.expect("DHP-SUP-012", took.get("leader", True) is not False,
               f"the leader was paused for {ttl + 0.3:g} s, past its {ttl:g} s leadership lease, "
               "yet the follower's next pass did not take the leadership", took["_reply"])
    ctx.expect("DHP-SUP-001", hid in took["orphaned"], "the new leader's pass did not orphan an "
               f"expired lease (orphaned: {took['orphaned']})", took["_reply"])
    hid2 = dispatch(ctx, w)
    ctx.need(take(ctx, w, hid2, ttl=0.3), "claim with a 0.3 s lease")
    time.sleep(0.4)
    renewed = _pass(ctx, s2, "the new leader's pass")
    sc.cont(s1)
    woke = _pass(ctx, s1, "the paused leader's pass after it woke up")
    if woke["_t1"] < renewed["_t0"] + ttl - 0.1:
        ctx.expect("DHP-SUP-011", not woke.get("leader") and hid2 not in woke["orphaned"],
                   "a leader paused past its leadership lease woke up while another supervisor "
                   f"held the leadership, yet its pass led ({woke.get('leader')}) or acted "
                   f"(orphaned: {woke['orphaned']})", renewed["_reply"], woke["_reply"])



def lapsed(ctx: Ctx) -> None:
    """DHP-SUP-009/010/012: a leader's own lease that ran out while it was paused (SIGSTOP) is
    taken again as a new term, not renewed; a follower that passes while it leads only
    watches; after the leader is SIGKILLed the follower takes the next term and renews it."""
    sc = ctx.scenario("lapsed", ttl=1.0)
    s1, s2, w = sc.spawn("sup1"), sc.spawn("sup2"), sc.spawn("worker")
    terms = _Terms(ctx, sc.ttl)
    first = _pass(ctx, s1, "first supervisor's pass")
    if first.get("leader") is False:
        raise CheckAborted("the first supervisor process did not lead its first pass on a "
                           "store without a leader", [repr(first["_reply"])])
    terms.add(s1, first)
    terms.add(s1, _pass(ctx, s1, "the leader's second pass"))
    sc.stop(s1)
    time.sleep(sc.ttl + 0.3)  # nobody passes: the leader's own lease runs out
    sc.cont(s1)
    hid = dispatch(ctx, w)
    ctx.need(take(ctx, w, hid, ttl=0.2), "claim with a 0.2 s lease")
    time.sleep(0.3)
    back = _pass(ctx, s1, "the leader's pass after it was paused past its lease")
    terms.add(s1, back, lapsed=True)
    ctx.expect("DHP-SUP-012", back.get("leader", True) is not False,
               "the only supervisor that passed found the leadership expired, yet did not "
               "take it", back["_reply"])
    ctx.expect("DHP-SUP-001", hid in back["orphaned"], "the leader's pass did not orphan an "
               f"expired lease (orphaned: {back['orphaned']})", back["_reply"])
    watch = _pass(ctx, s2, "the second supervisor's pass while the first leads")
    if watch["_t1"] < back["_t0"] + sc.ttl - 0.1:
        ctx.expect("DHP-SUP-009", not watch.get("leader") and not watch["orphaned"],
                   "a supervisor passed within the leader's live lease and led "
                   f"({watch.get('leader')}) or acted (orphaned: {watch['orphaned']})",
                   back["_reply"], watch["_reply"])
    sc.kill(s1)
    time.sleep(sc.ttl + 0.3)
    for n in (1, 2):
        data = _pass(ctx, s2, f"the second supervisor's pass {n} after the leader was killed")
        terms.add(s2, data)
        if n == 1:
            ctx.expect("DHP-SUP-012", data.get("leader", True) is not False,
                       "the leader was SIGKILLed and its lease has expired, yet the other "
                       "supervisor's next pass did not take the leadership", data["_reply"])
    terms.judge()


def _check(name: str, requirements: list[str], run) -> Check:
    return Check("supervisor", name, requirements, run, feature="supervise", cls="supervisor",
                 timing=True)


CHECKS = [
    _check("expired-lease", ["DHP-SUP-001", "DHP-SUP-002", "DHP-ADP-015", "DHP-STM-007"],
           expired),
    _check("dead-owner", ["DHP-SUP-003", "DHP-LSE-005", "DHP-LSE-011"], dead_owner),
    _check("live-lease-kept", ["DHP-SUP-002", "DHP-LSE-011"], live_leases),
    _check("leader-killed", ["DHP-SUP-012", "DHP-ADP-015", "DHP-SUP-007", "DHP-SUP-010",
                             "DHP-SUP-014", "DHP-SUP-013"], leader_killed),
    _check("budgets", ["DHP-SUP-005", "DHP-SUP-006", "DHP-SUP-001", "DHP-ADP-023",
                       "DHP-SUP-017"], budgets),
    _check("stalled", ["DHP-SUP-004", "DHP-SUP-002"], stalled),
    _check("changed-since-found", ["DHP-SUP-007"], changed_since),
    _check("lapsed-leader", ["DHP-SUP-010", "DHP-SUP-009", "DHP-SUP-012", "DHP-SUP-001"],
           lapsed),
    _check("deposed-leader", ["DHP-SUP-009", "DHP-SUP-012", "DHP-SUP-011", "DHP-SUP-001"],
           deposed),
]
