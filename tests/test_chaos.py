"""Randomized SIGKILL of real worker processes in the middle of checkpoints.

A handoff of STEPS steps is worked by a chain of worker processes (tests/chaos_worker.py).
Two standbys always wait, polling `recover` (refused while the owner lives). Each round the
test grants the current owner a few steps, SIGKILLs it at a random moment within them
(seeded; the seed is printed and named in every failure), and the standbys race to take
over. Afterwards it checks, from what the processes printed and from the store:
  - zero acknowledged checkpoints lost: every acked (seq, hash) is in the final chain;
  - zero double ownership: fences strictly increase across incarnations, one incarnation per
    fence, every record written under its own writer's fence, the chain verifies;
  - rework at most one checkpoint per kill: a killed worker's only unacknowledged step is the
    one in flight, and every step's state is in the chain exactly once;
  - the work completes exactly once, with the total of exactly one pass over the steps.

DHP_CHAOS_SEED=N reproduces a run; DHP_CHAOS_KILLS=N changes the number of kills (default 55).
"""

from __future__ import annotations

import os
import random
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from dhp import api
from dhp.core import chain

sys.path.insert(0, str(Path(__file__).resolve().parent))
from chaos_worker import OUTPUT_SCHEMA, value  # noqa: E402

WORKER = Path(__file__).resolve().parent / "chaos_worker.py"
KILLS = int(os.environ.get("DHP_CHAOS_KILLS", "55"))
MAX_GRANT = 4
STEPS = KILLS * MAX_GRANT + 40  # every round's grant fits; the last worker finishes the rest
STANDBYS = 2
TAKEOVER_BOUND_S = 2.5  # well under the 5 s lease: takeover must not wait for the TTL


class Worker:
    """A chaos_worker.py process and the lines it printed, with arrival times."""

    count = 0

    def __init__(self, store: str, hid: str):
        Worker.count += 1
        self.n = Worker.count
        self.proc = subprocess.Popen(
            [sys.executable, str(WORKER), "loop", str(store), hid, str(STEPS)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            bufsize=1)
        self.lines: list[tuple[float, list[str]]] = []
        self.cond = threading.Condition()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            if not line.endswith("\n"):
                break  # cut off by SIGKILL: the process never finished saying it
            with self.cond:
                self.lines.append((time.monotonic(), line.split()))
                self.cond.notify_all()
        with self.cond:
            self.cond.notify_all()

    def first(self, word: str) -> tuple[float, list[str]] | None:
        with self.cond:
            return next(((t, p) for t, p in self.lines if p and p[0] == word), None)

    def all(self, word: str) -> list[list[str]]:
        with self.cond:
            return [p for _, p in self.lines if p and p[0] == word]

    def ack_times(self) -> list[float]:
        with self.cond:
            return [t for t, p in self.lines if p and p[0] == "ack"]

    def grant(self, n: int) -> None:
        self.proc.stdin.write(f"go {n}\n")
        self.proc.stdin.flush()

    def kill(self) -> float:
        os.kill(self.proc.pid, signal.SIGKILL)
        killed_at = time.monotonic()
        self.proc.wait()
        self.reader.join(5)
        return killed_at

    def describe(self) -> str:
        err = self.proc.stderr.read() if self.proc.poll() is not None else "(running)"
        return f"worker #{self.n} pid {self.proc.pid} rc {self.proc.returncode}: {err[-2000:]}"


def wait_until(predicate, timeout: float, what: str, seed: int):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(0.001)
    raise AssertionError(f"timed out waiting for {what} (DHP_CHAOS_SEED={seed})")


@pytest.mark.covers("DHP-CKP-009", "DHP-CKP-010", "DHP-FEN-001", "DHP-FEN-002", "DHP-FEN-003",
                    "DHP-FEN-005", "DHP-CKP-006", "DHP-CKP-008", "DHP-RES-003", "DHP-LSE-005")
def test_randomized_sigkill_mid_checkpoint(store_location: str) -> None:
    seed = int(os.environ.get("DHP_CHAOS_SEED") or random.randrange(2**32))
    print(f"chaos seed: {seed} (rerun with DHP_CHAOS_SEED={seed})")
    rng = random.Random(seed)
    store_path = store_location
    store = api.Store(store_path)
    hid = api.dispatch(store, "chaos.steps", {"steps": STEPS}, OUTPUT_SCHEMA)
    started = time.monotonic()

    current = Worker(store_path, hid)
    incarnations = [current]
    standbys: list[Worker] = []
    everyone = [current]
    takeovers: list[float] = []
    step_time = 0.005
    gaps: list[float] = []
    try:
        wait_until(lambda: current.first("start"), 30, "the first worker to claim", seed)
        for round_no in range(KILLS):
            while len(standbys) < STANDBYS:
                standbys.append(Worker(store_path, hid))
                everyone.append(standbys[-1])
            wait_until(lambda: any(s.first("standing_by") for s in standbys), 30,
                       "a standby to be ready", seed)
            assert current.proc.poll() is None, \
                f"round {round_no}: the owner died on its own: {current.describe()} " \
                f"(DHP_CHAOS_SEED={seed})"
            grant = rng.randint(1, MAX_GRANT)
            current.grant(grant)
            time.sleep(rng.uniform(0, grant * step_time))  # lands inside the granted steps
            killed_at = current.kill()
            times = current.ack_times()
            gaps += [b - a for a, b in zip(times, times[1:], strict=False)]
            if len(gaps) >= 5:  # pace the next kill by how long a checkpoint takes here
                step_time = min(0.05, statistics.median(gaps))
            winner = wait_until(lambda: [s for s in standbys if s.first("start")], 30,
                                "a standby to take over", seed)
            assert len(winner) == 1, \
                f"round {round_no}: {len(winner)} standbys started (DHP_CHAOS_SEED={seed})"
            current = winner[0]
            standbys.remove(current)
            incarnations.append(current)
            takeovers.append(current.first("start")[0] - killed_at)
        current.grant(10**9)
        assert current.proc.wait(timeout=120) == 0, current.describe()
        for s in standbys:
            s.proc.stdin.close()
            assert s.proc.wait(timeout=30) == 0, s.describe()
    finally:
        for w in everyone:
            if w.proc.poll() is None:
                w.proc.kill()
                w.proc.wait()
    for w in everyone:
        w.reader.join(5)
    elapsed = time.monotonic() - started
    print(f"{KILLS} kills in {elapsed:.1f}s; takeover median "
          f"{1000 * statistics.median(takeovers):.1f} ms, max {1000 * max(takeovers):.1f} ms")
    check_history(store, hid, incarnations, everyone, takeovers, seed)
    store.close()


def check_history(store, hid: str, incarnations: list[Worker], everyone: list[Worker],
                  takeovers: list[float], seed: int) -> None:
    tag = f"(DHP_CHAOS_SEED={seed})"
    records = api.checkpoints(store, hid)
    status = api.status(store, hid)
    result = api.result(store, hid)

    # The work completed exactly once, and its total is one pass over every step.
    assert status["state"] == "completed", tag
    done = [w for w in everyone if w.all("done")]
    assert len(done) == 1 and done[0] is incarnations[-1], tag
    assert result == {"steps": STEPS, "total": sum(value(s) for s in range(1, STEPS + 1))}, tag
    assert api.check_integrity(store) == [], tag

    # Every step's state is in the chain exactly once, in order, and the chain verifies.
    assert [r["state"]["step"] for r in records] == list(range(1, STEPS + 1)), tag
    assert [r["seq"] for r in records] == list(range(1, STEPS + 1)), tag
    with store.transaction(write=False) as tx:
        result_record = tx.get(hid)["result"]
    chain.verify_chain(hid, records, result_record)

    # Zero acknowledged checkpoints lost: each acked (seq, fence, hash) is in the chain.
    by_seq = {r["seq"]: r for r in records}
    acked = 0
    for w in incarnations:
        for _, seq, fence, digest in w.all("ack"):
            r = by_seq[int(seq)]
            assert (r["fence"], r["hash"]) == (int(fence), digest), \
                f"acknowledged checkpoint {seq} of worker #{w.n} was lost or replaced {tag}"
            acked += 1
    assert acked >= len(records) - KILLS, tag  # at most one ack lost per kill

    # Zero double ownership: one incarnation per fence, fences strictly increasing, each
    # record written under the fence of the incarnation that owned the handoff.
    fences = [int(w.first("start")[1][1]) for w in incarnations]
    assert fences == sorted(set(fences)), f"fences not strictly increasing: {fences} {tag}"
    owners = {f: w for f, w in zip(fences, incarnations, strict=True)}
    for r in records:
        assert r["fence"] in owners, f"record {r['seq']} has a fence no worker held {tag}"
    assert [r["fence"] for r in records] == sorted(r["fence"] for r in records), tag
    assert all(len(w.all("start")) <= 1 for w in everyone), tag

    # Rework at most one checkpoint per kill: a worker's begun steps are its acked ones plus
    # at most the one in flight when it died, and only such an in-flight step is begun again
    # by a later worker (each kill costs at most one checkpoint of work).
    fence_of = {w.n: f for f, w in owners.items()}
    redone = 0
    begun_by: dict[int, list[Worker]] = {}
    for w in incarnations:
        begun = [int(p[1]) for p in w.all("begin")]
        acked_steps = {by_seq[int(p[1])]["state"]["step"] for p in w.all("ack")}
        in_flight = [s for s in begun if s not in acked_steps]
        assert len(in_flight) <= 1 and (not in_flight or in_flight[0] == begun[-1]), \
            f"worker #{w.n} left {in_flight} unacknowledged {tag}"
        for s in begun:
            begun_by.setdefault(s, []).append(w)
    for s, workers in begun_by.items():
        writer = [w for w in workers if fence_of[w.n] == by_seq[s]["fence"]]
        assert len(writer) == 1, f"step {s}: written by {len(writer)} of its workers {tag}"
        for w in workers:
            if w is not writer[0]:
                assert [int(p[1]) for p in w.all("begin")][-1] == s, \
                    f"step {s} begun again after worker #{w.n} had moved on {tag}"
                redone += 1
    assert redone <= KILLS, tag
    print(f"{redone} steps reworked over {KILLS} kills")

    # Recovery came from the liveness lock, not from waiting out the lease.
    assert len(takeovers) == KILLS and max(takeovers) < TAKEOVER_BOUND_S, \
        f"slowest takeover {max(takeovers):.3f}s {tag}"
