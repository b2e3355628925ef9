"""`dhp demo`: kill -9 a worker mid-job and watch another process finish it with zero refetch.

A local HTTP server serves 60 pages and counts every request. A worker process fetches the
pages one by one and checkpoints each (page number, size, SHA-256), pausing a polite crawl
delay between requests; the demo sends it SIGKILL right after the checkpoint of page 20.

The default run is the whole story across two hosts. Host A and host B are two processes with
two data folders and nothing shared. The worker on A checkpoints into A's store and ships
every checkpoint over TCP (`dhp.NetShipper`, HMAC-authenticated with a shared secret) to
the transport server that host B's process runs on B's store. The SIGKILL comes right after B
has made checkpoint 20 durable and acknowledged it; then A's whole data folder is deleted, and
B is told that host A is lost. B takes over at once: its copy of the handoff is orphaned (a
peer's store never leased the handoff to A's process, DHP-TRN-020), so its standby recovers it
under a higher fence and resumes at page 21. Were A to come back, its stale records would be
refused by B (DHP-TRN-019), as fencing refuses any stale writer.

Why B waits to be told: B cannot tell a dead host from a partitioned one, so in the demo, as
in production, a failure detector (here the demo itself, which killed A; in production a
cloud's instance-terminated event, an operator, or a supervisor's health check) declares A
lost. Fencing keeps even a wrong declaration safe.

`dhp demo --one-host` runs the first variant: worker and standby share one store on one host,
and the standby sees the death at once through the worker's liveness lock (no lease wait).

GREEN (exit 0) only if all 60 pages are done, the checkpoint chain verifies, and the server
counted exactly 60 requests, one per page (zero refetch); otherwise RED (exit 1). The
fetched pages are written as CSV (page, url, bytes, sha256, worker, fence, seq).
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from dhp.core.clock import store_clock

TASK_KIND = "dhp.cli.demo.fetch_pages"
LEASE_TTL = 5.0
OUTPUT_SCHEMA = {
    "type": "object",
    "required": ["pages", "digest"],
    "properties": {"pages": {"type": "integer", "minimum": 1},
                   "digest": {"type": "string", "pattern": "^sha256:[0-9a-f]{64}$"}},
    "additionalProperties": False,
}


# --- the page server --------------------------------------------------------------------------

def page_body(n: int) -> bytes:
    lines = [f"DHP demo page {n}"] + [f"line {i} of page {n}: {'*' * (n % 7 + i)}"
                                      for i in range(1, 6)]
    return ("\n".join(lines) + "\n").encode()


class PageServer:
    """Serves /page/1 .. /page/N on 127.0.0.1 and counts every request it receives."""

    def __init__(self, pages: int):
        self.pages = pages
        self.hits: dict[str, int] = {}
        self.mutex = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                with server.mutex:
                    server.hits[self.path] = server.hits.get(self.path, 0) + 1
                n = self.path.removeprefix("/page/")
                if n.isdigit() and 1 <= int(n) <= server.pages:
                    body, status = page_body(int(n)), 200
                else:
                    body, status = b"no such page\n", 404
                self.send_response(status)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass  # the demo tells the story itself

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> PageServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def total(self) -> int:
        with self.mutex:
            return sum(self.hits.values())


# --- the worker and the standby (subprocesses) ----------------------------------------------------

_SAY = threading.Lock()  # host B reports from two threads


def _say(event: str, **fields: Any) -> None:
    # One write per line, so a SIGKILL can only drop a whole event line.
    line = json.dumps({"event": event, "t": store_clock(), **fields}) + "\n"
    with _SAY:
        sys.stdout.write(line)
        sys.stdout.flush()


def fetch_pages(store: Any, ctx: Any, crawl_delay: float) -> None:
    """Fetch the pages after the last checkpoint, checkpoint each, then complete."""
    from dhp import api

    base, pages = ctx.inputs["base_url"], ctx.inputs["pages"]
    last = ctx.last_checkpoint
    start = last["page"] + 1 if last else 1
    _say("resume", worker=ctx.worker_id, fence=ctx.fence, page=start)
    for n in range(start, pages + 1):
        with urllib.request.urlopen(f"{base}/page/{n}", timeout=10) as response:
            body = response.read()
        ctx.checkpoint({"page": n, "bytes": len(body),
                        "sha256": "sha256:" + hashlib.sha256(body).hexdigest(),
                        "worker": ctx.worker_id})
        time.sleep(crawl_delay)  # polite crawling: one request at a time, spaced
    digests = [r["state"]["sha256"] for r in api.checkpoints(store, ctx.handoff_id)]
    ctx.complete({"pages": len(digests),
                  "digest": "sha256:" + hashlib.sha256("".join(digests).encode()).hexdigest()})
    _say("completed", worker=ctx.worker_id, fence=ctx.fence, pages=len(digests))


def worker_main(argv: list[str]) -> int:
    """The demo's subprocesses: `python -m dhp.cli.demo worker|standby --store S --handoff H
    --worker-id W [--delay D]`; a worker also ships with `--ship-to HOST:PORT --secret-file F
    --ship-buffer B`. `host-b` is the peer host (see `host_b`)."""
    from dhp import api
    from dhp.core.errors import Conflict

    p = argparse.ArgumentParser(prog="python -m dhp.cli.demo")
    p.add_argument("role", choices=("worker", "standby", "host-b"))
    p.add_argument("--store", required=True)
    p.add_argument("--handoff")
    p.add_argument("--worker-id", required=True)
    p.add_argument("--delay", type=float, default=0.04)
    p.add_argument("--ship-to", metavar="HOST:PORT")
    p.add_argument("--secret-file")
    p.add_argument("--ship-buffer")
    p.add_argument("--host-a", help="host A's data folder (host-b: reported, never touched)")
    args = p.parse_args(argv)
    if args.role == "host-b":
        return host_b(args)
    store = api.Store(args.store, ttl=LEASE_TTL)
    shipper = None
    if args.role == "worker":
        if args.ship_to:
            shipper = _shipper(args)
        ctx = api.claim(store, args.handoff, args.worker_id, ship_to=shipper)
        _say("claimed", worker=args.worker_id, fence=ctx.fence, pid=os.getpid())
    else:
        _say("standing_by", worker=args.worker_id, pid=os.getpid())
        while api.status(store, args.handoff)["fence"] == 0:
            time.sleep(0.005)  # let the worker claim first
        while True:
            try:
                ctx = api.recover(store, args.handoff, args.worker_id)
                break
            except Conflict:
                if api.status(store, args.handoff)["state"] in ("completed", "cancelled"):
                    _say("nothing_to_do", worker=args.worker_id)
                    return 0
                time.sleep(0.002)  # owner alive: its liveness lock is still held
        _say("recovered", worker=args.worker_id, fence=ctx.fence)
    with ctx:
        fetch_pages(store, ctx, args.delay)
    if shipper is not None:
        shipper.close()
    return 0


def _shipper(args: argparse.Namespace) -> Any:
    from dhp.transport.server import load_secret
    from dhp.transport.shipper import NetShipper

    host, _, port = args.ship_to.rpartition(":")
    return NetShipper(host, int(port), local_logpath=args.ship_buffer,
                      secret=load_secret(args.secret_file), name=args.worker_id)


def host_b(args: argparse.Namespace) -> int:
    """Host B: a transport server on B's own store, a watcher that reports each checkpoint B
    holds, and a standby that takes over when told `takeover <handoff_id>` on stdin (the
    failure detector's word that host A is lost)."""
    from dhp import api
    from dhp.transport import server as net

    store = api.Store(args.store, ttl=LEASE_TTL)
    server = net.TransportServer(store, "127.0.0.1", 0,
                                 secret=net.load_secret(args.secret_file)).start()
    _say("listening", port=server.port, pid=os.getpid())
    stop = threading.Event()
    threading.Thread(target=_watch, args=(args.store, stop), daemon=True).start()
    try:
        words = sys.stdin.readline().split()
        stop.set()
        if len(words) != 2 or words[0] != "takeover":
            _say("no_takeover")
            return 1
        hid = words[1]
        held = api.checkpoints(store, hid)
        _say("host_a_lost", held=len(held), state=api.status(store, hid)["state"],
             host_a_exists=bool(args.host_a) and Path(args.host_a).exists())
        # Orphaned on ingest (DHP-TRN-020): no lease of A's to wait out, so recover at once.
        with api.recover(store, hid, args.worker_id) as ctx:
            _say("recovered", worker=args.worker_id, fence=ctx.fence)
            fetch_pages(store, ctx, args.delay)
        _say("transport", **{k: server.stats.get(k, 0) for k in (
            "connections", "stored", "duplicates", "rejected_frames")})
        return 0
    finally:
        stop.set()
        server.stop()
        store.close()


def _watch(store_path: str, stop: threading.Event) -> None:
    """Report every new checkpoint that host B's store holds (durable, so acknowledged)."""
    from dhp import api

    store = api.Store(store_path, ttl=LEASE_TTL)  # its own connection: reads never wait
    seen: dict[str, int] = {}
    while not stop.wait(0.001):
        for status in api.list_handoffs(store):
            last = status["checkpoints"]["last_seq"] or 0
            if last > seen.get(status["handoff_id"], 0):
                seen[status["handoff_id"]] = last
                _say("held", handoff=status["handoff_id"], seq=last)
    store.close()


# --- the demo itself ------------------------------------------------------------------------------

def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--one-host", action="store_true",
                   help="worker and standby on one host sharing one store (liveness lock); "
                        "default: two hosts, checkpoints shipped over TCP, host A destroyed")
    p.add_argument("--pages", type=int, default=60, help="pages to fetch (default 60)")
    p.add_argument("--kill-at", type=int, default=20, metavar="N",
                   help="SIGKILL the worker right after the checkpoint of page N (default 20)")
    p.add_argument("--out", default=None, metavar="CSV",
                   help="write the fetched pages as CSV to this file (default: none)")
    p.add_argument("--store", default=argparse.SUPPRESS, metavar="PATH",
                   help="the store folder (--one-host), or the folder that holds host-a/ and "
                        "host-b/ (default: a fresh temp folder)")
    p.add_argument("--delay", type=float, default=0.04, metavar="S",
                   help="crawl delay between requests (default 0.04 s)")
    p.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                   help="print a JSON summary as the last line")


class _Events:
    """Collects the JSON event lines a subprocess prints."""

    def __init__(self, proc: subprocess.Popen):
        self.items: list[dict] = []
        self.cond = threading.Condition()
        self.thread = threading.Thread(target=self._read, args=(proc,), daemon=True)
        self.thread.start()

    def _read(self, proc: subprocess.Popen) -> None:
        for line in proc.stdout:
            try:
                item = json.loads(line)
            except ValueError:
                continue
            with self.cond:
                self.items.append(item)
                self.cond.notify_all()

    def wait_for(self, event: str, timeout: float, **match: Any) -> dict | None:
        """The first event of this name (whose fields satisfy `match`: equal, or for `seq`
        at least), waiting up to `timeout` seconds."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                found = [e for e in self.items if e.get("event") == event and all(
                    e.get(k, 0) >= v if k == "seq" else e.get(k) == v
                    for k, v in match.items())]
                if found:
                    return found[0]
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self.cond.wait(left)


def _spawn(role: str, store: str, hid: str | None, worker_id: str, delay: float,
           *extra: str, stdin: int | None = None) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "dhp.cli.demo", role, "--store", store, "--worker-id", worker_id,
           "--delay", str(delay), *extra]
    if hid:
        cmd += ["--handoff", hid]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stdin=stdin, text=True)


def run(args: argparse.Namespace) -> int:
    if args.pages < 2 or not 1 <= args.kill_at < args.pages:
        print("dhp demo: error: need --pages >= 2 and 1 <= --kill-at < --pages", file=sys.stderr)
        return 2
    if args.store:
        folder = Path(args.store)
        problem = ("exists and is not a folder" if folder.exists() and not folder.is_dir()
                   else "has no parent folder (create it first)"
                   if not folder.exists() and not folder.parent.is_dir() else None)
        if problem:
            print(f"dhp demo: error: --store {args.store} {problem}", file=sys.stderr)
            return 2
    work = Path(tempfile.mkdtemp(prefix="dhp-demo-"))
    out = Path(args.out) if args.out else None
    lines: list[str] = []

    def tell(text: str) -> None:
        lines.append(text)
        if not args.json:
            print(text, flush=True)

    summary = None
    try:
        story = _one_host if args.one_host else _two_hosts
        summary = story(args, work, out, tell)
    finally:
        _tidy(work, green=summary is not None and summary["green"])
    if args.json:
        print(json.dumps(summary))
    return 0 if summary["green"] else 1


def _tidy(work: Path, *, green: bool) -> None:
    """Remove the demo's temp folder (what --store and --out did not place elsewhere); keep
    it when the story went wrong, so it can be looked at."""
    if green or not any(work.iterdir()):
        shutil.rmtree(work, ignore_errors=True)
    else:
        print(f"dhp demo: the demo's files are kept in {work}", file=sys.stderr)


def _kill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def _one_host(args: argparse.Namespace, work: Path, out: Path | None, tell: Any) -> dict:
    from dhp import api
    from dhp.core import chain

    store_path = args.store or str(work / "store")
    procs: list[subprocess.Popen] = []
    seen, recovered, t_kill = 0, None, 0.0
    tell(f"DHP kill demo (one host): {args.pages} pages, SIGKILL right after the checkpoint of "
         f"page {args.kill_at}")
    with PageServer(args.pages) as server:
        store = api.Store(store_path, ttl=LEASE_TTL)
        hid = api.dispatch(store, TASK_KIND, {"base_url": server.url, "pages": args.pages},
                           OUTPUT_SCHEMA, {"max_attempts": 3})
        tell(f"  store    {store_path}")
        tell(f"  server   {server.url} (counts every request)")
        tell(f"  handoff  {hid}")
        try:
            standby = _spawn("standby", store_path, hid, "demo-standby", args.delay)
            procs.append(standby)
            standby_events = _Events(standby)
            standby_events.wait_for("standing_by", 30)
            worker = _spawn("worker", store_path, hid, "demo-worker", args.delay)
            procs.append(worker)
            claimed = _Events(worker).wait_for("claimed", 30)
            if claimed is None:
                tell("RED: the worker never claimed the handoff")
                return {"green": False, "handoff_id": hid}
            t0 = claimed["t"]
            tell(f"  t={0:7.3f}s  worker pid {worker.pid} claimed the handoff (fence "
                 f"{claimed['fence']}); a standby (pid {standby.pid}) waits")
            while seen < args.kill_at and worker.poll() is None:
                seen = api.status(store, hid)["checkpoints"]["last_seq"] or 0
                if seen < args.kill_at:
                    time.sleep(0.001)
            t_kill = store_clock()  # read before the kill: the standby may recover first
            os.kill(worker.pid, signal.SIGKILL)
            fetched_at_kill = server.total()
            worker.wait()
            tell(f"  t={t_kill - t0:7.3f}s  checkpoint {seen} acknowledged -> SIGKILL worker "
                 f"(server had served {fetched_at_kill} pages)")
            recovered = standby_events.wait_for("recovered", 30)
            if recovered is not None:
                tell(f"  t={recovered['t'] - t0:7.3f}s  standby recovered the handoff (fence "
                     f"{recovered['fence']}) {1000 * (recovered['t'] - t_kill):.1f} ms after "
                     f"the kill; the {LEASE_TTL:g} s lease was not waited for")
            resumed = standby_events.wait_for("resume", 30)
            if resumed is not None:
                tell(f"  t={resumed['t'] - t0:7.3f}s  standby resumes at page {resumed['page']}")
            done = standby_events.wait_for("completed", 60)
            standby.wait(timeout=30)
            if done is not None:
                tell(f"  t={done['t'] - t0:7.3f}s  standby completed: {done['pages']} pages")
        finally:
            for proc in procs:
                _kill(proc)
        verdict = _verdict(api, chain, store, hid, server, args.pages, out)
        store.close()
    for text in verdict["story"]:
        tell(text)
    return {"green": verdict["green"], "mode": "one-host", "handoff_id": hid,
            "pages_done": verdict["done"], "fetches": verdict["fetches"],
            "refetched": verdict["refetched"], "killed_after_checkpoint": seen,
            "recovered_ms": None if recovered is None
            else round(1000 * (recovered["t"] - t_kill), 3),
            "csv": str(out) if out else None, "store": store_path}


def _two_hosts(args: argparse.Namespace, work: Path, out: Path | None, tell: Any) -> dict:
    """Host A ships to host B over TCP; A is killed and its data folder deleted; B finishes."""
    from dhp import api
    from dhp.core import chain
    from dhp.core.errors import DHPError

    base = Path(args.store) if args.store else work
    host_a, host_b = base / "host-a", base / "host-b"
    secret = secrets.token_hex(32)  # 32 random bytes (DHP-TRN-012), as hex
    for folder in (host_a, host_b):
        folder.mkdir(parents=True, exist_ok=True)
        _write_secret(folder / "secret", secret)  # configured on both hosts out of band
    procs: list[subprocess.Popen] = []
    problems: list[str] = []
    hid, held, lost, recovered, t_kill, t_gone = None, None, None, None, 0.0, 0.0
    tell(f"DHP kill demo across two hosts: {args.pages} pages; host A ships every checkpoint "
         f"to host B over TCP; SIGKILL right after page {args.kill_at}, then host A's data "
         "folder is deleted")
    with PageServer(args.pages) as server:
        tell(f"  host A   {host_a} (store, shipper buffer, secret)")
        tell(f"  host B   {host_b} (store, secret)")
        tell(f"  server   {server.url} (counts every request)")
        try:
            b = _spawn("host-b", str(host_b / "store"), None, "host-b-standby", args.delay,
                       "--secret-file", str(host_b / "secret"), "--host-a", str(host_a),
                       stdin=subprocess.PIPE)
            procs.append(b)
            b_events = _Events(b)
            listening = b_events.wait_for("listening", 30)
            if listening is None:
                tell("RED: host B's transport server did not start")
                return {"green": False, "mode": "two-hosts"}
            ship_to = f"127.0.0.1:{listening['port']}"
            tell(f"  host B   transport server on {ship_to} (HMAC challenge-response over the "
                 "shared secret)")
            store_a = api.Store(host_a / "store", ttl=LEASE_TTL)
            hid = api.dispatch(store_a, TASK_KIND, {"base_url": server.url, "pages": args.pages},
                               OUTPUT_SCHEMA, {"max_attempts": 3})
            store_a.close()
            tell(f"  handoff  {hid} (dispatched on host A)")
            a = _spawn("worker", str(host_a / "store"), hid, "host-a-worker", args.delay,
                       "--ship-to", ship_to, "--secret-file", str(host_a / "secret"),
                       "--ship-buffer", str(host_a / "ship-buffer.jsonl"))
            procs.append(a)
            claimed = _Events(a).wait_for("claimed", 30)
            if claimed is None:
                tell("RED: host A's worker never claimed the handoff")
                return {"green": False, "mode": "two-hosts", "handoff_id": hid}
            t0 = claimed["t"]
            tell(f"  t={0:7.3f}s  host A: worker pid {a.pid} claimed the handoff (fence "
                 f"{claimed['fence']}); each checkpoint is shipped to host B as it is made")
            while held is None and a.poll() is None:
                held = b_events.wait_for("held", 0.05, handoff=hid, seq=args.kill_at)
            t_kill = store_clock()  # read before the kill: B may take over first
            _kill(a)  # SIGKILL: no goodbye, no flush
            fetched_at_kill = server.total()
            if held is None:
                problems.append(f"host A's worker ended before host B held checkpoint "
                                f"{args.kill_at}")
            else:
                tell(f"  t={t_kill - t0:7.3f}s  host B holds checkpoint {held['seq']} (durable, "
                     f"acknowledged) -> SIGKILL host A's worker (server had served "
                     f"{fetched_at_kill} pages)")
            shutil.rmtree(host_a)  # the whole host is gone: store, locks, shipper buffer
            t_gone = store_clock()
            tell(f"  t={t_gone - t0:7.3f}s  host A's data folder deleted; it exists: "
                 f"{'yes' if host_a.exists() else 'no'}")
            b.stdin.write(f"takeover {hid}\n")  # the failure detector: host A is lost
            b.stdin.flush()
            lost = b_events.wait_for("host_a_lost", 30)
            if lost is not None:
                tell(f"  t={lost['t'] - t0:7.3f}s  host B is told host A is lost; it holds "
                     f"checkpoints 1..{lost['held']}, the handoff is {lost['state']} there "
                     "(B never leased it to A's process)")
                if lost["host_a_exists"]:
                    problems.append("host A's data folder still existed when B took over")
            recovered = b_events.wait_for("recovered", 30)
            if recovered is not None:
                tell(f"  t={recovered['t'] - t0:7.3f}s  host B's standby recovered the handoff "
                     f"(fence {recovered['fence']}) {1000 * (recovered['t'] - t_kill):.1f} ms "
                     "after the kill")
            resumed = b_events.wait_for("resume", 30)
            if resumed is not None:
                tell(f"  t={resumed['t'] - t0:7.3f}s  host B's standby resumes at page "
                     f"{resumed['page']} (host A's folder exists: "
                     f"{'yes' if host_a.exists() else 'no'})")
            done = b_events.wait_for("completed", 60)
            if done is not None:
                tell(f"  t={done['t'] - t0:7.3f}s  host B's standby completed: "
                     f"{done['pages']} pages")
            stats = b_events.wait_for("transport", 30)
            b.wait(timeout=30)
            if stats is not None:
                tell(f"  host B's transport server: {stats['connections']} connection(s), "
                     f"{stats['stored']} frames stored, {stats['duplicates']} duplicates, "
                     f"{stats['rejected_frames']} rejected")
        finally:
            for proc in procs:
                _kill(proc)
        store_b = api.Store(host_b / "store", ttl=LEASE_TTL)
        try:
            verdict = _verdict(api, chain, store_b, hid, server, args.pages, out, problems,
                               where=" on host B")
        except DHPError as exc:  # e.g. nothing ever reached B: RED, saying why
            verdict = {"green": False, "story": [f"RED: host B: {exc}"], "done": 0,
                       "fetches": server.total(), "refetched": []}
        finally:
            store_b.close()
    for text in verdict["story"]:
        tell(text)
    return {"green": verdict["green"], "mode": "two-hosts", "handoff_id": hid,
            "pages_done": verdict["done"], "fetches": verdict["fetches"],
            "refetched": verdict["refetched"],
            "killed_after_checkpoint": None if held is None else held["seq"],
            "host_a_deleted": not host_a.exists(),
            "recovered_ms": None if recovered is None
            else round(1000 * (recovered["t"] - t_kill), 3),
            "takeover_ms": None if recovered is None
            else round(1000 * (recovered["t"] - t_gone), 3),
            "csv": str(out) if out else None, "host_a": str(host_a),
            "host_b": str(host_b)}


def _write_secret(path: Path, secret: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # owner only
    with open(fd, "w", encoding="ascii") as f:
        f.write(secret + "\n")


def _verdict(api: Any, chain: Any, store: Any, hid: str, server: PageServer, pages: int,
             out: Path | None, problems: list[str] | None = None, where: str = "") -> dict:
    """Check the outcome against the server's count and the store's chain; write the CSV.
    `problems` already found make it RED too."""
    status = api.status(store, hid)
    records = api.checkpoints(store, hid)
    problems = list(problems or [])
    try:
        chain.verify_chain(hid, records)
        chain_ok = True
    except Exception as exc:  # report, do not crash: RED says what went wrong
        chain_ok = False
        problems.append(f"checkpoint chain does not verify: {exc}")
    done_pages = [r["state"]["page"] for r in records]
    if done_pages != list(range(1, pages + 1)):
        problems.append(f"checkpointed pages are not exactly 1..{pages}")
    if status["state"] != "completed":
        problems.append(f"handoff is {status['state']}, not completed")
    fetches = server.total()
    with server.mutex:
        refetched = sorted(p for p, n in server.hits.items() if n > 1)
    if fetches != pages:
        problems.append(f"server counted {fetches} fetches, not {pages}")
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        with out.open("w", newline="", encoding="utf-8") as f:
            w = csv.writer(f)
            w.writerow(["page", "url", "bytes", "sha256", "worker", "fence", "seq"])
            for r in records:
                s = r["state"]
                w.writerow([s["page"], f"{server.url}/page/{s['page']}", s["bytes"],
                            s["sha256"], s["worker"], r["fence"], r["seq"]])
    fences = sorted({r["fence"] for r in records})
    story = [f"  server counted {fetches} requests for {len(server.hits)} distinct pages; "
             f"refetched: {', '.join(refetched) if refetched else 'none'}",
             f"  {len(records)} checkpoints{where}, chain verifies: "
             f"{'yes' if chain_ok else 'no'}; fences "
             f"{', '.join(map(str, fences))}",
             f"  pages CSV: {out}" if out else "  pages CSV: not written (--out FILE)"]
    green = not problems
    if green:
        story.append(f"GREEN: {len(done_pages)}/{pages} pages done, {fetches} fetches, "
                     "zero refetch")
    else:
        story.append("RED: " + "; ".join(problems))
    return {"green": green, "story": story, "done": len(done_pages), "fetches": fetches,
            "refetched": refetched}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ("worker", "standby", "host-b"):
        return worker_main(argv)
    p = argparse.ArgumentParser(prog="dhp demo", description=__doc__.splitlines()[0])
    add_arguments(p)
    return run(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
