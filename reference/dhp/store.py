"""`dhp.Store(...)`: open a store by location.

A folder path opens (and on first use creates) the embedded SQLite store. A `postgresql://`
URL names the Postgres backend, which is not part of this release yet.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from .backend import DEFAULT_TTL, StoreBackend
from .errors import InvalidInput
from .operations import check_seconds
from .sqlite_store import SQLiteStore


def Store(location: str | os.PathLike, *, ttl: float = DEFAULT_TTL,  # noqa: N802 (a factory)
          heartbeat_interval: float | None = None,
          clock: Callable[[], float] | None = None) -> StoreBackend:
    """Open the store at `location` (a folder for SQLite/WAL).

    `ttl` is the default lease length in seconds (5.0) and `heartbeat_interval` the default
    time between background heartbeats (ttl / 3 when None); claims may override both.
    `clock` replaces the store clock (seconds, monotonic), for tests only.
    """
    check_seconds("ttl", ttl)
    check_seconds("heartbeat_interval", heartbeat_interval, allow_none=True)
    if heartbeat_interval is not None and heartbeat_interval >= ttl:
        raise InvalidInput(f"heartbeat_interval {heartbeat_interval} must be shorter than the "
                           f"ttl {ttl}, or every lease would lapse between heartbeats")
    text = os.fspath(location)
    if text.startswith(("postgresql://", "postgres://")):
        raise InvalidInput("the Postgres backend is not in this release of durable-handoff "
                           "yet; use a folder path for the embedded SQLite store")
    if "://" in text:
        raise InvalidInput(f"unknown store location {text!r}: give a folder path "
                           "(SQLite) or a postgresql:// URL")
    return SQLiteStore(text, ttl=ttl, heartbeat_interval=heartbeat_interval, clock=clock)
