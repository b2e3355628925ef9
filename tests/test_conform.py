"""The conformance kit against the reference, and against planted-bug mutants of it.

The reference must pass a quick run. Each mutant (tests/mutants.py) is a small patch applied to a
temporary copy of reference/dhp; the kit must fail it and name the right requirement.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from dhp_conform import checkers, oracle
from dhp_conform.requirements import level
from mutants import MUTANTS, edits

REPO = Path(__file__).resolve().parent.parent
ADAPTER = f"{sys.executable} -m dhp.adapter"


def conform(tmp_path: Path, *args: str, pythonpath: Path | None = None,
            impl: str = ADAPTER) -> tuple[int, dict, str]:
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(pythonpath), env.get("PYTHONPATH", "")])
    out = tmp_path / "report.json"
    proc = subprocess.run(
        [sys.executable, "-m", "dhp_conform", "--impl", impl, "--seed", "7",
         "--report", str(out), "--history", str(tmp_path / "run"), *args],
        # generous: several test runs share 2 cores (a quick run took 315 s at load 30)
        capture_output=True, text=True, env=env, timeout=900)
    report = json.loads(out.read_text()) if out.exists() else {}
    return proc.returncode, report, proc.stdout + proc.stderr


# The file transport has no adapter operations yet: its MUSTs may be the only ones unjudged.
FILE_TRANSPORT = {"DHP-TRN-026", "DHP-TRN-027", "DHP-TRN-028", "DHP-TRN-029"}


def assert_reference_clean(code: int, report: dict, output: str) -> None:
    """No finding; store and supervisor PASS with every MUST judged; the transport at most
    INCOMPLETE for the file transport's MUSTs, which the verdict lists."""
    verdicts = report["verdicts"]
    assert oracle.schema_errors("report", report) == []
    assert report["findings"] == [] and not any(v["failed"] for v in verdicts.values()), output
    for cls in ("store", "supervisor"):
        assert verdicts[cls]["verdict"] == "PASS", (cls, verdicts[cls]["unjudged"], output)
    unjudged = {rid for rid in verdicts["transport"]["unjudged"] if level(rid) == "MUST"}
    assert unjudged <= FILE_TRANSPORT, unjudged
    assert verdicts["transport"]["verdict"] == ("INCOMPLETE" if unjudged else "PASS")
    assert code == (3 if unjudged else 0), output


@pytest.mark.covers("DHP-FEN-003", "DHP-FEN-004", "DHP-FEN-005", "DHP-CKP-009", "DHP-RES-003")
def test_reference_passes_quick_run(tmp_path):
    code, report, output = conform(tmp_path, "--quick", "--junit", str(tmp_path / "j.xml"))
    assert_reference_clean(code, report, output)
    assert any("identity vectors: 101 of 101 sent" in n for n in report["notes"]), report["notes"]
    assert any("fencing vectors: 84 of 84 sent" in n for n in report["notes"]), report["notes"]
    assert any("checkpoint-chain vectors: 35 of 35 sent" in n for n in report["notes"]), \
        report["notes"]
    assert (tmp_path / "j.xml").read_text().startswith("<?xml")
    assert (tmp_path / "run" / "history.jsonl").exists()
    # Issue 12: the seed first, then progress lines (no TTY here), before the summary.
    lines = output.splitlines()  # stdout, then stderr
    steps = [i for i, line in enumerate(lines) if line.startswith("dhp-conform: [")]
    assert lines[steps[0] - 1].endswith("seed 7 (repeat with --seed 7)"), lines[steps[0] - 1]
    assert len(steps) > 10
    assert lines[steps[-1]].startswith(f"dhp-conform: [{len(steps)}/{len(steps)}] ")


def _apply(mutant: dict, folder: Path) -> Path:
    """A copy of reference/dhp with the mutant's edits; returns the folder for PYTHONPATH."""
    copy = folder / "mutant"
    shutil.copytree(REPO / "reference" / "dhp", copy / "dhp")
    for file, old, new in edits(mutant):
        target = copy / "dhp" / file
        text = target.read_text()
        assert text.count(old) == 1, f"mutant {mutant['name']}: the patched text is not in " \
            f"{file} exactly once; update tests/mutants.py to the reference"
        target.write_text(text.replace(old, new))
    return copy


def _run_mutant(mutant: dict, folder: Path) -> tuple[int, dict, str, float]:
    folder.mkdir(parents=True, exist_ok=True)
    copy = _apply(mutant, folder)
    args = ["--quick", "--suite", mutant["suite"]]
    if mutant.get("only"):
        args += ["--only", mutant["only"]]
    started = time.monotonic()
    code, report, output = conform(folder, *args, pythonpath=copy)
    return code, report, output, time.monotonic() - started


@pytest.fixture(scope="module")
def mutant_runs(tmp_path_factory) -> dict:
    """Every mutant's kit run, a few side by side (each is its own processes)."""
    base = tmp_path_factory.mktemp("mutants")
    with ThreadPoolExecutor(MUTANT_WORKERS) as pool:
        futures = {m["name"]: pool.submit(_run_mutant, m, base / m["name"]) for m in MUTANTS}
        return {name: f.result() for name, f in futures.items()}


MUTANT_WORKERS = 3


def test_there_are_enough_mutants():
    assert len(MUTANTS) >= 15
    assert len({m["name"] for m in MUTANTS}) == len(MUTANTS)


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m["name"] for m in MUTANTS])
@pytest.mark.covers("DHP-FEN-001", "DHP-FEN-002", "DHP-FEN-003", "DHP-FEN-005", "DHP-FEN-006",
                    "DHP-CKP-004", "DHP-CKP-010", "DHP-BUD-001", "DHP-BUD-002", "DHP-BUD-003",
                    "DHP-BUD-006", "DHP-RES-002", "DHP-RES-003", "DHP-STM-002", "DHP-LSE-002",
                    "DHP-SUP-002", "DHP-SUP-005", "DHP-SUP-006", "DHP-SUP-009", "DHP-SUP-010")
def test_mutant_is_caught(mutant_runs, mutant):
    """Caught, and attributed: the first finding names the requirement the bug breaks, and
    the requirements named as failed stay few (later failures are consequences)."""
    code, report, output, _ = mutant_runs[mutant["name"]]
    assert code == 1, f"{mutant['name']}: exit {code}, the kit did not fail it\n{output}"
    first = report["findings"][0]["requirement"]
    assert first == mutant["expected_requirement"], \
        f"{mutant['name']}: the first finding names {first}, expected " \
        f"{mutant['expected_requirement']}\n{output}"
    failed = {r for v in report["verdicts"].values() for r in v["failed_requirements"]}
    assert len(failed) <= MAX_NAMED, f"{mutant['name']}: {sorted(failed)} named as failed"


MAX_NAMED = 3  # requirements a single planted bug may be reported as failing


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
    """The kit's oracles are its own. Shipped adapters (dhp_conform/adapters/) are programs
    the kit starts in another process, inside the implementation's own environment: the one
    for the original dhp-protocol imports that package, whose import name is `dhp` too."""
    source = REPO / "conformance" / "dhp_conform"
    for file in source.rglob("*.py"):
        if "adapters" in file.relative_to(source).parts:
            continue
        for line in file.read_text().splitlines():
            stripped = line.strip()
            assert not stripped.startswith(("import dhp\n", "from dhp ", "from dhp.")) \
                and stripped not in ("import dhp",), f"{file}: {line}"


# --- adapters that break the protocol, or claim less -------------------------------------------

NOISY = """
import subprocess, sys
print("starting...", flush=True)  # the planted mistake: a log line on stdout
child = subprocess.Popen([sys.executable, "-m", "dhp.adapter"], stdin=sys.stdin)
sys.exit(child.wait())
"""

# The reference adapter claiming less (tests/helpers/claims_less.py).
CLAIMS_LESS = f"{sys.executable} {REPO / 'tests' / 'helpers' / 'claims_less.py'}"


def _script(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / f"{name}.py"
    path.write_text(text)
    return f"{sys.executable} {path}"


@pytest.mark.covers("DHP-ADP-008")
def test_a_non_json_stdout_line_is_an_adapter_error_with_a_diagnostic(tmp_path):
    code, report, output = conform(tmp_path, "--quick", "--suite", "adapter",
                                   impl=_script(tmp_path, "noisy", NOISY))
    assert code == 2, output
    assert "is not JSON: 'starting...'" in output
    assert "did you mean to write it to stderr?" in output


@pytest.mark.covers("DHP-ADP-003", "DHP-ADP-013")
def test_unclaimed_features_are_skipped_with_a_reason(tmp_path):
    code, report, output = conform(tmp_path, "--quick", "--suite", "vectors",
                                   impl=f"{CLAIMS_LESS} manual-clock liveness")
    assert code == 0, output
    skipped = [r for r in report["results"] if r["status"] == "SKIP"]
    assert {r["check"] for r in skipped} == {"vectors:lifecycle-traces", "vectors:fencing-table",
                                             "vectors:schedule-traces"}
    assert all("manual-clock" in r["reason"] for r in skipped)


def test_adapter_manifest(tmp_path):
    from dhp_conform import manifest

    (tmp_path / "impl").mkdir()
    path = tmp_path / "adapter.json"
    path.write_text(json.dumps({"command": [sys.executable, "-m", "dhp.adapter"],
                                "env": {"DHP_EXAMPLE": "1"}, "cwd": "impl"}))
    impl = manifest.resolve("@" + str(path))
    assert impl.argv == [sys.executable, "-m", "dhp.adapter"]
    assert impl.cwd == str(tmp_path / "impl") and impl.env["DHP_EXAMPLE"] == "1"
    assert manifest.resolve(None, path) == impl
    proc = subprocess.run([sys.executable, "-m", "dhp_conform", "smoke", "--manifest", str(path),
                           "--history", str(tmp_path / "run")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    path.write_text(json.dumps({"command": [], "cwd": "nowhere"}))
    with pytest.raises(manifest.ManifestError, match=r"\$\.command"):
        manifest.load(path)


@pytest.mark.covers("DHP-CKP-009", "DHP-FEN-003", "DHP-FEN-005")
def test_dhp_chaos_runs_for_the_given_time(tmp_path):
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "dhp_conform.chaos_cli", "--impl", ADAPTER,
                           "--seconds", "3", "--seed", "11", "--workers", "3"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "PASS history:checkpoint-durable" in proc.stdout
    assert re.search(r"faults: \d+ SIGKILLs \(\d+ of supervisors\), \d+ pauses across the "
                     r"lease \(\d+ of supervisors\)", proc.stdout), proc.stdout
    assert "verdict: PASS" in proc.stdout
    assert 3 <= time.monotonic() - started < 60
    # Issue 12: the seed first, then the elapsed time against --seconds as plain lines.
    assert proc.stderr.startswith("dhp-chaos: ") and "seed 11" in proc.stderr.splitlines()[0]
    assert "/3] s, " in proc.stderr and "events recorded" in proc.stderr


# Reads two requests, then answers them in the opposite order.
REVERSED = """
import json, sys
first, second = (json.loads(sys.stdin.readline()) for _ in range(2))
for request in (second, first):
    print(json.dumps({"id": request["id"], "ok": True, "data": {"op": request["op"]}}),
          flush=True)
sys.stdin.read()
"""


@pytest.mark.covers("DHP-ADP-012")
def test_overlapping_requests_may_be_answered_in_any_order(tmp_path):
    from dhp_conform.process import AdapterProcess

    proc = AdapterProcess("reversed", [sys.executable, "-c", REVERSED], tmp_path / "err.log")
    proc.start()
    try:
        first, second = proc.send("status", {}), proc.send("result", {})
        assert first.wait(5)["data"] == {"op": "status"}
        assert second.wait(5)["data"] == {"op": "result"}
        assert proc.broken is None
    finally:
        proc.close()


# The reference adapter behind a proxy that loses the first answer to a checkpoint and to a
# complete: each write takes effect in the store, then the process dies before answering.
LOSSY = """
import json, os, subprocess, sys
child = subprocess.Popen([sys.executable, "-m", "dhp.adapter"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
for line in sys.stdin:
    child.stdin.write(line)
    child.stdin.flush()
    answer = child.stdout.readline()
    marker = os.path.join({folder!r}, json.loads(line)["op"])
    if os.path.basename(marker) in ("checkpoint", "complete") and not os.path.exists(marker):
        open(marker, "w").close()
        os._exit(9)
    sys.stdout.write(answer)
    sys.stdout.flush()
"""


@pytest.mark.covers("DHP-ERR-004")
def test_after_an_unknown_outcome_the_kit_reads_before_it_writes_again(tmp_path):
    from dhp_conform.harness import Harness
    from dhp_conform.suites import chaos
    from dhp_conform.suites.base import Check, Ctx, Run

    impl = _script(tmp_path, "lossy", LOSSY.format(folder=str(tmp_path)))
    run = Run(Harness(impl, tmp_path / "run"), seed=3, quick=True)
    ctx = Ctx(run, Check("chaos", "lossy", [], lambda ctx: None))
    try:
        stats = chaos.workload(ctx, workers=1, handoffs=1, faults=0, seconds=0)
    finally:
        for sc in ctx.scenarios:
            sc.close()
    assert stats["completed"] == 1 and run.harness.adapter_errors == []
    assert all(r["status"] == "PASS" for r in run.results), run.results
    events = ctx.scenarios[0].events()
    unknown = {e["invoke"] for e in events if e["type"] == "info"}
    invokes = [e for e in events if e["type"] == "invoke"]
    lost = {e["op"]: e for e in invokes if e["index"] in unknown}
    assert set(lost) == {"checkpoint", "complete"}
    # The checkpoint that took effect is read back (recover's last_checkpoint), not repeated:
    steps = [e["args"]["state"]["step"] for e in invokes if e["op"] == "checkpoint"]
    assert steps == list(range(1, chaos.STEPS + 1))
    # and the complete that took effect is found by a status read, not sent again.
    assert [e for e in invokes if e["op"] == "complete"] == [lost["complete"]]
    assert any(e["op"] == "status" and e["index"] > lost["complete"]["index"] for e in invokes)
