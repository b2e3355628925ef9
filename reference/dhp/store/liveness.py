"""Death detection faster than a lease (DHP-LSE-005), for stores on one host.

Each process incarnation holds an exclusive `flock` on `<store>/liveness/<incarnation>.lock`
for as long as it lives. The kernel drops the lock the moment the process dies (kill -9, OOM),
so whoever can take it knows the owner is gone and may recover its handoffs without waiting
for the lease to expire. Fencing keeps this safe if the signal were ever wrong.

The incarnation is a fresh random id per process (re-drawn in a forked child), so a worker id
reused by a restarted process never looks alive on behalf of its predecessor. A process that
serves several clients (the MCP server) gives each client session a lock of its own
(`Liveness.for_session`): closing it makes that session's leases recoverable while the
process lives on.
"""

from __future__ import annotations

import atexit
import fcntl
import os
import re
import secrets
import threading
from pathlib import Path

_TOKEN = re.compile(r"^[0-9a-f]{32}$")
_incarnation: str | None = None
_instances: dict[Path, Liveness] = {}
_instances_mutex = threading.Lock()


def incarnation() -> str:
    """This process's incarnation id."""
    global _incarnation
    if _incarnation is None:
        _incarnation = secrets.token_hex(16)
    return _incarnation


def for_folder(folder: str | os.PathLike) -> Liveness:
    """The one Liveness of this process for a folder (several Store objects may share it)."""
    key = Path(folder).resolve()
    with _instances_mutex:
        if key not in _instances:
            _instances[key] = Liveness(key)
        return _instances[key]


class Liveness:
    """The liveness lock of this process (or of one of its sessions, when `name` is given) in
    one store folder, and probes of other owners'."""

    def __init__(self, folder: Path, name: str | None = None):
        self.folder = Path(folder)
        self._name = name
        self._fd: int | None = None
        self._path: Path | None = None
        self._mutex = threading.Lock()

    def token(self) -> str:
        """Take this lock (once) and return the incarnation id that names it."""
        name = self._name or incarnation()
        if self._fd is not None:  # taken already (every write asks): no mutex needed
            return name
        with self._mutex:
            if self._fd is None:
                self.folder.mkdir(parents=True, exist_ok=True)
                path = self.folder / f"{name}.lock"
                # Lock a private file first and only then give it its probe-able name, so a
                # prober never sees this process's lock file unlocked and thinks it dead.
                draft = self.folder / f".{name}.draft"
                fd = os.open(draft, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                os.write(fd, f"{os.getpid()}\n".encode())
                os.rename(draft, path)
                self._fd, self._path = fd, path
            return name

    def for_session(self) -> Liveness:
        """A lock of its own for one client session of this process (dhp-mcp's agents): a
        fresh token; flock locks of separate open files exclude each other even within one
        process, so probes see the session dead once it is closed."""
        return Liveness(self.folder, name=secrets.token_hex(16))

    def owner_dead(self, token: str | None) -> bool:
        """True when the process named by `token` is certainly gone (its lock can be taken).

        Unknown owners (no token, e.g. a handoff claimed through a backend without liveness
        locks) count as alive: only the lease decides for them.
        """
        if token is None or not _TOKEN.match(token) or token == _incarnation:
            return False
        path = self.folder / f"{token}.lock"
        try:
            fd = os.open(path, os.O_RDWR)
        except FileNotFoundError:
            return True  # an earlier probe found it dead and removed the file
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            # Dead: remove the stale file while we hold its lock, so it does not pile up.
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            return True
        finally:
            os.close(fd)

    def close(self) -> None:
        """Drop the lock and its file (the process no longer owns anything here)."""
        with self._mutex:
            if self._fd is not None:
                if self._path is not None:
                    try:
                        os.unlink(self._path)
                    except FileNotFoundError:
                        pass
                os.close(self._fd)
                self._fd = self._path = None

    def _forget_after_fork(self) -> None:
        # The child shares the parent's open file description; closing our copy keeps the
        # parent's lock (flock is dropped only when every copy is closed), and the child
        # takes its own lock under its own incarnation when it first claims.
        if self._fd is not None:
            os.close(self._fd)
        self._fd = self._path = None
        self._mutex = threading.Lock()


def _after_fork_in_child() -> None:
    global _incarnation, _instances_mutex
    _incarnation = None
    _instances_mutex = threading.Lock()
    for instance in _instances.values():
        instance._forget_after_fork()


def _at_exit() -> None:
    for instance in list(_instances.values()):
        instance.close()


os.register_at_fork(after_in_child=_after_fork_in_child)
atexit.register(_at_exit)
