"""tools/lint_vectors.py: passes on the shipped vectors and fails, with a clear message, on
each kind of broken vector file."""

from __future__ import annotations

import copy
import hashlib
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import rfc8785

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tools" / "lint_vectors.py"
if not SCRIPT.exists():
    pytest.skip("source checkout only: tools/ is not installed", allow_module_level=True)

_spec = importlib.util.spec_from_file_location("lint_vectors", SCRIPT)
lint_vectors = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(lint_vectors)

GOOD = {
    "suite": "identity",
    "description": "A tiny suite.",
    "notes": {"Trap": "What the trap is."},
    "tests": [
        {"id": "identity-001", "description": "first case", "requirements": ["DHP-ID-001"],
         "input": {}, "expected": {"error": "invalid_input"}, "flags": ["Trap"]},
        {"id": "identity-002", "description": "second case", "requirements": ["DHP-CJ-001"],
         "input": {}, "expected": {"error": "invalid_input"}},
    ],
}
REQUIREMENTS = {"requirements": [{"id": "DHP-ID-001", "level": "MUST"},
                                 {"id": "DHP-CJ-001", "level": "MUST"}]}


def run_lint(tmp_path, files, requirements=REQUIREMENTS):
    """Write `files` (name -> JSON value or raw text) and lint them."""
    vdir = tmp_path / "vectors"
    vdir.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        text = content if isinstance(content, str) else json.dumps(content)
        (vdir / name).write_text(text, encoding="utf-8")
    req = tmp_path / "requirements.json"
    if requirements is not None:
        req.write_text(json.dumps(requirements), encoding="utf-8")
    problems, _ = lint_vectors.lint(vdir, req, ROOT / "schemas")
    return problems


def broken(change):
    doc = copy.deepcopy(GOOD)
    change(doc)
    return doc


def test_a_clean_file_passes(tmp_path):
    assert run_lint(tmp_path, {"identity.json": GOOD}) == []


def test_shipped_vectors_pass_the_lint():
    """Fails while spec/requirements.json lists no requirements: citations are unchecked."""
    run = subprocess.run([sys.executable, str(SCRIPT), str(ROOT / "vectors")],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.startswith("OK: ")


@pytest.mark.parametrize("change, expected", [
    (lambda d: d["tests"][0].pop("requirements"), "'requirements' is a required property"),
    (lambda d: d["tests"][0].update(requirements=[]), "$.tests[0].requirements"),
    (lambda d: d["tests"][0].update(id="Identity-1"), "$.tests[0].id"),
    (lambda d: d.update(suite="identities"), "$.suite"),
    (lambda d: d.update(extra=1), "'extra' was unexpected"),
    (lambda d: d["tests"][0].update(expected={"canonical": "{}"}), "$.tests[0].expected"),
    (lambda d: d["tests"][0].update(expected={"error": "oops"}), "$.tests[0].expected"),
])
def test_schema_violations_are_reported_with_their_path(tmp_path, change, expected):
    problems = run_lint(tmp_path, {"identity.json": broken(change)})
    assert any(expected in p for p in problems), problems
    assert all(p.startswith("identity.json: ") for p in problems)


def test_file_name_matches_suite(tmp_path):
    problems = run_lint(tmp_path, {"identities.json": GOOD})
    assert problems == ["identities.json: suite is 'identity', so the file is to be named "
                        "identity.json"]


def test_ids_start_with_the_suite_name(tmp_path):
    doc = broken(lambda d: d["tests"][1].update(id="envelope-002"))
    assert run_lint(tmp_path, {"identity.json": doc}) == [
        "identity.json: envelope-002: id does not start with the suite name 'identity-'"]


def test_ids_are_unique_within_and_across_files(tmp_path):
    doc = broken(lambda d: d["tests"][1].update(id="identity-001"))
    assert "identity.json: identity-001: id already used in identity.json" in \
        run_lint(tmp_path, {"identity.json": doc})
    other = broken(lambda d: d.update(suite="envelope"))
    problems = run_lint(tmp_path / "two", {"identity.json": GOOD, "envelope.json": other})
    assert "identity.json: identity-001: id already used in envelope.json" in problems


def test_descriptions_are_unique_within_a_file(tmp_path):
    doc = broken(lambda d: d["tests"][1].update(description="first case"))
    assert run_lint(tmp_path, {"identity.json": doc}) == [
        "identity.json: identity-002: same description as identity-001: 'first case'"]


@pytest.mark.parametrize("verb", ["must", "Should", "MAY", "shall"])
def test_descriptions_have_no_modal_verbs(tmp_path, verb):
    doc = broken(lambda d: d["tests"][0].update(description=f"the id {verb} match"))
    problems = run_lint(tmp_path, {"identity.json": doc})
    assert problems == [f"identity.json: identity-001: description uses the modal verb "
                        f"{verb!r}; state what the test shows as a fact"]


def test_modal_verbs_are_matched_as_words(tmp_path):
    doc = broken(lambda d: d["tests"][0].update(description="mustard in mayonnaise"))
    assert run_lint(tmp_path, {"identity.json": doc}) == []


def test_cited_requirements_exist(tmp_path):
    doc = broken(lambda d: d["tests"][0].update(requirements=["DHP-ID-001", "DHP-ID-999"]))
    assert run_lint(tmp_path, {"identity.json": doc}) == [
        "identity.json: identity-001: cites DHP-ID-999, which is not in requirements.json"]


def test_requirements_index_as_a_plain_list_is_accepted(tmp_path):
    assert run_lint(tmp_path, {"identity.json": GOOD},
                    requirements=REQUIREMENTS["requirements"]) == []


@pytest.mark.parametrize("requirements, expected", [
    ({"requirements": []}, "lists no requirements"),
    (None, "cannot read the requirements index"),
])
def test_an_empty_or_missing_requirements_index_is_an_error(tmp_path, requirements, expected):
    problems = run_lint(tmp_path, {"identity.json": GOOD}, requirements=requirements)
    assert len(problems) == 1 and expected in problems[0]


def test_flags_are_explained_in_notes(tmp_path):
    doc = broken(lambda d: d.pop("notes"))
    assert run_lint(tmp_path, {"identity.json": doc}) == [
        "identity.json: identity-001: flag 'Trap' is not explained in the file's notes"]


def test_unparsable_file_and_empty_folder(tmp_path):
    problems = run_lint(tmp_path, {"identity.json": '{"suite": '})
    assert len(problems) == 1 and problems[0].startswith("identity.json: not readable JSON")
    assert any("no *.json vector files" in p for p in run_lint(tmp_path / "empty", {}))


def test_command_line_exit_codes(tmp_path):
    vdir = tmp_path / "vectors"
    vdir.mkdir()
    (vdir / "identity.json").write_text(json.dumps(GOOD), encoding="utf-8")
    req = tmp_path / "requirements.json"
    req.write_text(json.dumps(REQUIREMENTS), encoding="utf-8")

    def cli(*args):
        return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True,
                              text=True)

    ok = cli(str(vdir), "--requirements", str(req))
    assert (ok.returncode, ok.stdout) == (0, "OK: 2 tests in 1 files\n")
    (vdir / "identity.json").write_text(json.dumps(broken(lambda d: d.pop("notes"))))
    bad = cli(str(vdir), "--requirements", str(req))
    assert bad.returncode == 1
    assert "flag 'Trap' is not explained" in bad.stdout and "1 problem(s)" in bad.stdout
    missing = cli(str(tmp_path / "nowhere"))
    assert missing.returncode == 1 and "is not a folder" in missing.stderr


# --- checkpoint-chain: the intent is the one the handoff_id names -------------------------

def digest(value) -> str:
    return "sha256:" + hashlib.sha256(rfc8785.dumps(value)).hexdigest()


INTENT = {"dhp": "1.0", "task_kind": "t", "inputs": {}, "output_schema": {}, "budget": {}}
CHAIN = {
    "suite": "checkpoint-chain",
    "description": "A tiny chain suite.",
    "tests": [{"id": "checkpoint-chain-001", "description": "an empty chain",
               "requirements": ["DHP-ID-001"],
               "input": {"handoff_id": digest(INTENT), "intent": INTENT, "records": []},
               "expected": {"valid": True}}],
}


def chain_problems(tmp_path, change):
    doc = copy.deepcopy(CHAIN)
    change(doc["tests"][0]["input"])
    return run_lint(tmp_path, {"checkpoint-chain.json": doc})


def test_a_chain_whose_intent_hashes_to_its_id_passes(tmp_path):
    assert chain_problems(tmp_path, lambda i: None) == []


def test_a_tampered_chain_intent_is_reported(tmp_path):
    problems = chain_problems(tmp_path, lambda i: i["intent"].update(task_kind="u"))
    assert problems == [f"checkpoint-chain.json: checkpoint-chain-001: input.intent hashes to "
                        f"{digest({**INTENT, 'task_kind': 'u'})}, not to input.handoff_id "
                        f"{digest(INTENT)}"]


@pytest.mark.parametrize("change, expected", [
    (lambda i: i.pop("intent"), "'intent' is a required property"),
    (lambda i: i["intent"].pop("budget"), "$.tests[0].input.intent"),
    (lambda i: i.update(extra=1), "'extra' was unexpected"),
])
def test_a_chain_input_without_a_valid_intent_is_a_schema_error(tmp_path, change, expected):
    problems = chain_problems(tmp_path, change)
    assert any(expected in p for p in problems), problems


def test_a_chain_intent_outside_the_json_profile_is_reported(tmp_path):
    problems = chain_problems(tmp_path, lambda i: i["intent"]["inputs"].update(n=2**53))
    assert len(problems) == 1 and "input.intent has no RFC 8785 form" in problems[0], problems


def test_a_tampered_intent_in_the_shipped_chain_vectors_fails_the_lint(tmp_path):
    shipped = json.loads((ROOT / "vectors" / "checkpoint-chain.json").read_text("utf-8"))
    shipped["tests"][4]["input"]["intent"]["inputs"]["pages"] = 13
    requirements = json.loads((ROOT / "spec" / "requirements.json").read_text("utf-8"))
    problems = run_lint(tmp_path, {"checkpoint-chain.json": shipped}, requirements)
    assert len(problems) == 1, problems
    assert problems[0].startswith("checkpoint-chain.json: checkpoint-chain-005: input.intent "
                                  "hashes to ")


@pytest.mark.parametrize("generator", ["identity", "envelope", "fencing", "chain", "schedule"])
def test_vector_files_are_what_their_generator_writes(generator):
    script = ROOT / "tools" / f"gen_{generator}_vectors.py"
    run = subprocess.run([sys.executable, str(script), "--check"], capture_output=True,
                         text=True)
    assert run.returncode == 0, run.stdout + run.stderr
