"""Every requirement of the spec, whatever its level, is checked by a vector, a test or a
conformance check, and every requirement that anything cites exists. The scanner is tested on
a synthetic tree."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import gen_requirements as gen  # noqa: E402
import traceability as tr  # noqa: E402


@pytest.fixture(scope="module")
def requirements() -> list[dict]:
    return gen.build().requirements


@pytest.fixture(scope="module")
def found() -> list[tr.Citation]:
    return tr.citations(ROOT)


@pytest.mark.covers("DHP-GEN-002")
def test_every_requirement_is_cited(requirements, found):
    missing = tr.uncovered(requirements, found)
    listing = "\n".join(f"  {r['id']} [{r['level']}] spec/{r['page']}: {r['text'][:90]}"
                        for r in missing)
    if missing:
        pytest.fail(f"{len(missing)} requirement(s) cited by no vector, test or conformance "
                    f"check:\n{listing}", pytrace=False)


def test_every_cited_requirement_exists(requirements, found):
    bad = tr.unknown(requirements, found)
    listing = "\n".join(f"  {c.rid} cited by {c.kind} {c.name} ({c.where})" for c in bad)
    if bad:
        pytest.fail(f"citations of requirements the spec does not define:\n{listing}",
                    pytrace=False)


def test_reserved_areas_are_not_checked(monkeypatch):
    monkeypatch.setattr(tr, "RESERVED_AREAS", ("ZZZ",))
    assert not tr.checked({"id": "DHP-ZZZ-001", "level": "MUST"})
    for level in ("MUST", "MUST NOT", "SHOULD", "SHOULD NOT", "MAY"):
        assert tr.checked({"id": "DHP-FEN-001", "level": level})


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def test_scanner_finds_vectors_markers_and_checks(tmp_path, monkeypatch):
    write(tmp_path / "vectors" / "s.json", json.dumps({"suite": "s", "tests": [
        {"id": "s-1", "requirements": ["DHP-FEN-001", "DHP-FEN-002"]},
        {"id": "s-2", "requirements": []}]}))
    write(tmp_path / "tests" / "test_x.py", '''
import pytest
pytestmark = pytest.mark.covers("DHP-CJ-001")

class TestA:
    @pytest.mark.covers("DHP-CJ-002", "DHP-CJ-003")
    def test_b(self):
        pass

@pytest.mark.parametrize("x", [pytest.param(1, marks=pytest.mark.covers("DHP-CJ-004"))])
def test_c(x):
    assert "DHP-CJ-005"  # a bare literal is not a citation
''')
    write(tmp_path / "conformance" / "kit" / "checks.py", '''
CHECKS = [dict(name="fence", requirements=("DHP-LOG-001",))]
REQUIREMENTS = ["DHP-LOG-002"]

@requires("DHP-LOG-003")
def check_a(ctx):
    ctx.expect("DHP-LOG-007", ctx.ok, f"see DHP-LOG-008: {ctx}")
    fail(requirement="DHP-LOG-004")
    return {"requirement": "DHP-LOG-005", "note": "DHP-LOG-006"}
''')
    found = tr.citations(tmp_path)
    got = {(c.rid, c.kind, c.name) for c in found}
    assert ("DHP-FEN-001", "vector", "s-1") in got and ("DHP-FEN-002", "vector", "s-1") in got
    assert ("DHP-CJ-001", "test", "tests/test_x.py") in got
    assert ("DHP-CJ-002", "test", "tests/test_x.py::TestA::test_b") in got
    assert ("DHP-CJ-003", "test", "tests/test_x.py::TestA::test_b") in got
    assert ("DHP-CJ-004", "test", "tests/test_x.py::test_c") in got
    for rid in ("DHP-LOG-001", "DHP-LOG-002", "DHP-LOG-005"):
        assert any(c.rid == rid and c.kind == "check" for c in found), rid
    assert ("DHP-LOG-003", "check", "conformance/kit/checks.py:check_a") in got
    assert ("DHP-LOG-004", "check", "conformance/kit/checks.py:check_a") in got
    assert ("DHP-LOG-007", "check", "conformance/kit/checks.py:check_a") in got
    cited = {c.rid for c in found}
    assert not cited & {"DHP-CJ-005", "DHP-LOG-006", "DHP-LOG-008"}

    reqs = [{"id": rid, "level": "MUST"} for rid in ("DHP-FEN-001", "DHP-FEN-003")]
    assert [r["id"] for r in tr.uncovered(reqs, found)] == ["DHP-FEN-003"]
    assert {c.rid for c in tr.unknown(reqs, found)} >= {"DHP-FEN-002", "DHP-CJ-001"}
    monkeypatch.setattr(tr, "RESERVED_AREAS", ("ZZZ",))
    reserved = [tr.Citation("DHP-ZZZ-001", "check", "x", "x.py:1")]
    assert tr.unknown(reqs, reserved) == []


def test_scanner_reports_unreadable_sources(tmp_path):
    write(tmp_path / "vectors" / "bad.json", "{not json")
    with pytest.raises(ValueError, match="vectors/bad.json"):
        tr.citations(tmp_path)
    (tmp_path / "vectors" / "bad.json").unlink()
    write(tmp_path / "tests" / "test_bad.py", "def (:\n")
    with pytest.raises(ValueError, match="tests/test_bad.py"):
        tr.citations(tmp_path)


def test_uncovered_cli_lists_ids(capsys, monkeypatch, tmp_path):
    # An empty tree cites nothing, so every checked requirement is listed and the exit is 1.
    monkeypatch.setattr(gen, "ROOT", tmp_path)
    assert gen.main(["--uncovered"]) == 1
    out = capsys.readouterr().out
    assert "DHP-FEN-003\tMUST\tspec/leases-fencing.md" in out
    assert "DHP-FEN-007\tSHOULD\tspec/leases-fencing.md" in out  # every level is subject to it
