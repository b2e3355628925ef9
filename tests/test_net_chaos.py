"""The TCP transport under real faults: a shipping worker SIGKILLed mid-frame over many rounds,
the server SIGKILLed and restarted, connections cut (spec: transport, DHP-TRN-017, -021)."""

from __future__ import annotations

import logging
import os
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from dhp import api
from dhp.core import chain
from dhp.core.errors import IntegrityError
from dhp.store import Store
from dhp.transport import server as net
from dhp.transport.shipper import NetShipper
from transport_helpers import (
    HERE,
    OUTPUT_SCHEMA,
    SECRET,
    Proxy,
    RawClient,
    ServerProcess,
    envelope,
    records,
    secret_file,
)

WORKER = HERE / "ship_worker.py"


class Worker:
    """ship_worker.py as a child; its output lines are collected by a thread."""

    def __init__(self, src: Path, buffer: Path, port: int, hid: str, steps: int, pad: int):
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            [str(HERE.parent), os.environ.get("PYTHONPATH", "")]))
        self.proc = subprocess.Popen(
            [sys.executable, str(WORKER), str(src), str(buffer), str(port), hid, str(steps),
             str(pad)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        self.lines: list[str] = []
        self.first = threading.Event()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            if line.endswith("\n"):
                self.lines.append(line.strip())
                self.first.set()
        self.first.set()

    def kill(self) -> None:
        self.proc.kill()
        self.finish()

    def finish(self, timeout: float = 60) -> None:
        self.proc.wait(timeout)
        self.reader.join(10)
        self.errors = self.proc.stderr.read()
        self.proc.stderr.close()

    def acked(self) -> set[int]:
        return {int(x.split()[1]) for x in self.lines
                if x.startswith("ack ") and x.split()[1].isdigit()}


def peer_chain(store, hid: str) -> list[dict]:
    try:
        found = api.checkpoints(store, hid)
    except api.NotFound:
        return []
    chain.verify_chain(hid, found)  # intact: no change, gap, repeat or reorder
    return found


@pytest.mark.covers("DHP-TRN-021", "DHP-TRN-017", "DHP-TRN-016", "DHP-TRN-023")
def test_shipper_sigkilled_mid_frame_over_many_rounds(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="dhp.transport")
    rng = random.Random(5)
    src = tmp_path / "src"
    store = Store(src)
    hid = api.dispatch(store, "test.ship", {"tag": "kill"}, OUTPUT_SCHEMA)
    store.close()
    steps, pad = 120, 60_000  # large frames: a kill usually lands in the middle of one
    acked: set[int] = set()
    kills = 0
    with net.TransportServer(tmp_path / "peer", port=0, secret=SECRET) as server:
        for _ in range(10):
            worker = Worker(src, tmp_path / "buffer.jsonl", server.port, hid, steps, pad)
            # let it get k more acks (bounded progress per round), then kill at a random instant
            k, deadline = rng.randint(1, 12), time.monotonic() + 20
            while len(worker.lines) < k and worker.proc.poll() is None \
                    and time.monotonic() < deadline:
                time.sleep(0.001)
            time.sleep(rng.uniform(0.0, 0.01))
            kills += worker.proc.poll() is None
            worker.kill()
            acked |= worker.acked()
            on_peer = {r["seq"] for r in peer_chain(server.store, hid)}
            assert acked <= on_peer, f"acknowledged but not on the peer: {acked - on_peer}"
        final = Worker(src, tmp_path / "buffer.jsonl", server.port, hid, steps, pad)
        final.finish()
        assert "done" in final.lines, (final.lines[-5:], final.errors[-3000:])
        shipped = peer_chain(server.store, hid)
        assert api.status(server.store, hid)["state"] == "completed"
        local = Store(src)
        assert shipped == api.checkpoints(local, hid), "the peer holds exactly the source chain"
        assert api.result(server.store, hid) == api.result(local, hid)
        local.close()
        assert [r["seq"] for r in shipped] == list(range(1, len(shipped) + 1))
    assert kills >= 8 and len(acked) > 0
    torn = sum("in the middle of a frame" in r.getMessage() or "reset by peer" in r.getMessage()
               for r in caplog.records)
    assert torn >= 3, "the kills should cut the server's connections mid-stream"


@pytest.mark.covers("DHP-TRN-021", "DHP-TRN-017", "DHP-TRN-024")
def test_server_killed_restarted_and_connections_cut_while_shipping(tmp_path):
    rng = random.Random(7)
    peer = tmp_path / "peer"
    server = ServerProcess(peer, secret_file(tmp_path))
    proxy = Proxy(server.port)
    acked_ids: list[int] = []
    ship = NetShipper("127.0.0.1", proxy.port, local_logpath=tmp_path / "buf.jsonl",
                          secret=SECRET, backoff=(0.01, 0.1), timeout=3,
                          on_ack=lambda i, dup: acked_ids.append(i))
    env = envelope("restarts")
    recs = records(env, 800, pad=1500)
    seq_of: dict[int, int] = {}

    def produce() -> None:
        for r in recs:
            seq_of[ship.ship_checkpoint(env, r)[-1]] = r["seq"]
            time.sleep(0.0005)

    producer = threading.Thread(target=produce)
    producer.start()
    try:
        for i in range(8):
            time.sleep(rng.uniform(0.05, 0.2))
            if i % 2 == 0:
                server.kill()
                acked = [seq_of[x] for x in list(acked_ids) if x in seq_of]
                look = Store(peer)
                on_peer = {r["seq"] for r in peer_chain(look, env["handoff_id"])}
                look.close()
                assert set(acked) <= on_peer, "an acknowledged frame was lost with the server"
                time.sleep(rng.uniform(0.0, 0.2))
                server.start()
            else:
                proxy.cut()
        producer.join()
        assert ship.flush(30), ship.last_error
        assert ship.rejected == []
    finally:
        producer.join()
        ship.close(timeout=1)
        proxy.close()
        server.stop()
    final = Store(peer)
    assert peer_chain(final, env["handoff_id"]) == recs
    final.close()
    assert proxy.cuts >= 4


@pytest.mark.covers("DHP-TRN-003", "DHP-TRN-006")
def test_dhp_transport_logs_each_connection_and_rejection(tmp_path):
    server = ServerProcess(tmp_path / "peer", secret_file(tmp_path), quiet=False)
    try:
        good = RawClient(server.port)
        good.send({"type": "envelope", "id": 0, "envelope": envelope("cli")})
        assert good.answers(1)[0]["type"] == "ack"
        good.send({"type": "checkpoint", "id": 1, "record": records(envelope("x"), 1)[0]})
        assert good.answers(1)[0]["error"]["code"] == "not_found"
        good.close()
        with pytest.raises(IntegrityError):  # the shipper refuses the server, not vice versa
            RawClient(server.port, b"not-the-right-secret-at-all")
        bad = RawClient(server.port, None)
        bad.send({"type": "auth", "proof": "00" * 32})
        assert bad.closed()
    finally:
        log = server.stop()
    lines = log.splitlines()
    assert sum("authenticated shipper" in x for x in lines) == 1
    assert sum("rejected connection" in x for x in lines) == 1
    assert sum("rejected checkpoint frame" in x and "not_found" in x for x in lines) == 1
    assert SECRET.decode() not in log
