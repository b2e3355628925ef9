"""A pool's child learns that its parent died (kill -9, OOM), so it stops taking work.

Without this a child outlives a killed `dhp worker` parent, reparented to init, and goes on
taking work that nobody watches or restarts. Two ways, one signal: the child is sent
`signal_number` when the parent is gone.

- Linux: prctl(PR_SET_PDEATHSIG), through ctypes: the kernel sends the signal the moment the
  parent (the thread that forked, here the pool's main thread) exits.
- Elsewhere: the parent holds the write end of a pipe that only it keeps open; a daemon thread
  of the child blocks reading the other end, which reaches end-of-file when the parent is
  gone, and then signals its own process.

Either way the signal arrives in the child's main thread, where its handler decides.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys
import threading

PR_SET_PDEATHSIG = 1


def set_pdeathsig(signal_number: int) -> bool:
    """Ask the kernel to signal this process when its parent dies; False where it cannot."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, signal_number, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def die_with_parent(parent_pid: int, read_end: int, write_end: int,
                    signal_number: int = signal.SIGHUP) -> str:
    """In a freshly forked child: arrange for `signal_number` when the parent dies. Returns
    how ("pdeathsig" or "pipe"). Closes the child's copy of the write end either way, so
    that only the parent keeps the pipe open."""
    os.close(write_end)
    if set_pdeathsig(signal_number):
        os.close(read_end)
        how = "pdeathsig"
    else:
        threading.Thread(target=_watch, args=(read_end, signal_number), daemon=True,
                         name="dhp-parent-watch").start()
        how = "pipe"
    if os.getppid() != parent_pid:  # it died before we asked: nobody will signal now
        os.kill(os.getpid(), signal_number)
    return how


def _watch(read_end: int, signal_number: int) -> None:
    try:
        while os.read(read_end, 1):
            pass  # nobody writes: only end-of-file (the parent is gone) ends the read
    except OSError:
        pass
    os.kill(os.getpid(), signal_number)
