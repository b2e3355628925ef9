"""Requirement levels and classes: from the shipped index (spec/requirements.json) when it
lists a requirement, else from the defaults below (the contract's table)."""

from __future__ import annotations

import fnmatch
import json
from functools import cache

import dhp_data

SHOULD = {"DHP-LSE-005", "DHP-LSE-007", "DHP-FEN-007", "DHP-CJ-009", "DHP-SEC-002"}
MAY = {"DHP-ENV-005"}
SUPERVISOR = {"DHP-LSE-007"}


@cache
def _index() -> dict[str, dict]:
    try:
        data = json.loads(dhp_data.path("requirements.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    items = data.get("requirements", []) if isinstance(data, dict) else data
    return {r["id"]: r for r in items if isinstance(r, dict) and "id" in r}


def level(rid: str) -> str:
    known = _index().get(rid, {}).get("level")
    if known in ("MUST", "SHOULD", "MAY"):
        return known
    return "SHOULD" if rid in SHOULD else "MAY" if rid in MAY else "MUST"


def conformance_class(rid: str) -> str:
    known = _index().get(rid, {}).get("class")
    if isinstance(known, str):
        return known
    if rid.startswith("DHP-MCP-"):
        return "mcp-server"
    return "supervisor" if rid in SUPERVISOR else "store"


def selected(rid: str, patterns: list[str] | None) -> bool:
    return not patterns or any(fnmatch.fnmatchcase(rid, p) for p in patterns)
