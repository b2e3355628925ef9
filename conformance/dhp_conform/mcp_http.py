"""The MCP profile over streamable HTTP: one server per scenario, started by the kit.

A server command template with `{port}` is an HTTP server. The kit picks a free port (on
`{host}`, default 127.0.0.1), starts the command once per scenario, and waits until the port
accepts connections; every agent and kit session of the scenario then speaks streamable
HTTP to `http://HOST:PORT/mcp`. That is the whole contract: listen on the port you are given,
at the path /mcp, within the kit's timeout. The other placeholders are filled when present:

  {data} the scenario's folder    {ttl} the lease length     {schema} a fresh name per scenario
  {host} the address to bind      {agent_timeout} DHP-MCP-020's agent timeout (--agent-timeout)
  {token_file} a file of two bearer tokens, one per line (DHP-SEC-009's principals)
  {read_timeout} seconds (DHP-SEC-008)    {max_sessions_per_address} a cap (DHP-SEC-007)

What a scenario's processes need to reach its server (the URL, a token, the client mode, the
filled placeholders) is written to `scenario.json` in the scenario's folder, which the bridge
agents read at `init`; over stdio it holds the placeholders only.
"""

from __future__ import annotations

import json
import secrets
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

from .process import AdapterError

PARAMS = "scenario.json"
DEFAULTS = {"host": "127.0.0.1", "read_timeout": 30.0, "max_sessions_per_address": 64}


def is_http(template: list[str]) -> bool:
    return any("{port}" in part for part in template)


def fill(template: list[str], values: dict[str, Any]) -> list[str]:
    """The command with every known placeholder replaced (numbers without a useless .0)."""
    out = []
    for part in template:
        for name, value in values.items():
            text = f"{value:g}" if isinstance(value, float) else str(value)
            part = part.replace("{" + name + "}", text)
        out.append(part)
    return out


def free_port(host: str) -> int:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def write_params(data: Path, params: dict) -> None:
    (data / PARAMS).write_text(json.dumps(params, indent=1), encoding="utf-8")


def read_params(data: Path) -> dict | None:
    try:
        return json.loads((data / PARAMS).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None


class Server:
    """One implementation server of a scenario, over streamable HTTP."""

    def __init__(self, argv: list[str], host: str, port: int, log: Path, *,
                 env: dict | None = None, cwd: str | None = None):
        self.argv, self.host, self.port, self.log = argv, host, port, log
        self.env, self.cwd = env, cwd
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        shown = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{shown}:{self.port}/mcp"

    def start(self, timeout: float) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as err:
            try:
                self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL,
                                             stdout=err, stderr=err, env=self.env, cwd=self.cwd)
            except OSError as exc:
                raise AdapterError(f"the MCP server did not start: {self.argv[0]}: "
                                   f"{exc.strerror}") from None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AdapterError(f"the MCP server exited with status {self.proc.returncode} "
                                   f"before listening on {self.url}: {self._tail()}")
            try:
                socket.create_connection((self.host, self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise AdapterError(f"the MCP server did not listen on {self.url} within {timeout:g} s "
                           f"(it must serve the port the kit puts in {{port}}): {self._tail()}")

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def _tail(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-600:].strip() or "(no output)"
        except OSError:
            return "(no log)"


class Servers:
    """The MCP profile's part in every scenario: fill the placeholders, and over HTTP start
    the scenario's server (Harness.prepare)."""

    def __init__(self, template: list[str], *, agent_timeout: float, timeout: float,
                 env: dict | None = None, cwd: str | None = None):
        self.template, self.agent_timeout, self.timeout = template, agent_timeout, timeout
        self.env, self.cwd = env, cwd
        self.http = is_http(template)
        self.run_id = secrets.token_hex(4)
        self.tokens = [secrets.token_hex(16), secrets.token_hex(16)]

    def has(self, name: str) -> bool:
        return any("{" + name + "}" in part for part in self.template)

    def prepare(self, sc: Any, overrides: dict | None = None) -> None:
        number = sc.name.split("-", 1)[0]
        values: dict[str, Any] = {**DEFAULTS, "data": sc.data, "ttl": float(sc.ttl),
                                  "schema": f"conform_{self.run_id}_{number}",
                                  "agent_timeout": float(self.agent_timeout)}
        values.update(overrides or {})
        params: dict[str, Any] = {"mode": values.pop("mode", "legacy")}
        if self.has("token_file"):
            path = sc.data / "tokens.txt"
            path.write_text("\n".join(self.tokens) + "\n", encoding="utf-8")
            values["token_file"] = path
            params["token"] = self.tokens[0]
        if self.http:
            values["port"] = free_port(values["host"])
            server = Server(fill(self.template, values), values["host"], values["port"],
                            sc.harness.workdir / "stderr" / sc.name / "mcp-server.log",
                            env=self.env, cwd=self.cwd)
            sc.server = server
            server.start(self.timeout)
            params["url"] = server.url
        params["values"] = {k: str(v) if isinstance(v, Path) else v for k, v in values.items()}
        sc.params = params
        write_params(sc.data, params)
