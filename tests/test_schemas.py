"""The JSON Schemas: well-formed, uniquely identified, resolvable, documented, and in
agreement with the examples, the vectors and the reference's error classes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import dhp
import dhp.core.schemas as schemas
import dhp_data
import pytest
from dhp.core.envelope import check_envelope, check_intent
from dhp.core.errors import BY_CODE
from jsonschema import Draft202012Validator

ROOT = Path(__file__).resolve().parent.parent
FILES = sorted(dhp_data.path("schemas").glob("*.json"))
LOADED = {f.stem: json.loads(f.read_text(encoding="utf-8")) for f in FILES}
# The wire objects whose schemas carry examples and a description on every field.
DOCUMENTED = ["intent", "budget", "envelope", "status", "error", "vector-file", "report"]
STATES = ["pending", "claimed", "released", "orphaned", "completed", "dead_lettered", "cancelled"]


def vectors(suite):
    return json.loads(dhp_data.path("vectors", f"{suite}.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", sorted(LOADED))
def test_schema_is_valid_draft_2020_12_with_a_stable_id(name):
    schema = LOADED[name]
    Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert re.fullmatch(r"urn:dhp:1\.0:schema:[a-z][a-z0-9-]*", schema["$id"])
    assert schema["$id"] == f"urn:dhp:1.0:schema:{name}", "the $id names the file"
    assert schema.get("title") and schema.get("description")


def test_ids_are_unique():
    ids = [s["$id"] for s in LOADED.values()]
    assert len(ids) == len(set(ids))


def refs(node):
    if isinstance(node, dict):
        if isinstance(node.get("$ref"), str):
            yield node["$ref"]
        for value in node.values():
            yield from refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from refs(value)


@pytest.mark.parametrize("name", sorted(LOADED))
def test_every_cross_schema_ref_resolves(name):
    resolver = schemas.registry().resolver()
    for ref in refs(LOADED[name]):
        if ref.startswith("#"):
            ref = LOADED[name]["$id"] + ref
        assert ref.startswith("urn:dhp:1.0:schema:"), f"{name}: {ref} is not a DHP schema id"
        resolver.lookup(ref)  # raises if unresolvable


def field_definitions(schema):
    """(path, definition) of every property of the top level and of each $defs entry."""
    holders = [("", schema)] + [(f"$defs/{k}", v) for k, v in schema.get("$defs", {}).items()]
    for base, holder in holders:
        for key, definition in holder.get("properties", {}).items():
            yield f"{base}/{key}", definition
            for sub, subdef in definition.get("properties", {}).items():
                yield f"{base}/{key}/{sub}", subdef


@pytest.mark.parametrize("name", DOCUMENTED)
def test_every_field_has_a_description_and_the_schema_has_examples(name):
    schema = LOADED[name]
    missing = [path for path, d in field_definitions(schema) if "description" not in d]
    assert not missing, f"{name}: fields without a description: {missing}"
    assert schema.get("examples"), f"{name}: no examples"


@pytest.mark.parametrize("name", sorted(LOADED))
def test_examples_validate_against_their_schema(name):
    for example in LOADED[name].get("examples", []):
        assert schemas.errors(name, example) == []


@pytest.mark.covers("DHP-ENV-001", "DHP-ENV-002")
def test_envelope_and_intent_examples_pass_the_semantic_checks_too():
    for envelope in LOADED["envelope"]["examples"]:
        check_envelope(envelope)
    for intent in LOADED["intent"]["examples"]:
        check_intent(intent)


@pytest.mark.covers("DHP-STM-001")
def test_status_states_are_the_seven_states():
    assert LOADED["status"]["properties"]["state"]["enum"] == STATES


# --- error.json is the single source of truth for codes and the definite flag ----------

def definite_per_schema(code):
    """The definite values error.json admits for `code`."""
    return {flag for flag in (True, False)
            if not schemas.errors("error", {"code": code, "message": "m", "definite": flag})}


@pytest.mark.covers("DHP-ERR-002")
def test_error_codes_of_schema_and_reference_agree():
    assert set(LOADED["error"]["properties"]["code"]["enum"]) == set(BY_CODE)


@pytest.mark.covers("DHP-ERR-003")
@pytest.mark.parametrize("code", sorted(BY_CODE))
def test_definite_flag_is_fixed_by_the_schema_and_matches_the_reference(code):
    allowed = definite_per_schema(code)
    assert len(allowed) == 1, f"{code}: the schema leaves definite open: {allowed}"
    assert allowed == {BY_CODE[code].definite}


@pytest.mark.covers("DHP-ERR-001")
@pytest.mark.parametrize("code", sorted(BY_CODE))
def test_reference_errors_serialise_to_valid_error_objects(code):
    error = BY_CODE[code]("something failed", requirement="DHP-FEN-004",
                          details=[{"path": "$.x", "message": "m"}])
    assert schemas.errors("error", error.to_dict()) == []
    assert schemas.errors("error", BY_CODE[code]("bare").to_dict()) == []


@pytest.mark.covers("DHP-ERR-001", "DHP-ERR-002")
@pytest.mark.parametrize("bad", [
    {"code": "timeout", "message": "m", "definite": False},
    {"code": "lease_lost", "message": "m", "definite": False},
    {"code": "internal", "message": "m", "definite": True},
    {"code": "conflict", "message": "m", "definite": True, "requirement": "FEN-004"},
    {"code": "conflict", "definite": True},
    {"code": "conflict", "message": "m", "definite": True, "hint": "x"},
])
def test_error_schema_refuses_malformed_errors(bad):
    assert schemas.errors("error", bad)


# --- the vectors' examples of intents and envelopes -------------------------------------

def parsed(test):
    return dhp.parse_json(test["input_text"]) if "input_text" in test else test["input"]


@pytest.mark.covers("DHP-ID-002", "DHP-ID-003")
def test_identity_vector_intents_validate_as_expected():
    for test in vectors("identity")["tests"]:
        if "canonical" in test["expected"]:
            assert schemas.errors("intent", parsed(test)) == [], test["id"]
        elif {"IntentShape", "Version"} & set(test.get("flags", [])) \
                and "DHP-ENV-004" not in test["requirements"]:
            assert schemas.errors("intent", test["input"]), test["id"]


@pytest.mark.covers("DHP-ENV-001")
def test_envelope_vectors_validate_as_expected():
    for test in vectors("envelope")["tests"]:
        flags = set(test.get("flags", []))
        if test["expected"].get("valid") or test["expected"]["error"] == "integrity_error":
            assert schemas.errors("envelope", parsed(test)) == [], test["id"]
        elif flags & {"Shape", "Version"}:
            assert schemas.errors("envelope", test["input"]), test["id"]


@pytest.mark.parametrize("name", sorted(p.stem for p in dhp_data.path("vectors").glob("*.json")))
def test_vector_files_are_valid_vector_files(name):
    assert schemas.errors("vector-file", vectors(name)) == []


# --- examples in the spec and docs pages --------------------------------------------------

EXAMPLE = re.compile(r"<!--\s*schema:\s*([a-z0-9-]+)\s*-->\s*```(jsonl|json)\n(.*?)```", re.S)
PAGES = sorted(p for folder in ("spec", "docs") for p in (ROOT / folder).glob("**/*.md"))
DOC_EXAMPLES = [
    pytest.param(name, kind, body, id=f"{page.relative_to(ROOT)}:{name}:{n}")
    for page in PAGES
    for n, (name, kind, body) in enumerate(EXAMPLE.findall(page.read_text(encoding="utf-8")))
]


def test_pages_have_examples_to_check():
    if not PAGES:
        pytest.skip("source checkout only: spec/ and docs/ are not installed")
    assert DOC_EXAMPLES, "no <!-- schema: NAME --> examples found in spec/ or docs/"


@pytest.mark.parametrize("name, kind, body", DOC_EXAMPLES)
def test_page_example_validates_against_its_schema(name, kind, body):
    assert name in LOADED, f"the example names an unknown schema {name!r}"
    values = ([json.loads(line) for line in body.splitlines() if line.strip()]
              if kind == "jsonl" else [json.loads(body)])
    for value in values:
        assert schemas.errors(name, value) == []
        if name == "envelope":
            check_envelope(value)
        elif name == "intent":
            check_intent(value)
