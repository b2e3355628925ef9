"""Concurrency: many processes race to claim, then to recover, the same handoff; exactly one
wins each race (DHP-FEN-005)."""

from __future__ import annotations

import threading

from .base import Check, Ctx, dispatch


def _race(procs: list, op: str, hid: str) -> list:
    """Send the same take from every process at once; return the replies."""
    gate = threading.Barrier(len(procs))
    replies: list = [None] * len(procs)

    def go(i: int) -> None:
        gate.wait()
        p = procs[i]
        replies[i] = p.call(op, {"handoff_id": hid, "worker": p.worker})

    threads = [threading.Thread(target=go, args=(i,)) for i in range(len(procs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return replies


def races(ctx: Ctx) -> None:
    n, rounds = (6, 2) if ctx.quick else (10, 4)
    sc = ctx.scenario("races", ttl=30.0)
    procs = [sc.spawn(f"r{i}") for i in range(n)]
    for rnd in range(rounds):
        hid = dispatch(ctx, procs[0], inputs={"round": rnd, "seed": ctx.run.seed})
        replies = _race(procs, "claim", hid)
        _judge(ctx, replies, f"round {rnd}: {n} concurrent claims")
        winner = next((procs[i] for i, r in enumerate(replies) if r.ok), None)
        if winner is None:
            continue
        sc.restart(winner)  # SIGKILL the owner; its lease (30 s) is still live
        replies = _race(procs, "recover", hid)
        if "liveness" in ctx.features:
            # none won: the death went unseen, a miss of the SHOULD (a warning), not of
            # the MUST that at most one wins
            ctx.expect("DHP-LSE-005", any(r.ok for r in replies),
                       f"round {rnd}: the owner was SIGKILLed, yet none "
                       f"of {n} concurrent recovers took its handoff before its lease ran out",
                       *replies[:2])
        _judge(ctx, replies, f"round {rnd}: {n} concurrent recovers of a killed owner",
               allow_none=True)


def _judge(ctx: Ctx, replies: list, what: str, allow_none: bool = False) -> None:
    winners = [r for r in replies if r.ok]
    losers = [r for r in replies if not r.ok]
    codes = sorted({r.code or "unknown" for r in losers})
    ok = len(winners) == 1 or (allow_none and not winners)
    ctx.expect("DHP-FEN-005", ok, f"{what}: {len(winners)} won (exactly one must)",
               *(winners[:3] or replies[:1]))
    ctx.expect("DHP-STM-007", all(r.code == "conflict" for r in losers),
               f"{what}: the losers got {codes}, expected conflict",
               *[r for r in losers if r.code != "conflict"][:2])


CHECKS = [Check("concurrency", "claim-recover-races", ["DHP-FEN-005", "DHP-LSE-005"], races)]
