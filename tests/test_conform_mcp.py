"""`dhp-conform --profile mcp` certifies dhp-mcp through real MCP client sessions with zero
findings: the binding's checks, the lifecycle and fencing through bridge agents, and the kill -9
soak (8 agents in the default suite; the issue's 20 agents, 20 handoffs, 15 killed with
DHP_SLOW=1, about five minutes on a loaded 2-core machine). Over stdio, and over streamable
HTTP (`{port}` in the command: one server per scenario, agents as separate processes holding
HTTP sessions) on a folder and on a Postgres store, where the kit also judges the agent-death
bound (DHP-MCP-020/021) and the server bar (DHP-SEC-006..009)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mcp", reason="the MCP profile needs the mcp extra: pip install "
                                  "'durable-handoff[mcp]'")

SERVER = f"{sys.executable} -m dhp.agents.mcp_cli --root {{data}} --create --ttl {{ttl}}"
# Over HTTP: every placeholder the kit fills, so every HTTP check can run (mcp_http).
HTTP = ("--http {host}:{port} --agent-timeout {agent_timeout} --read-timeout {read_timeout} "
        "--max-sessions-per-address {max_sessions_per_address} --token-file {token_file}")
HTTP_SERVER = f"{SERVER} {HTTP}"


REPO = Path(__file__).resolve().parent.parent

# Planted bugs in dhp-mcp (file under reference/dhp, old text, new text), the check that
# reaches each, and the requirement the kit must name.
MUTANTS = [
    {"name": "no-server-heartbeats", "file": "agents/mcp_tools.py",
     "old": 'api.claim(s.store, a["handoff_id"], a["worker_id"], ttl=a.get("ttl"))',
     "new": 'api.claim(s.store, a["handoff_id"], a["worker_id"], ttl=a.get("ttl"), '
            'heartbeat_interval=0)',
     "only": "DHP-MCP-006"},
    {"name": "token-valid-in-any-session", "file": "agents/mcp_sessions.py",
     "old": "incarnation=liveness.token() if liveness is not None else None, **kwargs)",
     "new": "incarnation=None, **kwargs)",
     "only": "DHP-MCP-009"},
    {"name": "list-not-paged", "file": "agents/mcp_tools.py",
     "old": 'limit=a.get("limit", LIST_LIMIT), after=a.get("cursor"))',
     "new": 'limit=None, after=a.get("cursor"))',
     "only": "DHP-MCP-012"},
    {"name": "no-id-prefixes", "file": "agents/mcp_tools.py",
     "old": 'if "handoff_id" in args:  # a unique prefix names the handoff, as in the CLI',
     "new": 'if False:',
     "only": "DHP-MCP-013"},
    {"name": "retried-complete-refused", "file": "agents/mcp_tools.py",
     "old": "if stored is not None:  # a retry whose first answer was lost (DHP-MCP-014)",
     "new": "if False:",
     "only": "DHP-MCP-014"},
    # Over HTTP: a killed agent's event stream closing is not noticed (its session lives on
    # until the session timeout), and the Host check lets any name reach a loopback server.
    {"name": "stream-close-ignored", "file": "agents/mcp_cli.py",
     "old": "await asyncio.to_thread(table.stream_closed, key)",
     "new": "pass", "only": "DHP-MCP-021", "server": HTTP_SERVER},
    {"name": "any-host-on-loopback", "file": "transport/http_guard.py",
     "old": "return loopback(name)", "new": "return True",
     "only": "DHP-SEC-006", "server": HTTP_SERVER},
]


def conform(tmp_path, *args: str, pythonpath: Path | None = None,
            server: str = SERVER) -> tuple[int, dict, str]:
    report = tmp_path / "report.json"
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(pythonpath), env.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, "-m", "dhp_conform", "--profile", "mcp", "--impl",
                           server, "--report", str(report), "--history",
                           str(tmp_path / "run"), "--seed", "14", *args],
                          capture_output=True, text=True, timeout=1800, env=env)
    data = json.loads(report.read_text()) if report.exists() else {}
    return proc.returncode, data, proc.stdout + proc.stderr


def failures(report: dict) -> list[str]:
    return [f"{r['requirement']} {r['check']}: {r.get('reason')}"
            for r in report.get("results", []) if r["status"] in ("FAIL", "WARN")]


@pytest.mark.covers("DHP-MCP-001", "DHP-MCP-002", "DHP-MCP-003", "DHP-MCP-004", "DHP-MCP-005",
                    "DHP-MCP-006", "DHP-MCP-007", "DHP-MCP-008", "DHP-MCP-009", "DHP-MCP-012",
                    "DHP-MCP-013", "DHP-MCP-014")
def test_dhp_mcp_is_certified_with_zero_findings(tmp_path):
    code, report, output = conform(tmp_path, "--quick")
    assert code == 0 and not failures(report), output[-4000:]
    verdicts = {name: v["verdict"] for name, v in report["verdicts"].items()}
    assert verdicts == {"mcp-server": "PASS"}
    checks = {r["check"] for r in report["results"]}
    assert {"mcp:tools", "mcp:errors", "mcp:lease-token", "mcp:session-heartbeat",
            "mcp:session-end", "mcp:soak-kill9", "fencing:killed-owner", "mcp:pages-prefixes",
            "mcp:complete-retry"} <= checks
    assert "fencing:recovery-time" not in checks  # a timing claim: bench/mcp_bench.py
    assert "mcp soak: 8/8 handoffs completed by 8 agents, 6 killed" in output


@pytest.mark.skipif(os.environ.get("DHP_SLOW") != "1",
                    reason="the full MCP soak (20 agents, 15 killed) is slow: set DHP_SLOW=1")
def test_soak_twenty_agents_three_in_four_killed(tmp_path):
    code, report, output = conform(tmp_path, "--suite", "mcp")
    assert code == 0 and not failures(report), output[-4000:]
    assert "mcp soak: 20/20 handoffs completed by 20 agents, 15 killed" in output


def http_server(backend: str, request) -> str:
    """The HTTP server command on a folder (`{data}`) or on a fresh schema per scenario of
    the test session's Postgres schemas (dropped when the session ends)."""
    if backend == "sqlite":
        return HTTP_SERVER
    schemas = request.getfixturevalue("postgres_schemas")
    root = schemas.url_for(schemas.prefix + "_{schema}")
    return f"{sys.executable} -m dhp.agents.mcp_cli --root {root} --create --ttl {{ttl}} {HTTP}"


@pytest.mark.covers("DHP-MCP-020", "DHP-MCP-021", "DHP-SEC-006", "DHP-SEC-007", "DHP-SEC-008",
                    "DHP-SEC-009")
def test_dhp_mcp_over_http_is_certified_on_either_store(tmp_path, backend, request):
    """The profile over streamable HTTP: on a folder every check of the quick run, on
    Postgres the binding's own suite (session rules, agent death, server bar and the kill -9
    soak of 8 agents, 6 killed): zero findings, nothing lost, no double owner."""
    server = http_server(backend, request)
    narrow = ["--suite", "mcp"] if backend == "postgres" else []
    code, report, output = conform(tmp_path, "--quick", *narrow, server=server)
    assert code == 0 and not failures(report), output[-4000:]
    checks = {r["check"] for r in report["results"]}
    assert {"mcp:agent-death-stream", "mcp:agent-death-stateless", "mcp:http-host",
            "mcp:http-origin", "mcp:http-body-limit", "mcp:http-read-timeout",
            "mcp:http-session-cap", "mcp:http-principal", "mcp:soak-kill9"} <= checks
    skipped = {r["requirement"] for r in report["results"] if r["status"] == "SKIP"}
    assert skipped == {"DHP-MCP-010"}  # the stdio transport: a stdio run's to judge
    assert "mcp soak: 8/8 handoffs completed by 8 agents, 6 killed" in output


@pytest.mark.skipif(os.environ.get("DHP_SLOW") != "1",
                    reason="the full MCP soak (20 agents, 15 killed) is slow: set DHP_SLOW=1")
def test_soak_twenty_agents_over_http_on_either_store(tmp_path, backend, request):
    code, report, output = conform(tmp_path, "--suite", "mcp",
                                   server=http_server(backend, request))
    assert code == 0 and not failures(report), output[-4000:]
    assert "mcp soak: 20/20 handoffs completed by 20 agents, 15 killed" in output


def test_the_profile_refuses_without_a_server_command(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "dhp_conform", "--profile", "mcp"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "--impl" in proc.stderr


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m["name"] for m in MUTANTS])
@pytest.mark.covers("DHP-MCP-006", "DHP-MCP-009", "DHP-MCP-012", "DHP-MCP-013", "DHP-MCP-014",
                    "DHP-MCP-021", "DHP-SEC-006")
def test_planted_bug_in_the_server_is_caught(tmp_path, mutant):
    copy = tmp_path / "mutant"
    shutil.copytree(REPO / "reference" / "dhp", copy / "dhp")
    target = copy / "dhp" / mutant["file"]
    text = target.read_text()
    assert text.count(mutant["old"]) == 1, f"{mutant['name']}: update the patched text"
    target.write_text(text.replace(mutant["old"], mutant["new"]))
    code, report, output = conform(tmp_path, "--suite", "mcp", "--only", mutant["only"],
                                   pythonpath=copy, server=mutant.get("server", SERVER))
    failed = {r for v in report.get("verdicts", {}).values() for r in v["failed_requirements"]}
    assert code == 1 and mutant["only"] in failed, output[-3000:]
