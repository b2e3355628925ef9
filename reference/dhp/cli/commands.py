"""The runtime subcommands of `dhp`: init, dispatch, status, ls, result, dlq, cancel, check,
export, import, supervisor, demo.

Each is a `configure(parser)` and a `run(args, parser) -> exit code` pair; `register(command)`
adds them all to the CLI's registry (cli.py). Tables for people, `--json` for machines (one
JSON document on stdout; on failure `{"error": {code, message, definite, ...}}`).

Every command takes `--store PATH` (default: $DHP_STORE, else ./dhp-data) and `--json`,
before or after the subcommand. Only `init`, `dispatch` and `import` create a store (the
long-running commands only with `--create`), and only once their input is accepted, never
with missing parent folders unless `--parents` asks; the others say "no DHP store at PATH"
(not_found, exit 1) and how to create one, so a mistyped location never becomes a new empty
store. A handoff id may be given by a unique prefix of at
least 4 hex digits (`dhp status 3fa9c1`), as git takes commits.

Exit codes: see EXIT_CODES (the family every DHP command's --help shows).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dhp.core.errors import DHPError, Internal, InvalidInput
from dhp.core.exit_codes import EXIT_MEANINGS, epilog, exit_code
from dhp.core.handoff_ids import MIN_PREFIX, check_id, resolve_id  # noqa: F401 - re-exported

__all__ = ["EXIT_CODES", "EXIT_MEANINGS", "epilog", "exit_code", "open_store", "fail"]


EXIT_CODES = epilog(["dhp dispatch --kind pages.fetch --inputs '{\"n\": 60}'", "dhp ls",
                     "dhp status 3fa9c1"])

DEFAULT_STORE = "./dhp-data"
STORE_HELP = ("the store: a folder (SQLite) or a postgresql://USER@HOST/DB?schema=NAME URL "
              f"(default: $DHP_STORE, else {DEFAULT_STORE})")


# --- shared plumbing --------------------------------------------------------------------------

def default_store() -> str:
    return os.environ.get("DHP_STORE") or DEFAULT_STORE


def open_store(path: str, *, create: bool = False, parents: bool = False,
               parents_flag: str | None = "--parents"):
    """Open the store at `path`. Unless `create`, refuse (NotFound, naming how to create one)
    when none is there; with `create`, refuse a folder whose parent is missing unless
    `parents`. `parents_flag` is the option of the calling command that sets `parents`
    (None: it has none), so the message never suggests a flag the command lacks."""
    from dhp.store import Store

    folder = Path(path)
    if create and "://" not in path and not folder.exists() and not folder.parent.is_dir() \
            and not parents:
        how = f"create it, or pass {parents_flag}" if parents_flag else \
            f"create it, or run `dhp init --store {path} --parents`"
        raise InvalidInput(f"cannot create the store {path}: its parent folder "
                           f"{folder.parent} does not exist ({how})")
    return Store(path, create=create)


def fail(exc: DHPError, prog: str = "dhp", as_json: bool = False) -> int:
    """Report a failure (stderr for people, stdout JSON for machines); the exit code."""
    if as_json:
        print(json.dumps({"error": exc.to_dict()}, ensure_ascii=False))
    print(f"{prog}: error: {exc}", file=sys.stderr)
    return exit_code(exc)


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


def to_json(obj: Any, indent: int | None = 2) -> str:
    """JSON text for --json output; never the non-JSON `Infinity`/`NaN` (a store written before
    the spend limit may hold them), which is an error instead."""
    try:
        return json.dumps(obj, ensure_ascii=False, indent=indent, allow_nan=False)
    except ValueError:
        raise Internal("the store holds a number that is not finite (written before DHP-LIM-005 "
                       "was enforced); it cannot be printed as JSON",
                       requirement="DHP-LIM-005") from None


def emit(args: argparse.Namespace, obj: Any, text: str) -> None:
    print(to_json(obj) if args.json else text)


def _lease(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds:.1f}s" if seconds > 0 else "expired"


def global_options(p: argparse.ArgumentParser, *, json_flag: bool = True,
                   default: Any = None) -> None:
    """--store (and --json): on `dhp` itself with real defaults, and again on each
    subcommand with `default=SUPPRESS`, so that either place works and a subcommand's
    parser never overwrites what was given before it."""
    p.add_argument("--store", default=default, metavar="PATH", help=STORE_HELP)
    if json_flag:
        p.add_argument("--json", action="store_true", default=default if default is not None
                       else False, help="one JSON document for machines")


def _common(p: argparse.ArgumentParser, *, json_flag: bool = True) -> None:
    global_options(p, json_flag=json_flag, default=argparse.SUPPRESS)
    p.formatter_class = argparse.RawDescriptionHelpFormatter


def _parents(p: argparse.ArgumentParser) -> None:
    p.add_argument("--parents", action="store_true",
                   help="create the store's missing parent folders too (like mkdir -p)")


def add_create(p: argparse.ArgumentParser) -> None:
    """`--create` (and `--parents`) of a long-running command, which otherwise refuses a
    missing store."""
    p.add_argument("--create", action="store_true",
                   help="create the store if there is none (default: refuse a missing store, "
                        "so a mistyped location is an error)")
    _parents(p)


def _hid_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("handoff_id", metavar="HANDOFF_ID",
                   help="sha256:<64 hex digits>, or a unique prefix of at least 4 digits")


class _Store:
    """The command's store, opened on first use, so a command can check its input before a
    store is created."""

    def __init__(self, args: argparse.Namespace, create: bool):
        self.args, self.create, self.store = args, create, None

    def __call__(self) -> Any:
        if self.store is None:
            self.store = open_store(self.args.store or default_store(), create=self.create,
                                    parents=getattr(self.args, "parents", False))
        return self.store


def _runner(fn: Callable[[argparse.Namespace], int], *, create: bool = False):
    """Wrap a command body: give it `args.open_store()`, resolve a handoff id (prefix) once
    the store is open, turn typed errors into exit codes."""
    def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
        as_json = getattr(args, "json", False)
        opener = _Store(args, create)
        args.open_store = opener
        try:
            if getattr(args, "handoff_id", None) is not None:
                check_id(args.handoff_id)
                args.handoff_id = resolve_id(opener(), args.handoff_id)
            return fn(args)
        except DHPError as exc:
            return fail(exc, f"dhp {parser.prog.split(maxsplit=1)[-1]}", as_json)
        finally:
            if opener.store is not None:
                opener.store.close()
    return run


# --- the commands -----------------------------------------------------------------------------

def _init_args(p: argparse.ArgumentParser) -> None:
    _common(p)
    _parents(p)


def _init(args: argparse.Namespace) -> int:
    from dhp.store import Store

    location = args.store or default_store()
    try:
        Store(location, create=False).close()
        created = False
    except DHPError as exc:
        if exc.code != "not_found":
            raise
        args.open_store()
        created = True
    emit(args, {"store": location, "created": created},
         f"{'created' if created else 'already there:'} the DHP store {location}")
    return 0


def _dispatch_args(p: argparse.ArgumentParser) -> None:
    _common(p)
    _parents(p)
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
    from dhp.core.envelope import check_intent, new_intent

    intent = new_intent(args.kind, json_argument("--inputs", args.inputs),
                        json_argument("--output-schema", args.output_schema),
                        json_argument("--budget", args.budget))
    check_intent(intent)  # before the store exists: a refused dispatch creates nothing
    hid = api.dispatch(args.open_store(), intent["task_kind"], intent["inputs"],
                       intent["output_schema"], intent["budget"],
                       progress_timeout_s=args.progress_timeout, delay_s=args.delay)
    emit(args, {"handoff_id": hid}, hid)
    return 0


def _status_args(p: argparse.ArgumentParser) -> None:
    _common(p)
    _hid_arg(p)


def _status(args: argparse.Namespace) -> int:
    from dhp import api

    s = api.status(args.open_store(), args.handoff_id)
    ck = s["checkpoints"]
    rows = [["handoff", s["handoff_id"]], ["state", s["state"]], ["kind", s["task_kind"]],
            ["fence", s["fence"]], ["owner", s["owner"]], ["attempts", s["attempts"]],
            ["checkpoints", f"{ck['count']} (last seq {ck['last_seq'] or '-'})"],
            ["lease", _lease(s["lease_expires_in"])], ["steps", s["steps"]],
            ["spend", s["spend"]], ["dlq reason", s["dlq_reason"]]]
    rows += [["failure", _failure_line(f)] for f in s.get("failures", [])]  # newest last
    emit(args, s, table(["FIELD", "VALUE"], rows))
    return 0


def _failure_line(failure: dict) -> str:
    from dhp.core.failures import summary

    return (f"attempt {failure['attempt']} (fence {failure['fence']}, {failure['worker']}, "
            f"{failure['age_s']:.0f}s ago): {summary(failure)}")


LS_DEFAULT_LIMIT = 50


def _ls_args(p: argparse.ArgumentParser) -> None:
    from dhp.core.machine import STATES

    _common(p)
    p.add_argument("--state", choices=STATES, default=None, help="only handoffs in this state")
    p.add_argument("--kind", default=None, help="only handoffs of this task_kind")
    p.add_argument("--limit", type=_positive_int, default=LS_DEFAULT_LIMIT, metavar="N",
                   help=f"at most N handoffs, newest first (default {LS_DEFAULT_LIMIT})")
    p.add_argument("--after", default=None, metavar="CURSOR",
                   help="continue after the page that printed this cursor")
    p.add_argument("--all", action="store_true", help="every handoff (streamed; no --limit)")
    p.add_argument("--wide", action="store_true",
                   help="full ids, kinds and owners (default: fits 100 columns)")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, not {text!r}")
    return value


# (header, width in the 100-column view or None: as wide as the widest cell)
_LS_COLUMNS = [("ID", 12), ("STATE", 13), ("KIND", 20), ("FENCE", 5), ("OWNER", 16),
               ("ATT", 3), ("CKPTS", 5), ("LEASE", 8)]


def _ls_row(s: dict, wide: bool) -> list[str]:
    hid = s["handoff_id"] if wide else s["handoff_id"][7:19]  # 12 digits: a usable prefix
    values = [hid, s["state"], s["task_kind"], s["fence"], s["owner"], s["attempts"],
              s["checkpoints"]["count"], _lease(s["lease_expires_in"])]
    return ["-" if v is None else str(v) for v in values]


def _fit(cell: str, width: int) -> str:
    return cell if len(cell) <= width else cell[:width - 1] + "~"


def _ls(args: argparse.Namespace) -> int:
    from dhp import api

    store = args.open_store()
    limit = None if args.all else args.limit
    if args.json:  # one JSON document: the page and the cursor of the next one (or null)
        page = api.list_handoffs(store, state=args.state, task_kind=args.kind, limit=limit,
                                 after=args.after)
        print(to_json({"handoffs": list(page), "next_cursor": page.cursor}))
        _more(args, page.cursor)
        return 0
    if args.wide:
        page = api.list_handoffs(store, state=args.state, task_kind=args.kind, limit=limit,
                                 after=args.after)
        print(table([h for h, _ in _LS_COLUMNS], [_ls_row(s, True) for s in page])
              if page else "(no handoffs)")
        _more(args, page.cursor)
        return 0
    # The 100-column view streams: fixed widths need no look at later rows.
    shown, last, cursor = 0, None, None
    for item, item_cursor in _statuses(store, args):
        if limit is not None and shown == limit:
            cursor = last
            break
        if not shown:
            print("  ".join(h.ljust(w) for h, w in _LS_COLUMNS).rstrip())
        print("  ".join(_fit(c, w).ljust(w) for c, (_, w) in
                        zip(_ls_row(item, False), _LS_COLUMNS, strict=True)).rstrip())
        shown, last = shown + 1, item_cursor
    if not shown:
        print("(no handoffs)")
    _more(args, cursor)
    return 0


def _statuses(store: Any, args: argparse.Namespace):
    from dhp.core import operations

    return operations.statuses(store, state=args.state, task_kind=args.kind, after=args.after)


def _more(args: argparse.Namespace, cursor: str | None) -> None:
    """The command that prints the next page: this one's options, with `--after`."""
    if cursor is None:
        return
    import shlex

    words = ["dhp", "ls"]
    for flag, value in (("--store", args.store), ("--state", args.state),
                        ("--kind", args.kind)):
        if value is not None:
            words += [flag, value]
    if args.limit != LS_DEFAULT_LIMIT:
        words += ["--limit", str(args.limit)]
    words += [flag for flag, on in (("--wide", args.wide), ("--json", args.json)) if on]
    print("next page: " + shlex.join(words + ["--after", cursor]), file=sys.stderr)


def _result_args(p: argparse.ArgumentParser) -> None:
    _common(p)
    _hid_arg(p)


def _result(args: argparse.Namespace) -> int:
    from dhp import api

    value = api.result(args.open_store(), args.handoff_id)
    print(to_json(value, indent=None if args.json else 2))
    return 0


def _dlq_args(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="dlq_command", metavar="ACTION", required=True)
    ls = sub.add_parser("ls", help="list the dead-letter queue",
                        epilog=epilog(["dhp dlq ls", "dhp dlq ls --json"]))
    _common(ls)
    requeue = sub.add_parser("requeue", help="move a dead-lettered handoff back to pending",
                             epilog=epilog(["dhp dlq requeue 3fa9c1"]))
    _common(requeue)
    _hid_arg(requeue)


def _dlq(args: argparse.Namespace) -> int:
    from dhp import api

    if args.dlq_command == "requeue":
        api.requeue(args.open_store(), args.handoff_id)
        emit(args, {"handoff_id": args.handoff_id, "state": "pending"},
             f"requeued {args.handoff_id} (pending, attempts reset)")
        return 0
    items = api.dlq(args.open_store())
    text = table([h for h, _ in _LS_COLUMNS] + ["REASON", "LAST ERROR"],
                 [_ls_row(s, True) + [s["dlq_reason"], _last_error(s)] for s in items]) \
        if items \
        else "(the dead-letter queue is empty)"
    emit(args, items, text)
    return 0


def _last_error(status: dict, width: int = 60) -> str:
    from dhp.core.failures import summary

    text = summary(status["failures"][-1]) if status.get("failures") else "-"
    return text if len(text) <= width else text[:width - 1] + "\u2026"


def _cancel_args(p: argparse.ArgumentParser) -> None:
    _common(p)
    _hid_arg(p)


def _cancel(args: argparse.Namespace) -> int:
    from dhp import api

    api.cancel(args.open_store(), args.handoff_id)
    emit(args, {"handoff_id": args.handoff_id, "state": "cancelled"},
         f"cancelled {args.handoff_id}")
    return 0


def _check_args(p: argparse.ArgumentParser) -> None:
    _common(p)


def _check(args: argparse.Namespace) -> int:
    from dhp import api

    problems = api.check_integrity(args.open_store())
    emit(args, {"ok": not problems, "problems": problems},
         "\n".join(problems) if problems else "the store is sound")
    return 4 if problems else 0


def _export_args(p: argparse.ArgumentParser) -> None:
    _common(p)
    _hid_arg(p)
    p.add_argument("out", metavar="FILE", help="where to write the JSON-lines log")


def _export(args: argparse.Namespace) -> int:
    from dhp import api

    try:
        api.export_log(args.open_store(), args.handoff_id, args.out)
    except OSError as exc:
        raise InvalidInput(f"FILE: cannot write {args.out}: {exc}") from None
    emit(args, {"handoff_id": args.handoff_id, "path": args.out},
         f"wrote the log of {args.handoff_id} to {args.out}")
    return 0


def _migrate_args(p: argparse.ArgumentParser) -> None:
    _common(p)
    _parents(p)
    p.add_argument("--from-dhp-protocol", required=True, metavar="PATH", dest="source",
                   help="the root folder of a dhp-protocol 1.3.0 store (holding dhp.sqlite3)")
    p.add_argument("--dry-run", action="store_true",
                   help="say what would be carried over; change nothing")
    p.add_argument("--include-failed", action="store_true",
                   help="carry handoffs that failed in 1.3 too, as work to run again")


def _migrate(args: argparse.Namespace) -> int:
    from dhp.migrate import migrate

    items = migrate(args.open_store(), args.source, dry_run=args.dry_run,
                    include_failed=args.include_failed)
    verb = "would carry" if args.dry_run else "carried"
    lines = [f"{i.old_id[:12]} {i.status:>9} -> {i.action}"
             + (f" {i.handoff_id} as {i.state}, {i.checkpoints} checkpoints"
                f"{', result' if i.result else ''}" if i.handoff_id else "")
             + "".join(f"\n    {note}" for note in i.notes) for i in items]
    counts = {a: sum(i.action == a for i in items) for a in ("carry", "already", "skip", "error")}
    lines.append(f"{verb} {counts['carry']}, already held {counts['already']}, "
                 f"skipped {counts['skip']}, refused {counts['error']}")
    emit(args, {"dry_run": args.dry_run, "handoffs": [i.as_dict() for i in items],
                "counts": counts}, "\n".join(lines))
    return 1 if counts["error"] else 0


def _import_args(p: argparse.ArgumentParser) -> None:
    _common(p)
    _parents(p)
    p.add_argument("-q", "--quiet", action="store_true",
                   help="no progress on stderr (warnings are still printed)")
    p.add_argument("path", metavar="FILE", help="a JSON-lines log written by `dhp export`")


def _import(args: argparse.Namespace) -> int:
    from dhp.cli.progress import Progress
    from dhp.transport.file import ingest_items, log_items

    if not Path(args.path).is_file():
        raise InvalidInput(f"FILE: no such file: {args.path}")
    # The whole log is verified before a store is opened (or created), and what a reader
    # drops (a torn last line, DHP-LOG-005) is said, not swallowed. A large log takes a
    # while twice (reading, then storing in one transaction): both show progress.
    progress = Progress("dhp import", quiet=args.quiet)
    with open(args.path, "rb") as f:
        try:
            items, warnings = log_items(progress.reading(f, os.fstat(f.fileno()).st_size,
                                                         "verifying"))
        finally:
            progress.close()
    for w in warnings:
        print(f"dhp import: warning: {args.path}:{w['line']}: {w['requirement']}: "
              f"{w['message']}", file=sys.stderr)
    store = args.open_store()
    with progress.ticking(f"storing {len(items)} records"):
        hid = ingest_items(store, items, warnings, source=args.path)["handoff_id"]
    store.announce_work()  # as api.import_log: an orphaned handoff may wait for a worker
    emit(args, {"handoff_id": hid, "warnings": warnings}, hid)
    return 0


def _demo_args(p: argparse.ArgumentParser) -> None:
    from dhp.cli import demo

    demo.add_arguments(p)
    p.formatter_class = argparse.RawDescriptionHelpFormatter


def _demo(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from dhp.cli import demo

    return demo.run(args)


_DEMO_CODES = {0: "GREEN: every page done exactly once", 1: "RED: the story went wrong",
               2: "usage error"}

# name, help, configure, run, examples (shown by --help), exit codes (None: the family's)
COMMANDS: list[tuple] = [
    ("init", "create a store (a folder, or a Postgres schema); nothing else creates one by "
     "mistake", _init_args, _runner(_init, create=True),
     ["dhp init --store ./dhp-data",
      "dhp init --store 'postgresql://dhp@db.internal/jobs?schema=dhp'"], None),
    ("dispatch", "store a handoff (idempotent); prints its id", _dispatch_args,
     _runner(_dispatch, create=True),
     ["dhp dispatch --kind pages.fetch --inputs '{\"n\": 60}' --budget '{\"max_attempts\": 3}'",
      "dhp dispatch --kind report --inputs @inputs.json --output-schema @schema.json"], None),
    ("status", "show one handoff", _status_args, _runner(_status),
     ["dhp status 3fa9c1", "dhp --json status sha256:3fa9c1..."], None),
    ("ls", "list handoffs, newest first (filter by --state and --kind)", _ls_args,
     _runner(_ls), ["dhp ls", "dhp ls --state claimed --kind pages.fetch",
                    "dhp ls --limit 20 --after CURSOR", "dhp ls --all --wide"], None),
    ("result", "print the result of a completed handoff", _result_args, _runner(_result),
     ["dhp result 3fa9c1 > result.json"], None),
    ("dlq", "the dead-letter queue: `dlq ls`, `dlq requeue ID`", _dlq_args, _runner(_dlq),
     ["dhp dlq ls", "dhp dlq requeue 3fa9c1"], None),
    ("cancel", "cancel a handoff", _cancel_args, _runner(_cancel), ["dhp cancel 3fa9c1"], None),
    ("check", "check the store's integrity (exit 4 when anything is damaged)", _check_args,
     _runner(_check), ["dhp check", "dhp check --store ./dhp-data --json"], None),
    ("export", "write a handoff's portable JSON-lines log", _export_args, _runner(_export),
     ["dhp export 3fa9c1 handoff.jsonl"], None),
    ("import", "verify a log and store its handoff, ready to recover", _import_args,
     _runner(_import, create=True),
     ["dhp import handoff.jsonl --store ./peer-data"], None),
    ("migrate", "carry a dhp-protocol 1.3 store's work over (idempotent; --dry-run)",
     _migrate_args, _runner(_migrate, create=True),
     ["dhp migrate --from-dhp-protocol ./old-data --store ./dhp-data --dry-run",
      "dhp migrate --from-dhp-protocol ./old-data --store ./dhp-data"], None),
    ("demo", "the kill -9 demo: 60 pages, SIGKILL at page 20, zero refetch", _demo_args,
     _demo, ["dhp demo", "dhp demo --one-host --out pages.csv"], _DEMO_CODES),
]


def register(command: Callable, commands: list[tuple] = COMMANDS) -> None:
    """Add subcommands (these, or observe.COMMANDS) through main.py's
    `command(name, help, configure)`."""
    for name, help_text, configure, run, examples, codes in commands:
        command(name, help_text, configure, epilog(examples, codes))(run)
