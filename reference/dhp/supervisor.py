"""The supervisor: orphans dead and expired leases, parks budget-exhausted work.

One pass, run by the elected leader only:
  1. parks live work whose wall-clock budget ran out in the DLQ (DHP-BUD-004);
  2. orphans claimed handoffs whose lease expired (DHP-LSE-003);
  3. orphans at once the handoffs of owners whose process is gone: it lists the liveness
     lock files (one per live process), tries each, and orphans WHERE owner_incarnation = the
     dead one (DHP-LSE-005);
  4. orphans claimed handoffs that made no progress within their progress timeout
     (DHP-LSE-007).
An orphaned handoff whose attempts are exhausted is parked in the DLQ in the same
transaction (DHP-BUD-001): no one could take it again. Every move is decided by
machine.decide (or its budget rule) inside a store transaction that first checks that this
supervisor still holds the leadership with the same fence, so a deposed leader that wakes up
changes nothing. Every scan is indexed (supervisor_sql.py): a pass costs in proportion to the
handoffs it acts on, not to the running ones.

Leadership is a lease with its own fence, a row in the store. A supervisor takes it when
there is none, when it has expired (store clock) or when the holder's liveness lock can be
taken (the leader process is dead, so a follower takes over within one pass interval, well
inside one TTL); the leader renews it every pass; followers only watch. A supervisor that
stops cleanly (SIGTERM, SIGINT, end of SECONDS) hands leadership back at once.

Each action is one JSON line on stdout:
  {"ts", "supervisor", "action", "handoff_id", "reason", "fence", "leader_fence"}
with action one of lead, follow, resign, orphan, dead_letter, lost_leadership, error; `fence`
is the handoff's fence (the leadership fence for leadership actions).

Command line: `dhp-supervisor ROOT ID [SECONDS] [--once] [--interval S] [--ttl S]` (also
`dhp supervisor`): ROOT is the store folder, ID names this supervisor, SECONDS bounds how long
it runs (default: until stopped).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from dhp.core import machine
from dhp.core.backend import StoreBackend
from dhp.core.clock import rfc3339
from dhp.core.errors import DHPError, InvalidInput
from dhp.observe import tracing
from dhp.store import sqlite_supervisor as supervisor_sql

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
            row = supervisor_sql.get_leader(tx, LEADERSHIP)
            mine = row is not None and row["holder"] == self.id \
                and row["incarnation"] == self._token
            if mine and row["expires_at"] > now and row["fence"] == self.fence:
                why, fence = None, self.fence  # renewal
            else:
                why = self._vacancy(row, now, mine)
                fence = (row["fence"] if row else 0) + 1 if why else None
            if fence is not None:
                supervisor_sql.put_leader(tx, LEADERSHIP, self.id, self._token, fence,
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
        row = supervisor_sql.get_leader(tx, LEADERSHIP)
        if row is None or row["holder"] != self.id or row["incarnation"] != self._token \
                or row["fence"] != self.fence or row["expires_at"] <= now:
            raise LostLeadership()
        if renew:
            supervisor_sql.put_leader(tx, LEADERSHIP, self.id, self._token, self.fence,
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
            supervisor_sql.put_leader(tx, LEADERSHIP, self.id, self._token, self.fence, now)
        self.log("resign", reason="stopping", fence=self.fence)
        self.fence = None

    # --- one pass ---

    def run_pass(self) -> list[dict]:
        """Elect, then (as leader) act. Returns the action lines of this pass."""
        actions: list[dict] = []
        try:
            if not self.elect():
                return actions
            actions += self._sweep("dead_letter", supervisor_sql.over_wall_clock,
                                   self._out_of_time)
            actions += self._sweep("orphan", self._expired_ids, self._expired)
            actions += self._dead_owners()
            actions += self._sweep("orphan", supervisor_sql.stalled, self._stalled)
        except LostLeadership:
            fence, self.fence = self.fence, None
            actions.append(self.log("lost_leadership", reason="another supervisor leads now",
                                    fence=fence))
        except DHPError as exc:  # store busy or unreachable: try again next pass
            actions.append(self.log("error", reason=str(exc)))
        return actions

    def _sweep(self, action: str, scan: Callable[[Any, float, int], list[str]],
               judge: Callable[[dict, float], tuple[machine.Outcome, str] | None]) -> list[dict]:
        """Act on what `scan` finds, a batch per fenced transaction, until it runs dry."""
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
        judged = judge(row["record"], now) if row is not None else None
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
        return made

    # scans and judges

    @staticmethod
    def _expired_ids(tx: Any, now: float, limit: int) -> list[str]:
        return [r["handoff_id"] for r in tx.select(expired_before=now, limit=limit)]

    @staticmethod
    def _expired(record: dict, now: float) -> tuple[machine.Outcome, str] | None:
        if record["state"] != "claimed" or machine.lease_live(record, now):
            return None
        outcome = machine.decide(record, {"name": "orphan"}, now)
        ago = now - record["lease_expires_at"]
        return (outcome, f"lease of {record['owner']} expired {ago:.3f}s ago") \
            if outcome.accepted else None

    @staticmethod
    def _out_of_time(record: dict, now: float) -> tuple[machine.Outcome, str] | None:
        outcome = park_if_out_of_time(record, now)
        return (outcome, outcome.record["dlq_reason"]) if outcome else None

    @staticmethod
    def _stalled(record: dict, now: float) -> tuple[machine.Outcome, str] | None:
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
        for path in sorted(Path(liveness.folder).glob("*.lock")):
            token = path.stem
            if token == self._token or not liveness.owner_dead(token):
                continue

            def judge(record: dict, now: float) -> tuple[machine.Outcome, str] | None:
                if record["state"] != "claimed":
                    return None
                outcome = machine.decide(record, {"name": "orphan", "owner_dead": True}, now)
                reason = f"owner {record['owner']} process is dead (liveness lock free)"
                return (outcome, reason) if outcome.accepted else None

            def scan(tx: Any, now: float, limit: int, token: str = token) -> list[str]:
                return supervisor_sql.claimed_by_incarnation(tx, token, limit)

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


# --- command line -----------------------------------------------------------------------------

def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options shared by `dhp-supervisor` and `dhp supervisor`."""
    p.add_argument("--once", action="store_true",
                   help="run a single pass and exit (for cron and tests)")
    p.add_argument("--interval", type=float, default=None, metavar="S",
                   help="seconds between passes (default: min(1, ttl/3))")
    p.add_argument("--ttl", type=float, default=None, metavar="S",
                   help="leadership lease in seconds (default: the store's lease ttl, 5)")


def run_supervisor(store_path: str, supervisor_id: str, seconds: float | None, *,
                   once: bool = False, interval: float | None = None,
                   ttl: float | None = None) -> int:
    """Open the store (which must exist), run until done or signalled; exit code."""
    from dhp.cli.commands import open_store  # the CLI's store opener: refuses a missing store

    store = open_store(store_path)
    sup = Supervisor(store, supervisor_id, ttl=ttl, interval=interval)

    def on_signal(signum: int, frame: Any) -> None:
        sup.stop()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
    sup.run(seconds, once=once)
    store.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    """`dhp-supervisor ROOT ID [SECONDS]`."""
    from dhp.cli.commands import EXIT_CODES, fail

    parser = argparse.ArgumentParser(
        prog="dhp-supervisor", description="Run a DHP supervisor on the store in ROOT: "
        "orphan expired and dead leases, park budget-exhausted work; one JSON line per action.",
        epilog=EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("root", metavar="ROOT", help="the store folder")
    parser.add_argument("id", metavar="ID", help="this supervisor's name")
    parser.add_argument("seconds", metavar="SECONDS", type=float, nargs="?", default=None,
                        help="stop after this many seconds (default: run until stopped)")
    add_arguments(parser)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    try:
        return run_supervisor(args.root, args.id, args.seconds, once=args.once,
                              interval=args.interval, ttl=args.ttl)
    except DHPError as exc:
        return fail(exc, "dhp-supervisor")


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["LostLeadership", "Supervisor", "main", "park_if_exhausted", "park_if_out_of_time",
           "run_supervisor"]
