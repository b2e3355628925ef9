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
    artifact = json.loads(out.split("artifact result: ", 1)[1].replace("'", '"'))
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
