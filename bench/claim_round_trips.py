"""Statements and pipeline syncs (round trips) of one claim_next on the Postgres store.

One claim_next of fresh work on a warm store (its connection pool and liveness lock already
made), with no other owner, counted by wrapping psycopg's Connection.execute and
Pipeline.sync. Prints one line of JSON. Needs $DHP_BENCH_POSTGRES (default
postgresql://postgres@127.0.0.1:5432/test); uses and drops a schema of its own.

    python bench/claim_round_trips.py
"""

from __future__ import annotations

import json
import os
import secrets

import dhp
import psycopg

SERVER = os.environ.get("DHP_BENCH_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")


def main() -> None:
    schema = f"dhp_bench_rt_{secrets.token_hex(4)}"
    store = dhp.Store(f"{SERVER}{'&' if '?' in SERVER else '?'}schema={schema}")
    try:
        for i in range(5):
            dhp.dispatch(store, "k", {"i": i}, {})
        dhp.claim_next(store, "k", "warm", heartbeat_interval=0).release()
        counts = {"statements": 0, "syncs": 0}
        execute, sync = psycopg.Connection.execute, psycopg.Pipeline.sync

        def counted_execute(self, *args, **kwargs):
            counts["statements"] += 1
            return execute(self, *args, **kwargs)

        def counted_sync(self):
            counts["syncs"] += 1
            return sync(self)

        psycopg.Connection.execute, psycopg.Pipeline.sync = counted_execute, counted_sync
        try:
            dhp.claim_next(store, "k", "w1", heartbeat_interval=0)
        finally:
            psycopg.Connection.execute, psycopg.Pipeline.sync = execute, sync
        print(json.dumps({"claim_next": counts}), flush=True)
    finally:
        store.close()
        with psycopg.connect(SERVER, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


if __name__ == "__main__":
    main()
