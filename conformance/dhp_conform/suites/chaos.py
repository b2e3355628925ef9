"""Chaos: worker processes run handoffs to completion, checkpointing every step, while the kit
SIGKILLs random workers (mid-request too) and restarts them on the same data, and pauses others
(SIGSTOP, then SIGCONT after more than a lease, so their leases expire while they are frozen and
they wake up as zombies); when the implementation has the feature supervise, two supervisor
processes make passes meanwhile and are faulted too (about one fault in five picks among them).
Afterwards every handoff is completed exactly once and its exported log holds every
acknowledged checkpoint. The history checkers judge fencing, durability and rework over the
whole run.
"""

from __future__ import annotations

import threading
import time

from .. import oracle
from ..history import describe
from ..process import AdapterError
from .base import SCHEMA, Check, Ctx

STEPS = 6
KIND = "conform.chaos"
PAUSE_SHARE = 0.25  # of the faults, the share that are pauses rather than kills


def chaos(ctx: Ctx) -> None:
    workers, handoffs, faults = (4, 4, 12) if ctx.quick else (6, 8, 50)
    stats = workload(ctx, workers=workers, handoffs=handoffs, faults=faults,
                     seconds=20 if ctx.quick else 90)
    made = stats["kills"] + stats["pauses"]
    if made < faults:
        ctx.record("DHP-LSE-003", False, f"only {made} of {faults} faults could be injected "
                   f"within the run ({stats['kills']} kills, {stats['pauses']} pauses)")


def workload(ctx: Ctx, *, workers: int, handoffs: int, faults: int | None,
             seconds: float, ttl: float = 1.0, once: bool = False,
             pause_share: float = PAUSE_SHARE) -> dict:
    """Workers run handoffs while the kit SIGKILLs random workers (and supervisors, when the
    implementation has them), or pauses them across their lease (a share `pause_share` of the
    faults), until `faults` faults were made or `seconds` passed (with faults=None: for the
    whole time). Returns counts of what happened. `once`: each worker is killed at most once
    and never restarted, nobody is paused, and no more work is added, so the survivors must
    finish the first batch (the MCP profile's soak)."""
    sc = ctx.scenario("kill9", ttl=ttl)
    procs = [sc.spawn(f"c{i}") for i in range(workers)]
    feeder = sc.spawn("feeder")  # dispatches and reads; never faulted
    sups = [sc.spawn(f"sup{i}") for i in range(2)] if "supervise" in ctx.features else []
    pool = "claim_next" in ctx.features  # else workers take handoffs by name
    hids: list[str] = []

    def batch() -> None:
        """More work, so the run lasts until every fault was injected."""
        for _ in range(handoffs):
            args = {"task_kind": KIND, "inputs": {"n": len(hids), "seed": ctx.run.seed},
                    "output_schema": SCHEMA, "budget": {}}
            hids.append(ctx.need(_dispatch(feeder, args), "dispatch")["handoff_id"])

    batch()
    done: set[str] = set()
    stop = threading.Event()
    lock = threading.Lock()
    rngs = [ctx.rng.random() for _ in procs + sups]

    def revive(p) -> bool:
        if p.process.alive() or once:
            return p.process.alive()
        try:
            sc.restart(p)
        except AdapterError:  # killed or paused mid-handshake: start it again next time
            if p.process.alive():
                sc.kill(p)
            time.sleep(0.05)
        return False

    def supervise(i: int) -> None:
        import random
        rng, s = random.Random(rngs[len(procs) + i]), sups[i]
        while not stop.is_set():
            if revive(s):
                s.call("supervise", {})
            time.sleep(rng.uniform(0.1, 0.3))

    def finished(p, hid: str) -> None:
        """A complete whose answer was lost to a kill may have happened: ask the store."""
        st = p.call("status", {"handoff_id": hid})
        if st.ok and isinstance(st.data, dict) and st.data.get("state") == "completed":
            with lock:
                done.add(hid)

    def work(i: int) -> None:
        import random
        rng, p = random.Random(rngs[i]), procs[i]
        while not stop.is_set():
            with lock:
                todo = [h for h in hids if h not in done]
            if not todo:
                time.sleep(0.02)
                continue
            if not revive(p):
                if once:
                    return
                continue
            if pool:
                reply = p.call("claim_next", {"task_kinds": [KIND], "worker": p.worker})
                ways = ("recover",) if reply.ok and reply.data is None else ()
            else:  # no claim_next: take a handoff by name, fresh or orphaned
                reply, ways = None, ("claim", "recover")
            if ways:
                pick = rng.choice(todo)
                for way in ways:
                    reply = p.call(way, {"handoff_id": pick, "worker": p.worker})
                    if reply.code != "conflict":
                        break
                if reply.code == "conflict":
                    finished(p, pick)
            if not reply.ok:
                time.sleep(rng.uniform(0.01, 0.1))
                continue
            held = reply.data
            hid, fence = held["handoff_id"], held["fence"]
            last = held.get("last_checkpoint")
            step = last["step"] if isinstance(last, dict) else 0
            while step < STEPS and not stop.is_set():
                state = {"step": step + 1, "by": p.worker, "fence": fence,
                         "mark": rng.getrandbits(40)}
                r = p.call("checkpoint", {"handoff_id": hid, "worker": p.worker,
                                          "fence": fence, "state": state, "spend": 0})
                if not r.ok:
                    break
                step += 1
                time.sleep(rng.uniform(0, 0.02))
            if step >= STEPS:
                r = p.call("complete", {"handoff_id": hid, "worker": p.worker, "fence": fence,
                                        "result": {"total": STEPS}})
                if r.ok:
                    with lock:
                        done.add(hid)

    threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(workers)]
    threads += [threading.Thread(target=supervise, args=(i,), daemon=True)
                for i in range(len(sups))]
    for t in threads:
        t.start()
    count = {"kills": 0, "supervisor_kills": 0, "pauses": 0, "supervisor_pauses": 0}
    wakers: list[threading.Timer] = []
    deadline = time.monotonic() + seconds
    while (faults is None or count["kills"] + count["pauses"] < faults) \
            and time.monotonic() < deadline:
        time.sleep(ctx.rng.uniform(0.1, 0.8) if once else ctx.rng.uniform(0.05, 0.25))
        with lock:
            if len(done) == len(hids) and not once:
                batch()
        victims = procs + (sups if ctx.rng.random() < 0.2 else [])
        if once:
            victims = [p for p in procs if p.incarnation == 1 and p.process.alive()]
            if not victims:
                break
        victim = victims[ctx.rng.randrange(len(victims))]
        pause = not once and ctx.rng.random() < pause_share
        if not victim.process.alive() or not victim.incarnation \
                or sc.expect_silence(victim):
            continue
        if pause:  # frozen past its lease: it must wake up fenced out, never as an owner
            sc.stop(victim)
            waker = threading.Timer(ttl * ctx.rng.uniform(1.2, 2.0), sc.cont, (victim,))
            waker.start()
            wakers.append(waker)
        else:
            sc.kill(victim)
        kind = "pauses" if pause else "kills"
        count[kind] += 1
        if victim in sups:
            count["supervisor_" + kind] += 1
    for waker in wakers:
        waker.join()
    finish_by = time.monotonic() + ttl * 4 + 15
    while len(done) < len(hids) and time.monotonic() < finish_by:
        time.sleep(0.05)
    stop.set()
    for t in threads:
        t.join(timeout=15)
    for hid in [h for h in hids if h not in done]:
        finished(feeder, hid)
    ctx.record("DHP-LSE-003", len(done) == len(hids),
               f"{len(hids) - len(done)} of {len(hids)} handoffs were not completed within "
               f"{ttl * 4 + 15:g} s after the last of {count['kills']} kills and "
               f"{count['pauses']} pauses: orphaned work was not recovered")
    _check_logs(ctx, sc, feeder, hids)
    acked = sum(1 for e in sc.events() if e["type"] == "ok" and e["op"] == "checkpoint")
    return {**count, "handoffs": len(hids),
            "completed": len(done), "acked_checkpoints": acked,
            "requests": sum(1 for e in sc.events() if e["type"] == "invoke")}


def _dispatch(feeder, args: dict, patience: float = 30.0):
    """Dispatch, repeated while the store answers `unavailable` (its server failing over, a
    restart): a repeated dispatch of one intent is the same handoff (DHP-ID-004), so a
    dispatch whose outcome was unknown is safe to repeat."""
    deadline = time.monotonic() + patience
    while True:
        reply = feeder.call("dispatch", args)
        if reply.code != "unavailable" or time.monotonic() > deadline:
            return reply
        time.sleep(0.2)


def _check_logs(ctx: Ctx, sc, reader, hids: list[str]) -> None:
    """Every exported log is valid and holds every acknowledged checkpoint, in real-time order:
    a checkpoint acknowledged before another was requested comes first. (Acknowledgement order
    alone is no order: a worker frozen between its commit and its answer is acknowledged
    after its successor's checkpoints, which rightly follow its own in the log.)"""
    if "export_log" not in (sc.harness.hello or {}).get("features", []):
        return
    acked: dict[str, list[tuple[int, int, object]]] = {}  # (invoke index, ok index, state)
    for e in sc.events():
        if e["type"] == "ok" and e["op"] == "checkpoint":
            inv = sc.harness.history.events[e["invoke"]]
            acked.setdefault(inv["args"]["handoff_id"], []).append(
                (inv["index"], e["index"], inv["args"]["state"]))
    for hid in hids:
        path = sc.data.parent / f"{sc.name}-{hid[7:19]}.jsonl"
        reply = reader.call("export_log", {"handoff_id": hid, "path": str(path)})
        if not reply.ok:
            ctx.record("DHP-LOG-007", False, f"export_log of {hid} failed: {reply!r}",
                       ctx.evidence(reply))
            continue
        try:
            log = oracle.check_log(path.read_text(encoding="utf-8"))
        except (oracle.LogProblem, OSError) as exc:
            rid = getattr(exc, "requirement", "DHP-LOG-001")
            ctx.record(rid, False, f"exported log of {hid} ({path}): {exc}", ctx.evidence(reply))
            continue
        ctx.record("DHP-LOG-007", True)
        mine = acked.get(hid, [])
        missing, inverted, at = log_order(mine, [r["state"] for r in log["checkpoints"]])
        ctx.expect("DHP-CKP-009", not missing,
                   f"the log of {hid} lacks {len(missing)} acknowledged checkpoint(s), e.g. "
                   f"{missing[:1]}", reply)
        if not inverted:
            ctx.record("DHP-LOG-003", True)
            continue
        first, then = inverted[0]
        events = sc.harness.history.events
        ctx.record("DHP-LOG-003", False,
                   f"the log of {hid} holds checkpoint {mine[then][2]} (line {at[then]}) before "
                   f"{mine[first][2]} (line {at[first]}), though the latter was acknowledged "
                   "before the former was requested",
                   [describe(events[i]) for i in (*mine[first][:2], *mine[then][:2])]
                   + ctx.evidence(reply))


def log_order(acked: list[tuple[int, int, object]], states: list) -> tuple[list, list, dict]:
    """Judge a log's checkpoint states against acknowledged checkpoints, each given as
    (invoke index, ok index, state): the acknowledged states the log lacks, the pairs (a, b)
    of acknowledged checkpoints where a was acknowledged before b was requested yet the log
    holds b first, and each acknowledged checkpoint's line in the log."""
    position = {oracle.canonical(state): i for i, state in enumerate(states)}
    at = {i: position.get(oracle.canonical(state)) for i, (_, _, state) in enumerate(acked)}
    missing = [state for i, (_, _, state) in enumerate(acked) if at[i] is None]
    inverted = [(a, b) for a in at for b in at
                if acked[a][1] < acked[b][0] and None not in (at[a], at[b]) and at[a] > at[b]]
    return missing, inverted, at


CHECKS = [Check("chaos", "kill9-workers", ["DHP-CKP-009", "DHP-LSE-003", "DHP-LOG-007",
                                          "DHP-LOG-001", "DHP-LOG-003"], chaos)]
