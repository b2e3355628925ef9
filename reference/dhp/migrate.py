"""Carry the work of a `dhp-protocol` 1.3.0 store over to a DHP store (docs/guide/migrating.md).

The original package imports as `dhp` too, so it is never imported: its store is read as
what it is on disk, one SQLite file (`ROOT/dhp.sqlite3`) opened read-only, whose layout is
1.3.0's `dhp/store.py`: `handoffs(hid, envelope_json)` with the whole envelope,
`checkpoints(hid, seq from 0, state_json, state_hash)` and `ownership(hid, holder, fence,
...)` for leases.

Each 1.3 handoff is checked (its id over its spec, its inputs against input_hash, each
checkpoint's state against its state_hash, seqs without gaps), turned into a DHP portable
log (an intent from its kind, inputs, output schema and budget; its checkpoints as a fresh
hash chain; its result when completed) and stored by the same verified, all-or-nothing,
idempotent import as `dhp import`: running it twice changes nothing. What cannot be carried
is said per handoff: leases (a running handoff arrives orphaned, ready to recover), effects,
approvals and capability audits, fences, and failed handoffs unless asked for.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dhp.core.backend import StoreBackend
from dhp.core.chain import checkpoint_and_text, make_result_record
from dhp.core.envelope import envelope_and_text, new_intent
from dhp.core.errors import DHPError, IntegrityError, InvalidInput
from dhp.core.logfile import write_log

DB_FILE = "dhp.sqlite3"
# 1.3 budget names -> DHP budget names (spec/budgets.md).
BUDGET_NAMES = {"max_attempts": "max_attempts", "max_steps": "max_steps",
                "max_spend_usd": "max_spend", "max_wallclock_s": "max_wall_clock_s"}
# The fence every carried checkpoint and result bears: 1.3 records no fence per checkpoint;
# the first take in the DHP store then gets fence 2 and fences out nobody that exists.
FENCE = 1
# 1.3 statuses -> the state the carried handoff arrives in (with checkpoints / without).
STATES = {"pending": ("orphaned", "pending"), "running": ("orphaned", "pending"),
          "suspended": ("orphaned", "pending"), "orphaned": ("orphaned", "pending"),
          "completed": ("completed", "completed"), "failed": ("orphaned", "pending")}


@dataclass
class Carried:
    """What migrate does (or, in a dry run, would do) with one 1.3 handoff."""
    old_id: str
    status: str  # the 1.3 status
    handoff_id: str | None = None  # the DHP id, None when it cannot be carried
    state: str | None = None  # the DHP state it arrives in
    checkpoints: int = 0
    result: bool = False
    action: str = "carry"  # carry, already (held and unchanged), skip, error
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def migrate(store: StoreBackend, root: str | Path, *, dry_run: bool = False,
            include_failed: bool = False) -> list[Carried]:
    """Carry every handoff of the 1.3 store at `root` over to `store`; one Carried each."""
    from dhp import api  # the SDK's import_log and status, at call time (no import cycle)

    out = []
    for old_id, env_text, status, rows, owner in _read(Path(root)):
        item = Carried(old_id, status)
        out.append(item)
        try:
            envelope, records, result = _convert(item, env_text, rows, owner)
        except DHPError as exc:
            item.action = "error"
            item.notes.append(exc.message)
            continue
        if status == "failed" and not include_failed:
            item.action = "skip"
            item.notes.append("failed in 1.3 (not carried; --include-failed carries it as "
                              "work to run again)")
            continue
        held = _held(api, store, item.handoff_id)
        if held is not None and held["checkpoints"] >= len(records) \
                and (result is None or held["state"] == "completed"):
            item.action = "already"
            continue
        if dry_run:
            continue
        with tempfile.TemporaryDirectory(prefix="dhp-migrate-") as tmp:
            path = Path(tmp) / "handoff.jsonl"
            write_log(path, envelope, records, result)
            try:
                api.import_log(store, path)
            except DHPError as exc:
                item.action = "error"
                item.notes.append(f"{exc.code}: {exc.message}")
    return out


def _held(api: Any, store: StoreBackend, hid: str) -> dict | None:
    try:
        status = api.status(store, hid)
    except DHPError:
        return None
    return {"state": status["state"], "checkpoints": len(api.checkpoints(store, hid))}


def _read(root: Path) -> list[tuple[str, str, str, list[tuple], tuple | None]]:
    """(1.3 id, envelope text, status, checkpoint rows, ownership row) of every handoff."""
    path = root / DB_FILE if root.is_dir() else root
    if not path.is_file():
        raise InvalidInput(f"{path}: no dhp-protocol 1.3 store here (it keeps {DB_FILE} in "
                           "its root folder)")
    try:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise InvalidInput(f"{path}: cannot open: {exc}") from None
    try:
        version = conn.execute("SELECT max(version) FROM schema_version").fetchone()[0]
        if version != 3:
            raise InvalidInput(f"{path}: a dhp-protocol store of schema v{version}; this reads "
                               "v3 (dhp-protocol 1.3.0)")
        out = []
        for hid, text in conn.execute("SELECT hid, envelope_json FROM handoffs ORDER BY rowid"):
            rows = conn.execute("SELECT seq, state_json, state_hash FROM checkpoints "
                                "WHERE hid = ? ORDER BY seq", (hid,)).fetchall()
            owner = conn.execute("SELECT holder, fence FROM ownership WHERE hid = ?",
                                 (hid,)).fetchone()
            status = json.loads(text).get("execution", {}).get("status", "?")
            out.append((hid, text, status, rows, owner))
        return out
    except (sqlite3.Error, ValueError, AttributeError) as exc:
        raise InvalidInput(f"{path}: not a readable dhp-protocol 1.3 store: {exc}") from None
    finally:
        conn.close()


def _canonical(obj: Any) -> bytes:
    """1.3's canonical JSON (dhp/envelope.py: sorted keys, no spaces, UTF-8)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False).encode("utf-8")


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _convert(item: Carried, text: str, rows: list[tuple], owner: tuple | None
             ) -> tuple[dict, list[dict], dict | None]:
    """The DHP envelope, checkpoint records and result record of one 1.3 handoff, after
    checking what 1.3 lets be checked."""
    env = json.loads(text)
    spec = {"version": env["version"], "task": env["task"], "contract": env["contract"],
            "provenance": env["provenance"],
            "idempotency_key": env["delivery"]["idempotency_key"]}
    if _sha(_canonical(spec)) != item.old_id:
        raise IntegrityError(f"1.3 handoff {item.old_id}: its envelope does not hash to its id "
                             "(changed in the store)", requirement="DHP-SEC-001")
    task = env["task"]
    if task.get("input_hash") != _sha(_canonical(task.get("inputs", {}))):
        raise IntegrityError(f"1.3 handoff {item.old_id}: its inputs do not match input_hash",
                             requirement="DHP-SEC-001")
    inputs = task["inputs"]
    if isinstance(inputs, dict) and inputs.keys() == {"inline"}:
        inputs = inputs["inline"]  # what 1.3's dhp.dispatch wrapped
        item.notes.append("inputs unwrapped from 1.3's {\"inline\": ...}")
    contract = env["contract"]
    budget = {BUDGET_NAMES[k]: v for k, v in contract.get("budget", {}).items()
              if k in BUDGET_NAMES and v is not None}
    intent = new_intent(task["kind"], inputs, contract["output_schema"], budget)
    envelope, _ = envelope_and_text(intent, env["provenance"].get("created_at"))
    hid = item.handoff_id = envelope["handoff_id"]
    execution = env["execution"]
    records, prev = [], hid
    for i, (seq, state_json, state_hash) in enumerate(rows):
        if seq != i:
            raise IntegrityError(f"1.3 handoff {item.old_id}: checkpoint {i} is missing "
                                 f"(found seq {seq})", requirement="DHP-SEC-001")
        if _sha(state_json.encode()) != state_hash:
            raise IntegrityError(f"1.3 handoff {item.old_id}: checkpoint {seq}'s state does "
                                 "not match its state_hash", requirement="DHP-SEC-001")
        last = i == len(rows) - 1  # 1.3 counts spend per handoff: carried on the last
        spend = execution.get("spend_usd", 0) if last else 0
        record, _ = checkpoint_and_text(hid, i + 1, FENCE, json.loads(state_json), spend, prev)
        records.append(record)
        prev = record["hash"]
    result = None
    if item.status == "completed":
        result = make_result_record(hid, FENCE, env["delivery"]["result"], prev)
    item.state = STATES.get(item.status, ("orphaned", "pending"))[0 if records else 1]
    item.checkpoints, item.result = len(records), result is not None
    if owner is not None and item.status not in ("completed", "failed"):
        item.notes.append(f"lease of {owner[0]} (1.3 fence {owner[1]}) not carried: "
                          f"the handoff arrives {item.state}")
    if execution.get("spend_usd") and not records:
        item.notes.append(f"spend {execution['spend_usd']} not carried (no checkpoint to "
                          "bear it)")
    return envelope, records, result
