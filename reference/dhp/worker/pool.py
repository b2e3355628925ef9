"""`dhp worker`: a pool of worker processes over one store, each running up to `units`
handoffs at once (dhp.worker.slots).

The parent forks `concurrency` children and watches them. When a child dies (kill -9, OOM)
the parent rings the store's doorbell, so an idle sibling looks at once and claim_next takes
the dead child's handoffs (its liveness lock is free, DHP-SCH-005) from their last
checkpoints; then the parent starts a new child. No supervisor is involved.

When the parent itself dies (kill -9), each child is told at once (dhp.worker.parent_watch):
it takes nothing more, gives back what it runs, and exits, so no worker goes on unwatched.

`--threads` (from before units): `concurrency` units in the pool's own process, no child.
A kill -9 then takes the whole pool, and another pool or worker recovers its work.

SIGTERM or SIGINT drains: nothing new is taken, running functions get `grace` seconds to
finish, then async ones are cancelled and every handoff still held is released (no backoff)
for another worker.
"""

from __future__ import annotations

import importlib
import os
import signal
import socket
import sys
import threading
import time
from typing import Any, TextIO

from dhp.core.backend import StoreBackend
from dhp.core.errors import InvalidInput
from dhp.observe import otel_env
from dhp.worker import parent_watch
from dhp.worker.runtime import EXIT_FAILED, EXIT_OK, EXIT_UNAVAILABLE, EXIT_USAGE, log_line
from dhp.worker.slots import DEFAULT_UNITS, Slots
from dhp.worker.task import REGISTRY, Task

# A child that ends by itself sooner than this after its start is failing at start-up; the
# pool waits this long before it starts another (no tight restart loop).
RESTART_AFTER_S = 1.0


def load_tasks(spec: str, kinds: list[str] | None = None) -> dict[str, Task]:
    """The tasks named by MODULE[:ATTR]: ATTR is a task or a list of tasks; without it,
    every task registered once the module is imported. `kinds` keeps only those."""
    module_name, _, attr = spec.partition(":")
    if not module_name:
        raise InvalidInput(f"give the worker MODULE[:ATTR], not {spec!r}")
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # `dhp worker tasks` finds ./tasks.py, like python -m
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise InvalidInput(f"cannot import {module_name!r}: {exc}") from None
    if attr:
        try:
            found: Any = getattr(module, attr)
        except AttributeError:
            raise InvalidInput(f"module {module_name!r} has no attribute {attr!r}") from None
        listed = [found] if isinstance(found, Task) else list(found) \
            if isinstance(found, (list, tuple)) else None
        if listed is None or not all(isinstance(t, Task) for t in listed):
            raise InvalidInput(f"{spec} is not a @dhp.task (or a list of them): {found!r}")
        tasks = {t.kind: t for t in listed}
    else:
        tasks = dict(REGISTRY)
    if not tasks:
        raise InvalidInput(f"{spec} registers no task: decorate a function with @dhp.task")
    if kinds:
        unknown = [k for k in kinds if k not in tasks]
        if unknown:
            raise InvalidInput(f"no task of kind {', '.join(map(repr, unknown))} in {spec}; "
                               f"it has {', '.join(map(repr, tasks))}")
        tasks = {k: tasks[k] for k in kinds}
    return tasks


class Pool:
    def __init__(self, store: StoreBackend, tasks: dict[str, Task], *, concurrency: int,
                 units: int = DEFAULT_UNITS, threads: bool = False, grace: float = 30.0,
                 ttl: float | None = None, out: TextIO = sys.stderr):
        for name, value in (("concurrency", concurrency), ("units", units)):
            if value < 1:
                raise InvalidInput(f"{name} must be at least 1, not {value}")
        self.store = store
        self.tasks = tasks
        # --threads (kept from before units): `concurrency` units in this one process.
        self.concurrency = 1 if threads else concurrency
        self.units = concurrency if threads else units
        self.threads = threads
        self.grace = grace
        self.ttl = ttl
        self.out = out
        self.stop = threading.Event()
        self.name = f"pool-{socket.gethostname()}-{os.getpid()}"
        self.children: dict[int, tuple[int, float]] = {}  # pid -> (slot, started at)
        self._parent_pipe: tuple[int, int] | None = None  # read, write (parent_watch)
        self._slots: Slots | None = None  # the units run here (--threads)
        self._first_signal: float | None = None

    def log(self, event: str, text: str) -> None:
        log_line(self.out, self.name, event, text)

    def run(self) -> int:
        kinds = ", ".join(self.tasks)
        how = "in this process" if self.threads else \
            f"in each of {self.concurrency} process(es)"
        self._on_stop_signals()  # before the start line: from then on SIGTERM drains
        self.log("start", f"{self.units} unit(s) at once {how} for {kinds} on {self.store!r}")
        code = self._run_here() if self.threads else self._run_processes()
        self.log("stop", f"exit {code}")
        return code

    # --- units in this process (--threads) -----------------------------------------------

    def _run_here(self) -> int:
        self._slots = self._make_slots()
        return self._finish(self._slots, self._slots.run())

    def _make_slots(self) -> Slots:
        return Slots(self.store, self.tasks, units=self.units, stop=self.stop, out=self.out,
                     ttl=self.ttl)

    def _finish(self, slots: Slots, code: int) -> int:
        """Drain after the taker stopped: the grace time when told to stop, none after a
        failure of the store."""
        released = slots.finish(self.grace if self.stop.is_set() else 0.0)
        if released:
            self.log("drain", f"grace of {self.grace}s over: released {released} handoff(s)")
        return code

    # --- processes -----------------------------------------------------------------------

    def _run_processes(self) -> int:
        children = self.children
        self._parent_pipe = os.pipe()  # its write end open only here: closed at our death
        for slot in range(1, self.concurrency + 1):
            self._start(children, slot)
        failed = None
        while children:
            try:
                pid, status = os.waitpid(-1, 0)
            except ChildProcessError:
                break
            slot, started = children.pop(pid)
            if self.stop.is_set():
                continue
            code = os.waitstatus_to_exitcode(status)
            how = f"signal {-code}" if code < 0 else f"exit {code}"
            self.log("died", f"worker {slot} (pid {pid}) ended by {how}")
            self.store.announce_work()  # its siblings take its handoffs now
            quick = time.monotonic() - started < RESTART_AFTER_S
            if quick and code > 0:  # it failed by itself at start: stop rather than loop
                failed = code if code in (EXIT_USAGE, EXIT_UNAVAILABLE) else EXIT_FAILED
                self.stop.set()
                self._forward()
                continue
            if quick:
                time.sleep(RESTART_AFTER_S)
            if not self.stop.is_set():
                pid = self._start(children, slot)
                self.log("restart", f"worker {slot} as pid {pid}")
        return EXIT_OK if failed is None else failed

    def _start(self, children: dict[int, tuple[int, float]], slot: int) -> int:
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:  # the child: its units, then leave without the parent's cleanup
            code = EXIT_FAILED
            try:
                code = self._child(parent)
            finally:
                otel_env.flush()  # os._exit skips the SDK's own flush at exit
                os._exit(code)
        children[pid] = (slot, time.monotonic())
        return pid

    def _child(self, parent: int) -> int:
        slots = self._make_slots()
        first_signal: list[float] = []

        def on_term(signum: int, frame: Any) -> None:
            # Ctrl-C reaches the parent and every child, and the parent forwards it: one
            # drain. A signal a second later or more means "now".
            if first_signal and time.monotonic() - first_signal[0] < 1.0:
                return
            again = bool(first_signal)
            first_signal.append(time.monotonic())
            self.stop.set()
            slots.wake()
            if again or self.grace <= 0:
                slots.hurry()

        def on_parent_gone(signum: int, frame: Any) -> None:
            # Nobody watches or restarts this worker now: take nothing more, give back the
            # running handoffs at once (no grace: the pool that granted them is gone), exit.
            self.stop.set()
            slots.wake()
            slots.hurry()

        signal.signal(signal.SIGTERM, on_term)
        signal.signal(signal.SIGINT, on_term)
        signal.signal(signal.SIGHUP, on_parent_gone)
        parent_watch.die_with_parent(parent, *self._parent_pipe, signal.SIGHUP)
        try:
            return self._finish(slots, slots.run())
        finally:
            self.store.close()
            if self.store.liveness is not None:
                self.store.liveness.close()

    # --- signals -------------------------------------------------------------------------

    def _on_stop_signals(self) -> None:
        def handler(signum: int, frame: Any) -> None:
            if not self.stop.is_set():
                self.log("draining", f"{signal.Signals(signum).name}: finishing or "
                                     f"releasing running work (grace {self.grace}s)")
            again = self._first_signal is not None
            if not again:
                self._first_signal = time.monotonic()
            self.stop.set()
            self._forward()
            if self._slots is not None:
                self._slots.wake()
                if again and time.monotonic() - self._first_signal >= 1.0:
                    self._slots.hurry()  # a second signal: now

        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)

    def _forward(self) -> None:
        for pid in list(self.children):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
