"""The supervisor: orphans dead and expired leases, parks budget-exhausted work.

One pass, run by the elected leader only:
  1. parks live work whose wall-clock budget ran out in the DLQ (DHP-BUD-004);
  2. orphans claimed handoffs whose lease expired (DHP-LSE-003);
  3. orphans at once the handoffs of owners whose process is gone: it probes the liveness
     lock of each owner the store's liveness names (lock files on one host, the owners of
     claimed handoffs on Postgres) and orphans WHERE owner_incarnation = the dead one
     (DHP-LSE-005);
  4. orphans claimed handoffs that made no progress within their progress timeout
     (DHP-LSE-007).
An orphaned handoff whose attempts are exhausted is parked in the DLQ in the same
transaction (DHP-BUD-001): no one could take it again. Every move is decided by
machine.decide (or its budget rule) inside a store transaction that first checks that this
supervisor still holds the leadership with the same fence, so a deposed leader that wakes up
changes nothing. Every scan is an indexed query of the backend's transaction (core/backend.py),
so a pass costs in proportion to the handoffs it acts on, not to the running ones, and this
module holds no SQL.

Leadership is a lease with its own fence, a row in the store. A supervisor takes it when
there is none, when it has expired (store clock) or when the holder's liveness lock can be
taken (the leader process is dead, so a follower takes over within one pass interval, well
inside one TTL); the leader renews it every pass; followers only watch. A supervisor that
stops cleanly (SIGTERM, SIGINT, end of SECONDS) hands leadership back at once.

Each action is one JSON line on stdout:
  {"ts", "supervisor", "action", "handoff_id", "reason", "fence", "leader_fence"}
with action one of lead, follow, resign, orphan, dead_letter, lost_leadership, error; `fence`
is the handoff's fence (the leadership fence for leadership actions).

Its command line, `dhp-supervisor` and `dhp supervisor`, is dhp.cli.supervisor: this module is
a library component and imports nothing of the command line.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TextIO

from dhp.core import journal, machine
from dhp.core.backend import StoreBackend
from dhp.core.clock import rfc3339
from dhp.core.errors import DHPError, InvalidInput
from dhp.observe import tracing

LEADERSHIP = "supervisor"
BATCH = 200  # handoffs acted on per transaction; a pass repeats until a scan comes back short


class LostLeadership(Exception):
    """This supervisor no longer holds the leadership it acted under."""



def park_if_out_of_time(record: dict, now: float) -> machine.Outcome | None:
    """The move to the DLQ of live work whose wall-clock budget ran out (DHP-BUD-004), or
    None when it still has time."""
    if record["state"] not in ("claimed", "released", "orphaned"):
        return None
    return _park(record, now)


def park_if_exhausted(record: dict, now: float) -> machine.Outcome | None:
    """The move to the DLQ of an orphaned handoff that no claim could take any more
    (attempts or wall clock exhausted; DHP-BUD-001, DHP-BUD-005), or None."""
    return _park(record, now)


def _park(record: dict, now: float) -> machine.Outcome | None:
    outcome = machine.decide(record, {"name": "park"}, now)
    return outcome if outcome.accepted else None


class Supervisor:
    """One supervisor process (or thread) on one store."""

    def __init__(self, store: StoreBackend, supervisor_id: str, *, ttl: float | None = None,
                 interval: float | None = None, out: TextIO | Callable[[dict], Any] | None = None,
                 batch: int = BATCH):
        if not isinstance(supervisor_id, str) or not supervisor_id:
            raise InvalidInput(f"supervisor id must be a non-empty string, not {supervisor_id!r}")
        self.store = store
        self.id = supervisor_id
        self.ttl = float(ttl if ttl is not None else store.ttl)
        self.interval = float(interval if interval is not None else min(1.0, self.ttl / 3))
        if self.ttl <= 0 or self.interval <= 0:
            raise InvalidInput("supervisor ttl and interval must be positive seconds")
        if self.interval >= self.ttl:
            raise InvalidInput(f"interval {self.interval} must be shorter than the leadership "
                               f"ttl {self.ttl}, or the leader would lose it between passes")
        self.batch = batch
        self.fence: int | None = None  # the leadership fence while this one leads
        self._following: str | None = None
        self._stop = threading.Event()
        self._out = out if out is not None else sys.stdout
        self._token = store.liveness.token() if store.liveness is not None else None

    # --- log ---

    def log(self, action: str, *, handoff_id: str | None = None, reason: str | None = None,
            fence: int | None = None) -> dict:
        line = {"ts": rfc3339(), "supervisor": self.id, "action": action,
                "handoff_id": handoff_id, "reason": reason, "fence": fence,
                "leader_fence": self.fence}
        if handoff_id is not None:  # an orphan or a DLQ move: a span in the handoff's trace
            tracing.emit(f"supervisor.{action}", time.time_ns(), {
                "dhp.handoff_id": handoff_id, "dhp.fence": fence, "dhp.reason": reason,
                "dhp.supervisor_id": self.id})
        if callable(self._out):
            self._out(line)
        else:
            self._out.write(json.dumps(line, ensure_ascii=False) + "\n")
            self._out.flush()
        return line

    # --- leadership ---

    @property
    def is_leader(self) -> bool:
        return self.fence is not None

    def elect(self) -> bool:
        """Take or renew the leadership lease; returns whether this supervisor leads."""
        with self.store.transaction() as tx:
            now = self.store.now()
            row = tx.get_leader(LEADERSHIP)
            mine = row is not None and row["holder"] == self.id \
                and row["incarnation"] == self._token
            if mine and row["expires_at"] > now and row["fence"] == self.fence:
                why, fence = None, self.fence  # renewal
            else:
                why = self._vacancy(row, now, mine)
                fence = (row["fence"] if row else 0) + 1 if why else None
            if fence is not None:
                tx.put_leader(LEADERSHIP, self.id, self._token, fence,
                                          now + self.ttl)
        if fence is None:  # another supervisor leads
            self.fence = None
            if self._following != row["holder"]:
                self._following = row["holder"]
                self.log("follow", reason=f"{row['holder']} leads", fence=row["fence"])
            return False
        if why is not None:
            self.fence, self._following = fence, None
            self.log("lead", reason=why, fence=fence)
        return True

    def _vacancy(self, row: dict | None, now: float, mine: bool) -> str | None:
        """Why the leadership may be taken now, or None while another leader holds it."""
        if row is None:
            return "no leader yet"
        if mine:
            return "own leadership lapsed; taken again under a new fence"
        if row["expires_at"] <= now:
            return f"leadership of {row['holder']} expired"
        liveness = self.store.liveness
        if liveness is not None and liveness.owner_dead(row["incarnation"]):
            return f"leader {row['holder']} process is dead (liveness lock free)"
        return None

    def _check_leader(self, tx: Any, now: float, *, renew: bool = True) -> None:
        """The fence of every action: still the leader under the same fence, in this very
        transaction. Renewing here too keeps a long pass from outliving the lease."""
        row = tx.get_leader(LEADERSHIP)
        if row is None or row["holder"] != self.id or row["incarnation"] != self._token \
                or row["fence"] != self.fence or row["expires_at"] <= now:
            raise LostLeadership()
        if renew:
            tx.put_leader(LEADERSHIP, self.id, self._token, self.fence,
                                      now + self.ttl)

    def resign(self) -> None:
        """Hand the leadership back at once (a clean stop), so a follower need not wait."""
        if self.fence is None:
            return
        with self.store.transaction() as tx:
            now = self.store.now()
            try:
                self._check_leader(tx, now, renew=False)
            except LostLeadership:
                self.fence = None
                return
            tx.put_leader(LEADERSHIP, self.id, self._token, self.fence, now)
        self.log("resign", reason="stopping", fence=self.fence)
        self.fence = None

    # --- one pass ---

    def run_pass(self) -> list[dict]:
        """Elect, then (as leader) act. Returns the action lines of this pass."""
        actions: list[dict] = []
        try:
            if not self.elect():
                return actions
            actions += self._sweep("dead_letter", self._over_wall_clock_ids,
                                   self._out_of_time)
            actions += self._sweep("orphan", self._expired_ids, self._expired)
            actions += self._dead_owners()
            actions += self._sweep("orphan", self._stalled_ids, self._stalled)
        except LostLeadership:
            fence, self.fence = self.fence, None
            actions.append(self.log("lost_leadership", reason="another supervisor leads now",
                                    fence=fence))
        except DHPError as exc:  # store busy or unreachable: try again next pass
            actions.append(self.log("error", reason=str(exc)))
        return actions

    def _sweep(self, action: str, scan: Callable[[Any, float, int], list[str]],
               judge: Callable[[dict, float], tuple[machine.Outcome, str] | None]) -> list[dict]:
        """Act on what `scan` finds, a batch per fenced transaction, until it runs dry. The
        judge sees each row as it is now, under its lock: a scan may be stale on a store
        whose scans do not block writers, so every judge checks its own condition again."""
        done: list[dict] = []
        while True:
            with self.store.transaction() as tx:
                now = self.store.now()
                self._check_leader(tx, now)
                ids = scan(tx, now, self.batch)
                made = [m for hid in ids for m in self._apply(tx, hid, now, action, judge)]
            done += [self.log(a, handoff_id=h, reason=r, fence=f) for a, h, r, f in made]
            if len(ids) < self.batch or not made:
                return done

    def _apply(self, tx: Any, hid: str, now: float, action: str,
               judge: Callable[[dict, float], tuple[machine.Outcome, str] | None]) -> list:
        row = tx.get(hid)
        judged = judge(row, now) if row is not None else None
        if judged is None:
            return []  # changed since the scan (recovered, completed...): nothing to do
        outcome, reason = judged
        record = outcome.record
        made = [(action, hid, reason, record["fence"])]
        if action == "orphan":
            parked = park_if_exhausted(record, now)
            if parked is not None:
                record = parked.record
                made.append(("dead_letter", hid, record["dlq_reason"], record["fence"]))
        tx.put_record(hid, record, None)
        if action == "orphan":
            journal.orphaned(tx, hid, row["record"], now)  # dead owner unless expired/stalled
        return made

    # scans and judges

    @staticmethod
    def _expired_ids(tx: Any, now: float, limit: int) -> list[str]:
        return [r["handoff_id"] for r in tx.select(expired_before=now, limit=limit)]

    @staticmethod
    def _over_wall_clock_ids(tx: Any, now: float, limit: int) -> list[str]:
        return tx.over_wall_clock(now, limit)

    @staticmethod
    def _stalled_ids(tx: Any, now: float, limit: int) -> list[str]:
        return tx.stalled(now, limit)

    @staticmethod
    def _expired(row: dict, now: float) -> tuple[machine.Outcome, str] | None:
        record = row["record"]
        if record["state"] != "claimed" or machine.lease_live(record, now):
            return None
        outcome = machine.decide(record, {"name": "orphan"}, now)
        ago = now - record["lease_expires_at"]
        return (outcome, f"lease of {record['owner']} expired {ago:.3f}s ago") \
            if outcome.accepted else None

    @staticmethod
    def _out_of_time(row: dict, now: float) -> tuple[machine.Outcome, str] | None:
        outcome = park_if_out_of_time(row["record"], now)
        return (outcome, outcome.record["dlq_reason"]) if outcome else None

    @staticmethod
    def _stalled(row: dict, now: float) -> tuple[machine.Outcome, str] | None:
        record = row["record"]
        if record["state"] != "claimed" or record["progress_timeout_s"] is None \
                or record["last_progress_at"] + record["progress_timeout_s"] >= now:
            return None  # it made progress since the scan
        outcome = machine.decide(record, {"name": "orphan"}, now)
        if not outcome.accepted:
            return None
        idle = now - record["last_progress_at"]
        return outcome, (f"no progress for {idle:.3f}s (progress timeout "
                         f"{record['progress_timeout_s']}s)")

    def _dead_owners(self) -> list[dict]:
        """Orphan at once every handoff of each owner process whose liveness lock is free."""
        liveness = self.store.liveness
        if liveness is None:
            return []
        done: list[dict] = []
        # The owners to probe are those of claimed handoffs, read from the store: a lock
        # file is no list of them (a probe by another process removes a dead owner's file).
        with self.store.transaction(write=False) as tx:
            tokens = sorted(tx.owner_incarnations())
        for token in tokens:
            if token == self._token or not liveness.owner_dead(token):
                continue

            def judge(row: dict, now: float, token: str = token) \
                    -> tuple[machine.Outcome, str] | None:
                record = row["record"]
                if record["state"] != "claimed" or row["owner_incarnation"] != token:
                    return None  # taken over by a living process since the scan
                outcome = machine.decide(record, {"name": "orphan", "owner_dead": True}, now)
                reason = f"owner {record['owner']} process is dead (liveness lock free)"
                return (outcome, reason) if outcome.accepted else None

            def scan(tx: Any, now: float, limit: int, token: str = token) -> list[str]:
                return tx.claimed_by_incarnation(token, limit)

            done += self._sweep("orphan", scan, judge)
        return done

    # --- the loop ---

    def stop(self) -> None:
        self._stop.set()

    def run(self, seconds: float | None = None, *, once: bool = False) -> None:
        """Pass after pass every `interval` until `seconds` have passed or stop()."""
        deadline = None if seconds is None else time.monotonic() + seconds
        try:
            while True:
                self.run_pass()
                if once or self._stop.is_set():
                    return
                wait = self.interval
                if deadline is not None:
                    wait = min(wait, deadline - time.monotonic())
                    if wait <= 0:
                        return
                if self._stop.wait(wait):
                    return
        finally:
            try:
                self.resign()
            except DHPError:
                pass  # the lease simply expires


__all__ = ["LostLeadership", "Supervisor", "park_if_exhausted", "park_if_out_of_time"]
