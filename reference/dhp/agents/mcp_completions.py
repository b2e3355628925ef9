"""The completions each MCP client session made, so that a `complete` retried after its answer
was lost is answered with success instead of lease_lost (spec/mcp.md, DHP-MCP-014).

The store keeps no owner once a handoff is completed (only the result record's fence), so the
session is what knows that this lease token completed it. Only the session that completed is
answered so: any other session presenting the token is refused, as DHP-MCP-009 requires.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from typing import Any

from dhp import api
from dhp.core.canonical import canonical_json

KEEP = 1000  # completions remembered per session: a retry comes soon after, never hours later

_mutex = threading.Lock()
_done: weakref.WeakKeyDictionary[Any, OrderedDict] = weakref.WeakKeyDictionary()


def _key(lease: dict) -> tuple[str, str, int]:
    return lease["handoff_id"], lease["worker_id"], lease["fence"]


def remember(session: Any, lease: dict) -> None:
    """`session` has just completed the handoff with `lease`."""
    with _mutex:
        done = _done.setdefault(session, OrderedDict())
        done[_key(lease)] = True
        while len(done) > KEEP:
            done.popitem(last=False)


def stored_if_same(session: Any, lease: dict, result: Any) -> dict | None:
    """`{"result": stored}` when `session` completed the handoff with this very lease and
    `result` equals the stored result (the same canonical JSON); otherwise None, and the
    complete goes to the store, which refuses it as before."""
    with _mutex:
        mine = _key(lease) in _done.get(session, ())
    if not mine:
        return None
    stored = api.result(session.store, lease["handoff_id"])
    if canonical_json(stored) != canonical_json(result):
        return None
    return {"result": stored}
