#!/usr/bin/env python3
"""The transport server under the pre-authentication attack of issue 10: N connections that
never authenticate, each sending one frame of junk as fast as it can (up to 16 MiB each
before the frame cap of DHP-TRN-030), while one legitimate shipper ships checkpoints.

Prints one JSON line: the server's peak resident memory (its own process, MiB), the
legitimate shipper's acknowledged frames per second with and without the attack, and how
many attack connections failed outright (refused before any byte was read).

    python bench/preauth_attack.py [--attackers 48] [--seconds 5] [--quick]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import threading
import time
from pathlib import Path

import _common as C
from _common import log

SECRET = "bench-preauth-secret-0123456789abcdef"
SERVER = """
import sys, time
from dhp.transport.server import TransportServer
srv = TransportServer(sys.argv[1], port=0, secret=sys.argv[2], max_per_peer=100000).start()
print(srv.port, flush=True)
sys.stdin.read()
srv.stop()
"""


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


ATTACKER = """
import socket, sys, threading
port, count = int(sys.argv[1]), int(sys.argv[2])
junk = b'{"type":"hello","pad":"' + b"x" * (1 << 20)
cut = [0]
def attack():
    while True:
        try:
            sock = socket.create_connection(("127.0.0.1", port), timeout=5)
            try:
                for _ in range(16):
                    sock.sendall(junk)
            finally:
                sock.close()
        except OSError:
            cut[0] += 1
for _ in range(count):
    threading.Thread(target=attack, daemon=True).start()
sys.stdin.read()
print(cut[0], flush=True)
"""


def ship(port: int, seconds: float, folder: Path) -> float:
    from dhp import api
    from dhp.transport.shipper import NetShipper

    store = api.Store(folder / "worker")
    hid = api.dispatch(store, "bench", {"at": time.time()}, {})
    shipper = NetShipper("127.0.0.1", port, local_logpath=folder / f"buf{time.time()}",
                         secret=SECRET, fsync=False)
    acked = 0
    with api.claim(store, hid, "w", ship_to=shipper) as ctx:
        started = time.monotonic()
        while time.monotonic() - started < seconds:
            ctx.checkpoint({"n": acked, "pad": "p" * 1000})
            acked += 1
        shipper.flush(60)
        took = time.monotonic() - started
    shipper.close()
    store.close()
    return shipper.acked / took


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--attackers", type=int, default=48)
    p.add_argument("--seconds", type=float, default=5.0)
    args = C.parse(p, {"attackers": 8, "seconds": 1.5})
    run = C.Run("preauth_attack", args)
    folder = Path(C.scratch("preauth"))
    server = subprocess.Popen([sys.executable, "-c", SERVER, str(folder / "peer"), SECRET],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    port = int(server.stdout.readline())
    try:
        base = ship(port, args.seconds, folder)
        idle_rss = rss_mib(server.pid)
        # The attackers run in a process of their own, so they do not slow the shipper by
        # holding this process's GIL: what is measured is the server.
        attackers = subprocess.Popen([sys.executable, "-c", ATTACKER, str(port),
                                      str(args.attackers)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        stop = threading.Event()
        peak = [idle_rss]

        def watch() -> None:
            while not stop.is_set():
                peak[0] = max(peak[0], rss_mib(server.pid))
                time.sleep(0.05)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        time.sleep(1)
        loaded = ship(port, args.seconds, folder)
        stop.set()
        cut = int(attackers.communicate("", timeout=60)[0] or 0)
        log(f"baseline {base:.0f}/s, under attack {loaded:.0f}/s")
        run.finish({"attackers": args.attackers, "seconds": args.seconds,
              "server_rss_idle_mib": round(idle_rss, 1),
              "server_rss_peak_mib": round(peak[0], 1),
              "shipper_acks_per_s_baseline": round(base), "shipper_acks_per_s_attack":
              round(loaded), "throughput_kept": round(loaded / base, 2),
              "attack_connections_cut": cut})
    finally:
        server.stdin.close()
        server.wait(30)


if __name__ == "__main__":
    main()
