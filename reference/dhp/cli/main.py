"""The `dhp` command line.

Each subcommand is one entry in COMMANDS: a function that adds its arguments to a parser and
a function that runs it and returns the exit code. Adding `status`, `ls`, ... is one
`@command(...)` pair each. `--store` and `--json` may come before or after the subcommand.
Exit codes: dhp.core.exit_codes (each subcommand's --help shows its own).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass

from dhp import __version__


@dataclass
class Command:
    help: str
    configure: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace, argparse.ArgumentParser], int]
    epilog: str | None = None  # examples and exit codes (commands.epilog)


COMMANDS: dict[str, Command] = {}


def command(name: str, help: str, configure: Callable[[argparse.ArgumentParser], None],
            epilog: str | None = None):
    """Register `run(args, parser) -> exit code` as subcommand `name`; `epilog` ends its
    --help (commands.epilog: examples, then exit codes)."""
    def register(run):
        COMMANDS[name] = Command(help, configure, run, epilog)
        return run
    return register


# --- validate -------------------------------------------------------------------------------

def _validate_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("paths", nargs="*", metavar="PATH",
                   help="envelope (.json), checkpoint file (.json array or .jsonl) or log (.jsonl)")
    p.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                   help="one JSON document for machines")
    p.add_argument("--vectors", action="store_true",
                   help="check every shipped log and checkpoint-chain vector against its "
                        "expected verdict")
    p.add_argument("--max-line-bytes", type=int, default=None, metavar="N",
                   help="refuse lines longer than N bytes (default 16 MiB, DHP-SEC-002)")


_VALIDATE_EPILOG = """examples:
  dhp validate handoff.jsonl
  dhp validate envelope.json checkpoints.jsonl --json
  dhp validate --vectors

exit codes:
  0  every file is valid (warnings, e.g. a dropped torn last line, are printed)
  1  a file is invalid (each problem names file, line and requirement)
  2  usage error or unreadable file"""


@command("validate", "validate envelopes, checkpoint files and logs", _validate_args,
         _VALIDATE_EPILOG)
def _validate(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from dhp.core import validate

    if args.vectors:
        if args.paths:
            parser.error("--vectors takes no PATH")
        return _run_vectors(validate, args.json)
    if not args.paths:
        parser.print_usage(sys.stderr)
        print("dhp validate: error: give at least one PATH (or --vectors)", file=sys.stderr)
        return 2
    kwargs = {}
    if args.max_line_bytes is not None:
        if args.max_line_bytes < 1:
            parser.error("--max-line-bytes must be at least 1")
        kwargs["max_line"] = args.max_line_bytes
    reports = []
    for path in args.paths:
        try:
            report = validate.validate_path(path, **kwargs)
        except Exception as exc:  # a bug must not look like a verdict; name the file
            report = validate.FileReport(path, error=f"internal error on {path}: {exc!r}")
        reports.append(report)
        if not args.json:
            for line in validate.format_text(report):
                print(line)
            if report.error is not None:
                print(f"dhp validate: {report.error}", file=sys.stderr)
    if args.json:
        print(validate.problems_json(reports))
    return validate.exit_code(reports)


def _run_vectors(validate, as_json: bool) -> int:
    results = validate.run_vectors()
    failed = [r for r in results if not r[2]]
    if as_json:
        import json
        print(json.dumps({"ok": not failed, "vectors": [
            {"suite": s, "id": i, "passed": ok, "got": detail} for s, i, ok, detail in results]},
            indent=2))
    else:
        for suite, vid, ok, detail in results:
            print(f"{'PASS' if ok else 'FAIL'} {suite} {vid}: {detail}")
        print(f"{len(results) - len(failed)}/{len(results)} vectors gave the expected verdict")
    return 0 if not failed else 1


# --- entry point ----------------------------------------------------------------------------

def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser; with `argv`, only the command it names is configured (a command's options
    may import what it runs: `dhp status` and `dhp --version` should not pay for the demo)."""
    from . import (
        commands,  # the store commands (dispatch, status, ls, ...) register here
        mcp_config,
        observe,
        supervisor,
        worker,
    )

    for group in (commands.COMMANDS, supervisor.COMMANDS, observe.COMMANDS):
        if group[0][0] not in COMMANDS:  # each group once, whoever registered another
            commands.register(command, group)
    if "worker" not in COMMANDS:
        worker.register(command)
    if "mcp-config" not in COMMANDS:
        mcp_config.register(command)
    named = [a for a in argv or [] if a in COMMANDS]
    parser = argparse.ArgumentParser(prog="dhp", description="DHP, the Durable Handoff Protocol",
                                     epilog=commands.EXIT_CODES,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"dhp {__version__} (DHP/1.0)")
    commands.global_options(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, cmd in COMMANDS.items():
        p = sub.add_parser(name, help=cmd.help, description=cmd.help, epilog=cmd.epilog,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        # Every name argv holds, not only the first: `dhp --store status ls` is `ls`.
        if argv is None or name in named:  # no command named: the list needs no options
            cmd.configure(p)
        p.set_defaults(_command=cmd, _parser=p)
    return parser


def main(argv: list[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    parser = build_parser(argv)
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: usage errors exit 2, --help/--version exit 0
        return int(exc.code or 0)
    if not getattr(args, "_command", None):
        parser.print_usage(sys.stderr)
        print("dhp: error: give a COMMAND", file=sys.stderr)
        return 2
    try:
        return args._command.run(args, args._parser)
    except SystemExit as exc:
        return int(exc.code or 0)
    except BrokenPipeError:  # e.g. `dhp validate ... | head`
        return 0


if __name__ == "__main__":
    sys.exit(main())
