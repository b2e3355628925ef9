"""`dhp-supervisor` and `dhp supervisor`: run a dhp.supervisor.Supervisor on a store.

    dhp-supervisor --store PATH [--id ID] [--seconds S] [--once] [--interval S] [--ttl S]
        [--create [--parents]]

PATH is the store (a folder or a postgresql:// URL), ID names this supervisor, S bounds how
long it runs (default: until stopped). A missing store is refused unless `--create`. The old
positional form `ROOT ID [SECONDS]` still works and prints a deprecation note.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
import threading
from typing import Any

from dhp.cli.commands import (
    STORE_HELP,
    add_create,
    default_store,
    fail,
    global_options,
    open_store,
)
from dhp.core.errors import DHPError
from dhp.core.exit_codes import EXIT_MEANINGS, epilog

EXAMPLES = ["dhp-supervisor --store ./dhp-data",
            "dhp-supervisor --store ./dhp-data --id sup-1 --seconds 3600",
            "dhp-supervisor --store ./dhp-data --once    # one pass, e.g. from cron",
            "dhp-supervisor --store 'postgresql://dhp@db/jobs?schema=dhp' --id sup-2"]
CODES = {**EXIT_MEANINGS, 0: "stopped: SIGTERM, SIGINT, the end of --seconds or --once"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options shared by `dhp-supervisor` and `dhp supervisor` (--store comes from the
    caller: both take it, `dhp` before the subcommand too)."""
    p.add_argument("--id", default=None,
                   help="this supervisor's name (default: HOST-PID)")
    p.add_argument("--seconds", type=float, default=None, metavar="S",
                   help="stop after S seconds (default: run until SIGTERM/SIGINT)")
    p.add_argument("--once", action="store_true",
                   help="run a single pass and exit (for cron and tests)")
    p.add_argument("--interval", type=float, default=None, metavar="S",
                   help="seconds between passes (default: min(1, ttl/3))")
    p.add_argument("--ttl", type=float, default=None, metavar="S",
                   help="leadership lease in seconds (default: the store's lease ttl, 5)")
    add_create(p)


def run_from_args(args: argparse.Namespace, prog: str) -> int:
    """Run with the parsed options of either command; the exit code."""
    sid = args.id or f"{socket.gethostname()}-{os.getpid()}"
    try:
        from dhp.observe import otel_env

        otel_env.configure("dhp-supervisor")  # exporters from OTEL_* variables, if set
        store = open_store(args.store or default_store(), create=args.create,
                           parents=args.parents)
        return run_supervisor(store, sid, args.seconds, once=args.once,
                              interval=args.interval, ttl=args.ttl)
    except DHPError as exc:
        return fail(exc, prog)


def run_supervisor(store: Any, supervisor_id: str, seconds: float | None, *,
                   once: bool = False, interval: float | None = None,
                   ttl: float | None = None) -> int:
    """Run on the open `store` until done or signalled, then close it; the exit code."""
    from dhp.supervisor import Supervisor  # here: `dhp --help` need not import it

    try:
        sup = Supervisor(store, supervisor_id, ttl=ttl, interval=interval)

        def on_signal(signum: int, frame: Any) -> None:
            sup.stop()

        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, on_signal)
            signal.signal(signal.SIGINT, on_signal)
        sup.run(seconds, once=once)
    finally:
        store.close()
    return 0


def _configure(p: argparse.ArgumentParser) -> None:
    global_options(p, json_flag=False, default=argparse.SUPPRESS)  # `dhp --store X` too
    add_arguments(p)


def _run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    return run_from_args(args, "dhp supervisor")


# `dhp supervisor`, as commands.COMMANDS: name, help, configure, run, examples, exit codes
COMMANDS = [("supervisor", "run a supervisor (leader-elected) on the store", _configure, _run,
             ["dhp supervisor --store ./dhp-data",
              "dhp supervisor --store ./dhp-data --id sup-1 --once"], CODES)]


def main(argv: list[str] | None = None) -> int:
    """`dhp-supervisor --store ROOT [--id ID] [--seconds S]` (the old positional form
    `ROOT ID [SECONDS]` still works, with a deprecation note)."""
    parser = argparse.ArgumentParser(
        prog="dhp-supervisor", description="Run a DHP supervisor on a store: orphan expired "
        "and dead leases, park budget-exhausted work; one JSON line per action. The same as "
        "`dhp supervisor`.", epilog=epilog(EXAMPLES, CODES),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", default=None, metavar="PATH", help=STORE_HELP)
    add_arguments(parser)
    parser.add_argument("legacy", nargs="*", help=argparse.SUPPRESS)  # ROOT ID [SECONDS]
    try:
        args = parser.parse_args(argv)
        if args.legacy:
            _legacy(parser, args)
    except SystemExit as exc:
        return int(exc.code or 0)
    return run_from_args(args, "dhp-supervisor")


def _legacy(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Map `ROOT ID [SECONDS]` onto the options, saying what to write instead."""
    if len(args.legacy) not in (2, 3) or args.store or args.id or args.seconds is not None:
        parser.error("give --store PATH [--id ID] [--seconds S] (the old form is "
                     "ROOT ID [SECONDS], alone)")
    args.store, args.id = args.legacy[:2]
    if len(args.legacy) == 3:
        try:
            args.seconds = float(args.legacy[2])
        except ValueError:
            parser.error(f"SECONDS must be a number, not {args.legacy[2]!r}")
    print(f"dhp-supervisor: note: `dhp-supervisor ROOT ID [SECONDS]` is deprecated; write "
          f"`dhp-supervisor --store {args.store} --id {args.id}"
          + (f" --seconds {args.legacy[2]}`" if len(args.legacy) == 3 else "`"),
          file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
