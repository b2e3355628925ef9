"""Progress of a long kit run on stderr, so stdout keeps only the summary: on a terminal a
bar redrawn in place, otherwise (CI logs, pipes) one plain line per step."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TextIO

BAR = 24


class Progress:
    def __init__(self, prog: str, stream: TextIO | None = None, tty: bool | None = None):
        self.prog = prog
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.started = time.monotonic()
        self._drawn = False
        self._lock = threading.Lock()

    def elapsed(self) -> str:
        return f"{time.monotonic() - self.started:.1f}s"

    def say(self, text: str) -> None:
        """A line that stays (the seed, a phase)."""
        with self._lock:
            self._clear()
            print(f"{self.prog}: {text}", file=self.stream, flush=True)

    def step(self, done: float, total: float, label: str) -> None:
        """`done` of `total` (checks, seconds), with what is happening now."""
        with self._lock:
            if not self.tty:
                print(f"{self.prog}: [{done:g}/{total:g}] {label} ({self.elapsed()})",
                      file=self.stream, flush=True)
                return
            filled = int(BAR * min(done / total, 1)) if total else BAR
            line = (f"{self.prog} [{'#' * filled}{'.' * (BAR - filled)}] {done:g}/{total:g} "
                    f"{label} {self.elapsed()}")
            self.stream.write("\r" + line[:119].ljust(119))
            self.stream.flush()
            self._drawn = True

    def close(self) -> None:
        with self._lock:
            self._clear()

    def _clear(self) -> None:
        if self._drawn:
            self.stream.write("\r" + " " * 119 + "\r")
            self.stream.flush()
            self._drawn = False

    @contextmanager
    def ticking(self, seconds: float, detail: Callable[[], str]) -> Iterator[None]:
        """Steps of elapsed time against `seconds` while the block runs: every second on a
        terminal, in a log about six times per run (every 1 to 5 s)."""
        stop = threading.Event()
        every = 1.0 if self.tty else max(1.0, min(5.0, seconds / 6))

        def tick() -> None:
            while not stop.wait(every):
                elapsed = time.monotonic() - begun
                over = "; time is up, the last work is finishing" if elapsed > seconds else ""
                self.step(round(min(elapsed, seconds)), seconds, f"s, {detail()}{over}")

        begun = time.monotonic()
        thread = threading.Thread(target=tick, daemon=True, name="progress")
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()
            self.close()
