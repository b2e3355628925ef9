"""claim_next takes partly done work first (DHP-STM-013), a dead owner's at once whatever
the backlog (DHP-SCH-008), then fresh work oldest first; on both stores."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import dhp
import pytest
from dhp.core import operations

SCHEMA = {"type": "object"}
OWNER = """
import sys, dhp
store = dhp.Store(sys.argv[1])
ctx = dhp.claim(store, sys.argv[2], "doomed", ttl=60, heartbeat_interval=0)
ctx.checkpoint({"i": 1})
print("ready", flush=True)
sys.stdin.readline()
"""


def fresh(store, n: int, tag: str) -> list[str]:
    return [dhp.dispatch(store, "k", {"fresh": tag, "i": i}, SCHEMA) for i in range(n)]


@pytest.mark.covers("DHP-SCH-008", "DHP-SCH-005")
def test_a_dead_owners_half_done_handoff_goes_before_20_fresh_ones(store_location):
    store = dhp.Store(store_location)
    backlog = fresh(store, 20, "before")
    hid = dhp.dispatch(store, "k", {"half": "done"}, SCHEMA)
    owner = subprocess.Popen([sys.executable, "-c", OWNER, store_location, hid],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert owner.stdout.readline() == "ready\n"
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.wait(60)
    token = operations.get_row(store, hid)["owner_incarnation"]
    deadline = time.monotonic() + 30  # a server frees the lock a moment after the death
    while not store.liveness.owner_dead(token) and time.monotonic() < deadline:
        time.sleep(0.01)
    ctx = dhp.claim_next(store, "k", "w1", heartbeat_interval=0)
    assert ctx.handoff_id == hid and ctx.fence == 2
    assert ctx.last_checkpoint == {"i": 1}
    ctx.release()
    taken = dhp.claim_next(store, "k", "w1", heartbeat_interval=0)
    assert taken.handoff_id == hid  # released with a checkpoint: still partly done
    assert dhp.claim_next(store, "k", "w1", heartbeat_interval=0).handoff_id == backlog[0]
    store.close()


@pytest.mark.covers("DHP-STM-013", "DHP-STM-009")
def test_partly_done_work_goes_first_then_fresh_work_oldest_first(store_location):
    store = dhp.Store(store_location)
    old_fresh = fresh(store, 2, "old")
    gave_up, worked, orphan = (dhp.dispatch(store, "k", {"n": n}, SCHEMA) for n in range(3))
    for hid, checkpoint in ((gave_up, False), (worked, True)):
        with dhp.claim(store, hid, "w0", heartbeat_interval=0) as ctx:
            if checkpoint:
                ctx.checkpoint({"at": hid})
            ctx.release()
    lost = dhp.claim(store, orphan, "w0", ttl=0.2, heartbeat_interval=0)
    lost.checkpoint({"at": orphan})
    time.sleep(0.5)  # its lease expires (store clock); the supervisor's move:
    assert dhp.orphan(store, orphan)
    new_fresh = fresh(store, 1, "new")
    order = []
    while (ctx := dhp.claim_next(store, "k", "w1", heartbeat_interval=0)) is not None:
        order.append(ctx.handoff_id)
    # released with a checkpoint, orphaned: partly done, oldest first; then the rest, oldest
    # first (a release without a checkpoint is no progress)
    assert order == [worked, orphan, *old_fresh, gave_up, *new_fresh]
    store.close()
