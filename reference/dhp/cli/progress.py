"""Progress of long command-line work on stderr, so stdout keeps only the answer: on a
terminal one line redrawn in place (a bar when the total is known), otherwise (a log, a pipe)
a plain line every few seconds. Work that ends within DELAY_S prints nothing, and `quiet`
prints nothing at all."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, BinaryIO, TextIO

WIDTH = 24  # characters of the bar
LINE = 100  # a redrawn line is padded to this, so a shorter one hides the longer before it
DELAY_S = 0.5  # nothing is printed for work that ends sooner
EVERY_S = {True: 0.1, False: 5.0}  # between reports: on a terminal, in a log


class Progress:
    def __init__(self, prog: str, *, quiet: bool = False, stream: TextIO | None = None,
                 tty: bool | None = None):
        self.prog, self.quiet = prog, quiet
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.every = EVERY_S[self.tty]
        self.started = time.monotonic()
        self._next = self.started + DELAY_S
        self._drawn = False
        self._lock = threading.Lock()

    def step(self, done: float | None, total: float | None, label: str) -> None:
        """Report `done` of `total` if a report is due (None, None: only the time)."""
        now = time.monotonic()
        if self.quiet or now < self._next:
            return
        with self._lock:
            self._next = now + self.every
            share = f"{100 * done / total:.0f}%" if done is not None and total else ""
            elapsed = f"{now - self.started:.1f}s"
            if not self.tty:
                print(f"{self.prog}: {label} {share} ({elapsed})".replace("  ", " "),
                      file=self.stream, flush=True)
                return
            bar = ""
            if share:
                filled = int(WIDTH * min(done / total, 1))
                bar = f"[{'#' * filled}{'.' * (WIDTH - filled)}] {share} "
            line = f"{self.prog} {bar}{label} {elapsed}"
            self.stream.write("\r" + line[:LINE].ljust(LINE))
            self.stream.flush()
            self._drawn = True

    def close(self) -> None:
        """Clear a redrawn line (a plain log keeps its lines)."""
        with self._lock:
            if self._drawn:
                self.stream.write("\r" + " " * LINE + "\r")
                self.stream.flush()
                self._drawn = False

    def reading(self, f: BinaryIO, total: int, label: str) -> _Reading:
        """`f`, whose readline reports the bytes read so far against `total`."""
        return _Reading(f, total, label, self)

    @contextmanager
    def ticking(self, label: str) -> Iterator[None]:
        """Elapsed time while a block whose progress cannot be counted runs."""
        stop = threading.Event()

        def tick() -> None:
            while not stop.wait(min(max(self.every, 0.05), 0.5)):
                self.step(None, None, label)

        thread = threading.Thread(target=tick, daemon=True, name="progress")
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()
            self.close()


class _Reading:
    """A binary file read line by line (all that the log reader calls), with progress."""

    def __init__(self, f: BinaryIO, total: int, label: str, progress: Progress):
        self.f, self.total, self.label, self.progress = f, total, label, progress
        self.name: Any = getattr(f, "name", "<stream>")
        self.done = 0

    def readline(self, size: int = -1) -> bytes:
        line = self.f.readline(size)
        if line:
            self.done += len(line)
            self.progress.step(self.done, self.total, self.label)
        return line
