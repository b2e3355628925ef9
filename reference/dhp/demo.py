"""`dhp demo`: kill -9 a worker mid-job and watch a standby finish it with zero refetch.

On one host: a local HTTP server serves 60 pages and counts every request. A worker process
(`python -m dhp.demo worker`) fetches the pages one by one and checkpoints each (page number,
size, SHA-256), pausing a polite crawl delay between requests. The demo watches the
checkpoints through `dhp.status` and sends SIGKILL right after the checkpoint of page 20. A
standby process, waiting from the start, recovers the handoff the moment the worker's
liveness lock is free (no wait for the 5 s lease) and resumes from page 21.

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

from .clock import store_clock

TASK_KIND = "dhp.demo.fetch_pages"
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

def _say(event: str, **fields: Any) -> None:
    # One write per line, so a SIGKILL can only drop a whole event line.
    sys.stdout.write(json.dumps({"event": event, "t": store_clock(), **fields}) + "\n")
    sys.stdout.flush()


def fetch_pages(store: Any, ctx: Any, crawl_delay: float) -> None:
    """Fetch the pages after the last checkpoint, checkpoint each, then complete."""
    from . import api

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
    """`python -m dhp.demo worker|standby --store S --handoff H --worker-id W --delay D`."""
    from . import api
    from .errors import Conflict

    p = argparse.ArgumentParser(prog="python -m dhp.demo")
    p.add_argument("role", choices=("worker", "standby"))
    p.add_argument("--store", required=True)
    p.add_argument("--handoff", required=True)
    p.add_argument("--worker-id", required=True)
    p.add_argument("--delay", type=float, default=0.04)
    args = p.parse_args(argv)
    store = api.Store(args.store, ttl=LEASE_TTL)
    if args.role == "worker":
        ctx = api.claim(store, args.handoff, args.worker_id)
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
    return 0


# --- the demo itself ------------------------------------------------------------------------------

def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pages", type=int, default=60, help="pages to fetch (default 60)")
    p.add_argument("--kill-at", type=int, default=20, metavar="N",
                   help="SIGKILL the worker right after the checkpoint of page N (default 20)")
    p.add_argument("--out", default=None, metavar="CSV",
                   help="where to write the fetched pages (default: in the demo's temp folder)")
    p.add_argument("--store", default=None, metavar="PATH",
                   help="store folder (default: a fresh temp folder)")
    p.add_argument("--delay", type=float, default=0.04, metavar="S",
                   help="crawl delay between requests (default 0.04 s)")
    p.add_argument("--json", action="store_true", help="print a JSON summary as the last line")


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

    def wait_for(self, event: str, timeout: float) -> dict | None:
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                found = [e for e in self.items if e.get("event") == event]
                if found:
                    return found[0]
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self.cond.wait(left)


def _spawn(role: str, store: str, hid: str, worker_id: str, delay: float) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "dhp.demo", role, "--store", store, "--handoff", hid,
         "--worker-id", worker_id, "--delay", str(delay)],
        stdout=subprocess.PIPE, text=True)


def run(args: argparse.Namespace) -> int:
    from . import api, chain

    if args.pages < 2 or not 1 <= args.kill_at < args.pages:
        print("dhp demo: error: need --pages >= 2 and 1 <= --kill-at < --pages", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="dhp-demo-"))
    store_path = args.store or str(work / "store")
    out = Path(args.out) if args.out else work / "pages.csv"
    procs: list[subprocess.Popen] = []
    lines: list[str] = []

    def tell(text: str) -> None:
        lines.append(text)
        if not args.json:
            print(text, flush=True)

    tell(f"DHP kill demo: {args.pages} pages, SIGKILL right after the checkpoint of page "
         f"{args.kill_at}")
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
            worker_events = _Events(worker)
            claimed = worker_events.wait_for("claimed", 30)
            if claimed is None:
                tell("RED: the worker never claimed the handoff")
                return 1
            t0 = claimed["t"]
            tell(f"  t={0:7.3f}s  worker pid {worker.pid} claimed the handoff (fence "
                 f"{claimed['fence']}); a standby (pid {standby.pid}) waits")
            seen = 0
            while seen < args.kill_at and worker.poll() is None:
                seen = api.status(store, hid)["checkpoints"]["last_seq"] or 0
                if seen < args.kill_at:
                    time.sleep(0.001)
            os.kill(worker.pid, signal.SIGKILL)
            t_kill = store_clock()
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
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        verdict = _verdict(api, chain, store, hid, server, args.pages, out)
        store.close()
    for text in verdict["story"]:
        tell(text)
    summary = {"green": verdict["green"], "handoff_id": hid, "pages_done": verdict["done"],
               "fetches": verdict["fetches"], "refetched": verdict["refetched"],
               "killed_after_checkpoint": seen,
               "recovered_ms": None if recovered is None
               else round(1000 * (recovered["t"] - t_kill), 3),
               "csv": str(out), "store": store_path}
    if args.json:
        print(json.dumps(summary))
    return 0 if verdict["green"] else 1


def _verdict(api: Any, chain: Any, store: Any, hid: str, server: PageServer, pages: int,
             out: Path) -> dict:
    """Check the outcome against the server's count and the store's chain; write the CSV."""
    status = api.status(store, hid)
    records = api.checkpoints(store, hid)
    problems = []
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
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["page", "url", "bytes", "sha256", "worker", "fence", "seq"])
        for r in records:
            s = r["state"]
            w.writerow([s["page"], f"{server.url}/page/{s['page']}", s["bytes"], s["sha256"],
                        s["worker"], r["fence"], r["seq"]])
    fences = sorted({r["fence"] for r in records})
    story = [f"  server counted {fetches} requests for {len(server.hits)} distinct pages; "
             f"refetched: {', '.join(refetched) if refetched else 'none'}",
             f"  {len(records)} checkpoints, chain verifies: "
             f"{'yes' if chain_ok else 'no'}; fences "
             f"{', '.join(map(str, fences))}",
             f"  pages CSV: {out}"]
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
    if argv and argv[0] in ("worker", "standby"):
        return worker_main(argv)
    p = argparse.ArgumentParser(prog="dhp demo", description=__doc__.splitlines()[0])
    add_arguments(p)
    return run(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
