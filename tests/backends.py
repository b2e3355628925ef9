"""The two store backends for tests: a folder (SQLite) and a schema in the test Postgres
server (DHP_TEST_POSTGRES, default postgresql://postgres@127.0.0.1:5432/test).

Every schema of a test session starts with one random prefix and is dropped when the session
ends (conftest.postgres_schemas). Without a server the Postgres cases skip with the reason;
with DHP_REQUIRE_POSTGRES=1 (CI) they fail instead."""

from __future__ import annotations

import itertools
import os
import secrets

import pytest

PG_URL = os.environ.get("DHP_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
BACKENDS = ("sqlite", "postgres")


class PostgresSchemas:
    """Fresh schema names of this test session, and their removal."""

    def __init__(self, url: str):
        self.url = url
        self.prefix = f"dhp_t{secrets.token_hex(4)}"
        self._n = itertools.count(1)

    def location(self) -> str:
        """A schema nobody used yet (created on first use by the store)."""
        return self.url_for(f"{self.prefix}_{next(self._n)}")

    def scratch(self) -> str:
        """The session's scratch schema, emptied: cheaper than a new schema for tests that
        open hundreds of short-lived stores one after the other."""
        import psycopg

        location = self.url_for(f"{self.prefix}_scratch")
        with psycopg.connect(self.url, autocommit=True) as conn:
            if conn.execute("SELECT to_regclass(%s)",
                            (f"{self.prefix}_scratch.handoffs",)).fetchone()[0]:
                conn.execute(f"TRUNCATE {self.prefix}_scratch.handoffs, "
                             f"{self.prefix}_scratch.checkpoints, "
                             f"{self.prefix}_scratch.supervisor_leadership, "
                             f"{self.prefix}_scratch.lease_journal")
        return location

    def url_for(self, schema: str) -> str:
        return f"{self.url}{'&' if '?' in self.url else '?'}schema={schema}"

    def drop_all(self) -> None:
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            names = [r[0] for r in conn.execute(
                "SELECT nspname FROM pg_namespace WHERE nspname LIKE %s",
                (self.prefix + "\\_%",))]
            for name in names:
                conn.execute(f'DROP SCHEMA "{name}" CASCADE')


def unavailable(reason: str):
    """Skip, or fail under DHP_REQUIRE_POSTGRES=1."""
    if os.environ.get("DHP_REQUIRE_POSTGRES") == "1":
        pytest.fail(f"DHP_REQUIRE_POSTGRES=1 but {reason}")
    pytest.skip(reason)


def open_postgres_schemas() -> PostgresSchemas:
    try:
        import psycopg
    except ImportError:
        unavailable("psycopg is not installed (pip install 'durable-handoff[postgres]')")
    try:
        psycopg.connect(PG_URL, connect_timeout=5).close()
    except psycopg.Error as exc:
        unavailable(f"no PostgreSQL server at {PG_URL}: {str(exc).strip()}")
    return PostgresSchemas(PG_URL)


def dead_owner_token(store) -> str:
    """The liveness token of an owner process that has died, on either backend: a lock file
    nobody holds (SQLite), or a session advisory lock nobody holds (Postgres)."""
    token = secrets.token_hex(16)
    folder = getattr(store.liveness, "folder", None)
    if folder is not None:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{token}.lock").write_text("0\n")
    return token
