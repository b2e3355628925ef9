"""`dhp worker MODULE[:ATTR]`: run the @dhp.task functions of a module in a pool."""

from __future__ import annotations

import argparse
import sys

from dhp.core.errors import DHPError
from dhp.core.exit_codes import EXIT_MEANINGS, epilog, exit_code

EXAMPLES = epilog(
    ["# tasks.py holds @dhp.task(\"pages.fetch\", output_schema=...) def fetch(ctx, inputs): ...",
     "dhp worker tasks --store ./dhp-data --units 32",
     "dhp worker tasks --store ./dhp-data --concurrency 4 --units 1   # one unit per process",
     "dhp worker tasks:fetch --store 'postgresql://dhp@db/jobs?schema=dhp' --create"],
    {**EXIT_MEANINGS,
     0: "stopped by SIGTERM or SIGINT after draining (running work finished or released)",
     1: "no store at --store (see --create), or a worker failed for another reason (see\n"
        "     the log)",
     2: "usage error or bad input: MODULE cannot be imported, registers no task, --kinds\n"
        "     names an unknown kind, or a malformed store URL"})


def configure(p: argparse.ArgumentParser) -> None:
    from dhp.cli.commands import STORE_HELP, add_create
    from dhp.worker.slots import DEFAULT_UNITS

    p.add_argument("target", metavar="MODULE[:ATTR]",
                   help="the module whose @dhp.task functions to run (imported from the "
                        "current folder too); ATTR names one task or a list of tasks")
    # SUPPRESS: `dhp --store X worker ...` keeps X (the global option sets the default)
    p.add_argument("--store", default=argparse.SUPPRESS, metavar="PATH", help=STORE_HELP)
    add_create(p)
    p.add_argument("--concurrency", "-c", type=int, default=1, metavar="N",
                   help="worker processes to run (default 1); each runs --units at once")
    p.add_argument("--units", "-u", type=int, default=None, metavar="U",
                   help=f"handoffs each worker process runs at once, each in a thread of "
                        f"its own; async tasks share one event loop (default {DEFAULT_UNITS})")
    p.add_argument("--kinds", default=None, metavar="K[,K...]",
                   help="run only these task kinds (default: every registered one)")
    p.add_argument("--threads", action="store_true",
                   help="run -c N units in the pool's own process, with no child process "
                        "(the same as --units N, without a parent that restarts it)")
    p.add_argument("--grace", type=float, default=30.0, metavar="S",
                   help="on SIGTERM, seconds running tasks may take to finish before their "
                        "handoffs are released, with their checkpoints, and async ones "
                        "cancelled (default 30)")
    p.add_argument("--ttl", type=float, default=None, metavar="S",
                   help="lease length of each claim (default: the store's, 5 s)")
    p.epilog = EXAMPLES
    p.formatter_class = argparse.RawDescriptionHelpFormatter


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from dhp.cli.commands import default_store, open_store
    from dhp.observe import otel_env
    from dhp.worker.pool import Pool, load_tasks

    if args.concurrency < 1:
        parser.error(f"--concurrency must be at least 1, not {args.concurrency}")
    if args.units is not None and args.units < 1:
        parser.error(f"--units must be at least 1, not {args.units}")
    if args.units is not None and args.threads:
        parser.error("--threads runs -c N units in one process: give --units without it")
    if args.grace < 0:
        parser.error(f"--grace must be 0 or more seconds, not {args.grace}")
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()] if args.kinds else None
    try:
        tasks = load_tasks(args.target, kinds)
        telemetry = otel_env.configure("dhp-worker")
        store = open_store(args.store or default_store(), create=args.create,
                           parents=args.parents)
    except DHPError as exc:
        print(f"dhp worker: error: {exc}", file=sys.stderr)
        return exit_code(exc)
    if telemetry:
        print(f"dhp worker: OpenTelemetry from the environment ({telemetry})", file=sys.stderr)
    try:
        units = {} if args.units is None else {"units": args.units}
        return Pool(store, tasks, concurrency=args.concurrency, threads=args.threads,
                    grace=args.grace, ttl=args.ttl, **units).run()
    finally:
        store.close()


def register(command) -> None:
    command("worker", "run the @dhp.task functions of a module: a pool that takes, runs and "
            "completes work, recovering a dead worker's work at once", configure)(run)
