"""The reference implementation's conformance adapter: `python -m dhp.adapter`.

A thin JSON-lines wrapper over the SDK (spec/adapter.md): one request per stdin line, one
response per stdout line, flushed at once; logs go to stderr. Each `cmd_<op>` function maps one
request to one SDK call.

Fenced writes name (worker, fence) explicitly, so the kit can send stale or forged fences. The
adapter keeps the TaskContext of every take keyed by (handoff_id, worker, fence) and uses it
when the request matches; any other pair goes to the store's fenced write directly, which is
what a stale worker's late write looks like to the store.

The store. By default each `init`'s `data` folder is a SQLite store. `python -m dhp.adapter
--store URL` (or DHP_STORE=URL) puts the stores on a server instead: every `data` folder the
kit names gets its own schema in that database, `<schema>_<12 hex of the folder's hash>`
(`schema` from the URL, default `dhp`), so the kit's scenarios stay apart exactly as folders
do and the processes of one scenario share one store. The folder still holds the transport
buffers.

`init {"clock": "manual"}` gives the store a clock that only `advance_clock` moves (the
optional feature manual-clock, DHP-ADP-013), so the kit can run the decision-table vectors at
their exact instants. `supervise` runs one pass of this process's dhp.supervisor.Supervisor,
which keeps its leadership between passes like a long-running supervisor does.

The feature transport (DHP-ADP-016..019): `transport_serve` runs a dhp.TransportServer on
this process's store, `ship` queues a handoff in a dhp.NetShipper (one per destination,
its buffer under the data folder), `transport_flush` waits for the acknowledgements. The
feature file-transport (DHP-ADP-025, DHP-ADP-026): `file_ship` writes a handoff's log into
a shared folder with a dhp.FileShipper, `file_ingest` ingests the folder.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
import traceback
from pathlib import Path
from typing import Any

from dhp import __version__, api
from dhp.core import operations
from dhp.core.canonical import parse_json
from dhp.core.errors import Conflict, DHPError, InvalidInput, Unavailable
from dhp.supervisor import Supervisor
from dhp.transport import server as net
from dhp.transport.file import FileShipper, ingest_folder
from dhp.transport.shipper import NetShipper

PROTOCOL = "1"
FEATURES = ["claim_next", "export_log", "import_log", "supervise", "liveness", "manual-clock",
            "schedule", "failures", "transport", "transport-tls", "file-transport"]
# Kill -9 of an owner to a standby's successful recover: the liveness lock makes it a few
# milliseconds on one host; the declared bound leaves room for a loaded CI machine.
RECOVERY_BOUND_S = 1.0
LEADING_ID = re.compile(r'\s*\{\s*"id"\s*:\s*([0-9]+)\s*[,}]')


class ManualClock:
    """A store clock that stands still until advance_clock moves it (DHP-ADP-013)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def store_location(data: str, server: str | None) -> str:
    """The store of the kit's `data` folder: the folder itself, or its own schema on the
    server at URL `server`."""
    if not server:
        return data
    from dhp.store.postgres import split_location

    _, schema = split_location(server)
    digest = hashlib.sha256(os.path.abspath(data).encode()).hexdigest()[:12]
    rest = [p for p in server.partition("?")[2].split("&") if p and not p.startswith("schema=")]
    return f"{server.partition('?')[0]}?{'&'.join([*rest, f'schema={schema}_{digest}'])}"


def _fresh_schema_for_a_fresh_folder(data: Path, location: str) -> None:
    """A data folder the kit has just made gets a schema as new as itself: the first process
    to init it drops what an earlier run left under the same name (a reused --history folder
    maps to the same schema), so no run judges another run's leftovers."""
    data.mkdir(parents=True, exist_ok=True)
    try:
        os.close(os.open(data / ".dhp-adapter-schema", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return  # another process of this scenario made it fresh already
    import psycopg
    from psycopg import sql

    from dhp.store.postgres import split_location

    url, schema = split_location(location)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


class Adapter:
    def __init__(self, server: str | None = None) -> None:
        self.server_url = server  # a postgresql:// URL, or None for SQLite folders
        self.store: Any = None
        self.ttl = 5.0
        self.heartbeat: float | None = 0  # 0: the kit drives heartbeats itself (DHP-ADP-009)
        self.contexts: dict[tuple[str, str, int], api.TaskContext] = {}
        self.clock: ManualClock | None = None
        self.supervisor: Supervisor | None = None
        self.process = "adapter"
        self.data: Path | None = None
        self.server: net.TransportServer | None = None
        self.shippers: dict[tuple[str, int], NetShipper] = {}

    # --- handshake -------------------------------------------------------------------------
    def cmd_hello(self, args: dict) -> dict:
        if PROTOCOL not in args.get("protocols", []):
            raise InvalidInput(f"this adapter speaks adapter protocol {PROTOCOL}, not any of "
                               f"{args.get('protocols')}", requirement="DHP-ADP-003")
        return {"protocol": PROTOCOL, "dhp": "1.0",
                "implementation": {"name": "durable-handoff", "language": "python",
                                   "version": __version__},
                "classes": ["store", "supervisor", "transport"], "features": FEATURES,
                "recovery_bound_s": RECOVERY_BOUND_S}

    def cmd_init(self, args: dict) -> dict:
        clock = args.get("clock", "system")
        if clock not in ("system", "manual"):
            raise InvalidInput(f"clock must be 'system' or 'manual', not {clock!r}",
                               requirement="DHP-ADP-013")
        self.ttl = args["ttl"]
        interval = args.get("heartbeat_interval")
        self.heartbeat = None if interval is not None else 0  # None: the store's default
        self.clock = ManualClock() if clock == "manual" else None
        self.process = str(args.get("process") or "adapter")
        self.data = Path(args["data"])
        location = store_location(args["data"], self.server_url)
        if self.server_url:
            _fresh_schema_for_a_fresh_folder(self.data, location)
        self.store = api.Store(location, ttl=self.ttl,
                               heartbeat_interval=interval if interval else None,
                               clock=self.clock)
        return {}

    def cmd_advance_clock(self, args: dict) -> dict:
        if self.clock is None:
            raise InvalidInput("advance_clock needs init with clock 'manual'",
                               requirement="DHP-ADP-013")
        seconds = args["seconds"]
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) \
                or not 0 <= seconds < float("inf"):
            raise InvalidInput(f"seconds must be a finite number >= 0, not {seconds!r}",
                               requirement="DHP-ADP-013")
        self.clock.now += seconds
        return {"now": self.clock.now}

    # --- takes -----------------------------------------------------------------------------
    def _held(self, ctx: api.TaskContext | None) -> dict | None:
        if ctx is None:
            return None
        self.contexts[(ctx.handoff_id, ctx.worker_id, ctx.fence)] = ctx
        return {"handoff_id": ctx.handoff_id, "worker": ctx.worker_id, "fence": ctx.fence,
                "last_checkpoint": ctx.last_checkpoint,
                "last_seq": ctx.last_seq or None}  # None: no checkpoint (DHP-ADP-022)

    def cmd_claim(self, args: dict) -> dict:
        return self._held(api.claim(self.store, args["handoff_id"], args["worker"],
                                    ttl=args.get("ttl"), heartbeat_interval=self.heartbeat))

    def cmd_recover(self, args: dict) -> dict:
        return self._held(api.recover(self.store, args["handoff_id"], args["worker"],
                                      ttl=args.get("ttl"), heartbeat_interval=self.heartbeat))

    def cmd_claim_next(self, args: dict) -> dict | None:
        return self._held(api.claim_next(self.store, args["task_kinds"], args["worker"],
                                         ttl=args.get("ttl"), heartbeat_interval=self.heartbeat,
                                         wait=args.get("wait")))

    # --- fenced writes ---------------------------------------------------------------------
    def _write(self, name: str, args: dict, **kwargs: Any) -> Any:
        key = (args["handoff_id"], args["worker"], args["fence"])
        ctx = self.contexts.get(key)
        if ctx is not None and args.get("ttl") in (None, ctx.ttl):
            return getattr(ctx, name)(**kwargs)
        liveness = self.store.liveness
        return operations.write(self.store, key[0], name, key[1], key[2], ttl=args.get("ttl"),
                                incarnation=liveness.token() if liveness else None, **kwargs)

    def cmd_heartbeat(self, args: dict) -> dict:
        self._write("heartbeat", args)
        return {}

    def cmd_checkpoint(self, args: dict) -> dict:
        return {"record": self._write("checkpoint", args, state=args["state"],
                                      spend=args.get("spend", 0))}

    def cmd_complete(self, args: dict) -> dict:
        return {"record": self._write("complete", args, result=args["result"])}

    def cmd_release(self, args: dict) -> dict:
        self._write("release", args, delay_s=args.get("delay_s"),
                    backoff=bool(args.get("backoff")), failure=args.get("failure"))
        return {}

    # --- reads and operator operations -----------------------------------------------------
    def cmd_dispatch(self, args: dict) -> dict:
        if "intent" in args:  # a whole intent, verbatim: checked as one (DHP-ADP-021)
            return {"handoff_id": api.dispatch_intent(
                self.store, args["intent"], progress_timeout_s=args.get("progress_timeout_s"),
                delay_s=args.get("delay_s"))}
        if "budget" in args and not isinstance(args["budget"], dict):
            raise InvalidInput(f"budget must be an object, not {args['budget']!r}",
                               requirement="DHP-ID-003")
        hid = api.dispatch(self.store, args["task_kind"], args["inputs"], args["output_schema"],
                           budget=args.get("budget"),
                           progress_timeout_s=args.get("progress_timeout_s"),
                           delay_s=args.get("delay_s"))
        return {"handoff_id": hid}

    def cmd_status(self, args: dict) -> dict:
        return api.status(self.store, args["handoff_id"])

    def cmd_last_checkpoint(self, args: dict) -> dict:
        records = api.checkpoints(self.store, args["handoff_id"])
        if not records:
            return {"found": False, "state": None, "seq": None}
        return {"found": True, "state": records[-1]["state"], "seq": records[-1]["seq"]}

    def cmd_result(self, args: dict) -> dict:
        if api.status(self.store, args["handoff_id"])["state"] != "completed":
            return {"completed": False, "result": None}
        return {"completed": True, "result": api.result(self.store, args["handoff_id"])}

    def cmd_cancel(self, args: dict) -> dict:
        api.cancel(self.store, args["handoff_id"])
        return {}

    def cmd_requeue(self, args: dict) -> dict:
        api.requeue(self.store, args["handoff_id"])
        return {}

    def cmd_dlq(self, args: dict) -> dict:
        return {"entries": api.dlq(self.store)}

    def cmd_export_log(self, args: dict) -> dict:
        api.export_log(self.store, args["handoff_id"], Path(args["path"]))
        return {"path": args["path"]}

    def cmd_import_log(self, args: dict) -> dict:
        return {"handoff_id": api.import_log(self.store, Path(args["path"]))}

    def cmd_supervise(self, args: dict) -> dict:
        """One pass of this process's supervisor; only the elected leader acts."""
        if self.supervisor is None:
            self.supervisor = Supervisor(self.store, f"{self.process}-{os.getpid()}",
                                         out=lambda line: None)
        actions = self.supervisor.run_pass()
        errors = [a["reason"] for a in actions if a["action"] == "error"]
        if errors:
            raise Unavailable(f"supervisor pass failed: {errors[0]}")
        return {"leader": self.supervisor.is_leader, "leader_fence": self.supervisor.fence,
                "orphaned": [a["handoff_id"] for a in actions if a["action"] == "orphan"],
                "dead_lettered": [a["handoff_id"] for a in actions
                                  if a["action"] == "dead_letter"]}

    # --- transport (features transport, transport-tls) -----------------------------------
    def cmd_transport_serve(self, args: dict) -> dict:
        """A TransportServer storing into this process's store (DHP-ADP-016)."""
        if self.server is not None:
            raise Conflict("a transport server already runs in this process",
                           requirement="DHP-ADP-016")
        tls = args.get("tls")
        context = None
        if tls is not None:
            context = net.server_ssl_context(tls["cert"], tls["key"],
                                             client_cafile=tls.get("client_ca"))
        max_frame = max(int(args.get("max_frame") or net.DEFAULT_MAX_FRAME), net.MIN_MAX_FRAME)
        server = net.TransportServer(self.store, args.get("host", "127.0.0.1"),
                                     int(args.get("port", 0)), secret=args["secret"],
                                     ssl_context=context, max_frame=max_frame)
        self.server = server.start()
        return {"port": server.port, "max_frame": server.max_frame}

    def cmd_ship(self, args: dict) -> dict:
        """Queue a handoff's envelope, chain and result in the shipper for the destination;
        answers once buffered, never waiting for the network (DHP-ADP-017, DHP-TRN-023)."""
        host, port = args["host"], int(args["port"])
        shipper = self.shippers.get((host, port))
        if shipper is None:
            tls = args.get("tls")
            context = None if tls is None else net.client_ssl_context(tls.get("ca"))
            buffer = self.data / "transport" / f"ship-{host}-{port}.buffer"
            shipper = NetShipper(host, port, local_logpath=buffer, secret=args["secret"],
                                     ssl_context=context, name=self.process)
            self.shippers[(host, port)] = shipper
        hid = args["handoff_id"]
        row = operations.get_row(self.store, hid)
        ids = shipper.ship_chain(row["envelope"], api.checkpoints(self.store, hid),
                                 row["result"])
        return {"frames": len(ids)}

    def cmd_transport_flush(self, args: dict) -> dict:
        """Wait until every shipper's frames are settled (DHP-ADP-018)."""
        timeout = float(args.get("timeout", 5.0))
        delivered = all([s.flush(timeout) for s in self.shippers.values()])
        rejected = [{"id": i, "error": e.to_dict()} for s in self.shippers.values()
                    for i, e in s.rejected]
        return {"delivered": delivered, "rejected": rejected}

    def cmd_transport_stop(self, args: dict) -> dict:
        """Stop the server and every shipper of this process (DHP-ADP-019)."""
        server, self.server = self.server, None
        if server is not None:
            server.stop()
        shippers, self.shippers = list(self.shippers.values()), {}
        for shipper in shippers:
            shipper.close(timeout=0)
        return {}

    # --- the file transport (feature file-transport) ------------------------------------
    def cmd_file_ship(self, args: dict) -> dict:
        """The handoff's log into its file in the shared folder (DHP-ADP-025)."""
        hid = args["handoff_id"]
        row = operations.get_row(self.store, hid)
        with FileShipper(args["folder"]) as shipper:
            shipper.ship_chain(row["envelope"], api.checkpoints(self.store, hid), row["result"])
        return {}

    def cmd_file_ingest(self, args: dict) -> dict:
        """Every handoff file of the shared folder into this store (DHP-ADP-026)."""
        found = ingest_folder(self.store, args["folder"])
        return {"files": {name: {"error": r["error"]} if "error" in r
                          else {"handoff_id": r["handoff_id"]} for name, r in found.items()}}

    # --- the loop --------------------------------------------------------------------------
    def handle(self, line: str) -> dict:
        try:
            request = json.loads(line)
            rid, op, args = request["id"], request["op"], request.get("args") or {}
        except RecursionError:  # nested too deeply to parse (DHP-SEC-002): answer its id
            head = LEADING_ID.match(line)
            error = InvalidInput("the request is nested too deeply to parse",
                                 requirement="DHP-SEC-002")
            return {"id": int(head[1]) if head else 0, "ok": False, "error": error.to_dict()}
        except (ValueError, KeyError, TypeError) as exc:
            error = InvalidInput(f"not a request line ({exc}): {line[:200]!r}",
                                 requirement="DHP-ADP-001")
            return {"id": 0, "ok": False, "error": error.to_dict()}
        try:
            args = parse_json(line)["args"]  # strict: duplicate members, NaN (DHP-CJ-*)
        except DHPError as exc:
            return {"id": rid, "ok": False, "error": exc.to_dict()}
        command = getattr(self, f"cmd_{op}", None)
        try:
            if command is None:
                raise InvalidInput(f"unknown op {op!r}", requirement="DHP-ADP-001")
            if self.store is None and op not in ("hello", "init"):
                raise InvalidInput(f"{op} before init", requirement="DHP-ADP-004")
            return {"id": rid, "ok": True, "data": command(args)}
        except DHPError as exc:
            return {"id": rid, "ok": False, "error": exc.to_dict()}
        except KeyError as exc:
            error = InvalidInput(f"{op}: missing argument {exc}", requirement="DHP-ADP-001")
            return {"id": rid, "ok": False, "error": error.to_dict()}
        except Exception as exc:  # an adapter or SDK bug: report it, stay up
            trace = traceback.format_exc()
            print(trace, file=sys.stderr, flush=True)
            return {"id": rid, "ok": False,
                    "error": {"code": "internal", "message": f"{type(exc).__name__}: {exc}",
                              "definite": False, "details": {"traceback": trace}}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dhp.adapter",
                                     description="The reference's conformance adapter.")
    parser.add_argument("--store", default=os.environ.get("DHP_STORE") or None, metavar="URL",
                        help="a postgresql:// URL: each data folder of the kit gets its own "
                             "schema there (default: $DHP_STORE; else SQLite in the folder)")
    args = parser.parse_args(argv)
    if args.store and "://" not in args.store:
        args.store = None  # DHP_STORE naming a folder: the kit's folders win
    adapter = Adapter(args.store)
    for line in sys.stdin:
        if not line.strip():
            continue
        response = adapter.handle(line)
        sys.stdout.write(json.dumps(response, ensure_ascii=False) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
