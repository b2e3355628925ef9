"""The kit counts requirement coverage (`dhp-conform coverage`): what each check declares it
judges. The declarations are honest: every requirement a kit check can name is declared."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import traceability as tr  # noqa: E402
from dhp_conform import coverage  # noqa: E402


def test_coverage_command_lists_every_requirement_and_the_gaps(tmp_path):
    out = tmp_path / "coverage.json"
    proc = subprocess.run([sys.executable, "-m", "dhp_conform", "coverage", "--report", str(out)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    rows, summary = data["requirements"], data["summary"]
    spec = json.loads((ROOT / "spec" / "requirements.json").read_text())["requirements"]
    assert [r["id"] for r in rows] == [r["id"] for r in spec]
    assert summary["judged"] + len(summary["gaps"]) == summary["requirements"] == len(spec)
    assert summary["gaps"] == [r["id"] for r in rows if not r["checks"]]
    assert f"{summary['judged']} of {summary['requirements']} requirements" in proc.stdout
    walk = next(r for r in rows if r["id"] == "DHP-LSE-002")
    assert "reach:state-walk" in walk["checks"]
    for gap in summary["gaps"]:
        assert f"GAP {gap} " in proc.stdout


def test_checks_declare_every_requirement_they_can_name():
    """A requirement cited anywhere in the kit's source is declared by some check, so the
    coverage count (and --only) see it."""
    declared = {rid for rid, checks in coverage.kit_checks().items() if checks}
    cited = {c.rid: c for c in tr.citations(ROOT) if c.kind == "check"}
    undeclared = sorted(set(cited) - declared)
    if undeclared:
        pytest.fail("requirements named in the kit's source but declared by no check: "
                    + ", ".join(f"{r} ({cited[r].where})" for r in undeclared), pytrace=False)


def test_a_requirement_only_tests_cite_is_a_gap(monkeypatch):
    monkeypatch.setattr(coverage, "kit_checks", lambda: {"DHP-FEN-001": ["fencing:x"]})
    monkeypatch.setattr(coverage, "requirements",
                        lambda: [{"id": "DHP-FEN-001"}, {"id": "DHP-FEN-002"}])
    rows = coverage.table()
    assert coverage.summary(rows)["gaps"] == ["DHP-FEN-002"]
    assert "GAP DHP-FEN-002" in coverage.render(rows)
