"""Conformance adapter for dhp-protocol 1.3.0, the original third-party DHP package.

It speaks the kit's adapter protocol (spec/adapter.md, adapter protocol "1") and maps each
request to the original's public API. It runs inside the original's own virtual environment
(the original also imports as `dhp`), where `dhp_conform` is not installed, so it needs only
the standard library and the original package:

    tools/orig_venv.sh                      # creates .venv-orig, prints its python
    dhp-conform --impl '.venv-orig/bin/python conformance/dhp_conform/adapters/dhp_protocol_13.py'

The adapter is a bridge, not a fix: it adds no fencing, validation or bookkeeping the original
lacks, and reports what the original stores and answers as it is. The only translations are of
representation:

- ids: DHP/1.0 writes `sha256:<hex>`, the original a bare `<hex>`; the prefix is added on the
  way out and removed on the way in (an id without it reaches the original unchanged);
- budget key names: `max_spend` -> `max_spend_usd`, `max_wall_clock_s` -> `max_wallclock_s`;
- states: running -> claimed, failed (the original's dead-letter state) -> dead_lettered;
- the lease length: `ttl` becomes the original's heartbeat interval x missed beats (ttl/3 x 3);
- a checkpoint's `spend` and its step are recorded with the original's note_step / note_spend
  before the checkpoint is written (the order of the original's own demo worker).

Operations the original does not have (cancel, requeue, claim_next, progress_timeout_s) are
refused with `invalid_input` saying so, and their features are not claimed in hello.

Options: `--supervisor SECONDS` runs the original's Supervisor3 scan in the background of
every adapter process, as the original's documentation deploys it (off by default: the kit
drives supervisor passes itself with the `supervise` request).
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
import threading
import time
import traceback
from typing import Any

import dhp  # the original package (dhp-protocol 1.3.0), never ours
from dhp.config import DHPConfig
from dhp.core import errors as E
from dhp.runner3 import ORPHANED_HOLDER, Runner3, TaskContext
from dhp.supervisor3 import Supervisor3
from dhp.transport import file as transport

PROTOCOL = "1"
PREFIX = "sha256:"
MISSED = 3  # heartbeats a lease survives: ttl = interval x MISSED
TAKES = ("claim", "recover")
BUDGET_NAMES = {"max_spend": "max_spend_usd", "max_wall_clock_s": "max_wallclock_s"}
STATES = {"pending": "pending", "running": "claimed", "orphaned": "orphaned",
          "completed": "completed", "failed": "dead_lettered"}
DEFINITE = {"invalid_input": True, "not_found": True, "conflict": True, "lease_lost": True,
            "budget_exceeded": True, "schema_violation": True, "integrity_error": True,
            "unavailable": False, "internal": False}


class Refusal(Exception):
    """A refusal decided by the adapter itself (an unsupported operation, a bad request)."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


def unsupported(what: str) -> Refusal:
    return Refusal("invalid_input", f"{what} is not supported by dhp-protocol 1.3.0")


def wire(hid: str) -> str:
    return PREFIX + hid


def native(hid: Any) -> Any:
    return hid[len(PREFIX):] if isinstance(hid, str) and hid.startswith(PREFIX) else hid


def error_of(exc: BaseException, op: str) -> dict:
    """The spec's error object for an exception of the original (DHP-ADP-005)."""
    code = "internal"
    if isinstance(exc, Refusal):
        code = exc.code
    elif isinstance(exc, E.UnknownHandoff):
        code = "not_found"
    elif isinstance(exc, E.ValidationError):
        # complete wraps a result that fails output_schema in ValidationError
        schema = op == "complete" and type(exc.__cause__).__name__ == "EnvelopeError"
        code = "schema_violation" if schema else "invalid_input"
    elif isinstance(exc, E.OwnershipLost):
        code = "conflict" if op in TAKES else "lease_lost"  # a lost compare-and-set
    elif isinstance(exc, E.OwnershipError):  # LeaseLost, FencingError
        code = "lease_lost"
    elif isinstance(exc, E.StateError):
        code = "conflict"
    elif isinstance(exc, E.BudgetExceeded):
        code = "budget_exceeded"
    elif isinstance(exc, E.TamperError):
        code = "integrity_error"
    elif isinstance(exc, E.TransportError):
        code = "invalid_input"
    elif isinstance(exc, sqlite3.OperationalError):
        code = "unavailable"  # e.g. "database is locked": the outcome is unknown
    elif isinstance(exc, KeyError):
        code = "invalid_input"
    message = f"{type(exc).__name__}: {exc}"  # the original's own text, with its class
    if isinstance(exc, Refusal):
        message = str(exc)
    elif isinstance(exc, KeyError):
        message = f"{op}: missing argument {exc}"
    error = {"code": code, "message": message, "definite": DEFINITE[code],
             "details": {"exception": f"{type(exc).__module__}.{type(exc).__name__}"}}
    if code == "internal":
        error["details"]["traceback"] = traceback.format_exc()
    return error


class Adapter:
    def __init__(self, supervisor_scan: float | None = None) -> None:
        self.store: Any = None
        self.cfg = DHPConfig()
        self.heartbeat: float | None = None
        self.contexts: dict[tuple[str, str, int], TaskContext] = {}
        self.supervisor: Supervisor3 | None = None
        self.supervisor_scan = supervisor_scan

    # --- handshake -----------------------------------------------------------------------
    def cmd_hello(self, args: dict) -> dict:
        if PROTOCOL not in (args.get("protocols") or []):
            raise Refusal("invalid_input", f"this adapter speaks adapter protocol {PROTOCOL}, "
                                           f"not any of {args.get('protocols')}")
        return {"protocol": PROTOCOL, "dhp": "1.0",
                "implementation": {"name": "dhp-protocol", "language": "python",
                                   "version": dhp.__version__,
                                   "homepage": "https://pypi.org/project/dhp-protocol/"},
                "classes": ["store", "supervisor"],
                "features": ["export_log", "import_log", "supervise"]}

    def cmd_init(self, args: dict) -> dict:
        if args.get("clock", "real") != "real":
            raise unsupported(f"the {args['clock']!r} clock")
        self.cfg = config(args["ttl"])
        self.heartbeat = args.get("heartbeat_interval")
        self.store = dhp.Store(args["data"], cfg=self.cfg)
        if self.supervisor_scan:
            threading.Thread(target=self._supervise_forever, daemon=True).start()
        return {}

    def _supervise_forever(self) -> None:
        sup = self._supervisor()
        while True:
            sup.scan()  # logs and swallows its own errors
            time.sleep(self.supervisor_scan)

    # --- takes -----------------------------------------------------------------------------
    def runner(self, worker: str, ttl: float | None = None) -> Runner3:
        cfg = config(ttl) if ttl is not None else self.cfg
        return Runner3(self.store.root, runner_id=worker, store=self.store, cfg=cfg)

    def _held(self, ctx: TaskContext, worker: str) -> dict:
        if self.heartbeat:  # a number asks for background heartbeats (DHP-ADP-009)
            ctx.start_heartbeat(self.heartbeat)
        self.contexts[(ctx.hid, worker, ctx.fence)] = ctx
        records = self.store.get_checkpoints(ctx.hid)
        return {"handoff_id": wire(ctx.hid), "worker": worker, "fence": ctx.fence,
                "last_checkpoint": records[-1]["state"] if records else None,
                "last_seq": records[-1]["seq"] if records else None}

    def cmd_claim(self, args: dict) -> dict:
        runner = self.runner(args["worker"], args.get("ttl"))
        return self._held(runner.claim(native(args["handoff_id"])), args["worker"])

    def cmd_recover(self, args: dict) -> dict:
        runner = self.runner(args["worker"], args.get("ttl"))
        return self._held(runner.recover(native(args["handoff_id"])), args["worker"])

    def cmd_claim_next(self, args: dict) -> dict:
        raise unsupported("claim_next (claiming the next pending handoff of a kind)")

    # --- fenced writes: as the given worker with the given fence (DHP-ADP-006) --------------
    def context(self, args: dict) -> TaskContext:
        hid, worker, fence = native(args["handoff_id"]), args["worker"], args["fence"]
        ctx = self.contexts.get((hid, worker, fence))
        return ctx if ctx is not None else TaskContext(self.runner(worker), hid, fence)

    def cmd_heartbeat(self, args: dict) -> dict:
        self.context(args).heartbeat()  # the original keeps the lease length of the take
        return {}

    def cmd_checkpoint(self, args: dict) -> dict:
        ctx, state, spend = self.context(args), args["state"], args.get("spend", 0)
        ctx.note_step(1)
        if spend:
            ctx.note_spend(spend)
        seq = ctx.checkpoint(state)
        row = next((c for c in self.store.get_envelope(ctx.hid)["execution"]["checkpoints"]
                    if c["seq"] == seq), {})
        # the original's checkpoint row as it stores it: no fence, spend, prev or chain hash
        return {"record": {"handoff_id": wire(ctx.hid), "seq": seq, "state": state,
                           "state_hash": row.get("state_hash"), "at": row.get("at")}}

    def cmd_complete(self, args: dict) -> dict:
        self.context(args).complete(args["result"])
        return {"record": None}  # the original keeps no result record

    def cmd_release(self, args: dict) -> dict:
        self.context(args).release()
        return {}

    # --- reads and operator operations -----------------------------------------------------
    def cmd_dispatch(self, args: dict) -> dict:
        if args.get("progress_timeout_s") is not None:
            raise unsupported("a per-handoff progress_timeout_s")
        if "intent" in args:
            # The original dispatches members, not a whole intent (DHP-ADP-021): its members
            # go through as they are; `dhp` and any other member have nowhere to go, and
            # whether the original refuses the result is what the kit judges.
            if not isinstance(args["intent"], dict):
                raise unsupported("an intent that is not a JSON object")
            args = args["intent"]
        budget = args.get("budget")
        if isinstance(budget, dict):
            budget = {BUDGET_NAMES.get(k, k): v for k, v in budget.items()}
        hid = dhp.dispatch(self.store, args["task_kind"], args["inputs"], args["output_schema"],
                           budget=budget, cfg=self.cfg)
        return {"handoff_id": wire(hid)}

    def cmd_status(self, args: dict) -> dict:
        hid = native(args["handoff_id"])
        raw = dhp.status(self.store, hid)  # the original's own summary (and its errors)
        env = self.store.get_envelope(hid)
        ex = env["execution"]
        if raw["status"] not in STATES:
            raise Refusal("internal", f"the original's status {raw['status']!r} has no "
                                      "DHP/1.0 equivalent")
        own = self.store.get_ownership(hid)
        held = own is not None and own["holder"] != ORPHANED_HOLDER
        seqs = [c["seq"] for c in ex["checkpoints"]]
        failed = raw["status"] == "failed"
        return {"handoff_id": wire(hid), "state": STATES[raw["status"]],
                "task_kind": env["task"]["kind"],
                "fence": own["fence"] if own else ex.get("fence", 0),
                "owner": own["holder"] if held else None,
                "attempts": raw["attempt"],
                "checkpoints": {"count": raw["checkpoints"],
                                "last_seq": seqs[-1] if seqs else None},
                "lease_expires_in": own["lease_expires_at"] - time.time() if held else None,
                "spend": raw["spend_usd"], "steps": raw["steps"],
                "dlq_reason": raw.get("error") if failed else None}

    def cmd_last_checkpoint(self, args: dict) -> dict:
        records = self.store.get_checkpoints(native(args["handoff_id"]))
        if not records:
            self.store.get_envelope(native(args["handoff_id"]))  # not_found for unknown ids
            return {"found": False, "state": None, "seq": None}
        return {"found": True, "state": records[-1]["state"], "seq": records[-1]["seq"]}

    def cmd_result(self, args: dict) -> dict:
        raw = dhp.status(self.store, native(args["handoff_id"]))
        if raw["status"] != "completed":
            return {"completed": False, "result": None}
        return {"completed": True, "result": raw["result"]}

    def cmd_cancel(self, args: dict) -> dict:
        raise unsupported("cancel")

    def cmd_requeue(self, args: dict) -> dict:
        raise unsupported("requeue (taking a handoff out of the dead-letter state)")

    def cmd_dlq(self, args: dict) -> dict:
        entries = []
        for hid in self.store.all_hids():
            ex = self.store.get_envelope(hid)["execution"]
            if ex["status"] == "failed":
                entries.append({"handoff_id": wire(hid), "reason": ex.get("error")})
        return {"entries": entries}

    def cmd_export_log(self, args: dict) -> dict:
        """The original's portable log is its transport log: an envelope line, then one line
        per checkpoint. It has no result line."""
        hid, path = native(args["handoff_id"]), args["path"]
        env = self.store.get_envelope(hid)
        if os.path.exists(path):
            os.remove(path)  # ship_envelope leaves an existing file as it is
        transport.ship_envelope(path, env, self.cfg)
        for record in self.store.get_checkpoints(hid):
            transport.ship_checkpoint(path, record["seq"], record["state"], self.cfg)
        return {"path": path}

    def cmd_import_log(self, args: dict) -> dict:
        runner = self.runner("import")
        return {"handoff_id": wire(transport.ingest_log(runner, args["path"],
                                                        self.cfg)["handoff_id"])}

    def _supervisor(self) -> Supervisor3:
        if self.supervisor is None:
            self.supervisor = Supervisor3(self.store.root, cfg=self.cfg)
        return self.supervisor

    def cmd_supervise(self, args: dict) -> dict:
        """One pass of the original's Supervisor3, one candidate per process (DHP-ADP-015):
        only the elected leader scans; a follower's pass does nothing."""
        sup = self._supervisor()
        actions = sup.scan()
        return {"orphaned": [wire(a["hid"]) for a in actions if a.get("action") == "orphaned"],
                "leader": sup.is_leader,
                "dead_lettered": [wire(a["hid"]) for a in actions
                                  if a.get("action") in ("dlq", "budget-killed")]}

    def cmd_advance_clock(self, args: dict) -> dict:
        raise unsupported("a manual store clock (it reads the wall clock, time.time())")

    # --- the loop --------------------------------------------------------------------------
    def handle(self, line: str) -> dict:
        try:
            request = json.loads(line)  # as leniently as the original parses JSON
            rid, op, args = request["id"], request["op"], request.get("args") or {}
        except (ValueError, KeyError, TypeError) as exc:
            refusal = Refusal("invalid_input", f"not a request line ({exc}): {line[:200]!r}")
            return {"id": 0, "ok": False, "error": error_of(refusal, "?")}
        command = getattr(self, f"cmd_{op}", None) if isinstance(op, str) else None
        try:
            if command is None:
                raise Refusal("invalid_input", f"unknown op {op!r}")
            if self.store is None and op not in ("hello", "init"):
                raise Refusal("invalid_input", f"{op} before init")
            return {"id": rid, "ok": True, "data": command(args)}
        except Exception as exc:  # every failure is answered; the adapter stays up
            if not isinstance(exc, (E.DHPError, Refusal)):
                traceback.print_exc(file=sys.stderr)
            return {"id": rid, "ok": False, "error": error_of(exc, op)}


def config(ttl: float) -> DHPConfig:
    """The original's lease is interval x missed beats; pick them so that it equals ttl."""
    return DHPConfig(lease_interval_s=ttl / MISSED, lease_max_missed=MISSED)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--supervisor", type=float, metavar="SECONDS",
                        help="run the original's supervisor scan every SECONDS in the background")
    options = parser.parse_args(argv)
    out = sys.stdout
    sys.stdout = sys.stderr  # anything the original prints must not reach the protocol stream
    adapter = Adapter(options.supervisor)
    for line in sys.stdin:
        if not line.strip():
            continue
        response = adapter.handle(line)
        out.write(json.dumps(response, default=repr) + "\n")  # ASCII: lone surrogates too
        out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
