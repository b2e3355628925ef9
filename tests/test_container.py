"""The container image and the compose stack (deploy/, tools/container_image.sh), for real:
build the images with podman, start the stack (Postgres, two supervisors, two workers, the
dashboard, dhp-mcp over HTTP), dispatch work, SIGKILL a worker container and see every
handoff complete exactly once (the killed one's taken over from its checkpoint, visible on the
dashboard from the host), SIGKILL the leading supervisor and see the other lead, stop a busy
worker with `podman stop` and see it drain (tini passes SIGTERM on), and stop the stack.

Needs root, podman, runc, debootstrap (for the base image, once) and podman-compose: without
them a skip, a failure when DHP_REQUIRE_CONTAINERS=1 (as in CI). About 45 s with the images
cached (podman keeps them between runs); on a new machine tools/container_image.sh first makes
them from nothing, about 90 s more (bench/README.md). Not behind DHP_SLOW for that reason.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
PROJECT = "dhptest"   # its own compose project: a user's `dhp` stack is left alone
ENV = {**os.environ, "CONTAINERS_CONF": os.environ.get("CONTAINERS_CONF",
                                                       str(DEPLOY / "containers.conf"))}


def missing() -> str | None:
    for tool in ("podman", "runc"):
        if not shutil.which(tool):
            return f"{tool} is not installed (apt-get install -y podman runc debootstrap)"
    if importlib.util.find_spec("podman_compose") is None:
        return "podman-compose is not installed (pip install podman-compose)"
    if os.geteuid() != 0:
        return "the container test runs podman as root"
    base = subprocess.run(["podman", "image", "exists", "localhost/dhp-base:bookworm"], env=ENV)
    if base.returncode != 0 and not shutil.which("debootstrap"):
        return "no base image and no debootstrap (apt-get install -y debootstrap)"
    return None


def podman(*args: str, check: bool = True, timeout: float = 120) -> str:
    proc = subprocess.run(["podman", *args], env=ENV, capture_output=True, text=True,
                          timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"podman {' '.join(args)}: exit {proc.returncode}\n{proc.stderr}")
    return proc.stdout


def compose(*args: str, env: dict, timeout: float = 300) -> None:
    cmd = [sys.executable, "-m", "podman_compose", "-p", PROJECT, "-f",
           str(DEPLOY / "compose.yaml"), *args]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{' '.join(cmd)}: exit {proc.returncode}\n{proc.stderr[-3000:]}"


def logs(name: str) -> str:
    """A container's output, stdout and stderr (where the DHP commands log) together."""
    proc = subprocess.run(["podman", "logs", f"{PROJECT}_{name}"], env=ENV, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
    return proc.stdout


def wait_for(what: str, pred, timeout: float, every: float = 1.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def in_stack(script: str, container: str = "supervisor-1_1", timeout: float = 300) -> dict:
    """Run Python in a stack container (it has the store's URL and tasks.py); its last line
    of stdout is JSON."""
    out = podman("exec", f"{PROJECT}_{container}", "python3", "-c", script, timeout=timeout)
    return json.loads(out.strip().splitlines()[-1])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(url: str, token: str | None = None, data: bytes | None = None,
         headers: dict | None = None) -> tuple[int, bytes]:
    req = urllib.request.Request(url, data=data, headers=dict(headers or {}))
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


@pytest.fixture(scope="module")
def stack():
    why = missing()
    if why:
        if os.environ.get("DHP_REQUIRE_CONTAINERS") == "1":
            pytest.fail(f"DHP_REQUIRE_CONTAINERS=1 but {why}")
        pytest.skip(why)
    build = subprocess.run(["bash", str(ROOT / "tools" / "container_image.sh")],
                           env={**ENV, "PYTHON": sys.executable}, capture_output=True,
                           text=True, timeout=1200)
    assert build.returncode == 0, f"tools/container_image.sh failed:\n{build.stderr[-4000:]}"
    # Host networking: every server on 127.0.0.1, on free ports (beside a user's stack on the
    # default 55432, 8480 and 8471, and the host's own PostgreSQL on 5432).
    ports = {"DHP_PG_PORT": str(free_port()), "DHP_DASHBOARD_PORT": str(free_port()),
             "DHP_MCP_PORT": str(free_port())}
    env = {**ENV, **ports}
    compose("down", "--remove-orphans", "-v", env=env)   # leftovers of an interrupted run
    try:
        compose("up", "-d", env=env)
        for n in (1, 2):
            wait_for(f"worker {n} to start", lambda n=n: " start " in logs(f"worker_{n}"), 240)
        yield ports
    finally:
        for name in ("worker_1", "worker_2", "supervisor-1_1", "supervisor-2_1"):
            print(f"== {name}\n{logs(name)[-3000:]}", file=sys.stderr)
        compose("down", "--remove-orphans", "-v", env=env)
        left = [n for n in podman("ps", "-a", "--format", "{{.Names}}").split()
                if n.startswith(f"{PROJECT}_")]
        assert not left, f"containers left after podman-compose down: {left}"


DISPATCH = """
import json, os, dhp, tasks
store = dhp.Store(os.environ["DHP_STORE"])
print(json.dumps([tasks.steps.dispatch(store, {"steps": %d, "step_s": %s, "n": i})
                  for i in range(%d)]))
"""

FINISH = """
import json, os, time, dhp
store = dhp.Store(os.environ["DHP_STORE"])
ids = %r
deadline = time.monotonic() + 240
while time.monotonic() < deadline:
    st = [dhp.status(store, h) for h in ids]
    if all(s["state"] == "completed" for s in st):
        break
    time.sleep(0.5)
print(json.dumps({"states": [s["state"] for s in st], "fences": [s["fence"] for s in st],
                  "results": [dhp.result(store, h) if s["state"] == "completed" else None
                              for h, s in zip(ids, st)]}))
"""


def test_the_stack_survives_a_killed_worker_and_a_killed_supervisor(stack):
    ids = in_stack(DISPATCH % (16, 0.25, 6))
    assert len(set(ids)) == 6
    # The moment worker 1 holds work, kill its container outright (the whole pool in it).
    wait_for("worker 1 to take work", lambda: " take " in logs("worker_1"), 60, every=0.2)
    time.sleep(1.0)   # a few checkpoints made
    podman("kill", "--signal", "KILL", f"{PROJECT}_worker_1")
    held = set(re.findall(r" take demo\.steps (sha256:[0-9a-f]{12})", logs("worker_1"))) - set(
        re.findall(r" complete demo\.steps (sha256:[0-9a-f]{12})", logs("worker_1")))
    assert held, "worker 1 was killed holding nothing"

    done = in_stack(FINISH % (ids,))
    assert done["states"] == ["completed"] * 6, done
    assert all(r["steps"] == 16 for r in done["results"])
    # Exactly once: each handoff completed by exactly one worker, across both containers.
    completes = re.findall(r" complete demo\.steps (sha256:[0-9a-f]{12})",
                           logs("worker_1") + logs("worker_2"))
    assert sorted(completes) == sorted(h[:19] for h in ids), completes
    # The killed worker's handoffs: taken over under fence 2 from their checkpoints.
    for hid, fence, result in zip(ids, done["fences"], done["results"], strict=True):
        if hid[:19] in held:
            assert fence == 2 and result["resumed_from"] > 0, (hid, fence, result)

    # The dashboard, on the host's 127.0.0.1, shows the takeover. On loopback reads are open;
    # requeue and cancel need the token in its log.
    base = f"http://127.0.0.1:{stack['DHP_DASHBOARD_PORT']}"
    assert re.search(r"token for requeue and cancel: [\w-]{16,}", logs("dashboard_1"))
    hid = next(h for h in ids if h[:19] in held)
    assert http(f"{base}/api/handoffs/{hid}/cancel", None, b"")[0] == 401
    status, body = http(f"{base}/api/handoffs/{hid}")
    assert status == 200
    timeline = json.loads(body)["timeline"]
    first, second = (next(e for e in timeline if e.get("fence") == f and e.get("worker"))
                     for f in (1, 2))
    assert first["worker"] != second["worker"], timeline
    assert "owner process dead" in second["detail"], timeline

    # dhp-mcp over HTTP: refused without the token made at its first start, served with it.
    mcp = f"http://127.0.0.1:{stack['DHP_MCP_PORT']}/mcp"
    mcp_token = podman("exec", f"{PROJECT}_mcp_1", "cat", "/data/mcp.token").strip()
    hello = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "test", "version": "0"}}}).encode()
    headers = {"Content-Type": "application/json",
               "Accept": "application/json, text/event-stream"}
    assert http(mcp, None, hello, headers)[0] == 401
    assert http(mcp, mcp_token, hello, headers)[0] == 200

    # Every server of the stack listens on 127.0.0.1 only (host networking).
    listening = subprocess.run(["ss", "-Hltn"], capture_output=True, text=True).stdout
    for port in stack.values():
        addrs = {line.split()[3].rsplit(":", 1)[0] for line in listening.splitlines()
                 if line.split()[3].endswith(f":{port}")}
        assert addrs == {"127.0.0.1"}, (port, addrs)

    # Kill the leading supervisor: the other one leads.
    def leads(n: int) -> list[str]:
        return [x for x in logs(f"supervisor-{n}_1").splitlines()
                if x.startswith("{") and json.loads(x)["action"] == "lead"]

    def leader():
        last = [(json.loads(leads(n)[-1])["ts"], n) for n in (1, 2) if leads(n)]
        return max(last)[1] if last else None
    first = wait_for("a supervisor to lead", leader, 60)
    other = 3 - first
    before = len(leads(other))
    podman("kill", "--signal", "KILL", f"{PROJECT}_supervisor-{first}_1")
    wait_for(f"supervisor {other} to take the lead", lambda: len(leads(other)) > before, 60)
    podman("start", f"{PROJECT}_supervisor-{first}_1")   # back, as a follower
    alive = f"supervisor-{other}_1"

    # `podman stop` drains a busy worker: SIGTERM reaches `dhp worker` through tini, the
    # running task finishes or is released, and the container exits 0.
    podman("start", f"{PROJECT}_worker_1")
    (slow,) = in_stack(DISPATCH % (12, 0.5, 1), alive)
    wait_for("a worker to take the slow handoff",
             lambda: f"take demo.steps {slow[:19]}" in logs("worker_1") + logs("worker_2"),
             120, every=0.2)
    holder = 1 if f"take demo.steps {slow[:19]}" in logs("worker_1") else 2
    podman("stop", "-t", "40", f"{PROJECT}_worker_{holder}", timeout=90)
    code = podman("inspect", "--format", "{{.State.ExitCode}}", f"{PROJECT}_worker_{holder}")
    assert code.strip() == "0", logs(f"worker_{holder}")[-2000:]
    assert in_stack(FINISH % ([slow],), alive)["states"] == ["completed"]
