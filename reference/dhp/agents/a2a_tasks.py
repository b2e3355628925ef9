"""A2A tasks seen through DHP: where an A2A task id lives, and what the task looks like.

The handoff is the truth. The only thing the bridge keeps of its own is the mapping from an
A2A task id to a handoff id (and the task's context id), in a small SQLite file beside the
store: never in the envelope, whose hash is the handoff's identity. Every `Task` a client sees
is built afresh from the handoff's status, so it can never drift from the store.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from a2a.helpers.proto_helpers import new_data_artifact, new_data_part, new_text_part
from a2a.types.a2a_pb2 import Message, Part, Role, Task, TaskState, TaskStatus

from dhp.core.failures import summary
from dhp.transport.http_guard import LOCAL

# DHP state -> A2A task state (docs: the A2A binding page).
A2A_STATE = {
    "pending": TaskState.TASK_STATE_WORKING,
    "claimed": TaskState.TASK_STATE_WORKING,
    "released": TaskState.TASK_STATE_WORKING,
    "orphaned": TaskState.TASK_STATE_WORKING,
    "completed": TaskState.TASK_STATE_COMPLETED,
    "dead_lettered": TaskState.TASK_STATE_FAILED,
    "cancelled": TaskState.TASK_STATE_CANCELED,
}
TERMINAL = {"completed", "dead_lettered", "cancelled"}
HANDOFF_KEY = "dhp_handoff_id"  # in Task.metadata: the handoff behind the task


class TaskMap:
    """A2A task id <-> (handoff id, principal), in SQLite with WAL so several bridge processes
    may share the file. A task belongs to the principal that sent it (DHP-SEC-009): the same
    intent sent again by that principal is the same task, by another principal a task of its
    own bound to the same handoff (so no principal learns another's task id)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None,
                                   timeout=30)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._migrate()

    def _migrate(self) -> None:
        """Create the table, or give a map file of the previous layout (one task per handoff,
        no principal) its principal column: its tasks become the loopback principal's."""
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            columns = [row[1] for row in db.execute("PRAGMA table_info(a2a_tasks)")]
            if columns and "principal" not in columns:
                db.execute("ALTER TABLE a2a_tasks RENAME TO a2a_tasks_v1")
            db.execute(
                "CREATE TABLE IF NOT EXISTS a2a_tasks (task_id TEXT PRIMARY KEY, "
                "handoff_id TEXT NOT NULL, principal TEXT NOT NULL, context_id TEXT NOT NULL, "
                "created REAL NOT NULL, UNIQUE (handoff_id, principal))")
            db.execute("CREATE INDEX IF NOT EXISTS a2a_tasks_by_principal "
                       "ON a2a_tasks (principal, created)")
            if columns and "principal" not in columns:
                db.execute("INSERT INTO a2a_tasks SELECT task_id, handoff_id, ?, context_id, "
                           "created FROM a2a_tasks_v1", (LOCAL,))
                db.execute("DROP TABLE a2a_tasks_v1")
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def bind(self, handoff_id: str, principal: str, context_id: str | None) -> tuple[str, str]:
        """The principal's task of this handoff: the one already bound, or a new one."""
        with self._lock:
            self._db.execute(
                "INSERT OR IGNORE INTO a2a_tasks VALUES (?, ?, ?, ?, ?)",
                (str(uuid.uuid4()), handoff_id, principal, context_id or str(uuid.uuid4()),
                 time.time()))
            task_id, context = self._db.execute(
                "SELECT task_id, context_id FROM a2a_tasks WHERE handoff_id = ? "
                "AND principal = ?", (handoff_id, principal)).fetchone()
        return task_id, context

    def lookup(self, task_id: str, principal: str | None) -> tuple[str, str] | None:
        """(handoff id, context id) of a task of `principal` (None: of anyone), or None."""
        with self._lock:
            row = self._db.execute(
                "SELECT handoff_id, context_id, principal FROM a2a_tasks WHERE task_id = ?",
                (task_id,)).fetchone()
        if row is None or principal is not None and row[2] != principal:
            return None
        return row[0], row[1]

    def others(self, handoff_id: str, principal: str) -> int:
        """How many tasks of other principals are bound to this handoff."""
        with self._lock:
            return self._db.execute(
                "SELECT count(*) FROM a2a_tasks WHERE handoff_id = ? AND principal != ?",
                (handoff_id, principal)).fetchone()[0]

    def page(self, principal: str | None, context_id: str, offset: int,
             limit: int) -> list[tuple[str, str, str]]:
        """(task id, handoff id, context id) of `principal`'s tasks (None: everyone's), oldest
        first, optionally of one context."""
        where, args = [], []
        if principal is not None:
            where.append("principal = ?")
            args.append(principal)
        if context_id:
            where.append("context_id = ?")
            args.append(context_id)
        clause = f"WHERE {' AND '.join(where)}" if where else ""
        with self._lock:
            return self._db.execute(
                f"SELECT task_id, handoff_id, context_id FROM a2a_tasks {clause} "
                "ORDER BY created, task_id LIMIT ? OFFSET ?", [*args, limit, offset]).fetchall()

    def close(self) -> None:
        self._db.close()


def describe(status: dict, reason: str | None) -> str:
    """One sentence for a person: who works on the handoff now and where it stands."""
    seq = status["checkpoints"]["last_seq"]
    at = f"last checkpoint seq {seq}" if seq else "no checkpoint yet"
    attempt, owner, fence = status["attempts"], status["owner"], status["fence"]
    state = status["state"]
    if state == "pending":
        return "waiting for a worker; no checkpoint yet"
    if state == "claimed":
        return f"attempt {attempt}: worker {owner} holds the lease (fence {fence}); {at}"
    if state == "orphaned":
        return (f"attempt {attempt} lost its worker; waiting for a standby to resume from "
                f"the {at}")
    if state == "released":
        return f"released after attempt {attempt}; waiting for the next worker; {at}"
    if state == "completed":
        return f"completed by attempt {attempt} (fence {fence}); {at}"
    if state == "dead_lettered":
        failures = status.get("failures")
        last = f"; last error (attempt {failures[-1]['attempt']}): {summary(failures[-1])}" \
            if failures else ""
        return f"dead-lettered: {reason or status['dlq_reason']}{last}"
    return "cancelled"


def task_of(task_id: str, context_id: str, status: dict, result: Any = None,
            reason: str | None = None) -> Task:
    """The A2A task for a handoff's status; completed tasks carry the result as an artifact."""
    message = Message(role=Role.ROLE_AGENT, message_id=str(uuid.uuid4()), task_id=task_id,
                      context_id=context_id,
                      parts=[new_text_part(describe(status, reason)),
                             new_data_part({"dhp_status": status})])
    state = TaskStatus(state=A2A_STATE[status["state"]], message=message)
    state.timestamp.GetCurrentTime()
    task = Task(id=task_id, context_id=context_id, status=state)
    task.metadata.update({HANDOFF_KEY: status["handoff_id"]})
    if status["state"] == "completed":
        task.artifacts.append(result_artifact(status["handoff_id"], result))
    return task


def result_artifact(handoff_id: str, result: Any):
    """The result record as an artifact; its id is stable so a client sees one artifact. Its
    data part is a protobuf Value, whose numbers are doubles, so it is followed by the same
    result as JSON text (`application/json`): exact, integers included, for any client."""
    artifact = new_data_artifact("result", result, media_type="application/json",
                                 description="the handoff's result, valid against its output "
                                             "schema; the text part is the exact JSON",
                                 artifact_id=f"{handoff_id}/result")
    artifact.parts.append(Part(text=json.dumps(result, ensure_ascii=False,
                                               separators=(",", ":")),
                               media_type="application/json"))
    return artifact


def plain_json(value: Any) -> Any:
    """A value read from a protobuf `Value` with whole numbers back as ints (protobuf keeps
    every number as a double; DHP numbers are I-JSON, so a whole double is an exact int)."""
    if isinstance(value, float) and value.is_integer() and abs(value) <= 2 ** 53:
        return int(value)
    if isinstance(value, dict):
        return {k: plain_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain_json(v) for v in value]
    return value
