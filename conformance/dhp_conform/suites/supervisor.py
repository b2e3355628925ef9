"""The supervisor (feature supervise, class supervisor): passes through the adapter's
`supervise` op, one adapter process per supervisor (DHP-ADP-015). An expired lease is
orphaned, a dead owner's lease is orphaned at once (DHP-LSE-005), a live lease never is, not
even when its owner is paused; and when the leading supervisor process is SIGKILLed another
process's pass takes over."""

from __future__ import annotations

import time

from .base import Check, Ctx, dispatch, state_mark, take, write


def _pass(ctx: Ctx, sup, what: str) -> dict:
    data = ctx.need(sup.call("supervise", {}), what)
    if not isinstance(data, dict) or not isinstance(data.get("orphaned"), list):
        ctx.record("DHP-ADP-015", False, f"{what}: supervise must answer "
                   f"{{\"orphaned\": [...]}}, got {data!r}")
        return {"orphaned": []}
    return data


def expired(ctx: Ctx) -> None:
    lease = 0.4
    sc = ctx.scenario("expired", ttl=1.0)
    w, s = sc.spawn("worker"), sc.spawn("sup")
    hid = dispatch(ctx, w)
    ctx.need(take(ctx, w, hid, ttl=lease), "claim")
    early = _pass(ctx, s, "supervise while the lease is live")
    ctx.expect("DHP-LSE-002", hid not in early["orphaned"],
               "a supervisor pass orphaned a handoff whose lease was live")
    time.sleep(lease + 0.15)
    late = _pass(ctx, s, "supervise after the lease expired")
    ctx.expect("DHP-LSE-003", hid in late["orphaned"],
               f"a supervisor pass {lease + 0.15:g} s after a {lease:g} s lease did not orphan "
               f"it (orphaned: {late['orphaned']})")
    ctx.expect("DHP-ADP-015", late.get("leader", True) is not False,
               "the only supervisor process did not lead its pass")
    again = take(ctx, s, hid)
    ctx.expect_ok("DHP-STM-007", again, "claim of the orphaned handoff")


def dead_owner(ctx: Ctx) -> None:
    if "liveness" not in ctx.features:
        ctx.skip("DHP-LSE-005", "the implementation does not claim the feature liveness")
        return
    sc = ctx.scenario("dead-owner", ttl=30.0)
    w, s = sc.spawn("worker"), sc.spawn("sup")
    hid = dispatch(ctx, w)
    ctx.need(take(ctx, w, hid), "claim with a 30 s lease")
    sc.kill(w)
    data = _pass(ctx, s, "supervise after the owner was killed")
    ctx.expect("DHP-LSE-005", hid in data["orphaned"],
               "the owner's process was SIGKILLed, yet a supervisor pass did not orphan its "
               f"handoff before the lease ran out (orphaned: {data['orphaned']})")


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
        ctx.expect("DHP-LSE-002", hid not in orphaned,
                   f"a supervisor orphaned the live lease of {who}")
    ctx.expect_ok("DHP-FEN-003", write(w, "checkpoint", mine, fence, state=state_mark(ctx, "w")),
                  "the running owner's checkpoint after the supervisor passes")
    ctx.expect_ok("DHP-FEN-003", write(z, "checkpoint", paused, zfence,
                                       state=state_mark(ctx, "z")),
                  "the resumed owner's checkpoint after the supervisor passes")


def leader_killed(ctx: Ctx) -> None:
    lease = 0.4
    sc = ctx.scenario("leader-killed", ttl=1.0)
    s1, s2, w = sc.spawn("sup1"), sc.spawn("sup2"), sc.spawn("worker")
    first, second = _pass(ctx, s1, "first supervisor's pass"), _pass(ctx, s2, "second's pass")
    if "leader" in first and "leader" in second:
        ctx.expect("DHP-ADP-015", not (first["leader"] and second["leader"]),
                   "two live supervisor processes both led a pass")
    leader, other = (s2, s1) if second.get("leader") and not first.get("leader") else (s1, s2)
    sc.kill(leader)
    hid = dispatch(ctx, w)
    ctx.need(take(ctx, w, hid, ttl=lease), "claim")
    time.sleep(lease + 0.15)
    deadline = time.monotonic() + sc.ttl * 3 + 2
    taken, passes = False, 0
    while not taken and time.monotonic() < deadline:
        passes += 1
        taken = hid in _pass(ctx, other, f"surviving supervisor's pass {passes}")["orphaned"]
        if not taken:
            time.sleep(0.1)
    ctx.expect("DHP-ADP-015", taken, f"after the leading supervisor process was SIGKILLed, "
               f"{passes} passes of the other one over {sc.ttl * 3 + 2:g} s did not orphan an "
               "expired lease: nobody took over")
    ctx.expect("DHP-LSE-003", taken, "an expired lease stayed claimed after the supervisor "
               "leader was killed")
    sc.restart(leader)
    back = _pass(ctx, leader, "the restarted supervisor's pass")
    ctx.expect("DHP-ADP-015", hid not in back["orphaned"],
               "the restarted supervisor orphaned the handoff a second time")


CHECKS = [
    Check("supervisor", "expired-lease", ["DHP-LSE-002", "DHP-LSE-003", "DHP-ADP-015"],
          expired, feature="supervise", cls="supervisor",
          timing=True),
    Check("supervisor", "dead-owner", ["DHP-LSE-005"], dead_owner, feature="supervise",
          cls="supervisor", timing=True),
    Check("supervisor", "live-lease-kept", ["DHP-LSE-002", "DHP-FEN-003"], live_leases,
          feature="supervise", cls="supervisor",
          timing=True),
    Check("supervisor", "leader-killed", ["DHP-ADP-015", "DHP-LSE-003"], leader_killed,
          feature="supervise", cls="supervisor",
          timing=True),
]
