"""The A2A bridge (`dhp-a2a`) with the official a2a-sdk client over HTTP on 127.0.0.1, real
processes: one task id followed through a worker's SIGKILL and a standby's recovery to a
schema-valid artifact, polled (the docs' client script) and streamed; cancel; a dead-lettered
handoff as a failed task; the same intent twice is one task; the agent card; bad messages get
A2A errors and store nothing."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("a2a", reason="the A2A bridge needs the `a2a` extra (a2a-sdk)")
pytest.importorskip("uvicorn", reason="dhp-a2a serves with uvicorn (the `a2a` extra)")

import dhp  # noqa: E402
import jsonschema  # noqa: E402
from a2a.client import ClientConfig, create_client  # noqa: E402
from a2a.helpers.proto_helpers import get_data_parts, new_data_part, new_message  # noqa: E402
from a2a.types.a2a_pb2 import (  # noqa: E402
    AgentCard,
    CancelTaskRequest,
    GetTaskRequest,
    Role,
    SendMessageRequest,
    SubscribeToTaskRequest,
    TaskState,
)
from a2a.utils.errors import A2AError  # noqa: E402
from google.protobuf.json_format import ParseDict  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "docs" / "examples"
OUTPUT_SCHEMA = {"type": "object", "required": ["pages", "words"],
                 "properties": {"pages": {"type": "integer"}, "words": {"type": "integer"}}}


def read_line(proc: subprocess.Popen, pattern: str, stream: str = "stdout",
              timeout: float = 60) -> str:
    """The first line of the process's output matching `pattern` (waits for it)."""
    found: list[str] = []
    pipe = getattr(proc, stream)

    def scan():
        for line in pipe:
            if re.search(pattern, line):
                found.append(line)
                return

    reader = threading.Thread(target=scan, daemon=True)
    reader.start()
    reader.join(timeout)
    assert found, f"no line matching {pattern!r} within {timeout} s (exit {proc.poll()})"
    return found[0]


@pytest.fixture(scope="module")
def bridge(tmp_path_factory):
    """One running `dhp-a2a` on port 0 for this module: (url, store folder). Each test uses
    intents of its own; only pages.count handoffs are ever worked on."""
    tmp_path = tmp_path_factory.mktemp("a2a")
    store = tmp_path / "store"
    skills = tmp_path / "skills.json"
    skills.write_text(json.dumps({
        "pages.count": {"description": "count the words of N pages",
                        "input_schema": {"type": "object", "required": ["pages"]},
                        "output_schema": OUTPUT_SCHEMA},
        "slow.thing": {"description": "a task nobody works on in these tests"}}))
    proc = subprocess.Popen([sys.executable, "-m", "dhp.agents.a2a_server", "--store",
                             str(store), "--create", "--bind", "127.0.0.1:0", "--skills",
                             str(skills)],
                            stderr=subprocess.PIPE, text=True)
    try:
        url = re.search(r"http://\S+/", read_line(proc, "serving", "stderr")).group(0)
        yield url, store
    finally:
        proc.terminate()
        proc.wait(30)


def worker(store: Path, name: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(EXAMPLES / "a2a_worker.py"), str(store), name],
                            stdout=subprocess.PIPE, text=True)


def message(intent: dict):
    return SendMessageRequest(message=new_message([new_data_part(intent)], role=Role.ROLE_USER))


async def send(url: str, intent: dict):
    client = await create_client(url, client_config=ClientConfig(streaming=False, polling=True))
    async with client:
        async for response in client.send_message(message(intent)):
            return response.task


async def get(url: str, task_id: str):
    client = await create_client(url, client_config=ClientConfig(streaming=False))
    async with client:
        return await client.get_task(GetTaskRequest(id=task_id))


def pages(n: int) -> dict:
    return {"task_kind": "pages.count", "inputs": {"pages": n}, "output_schema": OUTPUT_SCHEMA}


def test_takeover_keeps_one_task_id_to_a_valid_artifact(bridge):
    """The story: the client polls one task id; worker A is SIGKILLed after its third
    checkpoint; worker B recovers from it and completes; the client sees working ->
    completed with the result as an artifact valid against the output schema."""
    url, store = bridge
    client = subprocess.Popen([sys.executable, str(EXAMPLES / "a2a_client.py"), url, "6"],
                              stdout=subprocess.PIPE, text=True)
    task_id = read_line(client, r"^task \S+ sent").split()[1]
    stream = Streamer(url, task_id)
    stream.subscribed()  # else a slow subscription could miss worker A's whole attempt
    a = worker(store, "worker-a")
    read_line(a, "checkpoint page 3")
    os.kill(a.pid, signal.SIGKILL)
    assert a.wait(30) == -signal.SIGKILL
    b = worker(store, "worker-b")
    took = read_line(b, "took")
    resumed = int(re.search(r"after page (\d+)", took).group(1))
    assert resumed >= 3, took  # rework at most the one page after the last checkpoint
    assert b.wait(60) == 0
    out, _ = client.communicate(timeout=60)
    assert client.returncode == 0, out
    lines = [line for line in out.splitlines() if line.startswith(f"task {task_id}")]
    assert lines[-1].startswith(f"task {task_id}: TASK_STATE_COMPLETED"), out
    assert all(f"task {task_id}" in line for line in lines)
    artifact = json.loads(out.split("artifact result: ", 1)[1])
    jsonschema.validate(artifact, OUTPUT_SCHEMA)
    assert artifact == {"pages": 6, "words": 100 * sum(range(1, 7))}

    task = asyncio.run(get(url, task_id))
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    status = get_data_parts(task.status.message.parts)[0]["dhp_status"]
    assert status["attempts"] == 2 and status["fence"] == 2, status
    assert "attempt 2" in task.status.message.parts[0].text

    events = stream.result()
    assert events[0].HasField("task")
    states = [e.status_update.status.state for e in events if e.HasField("status_update")]
    assert states[-1] == TaskState.TASK_STATE_COMPLETED
    owners = {get_data_parts(e.status_update.status.message.parts)[0]["dhp_status"]["owner"]
              for e in events if e.HasField("status_update")}
    assert {"worker-a", "worker-b"} <= owners, owners  # the stream saw both attempts
    artifacts = [e.artifact_update.artifact for e in events if e.HasField("artifact_update")]
    assert [get_data_parts(a.parts)[0] for a in artifacts] == [artifact]


class Streamer:
    """Subscribes to a task's stream in a thread of its own and keeps every event."""

    def __init__(self, url: str, task_id: str):
        self.events: list = []
        self.error: BaseException | None = None
        self.first = threading.Event()
        self.thread = threading.Thread(target=asyncio.run, args=(self._run(url, task_id),),
                                       daemon=True)
        self.thread.start()

    async def _run(self, url: str, task_id: str):
        try:
            client = await create_client(url, client_config=ClientConfig(streaming=True))
            async with client:
                async for event in client.subscribe(SubscribeToTaskRequest(id=task_id)):
                    self.events.append(event)
                    self.first.set()
        except BaseException as e:  # reported by result()
            self.error = e
        self.first.set()

    def subscribed(self, timeout: float = 60) -> None:
        """Wait for the stream's first event, so that what happens next is streamed."""
        assert self.first.wait(timeout), "the stream sent nothing"
        assert self.error is None, repr(self.error)

    def result(self, timeout: float = 60) -> list:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the stream did not end at the terminal state"
        assert self.error is None, repr(self.error)
        return self.events


def test_streamed_send_follows_the_handoff(bridge):
    url, store = bridge

    async def run():
        client = await create_client(url, client_config=ClientConfig(streaming=True))
        async with client:
            return [e async for e in client.send_message(message(pages(2)))]

    box: list = []
    sender = threading.Thread(target=lambda: box.append(asyncio.run(run())))
    sender.start()
    w = worker(store, "streamed")
    assert w.wait(60) == 0
    sender.join(60)
    events = box[0]
    assert events[0].HasField("task")
    assert events[0].task.status.state == TaskState.TASK_STATE_WORKING
    assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
    assert any(e.HasField("artifact_update") for e in events)


def test_same_intent_twice_is_one_task_and_one_handoff(bridge):
    url, store = bridge
    intent = {"task_kind": "slow.thing", "inputs": {"twice": True},
              "output_schema": {"type": "object"}}
    before = len(dhp.list_handoffs(dhp.Store(store)))
    first = asyncio.run(send(url, intent))
    second = asyncio.run(send(url, intent))
    assert first.id == second.id
    assert first.metadata["dhp_handoff_id"] == second.metadata["dhp_handoff_id"]
    assert len(dhp.list_handoffs(dhp.Store(store))) == before + 1


def test_cancel_through_a2a_reaches_the_handoff(bridge):
    url, store = bridge
    task = asyncio.run(send(url, {"task_kind": "slow.thing", "inputs": {},
                                  "output_schema": {"type": "object"}}))
    hid = task.metadata["dhp_handoff_id"]
    local = dhp.Store(store)
    ctx = dhp.claim(local, hid, worker_id="w")  # a worker is on it

    async def cancel():
        client = await create_client(url, client_config=ClientConfig(streaming=False))
        async with client:
            return await client.cancel_task(CancelTaskRequest(id=task.id))

    assert asyncio.run(cancel()).status.state == TaskState.TASK_STATE_CANCELED
    assert dhp.status(local, hid)["state"] == "cancelled"
    with pytest.raises(dhp.Cancelled):  # the worker learns at its next write
        ctx.checkpoint({"x": 1})


def test_dead_lettered_handoff_is_a_failed_task_with_its_reason(bridge):
    url, store = bridge
    task = asyncio.run(send(url, {"task_kind": "slow.thing", "inputs": {"n": 1},
                                  "output_schema": {"type": "object"},
                                  "budget": {"max_attempts": 1}}))
    local = dhp.Store(store)
    hid = task.metadata["dhp_handoff_id"]
    dhp.claim(local, hid, worker_id="w1", heartbeat_interval=0).release()
    with pytest.raises(dhp.BudgetExceeded):
        dhp.claim(local, hid, worker_id="w2")
    failed = asyncio.run(get(url, task.id))
    assert failed.status.state == TaskState.TASK_STATE_FAILED
    assert "max_attempts" in failed.status.message.parts[0].text


def test_agent_card_lists_the_skills_with_their_schemas(bridge):
    import httpx

    url, _ = bridge
    raw = httpx.get(url + ".well-known/agent-card.json", timeout=30).json()
    card = ParseDict(raw, AgentCard())  # valid against the SDK's own types
    assert {s.id for s in card.skills} == {"pages.count", "slow.thing"}
    assert card.capabilities.streaming
    (extension,) = card.capabilities.extensions
    assert extension.params["pages.count"]["output_schema"]["required"] == ["pages", "words"]


@pytest.mark.parametrize("intent, words", [
    (None, "needs exactly one data part"),
    ({"task_kind": "nope", "inputs": {}, "output_schema": {}}, "unknown task_kind 'nope'"),
    ({"task_kind": "pages.count", "inputs": {"n": 1}}, "input schema"),
    ({"task_kind": "slow.thing", "inputs": {}, "output_schema": {"type": 5}},
     "not a valid JSON Schema"),
    ({"task_kind": "slow.thing", "inputs": [], "output_schema": {}}, "'inputs' must be"),
    ({"task_kind": "slow.thing", "inputs": {}, "output_schema": {}, "x": 1}, "unknown member"),
])
def test_bad_messages_get_a2a_errors_and_store_nothing(bridge, intent, words):
    url, store = bridge

    async def run():
        client = await create_client(url, client_config=ClientConfig(streaming=False,
                                                                     polling=True))
        async with client:
            parts = [new_data_part(intent)] if intent else []
            request = SendMessageRequest(message=new_message(parts, role=Role.ROLE_USER))
            request.message.parts.add(text="please do it")
            async for _ in client.send_message(request):
                pass

    def handoffs():
        return {h["handoff_id"] for h in dhp.list_handoffs(dhp.Store(store))}

    before = handoffs()
    with pytest.raises(A2AError) as err:
        asyncio.run(run())
    assert words in str(err.value), str(err.value)
    assert handoffs() == before


def test_unknown_task_id_is_task_not_found(bridge):
    url, _ = bridge
    with pytest.raises(A2AError, match="no task"):
        asyncio.run(get(url, "no-such-task"))


def test_bad_bind_is_a_clear_usage_error(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "dhp.agents.a2a_server", "--store",
                           str(tmp_path / "s"), "--create", "--bind", "127.0.0.1:99999"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "port in 0..65535" in proc.stderr


# --- issue 22: one server bar, principals, long streams, exact numbers, invalid params ---------

ALICE, BOB, OPERATOR = "alice-token-0123456789", "bob-token-0123456789ab", "operator-0123456789"


def start_bridge(store: str, tasks_db: Path, *extra: str, env: dict | None = None
                 ) -> tuple[subprocess.Popen, str]:
    """A `dhp-a2a` on a free loopback port: (process, url)."""
    proc = subprocess.Popen([sys.executable, "-m", "dhp.agents.a2a_server", "--store", store,
                             "--create", "--tasks-db", str(tasks_db), "--bind", "127.0.0.1:0",
                             *extra],
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})})
    line = read_line(proc, "serving|error", "stderr")
    match = re.search(r"http://\S+/", line)
    assert match, line
    return proc, match.group(0)


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(30)


def rpc(url: str, method: str, params, token: str | None = None, raw: bytes | None = None):
    """One JSON-RPC call with httpx, as any JSON client makes it: the response's JSON."""
    import httpx

    headers = {"A2A-Version": "1.0", "content-type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    body = raw if raw is not None else json.dumps(
        {"jsonrpc": "2.0", "id": 7, "method": method, "params": params}).encode()
    return httpx.post(url, content=body, headers=headers, timeout=30)


def sdk_config(token: str | None = None, streaming: bool = False) -> ClientConfig:
    import httpx

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return ClientConfig(streaming=streaming, polling=not streaming,
                        httpx_client=httpx.AsyncClient(headers=headers))


async def sdk_send(url: str, intent: dict, token: str | None = None):
    client = await create_client(url, client_config=sdk_config(token))
    async with client:
        request = message(intent)
        request.configuration.return_immediately = True
        async for response in client.send_message(request):
            return response.task


async def sdk_call(url: str, token: str | None, method: str, request):
    client = await create_client(url, client_config=sdk_config(token))
    async with client:
        return await getattr(client, method)(request)


@pytest.fixture
def tokens(tmp_path) -> dict[str, Path]:
    users, operators = tmp_path / "tokens", tmp_path / "operators"
    users.write_text(f"# the clients\n{ALICE}\n{BOB}\n")
    operators.write_text(OPERATOR + "\n")
    return {"users": users, "operators": operators}


@pytest.mark.covers("DHP-SEC-009")
def test_off_loopback_without_a_token_is_refused(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "dhp.agents.a2a_server", "--store",
                           str(tmp_path / "s"), "--bind", "0.0.0.0:0"],
                          capture_output=True, text=True, timeout=60,
                          env={k: v for k, v in os.environ.items() if k != "DHP_A2A_TOKEN"})
    assert proc.returncode == 2, proc.stderr
    assert "needs a bearer token" in proc.stderr and "--token-file" in proc.stderr
    assert not (tmp_path / "s").exists()  # refused before anything was opened


@pytest.mark.covers("DHP-SEC-009", "DHP-SEC-006", "DHP-ATOA-001", "DHP-ATOA-002")
def test_tasks_belong_to_the_principal_that_sent_them(tmp_path, tokens):
    import httpx

    store = tmp_path / "store"
    proc, url = start_bridge(str(store), tmp_path / "tasks.db", "--token-file",
                             str(tokens["users"]), "--operator-token-file",
                             str(tokens["operators"]))
    try:
        assert httpx.get(url + ".well-known/agent-card.json").status_code == 401
        assert rpc(url, "GetTask", {"id": "x"}).status_code == 401
        assert rpc(url, "GetTask", {"id": "x"}, token="not-a-token-at-all").status_code == 401
        assert httpx.get(url + ".well-known/agent-card.json", headers={
            "Host": "evil.example", "Authorization": f"Bearer {ALICE}"}).status_code == 403
        card = ParseDict(httpx.get(url + ".well-known/agent-card.json", headers={
            "Authorization": f"Bearer {ALICE}"}).json(), AgentCard())
        (scheme,) = card.security_schemes.values()
        assert scheme.http_auth_security_scheme.scheme.lower() == "bearer"
        assert list(card.security_requirements[0].schemes) == list(card.security_schemes)

        intent = {"task_kind": "slow.thing", "inputs": {"who": "alice"},
                  "output_schema": {"type": "object"}}
        mine = asyncio.run(sdk_send(url, intent, ALICE))
        # Bob: Alice's task does not exist for him, in every method
        for method, request in (("get_task", GetTaskRequest(id=mine.id)),
                                ("cancel_task", CancelTaskRequest(id=mine.id))):
            with pytest.raises(A2AError, match="no task"):
                asyncio.run(sdk_call(url, BOB, method, request))
        listed = rpc(url, "ListTasks", {}, token=BOB).json()["result"]
        assert listed["tasks"] == []
        streamed = rpc(url, "SubscribeToTask", {"id": mine.id}, token=BOB)
        assert "TASK_NOT_FOUND" in streamed.text and "dhp_handoff_id" not in streamed.text
        # Bob sends the same intent: a task of his own for the same handoff, never Alice's id
        his = asyncio.run(sdk_send(url, intent, BOB))
        assert his.id != mine.id
        assert his.metadata["dhp_handoff_id"] == mine.metadata["dhp_handoff_id"]
        with pytest.raises(A2AError, match="another client"):  # shared: only an operator
            asyncio.run(sdk_call(url, BOB, "cancel_task", CancelTaskRequest(id=his.id)))
        # the operator sees and may cancel everyone's tasks
        everyone = rpc(url, "ListTasks", {}, token=OPERATOR).json()["result"]["tasks"]
        assert {t["id"] for t in everyone} == {mine.id, his.id}
        cancelled = asyncio.run(sdk_call(url, OPERATOR, "cancel_task",
                                         CancelTaskRequest(id=mine.id)))
        assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
        assert asyncio.run(sdk_call(url, ALICE, "get_task", GetTaskRequest(id=mine.id))
                           ).status.state == TaskState.TASK_STATE_CANCELED
    finally:
        stop(proc)


def test_a_task_map_of_the_previous_layout_is_migrated(tmp_path):
    import sqlite3

    from dhp.agents.a2a_tasks import TaskMap

    path = tmp_path / "a2a-tasks.sqlite3"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE a2a_tasks (task_id TEXT PRIMARY KEY, handoff_id TEXT NOT NULL "
               "UNIQUE, context_id TEXT NOT NULL, created REAL NOT NULL)")
    db.execute("INSERT INTO a2a_tasks VALUES ('t1', 'sha256:aa', 'c1', 1.0)")
    db.commit()
    db.close()
    tasks = TaskMap(path)
    assert tasks.lookup("t1", "local") == ("sha256:aa", "c1")
    assert tasks.lookup("t1", "token-x") is None
    assert tasks.bind("sha256:aa", "local", None) == ("t1", "c1")
    assert tasks.bind("sha256:aa", "token-x", None)[0] != "t1"
    tasks.close()
    assert TaskMap(path).lookup("t1", None) == ("sha256:aa", "c1")  # migrated once


@pytest.mark.covers("DHP-SEC-008", "DHP-SEC-007")
def test_bodies_and_open_streams_are_bounded(tmp_path):
    import httpx

    proc, url = start_bridge(str(tmp_path / "store"), tmp_path / "tasks.db",
                             "--max-streams-per-address", "2")
    try:
        big = rpc(url, "SendMessage", None, raw=b" " * (5 * 1024 * 1024))
        assert big.status_code == 413 and "max_body" in big.text
        task = asyncio.run(sdk_send(url, {"task_kind": "slow.thing", "inputs": {"cap": 1},
                                          "output_schema": {"type": "object"}}))
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "SubscribeToTask",
                           "params": {"id": task.id}})
        headers = {"A2A-Version": "1.0", "content-type": "application/json"}
        with httpx.Client(timeout=30) as one, httpx.Client(timeout=30) as two:
            with one.stream("POST", url, content=body, headers=headers) as s1, \
                    two.stream("POST", url, content=body, headers=headers) as s2:
                assert s1.status_code == s2.status_code == 200
                third = rpc(url, "GetTask", {"id": task.id})
                assert third.status_code == 429 and "max_streams_per_address" in third.text
            # the streams closed: requests are served again
            assert rpc(url, "GetTask", {"id": task.id}).status_code == 200
    finally:
        stop(proc)


@pytest.mark.covers("DHP-ATOA-005")
@pytest.mark.parametrize("method, params, words", [
    ("SendMessage", b'{"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"data": '
     + b'[' * 100_000 + b']' * 100_000 + b'}]}}', "deeper than"),
    ("SendMessage", b'{"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"data": '
     b'{"task_kind": "slow.thing", "inputs": {"x": NaN}, "output_schema": {}}}]}}',
     "DHP-CJ-006"),
    ("SendMessage", b'{"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"data": '
     b'{"task_kind": "slow.thing", "inputs": {"x": 9007199254740993}, '
     b'"output_schema": {}}}]}}', "DHP-CJ-004"),
    ("SendMessage", b'{"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"data": '
     b'{"inputs": {}, "output_schema": {}}}]}}', "the data part has no task_kind member"),
    ("ListTasks", b'{"pageToken": "not-a-token"}', "pageToken"),
])
def test_bad_input_is_invalid_params_with_the_dhp_code(bridge, method, params, words):
    url, _ = bridge
    raw = (b'{"jsonrpc": "2.0", "id": 3, "method": "' + method.encode() + b'", "params": '
           + params + b'}')
    answer = rpc(url, method, None, raw=raw).json()
    error = answer["error"]
    assert error["code"] == -32602, error
    assert "invalid_input" in json.dumps(error) and words in json.dumps(error), error


@pytest.mark.covers("DHP-ATOA-004")
def test_integers_come_back_as_integers(bridge):
    url, store = bridge
    task = asyncio.run(send(url, {"task_kind": "slow.thing", "inputs": {"ints": 1},
                                  "output_schema": {"type": "object"}}))
    local = dhp.Store(store)
    with dhp.claim(local, task.metadata["dhp_handoff_id"], worker_id="w") as ctx:
        ctx.complete({"pages": 12, "ratio": 0.5, "big": 2 ** 53 - 1, "list": [1, 2.5]})
    wire = rpc(url, "GetTask", {"id": task.id}).json()["result"]
    (artifact,) = wire["artifacts"]
    expected = {"pages": 12, "ratio": 0.5, "big": 2 ** 53 - 1, "list": [1, 2.5]}
    data, text = artifact["parts"]

    def exact(value):  # 12 and 12.0 differ here
        return json.dumps(value, sort_keys=True)

    assert exact(data["data"]) == exact(expected)  # 12, not 12.0, for a JSON client
    assert isinstance(wire["status"]["message"]["parts"][1]["data"]["dhp_status"]["fence"], int)
    assert text["mediaType"] == "application/json"
    sdk_task = asyncio.run(get(url, task.id))  # the SDK's protobuf client: the text part
    assert exact(json.loads(sdk_task.artifacts[0].parts[1].text)) == exact(expected)


@pytest.mark.covers("DHP-ATOA-003")
def test_a_stream_follows_a_task_through_quiet_and_a_worker_kill(store_location, tmp_path):
    """The official SDK streaming client (its default 5 s read timeout) follows one task
    through 20 s with no worker, a worker's SIGKILL mid-task and a standby, to completed;
    then the bridge restarts and a new subscription to the same task id still works."""
    proc, url = start_bridge(store_location, tmp_path / "tasks.db")
    events: list = []
    arrived: list[float] = []
    first = threading.Event()
    failure: list[BaseException] = []

    async def follow():
        client = await create_client(url, client_config=ClientConfig(streaming=True))
        async with client:
            async for event in client.send_message(message(pages(5))):
                events.append(event)
                arrived.append(time.monotonic())
                first.set()

    def run():
        try:
            asyncio.run(follow())
        except BaseException as e:  # reported below
            failure.append(e)
        first.set()

    follower = threading.Thread(target=run, daemon=True)
    started = time.monotonic()
    follower.start()
    try:
        assert first.wait(30) and not failure, failure  # the first event, before any worker
        time.sleep(20)  # nobody works on it: only keepalives
        assert follower.is_alive() and not failure, failure
        a = worker(store_location, "worker-a")
        read_line(a, "checkpoint page 2")
        os.kill(a.pid, signal.SIGKILL)
        assert a.wait(30) == -signal.SIGKILL
        b = worker(store_location, "worker-b")
        assert b.wait(60) == 0
        follower.join(60)
        assert not follower.is_alive() and not failure, failure
        gaps = [b - a for a, b in zip([started, *arrived[:-1]], arrived, strict=True)]
        print(f"first event after {arrived[0] - started:.2f} s; longest quiet {max(gaps):.2f} s")
        assert events[0].HasField("task")
        updates = [e.status_update for e in events if e.HasField("status_update")]
        assert updates[-1].status.state == TaskState.TASK_STATE_COMPLETED
        owners = {get_data_parts(u.status.message.parts)[0]["dhp_status"]["owner"]
                  for u in updates}
        assert {"worker-a", "worker-b"} <= owners, owners
        task_id = events[0].task.id
        assert {u.task_id for u in updates} == {task_id}
        # the bridge restarts; a subscription to the same task id still answers
        stop(proc)
        proc, url = start_bridge(store_location, tmp_path / "tasks.db")
        again = Streamer(url, task_id).result()
        assert again[0].task.id == task_id
        assert again[0].task.status.state == TaskState.TASK_STATE_COMPLETED
    finally:
        stop(proc)
