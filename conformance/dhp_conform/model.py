"""The kit's own model of one handoff's stored record, written from spec/states.md,
spec/leases-fencing.md ("The rules as code"), spec/budgets.md and spec/supervisor.md ("One
pass"). The reach suite drives an implementation through the adapter and this model side by
side and compares every answer and every status field (schemas/status.json) after each step.

Independent of the reference on purpose: the kit never imports `dhp`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

TERMINAL = ("completed", "cancelled")
TAKEABLE = ("pending", "released", "orphaned")
WRITES = ("heartbeat", "checkpoint", "complete", "release")
EXPIRED = object()  # status field: null or a number <= 0 (an expired lease not yet orphaned)


@dataclass
class Outcome:
    code: str | None  # None: accepted
    requirement: str  # the requirement that decides this outcome
    moved: str | None = None  # supervise: "orphaned" or "dead_lettered"


@dataclass
class Handoff:
    hid: str
    task_kind: str
    budget: dict
    progress_timeout: float | None = None
    state: str = "pending"
    owner: str | None = None
    fence: int = 0
    expires: float | None = None
    attempts: int = 0
    steps: int = 0
    spend: float = 0
    first_claim: float | None = None
    progress: float | None = None
    dlq_reason: str | None = None
    count: int = 0
    last_state: Any = None
    result: Any = None
    history: list = field(default_factory=list)

    # --- reading ----------------------------------------------------------------------------
    def live(self, now: float) -> bool:
        return self.expires is not None and now < self.expires  # DHP-LSE-002

    def effective(self, now: float) -> str:
        if self.state == "claimed" and not self.live(now):
            return "orphaned"  # DHP-LSE-003
        return self.state

    def status(self, now: float) -> dict:
        eff = self.effective(now)
        if eff == "claimed":
            lease: Any = self.expires - now
        elif self.state == "claimed":  # expired, not yet orphaned by anyone
            lease = EXPIRED
        else:
            lease = None
        return {"handoff_id": self.hid, "state": eff, "task_kind": self.task_kind,
                "fence": self.fence, "owner": self.owner if eff == "claimed" else None,
                "attempts": self.attempts,
                "checkpoints": {"count": self.count,
                                "last_seq": self.count if self.count else None},
                "lease_expires_in": lease, "spend": self.spend, "steps": self.steps,
                "dlq_reason": self.dlq_reason}

    # --- the budget ---------------------------------------------------------------------------
    def _wall_clock_out(self, now: float) -> bool:
        cap = self.budget.get("max_wall_clock_s")
        return cap is not None and self.first_claim is not None and now - self.first_claim > cap

    def _park(self, reason: str, requirement: str) -> Outcome:
        self.state, self.owner, self.expires, self.dlq_reason = \
            "dead_lettered", None, None, reason
        return Outcome("budget_exceeded", requirement)

    # --- operations ---------------------------------------------------------------------------
    def take(self, name: str, worker: str, ttl: float, now: float,
             owner_dead: bool = False) -> Outcome:
        eff = self.effective(now)
        if eff == "claimed" and not (name == "recover" and owner_dead):
            return Outcome("conflict", "DHP-STM-007")
        if eff in TERMINAL or eff == "dead_lettered":
            return Outcome("conflict", "DHP-STM-007")
        cap = self.budget.get("max_attempts")
        if cap is not None and self.attempts >= cap:
            return self._park("max_attempts", "DHP-BUD-001")
        if self._wall_clock_out(now):
            return self._park("max_wall_clock_s", "DHP-BUD-004")
        self.state, self.owner, self.fence = "claimed", worker, self.fence + 1
        self.expires, self.attempts, self.progress = now + ttl, self.attempts + 1, now
        if self.first_claim is None:
            self.first_claim = now
        return Outcome(None, "DHP-FEN-001")

    def write(self, name: str, worker: str, fence: int, now: float, *, ttl: float,
              state: Any = None, spend: float = 0, valid: bool = True) -> Outcome:
        """The order of DHP-FEN-006."""
        if self.state == "cancelled":
            return Outcome("cancelled", "DHP-FEN-006")
        if self.state == "dead_lettered":
            return Outcome("budget_exceeded", "DHP-FEN-006")
        if self.state != "claimed" or self.owner != worker or self.fence != fence \
                or not self.live(now):
            return Outcome("lease_lost", "DHP-FEN-004")
        if self._wall_clock_out(now):
            return self._park("max_wall_clock_s", "DHP-BUD-004")
        if name == "heartbeat":
            self.expires = now + ttl
            return Outcome(None, "DHP-LSE-004")
        if name == "release":
            self.state, self.owner, self.expires = "released", None, None
            return Outcome(None, "DHP-STM-002")
        if name == "complete":
            if not valid:
                return Outcome("schema_violation", "DHP-RES-002")
            self.state, self.owner, self.expires, self.result = "completed", None, None, state
            return Outcome(None, "DHP-RES-001")
        steps, budget = self.budget.get("max_steps"), self.budget
        if steps is not None and self.steps + 1 > steps:
            return self._park("max_steps", "DHP-BUD-002")
        if budget.get("max_spend") is not None and self.spend + spend > budget["max_spend"]:
            return self._park("max_spend", "DHP-BUD-003")
        self.steps, self.spend, self.count, self.last_state = \
            self.steps + 1, self.spend + spend, self.count + 1, state
        self.expires, self.progress = now + ttl, now
        return Outcome(None, "DHP-FEN-003")

    def cancel(self) -> Outcome:
        if self.state == "completed":
            return Outcome("conflict", "DHP-STM-006")
        self.state, self.owner, self.expires = "cancelled", None, None
        return Outcome(None, "DHP-STM-006")

    def requeue(self) -> Outcome:
        if self.state != "dead_lettered":
            return Outcome("conflict", "DHP-STM-005")
        self.state, self.attempts, self.steps, self.spend = "pending", 0, 0, 0
        self.first_claim, self.dlq_reason = None, None
        return Outcome(None, "DHP-BUD-007")

    def supervise(self, now: float) -> Outcome:
        """One leading pass (spec/supervisor.md, "One pass") as far as this handoff goes, its
        owner alive (the walk runs in one living process)."""
        eff = self.effective(now)
        if eff in ("claimed", "released", "orphaned") and self._wall_clock_out(now):
            self._park("max_wall_clock_s", "DHP-SUP-005")
            return Outcome(None, "DHP-SUP-005", moved="dead_lettered")
        if self.state != "claimed":
            return Outcome(None, "DHP-SUP-007")
        stalled = self.progress_timeout is not None and now - self.progress > self.progress_timeout
        if self.live(now) and not stalled:
            return Outcome(None, "DHP-SUP-002")
        requirement = "DHP-SUP-004" if self.live(now) else "DHP-SUP-001"
        self.state, self.owner, self.expires = "orphaned", None, None
        cap = self.budget.get("max_attempts")
        if cap is not None and self.attempts >= cap:
            self._park("max_attempts", "DHP-SUP-006")
            return Outcome(None, "DHP-SUP-006", moved="dead_lettered")
        return Outcome(None, requirement, moved="orphaned")


def status_differences(want: dict, got: Any) -> dict[str, tuple[Any, Any]]:
    """Fields of a status reply that differ from the model: {field: (got, expected)}."""
    if not isinstance(got, dict):
        return {"(status)": (got, "an object")}
    out = {}
    for key, value in want.items():
        have = got.get(key)
        if not _same(key, have, value):
            out[key] = (have, "null or <= 0" if value is EXPIRED else value)
    return out


def _same(key: str, got: Any, want: Any) -> bool:
    if want is EXPIRED:
        return got is None or _number(got) and got <= 1e-6
    if key == "dlq_reason" and want is not None:
        return isinstance(got, str) and want in got  # the cap's name, maybe with more words
    if isinstance(want, dict):
        return isinstance(got, dict) and all(_same(k, got.get(k), v) for k, v in want.items())
    if _number(want) and _number(got):
        return abs(got - want) <= 1e-6
    return type(got) is type(want) and got == want or got is None and want is None


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)
