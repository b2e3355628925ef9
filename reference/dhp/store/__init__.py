"""`dhp.Store(...)`: open a store by location.

A folder path opens the embedded SQLite store. A `postgresql://` (or `postgres://`) URL opens
the server store in that database (dhp.store.postgres, the `postgres` extra). With
`create=True` (the SDK's default) a missing store is created: the folder, or the schema and
its tables. The command-line tools pass `create=False` unless told to create (`dhp init`,
`dispatch`, `import`, `--create`), so a mistyped location is `not_found`, never a new empty
store (docs/guide/cli.md, "Which commands create a store").
"""

from __future__ import annotations

import os
from collections.abc import Callable

from dhp.core.backend import DEFAULT_FSYNC_INTERVAL, DEFAULT_TTL, StoreBackend
from dhp.core.errors import InvalidInput
from dhp.core.limits import Limits
from dhp.core.operations import check_seconds
from dhp.store.missing import no_store
from dhp.store.sqlite import DB_FILE, SQLiteStore


def Store(location: str | os.PathLike, *, ttl: float = DEFAULT_TTL,  # noqa: N802 (a factory)
          heartbeat_interval: float | None = None,
          fsync_interval: float = DEFAULT_FSYNC_INTERVAL,
          clock: Callable[[], float] | None = None,
          limits: Limits | None = None, create: bool = True) -> StoreBackend:
    """Open the store at `location`: a folder for SQLite/WAL, or a URL
    `postgresql://user@host:port/db?schema=dhp` for Postgres (every libpq URL parameter works;
    `schema`, default `dhp`, names the schema holding the store).

    `ttl` is the default lease length in seconds (5.0) and `heartbeat_interval` the default
    time between background heartbeats (ttl / 3 when None); claims may override both.
    `fsync_interval` (0.1 s) is the longest a burst of checkpoints goes without an fsync:
    every write survives kill -9 of any process, and a power loss can forget at most the
    checkpoints acknowledged within one interval after the last fsync; 0 fsyncs every
    checkpoint. Claims, completions and the other ownership changes are always fsynced.
    On Postgres every acknowledged write but a heartbeat is flushed to the server's WAL
    before it returns (the server's group commit batches), so `fsync_interval` does not
    apply there.
    `limits` (dhp.Limits) are the sizes and nesting depth this store accepts (DHP-LIM-001;
    the defaults when None).
    `create` (default True) creates the store when there is none at `location`; with False
    a missing store is refused with `not_found` (NotFound) naming the location, and nothing
    is created. A Postgres schema that does not exist, or holds no DHP tables, is no store;
    a database is never created.
    `clock` replaces the store clock (seconds, monotonic), for tests only.
    """
    check_seconds("ttl", ttl)
    check_seconds("heartbeat_interval", heartbeat_interval, allow_none=True)
    if isinstance(fsync_interval, bool) or fsync_interval != 0:
        check_seconds("fsync_interval (or 0)", fsync_interval)
    if heartbeat_interval is not None and heartbeat_interval >= ttl:
        raise InvalidInput(f"heartbeat_interval {heartbeat_interval} must be shorter than the "
                           f"ttl {ttl}, or every lease would lapse between heartbeats")
    text = os.fspath(location)
    if text.startswith(("postgresql://", "postgres://")):
        try:
            from dhp.store.postgres import PostgresStore
        except ImportError as exc:
            raise InvalidInput(f"a postgresql:// store needs the postgres extra ({exc}): "
                               "install durable-handoff with it, e.g. pip install "
                               "'.[postgres]' in a clone") from None
        store = PostgresStore(text, ttl=ttl, heartbeat_interval=heartbeat_interval, clock=clock,
                              create=create)
        if limits is not None:
            store.limits = limits  # enforced in core, before anything is stored
        return store
    if "://" in text:
        raise InvalidInput(f"unknown store location {text!r}: give a folder path "
                           "(SQLite) or a postgresql:// URL")
    if not create and not os.path.isfile(os.path.join(text, DB_FILE)):
        raise no_store(text, f"no {DB_FILE} in it")
    return SQLiteStore(text, ttl=ttl, heartbeat_interval=heartbeat_interval,
                       fsync_interval=fsync_interval, clock=clock, limits=limits)
