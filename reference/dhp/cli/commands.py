"""The runtime subcommands of `dhp`: dispatch, status, ls, result, dlq, cancel, export,
import, supervisor, demo.

Each is a `configure(parser)` and a `run(args, parser) -> exit code` pair; `register(command)`
adds them all to the CLI's registry (cli.py). Tables for people, `--json` for machines (one
JSON document on stdout; on failure `{"error": {code, message, definite, ...}}`).

Every command takes `--store PATH` (default: $DHP_STORE, else ./dhp-data). Only `dispatch`
and `import` create a store; the others say "no DHP store at PATH" instead.

Exit codes:
  0  success
  1  the operation was refused or found nothing: unknown handoff, missing store, illegal in
     the handoff's state (conflict), no result yet, a log that fails verification, ...
     (for `validate`, H3's command: the checked input is invalid)
  2  usage error or bad input: unknown option, malformed handoff id, invalid JSON in an
     argument (the message names the argument), an invalid intent
  3  the store was unavailable or failed; the outcome is unknown (safe to retry)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dhp.core.errors import DHPError, InvalidInput, NotFound, UnsupportedVersion

EXIT_CODES = """exit codes:
  0  success
  1  refused or not found (unknown handoff, missing store, conflict, no result yet,
     a log that fails verification); for `validate`: the checked input is invalid
  2  usage error or bad input (bad option, malformed id, invalid JSON argument)
  3  store unavailable or failed: outcome unknown, safe to retry"""

DEFAULT_STORE = "./dhp-data"
_HID = re.compile(r"^sha256:[0-9a-f]{64}$")


# --- shared plumbing --------------------------------------------------------------------------

def default_store() -> str:
    return os.environ.get("DHP_STORE") or DEFAULT_STORE


def open_store(path: str, *, create: bool = False):
    """Open the store at `path`; unless `create`, refuse (NotFound) when none is there."""
    from dhp.store import Store
    from dhp.store.sqlite import DB_FILE

    if not create and "://" not in path and not (Path(path) / DB_FILE).is_file():
        raise NotFound(f"no DHP store at {path} (pass --store PATH or set DHP_STORE; "
                       "`dhp dispatch` creates one)")
    return Store(path)


def exit_code(exc: DHPError) -> int:
    if isinstance(exc, (InvalidInput, UnsupportedVersion)):
        return 2
    return 1 if exc.definite else 3


def fail(exc: DHPError, prog: str = "dhp", as_json: bool = False) -> int:
    """Report a failure (stderr for people, stdout JSON for machines); the exit code."""
    if as_json:
        print(json.dumps({"error": exc.to_dict()}, ensure_ascii=False))
    print(f"{prog}: error: {exc}", file=sys.stderr)
    return exit_code(exc)


def check_id(text: str) -> str:
    if not _HID.match(text):
        raise InvalidInput(f"bad handoff id {text!r}: expected 'sha256:' followed by 64 "
                           "lowercase hex digits", requirement="DHP-ID-001")
    return text


def json_argument(name: str, text: str) -> Any:
    """Parse a JSON option value, or the file it names with @PATH; errors name the option."""
    from dhp.core.canonical import parse_json

    source = text
    if text.startswith("@"):
        try:
            source = Path(text[1:]).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise InvalidInput(f"{name}: cannot read {text[1:]}: {exc}") from None
    try:
        return parse_json(source)
    except DHPError as exc:
        raise InvalidInput(f"{name}: {exc.message}", requirement=exc.requirement) from None


def table(headers: list[str], rows: list[list[Any]]) -> str:
    """A plain text table, columns padded to their widest cell."""
    cells = [[str(h) for h in headers]] + [["-" if v is None else str(v) for v in r]
                                           for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
                     for r in cells)


def emit(args: argparse.Namespace, obj: Any, text: str) -> None:
    print(json.dumps(obj, ensure_ascii=False, indent=2) if args.json else text)


def _lease(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds:.1f}s" if seconds > 0 else "expired"


def _common(p: argparse.ArgumentParser, *, json_flag: bool = True) -> None:
    p.add_argument("--store", default=None, metavar="PATH",
                   help=f"the store folder (default: $DHP_STORE, else {DEFAULT_STORE})")
    if json_flag:
        p.add_argument("--json", action="store_true", help="one JSON document for machines")
    p.epilog = EXIT_CODES
    p.formatter_class = argparse.RawDescriptionHelpFormatter


def _hid_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("handoff_id", metavar="HANDOFF_ID", help="sha256:<64 hex digits>")


def _runner(fn: Callable[[argparse.Namespace], int], *, create: bool = False):
    """Wrap a command body: open the store, turn typed errors into exit codes."""
    def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
        as_json = getattr(args, "json", False)
        store = None
        try:
            if getattr(args, "handoff_id", None) is not None:
                check_id(args.handoff_id)
            store = open_store(args.store or default_store(), create=create)
            args.store_obj = store
            return fn(args)
        except DHPError as exc:
            return fail(exc, f"dhp {parser.prog.split()[-1]}", as_json)
        finally:
            if store is not None:
                store.close()
    return run


# --- the commands -----------------------------------------------------------------------------

def _dispatch_args(p: argparse.ArgumentParser) -> None:
    _common(p)
    p.add_argument("--kind", required=True, help="the task_kind")
    p.add_argument("--inputs", default="{}", metavar="JSON",
                   help="the inputs object as JSON, or @FILE (default {})")
    p.add_argument("--output-schema", default="{}", metavar="JSON",
                   help="the result's JSON Schema (2020-12) as JSON, or @FILE (default {})")
    p.add_argument("--budget", default="{}", metavar="JSON",
                   help='caps as JSON, e.g. \'{"max_attempts": 3}\', or @FILE (default {})')
    p.add_argument("--progress-timeout", type=float, default=None, metavar="S",
                   help="orphan a claim that has not checkpointed for S seconds")
    p.add_argument("--delay", type=float, default=None, metavar="S",
                   help="let no worker take it for S seconds (a new handoff only)")


def _dispatch(args: argparse.Namespace) -> int:
    from dhp import api

    hid = api.dispatch(args.store_obj, args.kind, json_argument("--inputs", args.inputs),
                       json_argument("--output-schema", args.output_schema),
                       json_argument("--budget", args.budget),
                       progress_timeout_s=args.progress_timeout, delay_s=args.delay)
    emit(args, {"handoff_id": hid}, hid)
    return 0


def _status_args(p: argparse.ArgumentParser) -> None:
    _common(p)
    _hid_arg(p)


def _status(args: argparse.Namespace) -> int:
    from dhp import api

    s = api.status(args.store_obj, args.handoff_id)
    ck = s["checkpoints"]
    rows = [["handoff", s["handoff_id"]], ["state", s["state"]], ["kind", s["task_kind"]],
            ["fence", s["fence"]], ["owner", s["owner"]], ["attempts", s["attempts"]],
            ["checkpoints", f"{ck['count']} (last seq {ck['last_seq'] or '-'})"],
            ["lease", _lease(s["lease_expires_in"])], ["steps", s["steps"]],
            ["spend", s["spend"]], ["dlq reason", s["dlq_reason"]]]
    emit(args, s, table(["FIELD", "VALUE"], rows))
    return 0


def _ls_args(p: argparse.ArgumentParser) -> None:
    from dhp.core.machine import STATES

    _common(p)
    p.add_argument("--state", choices=STATES, default=None, help="only handoffs in this state")
    p.add_argument("--kind", default=None, help="only handoffs of this task_kind")


def _ls_rows(items: list[dict], *, reason: bool = False) -> list[list[Any]]:
    out = []
    for s in items:
        row = [s["handoff_id"], s["state"], s["task_kind"], s["fence"], s["owner"],
               s["attempts"], s["checkpoints"]["count"], _lease(s["lease_expires_in"])]
        out.append(row + [s["dlq_reason"]] if reason else row)
    return out


_LS_HEAD = ["HANDOFF", "STATE", "KIND", "FENCE", "OWNER", "ATTEMPTS", "CKPTS", "LEASE"]


def _ls(args: argparse.Namespace) -> int:
    from dhp import api

    items = api.list_handoffs(args.store_obj, state=args.state, task_kind=args.kind)
    text = table(_LS_HEAD, _ls_rows(items)) if items else "(no handoffs)"
    emit(args, items, text)
    return 0


def _result_args(p: argparse.ArgumentParser) -> None:
    _common(p)
    _hid_arg(p)


def _result(args: argparse.Namespace) -> int:
    from dhp import api

    value = api.result(args.store_obj, args.handoff_id)
    print(json.dumps(value, ensure_ascii=False, indent=None if args.json else 2))
    return 0


def _dlq_args(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="dlq_command", metavar="ACTION", required=True)
    ls = sub.add_parser("ls", help="list the dead-letter queue")
    _common(ls)
    requeue = sub.add_parser("requeue", help="move a dead-lettered handoff back to pending")
    _common(requeue)
    _hid_arg(requeue)
    # --store and --json belong to `ls` / `requeue` (a parent's copy would be overwritten)
    p.epilog = EXIT_CODES
    p.formatter_class = argparse.RawDescriptionHelpFormatter


def _dlq(args: argparse.Namespace) -> int:
    from dhp import api

    if args.dlq_command == "requeue":
        api.requeue(args.store_obj, args.handoff_id)
        emit(args, {"handoff_id": args.handoff_id, "state": "pending"},
             f"requeued {args.handoff_id} (pending, attempts reset)")
        return 0
    items = api.dlq(args.store_obj)
    text = table(_LS_HEAD + ["REASON"], _ls_rows(items, reason=True)) if items \
        else "(the dead-letter queue is empty)"
    emit(args, items, text)
    return 0


def _cancel_args(p: argparse.ArgumentParser) -> None:
    _common(p)
    _hid_arg(p)


def _cancel(args: argparse.Namespace) -> int:
    from dhp import api

    api.cancel(args.store_obj, args.handoff_id)
    emit(args, {"handoff_id": args.handoff_id, "state": "cancelled"},
         f"cancelled {args.handoff_id}")
    return 0


def _export_args(p: argparse.ArgumentParser) -> None:
    _common(p)
    _hid_arg(p)
    p.add_argument("out", metavar="FILE", help="where to write the JSON-lines log")


def _export(args: argparse.Namespace) -> int:
    from dhp import api

    try:
        api.export_log(args.store_obj, args.handoff_id, args.out)
    except OSError as exc:
        raise InvalidInput(f"FILE: cannot write {args.out}: {exc}") from None
    emit(args, {"handoff_id": args.handoff_id, "path": args.out},
         f"wrote the log of {args.handoff_id} to {args.out}")
    return 0


def _import_args(p: argparse.ArgumentParser) -> None:
    _common(p)
    p.add_argument("path", metavar="FILE", help="a JSON-lines log written by `dhp export`")


def _import(args: argparse.Namespace) -> int:
    from dhp import api

    if not Path(args.path).is_file():
        raise InvalidInput(f"FILE: no such file: {args.path}")
    hid = api.import_log(args.store_obj, args.path)
    emit(args, {"handoff_id": hid}, hid)
    return 0


def _supervisor_args(p: argparse.ArgumentParser) -> None:
    from dhp.supervisor import add_arguments

    _common(p, json_flag=False)
    p.add_argument("--id", default=None,
                   help="this supervisor's name (default: HOST-PID)")
    p.add_argument("--seconds", type=float, default=None, metavar="S",
                   help="stop after S seconds (default: run until SIGTERM/SIGINT)")
    add_arguments(p)


def _supervisor(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    import socket

    from dhp.supervisor import run_supervisor

    sid = args.id or f"{socket.gethostname()}-{os.getpid()}"
    try:
        return run_supervisor(args.store or default_store(), sid, args.seconds,
                              once=args.once, interval=args.interval, ttl=args.ttl)
    except DHPError as exc:
        return fail(exc, "dhp supervisor")


def _demo_args(p: argparse.ArgumentParser) -> None:
    from dhp.cli import demo

    demo.add_arguments(p)
    p.epilog = "exit codes:\n  0  GREEN\n  1  RED\n  2  usage error"
    p.formatter_class = argparse.RawDescriptionHelpFormatter


def _demo(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from dhp.cli import demo

    return demo.run(args)


COMMANDS: list[tuple[str, str, Callable, Callable]] = [
    ("dispatch", "store a handoff (idempotent); prints its id", _dispatch_args,
     _runner(_dispatch, create=True)),
    ("status", "show one handoff", _status_args, _runner(_status)),
    ("ls", "list handoffs (filter by --state and --kind)", _ls_args, _runner(_ls)),
    ("result", "print the result of a completed handoff", _result_args, _runner(_result)),
    ("dlq", "the dead-letter queue: `dlq ls`, `dlq requeue ID`", _dlq_args, _runner(_dlq)),
    ("cancel", "cancel a handoff", _cancel_args, _runner(_cancel)),
    ("export", "write a handoff's portable JSON-lines log", _export_args, _runner(_export)),
    ("import", "verify a log and store its handoff, ready to recover", _import_args,
     _runner(_import, create=True)),
    ("supervisor", "run a supervisor (leader-elected) on the store", _supervisor_args,
     _supervisor),
    ("demo", "the kill -9 demo: 60 pages, SIGKILL at page 20, zero refetch", _demo_args,
     _demo),
]


def register(command: Callable) -> None:
    """Add every runtime subcommand through cli.py's `command(name, help, configure)`."""
    from dhp.cli import observe

    for name, help_text, configure, run in COMMANDS + observe.COMMANDS:
        command(name, help_text, configure)(run)
