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
import sys
import threading
import time
from functools import lru_cache
from typing import Any, NamedTuple

from dhp.core import schemas
from dhp.core.errors import DHPError

DEFAULT_BUDGET_S = 2.0
_REGEX_KEYWORDS = ("pattern", "patternProperties")
MAX_SCHEMAS = 256  # compiled output schemas kept per process
MAX_HANDOFFS = 1024  # handoffs whose output schema is kept, for their completion


def result_errors(output_schema: dict, result: Any, *,
                  budget_s: float = DEFAULT_BUDGET_S) -> list[dict]:
    """Every violation of the output schema, with its JSON path (DHP-RES-002)."""
    check = _check_of(output_schema)
    if not check.regex:
        return _errors(check.validator, result)
    return _helper().errors(check.validator.schema, result, budget_s)


def errors_in_process(output_schema: dict, result: Any) -> list[dict]:
    return _errors(_check_of(output_schema).validator, result)


def _errors(validator: Any, result: Any) -> list[dict]:
    try:
        found = sorted(validator.iter_errors(result),
                       key=lambda e: [str(p) for p in e.absolute_path])
    except RecursionError:
        return [{"path": "$", "message": "the result is nested too deeply to validate against "
                 "the output schema (DHP-LIM-004)"}]
    return [{"path": schemas.json_path(e), "message": e.message} for e in found]


# --- compiled schemas, and the schema of each handoff this process claimed ------------------

class _Check(NamedTuple):
    validator: Any  # its `schema` is this module's own copy of the output schema
    regex: bool


@lru_cache(maxsize=MAX_SCHEMAS)
def _check_of_text(text: str) -> _Check:
    validator = schemas.user_schema_validator(json.loads(text))  # a bad schema raises here
    return _Check(validator, _has_regex(validator.schema))


# Our own copies of schemas by identity, so a schema this module handed out (schema_of) is
# found again without encoding it. Only objects made here are in it: a caller's dict, which
# might be changed between calls, always goes by its text.
_own: dict[int, _Check] = {}
_handoffs: dict[str, dict] = {}
_mutex = threading.Lock()


def _check_of(output_schema: Any) -> _Check:
    check = _own.get(id(output_schema))
    if check is not None and check.validator.schema is output_schema:
        return check
    check = _check_of_text(json.dumps(output_schema, sort_keys=True))
    with _mutex:
        if len(_own) >= 2 * MAX_SCHEMAS:
            _own.clear()  # entries of schemas the LRU dropped; the live ones come back
        _own[id(check.validator.schema)] = check
    return check


def remember(handoff_id: str, output_schema: dict) -> None:
    """Keep the output schema of a handoff whose envelope was just verified against its id
    (a take checks it, DHP-SEC-004), so its completion need not read the envelope again.
    The id covers the schema, so the two cannot disagree. Bounded (MAX_HANDOFFS). Never
    raises: a schema that does not compile is left to be judged at the completion."""
    try:
        schema = _check_of(output_schema).validator.schema
    except (DHPError, TypeError, ValueError, RecursionError):
        return
    with _mutex:
        _handoffs.pop(handoff_id, None)
        _handoffs[handoff_id] = schema
        while len(_handoffs) > MAX_HANDOFFS:
            del _handoffs[next(iter(_handoffs))]  # the oldest claim


def schema_of(handoff_id: str) -> dict | None:
    """The output schema `remember` kept for this handoff, or None."""
    return _handoffs.get(handoff_id)


def _has_regex(node: Any) -> bool:
    if isinstance(node, dict):
        return any(k in _REGEX_KEYWORDS for k in node) or any(map(_has_regex, node.values()))
    return isinstance(node, list) and any(map(_has_regex, node))


def over_budget(budget_s: float) -> list[dict]:
    return [{"path": "$", "message": f"validation against the output schema did not finish "
             f"within its budget of {budget_s:g} s (DHP-LIM-008): the schema's regular "
             "expressions are too costly for this result"}]


class _Helper:
    """The helper process, started on first use and restarted after it is killed."""

    def __init__(self) -> None:
        self._proc: Any = None  # a subprocess.Popen once started
        self._mutex = threading.Lock()

    def errors(self, output_schema: dict, result: Any, budget_s: float) -> list[dict]:
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

    def _start(self) -> Any:
        import subprocess  # only where a result schema needs the helper (start-up time)

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
