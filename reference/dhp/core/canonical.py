"""Canonical JSON (RFC 8785, JCS) and handoff identity, as profiled by spec/identity.md.

Numbers follow the I-JSON profile of the spec: integers must fit in +-(2**53 - 1), finite
floats are written with the ECMAScript shortest round-trip form. Anything that is not JSON
is refused with `InvalidInput` naming the JSON path of the offending value.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from typing import Any

from dhp.core.errors import InvalidInput

MAX_SAFE_INTEGER = 2**53 - 1
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


# json.dumps builds an encoder per call; one shared encoder saves that on the hot path.
SORTED_JSON = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)

# Deeper values are refused by every canonicaliser: recursion would exhaust the stack.
MAX_DEPTH = 500


def canonical_json(obj: Any, *, max_depth: int = MAX_DEPTH, root: str = "$") -> bytes:
    """The RFC 8785 canonical UTF-8 bytes of a JSON value; `InvalidInput` naming the path
    (from `root`) of a value that is not JSON or nested deeper than `max_depth`."""
    limit = min(max_depth, MAX_DEPTH)
    if _plain(obj, limit):  # the common case, at C speed: json.dumps writes exactly JCS here
        try:
            return SORTED_JSON.encode(obj).encode("utf-8")
        except (UnicodeEncodeError, RecursionError):
            pass  # a lone surrogate or deep nesting: the walk below names where
    out: list[str] = []
    try:
        _write(obj, root, out, min(max_depth, MAX_DEPTH))
    except (_TooDeep, RecursionError) as exc:  # RecursionError: a caller deep in its stack
        where = exc.args[0] if isinstance(exc, _TooDeep) else root
        raise InvalidInput(f"{where}: nested deeper than {max_depth} levels of objects and "
                           "arrays", requirement="DHP-LIM-004") from None
    return "".join(out).encode("utf-8")


def _plain(obj: Any, max_depth: int) -> bool:
    """True when `json.dumps(sort_keys=True)` of `obj` is its JCS form: only dicts with
    string keys below U+E000 (where code point order is UTF-16 order), lists, strings,
    bools, None, integers within +-(2**53 - 1) and floats whose repr is their ECMAScript form
    (not integral, plain notation), nested at most `max_depth`. Anything else takes the walk,
    which also names errors."""
    if type(obj) is not dict and type(obj) is not list:
        return _plain_scalar(obj)
    stack = [(obj, 0)]  # containers only: scalars are judged where they are met
    pop, push = stack.pop, stack.append
    while stack:
        value, depth = pop()
        if depth >= max_depth:  # deep, or a cycle: the walk decides
            return False
        if type(value) is dict:
            for key in value:
                if type(key) is not str or (not key.isascii() and max(key) >= "\ue000"):
                    return False
            children: Any = value.values()
        else:
            children = value
        depth += 1
        for child in children:
            kind = type(child)
            if kind is str or kind is bool or child is None:
                continue
            if kind is dict or kind is list:
                push((child, depth))
            elif not _plain_scalar(child):
                return False
    return True


def _plain_scalar(value: Any) -> bool:
    kind = type(value)
    if kind is int:
        return -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER
    if kind is float:  # not integral, plain notation (also refuses NaN, inf)
        return not value.is_integer() and 1e-4 <= abs(value) < 1e16
    return kind is str or kind is bool or value is None


class _TooDeep(Exception):
    """Raised at the first container past the depth limit, with its path."""


def sha256_of(obj: Any) -> str:
    """`"sha256:" + hex(SHA-256(JCS(obj)))`: the digest used for ids and record hashes."""
    return sha256_of_bytes(canonical_json(obj))


def sha256_of_bytes(canonical: bytes) -> str:
    """sha256_of for a value already in canonical form."""
    return "sha256:" + hashlib.sha256(canonical).hexdigest()


def handoff_id(intent: Any) -> str:
    """The content address of an intent (DHP-ID-001)."""
    return sha256_of(intent)


def parse_json(text: str | bytes) -> Any:
    """Parse JSON text strictly: no NaN/Infinity literals, no duplicate member names."""
    try:
        return STRICT_DECODER.decode(text.decode("utf-8") if isinstance(text, bytes) else text)
    except InvalidInput:
        raise
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError too
        raise InvalidInput(f"not valid JSON: {exc}", requirement="DHP-CJ-001") from None


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        dup = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise InvalidInput(f"duplicate member name {dup!r}", requirement="DHP-CJ-001")
    return obj


def _no_constant(name: str) -> Any:
    raise InvalidInput(f"{name} is not a JSON number", requirement="DHP-CJ-006")


# Built once and shared by every strict reader (logs, transport frames): a decoder per line
# is measurable in a million-line log.
STRICT_DECODER = json.JSONDecoder(object_pairs_hook=_no_duplicates,
                                  parse_constant=_no_constant)


def child_path(path: str, key: str | int) -> str:
    """`$.a`, `$["a b"]` or `$[3]`: the JSON path notation of every DHP error message."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if _IDENT.match(key) else f"{path}[{json.dumps(key)}]"


def _string(s: str, path: str) -> str:
    text = json.dumps(s, ensure_ascii=False)  # JCS escapes exactly what json.dumps does
    try:
        s.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidInput(
            f"{path}: lone surrogate U+{ord(s[exc.start]):04X} at index {exc.start} "
            "cannot be encoded as UTF-8", requirement="DHP-CJ-003") from None
    return text


def _write(obj: Any, path: str, out: list[str], depth: int) -> None:
    if obj is None:
        out.append("null")
    elif obj is True:
        out.append("true")
    elif obj is False:
        out.append("false")
    elif isinstance(obj, str):
        out.append(_string(obj, path))
    elif isinstance(obj, int):
        if -MAX_SAFE_INTEGER <= obj <= MAX_SAFE_INTEGER:
            out.append(str(int(obj)))
        else:
            out.append(format_number(_big_integer(obj, path), path))
    elif isinstance(obj, float):
        out.append(format_number(obj, path))
    elif isinstance(obj, (dict, list)) and depth <= 0:
        raise _TooDeep(path)
    elif isinstance(obj, dict):
        for key in obj:
            if not isinstance(key, str):
                raise InvalidInput(f"{path}: object key {key!r} is not a string",
                                   requirement="DHP-CJ-007")
        out.append("{")
        keys = sorted(obj, key=lambda k: k.encode("utf-16-be", "surrogatepass"))
        for i, key in enumerate(keys):
            if i:
                out.append(",")
            child = child_path(path, key)
            out.append(_string(key, child + " (key)"))
            out.append(":")
            _write(obj[key], child, out, depth - 1)
        out.append("}")
    elif isinstance(obj, list):
        out.append("[")
        for i, item in enumerate(obj):
            if i:
                out.append(",")
            _write(item, child_path(path, i), out, depth - 1)
        out.append("]")
    else:
        raise InvalidInput(f"{path}: a {type(obj).__name__} is not a JSON value",
                           requirement="DHP-CJ-007")


def _big_integer(value: int, path: str) -> float:
    """An integer beyond 2**53-1 is a double like any number (DHP-CJ-004): refused where its
    canonical text would be plain digits, accepted (rounded) from 1e21 up."""
    if abs(value) < 10**21:
        _refuse_integral(value, path)
    try:
        return float(value)
    except OverflowError:
        raise InvalidInput(f"{path}: integer of {len(str(abs(value)))} digits is beyond the "
                           "largest JSON number (a double)", requirement="DHP-CJ-004") from None


def _refuse_integral(value: float | int, path: str) -> None:
    # Canonical text of such a value is plain digits, which every strict parser reads back
    # as an integer outside the I-JSON range: refusing by value keeps all languages equal.
    raise InvalidInput(f"{path}: integral number {value:.0f} is outside the I-JSON range "
                       "+-(2**53-1) and below 1e21", requirement="DHP-CJ-004")


def format_number(x: float, path: str = "$") -> str:
    """ECMAScript Number.prototype.toString of a finite double (RFC 8785 section 3.2.2.3)."""
    if math.isnan(x) or math.isinf(x):
        raise InvalidInput(f"{path}: {x} is not a JSON number", requirement="DHP-CJ-006")
    if x == 0:
        return "0"  # also -0.0
    if x.is_integer() and MAX_SAFE_INTEGER < abs(x) < 1e21:
        _refuse_integral(x, path)
    sign = "-" if x < 0 else ""
    mantissa, _, exp = repr(abs(x)).partition("e")  # repr is the shortest round-trip form
    int_part, _, frac = mantissa.partition(".")
    all_digits = int_part + frac
    leading = len(all_digits) - len(all_digits.lstrip("0"))
    digits = all_digits.strip("0")
    k = len(digits)
    n = len(int_part) + (int(exp) if exp else 0) - leading  # x = 0.digits * 10**n
    if k <= n <= 21:
        body = digits + "0" * (n - k)
    elif 0 < n <= 21:
        body = digits[:n] + "." + digits[n:]
    elif -6 < n <= 0:
        body = "0." + "0" * (-n) + digits
    else:
        e = n - 1
        head = digits[0] + ("." + digits[1:] if k > 1 else "")
        body = f"{head}e{'+' if e > 0 else '-'}{abs(e)}"
    return sign + body


# --- records of known shape ------------------------------------------------------------------
# A checkpoint or result record of valid shape (schemas/checkpoint.json, result.json) has
# fixed ASCII member names, digest strings ("sha256:" + hex, nothing to escape) and counters,
# so its canonical form is a concatenation around the one free value (state / result),
# which the caller has in canonical form already. `canonical_json` stays the definition:
# tests/test_chain.py proves these equal to it over generated records.

def number_text(value: int | float) -> str:
    """The canonical text of a JSON number (an int or a float, not a bool)."""
    if type(value) is int and -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:
        return str(value)
    if type(value) is float:
        return format_number(value)
    return canonical_json(value).decode("utf-8")  # refuses with the precise error


def checkpoint_parts(handoff_id: str, seq: int | float, fence: int | float,
                     spend: int | float, prev: str, state_text: str) -> tuple[str, str]:
    """`(head, tail)`: `head + tail` is the canonical JSON of the checkpoint record without
    `hash`, and `head + ',"hash":"' + hash + '"' + tail` with it (`hash` sorts between
    `handoff_id` and `prev`). The members must be of valid shape (DHP-CKP-001); `state_text`
    is the canonical JSON of the state."""
    return (f'{{"fence":{number_text(fence)},"handoff_id":"{handoff_id}"',
            f',"prev":"{prev}","seq":{number_text(seq)},"spend":{number_text(spend)},'
            f'"state":{state_text}}}')


def result_parts(handoff_id: str, fence: int | float, prev: str,
                 result_text: str) -> tuple[str, str]:
    """checkpoint_parts for a result record (DHP-RES-005)."""
    return (f'{{"fence":{number_text(fence)},"handoff_id":"{handoff_id}"',
            f',"prev":"{prev}","result":{result_text}}}')
