"""Waking idle workers on one host without polling the store: a doorbell of named FIFOs.

A waiter (claim_next with `wait`) makes a FIFO in `<store>/wake/` and blocks in select() on
it. Whoever commits work that may be takeable (dispatch, release, orphan, requeue, import;
SQLiteStore.announce_work) writes one byte to every FIFO there, which wakes every waiter of
every process at once; each then looks at the store once. A FIFO keeps the byte until it is
read, so an announcement between a waiter's registration and its select() is never lost.

The waiter holds its FIFO open for reading and writing (Linux allows O_RDWR on a FIFO), so it
never sees end-of-file, and a writer's non-blocking open fails with ENXIO only when the
waiter's process is gone: the writer then removes the stale FIFO. A ring costs a directory
listing, plus an open and a write per waiter.
"""

from __future__ import annotations

import errno
import itertools
import os
import select
import threading
import time
from pathlib import Path

FOLDER = "wake"
_names = itertools.count()


# A folder found without waiters is not listed again while its mtime stays what it was then
# (folder -> st_mtime_ns). A waiter's FIFO changes the mtime when it is made and when it is
# renamed, so a waiter that registered later is always listed. Kept only when the listing ran
# long enough after that mtime: a file system stamps times in steps (the kernel's clock tick
# where times carry nanoseconds; whole seconds, or 2 s on FAT, where they do not), and an
# entry made within the step of the mtime seen would not change it.
_quiet: dict[str, int] = {}
QUIET_AFTER_NS = 5_000_000_000  # file systems with times in whole seconds
QUIET_AFTER_FINE_NS = 50_000_000  # with nanoseconds: several clock ticks


def ring(folder: str | Path) -> int:
    """Wake every waiter in `folder`; returns how many were rung."""
    key = os.fspath(folder)
    try:
        mtime = os.stat(key).st_mtime_ns
        if _quiet.get(key) == mtime:
            return 0
        listed_at = time.time_ns()
        entries = list(os.scandir(key))
    except FileNotFoundError:
        return 0
    step = QUIET_AFTER_FINE_NS if mtime % 1_000_000_000 else QUIET_AFTER_NS
    if not entries and listed_at - mtime > step:
        _quiet[key] = mtime
    rung = 0
    for entry in entries:
        if entry.name.startswith("."):
            continue  # a waiter's draft, not yet listening
        try:
            fd = os.open(entry.path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # nobody reads it: its process died
                _unlink(entry.path)
            continue
        try:
            os.write(fd, b"!")
            rung += 1
        except BlockingIOError:
            rung += 1  # full of earlier rings: the waiter will wake anyway
        finally:
            os.close(fd)
    return rung


class Waiter:
    """`with Waiter(folder) as wait: wait(seconds)`: one registration, many waits."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self._fd: int | None = None
        self._path: Path | None = None

    def __enter__(self) -> Waiter:
        self.folder.mkdir(exist_ok=True)
        name = f"{os.getpid()}-{threading.get_ident()}-{next(_names)}"
        draft = self.folder / f".{name}"
        os.mkfifo(draft, 0o600)
        try:
            # Open before the FIFO gets its ringable name, so a ringer never takes it for a
            # dead waiter's.
            self._fd = os.open(draft, os.O_RDWR | os.O_NONBLOCK)
            self._path = self.folder / name
            os.rename(draft, self._path)
        except BaseException:
            _unlink(draft)
            self.__exit__()
            raise
        return self

    def __call__(self, seconds: float) -> bool:
        """Block until a ring or `seconds` pass; True when rung (the rings are consumed)."""
        if self._fd is None:
            raise RuntimeError("Waiter used outside its with block")
        return wait_for_rings(self._fd, seconds)

    def __exit__(self, *exc: object) -> None:
        if self._path is not None:
            _unlink(self._path)
            self._path = None
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def wait_for_rings(fd: int, seconds: float) -> bool:
    """Block until non-blocking `fd` has bytes or `seconds` pass; True when it had, all read
    (however many rings came, one look at the store serves them all)."""
    ready, _, _ = select.select([fd], [], [], max(0.0, seconds))
    if not ready:
        return False
    try:
        while os.read(fd, 4096):
            pass
    except BlockingIOError:
        pass
    return True


def _unlink(path: str | os.PathLike) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
