"""The checkpoint hash chain (spec: checkpoints, DHP-CKP-*).

A checkpoint record is `{handoff_id, seq, fence, state, spend, prev, hash}`: `hash` covers the
record without itself (RFC 8785 + SHA-256) and `prev` is the previous record's hash (the
handoff_id for seq 1), so a changed, dropped, reordered or duplicated record is detected.
A result record `{handoff_id, fence, result, prev, hash}` closes the chain.

`ChainVerifier` checks records one at a time as they arrive and keeps only the last seq, hash
and fence, so a chain of any length verifies in constant memory.
"""

from __future__ import annotations

import hashlib
import math
import re
from typing import Any

from dhp.core import schemas
from dhp.core.canonical import (
    MAX_SAFE_INTEGER,
    SORTED_JSON,
    canonical_json,
    checkpoint_parts,
    result_parts,
)
from dhp.core.errors import IntegrityError, InvalidInput

CHECKPOINT_KEYS = frozenset(("handoff_id", "seq", "fence", "state", "spend", "prev", "hash"))
RESULT_KEYS = frozenset(("handoff_id", "fence", "result", "prev", "hash"))
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_UNHASHED = "sha256:" + "0" * 64  # the hash's place while the shape of the rest is checked


def make_record(handoff_id: str, seq: int, fence: int, state: Any, spend: float | int,
                prev: str, *, state_text: bytes | None = None) -> dict:
    """A checkpoint record with its hash (DHP-CKP-005). `state_text`, the state's canonical
    JSON when the caller has it already (limits.encode), saves encoding it again."""
    return checkpoint_and_text(handoff_id, seq, fence, state, spend, prev,
                               state_text=state_text)[0]


def checkpoint_and_text(handoff_id: str, seq: int, fence: int, state: Any, spend: float | int,
                        prev: str, *, state_text: bytes | None = None) -> tuple[dict, str]:
    """make_record, and the record's canonical JSON text (hash included), which a store
    keeps instead of encoding the record again."""
    record = {"handoff_id": handoff_id, "seq": seq, "fence": fence, "state": state,
              "spend": spend, "prev": prev}
    # The shape is checked first, so that the text is built from valid members only.
    if not _checkpoint_members_ok(handoff_id, seq, fence, spend, prev):
        check_checkpoint_shape(dict(record, hash=_UNHASHED))
    text = canonical_json(state, root="$.state").decode("utf-8") if state_text is None \
        else state_text.decode("utf-8")
    head, tail = checkpoint_parts(handoff_id, seq, fence, spend, prev, text)
    record["hash"] = _digest(head, tail)
    return record, _with_hash(head, record["hash"], tail)


def make_result_record(handoff_id: str, fence: int, result: Any, prev: str, *,
                       result_text: bytes | None = None) -> dict:
    """The result record chained after the last checkpoint (`prev` = its hash, or the
    handoff_id when there is no checkpoint)."""
    record = {"handoff_id": handoff_id, "fence": fence, "result": result, "prev": prev}
    check_result_shape(dict(record, hash=_UNHASHED))  # as in checkpoint_and_text
    text = canonical_json(result, root="$.result").decode("utf-8") if result_text is None \
        else result_text.decode("utf-8")
    record["hash"] = _digest(*result_parts(handoff_id, fence, prev, text))
    return record


# --- shape -----------------------------------------------------------------------------------
# The schema is the source of truth; these hand-written checks accept exactly what it accepts
# (tests/test_chain.py compares them) and exist because a jsonschema call per record is the
# hot path of validating a million-line log. On any doubt we ask jsonschema for the message.

def _is_int(v: Any) -> bool:
    # JSON Schema "integer" includes numbers with a zero fraction, e.g. 3.0.
    if type(v) is int:
        return True
    return type(v) is float and math.isfinite(v) and v.is_integer()


def _is_counter(v: Any) -> bool:
    return _is_int(v) and 1 <= v <= MAX_SAFE_INTEGER


def _is_digest(v: Any) -> bool:
    return type(v) is str and _DIGEST.fullmatch(v) is not None


def _checkpoint_members_ok(handoff_id: Any, seq: Any, fence: Any, spend: Any,
                           prev: Any) -> bool:
    """The members of a checkpoint record other than state (any JSON) and hash are valid."""
    return (_is_digest(handoff_id) and _is_counter(seq) and _is_counter(fence)
            and _is_digest(prev) and type(spend) in (int, float) and spend >= 0)


def _fast_checkpoint_ok(r: Any) -> bool:
    return (type(r) is dict and r.keys() == CHECKPOINT_KEYS and _is_digest(r["hash"])
            and _checkpoint_members_ok(r["handoff_id"], r["seq"], r["fence"], r["spend"],
                                       r["prev"]))


def _fast_result_ok(r: Any) -> bool:
    return (type(r) is dict and r.keys() == RESULT_KEYS
            and _is_digest(r["handoff_id"]) and _is_counter(r["fence"])
            and _is_digest(r["prev"]) and _is_digest(r["hash"]))


def check_checkpoint_shape(record: Any) -> None:
    """Raise `InvalidInput` (DHP-CKP-001) unless `record` is valid against checkpoint.json."""
    if not _fast_checkpoint_ok(record):
        schemas.check("checkpoint", record, requirement="DHP-CKP-001")


def check_result_shape(record: Any) -> None:
    """Raise `InvalidInput` (DHP-RES-005) unless `record` is valid against result.json."""
    if not _fast_result_ok(record):
        schemas.check("result", record, requirement="DHP-RES-005")


# --- hashing ---------------------------------------------------------------------------------

_QUOTED = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')  # unrolled: no backtracking
# What the C encoder writes differently from RFC 8785 outside strings: an exponent (Python
# writes one below 1e-4 and from 1e16, ECMAScript from 1e21 and below 1e-6), an integral float
# ("2.0" for "2"), an integer that may pass 2**53-1, Infinity/NaN. A float in plain notation
# with a fraction is already in its ECMAScript form (both are the shortest round trip).
_NOT_PLAIN = re.compile(r"\d[eE]|\.0(?!\d)|\d{16}|[IN]")


def canonical_parsed(value: Any) -> bytes:
    """`canonical_json(value)` for a value produced by a JSON parser (str keys, JSON types).

    For such values the C encoder's sorted compact output *is* RFC 8785 unless it holds a
    float (formatted differently), an integer that may exceed 2**53-1, a character at or
    above U+E000 (code-point and UTF-16 key order can differ there) or a lone surrogate;
    any of those, or any doubt, goes to the general canonicaliser. This is the hot path of
    verifying a long log."""
    return _canonical_text(value, True).encode("utf-8")


def _canonical_text(value: Any, parsed: bool) -> str:
    """The canonical JSON of `value` as text (see canonical_parsed for `parsed`)."""
    if parsed:
        try:
            text = SORTED_JSON.encode(value)
        except (TypeError, ValueError, RecursionError):
            text = None
        if text is not None and (text.isascii() or max(text) < "\ue000") \
                and not _NOT_PLAIN.search(_QUOTED.sub("", text)):
            if text.isascii():
                return text
            try:
                text.encode("utf-8")  # a lone surrogate cannot be encoded
                return text
            except UnicodeEncodeError:
                pass
    return canonical_json(value).decode("utf-8")


def _record_parts(record: dict, parsed: bool) -> tuple[str, str]:
    """The canonical text of a record of valid shape without `hash`, split where `hash`
    sorts in (canonical.checkpoint_parts), so the same text also gives the stored form.
    Only `state`/`result` goes through a canonicaliser."""
    if "seq" in record:
        return checkpoint_parts(record["handoff_id"], record["seq"], record["fence"],
                                record["spend"], record["prev"],
                                _canonical_text(record["state"], parsed))
    return result_parts(record["handoff_id"], record["fence"], record["prev"],
                        _canonical_text(record["result"], parsed))


def _digest(head: str, tail: str) -> str:
    return "sha256:" + hashlib.sha256((head + tail).encode("utf-8")).hexdigest()


def _with_hash(head: str, digest: str, tail: str) -> str:
    return head + ',"hash":"' + digest + '"' + tail


def record_hash(record: dict, *, parsed: bool = False) -> str:
    """The hash a record must carry: JCS + SHA-256 of the record without `hash`; for a
    record of valid shape byte-identical to `sha256_of(record without hash)`. `parsed=True`
    promises the record came from a JSON parser, which allows the fast canonicaliser.
    """
    return _digest(*_record_parts(record, parsed))


def verify_record(record: Any) -> None:
    """Check one checkpoint record on its own: its shape (DHP-CKP-001) and that its hash
    covers its content (DHP-CKP-005). Its place in a chain is `ChainVerifier`'s job."""
    check_checkpoint_shape(record)
    _check_hash(record, "checkpoint")


def _check_hash(record: dict, what: str, parsed: bool = False) -> str:
    """Verify the record's hash; return the record's canonical JSON text (hash included)."""
    head, tail = _record_parts(record, parsed)
    expected = _digest(head, tail)
    if record["hash"] != expected:
        raise IntegrityError(
            f"{what} hash {record['hash']} does not match its content (expected {expected}): "
            "the record was changed", requirement="DHP-CKP-005",
            details={"expected": expected, "found": record["hash"]})
    return _with_hash(head, expected, tail)


# --- the chain -------------------------------------------------------------------------------

class ChainVerifier:
    """Streaming verifier of one handoff's chain: call `add(record)` per checkpoint in order,
    then optionally `add_result(record)`. Raises `InvalidInput` for a record of bad shape and
    `IntegrityError` for a broken chain, naming the requirement. State is O(1).
    `parsed=True` promises every record comes straight from a JSON parser (see
    `canonical_parsed`); readers of logs pass it for speed."""

    def __init__(self, handoff_id: str, *, parsed: bool = False):
        self.handoff_id = handoff_id
        self.parsed = parsed
        self.last_seq = 0
        self.last_hash = handoff_id  # what the next record's prev must be (DHP-CKP-003)
        self.last_fence = 0
        self.has_result = False

    @property
    def count(self) -> int:
        return self.last_seq

    def add(self, record: Any) -> str:
        """Verify the next checkpoint record; return its hash."""
        if self.has_result:
            raise IntegrityError("checkpoint after the result record: the chain is closed",
                                 requirement="DHP-CKP-008")
        self._verify_shape(record, check_checkpoint_shape)
        self._check_owner(record, "checkpoint")
        self._verify_hash(record, f"checkpoint seq {record['seq']}")
        seq, want = record["seq"], self.last_seq + 1
        if seq != want:
            if seq <= self.last_seq:
                what = "duplicate" if seq == self.last_seq else "out of order"
                msg = f"seq {seq} is {what}: seq {self.last_seq} was already seen"
            elif self.last_seq == 0:
                msg = f"the chain starts at seq {seq}; the first record must have seq 1"
            else:
                msg = f"seq {seq} follows seq {self.last_seq}: seq {want} is missing"
            raise IntegrityError(msg, requirement="DHP-CKP-002",
                                 details={"expected_seq": want, "found_seq": seq})
        self._check_prev(record, f"seq {seq}")
        self._check_fence(record, f"seq {seq}")
        self.last_seq = int(seq)
        self.last_hash = record["hash"]
        self.last_fence = record["fence"]
        return self.last_hash

    def add_result(self, record: Any) -> str:
        """Verify the result record that closes the chain; return its hash."""
        if self.has_result:
            raise IntegrityError("a second result record: a handoff completes once",
                                 requirement="DHP-RES-003")
        self._verify_shape(record, check_result_shape)
        try:
            self._check_owner(record, "result")
            self._verify_hash(record, "result")
            self._check_prev(record, "the result")
            self._check_fence(record, "the result")
        except IntegrityError as exc:  # the result record's rules are DHP-RES-005's
            raise IntegrityError(f"{exc.message} ({exc.requirement} applied to the result)",
                                 requirement="DHP-RES-005", details=exc.details) from None
        self.has_result = True
        self.last_hash = record["hash"]
        self.last_fence = record["fence"]
        return self.last_hash

    # Two hooks, so a subclass can skip a shape its caller checked already or keep the
    # record's canonical text (what `_verify_hash` returns) instead of encoding it again.
    def _verify_shape(self, record: Any, check: Any) -> None:
        check(record)

    def _verify_hash(self, record: dict, what: str) -> str:
        """Check the record's hash; return the record's canonical JSON text, hash included."""
        return _check_hash(record, what, self.parsed)

    def _check_owner(self, record: dict, what: str) -> None:
        if record["handoff_id"] != self.handoff_id:
            raise IntegrityError(
                f"{what} record belongs to handoff {record['handoff_id']}, not {self.handoff_id}",
                requirement="DHP-CKP-007")

    def _check_prev(self, record: dict, what: str) -> None:
        if record["prev"] == self.last_hash:
            return
        if self.last_seq == 0:
            raise IntegrityError(
                f"prev of {what} is {record['prev']}; with no checkpoint before it, prev must "
                f"be the handoff_id {self.handoff_id}", requirement="DHP-CKP-003")
        raise IntegrityError(
            f"prev of {what} is {record['prev']}, but the hash of seq {self.last_seq} is "
            f"{self.last_hash}: a record was dropped, reordered or changed",
            requirement="DHP-CKP-004")

    def _check_fence(self, record: dict, what: str) -> None:
        if record["fence"] < self.last_fence:
            raise IntegrityError(
                f"fence {record['fence']} of {what} is lower than fence {self.last_fence} "
                "before it: fences never decrease along the chain", requirement="DHP-CKP-006")


def verify_chain(handoff_id: str, records: Any, result: Any = None) -> str:
    """Verify a whole chain (an iterable of records, consumed lazily); return the last hash.
    On failure the raised error's `details` holds `index`, the position of the bad record."""
    verifier = ChainVerifier(handoff_id)
    index = -1
    try:
        for index, record in enumerate(records):  # noqa: B007 (index used in the handler)
            verifier.add(record)
        if result is not None:
            index += 1
            verifier.add_result(result)
    except (IntegrityError, InvalidInput) as exc:
        exc.details = {"index": index, "cause": exc.details}
        raise
    return verifier.last_hash
