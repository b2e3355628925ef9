"""Shared fixtures. `store_location` gives each store test a fresh store on every backend:
a folder (SQLite) and a schema of its own in the test Postgres server (DHP_TEST_POSTGRES,
default postgresql://postgres@127.0.0.1:5432/test). Every schema of a test session starts with
one random prefix and is dropped when the session ends. Without a server the Postgres cases
skip with the reason; with DHP_REQUIRE_POSTGRES=1 (CI) they fail instead."""

from __future__ import annotations

import itertools
import os
import secrets

import pytest

PG_URL = os.environ.get("DHP_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
BACKENDS = ("sqlite", "postgres")


def pytest_configure(config):
    config.addinivalue_line("markers", "covers(*ids): requirements this test checks")


class PostgresSchemas:
    """Fresh schema names of this test session, and their removal."""

    def __init__(self, url: str):
        self.url = url
        self.prefix = f"dhp_t{secrets.token_hex(4)}"
        self._n = itertools.count(1)

    def location(self) -> str:
        return self.url_for(f"{self.prefix}_{next(self._n)}")

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


def _unavailable(reason: str):
    if os.environ.get("DHP_REQUIRE_POSTGRES") == "1":
        pytest.fail(f"DHP_REQUIRE_POSTGRES=1 but {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def postgres_schemas():
    """The session's PostgresSchemas, or a skip (a failure under DHP_REQUIRE_POSTGRES=1)."""
    try:
        import psycopg
    except ImportError:
        _unavailable("psycopg is not installed (pip install 'durable-handoff[postgres]')")
    try:
        psycopg.connect(PG_URL, connect_timeout=5).close()
    except psycopg.Error as exc:
        _unavailable(f"no PostgreSQL server at {PG_URL}: {str(exc).strip()}")
    schemas = PostgresSchemas(PG_URL)
    yield schemas
    schemas.drop_all()


@pytest.fixture(params=BACKENDS)
def backend(request) -> str:
    """The backend name of a test run on every backend."""
    return request.param


@pytest.fixture
def store_location(backend, tmp_path, request) -> str:
    """A fresh store location on the backend: a folder, or a postgresql:// URL."""
    if backend == "postgres":
        return request.getfixturevalue("postgres_schemas").location()
    return str(tmp_path / "store")
