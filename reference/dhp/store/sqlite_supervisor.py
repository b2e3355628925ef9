"""The supervisor's extra storage on the embedded SQLite store: the leadership row and the
indexed scans of a supervisor pass.

The `Tx` interface (backend.py) has `select(expired_before=...)` for expired leases; the
other scans of a pass (owners that died, stalled work, wall-clock budgets) and the
leadership row are SQLite-specific here, run inside the store's own transactions through
`tx.conn`. Every scan is backed by a partial index (sqlite_store.MIGRATIONS, version 2), so
a pass costs in proportion to the handoffs it acts on, not to the running ones.
"""

from __future__ import annotations

from typing import Any

from dhp.core.errors import Internal


def _conn(tx: Any):
    conn = getattr(tx, "conn", None)
    if conn is None:
        raise Internal(f"the supervisor needs the SQLite store; {type(tx).__name__} has no "
                       "leadership row or supervisor scans yet")
    return conn


# --- leadership ---------------------------------------------------------------------------

def get_leader(tx: Any, name: str) -> dict | None:
    row = _conn(tx).execute(
        "SELECT holder, incarnation, fence, expires_at FROM supervisor_leadership "
        "WHERE name = ?", (name,)).fetchone()
    if row is None:
        return None
    return dict(zip(("holder", "incarnation", "fence", "expires_at"), row, strict=True))


def put_leader(tx: Any, name: str, holder: str, incarnation: str | None, fence: int,
               expires_at: float) -> None:
    _conn(tx).execute(
        "INSERT INTO supervisor_leadership (name, holder, incarnation, fence, expires_at) "
        "VALUES (?, ?, ?, ?, ?) ON CONFLICT(name) DO UPDATE SET holder = excluded.holder, "
        "incarnation = excluded.incarnation, fence = excluded.fence, "
        "expires_at = excluded.expires_at", (name, holder, incarnation, fence, expires_at))


# --- the scans of a pass (ids, oldest first) ------------------------------------------------

def claimed_by_incarnation(tx: Any, token: str, limit: int) -> list[str]:
    rows = _conn(tx).execute(
        "SELECT id FROM handoffs INDEXED BY supervisor_by_incarnation "
        "WHERE state = 'claimed' AND owner_incarnation = ? LIMIT ?", (token, limit))
    return [r[0] for r in rows]


def stalled(tx: Any, now: float, limit: int) -> list[str]:
    rows = _conn(tx).execute(
        "SELECT id FROM handoffs INDEXED BY supervisor_by_progress_deadline "
        "WHERE state = 'claimed' AND progress_timeout_s IS NOT NULL "
        "AND last_progress_at + progress_timeout_s < ? LIMIT ?", (now, limit))
    return [r[0] for r in rows]


def over_wall_clock(tx: Any, now: float, limit: int) -> list[str]:
    rows = _conn(tx).execute(
        "SELECT id FROM handoffs INDEXED BY supervisor_by_wall_clock_deadline "
        "WHERE state IN ('claimed', 'released', 'orphaned') AND first_claimed_at IS NOT NULL "
        "AND first_claimed_at + json_extract(budget, '$.max_wall_clock_s') < ? LIMIT ?",
        (now, limit))
    return [r[0] for r in rows]
