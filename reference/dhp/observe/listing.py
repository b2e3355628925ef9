"""The dashboard's handoff list: one bounded page, in the order an operator reads it.

`active` (the default) puts running work first: claimed, then work waiting for a new owner
(orphaned, released), then the pending backlog, then the finished; newest first within each
state. It is one indexed, newest-first read per state (operations.statuses), stopped as soon
as the page is full, so it costs the same at any store size and needs no new store primitive.
`newest` is the store's own order, every state mixed.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

from dhp.core import operations
from dhp.core.errors import InvalidInput

ACTIVE_ORDER = ("claimed", "orphaned", "released", "pending", "dead_lettered", "cancelled",
                "completed")
SORTS = ("active", "newest")


def handoffs(store: Any, state: str | None, kind: str | None, sort: str | None,
             limit: int) -> list[dict]:
    """At most `limit` statuses, each with its `age_s` since dispatch."""
    sort = sort or "active"
    if sort not in SORTS:
        raise InvalidInput(f"unknown sort {sort!r}; sorts are {', '.join(SORTS)}")
    kind = kind or None
    if state or sort == "newest":
        found: Iterator = operations.statuses(store, state=state or None, task_kind=kind,
                                              created=True)
    else:
        found = itertools.chain.from_iterable(
            operations.statuses(store, state=s, task_kind=kind, created=True)
            for s in ACTIVE_ORDER)
    now = datetime.now(timezone.utc)
    out = []
    for item, _cursor in itertools.islice(found, limit):
        created = item.pop("created_at")
        try:
            item["age_s"] = round((now - datetime.fromisoformat(created)).total_seconds(), 1)
        except (TypeError, ValueError):  # metadata written by another implementation
            item["age_s"] = None
        out.append(item)
    return out
