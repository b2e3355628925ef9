"""Every JSON example in spec/ and docs/ marked `<!-- schema: NAME -->` is valid against
schemas/NAME.json, and its ids and hashes are the real ones, so no example can mislead."""

from __future__ import annotations

import json
import re
from pathlib import Path

import dhp
import dhp_data
import pytest
from dhp.core import schemas

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = re.compile(r"<!--\s*schema:\s*([A-Za-z0-9_-]+)\s*-->\s*\n(?:[ \t]*\n)*"
                     r"```(json|jsonl)[ \t]*\n(.*?)\n```", re.S)
# The objects every reader of the spec needs an example of.
EXPECTED = {"intent", "envelope", "checkpoint", "result", "log-line", "error", "status"}


def examples() -> list[tuple[str, str, str, str]]:
    """(where, schema name, fence language, body) for every marked example."""
    out = []
    sources = sorted((ROOT / "spec").glob("*.md")) + sorted((ROOT / "docs").rglob("*.md"))
    for path in sources:
        text = path.read_text(encoding="utf-8")
        for m in EXAMPLE.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            out.append((f"{path.relative_to(ROOT)}:{line}", m.group(1), m.group(2), m.group(3)))
    return out


def _semantic(name: str, obj: dict, chain: dict) -> None:
    """The rules a schema cannot express: ids and hashes (DHP-ENV-002, DHP-CKP-005)."""
    if name == "envelope":
        assert obj["handoff_id"] == dhp.handoff_id(obj["intent"]), "handoff_id is not the " \
            f"id of the intent: expected {dhp.handoff_id(obj['intent'])}"
    if name in ("checkpoint", "result"):
        body = {k: v for k, v in obj.items() if k != "hash"}
        assert obj["hash"] == dhp.sha256_of(body), f"hash should be {dhp.sha256_of(body)}"
        if "last" in chain:
            assert obj["prev"] == chain["last"], f"prev should be {chain['last']}"
        chain["last"] = obj["hash"]
    if name == "log-line":
        kind = obj["type"]
        if kind == "header":
            _semantic("envelope", obj["envelope"], chain)
            chain["last"] = obj["envelope"]["handoff_id"]
        else:
            _semantic("checkpoint" if kind == "checkpoint" else "result", obj["record"], chain)


def check_example(name: str, language: str, body: str) -> None:
    """Raise AssertionError naming the problem with one example."""
    if not dhp_data.path("schemas", f"{name}.json").is_file():
        raise AssertionError(f"the example names schema {name!r}, but schemas/{name}.json "
                             "does not exist")
    docs = [body] if language == "json" else body.splitlines()
    chain: dict = {}
    for number, doc in enumerate(docs, 1):
        try:
            obj = json.loads(doc)
        except json.JSONDecodeError as exc:
            raise AssertionError(f"line {number} of the example is not JSON: {exc}") from None
        problems = schemas.errors(name, obj)
        assert not problems, f"line {number}: not a valid {name}: {problems}"
        _semantic(name, obj, chain)


@pytest.mark.parametrize("where, name, language, body", examples(),
                         ids=[e[0] for e in examples()])
def test_example_is_valid(where, name, language, body):
    check_example(name, language, body)


def test_every_main_object_has_an_example():
    assert EXPECTED <= {name for _, name, _, _ in examples()}


def test_a_missing_schema_is_named():
    with pytest.raises(AssertionError, match="schemas/no-such.json does not exist"):
        check_example("no-such", "json", "{}")


def test_bad_examples_are_caught():
    error = {"code": "lease_lost", "message": "stale", "definite": False}
    with pytest.raises(AssertionError, match="not a valid error"):
        check_example("error", "json", json.dumps(error))
    intent = {"dhp": "1.0", "task_kind": "t", "inputs": {}, "output_schema": {}, "budget": {}}
    envelope = {"dhp": "1.0", "handoff_id": "sha256:" + "0" * 64, "intent": intent}
    with pytest.raises(AssertionError, match="handoff_id is not the id"):
        check_example("envelope", "json", json.dumps(envelope))
    hid = dhp.handoff_id(intent)
    record = {"handoff_id": hid, "seq": 1, "fence": 1, "state": 1, "spend": 0, "prev": hid}
    record["hash"] = dhp.sha256_of(record)
    lines = [{"type": "header", "envelope": {**envelope, "handoff_id": hid}},
             {"type": "checkpoint", "record": record}]
    check_example("log-line", "jsonl", "\n".join(json.dumps(x) for x in lines))
    lines[1]["record"] = {**record, "state": 2}
    with pytest.raises(AssertionError, match="hash should be"):
        check_example("log-line", "jsonl", "\n".join(json.dumps(x) for x in lines))
    with pytest.raises(AssertionError, match="not JSON"):
        check_example("status", "json", "{")
