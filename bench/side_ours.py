"""Adapter for our reference implementation (`dhp`, this repository), default settings.

Only the public SDK of the contract is used for the measured work; setup helpers say so
where they reach below it.
"""

from __future__ import annotations

import dhp

sdk = dhp

NAME = "ours"
VERSION = getattr(dhp, "__version__", "?")
SUPERVISOR_NEEDED = False  # a recoverer takes a dead owner's lease itself (liveness lock)


def open_store(root: str):
    return sdk.Store(root)


def dispatch(store, task_kind: str, inputs: dict, output_schema: dict) -> str:
    return sdk.dispatch(store, task_kind=task_kind, inputs=inputs, output_schema=output_schema)


def claim(store, hid: str, worker_id: str, ttl: float | None = None):
    """A TaskContext; it heartbeats in the background from the claim on, and its `with`
    block releases the lease on the way out unless completed."""
    if ttl is None:
        return sdk.claim(store, hid, worker_id)
    return sdk.claim(store, hid, worker_id, ttl=ttl)


def try_recover(store, hid: str, worker_id: str):
    """The standby's poll: a TaskContext once the owner is dead or its lease expired."""
    try:
        return sdk.recover(store, hid, worker_id)
    except sdk.Conflict:
        return None  # owner alive and lease live, or another recoverer won


def checkpoint(ctx, state: dict) -> None:
    ctx.checkpoint(state)


def complete(ctx, result: dict) -> None:
    ctx.complete(result)


def last_checkpoint(store, hid: str):
    return sdk.last_checkpoint(store, hid)


def durability(store) -> str:
    # Introspection only (private): report what the store really runs with.
    backend = getattr(store, "backend", store)
    try:
        mode = backend._connection().execute("PRAGMA journal_mode").fetchone()[0]
        interval = backend.fsync_interval
    except Exception as exc:  # noqa: BLE001 - a report line, never fatal
        return f"unknown ({exc.__class__.__name__})"
    if not interval:
        return f"journal_mode={mode}; every write's WAL fsynced before it returns"
    return (f"journal_mode={mode}; claims/completions: WAL fsynced before they return; a "
            f"checkpoint too unless this process fsynced < {interval} s ago "
            f"(then it joins the next fsync); every write survives kill -9")


def supervisor_cmd(root: str) -> None:
    return None


def supervisor_pass(root: str):
    """Returns a callable running one supervisor pass (elect, then act as leader) over the
    store at `root`; its action lines are collected, not printed (stdout is ours)."""
    from dhp.supervisor import Supervisor

    sup = Supervisor(sdk.Store(root), "bench-sup", out=lambda line: None)
    return sup.run_pass


def plant_claim(store, hid: str, worker_id: str, ttl: float) -> None:
    """Setup only: a claim with no TaskContext, so 20,000 of them start no heartbeat threads.
    operations.take is the transaction the SDK's claim runs (same record, same liveness
    token of this process)."""
    from dhp.core import operations

    operations.take(store, hid, "claim", worker_id, ttl)


def begin_batch(store) -> None:
    """Setup only. Each SDK call is its own durable transaction; nothing to group."""


def end_batch(store) -> None:
    """Setup only; see begin_batch."""


def dispatch_many(store, task_kind: str, inputs: list[dict], output_schema: dict) -> None:
    """Setup: many handoffs in one transaction (dhp.dispatch_many)."""
    dhp.dispatch_many(store, [{"task_kind": task_kind, "inputs": i,
                               "output_schema": output_schema} for i in inputs])
