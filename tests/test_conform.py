"""The conformance kit against the reference, and against planted-bug mutants of it.

The reference must pass a quick run. Each mutant is a one-line patch applied to a temporary
copy of reference/dhp; the kit must fail it and name the right requirement.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from dhp_conform import checkers, oracle

REPO = Path(__file__).resolve().parent.parent
ADAPTER = f"{sys.executable} -m dhp.adapter"


def conform(tmp_path: Path, *args: str, pythonpath: Path | None = None) -> tuple[int, dict, str]:
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(pythonpath), env.get("PYTHONPATH", "")])
    out = tmp_path / "report.json"
    proc = subprocess.run(
        [sys.executable, "-m", "dhp_conform", "--impl", ADAPTER, "--seed", "7",
         "--report", str(out), "--history", str(tmp_path / "run"), *args],
        capture_output=True, text=True, env=env, timeout=120)
    report = json.loads(out.read_text()) if out.exists() else {}
    return proc.returncode, report, proc.stdout + proc.stderr


@pytest.mark.covers("DHP-FEN-003", "DHP-FEN-004", "DHP-FEN-005", "DHP-CKP-009", "DHP-RES-003")
def test_reference_passes_quick_run(tmp_path):
    code, report, output = conform(tmp_path, "--quick", "--junit", str(tmp_path / "j.xml"))
    assert code == 0, output
    assert oracle.schema_errors("report", report) == []
    assert report["verdicts"]["store"]["verdict"] == "PASS"
    assert (tmp_path / "j.xml").read_text().startswith("<?xml")
    assert (tmp_path / "run" / "history.jsonl").exists()


MUTANTS = {
    # name: (file, original text, mutated text, suite, requirement the kit must name)
    "no-fence-check-on-writes": (
        "machine.py", 'or record["fence"] != op["fence"]', "",
        "fencing", "DHP-FEN-003"),
    "fence-not-bumped-on-recover": (
        "machine.py", 'fence=record["fence"] + 1,',
        'fence=record["fence"] + (op["name"] != "recover"),', "fencing", "DHP-FEN-001"),
    "no-hash-chain": (
        "operations.py", "state, spend,\n" + " " * 37 + 'last["hash"] if last else hid)',
        "state, spend, hid)",
        "lifecycle", "DHP-CKP-004"),
    "max-steps-off-by-one": (
        "machine.py", 'record["steps"] + 1 > budget["max_steps"]',
        'record["steps"] > budget["max_steps"]', "lifecycle", "DHP-BUD-002"),
    "result-not-validated": (
        "operations.py", 'op["result_errors"] = result_errors(row["envelope"], result)',
        'op["result_errors"] = []', "lifecycle", "DHP-RES-002"),
}


@pytest.mark.parametrize("name", sorted(MUTANTS))
@pytest.mark.covers("DHP-FEN-001", "DHP-FEN-003", "DHP-CKP-004", "DHP-BUD-002", "DHP-RES-002")
def test_mutant_is_caught(tmp_path, name):
    file, old, new, suite, requirement = MUTANTS[name]
    copy = tmp_path / "mutant"
    shutil.copytree(REPO / "reference" / "dhp", copy / "dhp")
    target = copy / "dhp" / file
    text = target.read_text()
    assert text.count(old) == 1, f"mutant {name}: the patched text is not in {file} once"
    target.write_text(text.replace(old, new))
    code, report, output = conform(tmp_path, "--quick", "--suite", suite, pythonpath=copy)
    assert code == 1, output
    failed = report["verdicts"]["store"]["failed_requirements"]
    assert requirement in failed, f"{name}: expected {requirement} among {failed}\n{output}"


def _event(i, t, kind, op, process="p", **kw):
    return {"index": i, "time": t, "type": kind, "op": op, "process": process,
            "scenario": "s", **kw}


@pytest.mark.covers("DHP-FEN-004")
def test_checker_names_a_stale_write_with_minimal_evidence():
    h = "sha256:" + "a" * 64
    events = [
        _event(0, 0.0, "invoke", "claim", "p1", args={"handoff_id": h, "worker": "w1"}),
        _event(1, 0.1, "ok", "claim", "p1", invoke=0, data={"handoff_id": h, "fence": 1}),
        _event(2, 2.0, "invoke", "recover", "p2", args={"handoff_id": h, "worker": "w2"}),
        _event(3, 2.1, "ok", "recover", "p2", invoke=2, data={"handoff_id": h, "fence": 2}),
        _event(4, 2.2, "invoke", "checkpoint", "p1",
               args={"handoff_id": h, "worker": "w1", "fence": 1, "state": {"s": 1}}),
        _event(5, 2.3, "ok", "checkpoint", "p1", invoke=4, data={}),
    ]
    findings = checkers.check_scenario(events, ttl=1.0)
    stale = [f for f in findings if f.check == "history:no-stale-write"]
    assert stale and "DHP-FEN-004" in stale[0].requirements
    assert [e["index"] for e in stale[0].events] == [0, 1, 2, 3, 4, 5]


@pytest.mark.covers("DHP-FEN-005")
def test_checker_allows_unknown_outcomes():
    """A take whose outcome is unknown (info) may have bumped the fence."""
    h = "sha256:" + "b" * 64
    events = [
        _event(0, 0.0, "invoke", "claim", "p1", args={"handoff_id": h, "worker": "w1"}),
        _event(1, 0.1, "info", "claim", "p1", invoke=0, why="killed"),
        _event(2, 0.2, "kill", None, "p1"),
        _event(3, 2.0, "invoke", "recover", "p2", args={"handoff_id": h, "worker": "w2"}),
        _event(4, 2.1, "ok", "recover", "p2", invoke=3, data={"handoff_id": h, "fence": 2}),
    ]
    assert checkers.check_scenario(events, ttl=1.0) == []


@pytest.mark.covers("DHP-CKP-004", "DHP-CKP-005")
def test_log_oracle_detects_a_broken_chain():
    intent = {"dhp": "1.0", "task_kind": "t", "inputs": {}, "output_schema": {}, "budget": {}}
    hid = oracle.handoff_id(intent)
    body = {"handoff_id": hid, "seq": 1, "fence": 1, "state": 1, "spend": 0, "prev": hid}
    first = dict(body, hash=oracle.digest(body))
    body2 = dict(body, seq=2, state=2, prev=hid)  # should chain to first["hash"]
    second = dict(body2, hash=oracle.digest(body2))
    lines = [{"type": "header", "envelope": {"dhp": "1.0", "handoff_id": hid, "intent": intent}},
             {"type": "checkpoint", "record": first}, {"type": "checkpoint", "record": second}]
    text = "".join(json.dumps(x) + "\n" for x in lines)
    with pytest.raises(oracle.LogProblem) as err:
        oracle.check_log(text)
    assert err.value.requirement == "DHP-CKP-004" and err.value.line == 3
    assert oracle.check_log("".join(json.dumps(x) + "\n" for x in lines[:2]))["checkpoints"]


def test_kit_never_imports_dhp():
    source = REPO / "conformance" / "dhp_conform"
    for file in source.rglob("*.py"):
        for line in file.read_text().splitlines():
            stripped = line.strip()
            assert not stripped.startswith(("import dhp\n", "from dhp ", "from dhp.")) \
                and stripped not in ("import dhp",), f"{file}: {line}"
