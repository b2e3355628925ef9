"""Register `dhp-mcp` with the common MCP clients by editing their JSON config files: Claude
Code (`.mcp.json` of a project), Claude Desktop (`claude_desktop_config.json`), Cursor
(`.cursor/mcp.json`) and VS Code (`.vscode/mcp.json`). The CLI is `dhp mcp-config`.

An edit only ever adds or replaces the one server entry it owns (by name): every other server
and setting in the file is kept. Running it twice changes nothing the second time (the entry
is compared first; an equal one is not rewritten). An existing file is copied to a backup
before it is changed, and the new text is written to a temporary file and renamed over it, so
a crash never leaves half a config.
"""

from __future__ import annotations

import compileall
import difflib
import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from dhp.core.errors import InvalidInput

SERVER_NAME = "dhp"


@dataclass(frozen=True)
class ClientKind:
    label: str
    key: str         # the member holding the servers
    stdio_type: bool  # whether an entry says "type": "stdio"
    where: str       # for --help


CLIENTS = {
    "claude-code": ClientKind("Claude Code", "mcpServers", True, "PROJECT/.mcp.json"),
    "claude-desktop": ClientKind("Claude Desktop", "mcpServers", False,
                                 "claude_desktop_config.json in the user's Claude folder"),
    "cursor": ClientKind("Cursor", "mcpServers", False, "PROJECT/.cursor/mcp.json"),
    "vscode": ClientKind("VS Code", "servers", True, "PROJECT/.vscode/mcp.json"),
}


def config_path(client: str, *, project: Path, home: Path, platform: str = sys.platform,
                environ: dict | None = None) -> Path:
    """Where `client` reads its MCP servers: a project's file, or Claude Desktop's per-user
    file (the folder its installers use on each system)."""
    if client == "claude-code":
        return project / ".mcp.json"
    if client == "cursor":
        return project / ".cursor" / "mcp.json"
    if client == "vscode":
        return project / ".vscode" / "mcp.json"
    if client == "claude-desktop":
        environ = os.environ if environ is None else environ
        if platform == "darwin":
            folder = home / "Library" / "Application Support" / "Claude"
        elif platform.startswith("win"):
            folder = Path(environ.get("APPDATA") or home / "AppData" / "Roaming") / "Claude"
        else:
            folder = Path(environ.get("XDG_CONFIG_HOME") or home / ".config") / "Claude"
        return folder / "claude_desktop_config.json"
    raise InvalidInput(f"unknown client {client!r}: the clients are {', '.join(CLIENTS)}")


def server_command(root: str) -> list[str]:
    """The command a client runs: this environment's `dhp-mcp` by absolute path (clients start
    servers with a bare PATH, outside any virtual environment), else this interpreter with
    `-m dhp.agents.mcp_cli`; the store as an absolute path unless it is a URL."""
    script = Path(sys.executable).with_name("dhp-mcp")
    cmd = [str(script)] if script.exists() else [sys.executable, "-m", "dhp.agents.mcp_cli"]
    if "://" not in root:
        root = str(Path(root).expanduser().resolve())
    return [*cmd, "--root", root]


def entry(client: str, command: list[str]) -> dict:
    """The server entry in the client's own shape."""
    out: dict[str, Any] = {"command": command[0], "args": command[1:]}
    return {"type": "stdio", **out} if CLIENTS[client].stdio_type else out


@dataclass
class Plan:
    client: str
    path: Path
    before: str | None  # the file's text now (None: no file)
    after: str          # its text with our entry
    name: str

    @property
    def changed(self) -> bool:
        return self.before != self.after

    def diff(self) -> str:
        return "".join(difflib.unified_diff(
            (self.before or "").splitlines(keepends=True), self.after.splitlines(keepends=True),
            fromfile=f"{self.path} (now)", tofile=f"{self.path} (with {self.name})"))


def plan(client: str, path: Path, command: list[str], name: str = SERVER_NAME) -> Plan:
    """What registering `command` as server `name` makes of the file at `path`."""
    if client not in CLIENTS:
        raise InvalidInput(f"unknown client {client!r}: the clients are {', '.join(CLIENTS)}")
    if not name:
        raise InvalidInput("the server name must not be empty")
    key = CLIENTS[client].key
    before = path.read_text(encoding="utf-8") if path.exists() else None
    doc = _parse(path, before) if before and before.strip() else {}
    servers = doc.get(key, {})
    if not isinstance(servers, dict):
        raise InvalidInput(f"{path}: {key!r} is not a JSON object; fix the file by hand")
    wanted = entry(client, command)
    if servers.get(name) == wanted and before is not None:
        return Plan(client, path, before, before, name)  # already there: nothing to write
    doc[key] = {**servers, name: wanted}
    return Plan(client, path, before, json.dumps(doc, indent=2, ensure_ascii=False) + "\n",
                name)


def _parse(path: Path, text: str) -> dict:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"{path} is not valid JSON (line {exc.lineno}, column {exc.colno}: "
                           f"{exc.msg}); nothing was changed. Fix it (comments are not "
                           "supported), or add the entry by hand: see --print") from None
    if not isinstance(doc, dict):
        raise InvalidInput(f"{path} does not hold a JSON object; nothing was changed")
    return doc


def apply(p: Plan) -> Path | None:
    """Write the plan: back up an existing file first, then replace it atomically. Returns
    the backup's path (None when there was no file, or nothing to change)."""
    if not p.changed:
        return None
    p.path.parent.mkdir(parents=True, exist_ok=True)
    backup = None
    if p.before is not None:
        backup = _free(p.path.with_name(p.path.name + ".bak"))
        shutil.copy2(p.path, backup)
    _write_atomic(p.path, p.after)
    return backup


def _free(path: Path) -> Path:
    """`path`, or `path.1`, `path.2`, ...: a backup never overwrites an older one."""
    n, candidate = 0, path
    while candidate.exists():
        n += 1
        candidate = path.with_name(f"{path.name}.{n}")
    return candidate


def _write_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        if path.exists():
            shutil.copymode(path, tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def skill_text() -> str:
    """The Agent Skill made from the agent guide (tools/gen_skill.py), as shipped."""
    return resources.files("dhp.agents").joinpath("SKILL.md").read_text(encoding="utf-8")


def skill_plan(project: Path) -> Plan:
    """Claude Code's project skill: PROJECT/.claude/skills/dhp/SKILL.md."""
    path = project / ".claude" / "skills" / "dhp" / "SKILL.md"
    before = path.read_text(encoding="utf-8") if path.exists() else None
    return Plan("claude-code", path, before, skill_text(), "the dhp skill")


def warm_bytecode(packages: tuple[str, ...] = ("dhp", "mcp", "mcp_types")) -> None:
    """Compile the server's modules now, so the client's first start of `dhp-mcp` reads
    bytecode instead of compiling some 600 modules (about a second on a small machine; with
    PYTHONDONTWRITEBYTECODE set, every start would). Best effort: a folder that cannot be
    written is left as it is."""
    import importlib.util

    for name in packages:
        spec = importlib.util.find_spec(name)
        for folder in (spec.submodule_search_locations or []) if spec else []:
            compileall.compile_dir(folder, quiet=2, workers=1)
