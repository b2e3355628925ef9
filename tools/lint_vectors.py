"""Lint the test vector files.

    python tools/lint_vectors.py [VECTORS_DIR] [--requirements FILE] [--schemas DIR]

Checks every VECTORS_DIR/*.json: valid against schemas/vector-file.json; the file is named
after its suite; ids start with the suite name and are unique across all files;
descriptions are unique within a file and state facts (no must/should/may/shall); every
cited requirement exists in spec/requirements.json; every flag is explained in the file's
notes; every checkpoint-chain test's input.intent hashes to its input.handoff_id
("sha256:" + hex(SHA-256(RFC 8785(intent)))). Prints one line per problem and exits 1 if
there is any, else prints a summary and exits 0. Uses only the standard library, jsonschema
and rfc8785, so it runs without the `dhp` package.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from pathlib import Path

import rfc8785
from jsonschema import Draft202012Validator
from referencing import Registry, Resource

ROOT = Path(__file__).resolve().parent.parent
MODAL = re.compile(r"\b(must|should|may|shall)\b", re.IGNORECASE)


def load_schemas(schemas_dir: Path) -> tuple[Registry, dict]:
    """All schemas by $id (for cross-file $refs) and the vector-file schema itself."""
    resources, vector_schema = [], None
    for file in sorted(schemas_dir.glob("*.json")):
        schema = json.loads(file.read_text(encoding="utf-8"))
        resources.append((schema["$id"], Resource.from_contents(schema)))
        if file.stem == "vector-file":
            vector_schema = schema
    if vector_schema is None:
        raise FileNotFoundError(f"{schemas_dir / 'vector-file.json'} not found")
    return Registry().with_resources(resources), vector_schema


def load_requirement_ids(path: Path) -> set[str]:
    """Ids from requirements.json: a list, or {"requirements": [...]}, of {"id": ...}."""
    data = json.loads(path.read_text(encoding="utf-8"))
    items = data.get("requirements", []) if isinstance(data, dict) else data
    return {item["id"] for item in items if isinstance(item, dict) and "id" in item}


def json_path(parts) -> str:
    out = "$"
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def chain_intent_problem(vector_input: dict) -> str | None:
    """Why a chain test's intent is not the one its handoff_id names, or None. Readers build
    the log header from the pair, so with a mismatch the test judges the header, not the chain."""
    try:
        got = "sha256:" + hashlib.sha256(rfc8785.dumps(vector_input["intent"])).hexdigest()
    except ValueError as exc:  # out-of-profile numbers, lone surrogates
        return f"input.intent has no RFC 8785 form ({exc}), so no handoff_id"
    if got != vector_input["handoff_id"]:
        return f"input.intent hashes to {got}, not to input.handoff_id {vector_input['handoff_id']}"
    return None


def lint(vectors_dir: Path, requirements: Path, schemas_dir: Path) -> tuple[list[str], int]:
    """Every problem found, as printable lines, and the number of tests seen."""
    problems: list[str] = []
    try:
        known = load_requirement_ids(requirements)
    except (OSError, ValueError) as exc:
        problems.append(f"{requirements}: cannot read the requirements index: {exc}")
        known = set()
    else:
        if not known:
            problems.append(f"{requirements}: lists no requirements, so no citation can be "
                            "checked (generate it from spec/ first)")
    registry, vector_schema = load_schemas(schemas_dir)
    validator = Draft202012Validator(vector_schema, registry=registry)

    files = sorted(vectors_dir.glob("*.json"))
    if not files:
        problems.append(f"{vectors_dir}: no *.json vector files found")
    seen_ids: dict[str, str] = {}
    count = 0
    for file in files:
        name = file.name
        try:
            doc = json.loads(file.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            problems.append(f"{name}: not readable JSON: {exc}")
            continue
        schema_errors = sorted(validator.iter_errors(doc), key=lambda e: list(map(str, e.path)))
        for error in schema_errors:
            problems.append(f"{name}: {json_path(error.absolute_path)}: {error.message}")
        if schema_errors or not isinstance(doc, dict):
            continue  # the rules below assume the shape the schema guarantees
        suite = doc["suite"]
        if file.stem != suite:
            problems.append(f"{name}: suite is {suite!r}, so the file is to be named "
                            f"{suite}.json")
        notes = doc.get("notes", {})
        descriptions: dict[str, str] = {}
        for test in doc["tests"]:
            count += 1
            tid = test["id"]
            where = f"{name}: {tid}"
            if not tid.startswith(suite + "-"):
                problems.append(f"{where}: id does not start with the suite name '{suite}-'")
            if tid in seen_ids:
                problems.append(f"{where}: id already used in {seen_ids[tid]}")
            else:
                seen_ids[tid] = name
            text = test["description"]
            if text in descriptions:
                problems.append(f"{where}: same description as {descriptions[text]}: {text!r}")
            else:
                descriptions[text] = tid
            modal = MODAL.search(text)
            if modal:
                problems.append(f"{where}: description uses the modal verb "
                                f"{modal.group(0)!r}; state what the test shows as a fact")
            for req in test["requirements"]:
                if known and req not in known:
                    problems.append(f"{where}: cites {req}, which is not in {requirements.name}")
            for flag in test.get("flags", []):
                if flag not in notes:
                    problems.append(f"{where}: flag {flag!r} is not explained in the file's "
                                    "notes")
            if suite == "checkpoint-chain":  # the schema guarantees handoff_id and intent
                problem = chain_intent_problem(test["input"])
                if problem:
                    problems.append(f"{where}: {problem}")
    return problems, count


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Lint DHP test vector files.")
    parser.add_argument("vectors", nargs="?", type=Path, default=ROOT / "vectors",
                        help="folder of vector files (default: the repository's vectors/)")
    parser.add_argument("--requirements", type=Path, default=ROOT / "spec" / "requirements.json",
                        help="requirements index (default: spec/requirements.json)")
    parser.add_argument("--schemas", type=Path, default=ROOT / "schemas",
                        help="schema folder holding vector-file.json (default: schemas/)")
    args = parser.parse_args(argv)
    if not args.vectors.is_dir():
        print(f"lint_vectors: {args.vectors} is not a folder", file=sys.stderr)
        return 1
    try:
        problems, count = lint(args.vectors, args.requirements, args.schemas)
    except (OSError, ValueError, KeyError) as exc:
        print(f"lint_vectors: cannot load the schemas from {args.schemas}: {exc}",
              file=sys.stderr)
        return 1
    for line in problems:
        print(line)
    if problems:
        print(f"{len(problems)} problem(s) in {args.vectors}")
        return 1
    files = len(list(args.vectors.glob("*.json")))
    print(f"OK: {count} tests in {files} files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
