"""`dhp validate`: check envelopes, checkpoint files and JSON-lines logs against the schemas
and the semantic rules (ids, hash chain, fence order, seq order).

What a file holds is decided by its name and first value:
- `*.json`: one JSON document: an object is an envelope; an array is a list of checkpoint
  records; an object `{"handoff_id", "intent", "records"}` (the input of a checkpoint-chain
  vector; `intent` may be left out) is a chain.
- anything else is JSON lines: a log when the first line is an object with a "type" member,
  else one checkpoint record per line.
Logs and record files stream; a whole-document `.json` file is bounded like one log line.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from dhp.core.canonical import parse_json
from dhp.core.chain import ChainVerifier
from dhp.core.envelope import PROTOCOL_VERSION, check_envelope
from dhp.core.errors import DHPError, InvalidInput
from dhp.core.logfile import MAX_LINE_BYTES, read_json_lines, read_log

CHAIN_FORMS = ({"handoff_id", "records"}, {"handoff_id", "intent", "records"})


@dataclass
class FileReport:
    """The verdict on one file. `error` is set when the file could not be read at all."""
    path: str
    problems: list[dict] = field(default_factory=list)
    warnings: list[dict] = field(default_factory=list)
    error: str | None = None

    @property
    def ok(self) -> bool:
        return not self.problems and self.error is None

    def to_dict(self) -> dict:
        out = {"path": self.path, "ok": self.ok, "problems": self.problems,
               "warnings": self.warnings}
        if self.error is not None:
            out["error"] = self.error
        return out


def _problem(exc: DHPError, line: int | None = None) -> dict:
    details = exc.details if isinstance(exc.details, dict) else {}
    return {"line": details.get("line", line), "requirement": exc.requirement,
            "code": exc.code, "message": exc.message}


def validate_path(path: str, *, max_line: int = MAX_LINE_BYTES) -> FileReport:
    """Validate one file; never raises for bad content (only the report says so)."""
    report = FileReport(path)
    try:
        f = open(path, "rb")  # closed below; open errors are reported
    except OSError as exc:
        report.error = f"cannot read {path}: {exc.strerror or exc}"
        return report
    try:
        with f:
            if path.endswith(".json"):
                _validate_document(f, report, max_line)
            else:
                _validate_lines(f, report, max_line)
    except OSError as exc:  # e.g. a directory, or an I/O error mid-read
        report.error = f"cannot read {path}: {exc.strerror or exc}"
    except RecursionError:
        report.problems.append({"line": 1, "requirement": "DHP-SEC-002", "code": "invalid_input",
                                "message": "value is nested too deeply to verify"})
    return report


# --- whole JSON documents -------------------------------------------------------------------

def _validate_document(f: BinaryIO, report: FileReport, max_line: int) -> None:
    data = f.read(max_line + 1)
    if len(data) > max_line:
        report.problems.append({"line": 1, "requirement": "DHP-SEC-002", "code": "invalid_input",
                                "message": f"document is larger than {max_line} bytes"})
        return
    try:
        doc = parse_json(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        report.problems.append({"line": data.count(b"\n", 0, exc.start) + 1,
                                "requirement": "DHP-CJ-001", "code": "invalid_input",
                                "message": "not valid UTF-8"})
        return
    except InvalidInput as exc:
        where = re.search(r"line (\d+) column", exc.message)
        report.problems.append(_problem(exc, int(where.group(1)) if where else 1))
        return
    if isinstance(doc, list):
        _check_records(doc, report)
    elif isinstance(doc, dict) and set(doc) in CHAIN_FORMS:
        if "intent" in doc:  # its id must be the intent's (DHP-ENV-002)
            _check_envelope_doc({"dhp": PROTOCOL_VERSION, "handoff_id": doc["handoff_id"],
                                 "intent": doc["intent"]}, report)
        _check_records(doc["records"], report, doc["handoff_id"])
    else:
        _check_envelope_doc(doc, report)


def _check_envelope_doc(doc: Any, report: FileReport) -> None:
    try:
        check_envelope(doc)
    except DHPError as exc:
        if isinstance(exc, InvalidInput) and isinstance(exc.details, list) and exc.details:
            for item in exc.details:  # one line per schema violation
                report.problems.append({"line": 1, "requirement": exc.requirement,
                                        "code": exc.code,
                                        "message": f"{item['path']}: {item['message']}"})
        else:
            report.problems.append(_problem(exc, 1))


def _check_records(records: Any, report: FileReport, hid: Any = None) -> None:
    if not isinstance(records, list):
        report.problems.append({"line": 1, "requirement": "DHP-CKP-001", "code": "invalid_input",
                                "message": "records must be an array of checkpoint records"})
        return
    if hid is None and records and isinstance(records[0], dict):
        hid = records[0].get("handoff_id")
    verifier = ChainVerifier(hid if isinstance(hid, str) else "")
    for index, record in enumerate(records):
        try:
            verifier.add(record)
        except DHPError as exc:
            problem = _problem(exc, 1)
            problem["message"] = f"record [{index}]: {exc.message}"
            report.problems.append(problem)
            return


# --- JSON lines -----------------------------------------------------------------------------

def _first_value(f: BinaryIO, max_line: int) -> Any:
    """The first line's value, or None if it does not parse; rewinds the file."""
    raw = f.readline(max_line + 1)
    f.seek(0)
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        return None


def _validate_lines(f: BinaryIO, report: FileReport, max_line: int) -> None:
    first = _first_value(f, max_line)
    is_records = isinstance(first, dict) and "type" not in first
    try:
        if is_records:
            _check_record_lines(f, report, max_line)
        else:
            for _line_no, kind, obj in read_log(f, max_line=max_line, name=report.path):
                if kind == "warning":
                    report.warnings.append(obj)
    except DHPError as exc:
        report.problems.append(_problem(exc, 1))


def _check_record_lines(f: BinaryIO, report: FileReport, max_line: int) -> None:
    verifier: ChainVerifier | None = None
    for line_no, kind, obj in read_json_lines(f, max_line=max_line, name=report.path):
        if kind == "warning":
            report.warnings.append(obj)
            continue
        if verifier is None:
            hid = obj.get("handoff_id") if isinstance(obj, dict) else None
            verifier = ChainVerifier(hid if isinstance(hid, str) else "")
        try:
            verifier.add(obj)
        except DHPError as exc:
            report.problems.append(_problem(exc, line_no))
            return


# --- output ---------------------------------------------------------------------------------

def format_text(report: FileReport) -> list[str]:
    """The human lines for one file: warnings, then `OK <file>` or one line per problem."""
    lines = [f"{report.path}:{w['line']}: warning: {w['requirement']}: {w['message']}"
             for w in report.warnings]
    if report.error is not None:
        return lines
    if report.ok:
        return lines + [f"OK {report.path}"]
    return lines + [f"{report.path}:{p['line']}: {p['requirement']}: {p['message']}"
                    for p in report.problems]


def exit_code(reports: list[FileReport]) -> int:
    if any(r.error is not None for r in reports):
        return 2
    return 0 if all(r.ok for r in reports) else 1


# --- the shipped vectors --------------------------------------------------------------------

def _load_suite(name: str) -> dict:
    import dhp_data
    return json.loads(dhp_data.path("vectors", name).read_text(encoding="utf-8"))


def log_vector_outcome(report: FileReport) -> dict:
    """A report in the form of a log vector's `expected`."""
    if report.ok:
        return {"valid": True, "warnings": [w["requirement"] for w in report.warnings]}
    return {"valid": False,
            "errors": [{"line": p["line"], "requirement": p["requirement"], "code": p["code"]}
                       for p in report.problems]}


def chain_vector_outcome(vector_input: dict) -> dict:
    """Run a checkpoint-chain vector; the result in the form of its `expected`."""
    verifier = ChainVerifier(vector_input["handoff_id"])
    for index, record in enumerate(vector_input["records"]):
        try:
            verifier.add(record)
        except DHPError as exc:
            return {"error": exc.code, "at": index}
    return {"valid": True}


def run_vectors() -> list[tuple[str, str, bool, str]]:
    """Check every shipped log and checkpoint-chain vector: `(suite, id, passed, detail)`."""
    import dhp_data
    out = []
    log_suite = _load_suite("log.json")
    for test in log_suite["tests"]:
        path = str(dhp_data.path("vectors", test["input"]["file"]))
        got = log_vector_outcome(validate_path(path))
        expected = test["expected"]
        if expected.get("valid"):
            expected = {"valid": True, "warnings": expected.get("warnings", [])}
        out.append(("log", test["id"], got == expected, _verdict(got)))
    for test in _load_suite("checkpoint-chain.json")["tests"]:
        got = chain_vector_outcome(test["input"])
        out.append(("checkpoint-chain", test["id"], got == test["expected"], _verdict(got)))
    return out


def _verdict(got: dict) -> str:
    if got.get("valid"):
        warnings = got.get("warnings")
        return "valid" + (f" (warnings: {', '.join(warnings)})" if warnings else "")
    if "errors" in got:
        return "invalid: " + ", ".join(f"line {e['line']} {e['requirement']}"
                                       for e in got["errors"])
    return f"invalid: {got['error']} at record {got['at']}"


def problems_json(reports: list[FileReport]) -> str:
    return json.dumps({"ok": all(r.ok for r in reports),
                       "files": [r.to_dict() for r in reports]}, ensure_ascii=False, indent=2)
