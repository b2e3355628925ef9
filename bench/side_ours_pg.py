"""Our reference on the Postgres store: the same adapter as side_ours, but each benchmark
folder is mapped to a schema of its own in the database at $DHP_BENCH_POSTGRES (default
postgresql://postgres@127.0.0.1:5432/test), named dhp_bench_<12 hex of the folder>. The
folders live in the benchmark's session folder, so every run gets fresh schemas; drop them
afterwards with `python bench/side_ours_pg.py --drop`."""

from __future__ import annotations

import hashlib
import os
import sys

from side_ours import *  # noqa: F403 - the same adapter, but for how the store is opened
from side_ours import sdk

NAME = "ours_pg"
SERVER = os.environ.get("DHP_BENCH_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
PREFIX = "dhp_bench_"


def location(root: str) -> str:
    digest = hashlib.sha256(os.path.abspath(root).encode()).hexdigest()[:12]
    return f"{SERVER}{'&' if '?' in SERVER else '?'}schema={PREFIX}{digest}"


def open_store(root: str):
    return sdk.Store(location(root))


def durability(store) -> str:
    return ("postgres: every write but a heartbeat commits with synchronous_commit=on "
            "(flushed to the WAL before it is acknowledged; group commit)")


def supervisor_pass(root: str):
    from dhp.supervisor import Supervisor

    sup = Supervisor(open_store(root), "bench-sup", out=lambda line: None)
    return sup.run_pass


def drop_all() -> int:
    import psycopg

    with psycopg.connect(SERVER, autocommit=True) as conn:
        names = [r[0] for r in conn.execute(
            "SELECT nspname FROM pg_namespace WHERE nspname LIKE %s", (PREFIX + "%",))]
        for name in names:
            conn.execute(f'DROP SCHEMA "{name}" CASCADE')
    return len(names)


if __name__ == "__main__" and sys.argv[1:] == ["--drop"]:
    print(f"dropped {drop_all()} benchmark schemas")
