"""Generate vectors/identity.json.

Expected canonical forms and handoff ids come from the independent `rfc8785` package (and,
when `node` is installed, are cross-checked with a ten-line JCS over JavaScript's own
JSON.parse/JSON.stringify); this script never imports `dhp`, so the vectors judge the
reference rather than echo it. Refusals that a canonicaliser cannot judge (intent shape,
version, parser-level problems) are written by hand, each with a comment saying why.

Ids are frozen: every case carries its number. Never renumber or reuse one; retire a case by
deleting it and leave its number unused.

    python tools/gen_identity_vectors.py          # rewrite vectors/identity.json
    python tools/gen_identity_vectors.py --check  # exit 1 if the file is out of date
"""

from __future__ import annotations

import hashlib
import json
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import rfc8785

OUT = Path(__file__).resolve().parent.parent / "vectors" / "identity.json"

NOTES = {
    "CheckOrder": "Several things are wrong; the code shows which check comes first "
                  "(DHP-ENV-007).",
    "Utf16KeyOrder": "Members sorted by code point or UTF-8 bytes instead of UTF-16 code units "
                     "put astral keys after BMP private-use keys: a different id for the same "
                     "intent in another language.",
    "EscapeSet": "Escaping too much (/, DEL, U+2028, non-ASCII, upper-case hex) or too little "
                 "changes the canonical bytes.",
    "NumberFormat": "A float written other than by ECMAScript Number.prototype.toString "
                    "(RFC 8785 section 3.2.2.3) changes the canonical bytes.",
    "IntegerRange": "Integers beyond +-(2^53-1) cannot be represented exactly in every language "
                    "(I-JSON); the boundary itself is accepted.",
    "TextOnly": "The point of the test is in input_text; a parser that has already turned the "
                "text into a value (as input shows) has lost it.",
    "LoneSurrogate": "A lone UTF-16 surrogate is not a Unicode scalar value and cannot be "
                     "encoded in UTF-8.",
    "DuplicateKey": "Duplicate member names are resolved differently by different parsers "
                    "(first wins, last wins, error), so two readers would see two intents.",
    "NonFinite": "NaN, Infinity and overflowing literals have no JSON number form.",
    "IntentShape": "The intent has exactly five members with fixed types; anything else is "
                   "refused before an id is computed.",
    "Version": "Only \"1.0\" is this protocol version; another version string is refused as "
               "unsupported, not as malformed.",
}

CJ_REFUSE = ["DHP-CJ-008"]


def intent(**over) -> dict:
    out = {"dhp": "1.0", "task_kind": "t", "inputs": {}, "output_schema": {}, "budget": {}}
    out.update(over)
    return out


def text(inputs: str = "{}", budget: str = "{}", task_kind: str = '"t"') -> str:
    """Intent text with raw JSON spliced into inputs / budget / task_kind."""
    return ('{"dhp":"1.0","task_kind":' + task_kind + ',"inputs":' + inputs
            + ',"output_schema":{},"budget":' + budget + "}")


def js_number(text: str) -> int | float:
    """Read an integer literal as JavaScript does: beyond 2^53-1 it is the nearest double."""
    value = int(text)
    return value if abs(value) <= 2**53 - 1 else float(value)


def double(hex_bits: str) -> float:
    return struct.unpack(">d", bytes.fromhex(hex_bits))[0]


def num(value_text: str) -> str:
    return text(inputs='{"n":' + value_text + "}")


# RFC 8785 Appendix B: IEEE-754 bit patterns and their canonical text.
RFC8785_NUMBERS = [
    (50, "0000000000000001", "smallest subnormal 5e-324"),
    (51, "8000000000000001", "negative smallest subnormal -5e-324"),
    (52, "7fefffffffffffff", "largest double 1.7976931348623157e308"),
    (53, "ffefffffffffffff", "most negative double -1.7976931348623157e308"),
    (54, "4340000000000000", "2^53 as a float"),
    (55, "4430000000000000", "2^68 as a float, written with 21 digits"),
    (56, "44b52d02c7e14af5", "9.999999999999997e22, just below 1e23"),
    (57, "44b52d02c7e14af6", "1e23"),
    (58, "444b1ae4d6e2ef4f", "999999999999999900000, the largest plain-digit form"),
    (59, "444b1ae4d6e2ef50", "1e21, the first exponent form"),
    (60, "3eb0c6f7a0b5ed8c", "9.999999999999997e-7, just below 1e-6"),
    (61, "41b3de4355555553", "333333333.3333332"),
    (62, "41b3de4355555557", "333333333.33333343"),
    (63, "becbf647612f3696", "-0.0000033333333333333333"),
    (64, "43143ff3c1cb0959", "1424953923781206.2"),
]

# Appendix B samples that DHP-CJ-004 refuses: integral values between 2^53-1 and 1e21.
PROFILE_REFUSED = {54, 55, 58}

RFC8785_SORT_SAMPLE = {
    "\u20ac": "Euro Sign", "\r": "Carriage Return", "\ufb33": "Hebrew Letter Dalet With Dagesh",
    "1": "One", "\U0001f600": "Emoji: Grinning Face", "\u0080": "Control",
    "\u00f6": "Latin Small Letter O With Diaeresis",
}

RFC8785_SAMPLE_TEXT = (
    '{"numbers":[333333333.33333329,1E30,4.50,2e-3,0.000000000000000000000000001],'
    '"string":"\\u20ac$\\u000F\\u000aA\'\\u0042\\u0022\\u005c\\\\\\"\\/",'
    '"literals":[null,true,false]}'
)


def nested(depth: int):
    value: object = "bottom"
    for level in range(depth):
        value = [value] if level % 2 else {"d": value}
    return value


ALL_CONTROLS = "".join(chr(c) for c in range(0x20))


def cases() -> list[dict]:
    return [
        # --- structure, key order, empty values ---------------------------------------
        dict(n=1, description="minimal intent with empty inputs, output schema and budget",
             requirements=["DHP-ID-001", "DHP-CJ-001"], input=intent()),
        dict(n=2, description="members of the intent given in reverse order",
             requirements=["DHP-ID-001", "DHP-CJ-001"],
             input=dict(reversed(list(intent().items()))),
             comment="Same canonical form and id as identity-001."),
        dict(n=3, description="inputs members given out of order are sorted",
             requirements=["DHP-ID-001", "DHP-CJ-001"],
             input=intent(inputs={"b": 1, "a": 2, "c": {"z": 1, "y": 2}})),
        dict(n=4, description="pretty-printed intent text loses its whitespace",
             requirements=["DHP-ID-001", "DHP-CJ-001"],
             input_text='{\n  "dhp" : "1.0",\n\t"task_kind": "t" ,\r\n'
                        '  "inputs": { "a" : [ 1 , 2 ] },\n'
                        '  "output_schema": {},  "budget": {}\n}\n',
             flags=["TextOnly"]),
        dict(n=5, description="empty object, empty array and empty string values",
             requirements=["DHP-ID-001", "DHP-CJ-001"],
             input=intent(inputs={"o": {}, "a": [], "s": "", "": ""})),
        dict(n=6, description="null, true and false values",
             requirements=["DHP-ID-001", "DHP-CJ-001"],
             input=intent(inputs={"n": None, "t": True, "f": False, "l": [None, True, False]})),
        dict(n=7, description="keys that look like numbers sort as strings",
             requirements=["DHP-ID-001", "DHP-CJ-001"],
             input=intent(inputs={"10": 0, "9": 0, "1": 0, "a": 0, "A": 0, "aa": 0, "_": 0})),
        dict(n=8, description="a hundred levels of alternating objects and arrays",
             requirements=["DHP-ID-001", "DHP-CJ-001"],
             input=intent(inputs={"deep": nested(100)})),
        dict(n=9, description="array order is kept, not sorted",
             requirements=["DHP-ID-001", "DHP-CJ-001"],
             input=intent(inputs={"a": [3, 1, 2, "b", "a"]})),
        dict(n=10, description="a realistic intent with a budget and an output schema",
             requirements=["DHP-ID-001", "DHP-ID-003", "DHP-CJ-001"],
             input=intent(task_kind="summarise-report",
                          inputs={"url": "https://example.org/r.pdf", "pages": [1, 2, 3]},
                          output_schema={"type": "object", "required": ["summary"],
                                         "properties": {"summary": {"type": "string"}}},
                          budget={"max_attempts": 3, "max_steps": 100, "max_spend": 2.5,
                                  "max_wall_clock_s": 3600})),
        # --- Unicode keys and values ---------------------------------------------------
        dict(n=11, description="astral key sorts before a BMP private-use key U+E000",
             requirements=["DHP-ID-001", "DHP-CJ-001"],
             input=intent(inputs={"\ue000": "private", "\U0001f600": "emoji"}),
             flags=["Utf16KeyOrder"],
             comment="U+1F600 is D83D DE00 in UTF-16, below E000; by code point it is above."),
        dict(n=12, description="U+10FFFF key sorts before U+F8FF, the last private-use "
                               "character of the BMP",
             requirements=["DHP-ID-001", "DHP-CJ-001"],
             input=intent(inputs={"\uf8ff": 1, "\U0010ffff": 2}), flags=["Utf16KeyOrder"]),
        dict(n=13, description="U+10000 key sorts before U+FFFF and U+E000 but after U+D7FF",
             requirements=["DHP-ID-001", "DHP-CJ-001"],
             input=intent(inputs={"\uffff": 1, "\ue000": 2, "\U00010000": 3, "\ud7ff": 4}),
             flags=["Utf16KeyOrder"]),
        dict(n=14, description="the RFC 8785 sorting example as inputs",
             requirements=["DHP-ID-001", "DHP-CJ-001"],
             input=intent(inputs=RFC8785_SORT_SAMPLE), flags=["Utf16KeyOrder"]),
        dict(n=15, description="astral characters in values are written as literal UTF-8",
             requirements=["DHP-ID-001", "DHP-CJ-001", "DHP-CJ-002"],
             input=intent(inputs={"s": "\U0001f600 \U00010000 \U0010ffff"}),
             flags=["EscapeSet"]),
        dict(n=16, description="surrogate pairs escaped in the text become literal characters",
             requirements=["DHP-ID-001", "DHP-CJ-002"],
             input_text=text(inputs='{"s":"\\uD83D\\uDE00\\ud800\\udc00\\uDBFF\\uDFFF"}'),
             flags=["EscapeSet", "TextOnly"]),
        dict(n=17, description="keys mixing private-use, astral, Latin and CJK characters",
             requirements=["DHP-ID-001", "DHP-CJ-001"],
             input=intent(inputs={"\ue000x": 1, "\U0001f600x": 2, "\u00e9": 3, "\u4e2d": 4,
                                  "e": 5, "\U0001f600": 6}),
             flags=["Utf16KeyOrder"]),
        dict(n=18, description="non-ASCII task kind and BMP specials U+FEFF, U+FFFD, U+FFFF",
             requirements=["DHP-ID-001", "DHP-CJ-002"],
             input=intent(task_kind="r\u00e9sum\u00e9-\u8981\u7d04",
                          inputs={"s": "\ufeff\ufffd\uffff"}),
             flags=["EscapeSet"]),
        # --- escapes --------------------------------------------------------------------
        dict(n=19, description="every control character U+0000 to U+001F in a value",
             requirements=["DHP-ID-001", "DHP-CJ-002"],
             input=intent(inputs={"s": ALL_CONTROLS}), flags=["EscapeSet"],
             comment="Short escapes for 08 09 0A 0C 0D, lowercase \\u00xx for the rest."),
        dict(n=20, description="control characters in keys are escaped and sorted by code unit",
             requirements=["DHP-ID-001", "DHP-CJ-001", "DHP-CJ-002"],
             input=intent(inputs={"\u001f": 1, "\n": 2, "\u0000": 3, " ": 4}),
             flags=["EscapeSet"]),
        dict(n=21, description="DEL U+007F and C1 control U+0080 stay literal",
             requirements=["DHP-ID-001", "DHP-CJ-002"],
             input=intent(inputs={"s": "\u007f\u0080\u009f"}), flags=["EscapeSet"]),
        dict(n=22, description="line and paragraph separators U+2028 and U+2029 stay literal",
             requirements=["DHP-ID-001", "DHP-CJ-002"],
             input=intent(inputs={"\u2028": "\u2029"}), flags=["EscapeSet"]),
        dict(n=23, description="solidus is not escaped, even when the text escapes it",
             requirements=["DHP-ID-001", "DHP-CJ-002"],
             input_text=text(inputs='{"url":"https:\\/\\/example.org/a"}'),
             flags=["EscapeSet", "TextOnly"]),
        dict(n=24, description="quotation mark and reverse solidus are escaped",
             requirements=["DHP-ID-001", "DHP-CJ-002"],
             input=intent(inputs={'"\\': 'say "hi" \\ bye \\\\'}), flags=["EscapeSet"]),
        dict(n=25, description="needless escapes in the text become literal characters",
             requirements=["DHP-ID-001", "DHP-CJ-002"],
             input_text=text(inputs='{"\\u0041":"\\u00e9\\u20AC\\u001F\\u007f\\u2028"}'),
             flags=["EscapeSet", "TextOnly"],
             comment="\\u0041 is A, \\u001F is written back as \\u001f (lowercase)."),
        dict(n=26, description="the RFC 8785 example object as inputs text",
             requirements=["DHP-ID-001", "DHP-CJ-001", "DHP-CJ-002", "DHP-CJ-005"],
             input_text=text(inputs=RFC8785_SAMPLE_TEXT),
             flags=["EscapeSet", "NumberFormat", "TextOnly"]),
        # --- integers ---------------------------------------------------------------------
        dict(n=27, description="largest safe integer 2^53-1 is accepted",
             requirements=["DHP-ID-001", "DHP-CJ-004"],
             input_text=num("9007199254740991"), flags=["IntegerRange"]),
        dict(n=28, description="smallest safe integer -(2^53-1) is accepted",
             requirements=["DHP-ID-001", "DHP-CJ-004"],
             input_text=num("-9007199254740991"), flags=["IntegerRange"]),
        dict(n=29, description="integer 2^53 is refused",
             requirements=["DHP-CJ-004"] + CJ_REFUSE, input_text=num("9007199254740992"),
             error="invalid_input", flags=["IntegerRange", "TextOnly"]),
        dict(n=30, description="integer -(2^53) is refused",
             requirements=["DHP-CJ-004"] + CJ_REFUSE, input_text=num("-9007199254740992"),
             error="invalid_input", flags=["IntegerRange", "TextOnly"]),
        dict(n=31, description="integer minus zero is written 0",
             requirements=["DHP-ID-001", "DHP-CJ-005"], input_text=num("-0"),
             flags=["NumberFormat", "TextOnly"]),
        dict(n=32, description="a 30-digit integer is a double from 1e21 up",
             requirements=["DHP-ID-001", "DHP-CJ-004", "DHP-CJ-005"],
             input_text=num("123456789012345678901234567890"),
             flags=["IntegerRange", "TextOnly"],
             comment="Beyond 1e21 the canonical text is in exponent form, so the value is "
                     "accepted as the nearest double."),
        # --- floats ------------------------------------------------------------------------
        dict(n=33, description="float minus zero is written 0",
             requirements=["DHP-ID-001", "DHP-CJ-005"], input_text=num("-0.0"),
             flags=["NumberFormat", "TextOnly"]),
        dict(n=34, description="float 1.0 is written 1",
             requirements=["DHP-ID-001", "DHP-CJ-005"], input_text=num("1.0"),
             flags=["NumberFormat", "TextOnly"]),
        dict(n=35, description="1e21 is written 1e+21",
             requirements=["DHP-ID-001", "DHP-CJ-005"], input_text=num("1e21"),
             flags=["NumberFormat", "TextOnly"]),
        dict(n=36, description="1e20 is refused as an integral value beyond 2^53",
             requirements=["DHP-CJ-004"] + CJ_REFUSE, input_text=num("1e20"),
             error="invalid_input", flags=["IntegerRange", "TextOnly"],
             comment="Written with all its digits it would read back as an integer outside "
                     "the I-JSON range (DHP-CJ-004)."),
        dict(n=37, description="1e-7 is written 1e-7",
             requirements=["DHP-ID-001", "DHP-CJ-005"], input_text=num("1e-7"),
             flags=["NumberFormat", "TextOnly"]),
        dict(n=38, description="0.000001 is written in plain digits",
             requirements=["DHP-ID-001", "DHP-CJ-005"], input_text=num("0.000001"),
             flags=["NumberFormat", "TextOnly"]),
        dict(n=39, description="1E2 with capital E is the float 100",
             requirements=["DHP-ID-001", "DHP-CJ-005"], input_text=num("1E2"),
             flags=["NumberFormat", "TextOnly"]),
        dict(n=40, description="1e+2 with explicit plus is the float 100",
             requirements=["DHP-ID-001", "DHP-CJ-005"], input_text=num("1e+2"),
             flags=["NumberFormat", "TextOnly"]),
        dict(n=41, description="0.1 keeps its shortest form",
             requirements=["DHP-ID-001", "DHP-CJ-005"], input_text=num("0.1"),
             flags=["NumberFormat"]),
        dict(n=42, description="100.0 is the float 100",
             requirements=["DHP-ID-001", "DHP-CJ-005"], input_text=num("100.0"),
             flags=["NumberFormat", "TextOnly"]),
        dict(n=43, description="0.1 plus 0.2 keeps all seventeen digits",
             requirements=["DHP-ID-001", "DHP-CJ-005"], input_text=num("0.30000000000000004"),
             flags=["NumberFormat"]),
        dict(n=44, description="9007199254740993.0 is refused as an integral value beyond 2^53",
             requirements=["DHP-CJ-004"] + CJ_REFUSE,
             input_text=num("9007199254740993.0"), error="invalid_input",
             flags=["IntegerRange", "TextOnly"],
             comment="Refused by value: its canonical text would be plain digits that read "
                     "back as an integer outside the I-JSON range."),
        dict(n=45, description="1e-400 underflows to zero",
             requirements=["DHP-ID-001", "DHP-CJ-005"], input_text=num("1e-400"),
             flags=["NumberFormat", "TextOnly"],
             comment="The nearest double to 1e-400 is 0, as in ECMAScript."),
        dict(n=46, description="1.5e300 is written 1.5e+300",
             requirements=["DHP-ID-001", "DHP-CJ-005"], input_text=num("15e299"),
             flags=["NumberFormat", "TextOnly"]),
        dict(n=47, description="budget numbers written as floats canonicalise like integers",
             requirements=["DHP-ID-001", "DHP-ID-003", "DHP-CJ-005"],
             input_text=text(budget='{"max_attempts":3.0,"max_spend":0.50,'
                                    '"max_wall_clock_s":36e2}'),
             flags=["NumberFormat", "TextOnly"],
             comment="JSON Schema counts 3.0 as an integer, so the budget is valid."),
        *[dict(n=n, description=f"RFC 8785 number sample: {what}",
               requirements=["DHP-ID-001", "DHP-CJ-005"], input_text=num(repr(double(bits))),
               flags=["NumberFormat"])
          for n, bits, what in RFC8785_NUMBERS if n not in PROFILE_REFUSED],
        *[dict(n=n, description=f"RFC 8785 number sample refused by the profile: {what}",
               requirements=["DHP-CJ-004"] + CJ_REFUSE, input_text=num(repr(double(bits))),
               error="invalid_input", flags=["IntegerRange"],
               comment="An integral value in (2^53-1, 1e21): the DHP profile refuses it "
                       "(spec/identity.md, DHP-CJ-004).")
          for n, bits, what in RFC8785_NUMBERS if n in PROFILE_REFUSED],
        # --- refused: non-finite, surrogates, duplicates ---------------------------------
        dict(n=70, description="NaN literal is refused",
             requirements=["DHP-CJ-006"] + CJ_REFUSE, input_text=num("NaN"),
             error="invalid_input", flags=["NonFinite", "TextOnly"],
             comment="Not JSON at all; lenient parsers (Python, JSON5) accept it."),
        dict(n=71, description="Infinity literal is refused",
             requirements=["DHP-CJ-006"] + CJ_REFUSE, input_text=num("Infinity"),
             error="invalid_input", flags=["NonFinite", "TextOnly"]),
        dict(n=72, description="negative Infinity literal is refused",
             requirements=["DHP-CJ-006"] + CJ_REFUSE, input_text=num("-Infinity"),
             error="invalid_input", flags=["NonFinite", "TextOnly"]),
        dict(n=73, description="1e400 overflows and is refused",
             requirements=["DHP-CJ-006"] + CJ_REFUSE, input_text=num("1e400"),
             error="invalid_input", flags=["NonFinite", "TextOnly"],
             comment="Parses to infinity in most languages; infinity has no JSON form."),
        dict(n=74, description="-1e400 overflows and is refused",
             requirements=["DHP-CJ-006"] + CJ_REFUSE, input_text=num("-1e400"),
             error="invalid_input", flags=["NonFinite", "TextOnly"]),
        dict(n=75, description="lone high surrogate in a value is refused",
             requirements=["DHP-CJ-003"] + CJ_REFUSE,
             input_text=text(inputs='{"s":"a\\ud800b"}'), error="invalid_input",
             flags=["LoneSurrogate", "TextOnly"],
             comment="Escaped in the text; it has no UTF-8 encoding."),
        dict(n=76, description="lone low surrogate at the end of a value is refused",
             requirements=["DHP-CJ-003"] + CJ_REFUSE,
             input_text=text(inputs='{"s":"a\\udc00"}'), error="invalid_input",
             flags=["LoneSurrogate", "TextOnly"]),
        dict(n=77, description="surrogates in reversed order are refused",
             requirements=["DHP-CJ-003"] + CJ_REFUSE,
             input_text=text(inputs='{"s":"\\udc00\\ud800"}'), error="invalid_input",
             flags=["LoneSurrogate", "TextOnly"]),
        dict(n=78, description="lone surrogate in a key is refused",
             requirements=["DHP-CJ-003"] + CJ_REFUSE,
             input_text=text(inputs='{"\\ud800":1}'), error="invalid_input",
             flags=["LoneSurrogate", "TextOnly"]),
        dict(n=79, description="lone surrogate in the task kind is refused",
             requirements=["DHP-CJ-003"] + CJ_REFUSE,
             input_text=text(task_kind='"t\\udfff"'), error="invalid_input",
             flags=["LoneSurrogate", "TextOnly"]),
        dict(n=80, description="duplicate member name in inputs is refused",
             requirements=["DHP-CJ-001"] + CJ_REFUSE,
             input_text=text(inputs='{"a":1,"a":2}'), error="invalid_input",
             flags=["DuplicateKey", "TextOnly"]),
        dict(n=81, description="duplicate dhp member of the intent is refused",
             requirements=["DHP-CJ-001"] + CJ_REFUSE,
             input_text='{"dhp":"1.0","dhp":"1.0","task_kind":"t","inputs":{},'
                        '"output_schema":{},"budget":{}}',
             error="invalid_input", flags=["DuplicateKey", "TextOnly"]),
        dict(n=82, description="member names equal only after unescaping are duplicates",
             requirements=["DHP-CJ-001"] + CJ_REFUSE,
             input_text=text(inputs='{"a":1,"\\u0061":2}'), error="invalid_input",
             flags=["DuplicateKey", "TextOnly"]),
        # --- refused: intent shape, budget, version --------------------------------------
        dict(n=90, description="inputs given as an array is refused",
             requirements=["DHP-ID-002"], input=intent(inputs=[1, 2]), error="invalid_input",
             flags=["IntentShape"],
             comment="The intent schema requires an object; rfc8785 would canonicalise it."),
        dict(n=91, description="inputs given as a string is refused",
             requirements=["DHP-ID-002"], input=intent(inputs="x"), error="invalid_input",
             flags=["IntentShape"]),
        dict(n=92, description="output schema given as an array is refused",
             requirements=["DHP-ID-002"], input=intent(output_schema=[]),
             error="invalid_input", flags=["IntentShape"]),
        dict(n=93, description="budget given as null is refused",
             requirements=["DHP-ID-002", "DHP-ID-003"], input=intent(budget=None),
             error="invalid_input", flags=["IntentShape"]),
        dict(n=94, description="an array instead of an intent object is refused",
             requirements=["DHP-ID-002"], input=[intent()], error="invalid_input",
             flags=["IntentShape"]),
        dict(n=95, description="intent without its budget member is refused",
             requirements=["DHP-ID-002"],
             input={k: v for k, v in intent().items() if k != "budget"},
             error="invalid_input", flags=["IntentShape"]),
        dict(n=96, description="intent with a sixth member is refused",
             requirements=["DHP-ID-002"], input=intent(created_at="2025-01-01T00:00:00Z"),
             error="invalid_input", flags=["IntentShape"],
             comment="Metadata belongs in the envelope, outside the identity."),
        dict(n=97, description="empty task kind is refused",
             requirements=["DHP-ID-002"], input=intent(task_kind=""), error="invalid_input",
             flags=["IntentShape"]),
        dict(n=98, description="task kind of 200 characters is accepted",
             requirements=["DHP-ID-001", "DHP-ID-002"], input=intent(task_kind="k" * 200)),
        dict(n=99, description="task kind of 201 characters is refused",
             requirements=["DHP-ID-002"], input=intent(task_kind="k" * 201),
             error="invalid_input", flags=["IntentShape"]),
        dict(n=100, description="unknown budget key is refused",
             requirements=["DHP-ID-003"], input=intent(budget={"max_retries": 3}),
             error="invalid_input", flags=["IntentShape"]),
        dict(n=101, description="max_attempts of 0 is refused",
             requirements=["DHP-ID-003"], input=intent(budget={"max_attempts": 0}),
             error="invalid_input", flags=["IntentShape"]),
        dict(n=102, description="fractional max_steps is refused",
             requirements=["DHP-ID-003"], input=intent(budget={"max_steps": 2.5}),
             error="invalid_input", flags=["IntentShape"]),
        dict(n=103, description="negative max_spend is refused",
             requirements=["DHP-ID-003"], input=intent(budget={"max_spend": -1}),
             error="invalid_input", flags=["IntentShape"]),
        dict(n=104, description="max_wall_clock_s of 0 is refused",
             requirements=["DHP-ID-003"], input=intent(budget={"max_wall_clock_s": 0}),
             error="invalid_input", flags=["IntentShape"]),
        dict(n=105, description="max_spend of 0 is accepted",
             requirements=["DHP-ID-001", "DHP-ID-003"], input=intent(budget={"max_spend": 0})),
        dict(n=106, description="output schema that is not a valid JSON Schema is refused",
             requirements=["DHP-ENV-004"], input=intent(output_schema={"type": 5}),
             error="invalid_input", flags=["IntentShape"]),
        dict(n=107, description="version 2.0 is refused as unsupported",
             requirements=["DHP-ENV-003", "DHP-GEN-003"], input=intent(dhp="2.0"),
             error="unsupported_version", flags=["Version"]),
        dict(n=108, description="version 1.0.0 is refused as unsupported",
             requirements=["DHP-ENV-003", "DHP-GEN-003"], input=intent(dhp="1.0.0"),
             error="unsupported_version", flags=["Version"]),
        dict(n=109, description="version given as the number 1.0 is refused as malformed",
             requirements=["DHP-GEN-003", "DHP-ID-002"], input=intent(dhp=1.0),
             error="invalid_input", flags=["IntentShape"],
             comment="Only a string names a version; a number is a malformed member."),
        dict(n=110, description="intent without a dhp member is refused",
             requirements=["DHP-GEN-003", "DHP-ID-002"],
             input={k: v for k, v in intent().items() if k != "dhp"},
             error="invalid_input", flags=["IntentShape"]),
        # --- the order of the checks (DHP-ENV-007) -----------------------------------------
        dict(n=111, description="duplicate dhp member with two different versions is refused "
                                "as malformed", requirements=["DHP-ENV-007", "DHP-CJ-001"],
             input_text='{"dhp":"2.0","dhp":"1.0","task_kind":"t","inputs":{},'
                        '"output_schema":{},"budget":{}}',
             error="invalid_input", flags=["DuplicateKey", "TextOnly", "CheckOrder"],
             comment="Text with a duplicate member has no value: no version can be read."),
        dict(n=112, description="version 2.0 with a lone surrogate is refused as unsupported",
             requirements=["DHP-ENV-007", "DHP-ENV-003"],
             input_text=text(inputs='{"s":"\\ud800"}').replace('"dhp":"1.0"', '"dhp":"2.0"'),
             error="unsupported_version", flags=["Version", "TextOnly", "CheckOrder"],
             comment="The version comes before the values' profile, which a later version "
                     "may change."),
        dict(n=113, description="version 2.0 with the integer 2^53 is refused as unsupported",
             requirements=["DHP-ENV-007", "DHP-ENV-003"],
             input_text=text(inputs='{"n":9007199254740992}').replace('"dhp":"1.0"',
                                                                    '"dhp":"2.0"'),
             error="unsupported_version", flags=["Version", "TextOnly", "CheckOrder"]),
        dict(n=114, description="version 2.0 with a duplicate member in inputs is refused as "
                                "malformed", requirements=["DHP-ENV-007", "DHP-CJ-001"],
             input_text=text(inputs='{"a":1,"a":2}').replace('"dhp":"1.0"', '"dhp":"2.0"'),
             error="invalid_input", flags=["DuplicateKey", "TextOnly", "CheckOrder"]),
        dict(n=115, description="version 2.0 with a sixth member is refused as unsupported",
             requirements=["DHP-ENV-007", "DHP-ENV-003"],
             input=dict(intent(dhp="2.0"), priority=1),
             error="unsupported_version", flags=["Version", "CheckOrder"],
             comment="The version comes before the shape."),
    ]


def build(case: dict) -> dict:
    test: dict = {"id": f"identity-{case['n']:03d}", "description": case["description"],
                  "requirements": case["requirements"]}
    raw = case.get("input_text")
    if "input" in case:
        test["input"] = case["input"]
    elif "error" in case:
        test["input"] = None  # the text has no value in the profile: refused at parse time
    else:
        test["input"] = json.loads(raw, parse_int=js_number)
    if raw is not None:
        test["input_text"] = raw
    if "error" in case:
        test["expected"] = {"error": case["error"]}
    else:
        canonical = rfc8785.dumps(test["input"])
        test["expected"] = {"canonical": canonical.decode("utf-8"),
                            "handoff_id": "sha256:" + hashlib.sha256(canonical).hexdigest()}
    for key in ("comment", "flags"):
        if key in case:
            test[key] = case[key]
    return test


JS_JCS = r"""
const c = v => v === null || typeof v !== "object" ? JSON.stringify(v)
  : Array.isArray(v) ? "[" + v.map(c).join(",") + "]"
  : "{" + Object.keys(v).sort().map(k => JSON.stringify(k) + ":" + c(v[k])).join(",") + "}";
const texts = JSON.parse(require("fs").readFileSync(0, "utf8"));
process.stdout.write(JSON.stringify(texts.map(t => c(JSON.parse(t)))));
"""


def cross_check_with_node(tests: list[dict]) -> None:
    """A third opinion: ECMAScript's own number formatting and UTF-16 sort."""
    node = shutil.which("node")
    if node is None:
        print("node not found: skipping the JavaScript cross-check", file=sys.stderr)
        return
    valid = [t for t in tests if "canonical" in t["expected"]]
    texts = [t.get("input_text") or json.dumps(t["input"]) for t in valid]
    out = subprocess.run([node, "-e", JS_JCS], input=json.dumps(texts), text=True,
                         capture_output=True, check=True).stdout
    for test, js in zip(valid, json.loads(out), strict=True):
        if js != test["expected"]["canonical"]:
            raise SystemExit(f"{test['id']}: rfc8785 gives {test['expected']['canonical']!r}, "
                             f"JavaScript gives {js!r}")


def render() -> str:
    all_cases = cases()
    numbers = [c["n"] for c in all_cases]
    if len(set(numbers)) != len(numbers):
        raise SystemExit("duplicate case numbers")
    tests = [build(c) for c in all_cases]
    cross_check_with_node(tests)
    doc = {
        "suite": "identity",
        "description": (
            "Canonical JSON (RFC 8785) and handoff ids. Parse input_text when present (it is "
            "authoritative), else take input; check the intent, then compare the canonical "
            "UTF-8 bytes and sha256: id, or expect the error code. Expected values were computed "
            "with the independent rfc8785 package (tools/gen_identity_vectors.py)."),
        "notes": NOTES,
        "tests": tests,
    }
    return json.dumps(doc, ensure_ascii=False, indent=2) + "\n"


if __name__ == "__main__":
    from vector_files import main  # a sibling in tools/, on sys.path when run as a script

    sys.exit(main({OUT: render()}, sys.argv[1:], __file__))
