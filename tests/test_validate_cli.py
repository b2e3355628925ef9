"""`dhp validate`: file kinds, output formats, exit codes, and robustness on arbitrary bytes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import dhp_data
import pytest
from dhp.cli.main import COMMANDS, main
from dhp.core.chain import make_record
from dhp.core.envelope import make_envelope, make_intent
from dhp.core.logfile import write_log
from dhp.core.validate import validate_path
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

VECTORS = dhp_data.path("vectors")


@pytest.fixture
def envelope():
    return make_envelope(make_intent("cli", {"n": 1}, {"type": "object"}))


def chain(envelope, n=3):
    hid, prev, out = envelope["handoff_id"], envelope["handoff_id"], []
    for seq in range(1, n + 1):
        out.append(make_record(hid, seq, 1, {"seq": seq}, 0, prev))
        prev = out[-1]["hash"]
    return out


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_commands_are_a_registry():
    assert "validate" in COMMANDS and callable(COMMANDS["validate"].run)


@pytest.mark.covers("DHP-ENV-001", "DHP-ENV-002")
def test_envelope_files(tmp_path, capsys, envelope):
    good = tmp_path / "env.json"
    good.write_text(json.dumps(envelope))
    assert run(capsys, "validate", str(good)) == (0, f"OK {good}\n", "")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**envelope, "handoff_id": "sha256:" + "0" * 64}))
    code, out, _ = run(capsys, "validate", str(good), str(bad))
    assert code == 1
    assert out.splitlines()[0] == f"OK {good}"
    assert out.splitlines()[1].startswith(f"{bad}:1: DHP-ENV-002: ")
    shapeless = tmp_path / "shape.json"
    shapeless.write_text(json.dumps({"dhp": "1.0", "handoff_id": 5, "intent": {}, "x": 1}))
    code, out, _ = run(capsys, "validate", str(shapeless))
    assert code == 1 and len(out.splitlines()) >= 2  # one line per schema violation
    assert all(line.startswith(f"{shapeless}:1: DHP-") for line in out.splitlines())


@pytest.mark.covers("DHP-CKP-002", "DHP-CKP-004", "DHP-CKP-008")
def test_checkpoint_files(tmp_path, capsys, envelope):
    records = chain(envelope)
    as_list = tmp_path / "ckp.json"
    as_list.write_text(json.dumps(records, indent=2))
    as_lines = tmp_path / "ckp.jsonl"
    as_lines.write_text("".join(json.dumps(r) + "\n" for r in records))
    assert run(capsys, "validate", str(as_list), str(as_lines))[0] == 0
    as_list.write_text(json.dumps([records[0], records[2]]))
    as_lines.write_text("".join(json.dumps(r) + "\n" for r in (records[1], records[0])))
    code, out, _ = run(capsys, "validate", str(as_list), str(as_lines))
    assert code == 1
    first, second = out.splitlines()
    assert first.startswith(f"{as_list}:1: DHP-CKP-002: record [1]: seq 3 follows seq 1")
    assert second.startswith(f"{as_lines}:1: DHP-CKP-002: the chain starts at seq 2")
    # the vector form {"handoff_id", "intent", "records"} is a chain too, intent optional
    vec = tmp_path / "vec.json"
    vec.write_text(json.dumps({"handoff_id": envelope["handoff_id"], "records": records}))
    assert run(capsys, "validate", str(vec))[0] == 0
    vec.write_text(json.dumps({"handoff_id": envelope["handoff_id"],
                               "intent": envelope["intent"], "records": records}))
    assert run(capsys, "validate", str(vec))[0] == 0
    other = dict(envelope["intent"], task_kind="something else")
    vec.write_text(json.dumps({"handoff_id": envelope["handoff_id"], "intent": other,
                               "records": records}))
    code, out, _ = run(capsys, "validate", str(vec))
    assert code == 1 and out.startswith(f"{vec}:1: DHP-ENV-002: $.handoff_id")


@pytest.mark.covers("DHP-LOG-005", "DHP-LOG-006")
def test_log_output_text_and_json(tmp_path, capsys, envelope):
    log = tmp_path / "h.jsonl"
    write_log(log, envelope, chain(envelope))
    with open(log, "ab") as f:
        f.write(b'{"type":"checkp')
    code, out, _ = run(capsys, "validate", str(log))
    assert code == 0
    assert out.splitlines() == [
        f"{log}:5: warning: DHP-LOG-005: torn last line (15 bytes, no LF, not parseable) "
        "dropped", f"OK {log}"]
    broken = tmp_path / "broken.jsonl"
    broken.write_bytes(log.read_bytes().replace(b'"seq":2', b'"seq":7'))
    code, out, _ = run(capsys, "validate", "--json", str(log), str(broken))
    assert code == 1
    doc = json.loads(out)
    assert doc["ok"] is False
    good, bad = doc["files"]
    assert good == {"path": str(log), "ok": True, "problems": [], "warnings": [
        {"line": 5, "requirement": "DHP-LOG-005",
         "message": "torn last line (15 bytes, no LF, not parseable) dropped"}]}
    assert bad["ok"] is False and bad["warnings"] == []  # reading stopped at line 3
    [problem] = bad["problems"]
    assert problem["line"] == 3 and problem["requirement"] == "DHP-LOG-003"
    assert problem["code"] == "integrity_error" and "DHP-CKP-005" in problem["message"]


def test_usage_and_unreadable_files(tmp_path, capsys):
    code, _, err = run(capsys, "validate")
    assert code == 2 and "usage" in err and "PATH" in err
    assert run(capsys, "validate", "--no-such-option")[0] == 2
    assert run(capsys, "frobnicate")[0] == 2
    assert run(capsys)[0] == 2
    missing = tmp_path / "missing.jsonl"
    code, out, err = run(capsys, "validate", str(missing))
    assert code == 2 and str(missing) in err and out == ""
    code, _, err = run(capsys, "validate", str(tmp_path))
    assert code == 2 and str(tmp_path) in err
    code, out, _ = run(capsys, "validate", "--json", str(missing))
    assert code == 2 and json.loads(out)["files"][0]["error"].startswith("cannot read")
    # unreadable wins over invalid
    bad = tmp_path / "bad.jsonl"
    bad.write_text("nonsense\n")
    assert run(capsys, "validate", str(bad), str(missing))[0] == 2


def test_vectors_option(capsys):
    code, out, _ = run(capsys, "validate", "--vectors")
    assert code == 0 and out.splitlines()[-1].endswith("vectors gave the expected verdict")
    assert run(capsys, "validate", "--vectors", "x.jsonl")[0] == 2


def test_vectors_option_reports_a_wrong_verdict(tmp_path, monkeypatch, capsys):
    """--vectors compares, it does not just run: a copy with one expectation flipped fails."""
    copy = tmp_path / "vectors"
    shutil.copytree(VECTORS, copy)
    suite = json.loads((copy / "log.json").read_text())
    suite["tests"][0]["expected"] = {"valid": False, "errors": [
        {"line": 1, "requirement": "DHP-LOG-002"}]}
    (copy / "log.json").write_text(json.dumps(suite))
    shutil.copytree(dhp_data.path("schemas"), tmp_path / "schemas")  # however early it runs
    monkeypatch.setattr(dhp_data, "path", lambda *parts: tmp_path.joinpath(*parts))
    code, out, _ = run(capsys, "validate", "--vectors")
    assert code == 1 and f"FAIL log {suite['tests'][0]['id']}: valid" in out


# --- robustness --------------------------------------------------------------------------------

@pytest.mark.covers("DHP-LOG-006")
@settings(max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture],
          deadline=None)
@given(data=st.binary(max_size=300) | st.builds(
    lambda a, b: a + b, st.sampled_from([b"", b'{"type":"header","envelope":{}}\n', b"[",
                                         b'{"handoff_id":"x"}\n', b"\xef\xbb\xbf"]),
    st.binary(max_size=100)), suffix=st.sampled_from([".jsonl", ".json", ".log"]))
def test_validate_never_crashes_on_arbitrary_bytes(tmp_path, capsys, data, suffix):
    path = tmp_path / f"any{suffix}"
    path.write_bytes(data)
    report = validate_path(str(path))  # must not raise
    assert report.error is None
    code, out, err = run(capsys, "validate", str(path))
    assert code in (0, 1)
    assert out.strip(), "a verdict is always printed"
    for line in out.splitlines():
        assert line == f"OK {path}" or line.startswith(f"{path}:")
    code, out, _ = run(capsys, "validate", "--json", str(path))
    assert code in (0, 1) and json.loads(out)["files"][0]["ok"] is (code == 0)


def test_deeply_nested_input_is_an_error_not_a_crash(tmp_path, capsys, envelope):
    log = tmp_path / "deep.jsonl"
    write_log(log, envelope, [])
    deep = "[" * 5000 + "]" * 5000
    with open(log, "a") as f:
        f.write('{"type":"checkpoint","record":{"state":' + deep + "}}\n")
    env = tmp_path / "deep.json"
    env.write_text('{"a":' + deep + "}")
    code, out, _ = run(capsys, "validate", str(log), str(env))
    assert code == 1 and "OK" not in out


def _cli(*args, cwd):
    exe = shutil.which("dhp", path=os.path.dirname(sys.executable))
    cmd = [exe] if exe else [sys.executable, "-m", "dhp.cli.main"]
    return subprocess.run([*cmd, *args], capture_output=True, text=True, cwd=cwd)


@pytest.mark.parametrize("data,expected", [
    (b"", 1), (b"\x00\xff\xfe garbage", 1), (b'{"type":"header"', 1), (None, 2)])
def test_subprocess_exit_codes(tmp_path, data, expected):
    path = tmp_path / "f.jsonl"
    if data is not None:
        path.write_bytes(data)
    proc = _cli("validate", str(path), cwd=tmp_path)
    assert proc.returncode == expected
    assert (proc.stdout + proc.stderr).strip()
    assert "Traceback" not in proc.stderr


def test_console_script_from_another_folder(tmp_path):
    proc = _cli("validate", "--vectors", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert Path(tmp_path).exists()
