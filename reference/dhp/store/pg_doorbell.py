"""Waking idle workers on Postgres without polling the store: LISTEN/NOTIFY.

A commit that leaves work takeable sends `pg_notify(channel, '')` inside its own transaction
(PostgresStore, Tx.mark_takeable), so the server delivers it exactly when the work becomes
visible, to every listening session of every host, and never for a rolled-back write.

Each process has one listening session (its own connection, not the pool's), run by a
daemon thread that starts with the first waiter. Each waiter holds a pipe; the thread writes
a byte to every waiter's pipe per notification, and a waiter blocks in select() on its pipe,
so a ring between a waiter's registration and its select() is kept until read. A ring of
this process alone (`ring_here`) writes the pipes directly, which a signal handler may do.

When the listening session breaks (server restart, network), the thread reconnects with a
growing pause and LISTENs again; the new session counts as a ring, since notifications sent
while nobody listened are lost: every waiter then reads the store once. The first session
counts as a ring too, for a waiter that registered before it listened. The periodic recheck
of claim_next (operations.IDLE_RECHECK_S) only bounds what a ring still misses.
"""

from __future__ import annotations

import hashlib
import os
import threading
from typing import Any

import psycopg
from psycopg import sql

from dhp.store.doorbell import wait_for_rings

# How long one wait for notifications lasts before the thread looks at its stop flag.
POLL_S = 1.0
# Pauses between attempts to listen again after the session broke: doubling, capped.
RECONNECT_FIRST_S, RECONNECT_MAX_S = 0.05, 2.0
_MAX_CHANNEL = 63  # bytes of an identifier (NAMEDATALEN - 1)


def channel_for(schema: str) -> str:
    """The channel of the store in `schema`: one per store, so stores sharing a database
    do not wake each other's workers."""
    name = f"dhp_work_{schema}"
    if len(name.encode()) <= _MAX_CHANNEL:
        return name
    return "dhp_work_" + hashlib.sha256(schema.encode()).hexdigest()[:32]


class PgDoorbell:
    """The listening session of one process for one store, and its waiters."""

    def __init__(self, conninfo: str, kwargs: dict[str, Any], channel: str):
        self.conninfo = conninfo
        self.kwargs = {**kwargs, "autocommit": True}
        self.channel = channel
        self._pid = -1
        self._reset()

    def _reset(self) -> None:
        # Also in a forked child: the parent's thread, lock state and pipes are not ours.
        self._lock = threading.RLock()  # re-entrant: a signal handler may ring mid-update
        self._pipes: set[int] = set()  # write ends of this process's waiters' pipes
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.backend_pid: int | None = None  # the listening session's server process
        self.sessions = 0  # how many sessions listened so far (reconnects + 1)

    def waiter(self) -> Waiter:
        return Waiter(self)

    def ring_here(self) -> None:
        """Wake every waiter of this process."""
        with self._lock:
            for fd in list(self._pipes):
                try:
                    os.write(fd, b"!")
                except (BlockingIOError, OSError):
                    pass  # full of earlier rings: it wakes anyway

    def close(self) -> None:
        if self._pid == os.getpid():
            self._stop.set()

    def _register(self, fd: int) -> None:
        with self._lock:
            if self._pid != os.getpid():
                self._reset()
                self._pid = os.getpid()
            self._pipes.add(fd)
            if self._thread is None or not self._thread.is_alive():
                self._stop.clear()
                self._thread = threading.Thread(target=self._listen, daemon=True,
                                                name=f"dhp-doorbell-{self.channel}")
                self._thread.start()

    def _unregister(self, fd: int) -> None:
        with self._lock:
            self._pipes.discard(fd)

    def _listen(self) -> None:
        pause = RECONNECT_FIRST_S
        listen = sql.SQL("LISTEN {}").format(sql.Identifier(self.channel))
        while not self._stop.is_set():
            try:
                with psycopg.connect(self.conninfo, **self.kwargs) as conn:
                    conn.execute(listen)
                    self.backend_pid = conn.info.backend_pid
                    self.sessions += 1
                    self.ring_here()  # anything sent while nobody listened: look once
                    pause = RECONNECT_FIRST_S
                    while not self._stop.is_set():
                        for _ in conn.notifies(timeout=POLL_S):
                            self.ring_here()
            except psycopg.Error:
                pass  # the session broke or could not start: listen again after a pause
            self._stop.wait(pause)
            pause = min(pause * 2, RECONNECT_MAX_S)


class Waiter:
    """`with doorbell.waiter() as wait: wait(seconds)`: one registration, many waits."""

    def __init__(self, bell: PgDoorbell):
        self.bell = bell
        self._read: int | None = None
        self._write: int | None = None

    def __enter__(self) -> Waiter:
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        os.set_blocking(self._write, False)
        self.bell._register(self._write)
        return self

    def __call__(self, seconds: float) -> bool:
        """Block until a ring or `seconds` pass; True when rung (the rings are consumed)."""
        if self._read is None:
            raise RuntimeError("Waiter used outside its with block")
        return wait_for_rings(self._read, seconds)

    def __exit__(self, *exc: object) -> None:
        if self._write is not None:
            self.bell._unregister(self._write)  # before closing: no ring hits a reused fd
            os.close(self._write)
            self._write = None
        if self._read is not None:
            os.close(self._read)
            self._read = None
