"""Fencing: stale and forged fences, the zombie (a paused owner that wakes after a takeover),
and a killed owner recovered elsewhere (DHP-FEN-*, DHP-LSE-*, DHP-CKP-010)."""

from __future__ import annotations

import time

from .base import Check, Ctx, dispatch, recovery_bound, state_mark, take, take_over, write


def stale_fence(ctx: Ctx) -> None:
    ttl = 0.5
    sc = ctx.scenario("stale-fence", ttl=ttl)
    p, q = sc.spawn("p1"), sc.spawn("p2")
    hid = dispatch(ctx, p)
    old = ctx.need(take(ctx, p, hid), "claim")["fence"]
    ctx.need(write(p, "checkpoint", hid, old, state=state_mark(ctx, "p1")), "checkpoint")
    time.sleep(ttl + 0.1)
    # The new owner's lease is long: its own writes below must not race a 0.5 s lease on a
    # slow machine (only p's lease is meant to expire).
    new = take_over(ctx, q, hid, "claim", "claim after expiry", ttl=30.0)["fence"]
    ctx.expect("DHP-FEN-002", new > old, f"the new owner's fence {new} is not above {old}")
    for op, extra in (("heartbeat", {}), ("checkpoint", {"state": state_mark(ctx, "stale")}),
                      ("complete", {"result": {"total": 1}}), ("release", {})):
        reply = write(p, op, hid, old, **extra)
        ctx.expect_code("DHP-FEN-004", reply, "lease_lost", f"{op} with the stale fence {old}")
    forged = write(q, "checkpoint", hid, new + 1, state=state_mark(ctx, "forged"))
    ctx.expect_code("DHP-FEN-003", forged, "lease_lost", f"checkpoint with a future fence "
                    f"{new + 1}")
    wrong = write(q, "checkpoint", hid, new, worker=p.worker, state=state_mark(ctx, "imposter"))
    ctx.expect_code("DHP-FEN-003", wrong, "lease_lost", "checkpoint by another worker id with "
                    "the current fence")
    ctx.expect_ok("DHP-FEN-003", write(q, "checkpoint", hid, new, state=state_mark(ctx, "q")),
                  "checkpoint by the current owner")
    st = ctx.need(q.call("status", {"handoff_id": hid}), "status")
    ctx.expect("DHP-FEN-004", st["owner"] == q.worker and st["state"] == "claimed",
               f"after refused writes the status is {st['state']} owned by {st['owner']}")
    # The same worker takes the handoff again: its own earlier fence is now stale too.
    ctx.need(write(q, "release", hid, new), "release")
    newer = ctx.need(take(ctx, q, hid), "claim again")["fence"]
    own = write(q, "checkpoint", hid, new, state=state_mark(ctx, "own-stale"))
    ctx.expect_code("DHP-FEN-004", own, "lease_lost", f"checkpoint by the same worker with its "
                    f"earlier fence {new} after it re-claimed with fence {newer}")


def zombie(ctx: Ctx) -> None:
    """SIGSTOP the owner with a checkpoint in flight, recover elsewhere past the TTL, SIGCONT:
    the zombie's late writes are refused and the new owner's progress stands."""
    ttl = 0.8
    sc = ctx.scenario("zombie", ttl=ttl)
    z, q = sc.spawn("zombie"), sc.spawn("standby")
    hid = dispatch(ctx, z)
    fence = ctx.need(take(ctx, z, hid), "claim")["fence"]
    first = state_mark(ctx, "z1")
    ctx.need(write(z, "checkpoint", hid, fence, state=first), "checkpoint")
    sc.stop(z)
    early = take(ctx, q, hid, "recover")
    ctx.expect_code("DHP-FEN-005", early, "conflict",
                    "recover while the paused owner's lease is live and its process alive")
    # The store judges a death itself: a caller saying so changes nothing (DHP-LSE-010).
    claimed_dead = take(ctx, q, hid, "recover", owner_dead=True, known_dead=True)
    ctx.expect_code("DHP-LSE-010", claimed_dead, "conflict", "recover of a paused (living) "
                    "owner's live lease, with arguments claiming the owner is dead")
    in_flight = z.send("checkpoint", {"handoff_id": hid, "worker": z.worker, "fence": fence,
                                      "state": state_mark(ctx, "zombie-late")})
    time.sleep(ttl + 0.2)
    taken = take_over(ctx, q, hid, "recover", "recover after expiry")
    ctx.expect("DHP-CKP-010", taken.get("last_checkpoint") == first,
               f"the recovering worker resumed from {taken.get('last_checkpoint')!r}, not the "
               f"last acknowledged checkpoint {first!r}")
    sc.cont(z)
    late = z.wait(in_flight)
    ctx.expect_code("DHP-FEN-004", late, "lease_lost", "the zombie's in-flight checkpoint")
    done = write(z, "complete", hid, fence, result={"total": 0})
    ctx.expect_code("DHP-FEN-004", done, "lease_lost", "the zombie's completion")
    mine = state_mark(ctx, "standby")
    ctx.expect_ok("DHP-FEN-003", write(q, "checkpoint", hid, taken["fence"], state=mine),
                  "the new owner's checkpoint")
    last = q.call("last_checkpoint", {"handoff_id": hid})
    ctx.expect("DHP-FEN-004", last.ok and last.data.get("state") == mine,
               "last_checkpoint is not the new owner's checkpoint", last)
    ctx.expect_ok("DHP-RES-003", write(q, "complete", hid, taken["fence"], result={"total": 1}),
                  "the new owner's completion")


def killed_owner(ctx: Ctx) -> None:
    """SIGKILL the owner; a standby recovers (at once if the implementation detects dead
    owners, DHP-LSE-005, else after the TTL) and resumes from the last checkpoint."""
    ttl = 1.5
    sc = ctx.scenario("killed-owner", ttl=ttl)
    w, q = sc.spawn("worker"), sc.spawn("standby")
    hid = dispatch(ctx, w)
    fence = ctx.need(take(ctx, w, hid), "claim")["fence"]
    states = [state_mark(ctx, n) for n in range(2)]
    for s in states:
        ctx.need(write(w, "checkpoint", hid, fence, state=s), "checkpoint")
    sc.kill(w)
    quick = take(ctx, q, hid, "recover")
    if "liveness" in (sc.harness.hello or {}).get("features", []):
        ctx.expect("DHP-LSE-005", quick.ok, "recover right after the owner was killed was "
                   f"refused ({quick.code}); dead owners are not detected before the TTL",
                   quick)
    if quick.ok:
        taken = quick.data
    else:
        time.sleep(ttl + 0.1)
        taken = take_over(ctx, q, hid, "recover", "recover of a killed owner's handoff after "
                          "its lease expired")
    ctx.expect("DHP-CKP-010", taken.get("last_checkpoint") == states[-1],
               f"resumed from {taken.get('last_checkpoint')!r}, not {states[-1]!r}")
    ctx.expect("DHP-FEN-001", taken["fence"] == fence + 1,
               f"recover got fence {taken['fence']}, not {fence + 1}")
    sc.restart(w)
    ghost = write(w, "checkpoint", hid, fence, worker=f"{w.name}.{w.incarnation - 1}",
                  state=state_mark(ctx, "ghost"))
    ctx.expect_code("DHP-FEN-004", ghost, "lease_lost",
                    "a restarted process writing with its predecessor's worker id and fence")


def recovery_time(ctx: Ctx) -> None:
    """DHP-ADP-014: SIGKILL the owner, retry recover from a standby about every 20 ms, and
    compare the time from the kill to the first success with the declared bound."""
    bound = recovery_bound(ctx)
    if bound is None:
        ctx.skip("DHP-ADP-014", "the adapter's hello declares no recovery_bound_s")
        return
    ttl = 2.0
    sc = ctx.scenario("recovery-time", ttl=ttl)
    standby = sc.spawn("standby")
    times = []
    for n in range(1 if ctx.quick else 3):
        w = sc.spawn(f"owner{n}")
        hid = dispatch(ctx, w)
        fence = ctx.need(take(ctx, w, hid), "claim")["fence"]
        ctx.need(write(w, "checkpoint", hid, fence, state=state_mark(ctx, n)), "checkpoint")
        sc.kill(w)
        killed_at = sc.harness.history.events[-1]["time"]
        deadline = time.monotonic() + max(bound, ttl) + 2.0
        tries = []
        while time.monotonic() < deadline:
            reply = take(ctx, standby, hid, "recover")
            tries.append(reply)
            if reply.ok:
                break
            time.sleep(0.02)
        last = tries[-1]
        done = sc.harness.history.events[last.events[-1]]["time"] if last.ok else None
        took = None if done is None else done - killed_at
        times.append("never" if took is None else f"{took:.3f} s")
        ctx.expect("DHP-ADP-014", took is not None and took <= bound,
                   f"round {n + 1}: the adapter declares recovery_bound_s {bound:g}, but "
                   + (f"recover first succeeded {took:.3f} s after the SIGKILL"
                      if took is not None else "recover never succeeded")
                   + f" ({len(tries)} tries)", *(tries[:1] + tries[-1:]))
    sc.harness.notes.append(f"recovery after SIGKILL of the owner: {', '.join(times)} "
                            f"(declared bound {bound:g} s)")


CHECKS = [
    Check("fencing", "stale-fence", ["DHP-FEN-002", "DHP-FEN-003", "DHP-FEN-004"], stale_fence),
    Check("fencing", "zombie", ["DHP-FEN-004", "DHP-FEN-005", "DHP-CKP-010", "DHP-LSE-010"],
          zombie, timing=True),
    Check("fencing", "killed-owner", ["DHP-LSE-005", "DHP-CKP-010", "DHP-FEN-001"],
          killed_owner, timing=True),
    Check("fencing", "recovery-time", ["DHP-ADP-014"], recovery_time, timing=True),
]
