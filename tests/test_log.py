"""The JSON-lines log: the shipped log vectors (via read_log and via the `dhp validate` CLI),
the writer, torn lines, the line bound and streaming."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys

import dhp_data
import pytest
from dhp import DHPError, IntegrityError, InvalidInput
from dhp.core import schemas
from dhp.core.chain import make_record, make_result_record
from dhp.core.envelope import make_envelope, make_intent
from dhp.core.logfile import append_line, encode_line, read_json_lines, read_log, write_log

SUITE = json.loads(dhp_data.path("vectors", "log.json").read_text("utf-8"))
LOG_REQS = ("DHP-LOG-001", "DHP-LOG-002", "DHP-LOG-003", "DHP-LOG-004", "DHP-LOG-005",
            "DHP-LOG-006", "DHP-LOG-007", "DHP-LOG-009", "DHP-LOG-011", "DHP-RES-005")


def vector_path(test) -> str:
    return str(dhp_data.path("vectors", test["input"]["file"]))


def read_outcome(path) -> dict:
    """read_log's verdict in the form of a log vector's `expected`."""
    warnings = []
    try:
        for _line, kind, obj in read_log(path):
            if kind == "warning":
                warnings.append(obj["requirement"])
    except DHPError as exc:
        return {"valid": False, "errors": [{"line": exc.details["line"],
                                            "requirement": exc.requirement, "code": exc.code}]}
    return {"valid": True, "warnings": warnings}


@pytest.mark.covers(*LOG_REQS, "DHP-SEC-001")
@pytest.mark.parametrize("test", SUITE["tests"], ids=lambda t: t["id"])
def test_log_vector_with_read_log(test):
    assert read_outcome(vector_path(test)) == test["expected"]


@pytest.mark.covers(*LOG_REQS)
def test_log_vectors_with_the_cli():
    paths = [vector_path(t) for t in SUITE["tests"]]
    proc = subprocess.run([sys.executable, "-m", "dhp.cli.main", "validate", "--json", *paths],
                          capture_output=True, text=True, cwd=os.path.expanduser("~"))
    assert proc.returncode == 1, proc.stderr  # some vectors are invalid by design
    files = json.loads(proc.stdout)["files"]
    for test, report in zip(SUITE["tests"], files, strict=True):
        if test["expected"]["valid"]:
            assert report["ok"], report
            assert [w["requirement"] for w in report["warnings"]] == \
                test["expected"]["warnings"]
        else:
            assert not report["ok"]
            assert [{"line": p["line"], "requirement": p["requirement"], "code": p["code"]}
                    for p in report["problems"]] == test["expected"]["errors"], test["id"]


def test_cli_checks_every_shipped_vector():
    proc = subprocess.run([sys.executable, "-m", "dhp.cli.main", "validate", "--vectors"],
                          capture_output=True, text=True, cwd=os.path.expanduser("~"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "FAIL" not in proc.stdout
    for test in SUITE["tests"]:
        assert f"PASS log {test['id']}:" in proc.stdout
    assert "gave the expected verdict" in proc.stdout.splitlines()[-1]


def test_suite_size_and_shape():
    assert SUITE["suite"] == "log"
    assert len(SUITE["tests"]) >= 18
    assert schemas.errors("vector-file", SUITE) == []
    shipped = {p.name for p in dhp_data.path("vectors", "log").glob("*.jsonl")}
    assert shipped == {os.path.basename(t["input"]["file"]) for t in SUITE["tests"]}


# --- writing and reading ---------------------------------------------------------------------

@pytest.fixture
def handoff():
    intent = make_intent("test-log", {"x": 1}, {"type": "object",
                                                "required": ["ok"]})
    envelope = make_envelope(intent)
    hid = envelope["handoff_id"]
    records, prev = [], hid
    for seq in range(1, 4):
        rec = make_record(hid, seq, 1, {"seq": seq, "text": "é\U0001F600"}, 0.5, prev)
        records.append(rec)
        prev = rec["hash"]
    return envelope, records, make_result_record(hid, 1, {"ok": True}, prev)


@pytest.mark.covers("DHP-LOG-001", "DHP-LOG-002", "DHP-LOG-003", "DHP-LOG-004", "DHP-LOG-007")
def test_write_then_read_round_trip(tmp_path, handoff):
    envelope, records, result = handoff
    path = tmp_path / "h.jsonl"
    write_log(path, envelope, records, result)
    data = path.read_bytes()
    assert data.endswith(b"\n") and b"\r" not in data and data.count(b"\n") == 5
    items = list(read_log(path))
    assert [k for _, k, _ in items] == ["header", "checkpoint", "checkpoint", "checkpoint",
                                        "result"]
    assert items[0][2] == envelope and [o for _, _, o in items[1:4]] == records
    assert items[4] == (5, "result", result)
    for line in data.splitlines():  # every line valid against the log-line schema
        assert schemas.errors("log-line", json.loads(line)) == []


@pytest.mark.covers("DHP-LOG-008")
def test_write_log_refuses_a_broken_chain_and_writes_nothing(tmp_path, handoff):
    envelope, records, _ = handoff
    path = tmp_path / "h.jsonl"
    with pytest.raises(IntegrityError):
        write_log(path, envelope, [records[0], records[2]])
    assert list(tmp_path.iterdir()) == []


@pytest.mark.covers("DHP-LOG-005")
def test_append_then_crash_mid_line_leaves_a_torn_line(tmp_path, handoff):
    envelope, records, _ = handoff
    path = tmp_path / "h.jsonl"
    with open(path, "ab") as f:
        append_line(f, {"type": "header", "envelope": envelope})
        for rec in records[:2]:
            append_line(f, {"type": "checkpoint", "record": rec})
        f.write(encode_line({"type": "checkpoint", "record": records[2]})[:-9])  # the crash
    items = list(read_log(path))
    assert [k for _, k, _ in items] == ["header", "checkpoint", "checkpoint", "warning"]
    assert items[-1][2]["requirement"] == "DHP-LOG-005" and items[-1][0] == 4


@pytest.mark.covers("DHP-SEC-002")
def test_lines_beyond_the_bound_are_refused(tmp_path, handoff):
    envelope, records, _ = handoff
    path = tmp_path / "h.jsonl"
    write_log(path, envelope, records)
    longest = max(len(line) for line in path.read_bytes().splitlines())
    assert len(list(read_log(path, max_line=longest))) == 4
    with pytest.raises(InvalidInput) as info:
        list(read_log(path, max_line=longest - 1))
    assert info.value.requirement == "DHP-SEC-002"
    with pytest.raises(InvalidInput) as info:
        encode_line({"type": "x", "pad": "y" * 100}, max_line=50)
    assert info.value.requirement == "DHP-SEC-002"


def test_reading_streams(tmp_path, handoff):
    """The reader consumes the file as it goes, not all at once."""
    envelope, records, _ = handoff
    path = tmp_path / "h.jsonl"
    many = []
    prev = envelope["handoff_id"]
    for seq in range(1, 2001):
        rec = make_record(envelope["handoff_id"], seq, 1, {"pad": "z" * 100}, 0, prev)
        many.append(rec)
        prev = rec["hash"]
    write_log(path, envelope, many)
    with open(path, "rb", buffering=4096) as f:
        items = read_log(f)
        next(items), next(items)
        assert f.tell() < os.path.getsize(path) / 10
        assert sum(1 for _ in items) == 1999


def test_errors_name_file_and_line(tmp_path, handoff):
    envelope, records, _ = handoff
    path = tmp_path / "h.jsonl"
    write_log(path, envelope, records)
    lines = path.read_bytes().splitlines(keepends=True)
    lines[2] = lines[2].replace(b'"seq":2', b'"seq":9')
    path.write_bytes(b"".join(lines))
    with pytest.raises(IntegrityError) as info:
        list(read_log(path))
    assert info.value.details["file"] == str(path) and info.value.details["line"] == 3
    assert info.value.requirement == "DHP-LOG-003"
    assert "DHP-CKP-005" in info.value.message


def test_read_json_lines_needs_binary():
    with pytest.raises(TypeError):
        list(read_json_lines(io.StringIO("{}\n")))
    assert list(read_json_lines(io.BytesIO(b"1\n[2]\n"))) == [(1, "value", 1),
                                                              (2, "value", [2])]


@pytest.mark.covers("DHP-LOG-005", "DHP-LOG-009")
def test_a_complete_last_line_without_lf_is_kept_with_a_warning(tmp_path, handoff):
    envelope, records, _ = handoff
    path = tmp_path / "h.jsonl"
    write_log(path, envelope, records)
    path.write_bytes(path.read_bytes()[:-1])
    kinds = [(k, o.get("requirement")) if k == "warning" else k for _, k, o in read_log(path)]
    assert kinds == ["header", "checkpoint", "checkpoint", ("warning", "DHP-LOG-009"),
                     "checkpoint"]


@pytest.mark.covers("DHP-LOG-001", "DHP-CJ-001")
@pytest.mark.parametrize("text", [b'{"a":1,"a":2}', b"NaN", b'[1,{"b":{"c":1,"c":1}}]',
                                  b"-Infinity", b'"\\ud800"', b" {} ", b"", b'{"a":[1,2]}',
                                  b"[" * 100000])
def test_line_parser_is_as_strict_as_parse_json(text):
    from dhp.core.canonical import parse_json
    from dhp.core.logfile import _parse_line

    def verdict(parse):
        try:
            return ("value", parse(text))
        except InvalidInput as exc:
            return ("refused", exc.requirement)
    assert verdict(_parse_line) == verdict(lambda b: parse_json(b.decode()))
