"""The MCP binding's tools (spec/mcp.md): names, model-readable descriptions, the argument and
result schemas loaded from schemas/mcp-tools.json, and one function per tool.

Nothing here imports the MCP SDK: `call(session, name, arguments)` is the whole tool layer, so
the server (mcp_server.py) only wraps it in the SDK's types, and a test or benchmark can call it
in-process. A refusal becomes `ToolFailure`, which carries the spec's error object and one
sentence telling the agent what to do next (DHP-MCP-004).
"""

from __future__ import annotations

import copy
import os
import tempfile
from functools import cache
from typing import Any

from dhp import __version__, api
from dhp.agents import mcp_completions
from dhp.agents.mcp_sessions import AgentSession
from dhp.core import operations, schemas
from dhp.core.errors import DHPError, Internal, InvalidInput
from dhp.core.handoff_ids import resolve_id

SCHEMA_FILE = "mcp-tools"
LIST_LIMIT = 50  # handoffs per list page unless the agent asks: its context is precious
IMPLEMENTATION = {"name": "durable-handoff dhp-mcp", "version": __version__}

# What the agent should do after each refusal (DHP-MCP-004).
NEXT_STEP = {
    "invalid_input": "Fix the arguments the message names and call the tool again; nothing "
                     "was changed.",
    "unsupported_version": "This server does not speak that protocol version; nothing was "
                           "changed.",
    "not_found": "Check the handoff_id (the list tool shows the known handoffs); nothing was "
                 "changed.",
    "conflict": "The handoff is not in a state that allows this (the message says why); call "
                "status, and pick other work with claim_next rather than retrying.",
    "lease_lost": "Stop working on this handoff now: your lease was taken over or has ended, "
                  "so nothing you send with it is accepted. Do not retry; move on to other "
                  "work.",
    "cancelled": "Stop working on this handoff: it was cancelled. Discard your work on it.",
    "budget_exceeded": "Stop working on this handoff: its budget is used up and it is in the "
                       "dead-letter queue, where an operator can requeue it.",
    "schema_violation": "Your result does not match the output schema at the paths listed; "
                        "fix them and call complete again. You still hold the lease.",
    "integrity_error": "The stored data failed an integrity check; stop and tell an operator.",
    "unavailable": "The store did not answer; the outcome is unknown. Call status to see "
                   "whether it took effect before you retry.",
    "internal": "The server failed unexpectedly; the outcome is unknown. Call status to see "
                "whether it took effect before you retry.",
}

_LEASE_WORKFLOW = ("Returns a lease token: pass it unchanged as `lease` to heartbeat, "
                   "checkpoint, complete and release. While this session is connected the "
                   "server heartbeats the lease for you, so you may think for minutes between "
                   "calls; if your session ends, another agent can recover the work at once.")

DESCRIPTIONS = {
    "dispatch": "Hand a unit of work to DHP so that it survives any one agent's death. Call it "
                "when work should be done by a worker (possibly another agent) rather than "
                "inline. Returns the handoff_id (a hash of the intent: dispatching the same "
                "task_kind, inputs, output_schema and budget again returns the same id) and "
                "its status.",
    "claim": "Take one pending, released or orphaned handoff by id to work on it. "
             + _LEASE_WORKFLOW + " Also returns the inputs and the last checkpoint's state: "
             "resume from it. Errors: conflict if someone else holds a live lease (use "
             "claim_next for other work).",
    "claim_next": "Take the oldest available handoff of the given task kinds. "
                  + _LEASE_WORKFLOW + " Returns {\"lease\": null} when there is no work.",
    "recover": "Take over a handoff whose previous worker died or whose lease expired, and "
               "resume from its last checkpoint. " + _LEASE_WORKFLOW + " Errors: conflict if "
               "its holder is still alive and within its lease.",
    "heartbeat": "Extend your lease now. Rarely needed: the server heartbeats held leases "
                 "while your session is connected. lease_lost means stop.",
    "checkpoint": "Record your progress as `state` (any JSON). Call it after every step whose "
                  "redoing would cost time or have side effects; another agent resumes from "
                  "the last checkpoint, so put in it everything needed to continue. Returns "
                  "the checkpoint's seq and hash. lease_lost means stop: your work was taken "
                  "over.",
    "complete": "Finish the handoff with its result, which must satisfy the output_schema. "
                "Exactly one completion is ever accepted. schema_violation lists what to fix "
                "(you keep the lease); lease_lost means stop.",
    "release": "Give the handoff back unfinished (for example when you cannot do it), so "
               "another worker can claim it at once. Its checkpoints are kept. If this attempt "
               "failed, say why in `failure` ({type, message}): it is kept for the operator, "
               "and the last allowed attempt sends the handoff to the dead-letter queue.",
    "status": "The status of a handoff: state, owner, fence, attempts, checkpoint count, "
              "lease time left, spend, steps and dead-letter reason.",
    "last_checkpoint": "The state of a handoff's last acknowledged checkpoint (null if none) "
                       "and its seq.",
    "result": "The validated result of a completed handoff. conflict if it has none yet.",
    "cancel": "Cancel a handoff that should no longer be done; its holder learns at its next "
              "write. Idempotent.",
    "list": "List handoffs, newest first, optionally by state and task_kind: a page of at "
            "most `limit` (default 50) status objects and `next_cursor`; pass it as `cursor` "
            "for the next page (null: no more).",
    "dlq": "List the dead-letter queue: handoffs parked because their budget ran out, with "
           "the reason.",
    "requeue": "Move a dead-lettered handoff back to pending with its attempts reset.",
    "health": "Check that the server and its store answer; lists the leases this session "
              "holds and the lease and heartbeat timings.",
}

READ_ONLY = {"status", "last_checkpoint", "result", "list", "dlq", "health"}


class ToolFailure(Exception):
    """A refusal as the tool result says it: the error object and the next step."""

    def __init__(self, error: DHPError):
        super().__init__(str(error))
        self.content = {"error": error.to_dict(), "next_step": NEXT_STEP[error.code]}

    def text(self) -> str:
        err = self.content["error"]
        req = f" ({err['requirement']})" if err.get("requirement") else ""
        return f"{err['code']}{req}: {err['message']}. Next: {self.content['next_step']}"


# --- schemas --------------------------------------------------------------------------------

@cache
def tool_schema(name: str) -> dict:
    """`$defs[name]` of schemas/mcp-tools.json as one self-contained schema document: the
    local definitions it uses are copied under `$defs`, and each other DHP schema it refers
    to is embedded under `$defs` with its `$id` (a 2020-12 compound document), so any client
    resolves it without fetching anything."""
    source = schemas.schema(SCHEMA_FILE)
    out = copy.deepcopy(source["$defs"][name])
    bundled: dict[str, Any] = {}
    pending = list(_refs(out))
    while pending:
        ref = pending.pop()
        if ref.startswith("#/$defs/"):
            key, body = ref[len("#/$defs/"):], source["$defs"][ref[len("#/$defs/"):]]
        elif ref.startswith("urn:dhp:1.0:schema:"):
            stem = ref.split(":")[-1].split("#")[0]
            key, body = f"dhp-{stem}", schemas.schema(stem)
        else:
            continue  # a reference inside an embedded schema, resolved there
        if key not in bundled:
            bundled[key] = copy.deepcopy(body)
            if not ref.startswith("urn:"):
                pending.extend(_refs(bundled[key]))
            else:
                pending.extend(r for r in _refs(bundled[key]) if r.startswith("urn:"))
    if bundled:
        out["$defs"] = bundled
    return out


def _refs(node: Any):
    if isinstance(node, dict):
        if isinstance(node.get("$ref"), str):
            yield node["$ref"]
        for value in node.values():
            yield from _refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _refs(value)


def names() -> list[str]:
    return list(DESCRIPTIONS)


@cache
def _arguments_validator(name: str) -> Any:
    # Built at a tool's first call, not at start: jsonschema (with its format checkers) is
    # not imported before then, so a client's first tools/list comes sooner.
    from jsonschema import Draft202012Validator

    return Draft202012Validator(tool_schema(f"{name}.args"))


def prepare() -> None:
    """Compile every tool's argument validator now (a benchmark's warm-up; the server builds
    each one at its first call)."""
    for name in DESCRIPTIONS:
        _arguments_validator(name)


def check_arguments(name: str, arguments: Any) -> dict:
    """The arguments, or InvalidInput listing every violation of the tool's schema."""
    found = sorted(_arguments_validator(name).iter_errors(arguments if arguments is not None
                                                          else {}),
                   key=lambda e: [str(p) for p in e.absolute_path])
    if found:
        listing = "; ".join(f"{schemas.json_path(e)}: {e.message}" for e in found)
        raise InvalidInput(f"arguments of {name} are not valid: {listing}",
                           requirement="DHP-MCP-003",
                           details=[{"path": schemas.json_path(e), "message": e.message}
                                    for e in found])
    return arguments or {}


# --- the tools ------------------------------------------------------------------------------

def call(session: AgentSession, name: str, arguments: Any) -> dict:
    """Run tool `name`; returns its structured result or raises ToolFailure."""
    try:
        if name not in DESCRIPTIONS:
            raise InvalidInput(f"there is no tool {name!r}; the tools are "
                               f"{', '.join(DESCRIPTIONS)}", requirement="DHP-MCP-001")
        args = check_arguments(name, arguments)
        session.touch()
        if "handoff_id" in args:  # a unique prefix names the handoff, as in the CLI
            args = dict(args, handoff_id=resolve_id(session.store, args["handoff_id"]))
        return _TOOLS[name](session, args)
    except DHPError as exc:
        raise ToolFailure(exc) from None
    except Exception as exc:  # noqa: BLE001 - an agent gets an answer, never a dropped call
        raise ToolFailure(Internal(f"{type(exc).__name__}: {exc}")) from None


def _taken(session: AgentSession, ctx: api.TaskContext | None) -> dict:
    if ctx is None:
        return {"lease": None}
    return {"lease": session.hold(ctx), "task_kind": ctx.intent["task_kind"],
            "inputs": ctx.inputs, "output_schema": ctx.intent["output_schema"],
            "budget": ctx.intent["budget"], "last_checkpoint": ctx.last_checkpoint,
            "last_seq": ctx.last_seq, "heartbeat_interval_s": ctx.heartbeat_interval,
            "ttl_s": ctx.ttl}


def _dispatch(s: AgentSession, a: dict) -> dict:
    hid = api.dispatch(s.store, a["task_kind"], a["inputs"], a["output_schema"],
                       a.get("budget"), a.get("progress_timeout_s"))
    return {"handoff_id": hid, "status": api.status(s.store, hid)}


def _claim(s: AgentSession, a: dict) -> dict:
    return _taken(s, api.claim(s.store, a["handoff_id"], a["worker_id"], ttl=a.get("ttl")))


def _recover(s: AgentSession, a: dict) -> dict:
    return _taken(s, api.recover(s.store, a["handoff_id"], a["worker_id"], ttl=a.get("ttl")))


def _claim_next(s: AgentSession, a: dict) -> dict:
    return _taken(s, api.claim_next(s.store, a["task_kinds"], a["worker_id"], ttl=a.get("ttl")))


def _heartbeat(s: AgentSession, a: dict) -> dict:
    s.write(a["lease"], "heartbeat")
    hid = a["lease"]["handoff_id"]
    return {"lease": a["lease"], "lease_expires_in": api.status(s.store, hid)["lease_expires_in"]}


def _checkpoint(s: AgentSession, a: dict) -> dict:
    record = s.write(a["lease"], "checkpoint", state=a["state"], spend=a.get("spend", 0))
    return {"handoff_id": record["handoff_id"], "seq": record["seq"], "hash": record["hash"]}


def _complete(s: AgentSession, a: dict) -> dict:
    done = {"handoff_id": a["lease"]["handoff_id"], "state": "completed"}
    stored = mcp_completions.stored_if_same(s, a["lease"], a["result"])
    if stored is not None:  # a retry whose first answer was lost (DHP-MCP-014)
        return dict(done, already_completed=True, result=stored["result"])
    s.write(a["lease"], "complete", result=a["result"])
    mcp_completions.remember(s, a["lease"])
    return done


def _release(s: AgentSession, a: dict) -> dict:
    failure = a.get("failure")
    s.write(a["lease"], "release", failure=failure, backoff=failure is not None)
    hid = a["lease"]["handoff_id"]
    return {"handoff_id": hid, "state": api.status(s.store, hid)["state"]
            if failure is not None else "released"}


def _status(s: AgentSession, a: dict) -> dict:
    return api.status(s.store, a["handoff_id"])


def _last_checkpoint(s: AgentSession, a: dict) -> dict:
    last = operations.get_row(s.store, a["handoff_id"])["last_checkpoint"]
    return {"handoff_id": a["handoff_id"], "state": last["state"] if last else None,
            "seq": last["seq"] if last else 0}


def _result(s: AgentSession, a: dict) -> dict:
    return {"handoff_id": a["handoff_id"], "result": api.result(s.store, a["handoff_id"])}


def _cancel(s: AgentSession, a: dict) -> dict:
    api.cancel(s.store, a["handoff_id"])
    return {"status": api.status(s.store, a["handoff_id"])}


def _requeue(s: AgentSession, a: dict) -> dict:
    api.requeue(s.store, a["handoff_id"])
    return {"status": api.status(s.store, a["handoff_id"])}


def _list(s: AgentSession, a: dict) -> dict:
    """One page, newest first (DHP-MCP-012): the store's own paging, so a page costs what its
    size does, whatever the store holds."""
    try:
        page = api.list_handoffs(s.store, a.get("state"), a.get("task_kind"),
                                 limit=a.get("limit", LIST_LIMIT), after=a.get("cursor"))
    except (InvalidInput, OverflowError):
        if a.get("cursor") is None:
            raise
        raise InvalidInput(f"bad cursor {a['cursor']!r}: pass the next_cursor an earlier list "
                           "returned, unchanged, or omit cursor for the first page",
                           requirement="DHP-MCP-012") from None
    return {"handoffs": list(page), "next_cursor": page.cursor}


def _dlq(s: AgentSession, a: dict) -> dict:
    return {"entries": [{"status": {k: v for k, v in e.items()
                                    if k not in ("reason", "envelope")},
                         "reason": e["reason"]} for e in api.dlq(s.store)]}


def _health(s: AgentSession, a: dict) -> dict:
    s.store.now()  # the store answers, or this raises
    return {"ok": True, "dhp": "1.0", "implementation": IMPLEMENTATION,
            "leases_held": s.held(), "ttl_s": s.store.ttl,
            "heartbeat_interval_s": s.store.default_heartbeat_interval}


_TOOLS = {"dispatch": _dispatch, "claim": _claim, "claim_next": _claim_next,
          "recover": _recover, "checkpoint": _checkpoint, "heartbeat": _heartbeat,
          "complete": _complete, "release": _release, "status": _status,
          "last_checkpoint": _last_checkpoint, "result": _result, "cancel": _cancel,
          "list": _list, "dlq": _dlq, "requeue": _requeue, "health": _health}


def exported_log(session: AgentSession, handoff_id: str) -> str:
    """The handoff's portable JSON-lines log (spec: log), as text."""
    fd, path = tempfile.mkstemp(suffix=".jsonl")
    os.close(fd)
    try:
        api.export_log(session.store, handoff_id, path)
        with open(path, encoding="utf-8") as f:
            return f.read()
    finally:
        os.unlink(path)


