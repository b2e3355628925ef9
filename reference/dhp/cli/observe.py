"""`dhp dashboard` and `dhp metrics`: the store as a live web page and as Prometheus text."""

from __future__ import annotations

import argparse
import sys
import threading
import time

from dhp.cli.commands import default_store, fail, global_options, open_store, table
from dhp.core.errors import DHPError
from dhp.observe import metrics_server
from dhp.transport import http_guard

CLEAR = "\x1b[H\x1b[2J"  # cursor home, clear screen
METRICS_TOKEN_ENV = "DHP_METRICS_TOKEN"


def dashboard_args(p: argparse.ArgumentParser) -> None:
    global_options(p, json_flag=False, default=argparse.SUPPRESS)
    p.add_argument("--bind", default="127.0.0.1:8480", metavar="HOST:PORT",
                   help="where to listen (default 127.0.0.1:8480; port 0 picks one)")
    p.add_argument("--read-only", action="store_true", help="no requeue or cancel buttons")
    p.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                   help="a host name browsers may use besides IP literals and localhost "
                        "(behind a reverse proxy); off loopback every read needs the token")


def dashboard(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from dhp.observe.dashboard import serve

    try:
        store = open_store(args.store or default_store())
        server = serve(store, args.bind, read_only=args.read_only,
                       allowed_hosts=frozenset(h.lower() for h in args.allow_host))
    except DHPError as exc:
        return fail(exc, "dhp dashboard")
    except OSError as exc:
        print(f"dhp dashboard: error: cannot listen on {args.bind}: {exc}", file=sys.stderr)
        return 2
    mode = "read-only" if args.read_only else f"token for requeue and cancel: {server.token}"
    url = server.url if server.access.tokens == {} else f"{server.url}#token={server.token}"
    print(f"dhp dashboard: {url}  ({mode})", file=sys.stderr, flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    return 0


def metrics_args(p: argparse.ArgumentParser) -> None:
    global_options(p, json_flag=False, default=argparse.SUPPRESS)
    p.add_argument("--serve", default=None, metavar="HOST:PORT",
                   help="serve /metrics for Prometheus instead of printing once (needs the "
                        "`otel` extra); off loopback it needs a bearer token")
    http_guard.add_access_options(p, METRICS_TOKEN_ENV, operators=False)


def metrics(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    try:
        import prometheus_client

        from dhp.observe import metrics as dhp_metrics
        dhp_metrics.prometheus_reader()
    except ImportError:
        print("dhp metrics: error: needs the `otel` extra: install durable-handoff with it, "
              "e.g. pip install '.[otel]' in a clone", file=sys.stderr)
        return 2
    try:
        store = open_store(args.store or default_store())
    except DHPError as exc:
        return fail(exc, "dhp metrics")
    dhp_metrics.observe_store(store)
    if args.serve is None:
        sys.stdout.write(prometheus_client.generate_latest().decode())
        return 0
    host, _, port = args.serve.rpartition(":")
    if not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        parser.error(f"--serve {args.serve!r}: give HOST:PORT with a port in 0..65535")
    try:
        access = http_guard.access_from(args, host, METRICS_TOKEN_ENV, "dhp-metrics")
        server = metrics_server.serve(host, int(port), access)
    except DHPError as exc:
        return fail(exc, "dhp metrics")
    except OSError as exc:
        print(f"dhp metrics: error: cannot listen on {args.serve}: {exc}", file=sys.stderr)
        return 2
    print(f"dhp metrics: http://{host}:{server.server_address[1]}/metrics", file=sys.stderr,
          flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    return 0


def top_args(p: argparse.ArgumentParser) -> None:
    global_options(p, json_flag=False, default=argparse.SUPPRESS)
    p.add_argument("--interval", type=float, default=1.0, metavar="S",
                   help="seconds between refreshes (default 1)")
    p.add_argument("--limit", type=int, default=20, metavar="N",
                   help="newest handoffs shown (default 20)")
    p.add_argument("--once", action="store_true", help="print one view and exit")


def top_view(store, limit: int) -> str:
    """Counts by state, leases and DLQ, then the newest handoffs."""
    from dhp import api
    from dhp.observe.metrics import store_counts

    counts = store_counts(store)
    states = "  ".join(f"{s} {n}" for s, n in counts["states"].items() if n) or "no handoffs"
    head = (f"{time.strftime('%H:%M:%S')}  {states}  |  leases {counts['leases']['live']} live "
            f"/ {counts['leases']['expired']} expired  |  DLQ {counts['dlq']}")
    newest = api.list_handoffs(store, limit=limit)  # newest first, one page
    rows = [[s["handoff_id"][7:19], s["state"], s["task_kind"], s["owner"], s["fence"],
             s["attempts"], s["checkpoints"]["count"],
             None if s["lease_expires_in"] is None else
             f"{s['lease_expires_in']:.1f}s" if s["lease_expires_in"] > 0 else "expired"]
            for s in newest]
    heads = ["HANDOFF", "STATE", "KIND", "OWNER", "FENCE", "ATTEMPTS", "CKPTS", "LEASE"]
    return head + "\n\n" + table(heads, rows)


def top(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    if args.interval <= 0 or args.limit < 1:
        parser.error("--interval must be above 0 and --limit at least 1")
    try:
        store = open_store(args.store or default_store())
        while True:
            view = top_view(store, args.limit)
            if sys.stdout.isatty():
                sys.stdout.write(CLEAR + view + "\n")
            else:  # a pipe or a log: one block per refresh
                sys.stdout.write(view + "\n\n")
            sys.stdout.flush()
            if args.once:
                return 0
            time.sleep(args.interval)
    except DHPError as exc:
        return fail(exc, "dhp top")
    except KeyboardInterrupt:
        return 0


# As commands.COMMANDS: name, help, configure, run, examples, exit codes (None: the family's)
COMMANDS = [
    ("top", "a live terminal view of the store: counts and the newest handoffs", top_args,
     top, ["dhp top --store ./data", "dhp top --store ./data --once --limit 50"], None),
    ("dashboard", "a live web page of the store: handoffs, timelines, chains, the DLQ",
     dashboard_args, dashboard, ["dhp dashboard --store ./data",
                                 "dhp dashboard --store ./data --read-only --bind 0.0.0.0:8480"],
     None),
    ("metrics", "the store's metrics as Prometheus text (once, or served with --serve)",
     metrics_args, metrics, ["dhp metrics --store ./data",
                             "dhp metrics --store ./data --serve 127.0.0.1:9464"], None),
]
