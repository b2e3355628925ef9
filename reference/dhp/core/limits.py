"""Size limits (spec/limits.md, DHP-LIM-*): what a store accepts it can also export and ship.

One set of limits per store: the encoded size (RFC 8785 bytes) of inputs, output schema,
checkpoint state and result, and the nesting depth of each. Each is checked where the value
enters the store (dispatch, checkpoint, complete), before the write transaction, so an
over-limit value is refused with `invalid_input` and nothing is stored. The ceilings keep
every record a store can hold inside one log line and one transport frame (16 MiB).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dhp.core.canonical import MAX_SAFE_INTEGER, canonical_json
from dhp.core.errors import InvalidInput

MiB = 1024 * 1024
LINE_LIMIT = 16 * MiB  # a log line and a transport frame (DHP-SEC-002, DHP-TRN-002)
# Room a record's other members (ids, hashes, counters, frame wrapper) need in one line.
RECORD_OVERHEAD = 64 * 1024
CEILING = LINE_LIMIT - RECORD_OVERHEAD
MAX_DEPTH_CEILING = 256  # far below the canonicaliser's and the JSON parsers' own bounds

MAX_FENCE = MAX_SAFE_INTEGER  # the largest fence a handoff may reach (DHP-LIM-006)
MAX_SPEND = MAX_SAFE_INTEGER  # the largest running total of spend (DHP-LIM-005)
MAX_WORKER_ID = 200  # characters (DHP-LIM-007)


@dataclass(frozen=True)
class Limits:
    """A store's limits (DHP-LIM-001). Sizes are bytes of canonical JSON (UTF-8); depth counts
    nested objects and arrays (a scalar has depth 0, `{"a": []}` depth 2)."""

    max_inputs_bytes: int = 4 * MiB
    max_schema_bytes: int = 1 * MiB
    max_state_bytes: int = 4 * MiB
    max_result_bytes: int = 4 * MiB
    max_depth: int = 128

    def __post_init__(self) -> None:
        for name in ("max_inputs_bytes", "max_schema_bytes", "max_state_bytes",
                     "max_result_bytes", "max_depth"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidInput(f"limit {name} must be a positive integer, not {value!r}",
                                   requirement="DHP-LIM-001")
        if self.max_inputs_bytes + self.max_schema_bytes > CEILING:
            raise InvalidInput(f"max_inputs_bytes + max_schema_bytes must not pass {CEILING} "
                               "bytes: the envelope must fit one log line and one transport "
                               "frame", requirement="DHP-LIM-002")
        for name in ("max_state_bytes", "max_result_bytes"):
            if getattr(self, name) > CEILING:
                raise InvalidInput(f"limit {name} must not pass {CEILING} bytes: the record "
                                   "must fit one log line and one transport frame",
                                   requirement="DHP-LIM-002")
        if self.max_depth > MAX_DEPTH_CEILING:
            raise InvalidInput(f"limit max_depth must not pass {MAX_DEPTH_CEILING}",
                               requirement="DHP-LIM-002")

    def narrowed(self, *, max_record_bytes: int) -> Limits:
        """These limits with state and result capped at `max_record_bytes` (what a shipper's
        frame can still carry)."""
        cap = max(1, max_record_bytes)
        return Limits(self.max_inputs_bytes, self.max_schema_bytes,
                      min(self.max_state_bytes, cap), min(self.max_result_bytes, cap),
                      self.max_depth)

    def check_intent(self, intent: dict, text: str | None = None) -> None:
        """The intent's inputs and output schema within their limits (DHP-LIM-003). `text`,
        when given, is canonical JSON text that holds the intent (its envelope's): when it is
        ASCII (a byte a character), short and has few brackets, each member's text is
        shorter and nests less deeply, so nothing is encoded again."""
        if text is not None and text.isascii() \
                and len(text) <= min(self.max_inputs_bytes, self.max_schema_bytes) \
                and text.count("{") + text.count("[") <= self.max_depth:
            return
        self.encode("inputs", intent["inputs"], self.max_inputs_bytes)
        self.encode("output_schema", intent["output_schema"], self.max_schema_bytes)

    def encode(self, what: str, value: Any, max_bytes: int) -> bytes:
        """The canonical JSON of `value`, refused with `invalid_input` naming `what` when it
        is not JSON, nested deeper than max_depth or longer than `max_bytes`."""
        text = canonical_json(value, max_depth=self.max_depth, root=f"$.{what}")
        if len(text) > max_bytes:
            raise InvalidInput(f"{what} is {len(text)} bytes of canonical JSON; this store's "
                               f"limit is {max_bytes}", requirement="DHP-LIM-003",
                               details={"what": what, "bytes": len(text), "limit": max_bytes})
        return text


def check_fence(fence: int, what: str) -> None:
    """Refuse to store a record of a live handoff at the largest fence: no claim or recover
    could ever be fenced above it, so the handoff would be stuck (DHP-LIM-006)."""
    if fence >= MAX_FENCE:
        raise InvalidInput(f"{what} has fence {fence}; a store accepts fences below "
                           f"{MAX_FENCE} only, so that the next claim can be fenced above it",
                           requirement="DHP-LIM-006")


DEFAULT = Limits()
