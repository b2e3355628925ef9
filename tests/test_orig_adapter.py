"""The kit's adapter for dhp-protocol 1.3.0, the adapter skeleton of docs/adapters.md, and the
renderer of the published verdict page (tools/render_conformance_report.py).

The original package imports as `dhp` too, so its adapter runs in its own virtual environment
(tools/orig_venv.sh); the tests that need it are skipped, saying so, when it is absent (CI)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import render_conformance_report as render  # noqa: E402
from dhp_conform import adapters  # noqa: E402

SKELETON = ROOT / "docs" / "examples" / "adapter_skeleton.py"
ORIG_ADAPTER = adapters.script("dhp_protocol_13")
PAGE = ROOT / "docs" / "conformance" / "dhp-protocol-1.3.0.md"
REPORT = ROOT / "docs" / "conformance" / "dhp-protocol-1.3.0.report.json"


def orig_python() -> Path:
    venv = Path(os.environ.get("DHP_ORIG_VENV", ROOT / ".venv-orig"))
    python = venv / "bin" / "python"
    if not python.exists():
        pytest.skip(f"no virtual environment of dhp-protocol 1.3.0 at {venv} (DHP_ORIG_VENV); "
                    "create it with tools/orig_venv.sh")
    probe = subprocess.run([str(python), "-c", "import dhp; print(dhp.__version__)"],
                           capture_output=True, text=True)
    if probe.stdout.strip() != "1.3.0":
        pytest.skip(f"{python} does not hold dhp-protocol 1.3.0: {probe.stdout or probe.stderr}")
    return python


def smoke(command: str, workdir: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dhp_conform", "smoke", "--impl", command,
                           "--history", str(workdir)], capture_output=True, text=True,
                          timeout=120)


def converse(argv: list[str], requests: list[dict]) -> list[dict]:
    """Send request lines to an adapter process; return its response lines, parsed."""
    lines = "".join(json.dumps({"id": i, **r}) + "\n" for i, r in enumerate(requests, 1))
    done = subprocess.run(argv, input=lines, capture_output=True, text=True, timeout=60)
    return [json.loads(line) for line in done.stdout.splitlines()]


# --- the skeleton of docs/adapters.md, wrapped around the reference SDK -----------------------

@pytest.mark.covers("DHP-ADP-002", "DHP-ADP-003", "DHP-ADP-004")
def test_skeleton_passes_smoke(tmp_path):
    done = smoke(f"{sys.executable} {SKELETON}", tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok   hello: skeleton" in done.stdout
    for step in ("dispatch", "claim", "checkpoint", "complete", "result", "status"):
        assert f"ok   {step}:" in done.stdout, done.stdout


def test_adapters_page_embeds_the_skeleton_verbatim():
    page = (ROOT / "docs" / "adapters.md").read_text(encoding="utf-8")
    marker = "<!-- skeleton: docs/examples/adapter_skeleton.py -->\n```python\n"
    assert marker in page, "docs/adapters.md lost the skeleton's code block"
    shown = page.split(marker, 1)[1].split("\n```\n", 1)[0]
    assert shown + "\n" == SKELETON.read_text(encoding="utf-8"), \
        "the skeleton in docs/adapters.md differs from docs/examples/adapter_skeleton.py"


# --- the adapter of dhp-protocol 1.3.0 ----------------------------------------------------------

def test_script_names_the_shipped_adapter():
    assert ORIG_ADAPTER.is_file()
    with pytest.raises(KeyError, match="dhp_protocol_13"):
        adapters.script("no-such-adapter")


@pytest.mark.covers("DHP-ADP-002", "DHP-ADP-003", "DHP-ADP-004")
def test_orig_adapter_wires_up(tmp_path):
    python = orig_python()
    done = smoke(f"{python} {ORIG_ADAPTER}", tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok   hello: dhp-protocol 1.3.0 (python)" in done.stdout
    assert "claim_next" not in done.stdout.splitlines()[0]  # not claimed: the original lacks it


@pytest.mark.covers("DHP-ADP-001", "DHP-ADP-004", "DHP-ADP-005")
def test_orig_adapter_refuses_what_the_original_lacks(tmp_path):
    python = orig_python()
    init = {"op": "init", "args": {"data": str(tmp_path / "data"), "ttl": 5.0,
                                   "heartbeat_interval": None}}
    replies = converse([str(python), str(ORIG_ADAPTER)], [
        {"op": "status", "args": {"handoff_id": "sha256:" + "0" * 64}},
        {"op": "hello", "args": {"protocols": ["1"], "dhp": "1.0"}},
        init,
        {"op": "cancel", "args": {"handoff_id": "sha256:" + "0" * 64}},
        {"op": "status", "args": {"handoff_id": "sha256:" + "0" * 64}},
        {"op": "dispatch", "args": {"task_kind": "t", "inputs": {}, "output_schema": {}}},
        {"op": "frobnicate", "args": {}},
    ])
    assert [r["id"] for r in replies] == list(range(1, 8))
    before_init, hello, ok_init, cancel, unknown, dispatched, bad_op = replies
    assert before_init["error"]["code"] == "invalid_input"
    assert "manual-clock" not in hello["data"]["features"]
    assert ok_init == {"id": 3, "ok": True, "data": {}}
    assert cancel["error"]["code"] == "invalid_input"
    assert "not supported by dhp-protocol 1.3.0" in cancel["error"]["message"]
    assert unknown["error"]["code"] == "not_found"  # the original's UnknownHandoff
    assert dispatched["data"]["handoff_id"].startswith("sha256:")
    assert bad_op["error"]["code"] == "invalid_input"


# --- the renderer of the published verdict ------------------------------------------------------

def small_report() -> dict:
    hid = "sha256:" + "ab" * 32
    return {
        "dhp": "1.0", "tool": {"name": "dhp-conform", "version": "0.1.0"},
        "implementation": {"name": "toy", "version": "9.9", "language": "go"},
        "seed": 7, "started": "2025-03-01T12:00:00+00:00",
        "finished": "2025-03-01T12:01:00+00:00", "classes": ["store"],
        "results": [
            {"requirement": "DHP-FEN-001", "level": "MUST", "status": "FAIL",
             "check": "lifecycle:claim-release", "reason": "first claim got fence 0, not 1",
             "evidence": [f"#4 t=0.1 p1 ok claim -> {{\"fence\": 0, \"handoff_id\": \"{hid}\"}}"]},
            {"requirement": "DHP-FEN-001", "level": "MUST", "status": "PASS",
             "check": "history:fence-step"},
            {"requirement": "DHP-LSE-005", "level": "SHOULD", "status": "WARN",
             "check": "fencing:killed-owner", "reason": "recovered only after the TTL"},
            {"requirement": "DHP-LOG-007", "level": "MUST", "status": "SKIP",
             "check": "vectors:log", "reason": "the implementation does not claim import_log"},
            {"requirement": "DHP-ID-001", "level": "MUST", "status": "PASS",
             "check": "vectors:identity"},
        ],
        "verdicts": {"store": {"verdict": "FAIL", "passed": 2, "failed": 1, "warned": 1,
                               "skipped": 1, "failed_requirements": ["DHP-FEN-001"]}},
    }


def test_small_report_is_a_valid_report():
    schema = json.loads((ROOT / "schemas" / "report.json").read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator(schema).validate(small_report())


def test_render_shows_verdicts_failures_and_evidence():
    text = render.render(small_report())
    assert "**Implementation:** toy 9.9 (go)" in text
    assert "seed 7" in text
    assert "| store | **FAIL** | 2 | 1 | 1 | 1 | DHP-FEN-001 |" in text
    failed = text.split("## Requirements failed")[1].split("## Warnings")[0]
    assert "### DHP-FEN-001" in failed and "first claim got fence 0, not 1" in failed
    assert "sha256:abababababab…" in failed and "ab" * 32 not in failed  # ids condensed
    assert "passed: `history:fence-step`" in failed
    assert "recovered only after the TTL" in text.split("## Warnings")[1]
    assert "does not claim import_log" in text.split("## Skipped")[1]
    assert "DHP-ID-001" in text.split("## Requirements passed")[1]


def test_render_keeps_the_hand_written_text_and_checks_drift(tmp_path):
    report, page = tmp_path / "r.json", tmp_path / "page.md"
    report.write_text(json.dumps(small_report()), encoding="utf-8")
    assert render.main([str(report), str(page)]) == 0
    first = page.read_text(encoding="utf-8")
    assert first.startswith("# Conformance of toy 9.9") and render.BEGIN in first
    page.write_text("# Mine\n\nHow it was run.\n\n" + first.split("\n\n", 1)[1]
                    + "\nWhat could not be tested.\n", encoding="utf-8")
    assert render.main([str(report), str(page)]) == 0
    kept = page.read_text(encoding="utf-8")
    assert kept.startswith("# Mine\n\nHow it was run.") and "What could not be tested." in kept
    assert render.main([str(report), str(page), "--check"]) == 0
    page.write_text(kept.replace("first claim got fence 0", "edited by hand"), encoding="utf-8")
    assert render.main([str(report), str(page), "--check"]) == 1


def test_render_refuses_what_is_not_a_report(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text('{"results": []}', encoding="utf-8")
    assert render.main([str(bad), str(tmp_path / "page.md")]) == 2
    assert "lacks implementation" in capsys.readouterr().err


def test_published_verdict_page_is_up_to_date():
    """The page must be what the committed report renders to (regenerate, never hand-edit)."""
    assert REPORT.exists() and PAGE.exists()
    assert render.main([str(REPORT), str(PAGE), "--check"]) == 0
