"""Requirement levels and classes: from the shipped index (spec/requirements.json) when it
lists a requirement, else from the defaults below (the contract's table)."""

from __future__ import annotations

import fnmatch
import json
from functools import cache

import dhp_data

SHOULD = {"DHP-LSE-005", "DHP-LSE-007", "DHP-FEN-007", "DHP-CJ-009", "DHP-SEC-002"}
MAY = {"DHP-ENV-005"}
# The conformance class whose verdict a requirement counts toward (spec/index.md, classes):
# the supervisor's own rules, the transport's, and everything else the store's.
SUPERVISOR = {"DHP-LSE-007", "DHP-ADP-015"}
# The network-server rules (spec/security.md): the kit judges them on an MCP server over HTTP.
NETWORK_SERVER = {"DHP-SEC-006", "DHP-SEC-007", "DHP-SEC-008", "DHP-SEC-009"}
CLASS_OF_AREA = {"SUP": "supervisor", "TRN": "transport",
                 **dict.fromkeys(("GEN", "CJ", "ID", "ENV", "STM", "LSE", "FEN", "CKP", "BUD",
                                  "RES", "LOG", "ERR", "SEC", "ADP"), "store")}

# Requirements no run of the kit can judge, whatever the implementation: they are listed in
# every verdict with the reason, and are the implementation's own tests' to prove.
BEYOND_A_RUN = {
    "DHP-GEN-001": "it says how the specification is to be read, not what an implementation does",
    "DHP-CJ-007": "the values it refuses (tuples, sets, byte strings, dates) exist in a "
                  "programming language, not in the JSON lines the kit sends",
    "DHP-LSE-001": "the adapter protocol carries no worker-reported time to the store, so "
                   "the kit cannot offer one to be ignored",
    "DHP-LSE-006": "it needs a step of the host's wall clock, which the kit may not make",
    "DHP-LSE-008": "it needs a reboot of the host",
    "DHP-LSE-012": "it is about the clock source on every runtime and host (readings across "
                   "processes to a few milliseconds, wall-clock steps, drift), which a run on "
                   "one host through the adapter cannot vary",
    "DHP-LSE-015": "it needs the implementation's processes started in a time namespace, "
                   "which the adapter protocol does not offer",
    "DHP-LSE-013": "it is about a deployment in which two implementations share one store",
    "DHP-SEC-004": "it needs stored records changed behind the implementation's back, and the "
                   "kit never touches an implementation's storage",
    "DHP-SEC-010": "it needs a store's checkpoints rolled back behind the implementation's "
                   "back, and the kit never touches an implementation's storage",
    "DHP-SEC-005": "it needs the store's files damaged behind the implementation's back, and "
                   "the kit never touches an implementation's storage",
    "DHP-TRN-034": "the bounds are the implementation's to choose, so no number of connections "
                   "the kit opens can show one missing, and what a connection costs the server "
                   "over time is not visible from outside",
}


@cache
def _index() -> dict[str, dict]:
    try:
        data = json.loads(dhp_data.path("requirements.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    items = data.get("requirements", []) if isinstance(data, dict) else data
    return {r["id"]: r for r in items if isinstance(r, dict) and "id" in r}


def all_ids() -> list[str]:
    return sorted(_index())


def level(rid: str) -> str:
    """MUST, SHOULD or MAY (MUST NOT counts as MUST, SHOULD NOT as SHOULD)."""
    known = str(_index().get(rid, {}).get("level", "")).split(" ")[0]
    if known in ("MUST", "SHOULD", "MAY"):
        return known
    return "SHOULD" if rid in SHOULD else "MAY" if rid in MAY else "MUST"


def conformance_class(rid: str) -> str:
    """The class a result of `rid` counts toward (store unless it is another's)."""
    return member_of(rid) or "store"


def member_of(rid: str) -> str | None:
    """The class that must judge `rid`, or None for a requirement of no class the kit
    judges (a binding to another protocol, say)."""
    known = _index().get(rid, {}).get("class")
    if isinstance(known, str):
        return known
    if rid.startswith("DHP-MCP-") or rid in NETWORK_SERVER:
        return "mcp-server"
    if rid in SUPERVISOR:
        return "supervisor"
    return CLASS_OF_AREA.get(rid.split("-")[1] if rid.count("-") == 2 else "")


def selected(rid: str, patterns: list[str] | None) -> bool:
    return not patterns or any(fnmatch.fnmatchcase(rid, p) for p in patterns)
