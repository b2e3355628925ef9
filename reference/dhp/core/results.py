"""Validating a result against its output schema at a bounded cost (DHP-RES-002, DHP-LIM-008).

The caller validates before it takes the store's write lock (the schema of a handoff never
changes), so a slow validation never holds up other writers. Most schemas validate in
process. A schema with a regular expression (`pattern`, `patternProperties`) can take
exponential time on a backtracking engine such as Python's `re`, which cannot be interrupted;
such schemas are validated in a helper process that is killed when it overruns the budget,
and the result is then refused as a `schema_violation` naming the budget. The helper starts
once per process and is reused (its start-up does not count against the budget).

    python -m dhp.core.result_helper     the helper: one JSON request per line on stdin
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import threading
import time
from functools import cache
from typing import Any

from dhp.core import schemas

DEFAULT_BUDGET_S = 2.0
_REGEX_KEYWORDS = ("pattern", "patternProperties")


def result_errors(output_schema: dict, result: Any, *,
                  budget_s: float = DEFAULT_BUDGET_S) -> list[dict]:
    """Every violation of the output schema, with its JSON path (DHP-RES-002)."""
    if not _has_regex(json.dumps(output_schema, sort_keys=True)):
        return errors_in_process(output_schema, result)
    return _helper().errors(output_schema, result, budget_s)


def errors_in_process(output_schema: dict, result: Any) -> list[dict]:
    validator = schemas.user_schema_validator(output_schema)
    try:
        found = sorted(validator.iter_errors(result),
                       key=lambda e: [str(p) for p in e.absolute_path])
    except RecursionError:
        return [{"path": "$", "message": "the result is nested too deeply to validate against "
                 "the output schema (DHP-LIM-004)"}]
    return [{"path": schemas.json_path(e), "message": e.message} for e in found]


@cache
def _has_regex(schema_text: str) -> bool:
    def walk(node: Any) -> bool:
        if isinstance(node, dict):
            return any(k in _REGEX_KEYWORDS for k in node) or any(map(walk, node.values()))
        return isinstance(node, list) and any(map(walk, node))
    return walk(json.loads(schema_text))


def over_budget(budget_s: float) -> list[dict]:
    return [{"path": "$", "message": f"validation against the output schema did not finish "
             f"within its budget of {budget_s:g} s (DHP-LIM-008): the schema's regular "
             "expressions are too costly for this result"}]


class _Helper:
    """The helper process, started on first use and restarted after it is killed."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen | None = None
        self._mutex = threading.Lock()

    def errors(self, output_schema: dict, result: Any, budget_s: float) -> list[dict]:
        schemas.user_schema_validator(output_schema)  # a bad schema fails here, not there
        line = json.dumps({"schema": output_schema, "result": result}, ensure_ascii=False,
                          allow_nan=False).encode("utf-8") + b"\n"
        with self._mutex:
            proc = self._start()
            try:
                proc.stdin.write(line)
                proc.stdin.flush()
                answer = _read_line(proc.stdout, time.monotonic() + budget_s)
            except OSError:
                answer = None
            if answer is None:  # overran (or died): kill it, start a fresh one next time
                self._stop()
                return over_budget(budget_s)
        return json.loads(answer)

    def _start(self) -> subprocess.Popen:
        if self._proc is None or self._proc.poll() is not None:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "dhp.core.result_helper"], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, env=dict(os.environ, PYTHONPATH=os.pathsep.join(
                    p for p in sys.path if p)))
            if _read_line(self._proc.stdout, time.monotonic() + 60) != b"ready\n":
                self._stop()
                raise OSError("the result-validation helper did not start")
        return self._proc

    def _stop(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
            for pipe in (self._proc.stdin, self._proc.stdout):
                pipe.close()
            self._proc = None


def _read_line(pipe: Any, deadline: float) -> bytes | None:
    """One line from the helper, or None when it does not come by `deadline`."""
    data = b""
    fd = pipe.fileno()
    while not data.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return None
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return None
        data += chunk
    return data


_helpers: dict[int, _Helper] = {}


def _helper() -> _Helper:
    # One per process: a forked child must not share its parent's pipes.
    return _helpers.setdefault(os.getpid(), _Helper())
