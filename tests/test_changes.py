"""spec/changes.md lists every requirement ID the current revision added, changed or retired
(issue 28): the spec is compared with the snapshot of the previous revision's IDs and texts
(spec/revisions/N.json, taken when that revision closed). An ID is never removed: it stays,
retired, with its anchor."""

from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import gen_requirements as gen  # noqa: E402

REVISIONS = sorted((ROOT / "spec" / "revisions").glob("*.json"),
                   key=lambda p: int(p.stem))


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def section(revision: int) -> str:
    """The text of changes.md's section of `revision` (up to the next section)."""
    text = (ROOT / "spec" / "changes.md").read_text(encoding="utf-8")
    match = re.search(rf"^## Revision {revision}\b.*?(?=^## Revision |\Z)", text, re.M | re.S)
    assert match, f"spec/changes.md has no section '## Revision {revision}'"
    return match.group(0)


@pytest.fixture(scope="module")
def previous() -> dict:
    return json.loads(REVISIONS[-1].read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def built() -> gen.Result:
    return gen.build()


def test_changes_lists_every_new_changed_and_retired_id(previous, built):
    current = {r["id"]: digest(r["text"]) for r in built.requirements}
    retired = {r["id"] for r in built.retired}
    before = previous["requirements"]
    listed = set(re.findall(r"DHP-[A-Z]+-\d{3}", section(previous["revision"] + 1)))
    new = set(current) - set(before)
    changed = {i for i in before if i in current and current[i] != before[i]}
    newly_retired = {i for i in before if i in retired}
    missing = sorted((new | changed | newly_retired) - listed)
    assert not missing, (f"spec/changes.md's revision {previous['revision'] + 1} does not list "
                         f"{missing} (new: {sorted(new & set(missing))}, text changed: "
                         f"{sorted(changed & set(missing))}, retired: "
                         f"{sorted(newly_retired & set(missing))})")


def test_no_id_of_the_previous_revision_is_gone(previous, built):
    kept = {r["id"] for r in built.requirements} | {r["id"] for r in built.retired}
    gone = sorted(set(previous["requirements"]) - kept)
    assert not gone, f"{gone} vanished from the spec: an ID stays, retired, with its anchor"
