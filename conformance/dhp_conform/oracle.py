"""The kit's independent oracles: canonical JSON (the `rfc8785` library), handoff ids, the
shipped JSON Schemas, and a checkpoint-chain verifier. Nothing here comes from `dhp`."""

from __future__ import annotations

import hashlib
import json
from functools import cache
from typing import Any

import dhp_data
import rfc8785
from jsonschema import Draft202012Validator
from referencing import Registry, Resource


def canonical(value: Any) -> bytes:
    """RFC 8785 canonical form (raises on values JCS refuses)."""
    return rfc8785.dumps(value)


def digest(value: Any) -> str:
    return "sha256:" + hashlib.sha256(canonical(value)).hexdigest()


def handoff_id(intent: dict) -> str:
    """DHP-ID-001."""
    return digest(intent)


def intent_of(args: dict) -> dict:
    """The intent a dispatch request describes (DHP-ID-002)."""
    return {"dhp": "1.0", "task_kind": args["task_kind"], "inputs": args["inputs"],
            "output_schema": args["output_schema"], "budget": args.get("budget") or {}}


@cache
def _registry() -> Registry:
    resources = []
    for file in sorted(dhp_data.path("schemas").glob("*.json")):
        schema = json.loads(file.read_text(encoding="utf-8"))
        resources.append((schema["$id"], Resource.from_contents(schema)))
    return Registry().with_resources(resources)


@cache
def validator(name: str) -> Draft202012Validator:
    file = dhp_data.path("schemas", f"{name}.json")
    return Draft202012Validator(json.loads(file.read_text(encoding="utf-8")),
                                registry=_registry(),
                                format_checker=Draft202012Validator.FORMAT_CHECKER)


@cache
def binding_validator(definition: str) -> Draft202012Validator:
    """A validator for `$defs/<definition>` of schemas/mcp-tools.json (the MCP binding)."""
    ref = f"urn:dhp:1.0:schema:mcp-tools#/$defs/{definition}"
    return Draft202012Validator({"$ref": ref}, registry=_registry(),
                                format_checker=Draft202012Validator.FORMAT_CHECKER)


def binding_errors(definition: str, instance: Any) -> list[str]:
    """Every violation of a tool's argument or result schema in the MCP binding."""
    return [f"{_path(e)}: {e.message}"
            for e in binding_validator(definition).iter_errors(instance)]


def _path(error: Any) -> str:
    out = "$"
    for part in error.absolute_path:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def schema_errors(name: str, instance: Any) -> list[str]:
    """Every violation of a shipped schema, as 'path: message'."""
    return [f"{_path(e)}: {e.message}" for e in validator(name).iter_errors(instance)]


def user_schema_errors(schema: dict, instance: Any) -> list[str]:
    """Violations of a handoff's output_schema (DHP-RES-001)."""
    checker = Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER)
    return [f"{_path(e)}: {e.message}" for e in checker.iter_errors(instance)]


class LogProblem(Exception):
    """A defect in an exported log: the line (1-based, 0 for the file) and the requirement."""

    def __init__(self, line: int, requirement: str, message: str):
        super().__init__(f"line {line}: {requirement}: {message}")
        self.line, self.requirement, self.message = line, requirement, message


def check_log(text: str) -> dict:
    """Verify a whole exported log (DHP-LOG-*, DHP-CKP-*) and return
    {"envelope", "checkpoints": [records], "result": record|None}; raise LogProblem."""
    if text and not text.endswith("\n"):
        raise LogProblem(text.count("\n") + 1, "DHP-LOG-001",
                         "the last line of an exported log does not end with LF")
    lines = text.split("\n")[:-1] if text else []
    if not lines:
        raise LogProblem(0, "DHP-LOG-002", "the log is empty; a header line comes first")
    parsed = []
    for n, line in enumerate(lines, 1):
        try:
            obj = json.loads(line)
        except ValueError as exc:
            raise LogProblem(n, "DHP-LOG-001", f"not JSON: {exc}") from None
        problems = schema_errors("log-line", obj)
        if problems:
            raise LogProblem(n, "DHP-LOG-007", "; ".join(problems[:5]))
        parsed.append(obj)
    if parsed[0]["type"] != "header":
        raise LogProblem(1, "DHP-LOG-002", f"first line is a {parsed[0]['type']}, not the header")
    envelope = parsed[0]["envelope"]
    hid = envelope["handoff_id"]
    if handoff_id(envelope["intent"]) != hid:
        raise LogProblem(1, "DHP-ENV-002", f"envelope handoff_id {hid} is not the hash of its "
                         f"intent ({handoff_id(envelope['intent'])})")
    chain = ChainChecker(hid)
    result = None
    for n, obj in enumerate(parsed[1:], 2):
        if obj["type"] == "header":
            raise LogProblem(n, "DHP-LOG-002", "a second header line")
        if result is not None:
            raise LogProblem(n, "DHP-LOG-004", "a line after the result line")
        try:
            if obj["type"] == "checkpoint":
                chain.add(obj["record"])
            else:
                chain.add_result(obj["record"])
                result = obj["record"]
        except LogProblem as exc:
            raise LogProblem(n, exc.requirement, exc.message) from None
    return {"envelope": envelope, "checkpoints": chain.records, "result": result}


class ChainChecker:
    """The kit's own checkpoint-chain verifier (DHP-CKP-002..008)."""

    def __init__(self, hid: str):
        self.hid = hid
        self.records: list[dict] = []
        self.last_hash = hid
        self.last_fence = 0

    def _common(self, record: dict, what: str) -> None:
        if record["handoff_id"] != self.hid:
            raise LogProblem(0, "DHP-CKP-007", f"{what} belongs to {record['handoff_id']}, "
                             f"not {self.hid}")
        body = {k: v for k, v in record.items() if k != "hash"}
        if digest(body) != record["hash"]:
            raise LogProblem(0, "DHP-CKP-005", f"{what} hash {record['hash']} does not cover its "
                             f"content (expected {digest(body)})")
        if record["prev"] != self.last_hash:
            req = "DHP-CKP-003" if not self.records else "DHP-CKP-004"
            raise LogProblem(0, req, f"{what} prev {record['prev']} is not {self.last_hash}")
        if record["fence"] < self.last_fence:
            raise LogProblem(0, "DHP-CKP-006", f"{what} fence {record['fence']} is below the "
                             f"previous record's {self.last_fence}")

    def add(self, record: dict) -> None:
        expected = len(self.records) + 1
        if record["seq"] != expected:
            raise LogProblem(0, "DHP-CKP-002", f"seq {record['seq']} where {expected} was due")
        self._common(record, f"checkpoint seq {record['seq']}")
        self.records.append(record)
        self.last_hash, self.last_fence = record["hash"], record["fence"]

    def add_result(self, record: dict) -> None:
        self._common(record, "result record")
