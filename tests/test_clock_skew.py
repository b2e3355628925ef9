"""Issue 24, point 8: a process whose clocks a time namespace moves (300 s ahead or behind)
judges leases by the host's clock, as every other process does (DHP-LSE-015): it cannot take
a live lease, and the WAL's group commit compares the same clock."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import pytest
from dhp import api
from dhp.core import clock
from dhp.core.errors import Conflict, Unavailable

TAKE = """
import sys, dhp
from dhp.core import clock
store = dhp.Store(sys.argv[1])
print(clock.timens_offsets().get("boottime", 0.0), flush=True)
try:
    dhp.recover(store, sys.argv[2], "skewed", heartbeat_interval=0)
    print("taken")
except dhp.DHPError as exc:
    print(exc.code)
print(dhp.claim_next(store, "skew", "skewed", heartbeat_interval=0))
"""


def _in_namespace(offset: int) -> list[str]:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("a time namespace needs root and unshare(1)")
    probe = subprocess.run(["unshare", "--time", "--boottime", "1", "true"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"this kernel or container allows no time namespace: {probe.stderr}")
    return ["unshare", "--time", "--boottime", str(offset), "--monotonic", str(offset)]


@pytest.mark.covers("DHP-LSE-015")
@pytest.mark.parametrize("offset", [300, -300])
def test_a_process_in_a_shifted_time_namespace_cannot_take_a_live_lease(tmp_path, offset):
    if offset < 0 and time.clock_gettime(time.CLOCK_MONOTONIC) < 400:
        pytest.skip("the host booted less than 400 s ago: no clock 300 s behind")
    prefix = _in_namespace(offset)
    store = api.Store(tmp_path)
    hid = api.dispatch(store, "skew", {"n": 1}, {})
    ctx = api.claim(store, hid, "healthy", ttl=30, heartbeat_interval=0)
    ctx.checkpoint({"page": 1})
    done = subprocess.run([*prefix, sys.executable, "-c", TAKE, str(tmp_path), hid],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    seen, outcome, nxt = done.stdout.split()
    assert float(seen) == offset  # it was in the namespace
    assert (outcome, nxt) == ("conflict", "None")  # the live lease was not taken
    ctx.complete({})  # the healthy worker still owns it
    store.close()


@pytest.mark.covers("DHP-LSE-015")
def test_the_store_clock_removes_the_namespace_offset(tmp_path, monkeypatch):
    raw = time.clock_gettime(time.CLOCK_BOOTTIME)
    monkeypatch.setattr(clock, "_offsets", (os.getpid(), {"boottime": 300.0,
                                                          "monotonic": 300.0}))
    monkeypatch.setattr(clock.time, "clock_gettime", lambda cid: raw + 300.0)
    assert clock.store_clock() == pytest.approx(raw)
    assert clock.host_monotonic() == pytest.approx(raw)


@pytest.mark.covers("DHP-LSE-015")
def test_unreadable_offsets_refuse_with_clock_skew(tmp_path):
    bad = tmp_path / "timens_offsets"
    bad.write_text("boottime three hundred\n")
    with pytest.raises(Unavailable, match="clock skew") as info:
        clock._read_offsets(bad)
    assert info.value.requirement == "DHP-LSE-015"
    assert clock._read_offsets(tmp_path / "absent") == {}  # no namespaces: no offsets
    bad.write_text("monotonic 300 0\nboottime -300 500000000\n")
    assert clock._read_offsets(bad) == {"monotonic": 300.0, "boottime": -299.5}


def test_conflict_is_what_a_live_lease_gives(tmp_path):
    """The code the namespaced process reports for a live lease, as this process sees it."""
    store = api.Store(tmp_path)
    hid = api.dispatch(store, "skew", {"n": 2}, {})
    api.claim(store, hid, "a", ttl=30, heartbeat_interval=0)
    with pytest.raises(Conflict):
        api.recover(store, hid, "b", heartbeat_interval=0)
    store.close()
