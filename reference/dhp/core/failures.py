"""Failure records: why each failed attempt of a handoff failed (spec/budgets.md, "Failed
attempts"; schemas/failure.json).

A worker that gives a handoff back because its attempt failed passes the error with the
release: `{type, message, traceback}`. The store keeps it with the attempt's number, fence,
worker and time, in the release's own transaction, so a release refused by the fence records
nothing (DHP-BUD-009). Bounded twice: each text is cut to a fixed size, and a handoff keeps
only its last CAP records (DHP-BUD-010). The records are store-local diagnostics, not part of
the portable log (DHP-BUD-012).
"""

from __future__ import annotations

import traceback as _traceback
from typing import Any

from dhp.core.clock import rfc3339
from dhp.core.errors import InvalidInput

CAP = 10  # records kept per handoff: older ones are dropped as new ones are added
MAX_TYPE = 200  # characters of the error's type name
MAX_MESSAGE = 2048  # characters of the message (its start is kept)
MAX_TRACEBACK = 4096  # characters of the traceback (its end, the innermost frames, is kept)
CUT = "\u2026"  # marks where a text was cut
# Columns of a stored entry, in order (both backends).
FIELDS = ("handoff_id", "attempt", "fence", "worker", "at", "wall", "type", "message",
          "traceback")
_MEMBERS = ("type", "message", "traceback")


def _text(value: str) -> str:
    """Text any store keeps as it is: no NUL (Postgres refuses it), no lone surrogate."""
    return value.replace("\x00", "\ufffd").encode("utf-8", "replace").decode("utf-8")


def check(failure: Any) -> dict | None:
    """The release's `failure` member, checked and cut to the bounds; None stays None.
    Cutting is the bound, not an error: a crash's report must not make its release fail."""
    if failure is None:
        return None
    if not isinstance(failure, dict):
        raise InvalidInput(f"failure must be an object with type and message, not "
                           f"{type(failure).__name__}", requirement="DHP-BUD-008")
    extra = sorted(set(failure) - set(_MEMBERS))
    if extra:
        raise InvalidInput(f"failure has unknown members {extra}; it takes "
                           f"{', '.join(_MEMBERS)}", requirement="DHP-BUD-008")
    kind, message = failure.get("type"), failure.get("message", "")
    trace = failure.get("traceback")
    if not isinstance(kind, str) or not kind.strip():
        raise InvalidInput(f"failure.type must be a non-empty string (the error's type name), "
                           f"not {kind!r}", requirement="DHP-BUD-008")
    for name, value in (("message", message), ("traceback", trace)):
        if value is not None and not isinstance(value, str):
            raise InvalidInput(f"failure.{name} must be a string, not {type(value).__name__}",
                               requirement="DHP-BUD-008")
    return {"type": _cut_start(_text(kind), MAX_TYPE),
            "message": _cut_start(_text(message or ""), MAX_MESSAGE),
            "traceback": None if trace is None else _cut_end(_text(trace), MAX_TRACEBACK)}


def _cut_start(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 1] + CUT


def _cut_end(text: str, limit: int) -> str:
    return text if len(text) <= limit else CUT + text[-(limit - 1):]


def of_exception(exc: BaseException) -> dict:
    """The failure of a raised exception: its type's name, its message, its traceback."""
    trace = "".join(_traceback.format_exception(type(exc), exc, exc.__traceback__))
    return check({"type": type(exc).__name__, "message": str(exc), "traceback": trace})


def entry(handoff_id: str, failure: dict, attempt: int, fence: int, worker: str,
          at: float) -> dict:
    """The stored entry of a failure checked by `check`; `at` is on the store clock."""
    return {"handoff_id": handoff_id, "attempt": attempt, "fence": fence, "worker": worker,
            "at": at, "wall": rfc3339(), **failure}


def shown(entry_: dict, now: float) -> dict:
    """The wire form of a stored entry (schemas/failure.json), its age on the store clock."""
    return {"attempt": entry_["attempt"], "fence": entry_["fence"], "worker": entry_["worker"],
            "at": entry_["wall"], "age_s": round(max(0.0, now - entry_["at"]), 6),
            "type": entry_["type"], "message": entry_["message"],
            "traceback": entry_["traceback"]}


def summary(failure: dict | None) -> str:
    """`Type: message` on one line, for listings and log lines."""
    if not failure:
        return ""
    first = failure["message"].splitlines()[0] if failure["message"] else ""
    return f"{failure['type']}: {first}" if first else failure["type"]
