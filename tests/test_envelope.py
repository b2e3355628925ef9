"""Envelope vectors and the envelope/intent API of the reference (spec/envelope)."""

from __future__ import annotations

import datetime as dt
import hashlib
import json

import dhp
import dhp_data
import pytest
import rfc8785
from dhp.core.envelope import check_envelope, check_intent, make_envelope, make_intent

VECTORS = json.loads(dhp_data.path("vectors", "envelope.json").read_text(encoding="utf-8"))
TESTS = VECTORS["tests"]
VALID = [t for t in TESTS if t["expected"].get("valid")]
INVALID = [t for t in TESTS if "error" in t["expected"]]
SCHEMA = {"type": "object", "required": ["summary"],
          "properties": {"summary": {"type": "string"}}}


def value_of(test):
    if "input_text" in test:
        return dhp.parse_json(test["input_text"])
    return test["input"]


def ids(tests):
    return [t["id"] for t in tests]


@pytest.mark.covers("DHP-ENV-001", "DHP-ENV-002", "DHP-ENV-004", "DHP-ENV-005")
@pytest.mark.parametrize("test", VALID, ids=ids(VALID))
def test_valid_envelope_vectors_are_accepted(test):
    check_envelope(value_of(test))


@pytest.mark.covers("DHP-ENV-001", "DHP-ENV-002", "DHP-ENV-003", "DHP-ENV-004", "DHP-CJ-008")
@pytest.mark.parametrize("test", INVALID, ids=ids(INVALID))
def test_invalid_envelope_vectors_are_refused_with_their_code(test):
    with pytest.raises(dhp.DHPError) as caught:
        check_envelope(value_of(test))
    assert caught.value.code == test["expected"]["error"], str(caught.value)
    assert caught.value.requirement is not None


def test_suite_size():
    assert len(TESTS) >= 28 and len(VALID) >= 5


@pytest.mark.covers("DHP-ID-001", "DHP-ID-002", "DHP-ENV-002")
def test_make_envelope_carries_the_independent_id():
    intent = make_intent("summarise", {"doc": "r.pdf"}, SCHEMA, {"max_attempts": 2})
    assert list(intent) == ["dhp", "task_kind", "inputs", "output_schema", "budget"]
    envelope = make_envelope(intent)
    assert envelope == {"dhp": "1.0", "intent": intent, "handoff_id": "sha256:"
                        + hashlib.sha256(rfc8785.dumps(intent)).hexdigest()}
    check_envelope(envelope)


@pytest.mark.covers("DHP-ENV-001", "DHP-ENV-005")
def test_the_envelope_dispatch_stores_passes_every_check(tmp_path):
    # make_envelope does not check what it builds from a checked intent; this holds it to that.
    store = dhp.Store(tmp_path)
    hid = dhp.dispatch(store, "summarise", {"doc": "r.pdf"}, SCHEMA, {"max_attempts": 2})
    envelope = dhp.envelope_of(store, hid)
    check_envelope(envelope)
    assert dt.datetime.fromisoformat(envelope["created_at"].replace("Z", "+00:00")).tzinfo
    store.close()


@pytest.mark.covers("DHP-ID-002")
def test_make_intent_defaults_to_an_empty_budget():
    assert make_intent("t", {}, {})["budget"] == {}


@pytest.mark.covers("DHP-ENV-005")
def test_created_at_is_metadata_outside_the_identity():
    intent = make_intent("t", {}, {})
    plain = make_envelope(intent)
    stamped = make_envelope(intent, created_at=dt.datetime(2025, 3, 1, 13, 0,
                                                           tzinfo=dt.timezone(dt.timedelta(hours=1))))
    assert stamped["created_at"] == "2025-03-01T12:00:00.000Z"
    assert stamped["handoff_id"] == plain["handoff_id"]
    assert make_envelope(intent, created_at="2025-03-01T12:00:00+00:00")["created_at"] \
        == "2025-03-01T12:00:00+00:00"
    with pytest.raises(dhp.InvalidInput, match="time zone"):
        make_envelope(intent, created_at=dt.datetime(2025, 3, 1))
    with pytest.raises(dhp.InvalidInput, match=r"\$\.created_at"):
        make_envelope(intent, created_at="March 1st")


@pytest.mark.covers("DHP-ID-002", "DHP-ID-003", "DHP-ENV-001")
def test_every_violation_is_listed_with_its_path():
    bad = {"dhp": "1.0", "task_kind": "", "inputs": [], "output_schema": {},
           "budget": {"max_steps": 0, "oops": 1}, "extra": True}
    with pytest.raises(dhp.InvalidInput) as caught:
        check_intent(bad)
    message = str(caught.value)
    for path in ("$.task_kind", "$.inputs", "$.budget.max_steps", "$.budget:", "'extra'"):
        assert path in message, (path, message)
    assert caught.value.requirement == "DHP-ID-002"
    assert [e["path"] for e in caught.value.details] == sorted(
        e["path"] for e in caught.value.details)


@pytest.mark.parametrize("intent, requirement", [
    ({"dhp": "1.0", "task_kind": "t", "inputs": {}, "output_schema": {},
      "budget": {"max_spend": -1}}, "DHP-ID-003"),
    ({"dhp": "1.0", "task_kind": "t", "inputs": {}, "output_schema": {}}, "DHP-ID-002"),
    ({"dhp": "1.0", "task_kind": "t", "inputs": {}, "output_schema": {"type": 1},
      "budget": {}}, "DHP-ENV-004"),
    ({"dhp": "1.0", "task_kind": "t", "inputs": {"x": float("nan")}, "output_schema": {},
      "budget": {}}, "DHP-CJ-006"),
    ({"dhp": "1.0", "task_kind": "t", "inputs": {3: 1}, "output_schema": {},
      "budget": {}}, "DHP-CJ-007"),
])
@pytest.mark.covers("DHP-ID-002", "DHP-ID-003", "DHP-ENV-004", "DHP-CJ-006", "DHP-CJ-007")
def test_intent_refusals_name_the_most_specific_requirement(intent, requirement):
    with pytest.raises(dhp.InvalidInput) as caught:
        check_intent(intent)
    assert caught.value.requirement == requirement, str(caught.value)


@pytest.mark.covers("DHP-ENV-001", "DHP-ENV-004")
def test_envelope_refusals_name_the_requirement_and_path():
    good = make_envelope(make_intent("t", {}, {}))
    cases = [
        (dict(good, owner="w1"), "DHP-ENV-001", "$"),
        (dict(good, intent=dict(good["intent"], budget={"x": 1})), "DHP-ID-003",
         "$.intent.budget"),
        (dict(good, intent=dict(good["intent"], output_schema={"type": "strin"})),
         "DHP-ENV-004", "$.intent.output_schema"),
    ]
    for envelope, requirement, path in cases:
        with pytest.raises(dhp.InvalidInput) as caught:
            check_envelope(envelope)
        assert caught.value.requirement == requirement
        assert path in str(caught.value)


@pytest.mark.covers("DHP-ENV-003")
def test_version_is_judged_before_anything_else():
    with pytest.raises(dhp.UnsupportedVersion, match="'3.0'"):
        check_envelope({"dhp": "3.0", "handoff_id": 7})
    with pytest.raises(dhp.UnsupportedVersion, match=r"\$\.intent\.dhp"):
        check_envelope({"dhp": "1.0", "intent": {"dhp": "0.9"}})
    with pytest.raises(dhp.UnsupportedVersion):
        check_intent({"dhp": "1.1", "task_kind": 5})


@pytest.mark.covers("DHP-ENV-002")
def test_id_mismatch_is_an_integrity_error_with_both_ids():
    envelope = make_envelope(make_intent("t", {"a": 1}, {}))
    other = make_envelope(make_intent("t", {"a": 2}, {}))
    with pytest.raises(dhp.IntegrityError) as caught:
        check_envelope(dict(envelope, handoff_id=other["handoff_id"]))
    assert caught.value.details == {"stated": other["handoff_id"],
                                    "computed": envelope["handoff_id"]}
    assert caught.value.definite is True


@pytest.mark.covers("DHP-SEC-003")
def test_output_schema_references_outside_it_are_refused_never_fetched(tmp_path):
    import http.server
    import threading

    fetched = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the name http.server calls
            fetched.append(self.path)
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b'{"type": "string"}')

        def log_message(self, *args):
            pass

    web = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=web.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    (tmp_path / "s.json").write_text('{"type": "string"}')
    store = dhp.Store(tmp_path / "store")
    try:
        for ref in (f"http://127.0.0.1:{web.server_port}/s.json", (tmp_path / "s.json").as_uri(),
                    "s.json", "#/$defs/missing"):
            schema = {"type": "object", "properties": {"n": {"$ref": ref}}}
            with pytest.raises(dhp.InvalidInput) as caught:  # a dispatcher's schema
                dhp.dispatch(store, "t", {}, schema)
            assert caught.value.requirement == "DHP-SEC-003" and ref in caught.value.message
            intent = {"dhp": "1.0", "task_kind": "t", "inputs": {}, "output_schema": schema,
                      "budget": {}}
            with pytest.raises(dhp.InvalidInput):  # and one that arrives in an envelope
                check_envelope({"dhp": "1.0", "handoff_id": dhp.handoff_id(intent),
                                "intent": intent})
        assert fetched == []
        # References inside the schema, by pointer, anchor or embedded $id, still resolve.
        inside = {"$id": "https://example.com/out", "type": "object", "$defs": {
            "n": {"type": "integer"}, "s": {"$anchor": "text", "type": "string"},
            "e": {"$id": "e.json", "enum": ["x"]}},
            "properties": {"n": {"$ref": "#/$defs/n"}, "s": {"$ref": "#text"},
                           "e": {"$ref": "e.json"}}}
        hid = dhp.dispatch(store, "t", {}, inside)
        with dhp.claim(store, hid, "w") as ctx:
            with pytest.raises(dhp.SchemaViolation) as caught:
                ctx.complete({"n": "1", "s": 2, "e": "y"})
            assert [d["path"] for d in caught.value.details] == ["$.e", "$.n", "$.s"]
            ctx.complete({"n": 1, "s": "2", "e": "x"})
    finally:
        store.close()
        web.shutdown()
        web.server_close()


@pytest.mark.covers("DHP-ID-002")
def test_intent_verdicts_shared_across_inputs_still_refuse_bad_intents(monkeypatch):
    """Valid intents that differ only in `inputs` share one cached schema verdict (the intent
    schema checks only that inputs is an object); everything else is still judged."""
    from dhp.core import schemas

    good = make_intent("cache.k", {"n": 1}, {"type": "object"}, {"max_attempts": 2})
    assert good["inputs"] == {"n": 1}
    for inputs, budget in (([1], {"max_attempts": 2}), ({"n": 2}, {"max_attempts": 0}),
                           ({"n": 3}, {"max_attempts": 2, "bogus": 1})):
        with pytest.raises(dhp.InvalidInput):
            make_intent("cache.k", inputs, {"type": "object"}, budget)
    for _ in range(2):  # the output schema is judged with the rest; a refusal is not cached
        with pytest.raises(dhp.InvalidInput, match="output_schema") as refused:
            make_intent("cache.k", {"n": 1}, {"type": "no-such-type"}, {"max_attempts": 2})
        assert refused.value.requirement == "DHP-ENV-004"
    # A schema that looked inside inputs would turn the shared verdict off.
    assert schemas._checks_only_object_type("intent", "inputs")
    looking = dict(schemas.schema("intent"), allOf=[{"properties": {"inputs": {
        "required": ["n"]}}}])
    schemas._checks_only_object_type.cache_clear()
    monkeypatch.setattr(schemas, "schema", lambda name: looking)
    assert not schemas._checks_only_object_type("intent", "inputs")
    monkeypatch.undo()
    schemas._checks_only_object_type.cache_clear()


@pytest.mark.covers("DHP-ENV-010", "DHP-ENV-008")
@pytest.mark.parametrize("created_at, accepted", [
    ("2016-12-31T23:59:60Z", True),  # a leap second: the reference accepts it
    ("2016-12-31T15:59:60-08:00", True),  # the same instant with an offset
    ("2016-12-31T23:58:60Z", False),  # second 60 that is not 23:59:60 UTC
    ("2017-01-01T00:59:60+01:00", True),  # 23:59:60 UTC across a date change
])
def test_leap_seconds_only_at_23_59_60_utc(created_at, accepted):
    envelope = make_envelope(make_intent("t", {}, {}), created_at=None)
    envelope["created_at"] = created_at
    if accepted:
        check_envelope(envelope)
    else:
        with pytest.raises(dhp.InvalidInput) as caught:
            check_envelope(envelope)
        assert caught.value.requirement == "DHP-ENV-008"
