"""The process's background heartbeats: one schedule for every live `TaskContext`.

A claim used to start a thread of its own (0.2-0.4 ms per claim, more under contention).
Here one schedule (a heap of due times) serves every context, whatever its interval or store,
and its threads are reused from claim to claim.

Threads (leader/followers): one thread, the timer, sleeps until the next beat falls due. It
then hands the timing to another thread before it runs the beat, so that a beat blocked on
its store (a lock held elsewhere, an unreachable server) delays no other context's beats:
an idle spare takes over, and when there is none while other beats wait, a thread is
started. After its beat a thread becomes the timer if there is none, else an idle spare. So a
process holding one lease runs one thread; with more, two take turns; a thread is started
only while every existing one is inside a beat (beats that queue on a slow store), and a
spare ends after SPARE_IDLE_S unneeded, the last thread after IDLE_EXIT_S with nothing to
beat.
"""

from __future__ import annotations

import heapq
import itertools
import os
import sys
import threading
import time
from collections.abc import Callable

IDLE_EXIT_S = 30.0  # the timer ends after this long with nothing scheduled
SPARE_IDLE_S = 10.0  # a spare ends after this long unneeded (kept, it saves thread starts)
_COMPACT_MIN = 64  # cancelled entries tolerated in the heap before it is rebuilt


class Beat:
    """One context's place in the schedule: `fn` is called every `interval` seconds (from
    the end of the previous call) until it returns False, raises, or `cancel()` is called."""

    __slots__ = ("interval", "fn", "cancelled", "_schedule")

    def __init__(self, schedule: Schedule, interval: float, fn: Callable[[], bool]):
        self.interval = interval
        self.fn = fn
        self.cancelled = False
        self._schedule = schedule

    def cancel(self) -> None:
        """No more calls (one already running finishes). Takes no lock, so a signal handler
        may call it (a SIGTERM drain releasing leases) whatever the thread it interrupted
        holds; the entry leaves the heap when it comes due or when the heap is compacted."""
        if not self.cancelled:
            self.cancelled = True
            self._schedule._dead += 1  # a hint for compaction: a lost update costs nothing


class Schedule:
    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        """Empty, with no threads: at start, and in a forked child (the parent's threads
        and leases are not the child's)."""
        self._lock = threading.Lock()
        self._timer_wake = threading.Condition(self._lock)  # the timer: the heap changed
        self._spare_wake = threading.Condition(self._lock)  # a spare: the timing is free
        self._heap: list[tuple[float, int, Beat]] = []
        self._order = itertools.count()
        self._dead = 0  # cancelled entries still in the heap (an upper bound)
        self._timer = False  # a thread holds the timing
        self._spares = 0
        self.threads = 0  # serving now
        self.started = 0  # ever, in this process

    def every(self, interval: float, fn: Callable[[], bool]) -> Beat:
        """Call `fn` every `interval` seconds, first `interval` seconds from now."""
        beat = Beat(self, interval, fn)
        with self._lock:
            if self._dead > _COMPACT_MIN and 2 * self._dead > len(self._heap):
                # A claim-and-complete loop leaves an entry per claim: drop them now
                # rather than wake for each when it falls due.
                self._heap = [e for e in self._heap if not e[2].cancelled]
                heapq.heapify(self._heap)
                self._dead = 0
            self._push(beat)
            if not self._timer and not self._spares:
                self._start()  # none yet, or every thread is inside a beat
        return beat

    def _push(self, beat: Beat) -> None:
        heapq.heappush(self._heap, (time.monotonic() + beat.interval, next(self._order), beat))
        if self._heap[0][2] is beat:  # due before what the timer waits for: wake it
            self._timer_wake.notify()

    def _start(self) -> None:
        self.threads += 1
        self.started += 1
        threading.Thread(target=self._serve, name="dhp-heartbeat", daemon=True).start()

    def _serve(self) -> None:
        with self._lock:
            while True:
                if self._timer:
                    self._spares += 1
                    woken = self._spare_wake.wait(SPARE_IDLE_S)
                    self._spares -= 1
                    if not woken and self._timer:
                        break  # not needed for a while: one thread fewer
                    continue
                self._timer = True
                beat = self._next_due()
                self._timer = False
                if beat is None:
                    self._spare_wake.notify()  # ends too, after its own idle wait
                    break
                if self._spares:
                    self._spare_wake.notify()
                elif self._heap:
                    self._start()  # others wait while this thread beats
                self._lock.release()
                try:
                    again = self._call(beat)
                finally:
                    self._lock.acquire()
                if again and not beat.cancelled:
                    self._push(beat)
            self.threads -= 1

    def _next_due(self) -> Beat | None:
        """Wait (as the timer) for the next beat that falls due; None after IDLE_EXIT_S
        with nothing scheduled."""
        while True:
            heap = self._heap
            while heap and heap[0][2].cancelled:
                heapq.heappop(heap)
                self._dead = max(0, self._dead - 1)
            if not heap:
                if not self._timer_wake.wait(IDLE_EXIT_S) and not self._heap:
                    return None
                continue
            left = heap[0][0] - time.monotonic()
            if left <= 0:
                return heapq.heappop(heap)[2]
            self._timer_wake.wait(left)

    @staticmethod
    def _call(beat: Beat) -> bool:
        if beat.cancelled:
            return False
        try:
            return bool(beat.fn())
        except Exception:  # a bug, not a store error: report it as a dying thread would
            threading.excepthook(threading.ExceptHookArgs(
                (*sys.exc_info(), threading.current_thread())))
            return False


schedule = Schedule()
os.register_at_fork(after_in_child=schedule._reset)
