"""Ten processes racing to claim, and to recover, the same handoff: exactly one winner, every
time (DHP-FEN-005). The racers are long-lived processes that fire together at a start time on
the shared store clock."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from dhp import api as dhp
from dhp.core.clock import store_clock

RACER = Path(__file__).resolve().parent / "helpers" / "racer.py"
RACERS = 10
ROUNDS = 10


@pytest.fixture
def racers():
    procs = [subprocess.Popen([sys.executable, str(RACER), f"r{i}"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True) for i in range(RACERS)]
    assert [proc.stdout.readline().strip() for proc in procs] == ["ready"] * RACERS
    yield procs
    for proc in procs:
        try:
            proc.stdin.write("quit\n")
            proc.stdin.close()
            proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            proc.kill()
            proc.wait()


def _race(racers, op: str, path: str, hid: str, lead: float) -> list[str]:
    start = store_clock() + lead
    for proc in racers:
        proc.stdin.write(f"{op} {path} {hid} {start}\n")
        proc.stdin.flush()
    return [proc.stdout.readline().strip() for proc in racers]


def _dead_owner_claims(path: str, hid: str) -> None:
    """A process that claims with a live 5 s lease and dies at once (no release)."""
    pid = os.fork()
    if pid == 0:
        try:
            dhp.claim(dhp.Store(path), hid, "doomed")
        finally:
            os._exit(0)
    _, code = os.waitpid(pid, 0)
    assert code == 0


@pytest.mark.covers("DHP-FEN-005", "DHP-FEN-001", "DHP-LSE-005")
def test_ten_processes_race(store_location, racers):
    path = store_location
    store = dhp.Store(path)
    for round_no in range(ROUNDS):
        hid = dhp.dispatch(store, "race", {"round": round_no}, {})
        # the first round leaves time for every racer to open the store
        outcomes = _race(racers, "claim", path, hid, 0.3 if round_no == 0 else 0.05)
        winners = [o for o in outcomes if o.startswith("won")]
        assert winners == ["won 1"], outcomes
        assert sorted(set(outcomes) - {"won 1"}) == ["lost conflict"], outcomes
        status = dhp.status(store, hid)
        assert (status["state"], status["fence"], status["attempts"]) == ("claimed", 1, 1)
        assert status["owner"] == f"r{outcomes.index('won 1')}"

    for round_no in range(ROUNDS):
        hid = dhp.dispatch(store, "race", {"recover": round_no}, {})
        _dead_owner_claims(path, hid)
        assert dhp.status(store, hid)["state"] == "claimed"  # its 5 s lease is still live
        outcomes = _race(racers, "recover", path, hid, 0.05)
        winners = [o for o in outcomes if o.startswith("won")]
        assert winners == ["won 2"], outcomes
        assert sorted(set(outcomes) - {"won 2"}) == ["lost conflict"], outcomes
        status = dhp.status(store, hid)
        assert (status["state"], status["fence"]) == ("claimed", 2)
        assert status["owner"] == f"r{outcomes.index('won 2')}"
    assert dhp.check_integrity(store) == []
    store.close()
