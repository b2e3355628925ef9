"""`dhp mcp-config` (dhp.agents.mcp_config) against temporary projects and home folders, and
the Agent Skill made from the agent guide (tools/gen_skill.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest
from dhp.agents import mcp_config as mc
from dhp.cli.main import main

ROOT = Path(__file__).resolve().parent.parent
OTHER = {"command": "other-server", "args": ["--x"]}


def dhp(*argv: str) -> int:
    return main(["mcp-config", "--no-compile", *argv])


@pytest.mark.parametrize("client,file,key", [
    ("claude-code", ".mcp.json", "mcpServers"), ("cursor", ".cursor/mcp.json", "mcpServers"),
    ("vscode", ".vscode/mcp.json", "servers")])
def test_registers_once_keeps_other_servers_and_backs_up(tmp_path, capsys, client, file, key):
    path = tmp_path / file
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({key: {"other": OTHER}, "theme": "dark"}))
    assert dhp("--client", client, "--project", str(tmp_path), "--store", "data") == 0
    doc = json.loads(path.read_text())
    assert doc["theme"] == "dark" and doc[key]["other"] == OTHER
    dhp_entry = doc[key]["dhp"]
    assert dhp_entry["args"][-2:] == ["--root", str((Path.cwd() / "data").resolve())]
    assert Path(dhp_entry["command"]).is_absolute()
    assert (dhp_entry.get("type") == "stdio") == (client != "cursor")
    backup = path.with_name(path.name + ".bak")
    assert json.loads(backup.read_text())[key] == {"other": OTHER}
    text, mtime = path.read_text(), path.stat().st_mtime_ns
    capsys.readouterr()
    assert dhp("--client", client, "--project", str(tmp_path), "--store", "data") == 0
    assert "nothing to change" in capsys.readouterr().out
    assert path.read_text() == text and path.stat().st_mtime_ns == mtime  # idempotent
    assert sorted(p.name for p in path.parent.iterdir() if ".bak" in p.name) == [backup.name]


def test_a_changed_store_replaces_only_our_entry_and_keeps_every_backup(tmp_path):
    for store in ("one", "two"):
        assert dhp("--client", "claude-code", "--project", str(tmp_path), "--store", store) == 0
    doc = json.loads((tmp_path / ".mcp.json").read_text())
    assert list(doc["mcpServers"]) == ["dhp"] and doc["mcpServers"]["dhp"]["args"][-1] \
        .endswith("two")
    assert (tmp_path / ".mcp.json.bak").exists()  # the first file, before "two" replaced it


def test_dry_run_and_print_write_nothing(tmp_path, capsys):
    assert dhp("--client", "cursor", "--project", str(tmp_path), "--dry-run") == 0
    assert "would write" in capsys.readouterr().out and not (tmp_path / ".cursor").exists()
    assert dhp("--client", "vscode", "--project", str(tmp_path), "--print") == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["servers"]["dhp"]["type"] == "stdio" and not (tmp_path / ".vscode").exists()


def test_a_config_that_is_not_json_is_left_alone(tmp_path, capsys):
    path = tmp_path / ".mcp.json"
    path.write_text('{"mcpServers": {} // a comment\n}')
    assert dhp("--client", "claude-code", "--project", str(tmp_path)) == 1
    err = capsys.readouterr().err
    assert str(path) in err and "line 1" in err and "nothing was changed" in err
    assert path.read_text() == '{"mcpServers": {} // a comment\n}'
    assert not path.with_name(".mcp.json.bak").exists()


@pytest.mark.parametrize("platform,env,expected", [
    ("darwin", {}, "HOME/Library/Application Support/Claude/claude_desktop_config.json"),
    ("win32", {"APPDATA": "APPDATA"}, "APPDATA/Claude/claude_desktop_config.json"),
    ("linux", {}, "HOME/.config/Claude/claude_desktop_config.json"),
    ("linux", {"XDG_CONFIG_HOME": "XDG"}, "XDG/Claude/claude_desktop_config.json")])
def test_claude_desktop_config_path(platform, env, expected):
    got = mc.config_path("claude-desktop", project=Path("P"), home=Path("HOME"),
                         platform=platform, environ=env)
    assert got == Path(expected)


def test_claude_desktop_in_a_temporary_home(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.setattr(sys, "platform", "linux")
    assert dhp("--client", "claude-desktop", "--store", str(tmp_path / "s")) == 0
    doc = json.loads((tmp_path / ".config/Claude/claude_desktop_config.json").read_text())
    assert doc["mcpServers"]["dhp"]["args"] == ["--root", str(tmp_path / "s")]


def test_the_skill_is_installed_for_claude_code(tmp_path):
    assert dhp("--client", "claude-code", "--project", str(tmp_path), "--skill") == 0
    installed = tmp_path / ".claude/skills/dhp/SKILL.md"
    assert installed.read_text() == (ROOT / "skills/dhp/SKILL.md").read_text()
    assert dhp("--client", "cursor", "--project", str(tmp_path), "--skill") == 2


def test_warm_bytecode_compiles_a_package(tmp_path, monkeypatch):
    pkg = tmp_path / "warmpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    mc.warm_bytecode(("warmpkg",))
    assert list((pkg / "__pycache__").glob("__init__.*.pyc"))


# --- the Agent Skill ---------------------------------------------------------------------------

def test_the_skill_is_made_from_the_guide_and_has_not_drifted():
    proc = subprocess.run([sys.executable, str(ROOT / "tools/gen_skill.py"), "--check"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    guide = (ROOT / "reference/dhp/agents/guide.md").read_text()
    skill = (ROOT / "skills/dhp/SKILL.md").read_text()
    assert guide.partition("\n")[2].strip() in skill


def test_the_skill_has_agent_skills_front_matter_and_ships_in_the_package():
    yaml = pytest.importorskip("yaml")  # PyYAML comes with the docs extra
    text = resources.files("dhp.agents").joinpath("SKILL.md").read_text(encoding="utf-8")
    assert text == (ROOT / "skills/dhp/SKILL.md").read_text()
    _, front, body = text.split("---\n", 2)
    meta = yaml.safe_load(front)
    assert meta["name"] == "dhp" == Path("skills/dhp").name
    assert 50 < len(meta["description"]) <= 1024 and "Use when" in meta["description"]
    assert body.lstrip().startswith("<!-- Generated")


def test_gen_skill_check_fails_on_drift(tmp_path, monkeypatch):
    sys.path.insert(0, str(ROOT / "tools"))
    import gen_skill

    stale = tmp_path / "SKILL.md"
    stale.write_text("old\n")
    monkeypatch.setattr(gen_skill, "OUTPUTS", [stale])
    assert gen_skill.main(["--check"]) == 1
    assert gen_skill.main([]) == 0 and gen_skill.main(["--check"]) == 0
