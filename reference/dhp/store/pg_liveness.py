"""Death detection across hosts (DHP-LSE-005, DHP-SRV-003): session advisory locks.

Each process incarnation (dhp.store.liveness.incarnation) that owns anything in a Postgres
database holds `pg_advisory_lock(key(incarnation))` on a connection of its own, from its first
claim until it exits. When the process dies its socket closes, the server ends the session and
the lock is free, so anyone on any host who can take the lock knows the owner is gone and may
recover its handoffs at once. A SIGSTOPped owner keeps its connection and its lock: it keeps
its lease until the TTL, and fencing refuses its late writes.

A host lost without a FIN (pulled cable, frozen VM): the server's TCP keepalives on that
session (postgres.SERVER_KEEPALIVES: idle 5 s, then 3 probes 1 s apart) end it and free the
lock after about 8 s; until then the lease (5 s by default) decides, as for a hung owner.

Even a clean death is seen a moment late: the server frees the lock when it has ended the
session, a few milliseconds after the kill (tens under load), so a recover made at once may
still be refused with `conflict`; the caller's next try takes it. (Waiting inside the take
instead would hold the row locked, and every refused recover of a live owner would stall
that owner's writes for as long.)

The lock's connection is watched by a daemon thread that pings it every second. If it breaks
(the server restarted, the session was terminated) the thread reconnects and takes the lock
again. In the gap the owner looks dead and its handoffs may be recovered: that is safe (its
writes are fenced out) and only costs that worker its lease.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import select
import threading
import time
from typing import Any

import psycopg

from dhp.core.errors import Unavailable
from dhp.store.liveness import _TOKEN, incarnation

PING_S = 1.0
RETRY_S = 0.2


def advisory_key(text: str) -> int:
    """A signed 64-bit advisory lock key for `text`, the same in every process and host."""
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big", signed=True)


def _key(token: str) -> int:
    return advisory_key(f"dhp liveness {token}")


def probe_sql(token_column: str) -> str:
    """SQL probing the liveness lock of the process named in `token_column`, as owner_dead
    does: true (the lock is then held to the end of the transaction) when the process is
    gone. The key is _key's, computed by the server: a store folds the probe into the
    statement that locks the row, and saves owner_dead a round trip."""
    key = (f"('x' || left(encode(sha256(convert_to('dhp liveness ' || {token_column}, "
           "'UTF8')), 'hex'), 16))::bit(64)::bigint")
    return f"pg_try_advisory_xact_lock({key})"


class ProcessLock:
    """This process's liveness lock in one database, kept by a watchdog thread."""

    def __init__(self, conninfo: str, kwargs: dict[str, Any]):
        self.conninfo = conninfo
        self.kwargs = kwargs
        self.conn: psycopg.Connection | None = None
        self.mutex = threading.Lock()
        self.watchdog: threading.Thread | None = None
        self.locked = 0  # how often the lock was taken: more than once after a lost session

    def hold(self) -> None:
        """Take the lock now unless held; start the watchdog once."""
        with self.mutex:
            if self.conn is None:
                self._lock()
            if self.watchdog is None:
                self.watchdog = threading.Thread(target=self._watch, daemon=True,
                                                 name="dhp-pg-liveness")
                self.watchdog.start()

    def _lock(self) -> None:
        try:
            conn = psycopg.connect(self.conninfo, **{
                **self.kwargs, "application_name": f"dhp-liveness {os.getpid()}"})
            conn.execute("SELECT pg_advisory_lock(%s)", (_key(incarnation()),))
        except psycopg.Error as exc:
            raise Unavailable(f"cannot take the liveness lock: {exc}".strip()) from None
        self.conn = conn
        self.locked += 1

    def _watch(self) -> None:
        while True:
            conn = self.conn
            if conn is not None:
                try:
                    # Wake at once when the server closes the socket, else ping every second.
                    select.select([conn.fileno()], [], [], PING_S)
                    conn.execute("SELECT 1")
                    continue
                except (psycopg.Error, OSError, ValueError):
                    with self.mutex:
                        self.conn = None
                    try:
                        conn.close()
                    except psycopg.Error:
                        pass
            time.sleep(RETRY_S)
            with self.mutex:
                if self.conn is None:
                    try:
                        self._lock()
                    except Unavailable:
                        continue


_locks: dict[str, ProcessLock] = {}
_locks_mutex = threading.Lock()


def process_lock(conninfo: str, kwargs: dict[str, Any]) -> ProcessLock:
    """The one ProcessLock of this process for a database (every store on it shares it)."""
    with _locks_mutex:
        if conninfo not in _locks:
            _locks[conninfo] = ProcessLock(conninfo, kwargs)
        return _locks[conninfo]


def _after_fork_in_child() -> None:
    # The child has its own incarnation and no watchdog; the parent's sessions stay the
    # parent's (psycopg does not close a connection inherited across fork).
    global _locks_mutex
    _locks_mutex = threading.Lock()
    _locks.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


class PgLiveness:
    """The liveness of one Postgres store: this process's lock, probes of other owners'."""

    def __init__(self, conninfo: str, kwargs: dict[str, Any], store: Any):
        self.conninfo = conninfo
        self.kwargs = kwargs
        self.store = store

    def token(self) -> str:
        """Hold this process's lock (once) and return the incarnation id that names it."""
        process_lock(self.conninfo, self.kwargs).hold()
        return incarnation()

    def for_session(self) -> PgSessionLock:
        """A lock of its own for one client session of this process (dhp-mcp's agents)."""
        return PgSessionLock(self)

    def owner_dead(self, token: str | None) -> bool:
        """True when the process named by `token` is certainly gone (its lock is free).

        The probe takes the lock for the rest of the caller's transaction only (or for the
        one statement outside a transaction); the dead owner's random key is never reused."""
        if token is None or not _TOKEN.match(token) or token == incarnation():
            return False
        probed = self.store.probed(token)
        if probed:
            return True
        if probed is False:  # the lock was held when this transaction locked the row
            return False
        with self.store.connection() as conn:
            return conn.execute("SELECT pg_try_advisory_xact_lock(%s)",
                                (_key(token),)).fetchone()[0]


class PgSessionLock:
    """The liveness lock of one client session of this process: its own random token and its
    own connection holding the token's advisory lock, taken at the session's first take.
    Closing it frees the lock, so every prober sees the session dead while the process lives
    on. Unlike the process lock it is not retaken after a lost connection: the session's
    leases may then be recovered, and fencing refuses its later writes."""

    def __init__(self, process: PgLiveness):
        self.process = process
        self.name = secrets.token_hex(16)
        self.conn: psycopg.Connection | None = None
        self.mutex = threading.Lock()

    def token(self) -> str:
        if self.conn is None:
            with self.mutex:
                if self.conn is None:
                    try:
                        conn = psycopg.connect(self.process.conninfo, **{
                            **self.process.kwargs,
                            "application_name": f"dhp-session {os.getpid()}"})
                        conn.execute("SELECT pg_advisory_lock(%s)", (_key(self.name),))
                    except psycopg.Error as exc:
                        raise Unavailable(f"cannot take the session's liveness lock: {exc}"
                                          .strip()) from None
                    self.conn = conn
        return self.name

    def owner_dead(self, token: str | None) -> bool:
        return token != self.name and self.process.owner_dead(token)

    def close(self) -> None:
        with self.mutex:
            if self.conn is not None:
                self.conn.close()
                self.conn = None
