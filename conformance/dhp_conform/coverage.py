"""Which kit checks judge which requirement: the kit is where requirement coverage is
counted (`dhp-conform coverage`). A requirement that only the reference's own pytest suite
checks is a gap for every other implementation, and is listed as one.

Coverage is what the checks declare they judge (`Check.requirements`, the history checkers,
the response-shape check), so it needs no run; a run's report says what was judged then.
"""

from __future__ import annotations

import json
from collections import defaultdict

import dhp_data

from . import runner
from .requirements import conformance_class, level
from .suites import SUITES, mcp_net

WIRE = ("DHP-ERR-001", "DHP-ERR-002", "DHP-ERR-003")


def kit_checks() -> dict[str, list[str]]:
    """requirement -> the ids of the kit checks that judge it."""
    out: dict[str, list[str]] = defaultdict(list)
    for suite in [*SUITES.values(), mcp_net]:  # mcp_net: the MCP profile's HTTP checks
        for check in suite.CHECKS:
            for rid in check.requirements:
                if check.id not in out[rid]:
                    out[rid].append(check.id)
    for name, rids in runner.HISTORY_CHECKS.items():
        for rid in rids:
            out[rid].append(name)
    for rid in WIRE:
        out[rid].append("wire:response-shape")
    return dict(out)


def requirements() -> list[dict]:
    data = json.loads(dhp_data.path("requirements.json").read_text(encoding="utf-8"))
    return data["requirements"] if isinstance(data, dict) else data


def table() -> list[dict]:
    """One row per requirement of the spec: id, level, class, the kit checks judging it."""
    checks = kit_checks()
    return [{"id": r["id"], "level": level(r["id"]), "class": conformance_class(r["id"]),
             "checks": sorted(checks.get(r["id"], []))} for r in requirements()]


def summary(rows: list[dict]) -> dict:
    gaps = [r for r in rows if not r["checks"]]
    must = [r for r in rows if r["level"] == "MUST"]
    return {"requirements": len(rows), "judged": len(rows) - len(gaps),
            "must": len(must), "must_judged": sum(1 for r in must if r["checks"]),
            "gaps": [r["id"] for r in gaps]}


def render(rows: list[dict]) -> str:
    s = summary(rows)
    lines = [f"{s['judged']} of {s['requirements']} requirements are judged by a kit check "
             f"({s['must_judged']} of {s['must']} MUST):", ""]
    for r in rows:
        mark = "    " if r["checks"] else "GAP "
        lines.append(f"{mark}{r['id']} [{r['level']}, {r['class']}] "
                     f"{', '.join(r['checks']) or 'judged by no kit check'}")
    if s["gaps"]:
        lines += ["", f"{len(s['gaps'])} gaps (judged by no kit check, so by nothing a third "
                  f"party can run): {', '.join(s['gaps'])}"]
    return "\n".join(lines)
