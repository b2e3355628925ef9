"""Rows that a SQLite connection wrote itself, kept so that its next write of the same row
need not read it back: the SQLite store's checkpoint, which reads the handoff's row that the
previous checkpoint of the same process wrote.

A kept row is used only while nothing else can have changed the table: no other connection
has committed to the database since (`PRAGMA data_version` changes exactly then) and this
connection changed no row it did not keep (`total_changes`, which counts every row changed).
Any doubt, and every rollback, drops them all and the row is read. Values are kept as SQLite
would return them: converted by their column's type affinity (stored_value).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

CAP = 1024  # rows kept at most (the oldest go first): the claimed handoffs of a process

UNKEPT = object()  # a value whose stored form this module does not predict
_EXACT_INT = 2**53  # integral floats below this convert to INTEGER exactly


class _NONE:
    """No value is of this type."""


_NATIVE = {"REAL": float, "INTEGER": int, "TEXT": str}


def affinities(conn: sqlite3.Connection, table: str) -> dict[str, str]:
    """Each column's type affinity ("INTEGER", "TEXT", "BLOB", "REAL" or "NUMERIC"), by the
    rules of SQLite's datatype documentation (section 3.1) applied to the declared types."""
    found = {}
    for _, name, declared, *_ in conn.execute(f"PRAGMA table_info({table})"):
        kind = (declared or "").upper()
        if "INT" in kind:
            found[name] = "INTEGER"
        elif any(word in kind for word in ("CHAR", "CLOB", "TEXT")):
            found[name] = "TEXT"
        elif "BLOB" in kind or not kind:
            found[name] = "BLOB"
        elif any(word in kind for word in ("REAL", "FLOA", "DOUB")):
            found[name] = "REAL"
        else:
            found[name] = "NUMERIC"
    return found


def stored_value(value: object, affinity: str) -> object:
    """`value` as a column of this affinity returns it once written, or UNKEPT where that
    is not certain (text that looks like a number, NaN, floats past 2**53)."""
    if value is None:
        return None
    kind = type(value)
    if kind is bool:
        value, kind = int(value), int
    if kind is float and value != value:
        return UNKEPT  # NaN, which SQLite stores as NULL
    if affinity == "BLOB":
        return value
    if kind is str:
        return value if affinity == "TEXT" else UNKEPT
    if affinity == "TEXT" or kind not in (int, float):
        return UNKEPT
    if kind is float:
        if not abs(value) < _EXACT_INT:  # inf, and the large
            return UNKEPT
        if affinity != "REAL" and value.is_integer():
            return int(value)
        return value
    return float(value) if affinity == "REAL" else value


class WrittenRows:
    """The rows one connection wrote and kept, valid at `mark`; `kinds` are the affinities of
    a row's columns, in order."""

    def __init__(self, conn: sqlite3.Connection, kinds: tuple[str, ...]):
        self.conn = conn
        self.kinds = kinds
        # The type each column returns unconverted (stored_value's shortcut).
        self.native = tuple(_NATIVE.get(kind, _NONE) for kind in kinds)
        self.rows: dict[str, tuple] = {}
        self.mark: tuple[int, int] | None = None  # (data_version, total_changes)

    def version(self) -> int:
        """The database's data_version as this connection sees it now."""
        return self.conn.execute("PRAGMA data_version").fetchone()[0]

    def lookup(self, key: str, version: Callable[[], int]) -> tuple | None:
        """The kept row of `key` if it is still the stored one, else None. `version` gives
        the current transaction's data_version (asked only when a row is kept)."""
        row = self.rows.get(key)
        if row is None:
            return None
        mark = self.mark
        if mark is None or self.conn.total_changes != mark[1] or version() != mark[0]:
            self.clear()
            return None
        return row

    def settle(self, written: dict[str, tuple | None], version: int | None,
               changes: tuple[int, int], accounted: bool) -> None:
        """After a commit that moved total_changes from changes[0] to changes[1]: keep the
        rows the transaction wrote (None: written, not kept). The rows kept before stay only
        if nothing came between (the transaction saw the data_version and total_changes of
        the mark); if it changed rows it did not account for, or its data_version is
        unknown, none are kept."""
        if self.mark != (version, changes[0]):
            self.rows.clear()
        if not accounted or version is None:
            self.clear()
            return
        rows = self.rows
        for key, row in written.items():
            rows.pop(key, None)  # re-inserted last: the oldest go first
            if row is not None:
                rows[key] = row
        while len(rows) > CAP:
            del rows[next(iter(rows))]
        self.mark = (version, changes[1])

    def clear(self) -> None:
        self.rows.clear()
        self.mark = None
