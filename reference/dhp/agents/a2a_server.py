"""`dhp-a2a`: an A2A server (official `a2a-sdk`, JSON-RPC over HTTP) whose tasks are handoffs.

A message whose data part holds `{task_kind, inputs, output_schema[, budget]}` dispatches a
handoff; ordinary DHP workers do the work under leases and checkpoints; the A2A task follows
the handoff through every takeover with the same task id. The bridge holds no lease: it only
dispatches, reads status and cancels. The binding is described in spec/a2a.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import sys
from collections.abc import AsyncGenerator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from a2a.helpers.proto_helpers import get_data_parts
from a2a.server.context import ServerCallContext
from a2a.server.request_handlers import RequestHandler
from a2a.server.routes import create_agent_card_routes
from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentExtension,
    AgentInterface,
    AgentSkill,
    HTTPAuthSecurityScheme,
    ListTasksResponse,
    Task,
    TaskArtifactUpdateEvent,
    TaskStatusUpdateEvent,
)
from a2a.utils.constants import PROTOCOL_VERSION_CURRENT
from a2a.utils.errors import (
    InvalidParamsError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from starlette.applications import Starlette

import dhp
from dhp.agents.a2a_tasks import TERMINAL, TaskMap, plain_json, task_of
from dhp.agents.a2a_wire import Principal, StrictBodies, invalid, jsonrpc_routes, principal_of
from dhp.core.schemas import json_path, user_schema_validator
from dhp.observe import otel_env
from dhp.transport import http_guard, http_serve

TOKEN_ENV = "DHP_A2A_TOKEN"

SKILLS_EXTENSION = "urn:dhp:a2a:skills:1.0"  # the card's extension carrying input/output schemas
BEARER = "bearer"          # the card's security scheme when tokens are configured
POLL_S = 0.05              # how often a waiting request reads the handoff's status
STREAM_POLL_S = 0.2        # how often a stream reads it (many streams: kept cheap)
CHECKPOINT_UPDATE_S = 0.5  # at most one checkpoint-only status update per stream this often
# A stream with nothing new repeats the current status this often (DHP-ATOA-003): the official
# client's httpx.AsyncClient() reads with httpx's default 5 s timeout and gives up on a
# quieter stream (A2AClientTimeoutError).
KEEPALIVE_S = 2.0
STREAM_THREADS = 2         # threads reading status for streams: requests keep the others
INTENT_MEMBERS = {"task_kind", "inputs", "output_schema", "budget"}


class DHPRequestHandler(RequestHandler):
    """Every A2A method answered from the DHP store; the SDK does the JSON-RPC and SSE. Every
    method sees only the caller's own tasks unless the caller holds an operator token
    (DHP-ATOA-001): another's task id is answered as unknown."""

    def __init__(self, store: Any, tasks: TaskMap, skills: dict[str, dict]):
        self.store, self.tasks, self.skills = store, tasks, skills
        self._streams = ThreadPoolExecutor(STREAM_THREADS, thread_name_prefix="dhp-a2a-stream")

    # --- reading a task -----------------------------------------------------------------------

    def _task_sync(self, task_id: str, who: Principal) -> tuple[Task, dict]:
        found = self.tasks.lookup(task_id, None if who.operator else who.name)
        if found is None:
            raise TaskNotFoundError(f"no task {task_id!r} on this agent")
        handoff_id, context_id = found
        status = dhp.status(self.store, handoff_id)
        result = dhp.result(self.store, handoff_id) if status["state"] == "completed" else None
        return task_of(task_id, context_id, status, result), status

    async def _task(self, task_id: str, who: Principal, streaming: bool = False
                    ) -> tuple[Task, dict]:
        pool = self._streams if streaming else None
        return await asyncio.get_running_loop().run_in_executor(
            pool, self._task_sync, task_id, who)

    async def on_get_task(self, params, context: ServerCallContext) -> Task | None:
        return (await self._task(params.id, principal_of(context)))[0]

    async def on_list_tasks(self, params, context: ServerCallContext) -> ListTasksResponse:
        who = principal_of(context)
        if params.page_token and not params.page_token.isdigit():
            raise invalid(dhp.InvalidInput(f"pageToken {params.page_token[:40]!r} is not one "
                                           "this agent gave out (a nextPageToken)",
                                           requirement="DHP-ATOA-005"))
        offset = int(params.page_token or 0)
        size = min(max(params.page_size, 0) or 50, 100)
        rows = await asyncio.to_thread(self.tasks.page, None if who.operator else who.name,
                                       params.context_id, offset, size + 1)
        tasks = [(await self._task(task_id, who))[0] for task_id, _, _ in rows[:size]]
        if params.status:
            tasks = [t for t in tasks if t.status.state == params.status]
        more = str(offset + size) if len(rows) > size else ""
        return ListTasksResponse(tasks=tasks, next_page_token=more, page_size=size)

    # --- sending a message: dispatch ----------------------------------------------------------

    def _intent(self, message, who: Principal) -> dict:
        if message.task_id:
            if self.tasks.lookup(message.task_id, None if who.operator else who.name) is None:
                raise TaskNotFoundError(f"no task {message.task_id!r} on this agent")
            raise InvalidParamsError(
                f"invalid_input: task {message.task_id} takes no further input: a DHP "
                "handoff's intent is fixed when it is dispatched; send a new message without a "
                "task id")
        data = [plain_json(d) for d in get_data_parts(message.parts)]
        intents = [d for d in data if isinstance(d, dict) and "task_kind" in d]
        if len(intents) != 1:
            found = (f"found {len(intents)} data parts with task_kind" if intents else
                     "the data part has no task_kind member" if data else
                     "the message has no data part")
            raise invalid(dhp.InvalidInput(
                "a message to a DHP agent needs exactly one data part holding "
                f"{{task_kind, inputs, output_schema[, budget]}}; {found}",
                requirement="DHP-ATOA-005"))
        intent = intents[0]
        extra = set(intent) - INTENT_MEMBERS
        if extra:
            raise invalid(dhp.InvalidInput(f"unknown member(s) {sorted(extra)} in the data "
                                           f"part; allowed: {sorted(INTENT_MEMBERS)}"))
        kind = intent["task_kind"]
        skill = self.skills.get(kind) if isinstance(kind, str) else None
        if self.skills and skill is None:
            raise invalid(dhp.InvalidInput(f"unknown task_kind {kind!r}: this agent accepts "
                                           f"{', '.join(sorted(self.skills))}"))
        if "output_schema" not in intent and skill and "output_schema" in skill:
            intent["output_schema"] = skill["output_schema"]
        for member in ("inputs", "output_schema"):
            if not isinstance(intent.get(member), dict):
                raise invalid(dhp.InvalidInput(f"the data part's {member!r} must be a JSON "
                                               "object"))
        if skill and "input_schema" in skill:
            problem = next(user_schema_validator(skill["input_schema"])
                           .iter_errors(intent["inputs"]), None)
            if problem is not None:
                raise invalid(dhp.InvalidInput(
                    f"inputs for {kind!r} do not match the skill's input schema at "
                    f"{json_path(problem)}: {problem.message}"))
        return intent

    def _dispatch_sync(self, message, who: Principal) -> str:
        intent = self._intent(message, who)
        try:
            handoff_id = dhp.dispatch(self.store, intent["task_kind"], intent["inputs"],
                                      intent["output_schema"], intent.get("budget"))
        except dhp.InvalidInput as e:
            raise invalid(e) from e
        task_id, _ = self.tasks.bind(handoff_id, who.name, message.context_id or None)
        return task_id

    async def on_message_send(self, params, context: ServerCallContext) -> Task:
        who = principal_of(context)
        task_id = await asyncio.to_thread(self._dispatch_sync, params.message, who)
        if params.configuration.return_immediately:
            return (await self._task(task_id, who))[0]
        async for task, status in self._watch(task_id, who, POLL_S):
            if status["state"] in TERMINAL:
                return task
        raise AssertionError("unreachable: _watch ends only at a terminal state")

    async def on_message_send_stream(self, params, context: ServerCallContext
                                     ) -> AsyncGenerator[Any]:
        who = principal_of(context)
        task_id = await asyncio.to_thread(self._dispatch_sync, params.message, who)
        async for event in self._stream(task_id, who):
            yield event

    async def on_subscribe_to_task(self, params, context: ServerCallContext
                                   ) -> AsyncGenerator[Any]:
        async for event in self._stream(params.id, principal_of(context)):
            yield event

    # --- following a handoff ------------------------------------------------------------------

    async def _watch(self, task_id: str, who: Principal, poll_s: float,
                     keepalive_s: float | None = None) -> AsyncGenerator[tuple[Task, dict]]:
        """(task, status) every time the handoff's owner, fence, state or chain moved, and
        every keepalive_s while nothing did; ends after the terminal state."""
        loop = asyncio.get_running_loop()
        seen, said = None, 0.0
        while True:
            task, status = await self._task(task_id, who, streaming=keepalive_s is not None)
            mark = (status["state"], status["owner"], status["fence"],
                    status["checkpoints"]["count"])
            now = loop.time()
            if mark != seen or keepalive_s is not None and now - said >= keepalive_s:
                seen, said = mark, now
                yield task, status
            if status["state"] in TERMINAL:
                return
            await asyncio.sleep(poll_s)

    async def _stream(self, task_id: str, who: Principal) -> AsyncGenerator[Any]:
        """The task first, then a status update per claim, recover and state change (and per
        checkpoint, at most every CHECKPOINT_UPDATE_S), the result artifact, the final state;
        while nothing changes, the current status again every KEEPALIVE_S (DHP-ATOA-003)."""
        loop = asyncio.get_running_loop()
        first, last_sent, last_mark = True, 0.0, None
        async for task, status in self._watch(task_id, who, STREAM_POLL_S, KEEPALIVE_S):
            mark = (status["state"], status["owner"], status["fence"])
            now = loop.time()
            if first:
                first, last_sent, last_mark = False, now, mark
                yield task
                if status["state"] not in TERMINAL:
                    continue
            elif (mark == last_mark and status["state"] not in TERMINAL
                  and now - last_sent < min(CHECKPOINT_UPDATE_S, KEEPALIVE_S)):
                continue  # a checkpoint only: rate-limited
            last_sent, last_mark = now, mark
            if status["state"] == "completed":
                yield TaskArtifactUpdateEvent(task_id=task.id, context_id=task.context_id,
                                              artifact=task.artifacts[0], last_chunk=True)
            yield TaskStatusUpdateEvent(task_id=task.id, context_id=task.context_id,
                                        status=task.status, metadata=task.metadata)

    # --- cancel ---------------------------------------------------------------------------------

    def _cancel_sync(self, task_id: str, who: Principal) -> Task:
        task, status = self._task_sync(task_id, who)
        if status["state"] in ("completed", "dead_lettered"):
            raise TaskNotCancelableError(f"task {task_id} is {status['state']}; only live work "
                                         "can be cancelled")
        if not who.operator and self.tasks.others(status["handoff_id"], who.name):
            raise TaskNotCancelableError(
                f"task {task_id}'s handoff was also sent by another client (the same intent); "
                "only an operator may cancel shared work (DHP-ATOA-002)")
        dhp.cancel(self.store, status["handoff_id"])  # the worker learns at its next write
        return self._task_sync(task_id, who)[0]

    async def on_cancel_task(self, params, context: ServerCallContext) -> Task | None:
        return await asyncio.to_thread(self._cancel_sync, params.id, principal_of(context))

    # --- what the bridge does not offer -------------------------------------------------------

    async def on_create_task_push_notification_config(self, params, context):
        raise UnsupportedOperationError("push notifications are not offered; poll or stream")

    on_get_task_push_notification_config = on_create_task_push_notification_config
    on_list_task_push_notification_configs = on_create_task_push_notification_config
    on_delete_task_push_notification_config = on_create_task_push_notification_config

    async def on_get_extended_agent_card(self, params, context):
        raise UnsupportedOperationError("this agent has no extended card")


def agent_card(url: str, skills: dict[str, dict], bearer: bool = False) -> AgentCard:
    """The card: one skill per accepted task kind; the schemas ride in a DHP extension (an
    A2A skill has no schema fields). With tokens configured it declares an HTTP bearer
    security scheme and requires it (DHP-ATOA-001), so the SDK's AuthInterceptor sends it."""
    listed = skills or {"*": {"description": "any task kind: the data part names it"}}
    card = AgentCard(
        name="DHP durable handoff bridge",
        description="Tasks survive the death of the agent doing them: each task is a DHP "
                    "handoff done by DHP workers under leases, checkpoints and fencing.",
        supported_interfaces=[AgentInterface(url=url, protocol_binding="JSONRPC",
                                             protocol_version=PROTOCOL_VERSION_CURRENT)],
        version=dhp.__version__,
        capabilities=AgentCapabilities(streaming=True, push_notifications=False),
        default_input_modes=["application/json"],
        default_output_modes=["application/json"],
        skills=[AgentSkill(id=kind, name=kind, tags=["dhp"],
                           description=spec.get("description", f"DHP task kind {kind}"),
                           input_modes=["application/json"], output_modes=["application/json"])
                for kind, spec in sorted(listed.items())])
    extension = AgentExtension(uri=SKILLS_EXTENSION, required=False,
                               description="input and output JSON Schemas of each skill")
    extension.params.update({kind: {k: v for k, v in spec.items() if k.endswith("_schema")}
                             for kind, spec in skills.items()})
    card.capabilities.extensions.append(extension)
    if bearer:
        card.security_schemes[BEARER].http_auth_security_scheme.CopyFrom(HTTPAuthSecurityScheme(
            scheme="Bearer", description="a token the operator of this agent gave you; "
                                         "each token is its own principal"))
        card.security_requirements.add().schemes[BEARER].SetInParent()
    return card


def build_app(store: Any, tasks: TaskMap, url: str, skills: dict[str, dict],
              bearer: bool = False) -> Starlette:
    handler = DHPRequestHandler(store, tasks, skills)
    routes = [*create_agent_card_routes(agent_card(url, skills, bearer)),
              *jsonrpc_routes(handler, rpc_url="/")]
    return Starlette(routes=routes)


def load_skills(path: str | None) -> dict[str, dict]:
    """`{kind: {description?, input_schema?, output_schema?}}` from a JSON file, or {}."""
    if path is None:
        return {}
    try:
        skills = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise dhp.InvalidInput(f"--skills {path}: {e}") from e
    if not isinstance(skills, dict) or not all(isinstance(v, dict) for v in skills.values()):
        raise dhp.InvalidInput(f"--skills {path}: expected an object of task kind -> "
                               "{description, input_schema, output_schema}")
    for kind, spec in skills.items():
        for name in ("input_schema", "output_schema"):
            if name in spec:
                try:
                    user_schema_validator(spec[name])
                except dhp.InvalidInput as e:
                    raise dhp.InvalidInput(f"--skills {path}: {kind}.{name}: {e}") from None
    return skills


def _parser() -> argparse.ArgumentParser:
    from dhp.core.exit_codes import EXIT_MEANINGS, epilog

    p = argparse.ArgumentParser(
        prog="dhp-a2a", description="An A2A server whose tasks are DHP handoffs. Off loopback "
                                    f"a token is required: {TOKEN_ENV}=... or --token-file F.",
        epilog=epilog(["dhp-a2a --store ./data --bind 127.0.0.1:8470 --skills skills.json",
                       "dhp-a2a --store 'postgresql://dhp@db/jobs?schema=dhp' "
                       "--tasks-db ./a2a-tasks.sqlite3 --create"],
                      {**EXIT_MEANINGS, 0: "stopped (SIGTERM or SIGINT)"}),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--store", "--root", dest="store", required=True, metavar="PATH",
                   help="the store: a folder (SQLite) or a postgresql:// URL; it must exist "
                        "(`dhp init`) unless --create")
    p.add_argument("--create", action="store_true",
                   help="create the store if there is none (default: refuse a missing store)")
    p.add_argument("--bind", default="127.0.0.1:8470",
                   help="HOST:PORT to listen on (default 127.0.0.1:8470; port 0 picks one)")
    p.add_argument("--skills", help="JSON file: task kind -> {description, input_schema, "
                                    "output_schema}; without it any task kind is accepted")
    p.add_argument("--tasks-db", help="the A2A task map (SQLite file); default "
                                      "STORE/a2a-tasks.sqlite3 for a folder store")
    http_guard.add_access_options(p, TOKEN_ENV)
    http_guard.add_limit_options(p)
    return p


def _listen(bind: str) -> socket.socket:
    host, _, port = bind.rpartition(":")
    host = host.strip("[]")
    if not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise dhp.InvalidInput(f"--bind {bind!r}: give HOST:PORT with a port in 0..65535")
    sock = socket.create_server((host, int(port)),
                                family=socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.set_inheritable(True)
    return sock


def main(argv: list[str] | None = None) -> int:
    from dhp.core.exit_codes import exit_code

    args = _parser().parse_args(argv)
    try:
        skills = load_skills(args.skills)
        if args.tasks_db is None and "://" in args.store:
            raise dhp.InvalidInput("--tasks-db is needed when --store is a URL")
        host = args.bind.rpartition(":")[0].strip("[]")
        # before anything is opened: off loopback without a token is refused (DHP-SEC-009)
        access = http_guard.access_from(args, host, TOKEN_ENV, "dhp-a2a")
        otel_env.configure("dhp-a2a")  # exporters from OTEL_* variables, if set
        sock = _listen(args.bind)
        store = dhp.Store(args.store, create=args.create)
        tasks = TaskMap(args.tasks_db or Path(args.store) / "a2a-tasks.sqlite3")
    except (dhp.DHPError, OSError) as e:
        print(f"dhp-a2a: error: {e}", file=sys.stderr)
        return exit_code(e) if isinstance(e, dhp.DHPError) else 2
    limits = http_guard.limits_from(args)
    bound = sock.getsockname()
    shown = f"[{bound[0]}]" if ":" in bound[0] else bound[0]
    url = f"http://{shown}:{bound[1]}/"
    print(f"dhp-a2a: serving {url} (agent card at {url}.well-known/agent-card.json"
          f"{'; bearer token required' if access.needs_token else ''})",
          file=sys.stderr, flush=True)
    app = StrictBodies(build_app(store, tasks, url, skills, bearer=access.needs_token))
    http_serve.serve(app, sock, access, limits)
    return 0


if __name__ == "__main__":
    sys.exit(main())
