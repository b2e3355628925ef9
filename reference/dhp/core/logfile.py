"""The portable JSON-lines log of a handoff (spec: log, DHP-LOG-*).

Line 1 is `{"type": "header", "envelope": ...}`, then one `{"type": "checkpoint", "record": ...}`
per checkpoint in seq order, then optionally one `{"type": "result", "record": ...}`, last.
UTF-8, every line ends with LF. A final line without LF that does not parse is *torn* (a crash
mid-write): it is dropped with a warning. Any other bad line is an error naming the file, the
line and the requirement; reading stops at the first error, since nothing after a broken
line can be trusted (DHP-LOG-008).

Reading streams line by line with a bounded line size (DHP-SEC-002), so memory does not grow
with the length of the log.
"""

from __future__ import annotations

import io
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO, NoReturn

from dhp.core import schemas
from dhp.core.canonical import STRICT_DECODER, canonical_json
from dhp.core.chain import ChainVerifier
from dhp.core.envelope import check_envelope
from dhp.core.errors import DHPError, IntegrityError, InvalidInput, SchemaViolation

MAX_LINE_BYTES = 16 * 1024 * 1024  # DHP-SEC-002 default bound, LF excluded
_LINE_KEYS = frozenset(("type", "record"))
_HEADER_KEYS = frozenset(("type", "envelope"))


def _error(cls: type[DHPError], name: str, line: int, requirement: str, message: str,
           cause: Any = None) -> DHPError:
    """A typed error located at `name:line`; `details` carries file and line for reports."""
    return cls(message, requirement=requirement,
               details={"file": name, "line": line, "cause": cause})


def _warning(line: int, requirement: str, message: str) -> dict:
    return {"line": line, "requirement": requirement, "message": message}


_DECODER = STRICT_DECODER


def _parse_line(body: bytes) -> Any:
    try:
        return _DECODER.decode(body.decode("utf-8"))
    except (ValueError, RecursionError) as exc:
        if isinstance(exc, (UnicodeDecodeError, InvalidInput)):
            raise
        raise InvalidInput(f"not valid JSON: {exc}", requirement="DHP-CJ-001") from None


def _source_name(source: Any) -> str:
    if isinstance(source, (str, os.PathLike)):
        return os.fspath(source)
    return str(getattr(source, "name", "<stream>"))


def read_json_lines(source: str | os.PathLike | BinaryIO, *, max_line: int = MAX_LINE_BYTES,
                    name: str | None = None) -> Iterator[tuple[int, str, Any]]:
    """Yield `(line_no, "value", obj)` per JSON line, or `(line_no, "warning", warning)` for a
    dropped torn last line or a last line without LF. Raises on any other bad line
    (DHP-LOG-001, DHP-SEC-002). `source` is a path or a binary file object."""
    if isinstance(source, (str, os.PathLike)):
        with open(source, "rb") as f:
            yield from read_json_lines(f, max_line=max_line, name=name or os.fspath(source))
        return
    if isinstance(source, io.TextIOBase):
        raise TypeError("read_json_lines needs a binary file object (open with 'rb')")
    name = name or _source_name(source)
    readline = source.readline
    line_no = 0
    while True:
        raw = readline(max_line + 1)
        if not raw:
            return
        line_no += 1
        has_lf = raw[-1:] == b"\n"
        if not has_lf and len(raw) > max_line:
            raise _error(InvalidInput, name, line_no, "DHP-SEC-002",
                         f"line is longer than the bound of {max_line} bytes")
        body = raw[:-1] if has_lf else raw
        try:
            obj = _parse_line(body)
        except (UnicodeDecodeError, InvalidInput) as exc:
            if not has_lf:  # the last line, cut short by a crash mid-write
                yield line_no, "warning", _warning(
                    line_no, "DHP-LOG-005",
                    f"torn last line ({len(body)} bytes, no LF, not parseable) dropped")
                return
            why = ("not valid UTF-8" if isinstance(exc, UnicodeDecodeError)
                   else exc.message)
            raise _error(InvalidInput, name, line_no, "DHP-LOG-001",
                         f"line is not a JSON value: {why}") from None
        if body[-1:] == b"\r":
            raise _error(InvalidInput, name, line_no, "DHP-LOG-001",
                         "line ends with CR LF; lines end with LF only")
        if not has_lf:
            yield line_no, "warning", _warning(
                line_no, "DHP-LOG-009", "the last line has no terminating LF (read as complete)")
        yield line_no, "value", obj


def read_log(source: str | os.PathLike | BinaryIO, *, max_line: int = MAX_LINE_BYTES,
             name: str | None = None) -> Iterator[tuple[int, str, Any]]:
    """Stream a log, verifying every rule as each line arrives. Yields `(line_no, kind, obj)`
    with kind "header" (obj: the envelope), "checkpoint" / "result" (obj: the record) or
    "warning" (obj: `{line, requirement, message}`). Raises a `DHPError` whose `details` hold
    `file` and `line` at the first bad line."""
    name = name or _source_name(source)
    checker = _LogChecker(name)
    for line_no, kind, obj in read_json_lines(source, max_line=max_line, name=name):
        if kind == "warning":
            yield line_no, kind, obj
            continue
        try:
            kind, obj = checker.line(line_no, obj)
        except RecursionError:
            raise _error(InvalidInput, name, line_no, "DHP-SEC-002",
                         "line is nested too deeply to verify") from None
        yield line_no, kind, obj
    if checker.verifier is None:
        raise _error(InvalidInput, name, 1, "DHP-LOG-002", "the log has no header line")


class _LogChecker:
    """The order and chain rules of a log, applied to one parsed line at a time."""

    def __init__(self, name: str):
        self.name = name
        self.verifier: ChainVerifier | None = None
        self.result_validator: Any = None

    def line(self, line_no: int, obj: Any) -> tuple[str, Any]:
        name, verifier = self.name, self.verifier
        line_type = obj.get("type") if isinstance(obj, dict) else None
        if verifier is None:
            if line_type != "header":
                raise _error(InvalidInput, name, line_no, "DHP-LOG-002",
                             f"the first line must be the header, found {_describe(obj)}")
            envelope = _header_envelope(obj, name, line_no)
            self.verifier = ChainVerifier(envelope["handoff_id"], parsed=True)
            self.result_validator = schemas.user_schema_validator(
                envelope["intent"]["output_schema"])
            return "header", envelope
        if line_type == "checkpoint":
            if verifier.has_result:
                raise _error(InvalidInput, name, line_no, "DHP-LOG-004",
                             "checkpoint after the result line; the result must be last")
            record = _record(obj, name, line_no)
            _add(verifier.add, record, name, line_no)
            return "checkpoint", record
        if line_type == "result":
            if verifier.has_result:
                raise _error(InvalidInput, name, line_no, "DHP-LOG-004",
                             "a second result line; a log holds at most one result")
            record = _record(obj, name, line_no)
            _add(verifier.add_result, record, name, line_no)
            problems = _result_errors(self.result_validator, record)
            if problems:
                listing = "; ".join(f"{p['path']}: {p['message']}" for p in problems)
                raise _error(SchemaViolation, name, line_no, "DHP-LOG-007",
                             f"the result does not satisfy the intent's output_schema "
                             f"(DHP-RES-001): {listing}", problems)
            return "result", record
        if line_type == "header":
            raise _error(InvalidInput, name, line_no, "DHP-LOG-002",
                         "a second header line; the header is only the first line")
        _schema_error("log-line", obj, name, line_no)


def _describe(obj: Any) -> str:
    if not isinstance(obj, dict):
        return f"a JSON {type(obj).__name__}"
    if isinstance(obj.get("type"), str):
        return f"a {obj['type'][:40]!r} line"
    return "an object without a string 'type'"


def _schema_error(name_: str, obj: Any, name: str, line_no: int) -> NoReturn:
    found = schemas.errors(name_, obj) or [{"path": "$", "message": "not a valid log line"}]
    listing = "; ".join(f"{e['path']}: {e['message']}" for e in found)
    raise _error(InvalidInput, name, line_no, "DHP-LOG-007",
                 f"line is not a valid log line: {listing}", found)


def _header_envelope(obj: dict, name: str, line_no: int) -> dict:
    if obj.keys() != _HEADER_KEYS:
        _schema_error("log-line", obj, name, line_no)
    try:
        check_envelope(obj["envelope"])
    except DHPError as exc:
        raise _error(type(exc), name, line_no, exc.requirement or "DHP-ENV-001",
                     f"header envelope: {exc.message}", exc.details) from None
    return obj["envelope"]


def _record(obj: dict, name: str, line_no: int) -> Any:
    if obj.keys() != _LINE_KEYS:
        found = ", ".join(sorted(map(repr, obj)))
        raise _error(InvalidInput, name, line_no, "DHP-LOG-007",
                     f"a {obj['type']} line has exactly the members 'record' and 'type', "
                     f"found {found}")
    return obj["record"]


def _add(add, record: Any, name: str, line_no: int) -> None:
    """Chain the record (the verifier checks its shape first) and locate any failure."""
    try:
        add(record)
    except IntegrityError as exc:
        # a checkpoint breaking the chain is DHP-LOG-003; a result record's links, hash and
        # fence are DHP-RES-005, which the verifier already cites
        requirement = "DHP-RES-005" if exc.requirement == "DHP-RES-005" else "DHP-LOG-003"
        raise _error(IntegrityError, name, line_no, requirement,
                     f"broken chain ({exc.requirement}): {exc.message}", exc.details) from None
    except InvalidInput as exc:
        if exc.requirement in ("DHP-CKP-001", "DHP-RES-005"):  # the record's shape (schema)
            what = "checkpoint" if exc.requirement == "DHP-CKP-001" else "result"
            listing = "; ".join(f"$.record{e['path'][1:]}: {e['message']}"
                                for e in exc.details or [])
            message = f"not a valid {what} line ({exc.requirement}): {listing or exc.message}"
        else:  # a value outside the canonical JSON profile
            message = f"record cannot be hashed ({exc.requirement}): {exc.message}"
        raise _error(InvalidInput, name, line_no, "DHP-LOG-007", message, exc.details) from None


def _result_errors(validator, record: dict) -> list[dict]:
    found = sorted(validator.iter_errors(record["result"]),
                   key=lambda e: [str(p) for p in e.absolute_path])
    return [{"path": schemas.json_path(e), "message": e.message} for e in found]


# --- writing -------------------------------------------------------------------------------

def encode_line(obj: Any, *, max_line: int = MAX_LINE_BYTES) -> bytes:
    """One log line: the canonical JSON of `obj` and LF."""
    data = canonical_json(obj)
    if len(data) > max_line:
        raise InvalidInput(f"log line of {len(data)} bytes exceeds the bound of {max_line}",
                           requirement="DHP-SEC-002")
    return data + b"\n"


def append_line(fileobj: BinaryIO, obj: Any) -> None:
    """Append one line with a single write to an O_APPEND descriptor, so a crash leaves at
    most a torn last line, never an interleaved one."""
    data = encode_line(obj)
    fileobj.flush()
    try:
        fd = fileobj.fileno()
    except (AttributeError, io.UnsupportedOperation):
        fileobj.write(data)
        return
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def log_lines(envelope: dict, records: Iterable[dict], result: dict | None = None
              ) -> Iterator[dict]:
    """The line objects of a log, in order."""
    yield {"type": "header", "envelope": envelope}
    for record in records:
        yield {"type": "checkpoint", "record": record}
    if result is not None:
        yield {"type": "result", "record": result}


def write_log(path: str | os.PathLike, envelope: dict, records: Iterable[dict],
              result: dict | None = None) -> None:
    """Write a whole log atomically (temp file, fsync, rename) after verifying the envelope
    and the chain, so a written log always reads back valid."""
    check_envelope(envelope)
    verifier = ChainVerifier(envelope["handoff_id"])
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent or ".")
    try:
        with os.fdopen(fd, "wb") as f:
            for line in log_lines(envelope, records, result):
                if line["type"] == "checkpoint":
                    verifier.add(line["record"])
                elif line["type"] == "result":
                    verifier.add_result(line["record"])
                f.write(encode_line(line))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
