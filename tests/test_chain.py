"""The checkpoint hash chain: the shipped vectors, hashing against an independent RFC 8785
implementation, and properties (any one changed byte breaks the chain)."""

from __future__ import annotations

import copy
import hashlib
import json
import tracemalloc

import dhp_data
import pytest
import rfc8785
from dhp import IntegrityError, InvalidInput
from dhp.core import chain, schemas
from dhp.core.canonical import canonical_json, checkpoint_parts, result_parts
from dhp.core.chain import (
    ChainVerifier,
    canonical_parsed,
    check_checkpoint_shape,
    check_result_shape,
    checkpoint_and_text,
    make_record,
    make_result_record,
    record_hash,
    verify_chain,
    verify_record,
)
from dhp.core.envelope import make_envelope
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

HID = "sha256:" + hashlib.sha256(b"test handoff").hexdigest()
SUITE = json.loads(dhp_data.path("vectors", "checkpoint-chain.json").read_text("utf-8"))


def independent_hash(record: dict) -> str:
    body = {k: v for k, v in record.items() if k != "hash"}
    return "sha256:" + hashlib.sha256(rfc8785.dumps(body)).hexdigest()


def build(states, fences=None) -> list[dict]:
    out, prev = [], HID
    for i, state in enumerate(states):
        rec = make_record(HID, i + 1, (fences or [1] * len(states))[i], state, 0, prev)
        out.append(rec)
        prev = rec["hash"]
    return out


def outcome(handoff_id: str, records: list) -> dict:
    verifier = ChainVerifier(handoff_id)
    for index, record in enumerate(records):
        try:
            verifier.add(record)
        except (IntegrityError, InvalidInput) as exc:
            return {"error": exc.code, "at": index}
    return {"valid": True}


@pytest.mark.covers("DHP-CKP-001", "DHP-CKP-002", "DHP-CKP-003", "DHP-CKP-004", "DHP-CKP-005",
                    "DHP-CKP-006", "DHP-CKP-007", "DHP-CKP-008")
@pytest.mark.parametrize("test", SUITE["tests"], ids=lambda t: t["id"])
def test_checkpoint_chain_vector(test):
    assert outcome(test["input"]["handoff_id"], test["input"]["records"]) == test["expected"]


def test_suite_size_and_shape():
    assert SUITE["suite"] == "checkpoint-chain"
    assert len(SUITE["tests"]) >= 24
    assert schemas.errors("vector-file", SUITE) == []


@pytest.mark.covers("DHP-ID-001")
@pytest.mark.parametrize("test", SUITE["tests"], ids=lambda t: t["id"])
def test_chain_vector_carries_the_intent_of_its_handoff(test):
    # A reader writes the log header from input.intent: the reference's envelope of that
    # intent is exactly the header the vector describes.
    vector_input = test["input"]
    assert make_envelope(vector_input["intent"]) == {
        "dhp": "1.0", "handoff_id": vector_input["handoff_id"], "intent": vector_input["intent"]}


@pytest.mark.covers("DHP-CKP-005")
def test_vector_hashes_agree_with_independent_jcs():
    # Every record of every valid vector carries the hash rfc8785 + hashlib give.
    for test in SUITE["tests"]:
        if test["expected"] == {"valid": True}:
            for record in test["input"]["records"]:
                assert record["hash"] == independent_hash(record)
                assert record_hash(record) == record["hash"]
                assert record_hash(record, parsed=True) == record["hash"]


@pytest.mark.covers("DHP-CKP-001", "DHP-CKP-005")
def test_make_record_hash_is_jcs_sha256_without_hash():
    rec = make_record(HID, 1, 3, {"\U0001F600": [1.5, "x"], "a": None}, 0.25, HID)
    assert list(rec) == ["handoff_id", "seq", "fence", "state", "spend", "prev", "hash"]
    assert rec["hash"] == independent_hash(rec)
    verify_record(rec)
    res = make_result_record(HID, 3, {"ok": True}, rec["hash"])
    assert res["hash"] == independent_hash(res)
    assert verify_chain(HID, [rec], res) == res["hash"]


def test_make_record_refuses_bad_shape_and_non_json():
    with pytest.raises(InvalidInput) as info:
        make_record(HID, 0, 1, {}, 0, HID)
    assert info.value.requirement == "DHP-CKP-001"
    with pytest.raises(InvalidInput) as info:
        make_record(HID, 1, 1, {1: "non-string key"}, 0, HID)
    assert info.value.requirement == "DHP-CJ-007"
    with pytest.raises(InvalidInput):
        make_record(HID, 1, 1, {"big": 2**60}, 0, HID)


@pytest.mark.covers("DHP-CKP-005")
def test_verify_record_detects_changed_content():
    rec = build([{"n": 1}])[0]
    rec["state"] = {"n": 2}
    with pytest.raises(IntegrityError) as info:
        verify_record(rec)
    assert info.value.requirement == "DHP-CKP-005"


@pytest.mark.covers("DHP-CKP-002", "DHP-CKP-003", "DHP-CKP-004", "DHP-CKP-006", "DHP-CKP-007")
def test_each_chain_rule_names_its_requirement():
    chain = build([{"n": i} for i in range(4)], fences=[1, 2, 2, 2])
    cases = {
        "DHP-CKP-002": [chain[0], chain[2]],
        "DHP-CKP-003": [make_record(HID, 1, 1, {}, 0, chain[1]["hash"])],
        "DHP-CKP-004": chain[:2] + [make_record(HID, 3, 2, {}, 0, chain[0]["hash"])],
        "DHP-CKP-006": chain[:2] + [make_record(HID, 3, 1, {}, 0, chain[1]["hash"])],
        "DHP-CKP-007": [make_record("sha256:" + "1" * 64, 1, 1, {}, 0, HID)],
    }
    for requirement, records in cases.items():
        with pytest.raises(IntegrityError) as info:
            verify_chain(HID, records)
        assert info.value.requirement == requirement, info.value
        assert info.value.details["index"] == len(records) - 1


@pytest.mark.covers("DHP-CKP-008", "DHP-RES-003", "DHP-RES-005")
def test_result_closes_the_chain():
    chain = build([{"n": 1}])
    verifier = ChainVerifier(HID)
    verifier.add(chain[0])
    res = make_result_record(HID, 1, "done", chain[0]["hash"])
    verifier.add_result(res)
    with pytest.raises(IntegrityError):
        verifier.add(make_record(HID, 2, 1, {}, 0, res["hash"]))
    with pytest.raises(IntegrityError) as info:
        verifier.add_result(res)
    assert info.value.requirement == "DHP-RES-003"
    # a result with a fence below the last checkpoint's, or not linked, is refused
    high = build([{"n": 1}], fences=[5])
    for bad in (make_result_record(HID, 4, "x", high[0]["hash"]),
                make_result_record(HID, 5, "x", HID)):
        with pytest.raises(IntegrityError) as info:
            verify_chain(HID, high, bad)
        assert info.value.requirement == "DHP-RES-005"
        assert info.value.details["index"] == 1


def test_verifier_memory_is_bounded():
    """Verifying 20,000 records from a generator keeps O(1) state."""
    def records(n):
        prev = HID
        for seq in range(1, n + 1):
            rec = make_record(HID, seq, 1, {"blob": "x" * 200, "seq": seq}, 0, prev)
            prev = rec["hash"]
            yield rec
    tracemalloc.start()
    verify_chain(HID, records(20_000))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 2 * 1024 * 1024  # the records alone would be several MiB
    assert set(vars(ChainVerifier(HID))) == {"handoff_id", "parsed", "last_seq", "last_hash",
                                             "last_fence", "has_result"}


# --- properties ------------------------------------------------------------------------------

json_scalars = (st.none() | st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1)
                | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=12))
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner,
                                                                max_size=4),
    max_leaves=12)


@settings(max_examples=1000, suppress_health_check=[HealthCheck.too_slow])
@given(json_values | st.integers()
       | st.text(alphabet=st.characters(exclude_categories=()), max_size=5))
def test_fast_canonicaliser_equals_general_one(value):
    _fast_equals_general(value)


def _fast_equals_general(value):
    """The fast canonicaliser's text of `value` once parsed, checked against the general
    one's (None when both refuse it)."""
    value = json.loads(json.dumps(value))  # the fast path is for parsed values only
    try:
        expected = canonical_json(value)
    except InvalidInput:
        with pytest.raises(InvalidInput):
            canonical_parsed(value)
        return None
    assert canonical_parsed(value) == expected
    return expected


digests = st.binary(min_size=1, max_size=8).map(
    lambda b: "sha256:" + hashlib.sha256(b).hexdigest())
counters = st.integers(1, 2**53 - 1) | st.integers(1, 2**53 - 1).map(float)
spends = (st.integers(0, 2**53 - 1) | st.floats(0, 1e308)
          | st.floats(0, 1e-300, exclude_min=True))


@pytest.mark.covers("DHP-CKP-005")
@settings(max_examples=500, suppress_health_check=[HealthCheck.too_slow])
@given(handoff_id=digests, seq=counters, fence=counters, spend=spends, prev=digests,
       hash_=digests, state=json_values, result=json_values)
def test_record_texts_of_known_shape_equal_the_general_encoder(handoff_id, seq, fence, spend,
                                                                prev, hash_, state, result):
    try:
        state_text = canonical_json(state).decode()
        result_text = canonical_json(result).decode()
    except InvalidInput:  # a value outside the canonical JSON profile
        assume(False)
    record = {"handoff_id": handoff_id, "seq": seq, "fence": fence, "state": state,
              "spend": spend, "prev": prev}
    try:
        expected = canonical_json(record)
    except InvalidInput:  # a spend the profile refuses (an integral float beyond 2**53)
        with pytest.raises(InvalidInput):
            checkpoint_parts(handoff_id, seq, fence, spend, prev, state_text)
        return
    head, tail = checkpoint_parts(handoff_id, seq, fence, spend, prev, state_text)
    assert (head + tail).encode() == expected
    with_hash = f'{head},"hash":"{hash_}"{tail}'.encode()
    assert with_hash == canonical_json(dict(record, hash=hash_))
    made, text = checkpoint_and_text(handoff_id, seq, fence, state, spend, prev)
    assert text.encode() == canonical_json(made) == rfc8785.dumps(made)
    assert made["hash"] == "sha256:" + hashlib.sha256(canonical_json(record)).hexdigest()
    assert checkpoint_and_text(handoff_id, seq, fence, state, spend, prev,
                               state_text=state_text.encode()) == (made, text)
    result_record = {"handoff_id": handoff_id, "fence": fence, "result": result, "prev": prev}
    head, tail = result_parts(handoff_id, fence, prev, result_text)
    assert (head + tail).encode() == canonical_json(result_record)
    assert make_result_record(handoff_id, fence, result, prev)["hash"] \
        == "sha256:" + hashlib.sha256(canonical_json(result_record)).hexdigest()


@pytest.mark.parametrize("number", [
    0.1, 0.30000000000000004, 1e-4, 9.999e-05, 1e-7, 1.5e-07, 123.0, -0.0, 0.0, 1e16,
    9999999999999998.0, 1234567890123456.7, 1e21, 1e20, 5e-324, 1.7976931348623157e308,
    -2.5, 2**53 - 1, 2**53, 10**15, 10**16, 1796165522.30342])
def test_fast_canonicaliser_equals_general_one_at_number_edges(number):
    for value in (number, [number], {"n": number, "s": "1.0e5 in a string"}):
        text = _fast_equals_general(value)
        assert text is None or text == rfc8785.dumps(value)


@settings(max_examples=300)
@given(st.fixed_dictionaries({
    "handoff_id": st.sampled_from([HID, HID.upper(), "x", 1]),
    "seq": st.sampled_from([1, 0, 2.0, 2.5, True, "1", 2**53]),
    "fence": st.sampled_from([1, 7, -1, None]),
    "state": json_values,
    "spend": st.sampled_from([0, 0.5, -0.1, True, "1", 1e300]),
    "prev": st.sampled_from([HID, "sha256:" + "A" * 64]),
    "hash": st.sampled_from([HID, HID + "0"]),
    "extra": st.sampled_from([None, "note"]),
}))
def test_fast_shape_checks_agree_with_schema(fields):
    record = {k: v for k, v in fields.items() if not (k == "extra" and v is None)}
    record_ok = schemas.errors("checkpoint", record) == []
    try:
        check_checkpoint_shape(record)
        fast_ok = True
    except InvalidInput:
        fast_ok = False
    assert fast_ok == record_ok
    result = {"handoff_id": record["handoff_id"], "fence": record["fence"], "result": 1,
              "prev": record["prev"], "hash": record["hash"]}
    result_ok = schemas.errors("result", result) == []
    try:
        check_result_shape(result)
        fast_ok = True
    except InvalidInput:
        fast_ok = False
    assert fast_ok == result_ok


def _serialise(records: list[dict]) -> bytes:
    return b"".join(canonical_json(r) + b"\n" for r in records)


def _verify_text(data: bytes) -> list:
    """Parse a serialised chain and verify it; return the records, or raise."""
    from dhp.core.canonical import parse_json
    records = [parse_json(line) for line in data.decode("utf-8").split("\n")[:-1]]
    verify_chain(HID, records)
    return records


@pytest.mark.covers("DHP-CKP-005", "DHP-CKP-008", "DHP-SEC-001")
@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(states=st.lists(json_values, min_size=2, max_size=4), data=st.data())
def test_any_changed_byte_breaks_the_chain_or_the_parse(states, data):
    try:
        chain = build(states)
    except InvalidInput:  # a value outside the canonical JSON profile
        assume(False)
    text = _serialise(chain)
    lines = text.split(b"\n")
    # pick a record, then a byte in it or in its predecessor
    target = data.draw(st.integers(1, len(chain) - 1)) - data.draw(st.integers(0, 1))
    start = sum(len(line) + 1 for line in lines[:target])
    pos = start + data.draw(st.integers(0, len(lines[target]) - 1))
    new = data.draw(st.integers(0, 255))
    assume(new != text[pos])
    mutated = text[:pos] + bytes([new]) + text[pos + 1:]
    try:
        records = _verify_text(mutated)
    except (IntegrityError, InvalidInput, UnicodeDecodeError):
        return  # detected
    # Not detected: then the change was only a different spelling of the same JSON values
    # (e.g. 1e+21 vs 1E+21, or \u001f vs \u001F), so the chain really is unchanged.
    assert records == copy.deepcopy(chain)


@pytest.mark.covers("DHP-CJ-007")
@pytest.mark.parametrize("state", [{"t": (1, 2)}, {1: "a"}, {"s": {1, 2}}])
def test_a_record_of_a_value_that_is_not_json_is_refused_not_hashed(state):
    """Records are hashed over canonical JSON: a state the JSON encoder would quietly turn
    into JSON (a tuple into an array, an integer key into a string) is refused by path."""
    hid = "sha256:" + "a" * 64
    with pytest.raises(InvalidInput, match=r"\$\.state") as refused:
        chain.make_record(hid, 1, 1, state, 0, hid)
    assert refused.value.requirement == "DHP-CJ-007"
    with pytest.raises(InvalidInput, match=r"\$\.result"):
        chain.make_result_record(hid, 1, state, hid)


@pytest.mark.covers("DHP-CKP-002")
def test_a_seq_error_says_whether_a_record_is_missing_or_seen_twice():
    hid = "sha256:" + "b" * 64
    first = chain.make_record(hid, 1, 1, {"n": 1}, 0, hid)
    second = chain.make_record(hid, 2, 1, {"n": 2}, 0, first["hash"])
    third = chain.make_record(hid, 3, 1, {"n": 3}, 0, second["hash"])
    with pytest.raises(IntegrityError, match="seq 2 is missing"):
        chain.verify_chain(hid, [first, third])
    with pytest.raises(IntegrityError, match="seq 1 is duplicate"):
        chain.verify_chain(hid, [first, first])
