"""Who may create a store, and the exit code of a bad store location (docs/guide/cli.md).

Only `dhp init`, `dhp dispatch`, `dhp import` and an explicit `--create` create a store; every
other command refuses a missing one with not_found (exit 1) naming the location and how to
create it, and creates nothing: a folder without the SQLite file, a Postgres schema that does
not exist or holds no DHP tables. A malformed URL, a database that does not exist and a
schema of the server's own are bad input (exit 2); a server that cannot be reached is
unavailable (exit 3), the same for every command."""

from __future__ import annotations

import re
import sys

import dhp
import psycopg
import pytest
from backends import PG_URL
from dhp.agents import a2a_server, mcp_cli
from dhp.cli import supervisor, transport
from dhp.cli.main import main as dhp_main

pytest.importorskip("uvicorn", reason="dhp-a2a serves with uvicorn (the `a2a` extra)")


def _secret(tmp_path) -> str:
    path = tmp_path / "secret"
    path.write_text("0123456789abcdef" * 4)
    path.chmod(0o600)
    return str(path)


def commands(location: str, tmp_path) -> dict[str, tuple]:
    """Every command that opens a store, each as (main, argv) on `location`."""
    (tmp_path / "user_tasks.py").write_text(
        "import dhp\n\n@dhp.task('t.k', output_schema={})\ndef t(ctx, inputs):\n    return {}\n")
    return {
        "dhp ls": (dhp_main, ["ls", "--store", location]),
        "dhp status": (dhp_main, ["status", "abcd", "--store", location]),
        "dhp worker": (dhp_main, ["worker", "user_tasks", "--store", location]),
        "dhp supervisor": (dhp_main, ["supervisor", "--store", location, "--once"]),
        "dhp-supervisor": (supervisor.main, ["--store", location, "--once"]),
        "dhp-mcp": (mcp_cli.main, ["--root", location]),
        "dhp-a2a": (a2a_server.main, ["--store", location, "--bind", "127.0.0.1:0",
                                      "--tasks-db", str(tmp_path / "tasks.sqlite3")]),
        "dhp-transport": (transport.main, ["--root", location, "--port", "0",
                                           "--secret-file", _secret(tmp_path)]),
    }


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    from dhp.worker.task import REGISTRY

    REGISTRY.pop("t.k", None)
    sys.modules.pop("user_tasks", None)


NAMES = ["dhp ls", "dhp status", "dhp worker", "dhp supervisor", "dhp-supervisor", "dhp-mcp",
         "dhp-a2a", "dhp-transport"]


def _schema_exists(schema: str) -> bool:
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        return conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s",
                            (schema,)).fetchone() is not None


@pytest.mark.parametrize("name", NAMES)
def test_a_missing_folder_store_is_not_found_and_not_created(name, in_tmp, capsys):
    missing = in_tmp / "dta"  # a typo of ./data
    main, argv = commands(str(missing), in_tmp)[name]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert f"no DHP store at {missing}" in err and f"dhp init --store {missing}" in err, err
    assert not missing.exists()


@pytest.mark.parametrize("name", NAMES)
def test_a_missing_postgres_schema_is_not_found_and_not_created(name, in_tmp, capsys,
                                                                postgres_schemas):
    location = postgres_schemas.location()
    schema = location.rpartition("schema=")[2]
    main, argv = commands(location, in_tmp)[name]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert f"no DHP store at {location}" in err and "dhp init --store" in err, err
    assert not _schema_exists(schema)


def test_a_schema_without_dhp_tables_is_no_store(postgres_schemas, capsys):
    location = postgres_schemas.location()
    schema = location.rpartition("schema=")[2]
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
        conn.execute(f"CREATE TABLE {schema}.other (x int)")
    assert dhp_main(["ls", "--store", location]) == 1
    assert "holds no DHP tables" in capsys.readouterr().err


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("location,code,says", [
    ("postgresql://%%%", 2, "malformed store URL"),
    ("postgresql://postgres@127.0.0.1:99999/test", 2, "malformed store URL"),
    (PG_URL.rsplit("/", 1)[0] + "/no_such_db_dhp", 2, 'database "no_such_db_dhp" does not exist'),
    (PG_URL + "?schema=information_schema", 2, "one of the server's own"),
    (PG_URL + "?schema=pg_catalog", 2, "one of the server's own"),
    (PG_URL + "?schema=pg_toast", 2, "one of the server's own"),
    ("postgresql://postgres@127.0.0.1:1/test", 3, "cannot open the store"),
    ("postgresql://postgres@127.0.0.1:5432,127.0.0.1:x/test", 2, "malformed store URL"),
    ("postgresql://postgres@127.0.0.1:1,127.0.0.1:2/test", 3, "cannot open the store"),
])
def test_every_command_shares_the_exit_code_of_a_bad_location(name, location, code, says,
                                                              in_tmp, capsys):
    main, argv = commands(location, in_tmp)[name]
    assert main(argv) == code
    assert says in capsys.readouterr().err


@pytest.mark.parametrize("name", ["dhp worker", "dhp supervisor", "dhp-supervisor",
                                  "dhp-transport"])
def test_create_with_a_missing_parent_suggests_a_flag_the_command_has(name, in_tmp, capsys):
    missing = in_tmp / "no" / "dir"
    main, argv = commands(str(missing), in_tmp)[name]
    assert main([*argv, "--create"]) == 2
    err = capsys.readouterr().err
    flags = re.findall(r"pass (--[a-z-]+)", err)
    assert flags == ["--parents"], err
    assert not missing.parent.exists()


def test_dhp_init_creates_once_and_says_so(tmp_path, capsys):
    store = tmp_path / "data"
    assert dhp_main(["init", "--store", str(store)]) == 0
    assert f"created the DHP store {store}" in capsys.readouterr().out
    assert dhp_main(["init", "--store", str(store), "--json"]) == 0
    assert '"created": false' in capsys.readouterr().out
    assert dhp_main(["ls", "--store", str(store)]) == 0
    deep = tmp_path / "a" / "b"
    assert dhp_main(["init", "--store", str(deep)]) == 2
    assert "pass --parents" in capsys.readouterr().err
    assert dhp_main(["init", "--store", str(deep), "--parents"]) == 0


def test_dhp_init_creates_a_postgres_schema(postgres_schemas, capsys):
    location = postgres_schemas.location()
    assert dhp_main(["init", "--store", location]) == 0
    assert dhp_main(["ls", "--store", location]) == 0
    assert "(no handoffs)" in capsys.readouterr().out


def test_the_sdk_creates_by_default_and_refuses_with_create_false(tmp_path):
    with pytest.raises(dhp.NotFound, match="no DHP store at"):
        dhp.Store(tmp_path / "s", create=False)
    assert not (tmp_path / "s").exists()
    dhp.Store(tmp_path / "s").close()  # the SDK as before: created on first use
    dhp.Store(tmp_path / "s", create=False).close()


@pytest.mark.covers("DHP-SRV-013")
def test_a_location_may_name_several_servers_and_the_writable_one_is_used(postgres_schemas):
    """libpq's multi-host form: the first host is down, the second is the server; the store
    opens on the second (the HA rig, tests/test_store_ha.py, does it across a failover)."""
    location = postgres_schemas.location()
    head, _, tail = location.partition("@")
    several = (f"{head}@127.0.0.1:1,{tail}".replace("?", "?target_session_attrs=read-write&",
                                                     1))
    store = dhp.Store(several)
    hid = dhp.dispatch(store, task_kind="k", inputs={}, output_schema={}, budget={})
    assert dhp.status(store, hid)["state"] == "pending"
    assert "127.0.0.1:1," in repr(store)
    store.close()
