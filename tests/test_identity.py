"""Identity vectors and canonical-JSON properties (spec/identity).

Every vector is run twice: through the reference (`dhp`) and through the independent
`rfc8785` package, so a wrong vector and a wrong reference cannot hide each other.
"""

from __future__ import annotations

import hashlib
import json
import math
import re

import dhp
import dhp_data
import pytest
import rfc8785
from dhp.core.envelope import check_intent
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

VECTORS = json.loads(dhp_data.path("vectors", "identity.json").read_text(encoding="utf-8"))
TESTS = VECTORS["tests"]
VALID = [t for t in TESTS if "canonical" in t["expected"]]
REFUSED = [t for t in TESTS if "error" in t["expected"]]


def ids(tests):
    return [t["id"] for t in tests]


def value_of(test):
    """input_text is authoritative when present (the reference's strict parser reads it)."""
    if "input_text" in test:
        return dhp.parse_json(test["input_text"])
    return test["input"]


@pytest.mark.covers("DHP-ID-001", "DHP-CJ-001", "DHP-CJ-002", "DHP-CJ-004", "DHP-CJ-005")
@pytest.mark.parametrize("test", VALID, ids=ids(VALID))
def test_reference_gives_expected_canonical_form_and_id(test):
    intent = value_of(test)
    check_intent(intent)
    assert dhp.canonical_json(intent) == test["expected"]["canonical"].encode("utf-8")
    assert dhp.handoff_id(intent) == test["expected"]["handoff_id"]


@pytest.mark.covers("DHP-CJ-003", "DHP-CJ-004", "DHP-CJ-006", "DHP-CJ-008", "DHP-ID-002",
                    "DHP-ID-003", "DHP-ENV-003", "DHP-ENV-004")
@pytest.mark.parametrize("test", REFUSED, ids=ids(REFUSED))
def test_reference_refuses_with_expected_code(test):
    with pytest.raises(dhp.DHPError) as caught:
        check_intent(value_of(test))
    assert caught.value.code == test["expected"]["error"], str(caught.value)
    assert caught.value.requirement and re.match(r"^DHP-[A-Z]+-\d{3}$", caught.value.requirement)
    if test["expected"]["error"] == "invalid_input":
        assert isinstance(caught.value, dhp.InvalidInput)


@pytest.mark.covers("DHP-ID-001", "DHP-CJ-001")
@pytest.mark.parametrize("test", VALID, ids=ids(VALID))
def test_independent_rfc8785_agrees(test):
    canonical = test["expected"]["canonical"].encode("utf-8")
    values = [test["input"]]
    if "input_text" in test:
        # numbers are doubles: an integer literal beyond 2^53-1 reads as the nearest double
        values.append(json.loads(test["input_text"],
                                 parse_int=lambda t: int(t) if abs(int(t)) < 2**53 else float(t)))
    for value in values:
        out = rfc8785.dumps(value)
        assert out == canonical
        assert "sha256:" + hashlib.sha256(out).hexdigest() == test["expected"]["handoff_id"]


def test_suite_is_large_and_covers_the_traps():
    assert len(TESTS) >= 45
    flags = {f for t in TESTS for f in t.get("flags", [])}
    assert {"Utf16KeyOrder", "EscapeSet", "NumberFormat", "IntegerRange", "LoneSurrogate",
            "DuplicateKey", "NonFinite", "IntentShape", "Version"} <= flags


# --- properties -------------------------------------------------------------------------

SAFE_INT = st.integers(min_value=-(2**53 - 1), max_value=2**53 - 1)
FLOATS = st.floats(allow_nan=False, allow_infinity=False).filter(
    lambda x: not (x.is_integer() and 2**53 <= abs(x) < 1e21))  # refused by DHP-CJ-004
TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=8)  # no lone surrogates
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | SAFE_INT | FLOATS | TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=20,
)


def reordered(value, rnd):
    if isinstance(value, dict):
        keys = list(value)
        rnd.shuffle(keys)
        return {k: reordered(value[k], rnd) for k in keys}
    if isinstance(value, list):
        return [reordered(v, rnd) for v in value]
    return value


@pytest.mark.covers("DHP-CJ-001", "DHP-ID-001")
@given(JSON_VALUES, st.randoms(use_true_random=False))
def test_canonical_form_is_stable_under_key_reordering(value, rnd):
    assert dhp.canonical_json(reordered(value, rnd)) == dhp.canonical_json(value)
    assert dhp.sha256_of(reordered(value, rnd)) == dhp.sha256_of(value)


@pytest.mark.covers("DHP-CJ-001", "DHP-CJ-002", "DHP-CJ-005")
@given(JSON_VALUES)
def test_canonical_form_round_trips_and_matches_rfc8785(value):
    canonical = dhp.canonical_json(value)
    assert canonical == rfc8785.dumps(value)
    parsed = dhp.parse_json(canonical)
    assert parsed == value
    assert dhp.canonical_json(parsed) == canonical


@pytest.mark.covers("DHP-CJ-004")
@given(st.integers(min_value=2**53, max_value=10**21 - 1) | st.integers(max_value=-(2**53),
       min_value=-(10**21) + 1), st.booleans())
def test_integral_values_between_2_53_and_1e21_are_refused_in_any_form(n, as_float):
    value = float(n) if as_float and abs(float(n)) < 1e21 else n
    with pytest.raises(dhp.InvalidInput, match="I-JSON"):
        dhp.canonical_json({"v": value})


@pytest.mark.covers("DHP-CJ-004", "DHP-CJ-005")
def test_integers_from_1e21_up_are_doubles_and_round_trip():
    canonical = dhp.canonical_json(10**30 + 1)
    assert canonical == b"1e+30"
    assert dhp.canonical_json(dhp.parse_json(canonical)) == canonical


IDENT_KEY = st.from_regex(r"[a-z_][a-z0-9_]{0,5}", fullmatch=True)
BAD_VALUES = st.sampled_from([
    math.nan, math.inf, -math.inf, 2**53, -(2**53), 10**20, 2.0**60, "a\ud800", "\udfff", (1, 2),
    {1}, b"x", object(),
])


def planted(draw_path, bad):
    """Put `bad` at the end of a path of keys / indexes; return the value and its JSON path."""
    value, path = bad, ""
    for step in reversed(draw_path):
        if isinstance(step, int):
            value = [None] * step + [value]
            path = f"[{step}]" + path
        else:
            value = {step: value, "~other": [1, "x"]}
            path = f".{step}" + path
    return value, "$" + path


@pytest.mark.covers("DHP-CJ-003", "DHP-CJ-004", "DHP-CJ-006", "DHP-CJ-007", "DHP-CJ-008",
                    "DHP-CJ-009")
@settings(suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(IDENT_KEY | st.integers(min_value=0, max_value=3), max_size=5), BAD_VALUES)
def test_refused_values_raise_invalid_input_naming_the_path(steps, bad):
    value, path = planted(steps, bad)
    with pytest.raises(dhp.InvalidInput) as caught:
        dhp.canonical_json(value)
    message = str(caught.value)
    assert re.search(re.escape(path) + r"(?![\w.\[])", message), (path, message)
    assert caught.value.code == "invalid_input"


@pytest.mark.covers("DHP-CJ-003", "DHP-CJ-007", "DHP-CJ-008", "DHP-CJ-009")
@given(st.lists(IDENT_KEY, max_size=4),
       st.sampled_from([1, 2.5, None, True, ("t",), "\ud800"]))
def test_bad_keys_raise_invalid_input_naming_the_object(steps, bad_key):
    value, path = planted(steps, {bad_key: 1})
    with pytest.raises(dhp.InvalidInput) as caught:
        dhp.canonical_json(value)
    assert path in str(caught.value)


@pytest.mark.covers("DHP-CJ-002", "DHP-CJ-005")
@pytest.mark.parametrize("value", [
    1e-4, 999999999999999.9, 1e21, 1e-5, 2.0, -0.0, 1.5, 5e-324, 2**53 - 1, 1e22, 0.1,
    {"\U0001F600": 1, "\uE000": 2, "\uFFFF": 3, "a": 4},   # UTF-16 order differs from code points
    {"b": [1.25, {"a": None, "B": True}], "a": "\u2028\x7f"}, [], {}, "",
])
def test_fast_path_writes_what_the_walk_writes(value):
    """canonical_json hands plain values to json.dumps; its bytes must be the walk's."""
    from dhp.core import canonical

    walked: list[str] = []
    canonical._write(value, "$", walked, canonical.MAX_DEPTH)
    assert dhp.canonical_json(value) == "".join(walked).encode("utf-8") == rfc8785.dumps(value)


odd_scalars = (st.none() | st.booleans() | st.integers() | st.floats()
               | st.text(max_size=6) | st.sampled_from([(1,), b"x", 1j, "\ue000", "\U0001F600"]))
odd_values = st.recursive(
    odd_scalars,
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(max_size=4) | st.integers(0, 3)
                      | st.sampled_from(["\ue000", "\uffff", "\U0001F600", "z"]), inner,
                      max_size=4),
    max_leaves=15)


@pytest.mark.covers("DHP-CJ-002", "DHP-CJ-005")
@settings(max_examples=1000, suppress_health_check=[HealthCheck.too_slow])
@given(odd_values)
def test_fast_path_agrees_with_the_walk_on_any_value(value):
    """Whatever _plain lets through to json.dumps is written as the walk writes it, and
    what the walk refuses is refused."""
    from dhp.core import canonical

    walked: list[str] = []
    try:
        canonical._write(value, "$", walked, canonical.MAX_DEPTH)
    except dhp.InvalidInput:
        with pytest.raises(dhp.InvalidInput):
            dhp.canonical_json(value)
        return
    assert dhp.canonical_json(value) == "".join(walked).encode("utf-8")


def test_fast_path_leaves_deep_and_cyclic_values_to_the_walk():
    from dhp.core import canonical

    def nested(levels: int) -> list:
        value: list = []
        inner = value
        for _ in range(levels - 1):
            inner.append([])
            inner = inner[0]
        return value

    limit = canonical.MAX_DEPTH
    assert canonical._plain(nested(limit), limit)
    assert dhp.canonical_json(nested(limit)) == b"[" * limit + b"]" * limit
    assert not canonical._plain(nested(limit + 10), limit)  # the walk refuses it, naming why
    with pytest.raises(dhp.InvalidInput, match="nested deeper"):
        dhp.canonical_json(nested(limit + 10))
    cyclic: list = []
    cyclic.append(cyclic)
    assert not canonical._plain(cyclic, limit)  # terminates; the walk then refuses it
    with pytest.raises(dhp.InvalidInput, match="nested deeper"):
        dhp.canonical_json(cyclic)
