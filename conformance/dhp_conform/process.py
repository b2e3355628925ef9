"""One adapter process: start it, exchange JSON lines with it, and fault it.

The process gets its own session (process group), so SIGKILL / SIGSTOP / SIGCONT reach the
adapter even when the command is a wrapper script. stdout carries only protocol lines; stderr
goes to a file per process (free-form, never treated as a crash).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any


class AdapterError(Exception):
    """The adapter broke the protocol (non-JSON line, no answer, died): not a DHP finding but
    a reason the run cannot be trusted. The message says exactly what happened."""


class ProcessDied(AdapterError):
    """The process exited while a request was in flight: its outcome is unknown."""


class Timeout(AdapterError):
    """No answer in time: the outcome is unknown."""


class Pending:
    """A request in flight; `wait()` returns the response dict or raises."""

    def __init__(self, rid: int, op: str):
        self.id, self.op = rid, op
        self.done = threading.Event()
        self.response: dict | None = None
        self.failure: AdapterError | None = None

    def settle(self, response: dict | None = None, failure: AdapterError | None = None) -> None:
        if not self.done.is_set():
            self.response, self.failure = response, failure
            self.done.set()

    def wait(self, timeout: float) -> dict:
        if not self.done.wait(timeout):
            raise Timeout(
                f"no response to request {self.id} ({self.op}) within {timeout:g} s; "
                "did the adapter flush stdout after writing its response line?")
        if self.failure is not None:
            raise self.failure
        assert self.response is not None
        return self.response


class AdapterProcess:
    def __init__(self, name: str, argv: Sequence[str], stderr_path: Path,
                 env: dict[str, str] | None = None, cwd: str | None = None):
        self.name, self.argv, self.stderr_path = name, list(argv), stderr_path
        self.env, self.cwd = env, cwd
        self.proc: subprocess.Popen | None = None
        self.pending: dict[int, Pending] = {}
        self.broken: AdapterError | None = None  # a protocol violation seen on stdout
        self.tail: list[str] = []  # last stdout lines, for diagnostics
        self.stdout_lines = 0  # lines read from stdout in this incarnation
        self.requests = 0  # requests written in this incarnation
        self._next_id = 1
        self._lock = threading.Lock()

    # --- lifecycle -----------------------------------------------------------------------
    def start(self) -> None:
        self.stderr_path.parent.mkdir(parents=True, exist_ok=True)
        stderr = self.stderr_path.open("ab")
        proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=stderr, env=self.env, cwd=self.cwd,
                                start_new_session=True, bufsize=0)
        stderr.close()
        with self._lock:  # one step, so a reader of the old incarnation sees it replaced
            self.broken = None
            self.stdout_lines = self.requests = 0
            self.tail = []  # diagnostics quote this incarnation only
            self.proc = proc
        threading.Thread(target=self._read, args=(self.proc,), daemon=True,
                         name=f"read-{self.name}").start()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: int) -> None:
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            pass

    def kill(self) -> None:
        """SIGKILL and reap; in-flight requests become ProcessDied (outcome unknown), and
        whatever the killed process had written but the kit had not read yet is void."""
        with self._lock:
            if self.proc is not None:
                self.proc.killed_by_kit = True  # its late output is void
        self.signal(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait()
        self._fail_all(ProcessDied(f"{self.name} was killed by the kit (SIGKILL)"))

    def close(self, timeout: float = 3.0) -> None:
        """Ask politely (EOF on stdin), then kill."""
        if self.proc is None:
            return
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout)
        except (OSError, subprocess.TimeoutExpired):
            self.signal(signal.SIGCONT)
            self.kill()
        self._fail_all(ProcessDied(f"{self.name} was closed"))

    # --- requests ------------------------------------------------------------------------
    def send(self, op: str, args: dict[str, Any], raw_args: str | None = None) -> Pending:
        """Send one request; `raw_args` (JSON text) replaces `args` on the wire verbatim, for
        vectors whose exact text matters (big numbers, duplicate members, escapes)."""
        with self._lock:
            rid = self._next_id
            self._next_id += 1
            pending = Pending(rid, op)
            if self.broken is not None:
                pending.settle(failure=self.broken)
                return pending
            if not self.alive():
                pending.settle(failure=ProcessDied(self._death_note(self.proc)))
                return pending
            self.pending[rid] = pending
            proc = self.proc  # the incarnation this request goes to, even if replaced meanwhile
        message = {"id": rid, "op": op, "args": args}
        try:
            if raw_args is not None:
                head = json.dumps({"id": rid, "op": op})[:-1]
                line = (head + ', "args": ' + raw_args + "}\n").encode("utf-8", "surrogatepass")
            else:
                line = (json.dumps(message, ensure_ascii=False) + "\n").encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: only the escaped form is UTF-8
            line = (json.dumps(message) + "\n").encode("utf-8")
        try:
            proc.stdin.write(line)
            proc.stdin.flush()
            self.requests += 1
        except (OSError, ValueError):  # the pipe closed: the process died or was killed
            with self._lock:
                self.pending.pop(rid, None)
            pending.settle(failure=ProcessDied(self._death_note(proc)))
        return pending

    def _death_note(self, proc: subprocess.Popen | None) -> str:
        code = proc.poll() if proc else None
        tail = "; last stdout lines: " + " | ".join(self.tail[-3:]) if self.tail else ""
        try:
            err = self.stderr_path.read_text(errors="replace").strip().splitlines()[-3:]
        except OSError:
            err = []
        err_text = "; its stderr ends: " + " | ".join(err) if err else ""
        return (f"{self.name} is not running (exit status {code}){err_text}{tail} "
                f"(full stderr: {self.stderr_path})")

    def _fail_all(self, failure: AdapterError, of: subprocess.Popen | None = None) -> None:
        """Settle every request in flight with `failure`; with `of`, only while that process
        is still the live incarnation (checked under the lock: a restart may have replaced it
        since the failure was seen, and the new incarnation's requests are not its own)."""
        with self._lock:
            if of is not None and not self._current(of):
                return
            waiting, self.pending = list(self.pending.values()), {}
        for p in waiting:
            p.settle(failure=failure)

    def _read(self, proc: subprocess.Popen) -> None:
        number = 0
        for raw in proc.stdout:
            with self._lock:
                if not self._current(proc):
                    continue  # a killed incarnation's output: its outcomes are already unknown
                number += 1
                self.stdout_lines = number
            text = raw.decode("utf-8", errors="replace").rstrip("\n")
            self.tail = (self.tail + [text[:200]])[-5:]
            try:
                message = json.loads(text)
                rid = message["id"] if isinstance(message, dict) else None
            except ValueError:
                self._violate(proc, f"line {number} of {self.name}'s stdout is not JSON: "
                              f"{text[:200]!r}; did you mean to write it to stderr?")
                continue
            with self._lock:
                current = self._current(proc)
                pending = self.pending.pop(rid, None) if current and isinstance(rid, int) \
                    else None
            if not current:
                continue
            if pending is None:
                self._violate(proc, f"line {number} of {self.name}'s stdout answers no request "
                              f"in flight (id {rid!r}): {text[:200]!r}")
                continue
            pending.settle(response=message)
        proc.wait()
        self._fail_all(ProcessDied(self._death_note(proc)), of=proc)

    def _current(self, proc: subprocess.Popen) -> bool:
        """Whether `proc` is the live incarnation (call with the lock held)."""
        return proc is self.proc and not getattr(proc, "killed_by_kit", False)

    def _violate(self, proc: subprocess.Popen, message: str) -> None:
        with self._lock:
            if not self._current(proc):
                return
            self.broken = AdapterError(message)
        self._fail_all(self.broken)
