"""Intents and envelopes: building them and checking them (spec/identity, spec/envelope).

The shape of both lives in schemas/intent.json, budget.json and envelope.json; this module
only decides the order of the checks and which error and requirement each failure gets
(DHP-ENV-007): the JSON text itself is judged by the strict parser before anything here; then
the version (so a future version is not called malformed), then the values' JSON profile
(canonical form), then the schema and the calendar of created_at, then the output schema,
then the id.
"""

from __future__ import annotations

import datetime as _dt
import json
import re
from functools import lru_cache
from typing import Any

from dhp.core import schemas
from dhp.core.canonical import canonical_json, handoff_id, sha256_of_bytes
from dhp.core.clock import rfc3339
from dhp.core.errors import IntegrityError, InvalidInput, UnsupportedVersion

PROTOCOL_VERSION = "1.0"


def make_intent(task_kind: str, inputs: dict, output_schema: dict,
                budget: dict | None = None) -> dict:
    """A checked intent: exactly the five members of DHP-ID-002."""
    intent = new_intent(task_kind, inputs, output_schema, budget)
    check_intent(intent)
    return intent


def new_intent(task_kind: str, inputs: Any, output_schema: Any, budget: Any = None) -> dict:
    """The intent of these members, not yet checked (make_envelope checks it)."""
    return {"dhp": PROTOCOL_VERSION, "task_kind": task_kind, "inputs": inputs,
            "output_schema": output_schema, "budget": {} if budget is None else budget}


def make_envelope(intent: dict, created_at: str | _dt.datetime | None = None) -> dict:
    """A checked envelope for `intent`. `created_at` (RFC 3339 text or an aware datetime) is
    metadata outside the identity (DHP-ENV-005); None leaves it out, so the envelope of an
    intent is deterministic unless the caller asks for a timestamp."""
    return envelope_and_text(intent, created_at)[0]


def envelope_and_text(intent: dict, created_at: str | _dt.datetime | None = None
                      ) -> tuple[dict, str]:
    """make_envelope, and the envelope's canonical JSON text, made from the intent's canonical
    form that the check produced (a store keeps it instead of encoding the envelope again)."""
    text = _checked_intent(intent)
    envelope = {"dhp": PROTOCOL_VERSION, "handoff_id": sha256_of_bytes(text), "intent": intent}
    # Members in JCS order (created_at < dhp < handoff_id < intent), the intent as hashed.
    head = "{"
    if isinstance(created_at, _dt.datetime):
        if created_at.tzinfo is None:
            raise InvalidInput("created_at: a datetime without a time zone is ambiguous",
                               requirement="DHP-ENV-001")
        envelope["created_at"] = rfc3339(created_at)
        head = f'{{"created_at":"{envelope["created_at"]}",'  # digits and -:.TZ: no escapes
    elif created_at is not None:
        envelope["created_at"] = created_at
        check_envelope(envelope)  # text from the caller: the schema judges it
        # A checked created_at is a string, which JCS writes as json.dumps does.
        head = f'{{"created_at":{json.dumps(created_at, ensure_ascii=False)},'
    # Otherwise the envelope is valid by construction from a checked intent (the tests hold
    # such envelopes to schemas/envelope.json); checking it again would double dispatch.
    return envelope, (f'{head}"dhp":"{PROTOCOL_VERSION}","handoff_id":'
                      f'"{envelope["handoff_id"]}","intent":{text.decode()}}}')


def check_intent(intent: Any) -> None:
    """Raise the contract's typed error if `intent` is not a valid DHP/1.0 intent."""
    _checked_intent(intent)


def _checked_intent(intent: Any) -> bytes:
    """check_intent, returning the intent's canonical form (its id is the hash of it)."""
    _check_version(intent, "$")
    text = canonical_json(intent)  # refuses non-JSON values, naming their path (DHP-CJ-*)
    key = schemas.shape_key("intent", intent, "inputs")
    if key is None:
        _check_shape(intent)
    else:  # the schemas do not look into inputs: judged once per distinct rest of the intent
        _checked_shape(key)
    return text


def _check_shape(intent: Any) -> None:
    _check_task_kind(intent, "$")
    _check_schema("intent", intent, "$")
    _check_output_schema(intent["output_schema"], "$.output_schema")


@lru_cache(maxsize=1024)  # only valid shapes are kept: an exception is not cached
def _checked_shape(key: str) -> None:
    _check_shape(json.loads(key))


def check_envelope(envelope: Any) -> None:
    """Raise the contract's typed error if `envelope` is not a valid DHP/1.0 envelope."""
    _check_version(envelope, "$")
    if isinstance(envelope, dict):
        _check_version(envelope.get("intent"), "$.intent")
    canonical_json(envelope)
    if isinstance(envelope, dict):
        _check_task_kind(envelope.get("intent"), "$.intent")
    _check_schema("envelope", envelope, "$")
    if "created_at" in envelope:
        check_created_at(envelope["created_at"], "$.created_at")
    intent = envelope["intent"]
    _check_output_schema(intent["output_schema"], "$.intent.output_schema")
    expected = handoff_id(intent)
    if envelope["handoff_id"] != expected:
        raise IntegrityError(
            f"$.handoff_id: {envelope['handoff_id']} does not match the intent, whose id is "
            f"{expected}", requirement="DHP-ENV-002",
            details={"stated": envelope["handoff_id"], "computed": expected})


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _check_task_kind(intent: Any, path: str) -> None:
    """A task kind is a name: no control character (DHP-ID-006). Said before the schema's
    pattern would, so the message names the character; a server store cannot even hold a
    NUL in a text column."""
    kind = intent.get("task_kind") if isinstance(intent, dict) else None
    found = _CONTROL.search(kind) if isinstance(kind, str) else None
    if found is not None:
        raise InvalidInput(f"{path}.task_kind: a task kind must not contain a control "
                           f"character (U+0000..U+001F, U+007F); found U+{ord(found.group()):04X} "
                           f"at index {found.start()} of {kind!r}", requirement="DHP-ID-006")


_DATE_TIME = re.compile(r"(\d{4})-(\d\d)-(\d\d)[Tt](\d\d):(\d\d):(\d\d)(?:\.\d+)?"
                        r"(?:[Zz]|([+-])(\d\d):(\d\d))")


def check_created_at(value: Any, path: str) -> None:
    """Refuse an RFC 3339 date-time that names no real instant (DHP-ENV-008): the schema's
    pattern only checks the digits' places, and format validation is optional in JSON
    Schema, so the calendar is checked here."""
    match = _DATE_TIME.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise InvalidInput(f"{path}: {value!r} is not an RFC 3339 date-time",
                           requirement="DHP-ENV-008")
    year, month, day, hour, minute, second = (int(g) for g in match.groups()[:6])
    sign, off_h, off_m = match.group(7), int(match.group(8) or 0), int(match.group(9) or 0)
    problem = None
    if not 1 <= month <= 12:
        problem = f"month {month:02d} does not exist"
    elif not 1 <= day <= _days_in(year, month):
        problem = f"{year:04d}-{month:02d} has no day {day:02d}"
    elif hour > 23 or minute > 59 or second > 60:
        problem = f"time {hour:02d}:{minute:02d}:{second:02d} does not exist"
    elif off_h > 23 or off_m > 59:
        problem = f"offset {sign}{off_h:02d}:{off_m:02d} does not exist"
    elif second == 60:
        utc = hour * 60 + minute - (1 if sign == "+" else -1) * (off_h * 60 + off_m)
        if utc % (24 * 60) != 23 * 60 + 59:  # a leap second, accepted (DHP-ENV-010)
            problem = "second 60 (a leap second) is only valid at 23:59:60 UTC"
    if problem is not None:
        raise InvalidInput(f"{path}: {value!r} names no real instant: {problem}",
                           requirement="DHP-ENV-008")


def _days_in(year: int, month: int) -> int:
    if month == 2:  # the Gregorian rule, for every year 0000..9999 RFC 3339 can write
        return 29 if year % 4 == 0 and (year % 100 != 0 or year % 400 == 0) else 28
    return 30 if month in (4, 6, 9, 11) else 31


def _check_version(obj: Any, path: str) -> None:
    # Only a *string* other than "1.0" names another version; any other value is malformed
    # and left to the schema (invalid_input).
    if isinstance(obj, dict) and isinstance(obj.get("dhp"), str) \
            and obj["dhp"] != PROTOCOL_VERSION:
        raise UnsupportedVersion(
            f"{path}.dhp: version {obj['dhp']!r} is not supported; this implementation "
            f"speaks DHP/{PROTOCOL_VERSION}", requirement="DHP-ENV-003")


def _check_schema(name: str, obj: Any, root: str) -> None:
    found = schemas.errors(name, obj)
    if not found:
        return
    listing = "; ".join(f"{e['path']}: {e['message']}" for e in found)
    raise InvalidInput(f"not a valid {name}: {listing}",
                       requirement=_requirement(name, [e["path"] for e in found]),
                       details=found)


def _check_output_schema(output_schema: dict, path: str) -> None:
    try:
        schemas.user_schema_validator(output_schema)
    except InvalidInput as exc:  # add where the bad schema sits
        raise InvalidInput(f"{path}: {exc.message}", requirement=exc.requirement,
                           details=exc.details) from None


def _requirement(name: str, paths: list[str]) -> str:
    """The most specific requirement every violation falls under."""
    prefix = "$.intent" if name == "envelope" else "$"

    def under(path: str, base: str) -> bool:
        return path == base or path.startswith(base + ".") or path.startswith(base + "[")

    if all(under(p, prefix + ".budget") for p in paths):
        return "DHP-ID-003"
    if all(under(p, prefix) for p in paths):
        return "DHP-ID-002"
    return "DHP-ENV-001"
