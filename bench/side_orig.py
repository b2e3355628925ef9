"""Adapter for the original third-party `dhp-protocol` 1.3.0, used with its default settings.

Imported only inside a child process started with the original's own interpreter
(tools/orig_venv.sh). Its documented recovery path: a supervisor (`dhp-supervisor ROOT ID
SECONDS`, default 2 s heartbeat x 3 missed = 6 s lease, 1 s scan) orphans an expired lease,
then a standby's `dhp.recover` succeeds.
"""

from __future__ import annotations

import os
import sys

import dhp
from dhp.config import DHPConfig
from dhp.errors import DHPError

NAME = "orig"
VERSION = dhp.__version__
SUPERVISOR_NEEDED = True


def open_store(root: str):
    return dhp.Store(root)


def dispatch(store, task_kind: str, inputs: dict, output_schema: dict) -> str:
    return dhp.dispatch(store, task_kind=task_kind, inputs=inputs, output_schema=output_schema)


def claim(store, hid: str, worker_id: str, ttl: float | None = None):
    """A TaskContext; enter it (`with`) for the background heartbeat, as its docs show."""
    if ttl is None:
        return dhp.claim(store, hid, worker_id)
    # Its lease is heartbeat interval x missed beats; used only to plant expiring leases.
    cfg = DHPConfig(lease_interval_s=ttl / 2, lease_max_missed=2)
    return dhp.claim(store, hid, worker_id, cfg=cfg)


def try_recover(store, hid: str, worker_id: str):
    """The standby's poll: a TaskContext once the supervisor has orphaned it, else None."""
    try:
        return dhp.recover(store, hid, worker_id)
    except DHPError:
        return None  # not orphaned yet, or another recoverer won


def checkpoint(ctx, state: dict) -> None:
    ctx.checkpoint(state)


def complete(ctx, result: dict) -> None:
    ctx.complete(result)


def last_checkpoint(store, hid: str):
    return dhp.last_checkpoint(store, hid)


def durability(store) -> str:
    level = store.cx.execute("PRAGMA synchronous").fetchone()[0]
    mode = store.cx.execute("PRAGMA journal_mode").fetchone()[0]
    return f"journal_mode={mode} synchronous={['OFF', 'NORMAL', 'FULL', 'EXTRA'][level]}"


def supervisor_cmd(root: str) -> list[str]:
    """Its CLI supervisor with default intervals (for the failover benchmark)."""
    exe = os.path.join(os.path.dirname(sys.executable), "dhp-supervisor")
    return [exe, root, "bench-sup", "3600"]


def plant_claim(store, hid: str, worker_id: str, ttl: float) -> None:
    """Setup only: a claim left without heartbeats (its TaskContext beats only inside `with`)."""
    claim(store, hid, worker_id, ttl=ttl)


def begin_batch(store) -> None:
    """Setup only: group many writes in one transaction (its connection is autocommit)."""
    store.cx.execute("BEGIN")


def end_batch(store) -> None:
    store.cx.execute("COMMIT")


def supervisor_pass(root: str):
    """Returns a callable running one supervisor pass (the leader's scan)."""
    sup = dhp.Supervisor3(root, supervisor_id="bench-sup")
    return sup.scan
