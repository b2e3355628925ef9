"""When the SQLite store fsyncs (DHP-CKP-011): ownership changes always, checkpoints at least
once per fsync interval, heartbeats only to sync a checkpoint that has waited an interval.

The connection runs at `synchronous=NORMAL` (a commit writes the WAL without an fsync) and the
store fsyncs the WAL itself after a commit that needs it (`_sync_wal`). Each committed write
transaction is seen through SQLite's statement trace, and counted as fsynced when the store
fsynced the WAL after its COMMIT. That every write survives kill -9 whatever its sync is shown
by the SIGKILL tests (test_chaos.py), which run with the default interval.
"""

from __future__ import annotations

import os
import time

import pytest
from dhp import api as dhp
from dhp.core.errors import SchemaViolation

pytestmark = pytest.mark.covers("DHP-CKP-011")

SCHEMA = {"type": "object", "required": ["n"]}


class SyncLog:
    """"FULL" (fsynced before it returned) or "NORMAL" (not) for every write transaction that
    changed something, in order."""

    def __init__(self, store):
        self.seen: list[str] = []
        self._changes = 0
        self._conn = store._connection()
        self._conn.set_trace_callback(self._statement)
        sync_wal = store._sync_wal

        def fsynced() -> None:
            assert os.path.getsize(store._wal) > 0  # the WAL holds the commit it syncs
            sync_wal()
            self.seen[-1] = "FULL"

        store._sync_wal = fsynced

    def _statement(self, sql: str) -> None:
        if sql.startswith("BEGIN"):
            self._changes = self._conn.total_changes
        elif sql == "COMMIT" and self._conn.total_changes != self._changes:
            self.seen.append("NORMAL")

    def take(self) -> list[str]:
        seen, self.seen = self.seen, []
        return seen


def _claimed(tmp_path, **store_settings):
    store = dhp.Store(tmp_path, **store_settings)
    hid = dhp.dispatch(store, "k", {}, SCHEMA)
    log = SyncLog(store)
    ctx = dhp.claim(store, hid, "w", heartbeat_interval=0)  # heartbeats by hand only
    return store, ctx, log


def test_ownership_changes_fsync_and_a_burst_of_checkpoints_does_not(tmp_path):
    store, ctx, log = _claimed(tmp_path, fsync_interval=30)
    assert log.take() == ["FULL"]  # the claim (a fence bump)
    for i in range(5):
        ctx.checkpoint({"i": i})
    assert log.take() == ["NORMAL"] * 5  # within 30 s of the claim's fsync
    ctx.complete({"n": 1})
    assert log.take() == ["FULL"]
    hid2 = dhp.dispatch(store, "k", {"second": True}, SCHEMA)
    other = dhp.claim(store, hid2, "w", heartbeat_interval=0)
    other.release()
    dhp.cancel(store, hid2)
    assert log.take() == ["FULL"] * 4  # dispatch, claim, release, cancel


def test_a_checkpoint_after_the_interval_is_fsynced(tmp_path):
    store, ctx, log = _claimed(tmp_path, fsync_interval=0.2)
    log.take()
    time.sleep(0.25)
    ctx.checkpoint({"i": 1})
    ctx.checkpoint({"i": 2})
    assert log.take() == ["FULL", "NORMAL"]
    ctx.release()


def test_the_heartbeat_after_the_interval_syncs_a_waiting_checkpoint(tmp_path):
    store, ctx, log = _claimed(tmp_path, fsync_interval=0.2)
    ctx.heartbeat()
    ctx.checkpoint({"i": 1})
    assert log.take() == ["FULL", "NORMAL", "NORMAL"]  # claim, heartbeat, checkpoint
    time.sleep(0.25)
    ctx.heartbeat()  # the checkpoint has waited an interval: this commit syncs it
    assert log.take() == ["FULL"]
    time.sleep(0.25)
    ctx.heartbeat()  # nothing waits: no fsync of its own
    assert log.take() == ["NORMAL"]
    ctx.release()


def test_a_commit_that_changes_nothing_does_not_count_as_a_sync(tmp_path):
    store, ctx, log = _claimed(tmp_path, fsync_interval=0.2)
    ctx.checkpoint({"i": 1})
    time.sleep(0.25)
    with pytest.raises(SchemaViolation):
        ctx.complete({"not n": 1})  # refused: its transaction writes nothing, syncs nothing
    ctx.heartbeat()
    assert log.take() == ["FULL", "NORMAL", "FULL"]  # the heartbeat still syncs the checkpoint
    ctx.release()


def test_fsync_interval_0_fsyncs_every_checkpoint(tmp_path):
    store, ctx, log = _claimed(tmp_path, fsync_interval=0)
    for i in range(3):
        ctx.checkpoint({"i": i})
    assert log.take() == ["FULL"] * 4
    ctx.release()


class _Recorder:
    """A shipper that keeps what it is given (the real ones are tested in test_transport)."""

    def __init__(self):
        self.records: list[dict] = []

    def ship_checkpoint(self, envelope: dict, record: dict) -> None:
        self.records.append(record)

    def ship_result(self, envelope: dict, record: dict) -> None:
        self.records.append(record)


def test_a_checkpoint_that_leaves_the_host_is_fsynced_first(tmp_path):
    store, ctx, log = _claimed(tmp_path, fsync_interval=30)
    ctx.ship_to = _Recorder()
    ctx.checkpoint({"i": 1})
    assert log.take() == ["FULL", "FULL"]
    assert [r["seq"] for r in ctx.ship_to.records] == [1]
    ctx.release()


@pytest.mark.parametrize("bad", [-1, float("nan"), True, "0.1"])
def test_a_bad_fsync_interval_is_refused_by_name(tmp_path, bad):
    with pytest.raises(dhp.InvalidInput, match="fsync_interval"):
        dhp.Store(tmp_path, fsync_interval=bad)
