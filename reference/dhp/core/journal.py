"""The lease journal: who held a handoff under which fence, and how each lease was lost.

One entry per take (claim, recover, claim_next; `import` when a peer's chain brings a fence
granted on another host) and per lease lost (`orphan`: expired, owner process dead, or no
progress), written in the same transaction as the change it records, so it never disagrees
with the handoff's record. The handoff's record keeps only the current owner; the journal is
what lets the dashboard's timeline show every take, with or without checkpoints, and what the
takeover-delay metric is read from (dhp.observe.metrics).

A take's `lost_s` is the time from the instant the previous owner was known lost to this
take, on the store clock: the instant is the lease's expiry when it expired, else the
instant a probe found the owner's process dead (its liveness lock free) or the supervisor
found it without progress, whether that was the supervisor's orphan or this take's own
probe (then `lost_s` is 0). The real death may come earlier (a process killed between
probes); nothing in the store can see it sooner. None when nobody was lost (a first claim,
a take after a release or requeue) or the loss predates the journal.

Bounded: each handoff keeps its last CAP entries; a store reboot (sqlite) leaves earlier
store-clock times unrelated to later ones, so a `lost_s` that would be negative is None.
"""

from __future__ import annotations

from typing import Any

from dhp.core import machine
from dhp.core.clock import rfc3339

CAP = 64  # entries kept per handoff: older ones are dropped as new ones are added
FIELDS = ("handoff_id", "event", "fence", "worker", "at", "wall", "lost_s", "how")
# How a lease was lost (`how`, the metric's dhp.lost attribute).
EXPIRED, OWNER_DEAD, NO_PROGRESS = "lease_expired", "owner_dead", "no_progress"


def entry(handoff_id: str, event: str, fence: int, worker: str | None, at: float, *,
          lost_s: float | None = None, how: str | None = None) -> dict:
    """One journal entry; `at` is on the store clock, `wall` (RFC 3339) is for reading."""
    return {"handoff_id": handoff_id, "event": event, "fence": fence, "worker": worker,
            "at": at, "wall": rfc3339(), "lost_s": lost_s, "how": how}


def _lost(record: dict, now: float, owner_dead: bool) -> tuple[float, str] | None:
    """(instant, how) the owner of a claimed `record` was lost, judged at `now`; None when
    the record is not claimed or its owner is not lost."""
    if record["state"] != "claimed":
        return None
    if not machine.lease_live(record, now):
        return record["lease_expires_at"], EXPIRED
    if owner_dead:
        return now, OWNER_DEAD
    timeout = record.get("progress_timeout_s")
    if timeout is not None and now - record["last_progress_at"] > timeout:
        return now, NO_PROGRESS
    return None


def taken(tx: Any, hid: str, before: dict, after: dict, event: str, worker: str, now: float,
          *, owner_dead: bool = False) -> dict:
    """Journal a take of `hid` (record `before` -> `after`) in transaction `tx`; returns the
    entry."""
    lost = _lost(before, now, owner_dead)
    if lost is None and before["state"] == "orphaned":
        last = tx.lease_events(hid, last=1)
        if last and last[0]["event"] == "orphan" and last[0]["fence"] == before["fence"]:
            lost = last[0]["at"], last[0]["how"]
    delay = None if lost is None or now < lost[0] else now - lost[0]
    made = entry(hid, event, after["fence"], worker, now, lost_s=delay,
                 how=lost[1] if lost else None)
    tx.add_lease_event(made)
    return made


def orphaned(tx: Any, hid: str, before: dict, now: float, *, owner_dead: bool = False) -> None:
    """Journal that the lease of `before` (a claimed record) was lost and the handoff
    orphaned: the entry's `at` is the instant it was lost (its expiry when it expired)."""
    at, how = _lost(before, now, owner_dead) or (now, OWNER_DEAD)
    tx.add_lease_event(entry(hid, "orphan", before["fence"], before["owner"], at, how=how))
