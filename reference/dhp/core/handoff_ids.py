"""Handoff ids as people and agents type them: the full `sha256:<64 hex>` id or a unique
prefix of at least MIN_PREFIX hex digits (`sha256:` optional), as git takes commits. Shared by
the `dhp` commands and the MCP tools, so both accept and refuse the same strings."""

from __future__ import annotations

import re
from typing import Any

from dhp.core.errors import InvalidInput

MIN_PREFIX = 4
ID_OR_PREFIX = re.compile(r"^(sha256:)?[0-9a-f]{4,64}$")
SHOWN = 3  # candidates an ambiguity error lists


def check_id(text: Any, name: str = "handoff id") -> str:
    """`text` if it is a full id or a well-formed prefix; InvalidInput naming `name` if not."""
    if not isinstance(text, str) or not ID_OR_PREFIX.match(text):
        raise InvalidInput(f"bad {name} {text!r}: expected 'sha256:' followed by 64 "
                           f"lowercase hex digits, or a unique prefix of at least "
                           f"{MIN_PREFIX} of them", requirement="DHP-ID-001")
    return text


def resolve_id(store: Any, text: str) -> str:
    """The full id that `text` (checked by check_id) names in this store: not_found naming
    the prefix when none does, invalid_input listing some candidates when several do."""
    from dhp.core.operations import unknown_handoff  # operations imports much; only here

    prefix = text if text.startswith("sha256:") else "sha256:" + text
    if len(prefix) == 71:
        return prefix
    with store.transaction(write=False) as tx:
        found = tx.ids_with_prefix(prefix, limit=SHOWN + 1)
    if not found:
        raise unknown_handoff(text)
    if len(found) > 1:
        shown = ", ".join(found[:SHOWN]) + (", ..." if len(found) > SHOWN else "")
        raise InvalidInput(f"handoff id prefix {text!r} is ambiguous: it matches {shown}; "
                           "give more digits", requirement="DHP-ID-001")
    return found[0]
