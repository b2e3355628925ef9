"""`dhp dashboard`: a live web view of a store, served by the standard library.

The page (static/, plain HTML/CSS/JS, no build step) polls a small JSON API once a second:

    GET  /api/overview                 counts by state, leases, DLQ depth, supervisor leadership
    GET  /api/handoffs?state=&kind=&sort=   running work first (sort=active, the default)
                                       or newest first (sort=newest); at most 500, each
                                       with its age (dhp.observe.listing)
    GET  /api/series?minutes=60        per-minute handoffs by state, completions and
                                       takeover delays, for the charts (dhp.observe.series)
    GET  /api/handoffs/ID              status, envelope, checkpoints with the chain verified,
                                       result or DLQ reason, and the timeline (every take
                                       and lost lease, from the lease journal)
    POST /api/handoffs/ID/requeue      needs `Authorization: Bearer TOKEN`; refused with
    POST /api/handoffs/ID/cancel       --read-only
    GET  /metrics                      Prometheus text (with the `otel` extra)

Mutating calls need the token printed at start: a page on 127.0.0.1 is still reachable by
every local user and by other sites' scripts through the browser, so knowing the URL is not
enough to change work. Off loopback every API read needs it too (the page sends the token it
was given in the URL's `#token=` fragment). The server meets the bar of every DHP server
(dhp.transport.http_threaded): Host and Origin checked on loopback, connections capped,
requests that do not arrive within the read timeout cut off.
"""

from __future__ import annotations

import hmac
import json
import secrets
import sys
import threading
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, urlparse

from dhp import api
from dhp.core import chain, journal
from dhp.core.errors import Conflict, DHPError, IntegrityError, InvalidInput, NotFound
from dhp.core.failures import summary
from dhp.observe import listing, metrics
from dhp.observe.series import Series
from dhp.transport.http_guard import Access, Limits, loopback
from dhp.transport.http_threaded import GuardedHandler, GuardedServer

STATIC = {"/": ("index.html", "text/html; charset=utf-8"),
          "/app.js": ("app.js", "text/javascript; charset=utf-8"),
          "/style.css": ("style.css", "text/css; charset=utf-8"),
          "/favicon.svg": ("favicon.svg", "image/svg+xml")}
LIST_LIMIT = 500
CHAIN_ROWS = 50      # the chain is verified whole; the page shows its last records
STATE_PREVIEW = 400  # characters of a checkpoint's state shown in the chain table


def overview(store: Any) -> dict:
    counts = metrics.store_counts(store)
    return dict(counts, supervisor=leadership(store))


def leadership(store: Any) -> dict | None:
    """The supervisors' leadership row, where the backend has one."""
    try:
        from dhp.supervisor import LEADERSHIP

        with store.transaction(write=False) as tx:
            row = tx.get_leader(LEADERSHIP)
            now = store.now()
    except DHPError:
        return None
    if row is None:
        return None
    return {"holder": row["holder"], "fence": row["fence"],
            "expires_in": round(row["expires_at"] - now, 3)}


def handoff_list(store: Any, state: str | None, kind: str | None,
                 sort: str | None = None) -> list[dict]:
    """One page (costs the same at any store size), each with its `age_s` since dispatch."""
    return listing.handoffs(store, state, kind, sort, LIST_LIMIT)


def handoff_detail(store: Any, hid: str) -> dict:
    status = api.status(store, hid)
    envelope = api.envelope_of(store, hid)
    records = api.checkpoints(store, hid)
    verifier = chain.ChainVerifier(hid)
    problem = None
    for record in records:
        try:
            verifier.add(record)
        except (IntegrityError, InvalidInput) as exc:
            problem = f"seq {record.get('seq')}: {exc}"
            break
    result = api.result(store, hid) if status["state"] == "completed" else None
    rows = [{"seq": r["seq"], "fence": r["fence"], "hash": r["hash"],
             "state": json.dumps(r["state"])[:STATE_PREVIEW]} for r in records[-CHAIN_ROWS:]]
    with store.transaction(write=False) as tx:
        journaled = tx.lease_events(hid)
    return {"status": status, "envelope": envelope, "checkpoints": rows,
            "chain": {"verified": problem is None, "problem": problem, "count": len(records)},
            "result": result, "timeline": timeline(envelope, status, records, journaled)}


LOST = {journal.EXPIRED: "lease expired", journal.OWNER_DEAD: "owner process dead",
        journal.NO_PROGRESS: "no progress within the progress timeout"}


def timeline(envelope: dict, status: dict, records: list[dict],
             journaled: list[dict]) -> list[dict]:
    """Dispatch; each take from the lease journal (claim, recover, claim_next, or a fence
    imported from a peer) with its worker and the checkpoints made under its fence, and
    each lease lost (orphan), and each failed attempt with its error, in fence order; then
    the end. A fence with checkpoints but no
    journal entry (taken before the store kept a journal, or beyond its bound) shows as
    `taken`, its worker unknown."""
    by_fence: dict[int, list[int]] = {}
    for record in records:
        by_fence.setdefault(record["fence"], []).append(record["seq"])

    def made(fence: int) -> str:
        seqs = by_fence.get(fence, [])
        return f"checkpoints {seqs[0]}–{seqs[-1]}" if seqs else "no checkpoint"

    steps = []  # (fence, 0 for a take or 1 for a loss, event)
    for e in journaled:
        if e["event"] == "orphan":
            steps.append((e["fence"], 1, {"what": "lost", "fence": e["fence"],
                                          "worker": e["worker"], "at": e["wall"],
                                          "detail": LOST.get(e["how"], e["how"])}))
            continue
        detail = made(e["fence"])
        if e["event"] == "import":
            detail = f"taken on a peer, imported; {detail}"
        if e["lost_s"] is not None:
            detail += f"; {e['lost_s']:.3f} s after the owner was lost " \
                      f"({LOST.get(e['how'], e['how'])})"
        steps.append((e["fence"], 0, {"what": e["event"], "fence": e["fence"],
                                      "worker": e["worker"], "at": e["wall"],
                                      "detail": detail}))
    for f in status.get("failures", []):  # after its take, before a loss of that fence
        steps.append((f["fence"], 0.5, {"what": "failed", "fence": f["fence"],
                                        "worker": f["worker"], "at": f["at"],
                                        "detail": f"attempt {f['attempt']}: {summary(f)}",
                                        "traceback": f["traceback"]}))
    taken = {e["fence"] for e in journaled if e["event"] != "orphan"}
    for fence in set(by_fence) - taken:
        steps.append((fence, 0, {"what": "taken", "fence": fence, "worker": None,
                                 "detail": made(fence)}))
    events = [{"what": "dispatched", "at": envelope.get("created_at"),
               "detail": envelope["intent"]["task_kind"]}]
    events += [event for _fence, _order, event in sorted(steps, key=lambda s: s[:2])]
    end = {"completed": "completed", "dead_lettered": "dead-lettered",
           "cancelled": "cancelled"}.get(status["state"])
    if end:
        events.append({"what": end, "detail": status["dlq_reason"] or ""})
    return events


class Dashboard(GuardedServer):
    def __init__(self, address: tuple[str, int], store: Any, *, token: str,
                 read_only: bool = False, allowed_hosts: frozenset[str] = frozenset()):
        host = address[0]
        # On loopback reads are open to the local user (the Host check stops other sites);
        # off loopback the token is the credential for every read as well.
        access = Access(host, tokens={} if loopback(host) else {token: "operator"},
                        allowed_hosts=allowed_hosts, realm="dhp-dashboard")
        super().__init__(address, Handler, access, Limits())
        self.store, self.token, self.read_only = store, token, read_only
        self.series, self.sampling = Series(store), threading.Event()

    def server_close(self) -> None:
        self.sampling.set()  # stops the series sampler
        super().server_close()

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}/"


class Handler(GuardedHandler):
    server: Dashboard

    def _error(self, code: int, message: str) -> None:
        self.send_json(code, {"error": message})

    def do_GET(self) -> None:  # noqa: N802 (the http.server interface)
        url = urlparse(self.path)
        if self.admit(token_optional=url.path in STATIC) is None:
            return
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        store = self.server.store
        try:
            if url.path in STATIC:
                name, kind = STATIC[url.path]
                body = resources.files("dhp.observe").joinpath("static", name).read_bytes()
                return self.send_body(200, body, kind)
            if url.path == "/api/overview":
                return self.send_json(200, dict(overview(store), read_only=self.server.read_only))
            if url.path == "/api/handoffs":
                return self.send_json(200, handoff_list(store, query.get("state"),
                                                    query.get("kind"), query.get("sort")))
            if url.path == "/api/series":
                minutes = query.get("minutes", "60")
                if not minutes.isdigit():
                    raise InvalidInput(f"minutes must be a whole number, not {minutes!r}")
                return self.send_json(200, self.server.series.window(int(minutes)))
            if url.path.startswith("/api/handoffs/"):
                return self.send_json(200, handoff_detail(store, url.path.split("/")[3]))
            if url.path == "/metrics":
                return self._metrics()
            self._error(404, f"no page {url.path}")
        except NotFound as exc:
            self._error(404, str(exc))
        except DHPError as exc:
            self._error(400, str(exc))

    def do_POST(self) -> None:  # noqa: N802
        if self.admit() is None:
            return
        parts = urlparse(self.path).path.split("/")
        if len(parts) != 5 or parts[:3] != ["", "api", "handoffs"] or \
                parts[4] not in ("requeue", "cancel"):
            return self._error(404, f"no action {self.path}")
        if self.server.read_only:
            return self._error(403, "this dashboard is read-only (--read-only)")
        given = self.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        if not hmac.compare_digest(given.encode(), self.server.token.encode()):
            return self._error(401, "requeue and cancel need the token that `dhp dashboard` "
                                    "printed at start (Authorization: Bearer TOKEN)")
        hid, action = parts[3], parts[4]
        try:
            (api.requeue if action == "requeue" else api.cancel)(self.server.store, hid)
        except NotFound as exc:
            return self._error(404, str(exc))
        except (Conflict, DHPError) as exc:
            return self._error(409, str(exc))
        self.send_json(200, {"ok": True, "status": api.status(self.server.store, hid)})

    def _metrics(self) -> None:
        try:
            from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
        except ImportError:
            return self._error(404, "metrics need the `otel` extra (pip install "
                                    "'durable-handoff[otel]')")
        self.send_body(200, generate_latest(), CONTENT_TYPE_LATEST)


def serve(store: Any, bind: str, *, read_only: bool = False, token: str | None = None,
          ready: threading.Event | None = None,
          allowed_hosts: frozenset[str] = frozenset()) -> Dashboard:
    """Start the dashboard in a background thread; returns the server (`.url`, `.token`)."""
    host, _, port = bind.rpartition(":")
    if not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise InvalidInput(f"--bind {bind!r}: give HOST:PORT with a port in 0..65535")
    server = Dashboard((host, int(port)), store, token=token or secrets.token_urlsafe(18),
                       read_only=read_only, allowed_hosts=allowed_hosts)
    try:
        metrics.prometheus_reader()
        metrics.observe_store(store)
    except ImportError:
        print("dhp dashboard: no metrics endpoint (install the `otel` extra)", file=sys.stderr)
    threading.Thread(target=server.series.run, args=(server.sampling,), daemon=True,
                     name="dhp-dashboard-series").start()
    threading.Thread(target=server.serve_forever, daemon=True, name="dhp-dashboard").start()
    return server
