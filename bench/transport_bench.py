"""Checkpoints shipped and acknowledged per second over loopback TCP, ours and the original.

For each side and each case (1 shipper, 8 shippers; plaintext and TLS) a server child process
is started on a fresh folder, then a shipper child process runs the shippers (one thread and
one handoff each). Each shipper first ships a small warm-up handoff, untimed (imports, schema
compilation, the connection); then the clock runs while every shipper ships --count
checkpoints (states of --size bytes) as fast as they are offered, and stops when the last
one is acknowledged.

Durability. Ours acknowledges a frame only after the server's SQLite store committed it with
synchronous=FULL (fsync), and the shipper fsyncs its local buffer before sending. The
original's server appends each line to a log file without fsync and its shipper's local log
is not fsynced either, so the original runs at weaker durability than ours: the ratio is
conservative. The original has no TLS; its TLS cells are null.

The sides take turns run by run (A B, B A, ...), --rounds runs each per case; in a TLS case
the original runs plain in the same turns (it has no TLS). Prints one JSON line: per side
and case the rate (checkpoints/s, median of the runs), and the ours/original ratios (target
>= 5): the median of the per-turn ratios with their min-max spread.
Usage: python bench/transport_bench.py [--count 5000] [--size 200] [--rounds 5]
       [--sides ours,orig] [--quick]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import threading
import time

import _common as C

SCRIPT = "transport_bench.py"
SECRET = "bench-transport-secret-0123456789"
CASES = [(1, False), (8, False), (1, True), (8, True)]


# --- children ----------------------------------------------------------------------------------

def child_server(side: str, root: str, tls: str) -> None:
    """Serve until terminated; print the port first."""
    if side == "ours":
        from dhp.transport import server as net
        ctx = net.server_ssl_context(*tls.split(",")) if tls else None
        server = net.TransportServer(root, "127.0.0.1", 0, secret=SECRET, ssl_context=ctx)
        server.bind()
        print(f"port {server.port}", flush=True)
        server.start()
    else:
        os.environ["DHP_TRANSPORT_TOKEN"] = SECRET
        import socket

        from dhp.net import TransportServer  # the original's module names
        with socket.socket() as probe:  # it cannot pick a free port itself
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        server = TransportServer(root, host="127.0.0.1", port=port, token=SECRET)
        server.start_background()
        time.sleep(0.3)
        print(f"port {port}", flush=True)
    signal.sigwait({signal.SIGTERM, signal.SIGINT})


def _ours_job(port: int, tls: str, buffer: str, count: int, size: int, tag: str):
    """(warm, run): warm ships a small handoff first, untimed (imports, schema compilation,
    connection); run ships `count` checkpoints of another handoff and waits for every ack."""
    from dhp.core import chain
    from dhp.core.envelope import make_envelope, make_intent
    from dhp.transport import server as net
    from dhp.transport.shipper import NetShipper

    def chain_of(name: str, n: int):
        env = make_envelope(make_intent("bench.ship", {"tag": name}, C.OUTPUT_SCHEMA))
        hid, prev, recs = env["handoff_id"], env["handoff_id"], []
        for i in range(n):
            rec = chain.make_record(hid, i + 1, 1, C.padded_state(size, i), 0, prev)
            prev = rec["hash"]
            recs.append(rec)
        return env, recs

    warm_env, warm_recs = chain_of(f"{tag}-warm", 10)
    env, recs = chain_of(tag, count)
    ctx = net.client_ssl_context(tls.split(",")[0]) if tls else None
    ship = NetShipper("127.0.0.1", port, local_logpath=buffer, secret=SECRET,
                          ssl_context=ctx)

    def warm() -> None:
        for rec in warm_recs:
            ship.ship_checkpoint(warm_env, rec)
        if not ship.flush(60):
            raise RuntimeError(f"warm-up not acknowledged: {ship.last_error}")

    def run() -> None:
        for rec in recs:
            ship.ship_checkpoint(env, rec)
        if not ship.flush(600):
            raise RuntimeError(f"not all acknowledged: {ship.last_error}")
        ship.close()
    return warm, run


def _orig_job(port: int, tls: str, buffer: str, count: int, size: int, tag: str):
    from dhp import envelope as E  # the original's module names
    from dhp.net import NetShipper
    warm_env = E.build("bench.ship", {"tag": f"{tag}-warm"}, C.OUTPUT_SCHEMA)
    env = E.build("bench.ship", {"tag": tag}, C.OUTPUT_SCHEMA)
    states = [C.padded_state(size, i) for i in range(count)]
    ship = NetShipper("127.0.0.1", port, token=SECRET, local_logpath=buffer)

    def warm() -> None:
        ship.ship_envelope(warm_env["handoff_id"], warm_env)
        for i in range(10):
            ship.ship_checkpoint(warm_env["handoff_id"], i + 1, states[i])

    def run() -> None:
        ship.ship_envelope(env["handoff_id"], env)  # reconnects: one connection per handoff
        for i, state in enumerate(states):
            ship.ship_checkpoint(env["handoff_id"], i + 1, state)  # waits for the answer
        ship.close()
    return warm, run


def child_ship(side: str, port: str, shippers: str, count: str, size: str, tls: str) -> None:
    make = _ours_job if side == "ours" else _orig_job
    folder = C.scratch(f"ship-{side}")
    jobs = [make(int(port), tls, os.path.join(folder, f"buf{i}.jsonl"), int(count), int(size),
                 f"{time.time()}-{i}") for i in range(int(shippers))]
    errors: list[BaseException] = []

    def guarded(step) -> None:
        try:
            step()
        except BaseException as exc:  # reported below; a failed run must not look fast
            errors.append(exc)

    for warm, _ in jobs:
        guarded(warm)
    threads = [threading.Thread(target=guarded, args=(run,)) for _, run in jobs]
    begin = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - begin
    if errors:
        raise SystemExit(f"{side}: {errors[0]!r}")
    total = int(shippers) * int(count)
    C.emit({"per_s": round(total / elapsed, 1), "checkpoints": total,
            "seconds": round(elapsed, 3)})


# --- the driver --------------------------------------------------------------------------------

def _server(side: str, tls: str) -> tuple[subprocess.Popen, int]:
    root = C.scratch(f"transport-{side}")
    proc = subprocess.Popen(C.child_cmd(side, SCRIPT, "server", root, tls),
                            stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    if not line.startswith("port "):
        proc.kill()
        raise RuntimeError(f"{side} server did not start")
    return proc, int(line.split()[1])


def measure(side: str, shippers: int, tls: str, args) -> float:
    proc, port = _server(side, tls)
    try:
        out = C.run_child(side, SCRIPT, "ship", str(port), str(shippers), str(args.count),
                          str(args.size), tls, timeout=900)
    finally:
        proc.terminate()
        proc.wait(10)
    return out["per_s"]


def _cert() -> str:
    """A throwaway self-signed certificate for 127.0.0.1: "cert,key"."""
    folder = C.scratch("tls")
    cert, key = os.path.join(folder, "c.pem"), os.path.join(folder, "k.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1", "-subj",
                    "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
                    "-keyout", key, "-out", cert], check=True, capture_output=True)
    return f"{cert},{key}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=5000, help="checkpoints per shipper")
    ap.add_argument("--size", type=int, default=200, help="bytes of JSON per state")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--sides", default="ours,orig")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = C.parse(ap, {"count": 300, "rounds": 2})
    if args.child:
        side, role, *rest = args.child
        if role == "server":
            child_server(side, *(rest + [""])[:2])
        else:
            child_ship(side, *(rest + [""])[:5])
        return
    run = C.Run("transport", args)
    sides = args.sides.split(",")
    cert = _cert()
    rates: dict[str, dict[str, float | None]] = {s: {} for s in sides}
    runs: dict[str, dict[str, list[float]]] = {s: {} for s in sides}
    ratio = {}
    for shippers, tls in CASES:
        name = f"{shippers}_shipper{'s' if shippers > 1 else ''}_{'tls' if tls else 'plain'}"

        def one(side: str, r: int, shippers=shippers, tls=tls) -> float:
            # The original has no TLS: in a TLS case it runs plain, as the reference.
            return measure(side, shippers, cert if tls and side != "orig" else "", args)

        got = C.interleave(sides, args.rounds, one, name)
        for side in sides:
            runs[side][name] = got[side]
            plain_only = side == "orig" and tls
            rates[side][name] = None if plain_only else round(statistics.median(got[side]), 1)
            C.log(f"{side} {name}: {got[side]}")
        if "ours" in got and "orig" in got:
            ratio[name] = C.paired(got["ours"], got["orig"])
    run.finish({"unit": "checkpoints acknowledged per second",
                "count_per_shipper": args.count, "state_bytes": args.size,
                "rounds": args.rounds, "rates": rates, "runs": runs,
                "ratio_ours_over_orig": ratio,
                "ratio_note": "TLS cases: ours with TLS against the original without it, "
                              "run plain in the same windows (it has no TLS)",
                "durability": {
                    "ours": "server: SQLite WAL synchronous=FULL commit before each ack (one "
                            "fsync per batch); shipper: buffer fsynced before sending",
                    "orig": "server: log line appended without fsync; shipper: local log "
                            "appended without fsync"}})


if __name__ == "__main__":
    sys.exit(main())
