"""Making SQLite's WAL durable, one fsync shared by the processes of a host (group commit).

The SQLite store commits at `synchronous=NORMAL` and then asks `WalSync.sync()` to make the
commit durable before it acknowledges it (DHP-CKP-011). An fdatasync of the WAL makes durable
every write to it issued before the fdatasync started, by any process through any fd. So a
process whose commit returned before another process's fsync started need not fsync itself:
it waits for that fsync and is done.

The processes meet in a small file beside the database (`wal-sync`): under an exclusive flock
of it, a process reads when the last completed fsync started (host_monotonic(), one clock for
every process of the host, that never goes back). If that is later than its own commit, its
commit is covered; otherwise it fsyncs the WAL itself, holding the flock (the others queue
behind it and are covered by its fsync if they committed before it started), and records
when its fsync started. Frames that a later writer overwrites after a WAL checkpoint are no
loss: at synchronous=NORMAL SQLite fsyncs the WAL before a checkpoint and the database after
it, and restarts the WAL only after a complete one.

A process shares only while its fsyncs are slow (SHARE_ABOVE_S), and waits for another's fsync at
most SYNC_WAIT_S, then fsyncs on its own, so a holder that is stopped (SIGSTOP, a debugger)
or stuck cannot stall the others. Where the file cannot
be opened or locked, every sync is a plain fsync of the process's own.
"""

from __future__ import annotations

import fcntl
import math
import mmap
import os
import struct
import time

from dhp.core.clock import boot_id, host_monotonic

SYNC_FILE = "wal-sync"

# The longest a commit waits for another process's fsync before it fsyncs on its own: several
# fsyncs of a slow disk.
SYNC_WAIT_S = 0.05

# Sharing pays where a flush is slow. Where this process's fsyncs take less than this (a disk
# with a write cache, NVMe), concurrent fsyncs proceed side by side in the kernel, and queueing
# them behind one lock would only cost (bench/group_commit.py measures both).
SHARE_ABOVE_S = 0.001

# The record: host_monotonic() at the start of the last completed fsync of the WAL, and the
# boot it was taken in (the clock restarts at a reboot; the file stays).
_RECORD = struct.Struct("=d40s")

# What SQLite itself syncs a WAL with: the data, and the size when it grew, not the times.
_fdatasync = getattr(os, "fdatasync", os.fsync)
_pause = time.sleep  # (a test replaces it to see that a commit waits for the flock)


def boot_tag() -> bytes:
    """This boot's id as the record holds it."""
    return _RECORD.pack(0.0, boot_id().encode("ascii", "replace"))[8:]


def mapped(fd: int) -> mmap.mmap:
    """The record of the sync file `fd`, mapped: read and written without a system call (the
    file is extended with zeros, no record, when it is shorter)."""
    if os.fstat(fd).st_size < _RECORD.size:
        os.ftruncate(fd, _RECORD.size)  # only ever to this size: a record is never cut
    return mmap.mmap(fd, _RECORD.size)


def read_record(view: mmap.mmap, boot: bytes) -> float:
    """The start of the last completed fsync recorded in the sync file, or -inf when there is
    none (a new file), it was taken in another boot, or it cannot be one (in the future)."""
    started, recorded_boot = _RECORD.unpack_from(view, 0)
    if recorded_boot != boot or not started <= host_monotonic():  # NaN fails too
        return -math.inf
    return started


def write_record(view: mmap.mmap, started: float, boot: bytes) -> None:
    _RECORD.pack_into(view, 0, started, boot)


def _lock_within(fd: int, seconds: float) -> bool:
    """An exclusive flock of `fd`, polled (flock has no timeout) until `seconds` pass;
    False then. OSError other than "held by another" is raised."""
    deadline = host_monotonic() + seconds
    pause = 20e-6  # an fsync takes a few hundred microseconds on a fast disk: a waiter
    while True:  # that sleeps longer than that only adds to its commit's latency
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if host_monotonic() >= deadline:
                return False
        _pause(pause)
        pause = min(2 * pause, 200e-6)


class WalSync:
    """The syncs of one store's WAL by one process (a child process makes its own: an flock
    belongs to the open file, so one inherited across fork would not exclude the parent)."""

    def __init__(self, wal: str):
        self.wal = wal
        self.fsyncs = 0  # fsyncs of the WAL this process made
        self.shared = 0  # syncs another process's fsync covered
        self._wal_fd: int | None = None
        self._sync_fd: int | None = None
        self._record: mmap.mmap | None = None  # the sync file's record, mapped
        self._no_sync_file = False  # it could not be opened or locked here: plain fsyncs
        self._boot = boot_tag()
        self._fsync_s: float | None = None  # how long this process's fsyncs take (moving mean)

    def sync(self, share: bool = True) -> None:
        """Return once every commit this process made to the WAL so far is durable; call it
        after the commit returned. `share=False` always fsyncs (for a benchmark).
        Raises OSError when the fsync fails."""
        committed = host_monotonic()
        if self._wal_fd is None:  # kept while the connection lives: SQLite neither removes
            # nor replaces the WAL file while a connection has the store open
            self._wal_fd = os.open(self.wal, os.O_RDONLY | os.O_CLOEXEC)
        slow = self._fsync_s is None or self._fsync_s >= SHARE_ABOVE_S
        sync_fd = self._sync_file() if share and slow else None
        if sync_fd is not None and self._lead_or_follow(sync_fd, committed):
            return
        self._fsync()

    def _fsync(self) -> float:
        """fsync the WAL; returns when the fsync started."""
        started = host_monotonic()
        _fdatasync(self._wal_fd)
        took = host_monotonic() - started
        self._fsync_s = took if self._fsync_s is None else 0.8 * self._fsync_s + 0.2 * took
        self.fsyncs += 1
        return started

    def _lead_or_follow(self, sync_fd: int, committed: float) -> bool:
        """Under the sync file's flock: done (a later fsync covered us) or fsync and record
        when it started. False when the flock is not to be had: fsync without it."""
        try:
            if not _lock_within(sync_fd, SYNC_WAIT_S):
                return False  # the holder is stopped or slow
        except OSError:
            self._no_sync_file = True  # e.g. ENOLCK: no sharing here
            self._close_sync_file()
            return False
        try:
            if read_record(self._record, self._boot) > committed:
                self.shared += 1
                return True
            write_record(self._record, self._fsync(), self._boot)
            return True
        finally:
            fcntl.flock(sync_fd, fcntl.LOCK_UN)

    def _sync_file(self) -> int | None:
        """This process's fd of the sync file beside the WAL (made on first use with the
        database file's permissions), or None where it cannot be opened."""
        if self._sync_fd is None and not self._no_sync_file:
            db = self.wal.removesuffix("-wal")
            try:
                mode = os.stat(db).st_mode & 0o666
                self._sync_fd = os.open(os.path.join(os.path.dirname(db), SYNC_FILE),
                                        os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW,
                                        mode)
                self._record = mapped(self._sync_fd)
            except (OSError, ValueError):  # a read-only folder, a foreign file, a folder by
                self._no_sync_file = True  # that name, a file system without mmap ...
                self._close_sync_file()
        return self._sync_fd

    def _close_sync_file(self) -> None:
        if self._record is not None:
            self._record.close()
            self._record = None
        if self._sync_fd is not None:
            os.close(self._sync_fd)
            self._sync_fd = None

    def close(self) -> None:
        if self._wal_fd is not None:
            os.close(self._wal_fd)
            self._wal_fd = None
        self._close_sync_file()
