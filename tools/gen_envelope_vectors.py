"""Generate vectors/envelope.json.

Handoff ids are computed with the independent `rfc8785` package, never with `dhp`. Every
expected outcome is decided here by hand (the comment of a case says why when it is not
obvious). Ids are frozen: never renumber or reuse one.

    python tools/gen_envelope_vectors.py          # rewrite vectors/envelope.json
    python tools/gen_envelope_vectors.py --check  # exit 1 if the file is out of date
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import rfc8785

OUT = Path(__file__).resolve().parent.parent / "vectors" / "envelope.json"

NOTES = {
    "IdMismatch": "The stated handoff_id is not the id of the carried intent: accepting it "
                  "lets one id name two different pieces of work.",
    "Utf16KeyOrder": "An id computed over keys sorted by code point (as Python's json.dumps "
                     "sort_keys does) instead of UTF-16 code units.",
    "Version": "Another protocol version is refused as unsupported before anything else is "
               "judged, so a newer peer gets a useful answer.",
    "Shape": "A member missing, mistyped or unknown; refused with invalid_input.",
    "Metadata": "Members outside the identity (created_at, x-) leave the id unchanged.",
    "OutputSchema": "The output schema is not itself a valid JSON Schema 2020-12.",
    "TextOnly": "The point of the test is in input_text; parse it rather than reading input.",
    "CheckOrder": "Several things are wrong; the code shows which check comes first.",
    "Calendar": "created_at is a well-formed RFC 3339 date-time that names no real instant "
                "(30 February, hour 24): the schema's pattern accepts it, and a JSON Schema "
                "validator refuses it only with format assertion on, so check it yourself "
                "(DHP-ENV-008).",
}


def intent(**over) -> dict:
    out = {"dhp": "1.0", "task_kind": "t", "inputs": {}, "output_schema": {}, "budget": {}}
    out.update(over)
    return out


def hid(obj) -> str:
    return "sha256:" + hashlib.sha256(rfc8785.dumps(obj)).hexdigest()


def env(i: dict | None = None, **over) -> dict:
    i = intent() if i is None else i
    out = {"dhp": "1.0", "handoff_id": hid(i), "intent": i}
    out.update(over)
    return out


def without(obj: dict, key: str) -> dict:
    return {k: v for k, v in obj.items() if k != key}


REAL = intent(task_kind="summarise-report", inputs={"url": "https://example.org/r.pdf"},
              output_schema={"type": "object", "required": ["summary"],
                             "properties": {"summary": {"type": "string"}}},
              budget={"max_attempts": 3, "max_steps": 50, "max_spend": 1.25,
                      "max_wall_clock_s": 900})
UNICODE = intent(inputs={"\ue000": 1, "\U0001f600": 2, "\u00e9": "\u2028"})
MINIMAL_ID = hid(intent())


def splice(envelope_text_inputs: str) -> str:
    """Envelope text whose intent's inputs is the raw JSON given; the id is a placeholder
    that the error makes irrelevant."""
    return ('{"dhp":"1.0","handoff_id":"' + MINIMAL_ID + '","intent":{"dhp":"1.0",'
            '"task_kind":"t","inputs":' + envelope_text_inputs
            + ',"output_schema":{},"budget":{}}}')


def cases() -> list[dict]:
    valid = {"valid": True}
    return [
        # --- valid ------------------------------------------------------------------------
        dict(n=1, description="minimal envelope", requirements=["DHP-ENV-001", "DHP-ENV-002"],
             input=env(), expected=valid),
        dict(n=2, description="envelope with created_at in UTC",
             requirements=["DHP-ENV-001", "DHP-ENV-005"],
             input=env(created_at="2025-03-01T12:00:00Z"), expected=valid, flags=["Metadata"],
             comment="Same handoff_id as envelope-001: created_at is outside the identity."),
        dict(n=3, description="created_at with an offset and fractional seconds",
             requirements=["DHP-ENV-001", "DHP-ENV-005"],
             input=env(created_at="2025-03-01T13:00:00.123456+01:00"), expected=valid,
             flags=["Metadata"]),
        dict(n=4, description="x- metadata member is allowed outside the identity",
             requirements=["DHP-ENV-005"],
             input=env(**{"x-origin": {"host": "a", "pid": 42}}), expected=valid,
             flags=["Metadata"]),
        dict(n=5, description="envelope with a full budget and an object output schema",
             requirements=["DHP-ENV-001", "DHP-ENV-002", "DHP-ID-003"], input=env(REAL),
             expected=valid),
        dict(n=6, description="id of an intent with astral and private-use keys",
             requirements=["DHP-ENV-002", "DHP-CJ-001"], input=env(UNICODE), expected=valid,
             flags=["Utf16KeyOrder"]),
        dict(n=7, description="intent members in another order keep the same id",
             requirements=["DHP-ENV-002", "DHP-CJ-001"],
             input=env(dict(reversed(list(REAL.items())))), expected=valid),
        dict(n=8, description="output schema using $defs and $ref",
             requirements=["DHP-ENV-004"],
             input=env(intent(output_schema={
                 "$defs": {"n": {"type": "integer"}}, "type": "array",
                 "items": {"$ref": "#/$defs/n"}})), expected=valid),
        dict(n=9, description="float inputs take part in the id in canonical form",
             requirements=["DHP-ENV-002", "DHP-CJ-005"],
             input_text=('{"dhp":"1.0","handoff_id":"' + hid(intent(inputs={"x": 1}))
                         + '","intent":{"dhp":"1.0","task_kind":"t","inputs":{"x":1.0},'
                         '"output_schema":{},"budget":{}}}'),
             expected=valid, flags=["TextOnly"],
             comment="1.0 and 1 have the same canonical form, hence the same id."),
        # --- id mismatch ------------------------------------------------------------------
        dict(n=20, description="handoff_id of another intent",
             requirements=["DHP-ENV-002"],
             input=env(handoff_id=hid(intent(task_kind="u"))),
             expected={"error": "integrity_error"}, flags=["IdMismatch"]),
        dict(n=21, description="handoff_id of all zeros",
             requirements=["DHP-ENV-002"], input=env(handoff_id="sha256:" + "0" * 64),
             expected={"error": "integrity_error"}, flags=["IdMismatch"]),
        dict(n=22, description="id computed over keys sorted by code point",
             requirements=["DHP-ENV-002", "DHP-CJ-001"],
             input=env(UNICODE, handoff_id="sha256:" + hashlib.sha256(json.dumps(
                 UNICODE, sort_keys=True, separators=(",", ":"), ensure_ascii=False
             ).encode()).hexdigest()),
             expected={"error": "integrity_error"}, flags=["IdMismatch", "Utf16KeyOrder"]),
        dict(n=23, description="id computed over the envelope's created_at as well",
             requirements=["DHP-ENV-002", "DHP-ENV-005"],
             input=env(created_at="2025-03-01T12:00:00Z",
                       handoff_id=hid(dict(intent(), created_at="2025-03-01T12:00:00Z"))),
             expected={"error": "integrity_error"}, flags=["IdMismatch", "Metadata"]),
        dict(n=24, description="id computed over the whole envelope instead of the intent",
             requirements=["DHP-ENV-002", "DHP-ID-001"],
             input=env(handoff_id=hid({"dhp": "1.0", "intent": intent()})),
             expected={"error": "integrity_error"}, flags=["IdMismatch"]),
        dict(n=25, description="intent changed after the id was computed",
             requirements=["DHP-ENV-002", "DHP-ID-005"],
             input=env(intent(inputs={"amount": 1000}),
                       handoff_id=hid(intent(inputs={"amount": 10}))),
             expected={"error": "integrity_error"}, flags=["IdMismatch"]),
        # --- version --------------------------------------------------------------------------
        dict(n=30, description="envelope version 2.0", requirements=["DHP-ENV-003"],
             input=env(dhp="2.0"), expected={"error": "unsupported_version"},
             flags=["Version"]),
        dict(n=31, description="intent version 1.1 inside a 1.0 envelope",
             requirements=["DHP-ENV-003"], input=env(intent(dhp="1.1")),
             expected={"error": "unsupported_version"}, flags=["Version"]),
        dict(n=32, description="version 2.0 with members of an unknown future shape",
             requirements=["DHP-ENV-003"],
             input={"dhp": "2.0", "id": "blake3:00", "payload": {}},
             expected={"error": "unsupported_version"}, flags=["Version", "CheckOrder"],
             comment="The version is judged before the shape."),
        dict(n=33, description="version given as the number 1",
             requirements=["DHP-ENV-001", "DHP-GEN-003"], input=env(dhp=1),
             expected={"error": "invalid_input"}, flags=["Shape"]),
        dict(n=34, description="envelope without a dhp member",
             requirements=["DHP-ENV-001", "DHP-GEN-003"], input=without(env(), "dhp"),
             expected={"error": "invalid_input"}, flags=["Shape"]),
        # --- shape ------------------------------------------------------------------------------
        dict(n=40, description="envelope without handoff_id", requirements=["DHP-ENV-001"],
             input=without(env(), "handoff_id"), expected={"error": "invalid_input"},
             flags=["Shape"]),
        dict(n=41, description="envelope without intent", requirements=["DHP-ENV-001"],
             input=without(env(), "intent"), expected={"error": "invalid_input"},
             flags=["Shape"]),
        dict(n=42, description="intent is null", requirements=["DHP-ENV-001"],
             input=env(handoff_id=MINIMAL_ID, intent=None),
             expected={"error": "invalid_input"}, flags=["Shape"]),
        dict(n=43, description="handoff_id in upper-case hex", requirements=["DHP-ENV-001"],
             input=env(handoff_id="sha256:" + MINIMAL_ID[7:].upper()),
             expected={"error": "invalid_input"}, flags=["Shape"]),
        dict(n=44, description="handoff_id without the sha256: prefix",
             requirements=["DHP-ENV-001"], input=env(handoff_id=MINIMAL_ID[7:]),
             expected={"error": "invalid_input"}, flags=["Shape"]),
        dict(n=45, description="handoff_id with 63 hex digits", requirements=["DHP-ENV-001"],
             input=env(handoff_id=MINIMAL_ID[:-1]), expected={"error": "invalid_input"},
             flags=["Shape"]),
        dict(n=46, description="unknown member without the x- prefix",
             requirements=["DHP-ENV-001", "DHP-ENV-005"], input=env(owner="w1"),
             expected={"error": "invalid_input"}, flags=["Shape"]),
        dict(n=47, description="created_at that is not a date-time",
             requirements=["DHP-ENV-001"], input=env(created_at="yesterday"),
             expected={"error": "invalid_input"}, flags=["Shape"]),
        dict(n=48, description="created_at with a date only", requirements=["DHP-ENV-001"],
             input=env(created_at="2025-03-01"), expected={"error": "invalid_input"},
             flags=["Shape"]),
        dict(n=49, description="created_at without a time zone", requirements=["DHP-ENV-001"],
             input=env(created_at="2025-03-01T12:00:00"), expected={"error": "invalid_input"},
             flags=["Shape"]),
        dict(n=50, description="created_at as epoch seconds", requirements=["DHP-ENV-001"],
             input=env(created_at=1740830400), expected={"error": "invalid_input"},
             flags=["Shape"]),
        dict(n=51, description="envelope that is an array", requirements=["DHP-ENV-001"],
             input=[env()], expected={"error": "invalid_input"}, flags=["Shape"]),
        dict(n=52, description="envelope that is a string", requirements=["DHP-ENV-001"],
             input="envelope", expected={"error": "invalid_input"}, flags=["Shape"]),
        dict(n=53, description="intent with a sixth member",
             requirements=["DHP-ENV-001", "DHP-ID-002"],
             input=env(dict(intent(), priority=1)), expected={"error": "invalid_input"},
             flags=["Shape"]),
        dict(n=54, description="intent with an unknown budget key",
             requirements=["DHP-ENV-001", "DHP-ID-003"],
             input=env(intent(budget={"max_tokens": 10})), expected={"error": "invalid_input"},
             flags=["Shape"]),
        dict(n=55, description="intent whose inputs is an array",
             requirements=["DHP-ENV-001", "DHP-ID-002"], input=env(intent(inputs=[])),
             expected={"error": "invalid_input"}, flags=["Shape"]),
        dict(n=56, description="bad budget and a wrong id together give invalid_input",
             requirements=["DHP-ENV-001", "DHP-ID-003"],
             input=env(intent(budget={"max_attempts": 0}), handoff_id="sha256:" + "1" * 64),
             expected={"error": "invalid_input"}, flags=["Shape", "CheckOrder"],
             comment="The shape is judged before the id."),
        dict(n=57, description="task_kind with a NUL character",
             requirements=["DHP-ID-006"], input=env(intent(task_kind="etl\u0000import")),
             expected={"error": "invalid_input"}, flags=["Shape"],
             comment="Server stores cannot hold U+0000 in a text column: refused everywhere."),
        dict(n=58, description="task_kind with an escape (U+001B) character",
             requirements=["DHP-ID-006"], input=env(intent(task_kind="etl\u001bimport")),
             expected={"error": "invalid_input"}, flags=["Shape"]),
        # --- output schema ------------------------------------------------------------------------
        dict(n=60, description="output schema with an unknown type name",
             requirements=["DHP-ENV-004"], input=env(intent(output_schema={"type": "strin"})),
             expected={"error": "invalid_input"}, flags=["OutputSchema"]),
        dict(n=61, description="output schema with a negative minLength",
             requirements=["DHP-ENV-004"], input=env(intent(output_schema={"minLength": -1})),
             expected={"error": "invalid_input"}, flags=["OutputSchema"]),
        dict(n=62, description="output schema whose required is not an array",
             requirements=["DHP-ENV-004"],
             input=env(intent(output_schema={"type": "object", "required": "summary"})),
             expected={"error": "invalid_input"}, flags=["OutputSchema"]),
        # --- values outside the canonical JSON profile -----------------------------------------
        dict(n=70, description="lone surrogate in the inputs",
             requirements=["DHP-CJ-003", "DHP-CJ-008"], input_text=splice('{"s":"\\ud800"}'),
             expected={"error": "invalid_input"}, flags=["TextOnly"]),
        dict(n=71, description="integer 2^53 in the inputs",
             requirements=["DHP-CJ-004", "DHP-CJ-008"],
             input_text=splice('{"n":9007199254740992}'), expected={"error": "invalid_input"},
             flags=["TextOnly"]),
        dict(n=72, description="duplicate handoff_id member",
             requirements=["DHP-CJ-001", "DHP-CJ-008"],
             input_text=('{"dhp":"1.0","handoff_id":"' + MINIMAL_ID + '","handoff_id":"'
                         + MINIMAL_ID + '","intent":{"dhp":"1.0","task_kind":"t","inputs":{},'
                         '"output_schema":{},"budget":{}}}'),
             expected={"error": "invalid_input"}, flags=["TextOnly"]),
        dict(n=73, description="NaN in the inputs", requirements=["DHP-CJ-006", "DHP-CJ-008"],
             input_text=splice('{"x":NaN}'), expected={"error": "invalid_input"},
             flags=["TextOnly"]),
        # --- the order of the checks (DHP-ENV-007) ------------------------------------------
        dict(n=74, description="duplicate dhp member with two different versions",
             requirements=["DHP-ENV-007", "DHP-CJ-001"],
             input_text=('{"dhp":"2.0","dhp":"1.0","handoff_id":"' + MINIMAL_ID + '",'
                         '"intent":{"dhp":"1.0","task_kind":"t","inputs":{},'
                         '"output_schema":{},"budget":{}}}'),
             expected={"error": "invalid_input"}, flags=["TextOnly", "CheckOrder"],
             comment="Text with a duplicate member has no value, so no version can be read "
                     "from it: the JSON check comes before the version."),
        dict(n=75, description="version 2.0 with a lone surrogate in the inputs",
             requirements=["DHP-ENV-007", "DHP-ENV-003"],
             input_text=splice('{"s":"\\ud800"}').replace('{"dhp":"1.0","handoff_id"',
                                                            '{"dhp":"2.0","handoff_id"', 1),
             expected={"error": "unsupported_version"}, flags=["TextOnly", "CheckOrder"],
             comment="The version is judged before the values' profile, which a later "
                     "version may change."),
        dict(n=76, description="version 2.0 with the integer 2^53 in the inputs",
             requirements=["DHP-ENV-007", "DHP-ENV-003"],
             input_text=splice('{"n":9007199254740992}').replace(
                 '{"dhp":"1.0","handoff_id"', '{"dhp":"2.0","handoff_id"', 1),
             expected={"error": "unsupported_version"}, flags=["TextOnly", "CheckOrder"]),
        dict(n=77, description="version 2.0 with a NaN literal in the inputs",
             requirements=["DHP-ENV-007", "DHP-CJ-006"],
             input_text=splice('{"x":NaN}').replace('{"dhp":"1.0","handoff_id"',
                                                   '{"dhp":"2.0","handoff_id"', 1),
             expected={"error": "invalid_input"}, flags=["TextOnly", "CheckOrder"],
             comment="NaN is not JSON text at all: refused before the version is read."),
        dict(n=78, description="an invalid created_at and a wrong id together give "
                               "invalid_input", requirements=["DHP-ENV-007", "DHP-ENV-008"],
             input=env(created_at="2025-02-30T12:00:00Z", handoff_id="sha256:" + "2" * 64),
             expected={"error": "invalid_input"}, flags=["CheckOrder", "Calendar"]),
        # --- created_at names a real instant (DHP-ENV-008) ------------------------------------
        *[dict(n=n, description=f"created_at {what}", requirements=["DHP-ENV-008"],
               input=env(created_at=value), expected={"valid": True}, flags=["Metadata"])
          for n, what, value in [
              (80, "on 29 February of a leap year", "2024-02-29T12:00:00Z"),
              (81, "on 29 February 2000 (divisible by 400)", "2000-02-29T00:00:00Z"),
              (82, "with lowercase t and z", "2025-03-01t12:00:00z"),
              (83, "with fractional seconds and a negative offset",
               "2024-12-31T23:59:59.999-23:59"),
          ]],
        *[dict(n=n, description=f"created_at {what}", requirements=["DHP-ENV-008"],
               input=env(created_at=value), expected={"error": "invalid_input"},
               flags=["Calendar"])
          for n, what, value in [
              (85, "on 30 February", "2025-02-30T12:00:00Z"),
              (86, "on 29 February of a year that is not a leap year", "2025-02-29T12:00:00Z"),
              (87, "on 29 February 2100 (divisible by 100, not by 400)",
               "2100-02-29T00:00:00Z"),
              (88, "on 31 April", "2025-04-31T00:00:00Z"),
              (89, "in month 13", "2025-13-01T00:00:00Z"),
              (90, "at hour 24", "2025-03-01T24:00:00Z"),
              (91, "at minute 60", "2025-03-01T12:60:00Z"),
              (92, "with second 60 that is not 23:59:60 UTC", "2025-03-01T23:58:60Z"),
              (93, "with an offset of 24 hours", "2025-03-01T12:00:00+24:00"),
              (94, "on day 00", "2025-03-00T12:00:00Z"),
          ]],
    ]


def build(case: dict) -> dict:
    test: dict = {"id": f"envelope-{case['n']:03d}", "description": case["description"],
                  "requirements": case["requirements"]}
    raw = case.get("input_text")
    if "input" in case:
        test["input"] = case["input"]
    elif case["expected"].get("valid"):
        test["input"] = json.loads(raw)
    else:
        test["input"] = None  # no value in the profile: refused when parsed
    if raw is not None:
        test["input_text"] = raw
    test["expected"] = case["expected"]
    for key in ("comment", "flags"):
        if key in case:
            test[key] = case[key]
    return test


def render() -> str:
    all_cases = cases()
    numbers = [c["n"] for c in all_cases]
    if len(set(numbers)) != len(numbers):
        raise SystemExit("duplicate case numbers")
    doc = {
        "suite": "envelope",
        "description": (
            "Envelopes, valid and invalid. Parse input_text when present (it is authoritative), "
            "else take input; check the envelope; expect {\"valid\": true} or the error code. "
            "Checks run in the order of DHP-ENV-007: JSON text (duplicate names, NaN), version, "
            "the values' JSON profile, shape (created_at included), output schema, id."),
        "notes": NOTES,
        "tests": [build(c) for c in all_cases],
    }
    return json.dumps(doc, ensure_ascii=False, indent=2) + "\n"


if __name__ == "__main__":
    from vector_files import main  # a sibling in tools/, on sys.path when run as a script

    sys.exit(main({OUT: render()}, sys.argv[1:], __file__))
