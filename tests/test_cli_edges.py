"""The rough edges a new user hit (issue 12), one test each: every one of these failed on the
behaviour before the fix (a traceback, a wrong exit code, a silent drop, a created folder)."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from dhp import api
from dhp.cli import commands
from dhp.cli import main as cli
from test_cli import registered, run  # noqa: F401 (the CLI tests' fixture and runner)

ROOT = Path(__file__).resolve().parent.parent
OUT_SCHEMA = {"type": "object"}




def dispatch(capsys, *extra: str, kind: str = "edge.test") -> str:
    code, out, err = run(capsys, "dispatch", "--kind", kind, *extra)
    assert code == 0, err
    return out.strip()


# --- the kit's commands -------------------------------------------------------------------

@pytest.mark.parametrize("argv", [["dhp_conform"], ["dhp_conform", "smoke"],
                                  ["dhp_conform.chaos_cli", "--seconds", "1"]])
def test_kit_with_a_missing_adapter_command_exits_2_naming_it(argv, tmp_path):
    proc = subprocess.run([sys.executable, "-m", *argv, "--impl", "no-such-command-xyz"],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "'no-such-command-xyz' was not found" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_kit_versions_and_help_examples():
    for module, name in (("dhp_conform", "dhp-conform"), ("dhp_conform.chaos_cli", "dhp-chaos")):
        proc = subprocess.run([sys.executable, "-m", module, "--version"],
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0 and proc.stdout.startswith(f"{name} "), proc.stderr


def test_smoke_removes_its_temp_folder_and_the_readme_line_works(tmp_path):
    env = dict(os.environ, TMPDIR=str(tmp_path))
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    line = re.search(r"`(dhp-conform smoke[^`]*)`", readme).group(1)
    assert "--impl" in line, "the README's smoke line must run as written"
    argv = [sys.executable, "-m", "dhp_conform", *line.split(maxsplit=1)[1].replace(
        "'python -m dhp.adapter'", "PY").split()]
    argv = [a if a != "PY" else f"{sys.executable} -m dhp.adapter" for a in argv]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert list(tmp_path.iterdir()) == []


# --- dhp demo, dhp-transport --------------------------------------------------------------

def test_demo_with_a_store_that_is_a_file_is_a_usage_error(capsys, tmp_path):
    afile = tmp_path / "a-file"
    afile.write_text("")
    code, _, err = run(capsys, "demo", "--store", str(afile))
    assert code == 2 and f"--store {afile} exists and is not a folder" in err
    code, _, err = run(capsys, "demo", "--one-host", "--store", str(tmp_path / "no" / "x"))
    assert code == 2 and "has no parent folder" in err


@pytest.mark.parametrize("port", ["99999", "70000", "-1", "http"])
def test_transport_refuses_a_port_outside_0_to_65535(port, capsys, tmp_path):
    from dhp.cli import transport

    with pytest.raises(SystemExit) as exc:
        transport.main(["--root", str(tmp_path / "peer"), "--secret-file", "s",
                        f"--port={port}"])
    assert exc.value.code == 2
    assert f"{port!r} is not a TCP port: give 0..65535" in capsys.readouterr().err
    assert not (tmp_path / "peer").exists()


@pytest.mark.parametrize("option", ["--secret-file", "--tls-cert", "--tls-key",
                                    "--tls-client-ca"])
def test_transport_names_a_missing_file(option, capsys, tmp_path):
    from dhp.cli import transport

    secret = tmp_path / "secret"
    secret.write_text("x" * 32)
    secret.chmod(0o600)
    missing = tmp_path / "missing.pem"
    given = {"--secret-file": secret}
    if option != "--secret-file":
        given["--tls-cert"] = secret  # any readable file: the check of each file comes first
    given[option] = missing
    argv = ["--root", str(tmp_path / "peer"), "--port", "0"]
    for name, path in given.items():
        argv += [name, str(path)]
    assert transport.main(argv) == 2
    assert f"{option} {missing}: no such file" in capsys.readouterr().err
    assert not (tmp_path / "peer").exists()


# --- logs with a torn last line -----------------------------------------------------------

@pytest.mark.covers("DHP-LOG-005")
def test_torn_last_line_is_reported_by_validate_and_import(capsys, store_path, tmp_path):
    hid = dispatch(capsys)
    with api.claim(api.Store(store_path), hid, "w1") as ctx:
        ctx.checkpoint({"i": 1})
        ctx.checkpoint({"i": 2})
    log = tmp_path / "h.jsonl"
    assert run(capsys, "export", hid, str(log))[0] == 0
    torn = tmp_path / "torn.jsonl"
    torn.write_bytes(log.read_bytes()[:-30])  # cut inside the last checkpoint line
    code, out, _ = run(capsys, "validate", str(torn))
    assert code == 0 and f"{torn}:3: warning: DHP-LOG-005: torn last line" in out
    peer = tmp_path / "peer"
    code, out, err = run(capsys, "import", str(torn), "--store", str(peer), "--json")
    assert code == 0
    assert f"dhp import: warning: {torn}:3: DHP-LOG-005: torn last line" in err
    assert [w["requirement"] for w in json.loads(out)["warnings"]] == ["DHP-LOG-005"]
    assert api.status(api.Store(peer), hid)["checkpoints"]["count"] == 1


# --- when a store is created --------------------------------------------------------------

def test_a_refused_dispatch_creates_no_store(capsys, store_path):
    for bad in (["--inputs", "{not json"], ["--budget", '{"max_attempts": 0}'],
                ["--output-schema", '{"type": 3}']):
        code, _, _ = run(capsys, "dispatch", "--kind", "k", *bad)
        assert code == 2
        assert not store_path.exists(), bad


def test_missing_parents_are_created_only_when_asked(capsys, tmp_path):
    deep = tmp_path / "nonexistent" / "deep" / "path"
    code, _, err = run(capsys, "dispatch", "--kind", "k", "--store", str(deep))
    assert code == 2 and f"its parent folder {deep.parent} does not exist" in err
    assert not (tmp_path / "nonexistent").exists()
    code, out, err = run(capsys, "dispatch", "--kind", "k", "--store", str(deep), "--parents")
    assert code == 0 and (deep / "dhp.sqlite3").is_file(), err


def test_a_refused_import_creates_no_store(capsys, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"type": "header"}\n', encoding="utf-8")
    code, _, err = run(capsys, "import", str(bad), "--store", str(tmp_path / "new"))
    assert code == 2 and not (tmp_path / "new").exists(), err


@pytest.mark.parametrize("content", [b"this is not a database" * 200, b""])
def test_a_corrupt_store_file_exits_4_not_3(content, capsys, tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    (store / "dhp.sqlite3").write_bytes(content or os.urandom(8192))
    code, out, err = run(capsys, "ls", "--store", str(store), "--json")
    assert code == 4, err
    assert "damaged or not a DHP store" in err and "retrying cannot help" in err
    assert json.loads(out)["error"]["code"] == "integrity_error"
    assert "4  store corrupt" in commands.EXIT_CODES


# --- the README, as written ---------------------------------------------------------------

def test_readme_snippet_runs_as_written_twice(tmp_path):
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    snippet = re.search(r"## Using it.*?```python\n(.*?)```", readme, re.S).group(1)
    script = tmp_path / "snippet.py"
    script.write_text(snippet, encoding="utf-8")
    for attempt in (1, 2):
        proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path,
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, f"run {attempt}: {proc.stderr}"


# --- global options, id prefixes, one message for an unknown id ----------------------------

def test_global_options_before_or_after_the_subcommand(capsys, tmp_path, monkeypatch):
    monkeypatch.delenv("DHP_STORE", raising=False)
    data = tmp_path / "data"
    code, out, err = run(capsys, "--store", str(data), "dispatch", "--kind", "k")
    assert code == 0, err
    hid = out.strip()
    for argv in (["--store", str(data), "ls"], ["ls", "--store", str(data)],
                 ["--json", "--store", str(data), "ls"], ["--store", str(data), "--json",
                                                          "status", hid],
                 ["--json", "status", hid, "--store", str(data)]):
        code, out, err = run(capsys, *argv)
        assert code == 0, (argv, err)
        assert hid[7:19] in out
    code, out, _ = run(capsys, "--json", "--store", str(data), "ls")
    assert [s["handoff_id"] for s in json.loads(out)["handoffs"]] == [hid]
    code, out, _ = run(capsys, "--store", str(tmp_path / "other"), "ls", "--store", str(data))
    assert code == 0  # the later one wins, as with any repeated option


def test_ids_by_unique_prefix_everywhere(capsys, store_path, tmp_path):
    hid = dispatch(capsys)
    short, bare = hid[:13], hid[7:13]
    for argv in (["status", short], ["status", bare], ["cancel", bare],
                 ["export", bare, str(tmp_path / "h.jsonl")]):
        code, out, err = run(capsys, *argv)
        assert code == 0, (argv, err)
    assert hid in run(capsys, "status", bare)[1]
    code, _, err = run(capsys, "result", bare)
    assert code == 1 and f"handoff {hid} is cancelled" in err
    code, _, err = run(capsys, "dlq", "requeue", bare)
    assert code == 1 and "conflict" in err
    code, _, err = run(capsys, "status", "abc")
    assert code == 2 and "at least 4" in err


class _Ids:
    """A store whose every prefix matches these ids (an ambiguous prefix needs ~300
    dispatches to occur by chance)."""

    def __init__(self, ids):
        self.ids = ids

    def transaction(self, write=False):
        import contextlib

        return contextlib.nullcontext(self)

    def ids_with_prefix(self, prefix, limit):
        return self.ids[:limit]


def test_prefix_lookup_and_an_ambiguous_prefix(capsys, store_path):
    ids = [dispatch(capsys, "--inputs", json.dumps({"n": n})) for n in range(20)]
    by_digit: dict[str, list[str]] = {}
    for hid in ids:
        by_digit.setdefault(hid[7], []).append(hid)
    digit, same = next((d, group) for d, group in by_digit.items() if len(group) > 1)
    with api.Store(store_path).transaction(write=False) as tx:  # the indexed range read
        assert tx.ids_with_prefix("sha256:" + digit, limit=3) == sorted(same)[:3]
        assert tx.ids_with_prefix(ids[0], limit=3) == [ids[0]]
    with pytest.raises(api.InvalidInput, match="ambiguous: it matches sha256:a.*, sha256:b"):
        commands.resolve_id(_Ids(["sha256:a", "sha256:b"]), "abcd")


@pytest.mark.covers("DHP-STM-003")
def test_one_message_for_an_unknown_id(capsys, store_path, tmp_path):
    dispatch(capsys)
    unknown = "sha256:" + "0" * 64
    for argv in (["status", unknown], ["result", unknown], ["cancel", unknown],
                 ["export", unknown, str(tmp_path / "x.jsonl")], ["dlq", "requeue", unknown],
                 ["status", "0000"]):
        code, _, err = run(capsys, *argv)
        assert code == 1, (argv, err)
        given = argv[-2] if argv[0] == "export" else argv[-1]
        assert err.split(": error: ", 1)[1].strip() == \
            f"not_found: DHP-STM-003: no handoff {given} in this store", argv
    for call in (api.status, api.cancel, api.requeue, api.result):
        with pytest.raises(api.NotFound, match=f"no handoff {unknown} in this store"):
            call(api.Store(store_path), unknown)


# --- dhp ls: 100 columns, pages ------------------------------------------------------------

def test_ls_fits_100_columns_and_wide_shows_everything(capsys, store_path):
    long_kind = "reports.quarterly.summarise-and-translate"
    hid = dispatch(capsys, kind=long_kind)
    with api.claim(api.Store(store_path), hid, "worker-on-a-long-host-name-1234", ttl=60):
        code, out, _ = run(capsys, "ls")
        assert code == 0
        assert max(len(line) for line in out.splitlines()) <= 100, out
        assert out.splitlines()[1].startswith(hid[7:19])
        code, wide, _ = run(capsys, "ls", "--wide")
        assert hid in wide and long_kind in wide and "worker-on-a-long-host-name-1234" in wide


def test_ls_pages_newest_first(capsys, store_path):
    ids = [dispatch(capsys, "--inputs", json.dumps({"n": n})) for n in range(7)]
    code, out, err = run(capsys, "ls", "--limit", "3", "--json")
    page = json.loads(out)  # the cursor is in the one JSON document, and on stderr
    assert [s["handoff_id"] for s in page["handoffs"]] == ids[::-1][:3]
    cursor = re.search(r"next page: dhp ls --limit 3 --json --after (\S+)", err).group(1)
    assert page["next_cursor"] == cursor
    code, out, err = run(capsys, "ls", "--limit", "3", "--after", cursor)
    assert [line.split()[0] for line in out.splitlines()[1:]] == [h[7:19] for h in ids[3:0:-1]]
    cursor = re.search(r"next page: dhp ls --limit 3 --after (\S+)", err).group(1)
    code, out, err = run(capsys, "ls", "--limit", "3", "--after", cursor)
    assert len(out.splitlines()) == 2 and "--after" not in err  # the last one: no cursor
    code, out, _ = run(capsys, "ls", "--all", "--json")
    assert [s["handoff_id"] for s in json.loads(out)["handoffs"]] == ids[::-1]
    assert json.loads(out)["next_cursor"] is None
    code, _, err = run(capsys, "ls", "--limit", "0")
    assert code == 2 and "positive integer" in err
    code, _, err = run(capsys, "ls", "--after", "bogus")
    assert code == 2 and "bad cursor" in err


def test_ls_next_page_hint_keeps_the_store_and_the_filters(capsys, tmp_path):
    data = tmp_path / "my data"
    for n in range(3):
        code, _, err = run(capsys, "dispatch", "--kind", "k", "--inputs", json.dumps({"n": n}),
                           "--store", str(data))
        assert code == 0, err
    code, _, err = run(capsys, "ls", "--store", str(data), "--kind", "k", "--limit", "2")
    hint = err.strip().removeprefix("next page: ")
    assert hint.startswith(f"dhp ls --store '{data}' --kind k --limit 2 --after "), err
    code, out, _ = run(capsys, *shlex.split(hint)[1:])  # the hint, run as given
    assert code == 0 and len(out.splitlines()) == 2  # the header and the last handoff


def test_list_handoffs_pages_with_a_cursor(store_path, capsys):
    ids = [dispatch(capsys, "--inputs", json.dumps({"n": n})) for n in range(5)]
    store = api.Store(store_path)
    first = api.list_handoffs(store, limit=2)
    assert [s["handoff_id"] for s in first] == ids[:2:-1] and first.cursor
    second = api.list_handoffs(store, limit=2, after=first.cursor)
    third = api.list_handoffs(store, limit=2, after=second.cursor)
    assert [s["handoff_id"] for s in second + third] == ids[2::-1]
    assert third.cursor is None
    assert [s["handoff_id"] for s in api.iter_handoffs(store)] == ids[::-1]
    with pytest.raises(api.InvalidInput, match="limit"):
        api.list_handoffs(store, limit=0)


# --- help, supervisor ----------------------------------------------------------------------

@pytest.mark.parametrize("argv", [[name] for name, *_ in commands.COMMANDS if name != "dlq"]
                         + [["dlq", "ls"], ["dlq", "requeue"], ["validate"], []])
def test_every_help_shows_an_example_and_the_exit_codes(argv, capsys):
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args([*argv, "--help"])
    out = capsys.readouterr().out
    assert "examples:\n  dhp " in out and "\nexit codes:\n  0  " in out, out


@pytest.mark.parametrize("module", ["dhp.cli.supervisor", "dhp.cli.transport", "dhp_conform",
                                    "dhp_conform.chaos_cli"])
def test_every_other_command_help_is_of_the_same_family(module):
    proc = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0
    assert "examples:\n  dhp-" in proc.stdout and "\nexit codes:\n  0  " in proc.stdout


def test_dhp_supervisor_takes_store_and_id_like_dhp_supervisor(capsys, store_path):
    dispatch(capsys)
    proc = subprocess.run([sys.executable, "-m", "dhp.cli.supervisor", "--store", str(store_path),
                           "--id", "sup-x", "--once"], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert [json.loads(line)["supervisor"] for line in proc.stdout.splitlines()] == \
        ["sup-x", "sup-x"]
    assert proc.stderr == ""
    old = subprocess.run([sys.executable, "-m", "dhp.cli.supervisor", str(store_path), "sup-y",
                          "--once"], capture_output=True, text=True, timeout=60)
    assert old.returncode == 0
    assert "deprecated; write `dhp-supervisor --store" in old.stderr
    missing = subprocess.run([sys.executable, "-m", "dhp.cli.supervisor", "--store",
                              str(store_path.parent / "none"), "--once"],
                             capture_output=True, text=True, timeout=60)
    assert missing.returncode == 1 and "no DHP store at" in missing.stderr
