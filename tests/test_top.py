"""`dhp top`: the terminal view of a store (counts by state, leases, DLQ, newest handoffs)."""

from __future__ import annotations

import subprocess
import sys

import dhp


def top(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dhp.cli.main", "top", *args],
                          capture_output=True, text=True, timeout=60)


def test_once_shows_counts_and_the_newest_handoffs(tmp_path):
    store = dhp.Store(tmp_path / "s")
    first = dhp.dispatch(store, "pages.fetch", {"n": 1}, {"type": "object"})
    second = dhp.dispatch(store, "pages.fetch", {"n": 2}, {"type": "object"})
    dhp.claim(store, second, "worker-7", heartbeat_interval=0)
    out = top("--store", str(tmp_path / "s"), "--once")
    assert out.returncode == 0, out.stderr
    head, _, rows = out.stdout.partition("\n\n")
    assert "pending 1" in head and "claimed 1" in head and "leases 1 live / 0 expired" in head
    lines = rows.strip().splitlines()
    assert lines[0].split()[:3] == ["HANDOFF", "STATE", "KIND"]
    assert lines[1].startswith(second[7:19]) and "worker-7" in lines[1]  # newest first
    assert lines[2].startswith(first[7:19])
    only = top("--store", str(tmp_path / "s"), "--once", "--limit", "1")
    assert len(only.stdout.strip().splitlines()) == 4  # head, blank, column names, one row


def test_bad_options_and_missing_store_are_clear(tmp_path):
    bad = top("--store", str(tmp_path), "--interval", "0")
    assert bad.returncode == 2 and "--interval" in bad.stderr
    missing = top("--store", str(tmp_path / "nope"), "--once")
    assert missing.returncode != 0 and "nope" in missing.stderr
