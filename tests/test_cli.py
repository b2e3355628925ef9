"""The runtime subcommands of `dhp` (dhp.cli.commands): tables, --json, exit codes, and clear
errors for a missing store, a bad id and bad JSON input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from dhp import api
from dhp.cli import commands
from dhp.cli import main as cli
from dhp.core import schemas

OUT_SCHEMA = {"type": "object", "required": ["n"], "properties": {"n": {"type": "integer"}}}
UNKNOWN = "sha256:" + "0" * 64


@pytest.fixture(autouse=True)
def registered():
    commands.register(cli.command)  # what cli.py does; registering twice is harmless


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def dispatch(capsys, *extra: str) -> str:
    code, out, err = run(capsys, "dispatch", "--kind", "cli.test",
                         "--output-schema", json.dumps(OUT_SCHEMA), *extra)
    assert code == 0, err
    return out.strip()


def test_help_lists_runtime_commands_and_exit_codes():
    """The installed entry point (cli.py wires commands.register)."""
    proc = subprocess.run([sys.executable, "-m", "dhp.cli.main", "--help"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0
    for name in ("dispatch", "status", "ls", "result", "dlq", "cancel", "export", "import",
                 "supervisor", "demo", "validate"):
        assert f"    {name}" in proc.stdout, name
    assert "exit codes:" in proc.stdout


@pytest.mark.parametrize("argv", [["status", UNKNOWN], ["ls"], ["result", UNKNOWN],
                                  ["dlq", "ls"], ["cancel", UNKNOWN],
                                  ["export", UNKNOWN, "out.jsonl"]])
def test_missing_store_is_named_and_not_created(capsys, store_path, argv):
    code, out, err = run(capsys, *argv)
    assert code == 1
    assert f"no DHP store at {store_path}" in err
    assert not store_path.exists()


@pytest.mark.covers("DHP-ERR-001")
def test_missing_store_as_json(capsys, store_path):
    code, out, _ = run(capsys, "ls", "--json")
    assert code == 1
    error = json.loads(out)["error"]
    assert error["code"] == "not_found" and error["definite"] is True
    assert schemas.errors("error", error) == []


@pytest.mark.parametrize("bad", ["abc", "sha256:XYZ", "sha256:" + "A" * 64, UNKNOWN + "0",
                                 "sha256:"])
def test_bad_handoff_id_is_a_usage_error(capsys, store_path, bad):
    dispatch(capsys)
    code, _, err = run(capsys, "status", bad)
    assert code == 2
    assert "bad handoff id" in err and repr(bad) in err


@pytest.mark.parametrize("option", ["--inputs", "--output-schema", "--budget"])
def test_bad_json_input_names_the_argument(capsys, store_path, option):
    code, _, err = run(capsys, "dispatch", "--kind", "k", option, "{not json")
    assert code == 2
    assert f"{option}: not valid JSON" in err
    assert not store_path.joinpath("dhp.sqlite3").exists() or api.list_handoffs(
        api.Store(store_path)) == []


def test_json_from_a_file_and_a_missing_file(capsys, store_path, tmp_path):
    inputs = tmp_path / "inputs.json"
    inputs.write_text('{"url": "https://example.org"}', encoding="utf-8")
    hid = dispatch(capsys, "--inputs", f"@{inputs}")
    assert api.envelope_of(api.Store(store_path), hid)["intent"]["inputs"] == \
        {"url": "https://example.org"}
    code, _, err = run(capsys, "dispatch", "--kind", "k", "--inputs", "@nope.json")
    assert code == 2 and "--inputs: cannot read nope.json" in err


@pytest.mark.covers("DHP-ID-003")
def test_invalid_budget_is_bad_input(capsys, store_path):
    code, _, err = run(capsys, "dispatch", "--kind", "k", "--budget", '{"max_attempts": 0}')
    assert code == 2
    assert "invalid_input" in err and "max_attempts" in err


@pytest.mark.covers("DHP-ID-004")
def test_dispatch_is_idempotent_and_prints_the_id(capsys, store_path):
    first = dispatch(capsys, "--inputs", '{"a": 1}')
    again = dispatch(capsys, "--inputs", '{"a":1}')
    assert first == again and first.startswith("sha256:")
    code, out, _ = run(capsys, "dispatch", "--kind", "cli.test", "--output-schema",
                       json.dumps(OUT_SCHEMA), "--inputs", '{"a": 1}', "--json")
    assert code == 0 and json.loads(out) == {"handoff_id": first}
    assert len(api.list_handoffs(api.Store(store_path))) == 1


def test_status_table_and_json(capsys, store_path):
    hid = dispatch(capsys)
    store = api.Store(store_path)
    with api.claim(store, hid, "w1", ttl=30) as ctx:
        ctx.checkpoint({"i": 1})
        code, out, _ = run(capsys, "status", hid)
        assert code == 0
        rows = dict(line.split(None, 1) for line in out.splitlines()[1:] if " " in line)
        assert rows["state"] == "claimed" and rows["owner"] == "w1" and rows["fence"] == "1"
        assert rows["checkpoints"] == "1 (last seq 1)"
        code, out, _ = run(capsys, "status", hid, "--json")
        status = json.loads(out)
        assert schemas.errors("status", status) == []
        assert status["state"] == "claimed" and status["checkpoints"]["last_seq"] == 1
    code, _, err = run(capsys, "status", UNKNOWN)
    assert code == 1 and "not_found" in err


@pytest.mark.covers("DHP-STM-001")
def test_ls_filters_by_state_and_kind(capsys, store_path):
    a = dispatch(capsys, "--inputs", '{"a": 1}')
    b = dispatch(capsys, "--inputs", '{"b": 1}')
    code, out, err = run(capsys, "dispatch", "--kind", "other.kind")
    c = out.strip()
    store = api.Store(store_path)
    ctx = api.claim(store, b, "w1", ttl=30)
    try:
        code, out, _ = run(capsys, "ls", "--json")  # newest first
        assert code == 0 and [s["handoff_id"] for s in json.loads(out)["handoffs"]] == [c, b, a]
        code, out, _ = run(capsys, "ls", "--state", "claimed", "--json")
        assert [s["handoff_id"] for s in json.loads(out)["handoffs"]] == [b]
        code, out, _ = run(capsys, "ls", "--kind", "other.kind", "--json")
        assert [s["handoff_id"] for s in json.loads(out)["handoffs"]] == [c]
        code, out, _ = run(capsys, "ls", "--state", "pending", "--kind", "cli.test")
        lines = out.splitlines()
        assert lines[0].split() == ["ID", "STATE", "KIND", "FENCE", "OWNER", "ATT", "CKPTS",
                                    "LEASE"]
        assert [line.split()[0] for line in lines[1:]] == [a[7:19]]
        code, out, _ = run(capsys, "ls", "--state", "completed")
        assert code == 0 and out.strip() == "(no handoffs)"
        code, _, err = run(capsys, "ls", "--state", "bogus")
        assert code == 2 and "invalid choice" in err
    finally:
        ctx.release()


@pytest.mark.covers("DHP-RES-004")
def test_result_only_when_completed(capsys, store_path):
    hid = dispatch(capsys)
    code, _, err = run(capsys, "result", hid)
    assert code == 1 and "no result" in err
    with api.claim(api.Store(store_path), hid, "w1") as ctx:
        ctx.complete({"n": 7})
    code, out, _ = run(capsys, "result", hid)
    assert code == 0 and json.loads(out) == {"n": 7}
    code, out, _ = run(capsys, "result", hid, "--json")
    assert json.loads(out) == {"n": 7}


@pytest.mark.covers("DHP-BUD-006", "DHP-BUD-007", "DHP-STM-005")
def test_dlq_ls_and_requeue(capsys, store_path):
    hid = dispatch(capsys, "--budget", '{"max_attempts": 1}')
    store = api.Store(store_path)
    api.claim(store, hid, "w1").release()
    with pytest.raises(api.BudgetExceeded):
        api.claim(store, hid, "w2")
    code, out, _ = run(capsys, "dlq", "ls", "--json")
    entries = json.loads(out)
    assert [e["handoff_id"] for e in entries] == [hid]
    assert "max_attempts" in entries[0]["reason"]
    assert entries[0]["envelope"]["handoff_id"] == hid
    code, out, _ = run(capsys, "dlq", "ls")
    assert out.splitlines()[0].split()[-3:] == ["REASON", "LAST", "ERROR"] and hid in out
    code, out, _ = run(capsys, "dlq", "requeue", hid)
    assert code == 0 and "requeued" in out
    status = api.status(store, hid)
    assert status["state"] == "pending" and status["attempts"] == 0
    code, _, err = run(capsys, "dlq", "requeue", hid)
    assert code == 1 and "conflict" in err
    code, out, _ = run(capsys, "dlq", "ls")
    assert out.strip() == "(the dead-letter queue is empty)"
    code, _, err = run(capsys, "dlq")
    assert code == 2


@pytest.mark.covers("DHP-STM-006")
def test_cancel(capsys, store_path):
    hid = dispatch(capsys)
    code, out, _ = run(capsys, "cancel", hid)
    assert code == 0 and api.status(api.Store(store_path), hid)["state"] == "cancelled"
    code, _, _ = run(capsys, "cancel", hid)
    assert code == 0  # idempotent
    done = dispatch(capsys, "--inputs", '{"x": 1}')
    with api.claim(api.Store(store_path), done, "w1") as ctx:
        ctx.complete({"n": 1})
    code, out, err = run(capsys, "cancel", done, "--json")
    assert code == 1 and json.loads(out)["error"]["code"] == "conflict"


@pytest.mark.covers("DHP-LOG-008")
def test_export_then_import_elsewhere(capsys, store_path, tmp_path):
    hid = dispatch(capsys)
    with api.claim(api.Store(store_path), hid, "w1") as ctx:
        ctx.checkpoint({"i": 1})
        ctx.checkpoint({"i": 2})
    log = tmp_path / "h.jsonl"
    code, out, _ = run(capsys, "export", hid, str(log))
    assert code == 0 and log.is_file()
    other = tmp_path / "peer"
    code, out, err = run(capsys, "import", str(log), "--store", str(other), "--json")
    assert code == 0, err
    assert json.loads(out) == {"handoff_id": hid, "warnings": []}
    code, out, _ = run(capsys, "status", hid, "--store", str(other), "--json")
    assert json.loads(out)["checkpoints"] == {"count": 2, "last_seq": 2}
    # A tampered log is refused and nothing is stored.
    lines = log.read_text(encoding="utf-8").splitlines()
    record = json.loads(lines[2])
    record["record"]["state"] = {"i": 99}
    lines[2] = json.dumps(record)
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines) + "\n", encoding="utf-8")
    third = tmp_path / "third"
    code, _, err = run(capsys, "import", str(bad), "--store", str(third))
    assert code == 1 and "integrity_error" in err
    assert not third.exists()  # verified before a store is created
    code, _, err = run(capsys, "import", str(tmp_path / "none.jsonl"))
    assert code == 2 and "no such file" in err


def test_supervisor_subcommand_once(capsys, store_path):
    dispatch(capsys)
    proc = subprocess.run([sys.executable, "-m", "dhp.cli.main", "supervisor", "--store",
                           str(store_path), "--id", "cli-sup", "--once"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [line["action"] for line in lines] == ["lead", "resign"]
    assert lines[0]["supervisor"] == "cli-sup"


def test_store_option_beats_the_environment(capsys, store_path, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    code, out, _ = run(capsys, "dispatch", "--kind", "k", "--store", str(elsewhere))
    assert code == 0 and (elsewhere / "dhp.sqlite3").is_file()
    assert not Path(store_path).exists()
