"""How many of the row updates of a run of checkpoints on the Postgres store are HOT (the
new row version on its page, no index entry written): n_tup_hot_upd / n_tup_upd of the
handoffs table in pg_stat_user_tables, over one claim and --checkpoints checkpoints of
one handoff among --backlog pending ones. Prints one line of JSON. Needs
$DHP_BENCH_POSTGRES (default postgresql://postgres@127.0.0.1:5432/test); uses and drops a
schema of its own.

    python bench/checkpoint_hot.py [--checkpoints 500] [--backlog 200]
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import time

import dhp
import psycopg

SERVER = os.environ.get("DHP_BENCH_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")


def updates(conn: psycopg.Connection, schema: str) -> tuple[int, int]:
    conn.execute("SELECT pg_stat_clear_snapshot()")
    return conn.execute("SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables "
                        "WHERE schemaname = %s AND relname = 'handoffs'", (schema,)).fetchone()


def settled(conn: psycopg.Connection, schema: str) -> tuple[int, int]:
    # Backends report their counters within about a second of going idle.
    last = None
    for _ in range(20):
        time.sleep(0.5)
        now = updates(conn, schema)
        if now == last:
            return now
        last = now
    return last


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--checkpoints", type=int, default=500)
    ap.add_argument("--backlog", type=int, default=200)
    args = ap.parse_args()
    schema = f"dhp_bench_hot_{secrets.token_hex(4)}"
    location = f"{SERVER}{'&' if '?' in SERVER else '?'}schema={schema}"
    try:
        with psycopg.connect(SERVER, autocommit=True) as conn:
            store = dhp.Store(location)
            dhp.dispatch_many(store, [{"task_kind": "k", "inputs": {"i": i}, "output_schema": {},
                                       "budget": {}} for i in range(args.backlog)])
            store.close()  # its sessions end and report their counters
            before = settled(conn, schema)
            store = dhp.Store(location)
            ctx = dhp.claim_next(store, "k", "w1", heartbeat_interval=0)
            for n in range(args.checkpoints):
                ctx.checkpoint({"n": n, "pad": "x" * 100})
            version = store.schema_version()
            store.close()
            after = settled(conn, schema)
        upd, hot = after[0] - before[0], after[1] - before[1]
        print(json.dumps({"checkpoints": args.checkpoints, "backlog": args.backlog,
                          "schema_version": version, "n_tup_upd": upd, "n_tup_hot_upd": hot,
                          "hot_ratio": round(hot / upd, 3) if upd else None}), flush=True)
    finally:
        with psycopg.connect(SERVER, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


if __name__ == "__main__":
    main()
