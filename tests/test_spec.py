"""The spec's requirement index is generated and current, and the spec lints clean.

Each lint also gets a deliberately bad page, so a lint that silently stopped working fails here.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import gen_requirements as gen  # noqa: E402

# The requirement IDs of the working contract with their levels; the spec may add more.
MUST = "MUST"
CONTRACT = {
    **{f"GEN-00{i}": MUST for i in (1, 2, 3)},
    **{f"CJ-00{i}": MUST for i in range(1, 9)}, "CJ-009": "SHOULD",
    **{f"ID-00{i}": MUST for i in range(1, 6)},
    **{f"ENV-00{i}": MUST for i in range(1, 5)}, "ENV-005": "MAY",
    **{f"STM-00{i}": MUST for i in range(1, 8)},
    **{f"LSE-00{i}": MUST for i in (1, 2, 3, 4, 6)}, "LSE-005": "SHOULD", "LSE-007": "SHOULD",
    **{f"FEN-00{i}": MUST for i in range(1, 7)}, "FEN-007": "SHOULD",
    **{f"CKP-{i:03d}": MUST for i in range(1, 11)},
    **{f"BUD-00{i}": MUST for i in range(1, 8)},
    **{f"RES-00{i}": MUST for i in range(1, 5)},
    **{f"LOG-00{i}": MUST for i in range(1, 9)},
    **{f"ERR-00{i}": MUST for i in range(1, 4)},
    "SEC-001": MUST, "SEC-002": "SHOULD",
}


def problems_of(page: str) -> list[str]:
    return gen.extract({"test.md": page}).problems


def test_requirements_json_is_up_to_date():
    result = gen.build()
    assert not result.problems
    assert gen.OUTPUT.read_text(encoding="utf-8") == gen.render(result.requirements,
                                                                result.retired), \
        "spec/requirements.json is stale: run tools/gen_requirements.py"


def test_a_retired_statement_keeps_its_id_binds_nobody_and_names_its_successor():
    new = '<a id="DHP-STM-002"></a>**DHP-STM-002** Claims MUST be fenced.\n\n'
    retired = ('<a id="DHP-STM-001"></a>**DHP-STM-001** *Retired, replaced by '
               '[DHP-STM-002](#DHP-STM-002):* ~~Claims MUST be fast.~~\n\n')
    result = gen.extract({"test.md": retired + new})
    assert not result.problems
    assert [r["id"] for r in result.requirements] == ["DHP-STM-002"]
    assert result.retired == [{"id": "DHP-STM-001", "replaced_by": ["DHP-STM-002"],
                               "text": "Claims MUST be fast.", "page": "test.md",
                               "anchor": "DHP-STM-001"}]
    orphaned = retired.replace("DHP-STM-002", "DHP-STM-009")
    assert any("must name the statements that replace it" in p
               for p in gen.extract({"test.md": orphaned + new}).problems)
    again = new.replace("DHP-STM-002", "DHP-STM-001")  # a retired ID is never reused
    assert any("duplicate requirement ID DHP-STM-001" in p
               for p in gen.extract({"test.md": retired + new + again}).problems)


def test_check_mode_passes_on_the_real_spec():
    assert gen.main(["--check"]) == 0


@pytest.mark.covers("DHP-GEN-001")
def test_spec_lints_clean():
    result = gen.build()
    assert result.problems == [], "\n".join(result.problems)


def test_every_contract_requirement_is_defined_with_its_level():
    levels = {r["id"]: r["level"] for r in gen.build().requirements}
    for short, level in CONTRACT.items():
        rid = f"DHP-{short}"
        assert rid in levels, f"{rid} is in the contract but not in the spec"
        family = levels[rid].split()[0]
        assert family == level, f"{rid} is {levels[rid]} in the spec, {level} in the contract"


def test_index_entries_are_sorted_and_complete():
    reqs = gen.build().requirements
    assert [r["id"] for r in reqs] == sorted(r["id"] for r in reqs)
    for r in reqs:
        assert set(r) == {"id", "level", "text", "page", "anchor"}
        assert r["level"] in ("MUST", "MUST NOT", "SHOULD", "SHOULD NOT", "MAY")
        assert r["anchor"] == r["id"] and (gen.SPEC_DIR / r["page"]).is_file()
        assert r["text"] and "<a id" not in r["text"] and "**" not in r["text"]


def test_a_statement_is_extracted_with_level_text_and_anchor():
    page = ('<a id="DHP-FEN-003"></a>**DHP-FEN-003** A store MUST NOT accept\n'
            "a [stale](x.md) write.\n")
    result = gen.extract({"p.md": page})
    assert result.problems == []
    assert result.requirements == [{"id": "DHP-FEN-003", "level": "MUST NOT",
                                     "text": "A store MUST NOT accept a stale write.",
                                     "page": "p.md", "anchor": "DHP-FEN-003"}]


@pytest.mark.covers("DHP-GEN-001")
@pytest.mark.parametrize("page, fragment", [
    ("Workers MUST heartbeat.\n", "without a requirement ID"),
    ('<a id="DHP-fen-01"></a>**DHP-fen-01** A store MUST refuse it.\n', "malformed requirement ID"),
    ('<a id="DHP-FEN-001"></a>**DHP-FEN-001** A store refuses it.\n', "has no BCP 14 keyword"),
    ('<a id="DHP-FEN-001"></a>**DHP-FEN-001** A store must refuse it, MUST log.\n',
     "lowercase 'must'"),
    ('<a id="DHP-FEN-001"></a>**DHP-FEN-001** A store MUST refuse; it may retry.\n',
     "lowercase 'may'"),
    ('<a id="DHP-FEN-001"></a>**DHP-FEN-001** Fields MUST be present if required.\n',
     "lowercase 'required'"),
    ('<a id="DHP-FEN-001"></a>**DHP-FEN-001** It MUST refuse and SHOULD log.\n',
     "mixes MUST, SHOULD"),
    ('<a id="DHP-FEN-001"></a>**DHP-FEN-001** It MUST refuse.\n\n'
     '<a id="DHP-FEN-001"></a>**DHP-FEN-001** It MUST log.\n', "duplicate requirement ID"),
    ('<a id="DHP-FEN-002"></a>**DHP-FEN-001** It MUST refuse.\n', "does not match"),
    ("A worker must stop.\n", "lowercase 'must' in normative prose"),
    ('Text first. <a id="DHP-FEN-001"></a>**DHP-FEN-001** It MUST.\n', "must open the paragraph"),
    ("See [DHP-FEN-009](x.md#DHP-FEN-009) for more.\n", "undefined requirement DHP-FEN-009"),
    ('## Notes (informative)\n\n<a id="DHP-FEN-001"></a>**DHP-FEN-001** It MUST.\n',
     "inside an informative section"),
    ('> <a id="DHP-FEN-001"></a>**DHP-FEN-001** It MUST.\n', "inside an informative"),
    ("| a | b |\n|---|---|\n| x | MUST do |\n", "without a requirement ID"),
])
def test_each_lint_fails_on_a_bad_page(page, fragment):
    problems = problems_of(page)
    assert any(fragment in p for p in problems), problems


@pytest.mark.parametrize("page", [
    "## Background (informative)\n\nWorkers MUST heartbeat, we say here.\n\n### Deeper\n\n"
    "Still informative: it should pass.\n",
    "> **Note.** A reader MUST NOT panic; notes are informative.\n",
    "The code `MUST` in backticks and the quoted word \"SHOULD\" are not keywords.\n",
    "```text\nif x: MUST be refused\n```\n",
    "<!-- a comment that says MUST -->\n",
    "A worker may die at any time: lowercase may is plain English in prose.\n",
    '<a id="DHP-FEN-001"></a>**DHP-FEN-001** A store MUST refuse it and MUST NOT store it.\n',
])
def test_informative_text_and_good_statements_pass(page):
    assert problems_of(page) == []


def test_informative_section_ends_at_a_sibling_heading():
    page = "## A (informative)\n\nText MUST.\n\n## B\n\nWorkers MUST heartbeat.\n"
    problems = problems_of(page)
    assert len(problems) == 1 and "test.md:7" in problems[0]


def test_check_mode_fails_when_the_index_is_stale(tmp_path, monkeypatch, capsys):
    stale = tmp_path / "requirements.json"
    stale.write_text('{"dhp": "1.0", "requirements": []}\n', encoding="utf-8")
    monkeypatch.setattr(gen, "OUTPUT", stale)
    monkeypatch.setattr(gen, "ROOT", tmp_path)
    assert gen.main(["--check"]) == 1
    assert "out of date" in capsys.readouterr().err


def test_generator_fails_on_lint_problems(tmp_path, monkeypatch, capsys):
    (tmp_path / "bad.md").write_text("Workers MUST heartbeat.\n", encoding="utf-8")
    monkeypatch.setattr(gen, "SPEC_DIR", tmp_path)
    out = tmp_path / "requirements.json"
    monkeypatch.setattr(gen, "OUTPUT", out)
    assert gen.main([]) == 1
    assert "spec/bad.md:1" in capsys.readouterr().err and not out.exists()
