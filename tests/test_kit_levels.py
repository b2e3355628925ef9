"""Levels in the verdict: an implementation that misses a SHOULD gets a warning for it, never a
failure of a MUST that the same observation touches (DHP-GEN-002: conformance is the MUSTs)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from test_conform import conform

REPO = Path(__file__).resolve().parent.parent
BLIND = ("        if token is None or not _TOKEN.match(token) or token == _incarnation:\n"
         "            return False\n")


@pytest.mark.covers("DHP-GEN-002", "DHP-LSE-005", "DHP-SUP-003", "DHP-SCH-005")
def test_a_store_blind_to_dead_owners_is_warned_not_failed(tmp_path):
    """The reference with a liveness probe that never finds an owner dead, while it still
    claims the feature: recovers, claim_next and supervisor passes wait for the lease. Only
    the SHOULDs of dead-owner detection are missed: the vectors that need it leave their
    MUSTs unjudged, the recover race may have no winner, the supervisor's lock MUST is not
    judged from a pass that probed nothing."""
    copy = tmp_path / "impl"
    shutil.copytree(REPO / "reference" / "dhp", copy / "dhp")
    path = copy / "dhp" / "store" / "liveness.py"
    text = path.read_text()
    assert text.count(BLIND) == 1, "update the patched text to reference/dhp/store/liveness.py"
    path.write_text(text.replace(BLIND, "        return False\n"))
    code, report, output = conform(tmp_path, "--quick", "--suite", "vectors", "--suite",
                                   "supervisor", "--suite", "concurrency", pythonpath=copy)
    assert code in (0, 3), output  # 3: the scope has a MUST only the adapter suite judges
    assert report["findings"] == [], output
    by = {}
    for r in report["results"]:
        by.setdefault(r["requirement"], set()).add(r["status"])
    assert not [rid for rid, s in by.items() if "FAIL" in s or "CONSEQUENCE" in s], output
    for rid in ("DHP-LSE-005", "DHP-SUP-003", "DHP-SCH-005"):
        assert "WARN" in by[rid], output
    blocked = {(r["requirement"], r["check"]) for r in report["results"]
               if r["status"] == "NOT_RUN"}
    assert {("DHP-FEN-001", "lifecycle-009"), ("DHP-BUD-001", "fencing-027"),
            ("DHP-LSE-011", "supervisor:dead-owner")} <= blocked, output
    assert report["verdicts"]["supervisor"]["verdict"] == "PASS", output
