"""Shared fixtures. `store_location` gives a test a fresh store on each backend (see
backends.py): the test runs once on SQLite and once on Postgres."""

from __future__ import annotations

import pytest
from backends import BACKENDS, open_postgres_schemas


def pytest_configure(config):
    config.addinivalue_line("markers", "covers(*ids): requirements this test checks")


@pytest.fixture
def store_path(tmp_path, monkeypatch):
    """A store folder (not created) that `dhp` commands use through $DHP_STORE."""
    path = tmp_path / "store"
    monkeypatch.setenv("DHP_STORE", str(path))
    return path


@pytest.fixture(scope="session")
def postgres_schemas():
    """The session's PostgresSchemas, or a skip (a failure under DHP_REQUIRE_POSTGRES=1)."""
    schemas = open_postgres_schemas()
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


@pytest.fixture
def scratch_location(backend, tmp_path, request) -> str:
    """An empty store location on the backend; on Postgres the session's scratch schema,
    emptied (for tests that open many stores in a row)."""
    if backend == "postgres":
        return request.getfixturevalue("postgres_schemas").scratch()
    return str(tmp_path / "store")
