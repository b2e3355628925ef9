"""Failover with real processes and real signals: kill -9 and takeover through the liveness
lock, a SIGSTOPped zombie, SIGTERM drain, and SIGKILL at random moments of a checkpoint loop.
No mock of the store or of time."""

from __future__ import annotations

import json
import os
import random
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from dhp import api as dhp
from dhp.core.errors import Conflict

WORKER = Path(__file__).resolve().parent / "helpers" / "worker.py"
SCHEMA = {"type": "object"}


def _spawn(store_path, hid, worker_id, mode, ttl=None, count=3):
    args = [sys.executable, str(WORKER), str(store_path), hid, worker_id, mode]
    if ttl is not None:
        args += [str(ttl), str(count)]
    return subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def _read_until_ready(proc) -> list[str]:
    lines = []
    for line in proc.stdout:
        lines.append(line.strip())
        if line.strip() == "ready":
            return lines
    raise AssertionError(f"worker exited early: {lines}, rc={proc.wait()}")


def _stop(proc):
    if proc.poll() is None:
        proc.kill()
    proc.wait()


@pytest.mark.covers("DHP-LSE-005", "DHP-LSE-009", "DHP-CKP-009", "DHP-CKP-010", "DHP-FEN-001")
def test_sigkill_is_taken_over_without_waiting_for_the_ttl(store_location, backend):
    store = dhp.Store(store_location)  # default ttl: 5 s
    hid = dhp.dispatch(store, "job", {"n": 1}, SCHEMA)
    proc = _spawn(store_location, hid, "w1", "hold")
    try:
        lines = _read_until_ready(proc)
        assert lines == ["fence 1", "ack 1", "ack 2", "ack 3", "ready"]
        with pytest.raises(Conflict):  # alive: its liveness lock is held
            dhp.recover(store, hid, "w2")
        killed = time.monotonic()
        os.kill(proc.pid, signal.SIGKILL)
        while True:  # a standby polls; the kernel drops the lock as the process dies
            try:
                ctx = dhp.recover(store, hid, "w2")
                break
            except Conflict:
                assert time.monotonic() - killed < 1.0, "not taken over within a second"
                time.sleep(0.005)
        took = time.monotonic() - killed
    finally:
        _stop(proc)
    assert took < 1.0  # vs. the 5 s TTL
    assert (ctx.fence, ctx.last_checkpoint, ctx.last_seq) == (2, {"step": 3, "by": "w1"}, 3)
    ctx.complete({"done": True})
    assert dhp.check_integrity(store) == []
    if backend == "sqlite":
        owners = {p.read_text().strip()
                  for p in (Path(store_location) / "liveness").glob("*.lock")}
        assert owners <= {str(os.getpid())}  # the dead worker's lock file was removed


@pytest.mark.covers("DHP-FEN-003", "DHP-FEN-004", "DHP-LSE-003", "DHP-LSE-005")
def test_sigstopped_zombie_keeps_its_lease_until_expiry_then_is_fenced_out(store_location):
    store = dhp.Store(store_location)
    hid = dhp.dispatch(store, "job", {"n": 2}, SCHEMA)
    proc = _spawn(store_location, hid, "zombie", "zombie", ttl=1.0, count=2)
    try:
        _read_until_ready(proc)
        os.kill(proc.pid, signal.SIGSTOP)  # between heartbeats (every 0.9 s)
        stopped = time.monotonic()
        with pytest.raises(Conflict):  # hung, not dead: the lock is still held
            dhp.recover(store, hid, "standby")
        assert dhp.status(store, hid)["state"] == "claimed"
        while True:
            try:
                ctx = dhp.recover(store, hid, "standby")
                break
            except Conflict:
                assert time.monotonic() - stopped < 3.0
                time.sleep(0.02)
        assert time.monotonic() - stopped >= 0.5  # only once the 1 s lease expired
        assert ctx.fence == 2 and ctx.last_checkpoint == {"step": 2, "by": "zombie"}
        ctx.checkpoint({"step": 3, "by": "standby"})
        proc.stdin.write("go\n")
        proc.stdin.flush()
        os.kill(proc.pid, signal.SIGCONT)
        outcome = json.loads(proc.stdout.readline())
        assert proc.wait(timeout=10) == 0
    finally:
        _stop(proc)
    assert outcome == {"checkpoint": "lease_lost", "heartbeat": "lease_lost",
                       "complete": "lease_lost", "release": "lease_lost"}
    status = dhp.status(store, hid)
    assert (status["state"], status["owner"], status["fence"]) == ("claimed", "standby", 2)
    assert status["checkpoints"] == {"count": 3, "last_seq": 3}
    assert [c["fence"] for c in dhp.checkpoints(store, hid)] == [1, 1, 2]
    ctx.complete({"by": "standby"})
    assert dhp.result(store, hid) == {"by": "standby"}


def test_sigterm_drains_the_leases_at_once(store_location):
    store = dhp.Store(store_location)
    hid = dhp.dispatch(store, "job", {"n": 3}, SCHEMA)
    proc = _spawn(store_location, hid, "w1", "hold")
    try:
        _read_until_ready(proc)
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=5) == 128 + signal.SIGTERM
    finally:
        _stop(proc)
    status = dhp.status(store, hid)
    assert (status["state"], status["owner"], status["checkpoints"]["count"]) == \
        ("released", None, 3)
    with dhp.claim(store, hid, "w2") as ctx:  # no wait for a TTL
        assert ctx.fence == 2


def _checkpoint_loop(path: str, hid: str, worker: str, out: int, pad: int) -> None:
    """The body of a forked child: take over, then checkpoint until killed, writing each
    acknowledged seq to `out` after the store acknowledged it."""
    try:
        store = dhp.Store(path)
        ctx = dhp.recover(store, hid, worker)
        while True:
            record = ctx.checkpoint({"by": worker, "pad": "x" * pad})
            os.write(out, f"{record['seq']}\n".encode())
    finally:
        os._exit(3)


def _settled(store, hid: str) -> tuple[int, int]:
    """(last stored seq, fence) once no write is in flight: a write transaction waits for the
    handoff's row lock. On a server store the COMMIT a killed worker sent just before it died
    still lands after its death; reading under the lock sees it or its rollback."""
    with store.transaction() as tx:
        fence = tx.get(hid, envelope=False)["record"]["fence"]
        link = tx.last_link(hid)
    return (link[0] if link else 0), fence


@pytest.mark.covers("DHP-CKP-009", "DHP-CKP-010", "DHP-CKP-008", "DHP-FEN-005")
def test_random_sigkill_mid_checkpoint_loses_nothing(store_location):
    kills = int(os.environ.get("DHP_KILLS", "50"))
    rng = random.Random(int(os.environ.get("DHP_SEED", "7")))
    path = store_location
    store = dhp.Store(path)
    hid = dhp.dispatch(store, "job", {"n": 4}, SCHEMA)
    acked_total = 0
    takeovers = 0
    for i in range(kills):
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read_end)
            _checkpoint_loop(path, hid, f"k{i}", write_end, rng.choice([10, 1000, 20000]))
        os.close(write_end)
        head = b""
        if rng.random() < 0.8:  # mostly mid-loop; sometimes during start-up and takeover
            ready, _, _ = select.select([read_end], [], [], 5.0)
            assert ready, "the child acknowledged nothing within 5 s"
            head = os.read(read_end, 65536)
        time.sleep(rng.uniform(0.0, 0.02))
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        with os.fdopen(read_end, "rb") as pipe:
            acked = [int(x) for x in (head + pipe.read()).split(b"\n") if x]
        stored, fence = _settled(store, hid)
        if acked:
            takeovers += 1
            assert acked == list(range(acked[0], acked[-1] + 1))
            assert acked[0] == acked_total + 1  # it resumed right after the last stored one
            acked_total = acked[-1]
        # every acknowledged checkpoint is there; at most one more was stored unacknowledged
        # (killed between commit and report), so a resuming worker redoes at most one step
        assert acked_total <= stored <= acked_total + 1, (i, acked, stored)
        acked_total = stored
        assert fence <= i + 1  # one fence per successful takeover, never two owners
    store.close()
    reopened = dhp.Store(path)
    assert dhp.check_integrity(reopened) == []
    records = dhp.checkpoints(reopened, hid)
    assert [r["seq"] for r in records] == list(range(1, len(records) + 1))
    assert len(records) == acked_total
    fences = [r["fence"] for r in records]
    assert fences == sorted(fences)
    assert takeovers >= kills // 2  # most kills landed inside the checkpoint loop
    reopened.close()
