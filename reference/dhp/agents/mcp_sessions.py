"""Agent sessions of the MCP server: whose leases are whose, kept alive while the client is
alive and made recoverable the moment it is gone (spec/mcp.md, DHP-MCP-006..008, 020..021).

An `AgentSession` is one MCP client session (the stdio connection, or one streamable-HTTP
session). It sees the server's one store through a liveness lock of its own
(`store.liveness.for_session()`, a flock file or a Postgres advisory lock), so every lease it
takes names that lock as its owner. Each lease is a `TaskContext`, which heartbeats in the
background while the session lives. When the session ends, it stops the heartbeats, orphans
its leases and drops the lock, so `recover` and even `claim_next` take them at once, not after
a TTL. If the whole server process dies, the kernel (or the database server) drops the lock
just the same.

Over HTTP the server cannot see a client process die, so `SessionTable` judges it
(DHP-MCP-020): a session is alive while one of its event streams is open; when its last
stream closes the session ends at once; a session with no stream ends after `agent_timeout`
seconds without a request.

A lease is found only by the token the agent presents, (handoff_id, worker_id, fence), within
its own session; a worker name alone is never looked up (DHP-MCP-005).
"""

from __future__ import annotations

import secrets
import threading
import time
from collections import Counter
from typing import Any

from dhp import api
from dhp.core import operations
from dhp.core.errors import DHPError

TAKES = ("claim", "claim_next", "recover")


def lease_of(ctx: api.TaskContext) -> dict:
    return {"handoff_id": ctx.handoff_id, "worker_id": ctx.worker_id, "fence": ctx.fence}


def _key(lease: dict) -> tuple[str, str, int]:
    return lease["handoff_id"], lease["worker_id"], lease["fence"]


class SessionStore:
    """The server's store as one session sees it: every call goes to the shared store, but
    `liveness` is the session's own lock, so the leases it takes name the session as owner
    (and the store's connections are shared, not opened per session)."""

    def __init__(self, store: Any):
        self._store = store
        self.liveness = store.liveness.for_session()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


class AgentSession:
    """One client session's view of the store, liveness lock and leases."""

    def __init__(self, store: Any, *, name: str = "stdio"):
        self.name = name
        self.store = SessionStore(store) if store.liveness is not None else store
        self._leases: dict[tuple[str, str, int], api.TaskContext] = {}
        self._mutex = threading.Lock()
        # Held through end(): a second caller (the stdio server's main thread, while the
        # hangup watcher's end runs) returns only once the session has ended, so the
        # process never exits in the middle of orphaning its leases.
        self._ending = threading.Lock()
        self.last_used = time.monotonic()
        self.ended = False

    def touch(self) -> None:
        self.last_used = time.monotonic()

    def hold(self, ctx: api.TaskContext) -> dict:
        """Keep a new lease (its TaskContext heartbeats it); returns its token."""
        with self._mutex:
            if self.ended:  # the session ended while the take ran: leave it for recovery
                ctx.abandon()
            else:
                self._leases[_key(lease_of(ctx))] = ctx
        return lease_of(ctx)

    def holds(self, lease: Any) -> bool:
        """Whether `lease` (not yet validated: any JSON) is a token this session holds."""
        try:
            key = _key(lease)
            with self._mutex:
                return key in self._leases
        except (KeyError, TypeError):
            return False

    def held(self) -> list[dict]:
        with self._mutex:
            return [lease_of(c) for c in self._leases.values() if c.active]

    def write(self, lease: dict, name: str, **kwargs: Any) -> Any:
        """A fenced write with the presented lease token. A lease this session holds goes
        through its TaskContext; any other token goes to the store's fenced write with this
        session's liveness token, which is what a stale or foreign token looks like to the
        store: it is refused with lease_lost and changes nothing."""
        with self._mutex:
            ctx = self._leases.get(_key(lease))
        if ctx is None:
            liveness = self.store.liveness
            return operations.write(
                self.store, lease["handoff_id"], name, lease["worker_id"], lease["fence"],
                incarnation=liveness.token() if liveness is not None else None, **kwargs)
        try:
            if name == "checkpoint":
                return ctx.checkpoint(kwargs["state"], kwargs.get("spend", 0))
            if name == "complete":
                return ctx.complete(kwargs["result"])
            if name == "release":
                return ctx.release(**kwargs)
            return ctx.heartbeat()
        finally:
            if not ctx.active:
                with self._mutex:
                    self._leases.pop(_key(lease), None)

    def end(self) -> list[str]:
        """The client is gone: stop heartbeating, drop the liveness lock, orphan what this
        session still held. Returns the ids of the orphaned handoffs. Idempotent: a call
        while another runs returns when that one is done."""
        with self._ending:
            return self._end()

    def _end(self) -> list[str]:
        with self._mutex:
            if self.ended:
                return []
            self.ended = True
            contexts = [c for c in self._leases.values() if c.active]
            self._leases.clear()
        for ctx in contexts:
            ctx.abandon()
        # Orphan first, then drop the lock: whoever sees this owner dead finds all of its
        # handoffs orphaned already (the session knows it is gone; no probe is needed).
        orphaned = []
        for ctx in contexts:
            try:
                if operations.simple(self.store, ctx.handoff_id, "orphan", owner_dead=True):
                    orphaned.append(ctx.handoff_id)
            except DHPError:
                pass  # completed, cancelled or taken over meanwhile: nothing to free
        if isinstance(self.store, SessionStore):
            self.store.liveness.close()
        return orphaned


class SessionTable:
    """The sessions of a server that serves many clients (streamable HTTP), by session key,
    on one shared store. A session ends when its client says goodbye (`end`), when its last
    event stream closes (`stream_closed`), or when it has no stream and made no request for
    `agent_timeout` seconds (`reap`)."""

    def __init__(self, store: Any, *, agent_timeout: float):
        self.store, self.agent_timeout = store, agent_timeout
        self._sessions: dict[str, AgentSession] = {}
        self._streams: Counter[str] = Counter()
        self._mutex = threading.Lock()

    def for_call(self, session_id: str | None, tool: str, arguments: Any) -> AgentSession:
        """The session a tool call belongs to: its MCP session's; without one (stateless
        HTTP) the session that holds the presented lease, a new session of its own for each
        take, and one shared session for everything else."""
        if session_id:
            return self.get(f"mcp:{session_id}")
        lease = arguments.get("lease") if isinstance(arguments, dict) else None
        with self._mutex:
            owner = next((s for s in self._sessions.values() if s.holds(lease)), None)
        if owner is not None:
            owner.touch()
            return owner
        return self.get(f"lease:{secrets.token_hex(8)}" if tool in TAKES else "stateless")

    def done_with(self, session: AgentSession) -> None:
        """After a call: a per-take session that holds nothing ends at once."""
        if session.name.startswith("lease:") and not session.held():
            self.end(session.name)

    def get(self, key: str) -> AgentSession:
        with self._mutex:
            session = self._sessions.get(key)
            if session is None or session.ended:
                session = self._sessions[key] = AgentSession(self.store, name=key)
            session.touch()
            return session

    def touch(self, key: str) -> None:
        with self._mutex:
            session = self._sessions.get(key)
        if session is not None:
            session.touch()

    def stream_opened(self, key: str) -> None:
        with self._mutex:
            self._streams[key] += 1

    def stream_closed(self, key: str) -> list[str]:
        """The client's event stream ended: with no other stream open, so has the session
        (a killed agent's connection closes; DHP-MCP-020)."""
        with self._mutex:
            self._streams[key] -= 1
            if self._streams[key] > 0:
                return []
            del self._streams[key]
        return self.end(key)

    def end(self, key: str) -> list[str]:
        with self._mutex:
            session = self._sessions.pop(key, None)
        return session.end() if session is not None else []

    def reap(self) -> list[str]:
        """End the sessions with no open stream and no request for agent_timeout."""
        cutoff = time.monotonic() - self.agent_timeout
        with self._mutex:
            idle = [k for k, s in self._sessions.items()
                    if s.last_used < cutoff and not self._streams.get(k)]
        return [hid for key in idle for hid in self.end(key)]

    def end_all(self) -> None:
        with self._mutex:
            keys = list(self._sessions)
        for key in keys:
            self.end(key)
