"""When the SQLite store fsyncs (DHP-CKP-011): ownership changes always, checkpoints at least
once per fsync interval, heartbeats only to sync a checkpoint that has waited an interval.

The connection runs at `synchronous=NORMAL` (a commit writes the WAL without an fsync) and the
store fsyncs the WAL itself after a commit that needs it (`_sync_wal`). Each committed write
transaction is seen through SQLite's statement trace, and counted as fsynced when the store
fsynced the WAL after its COMMIT. That every write survives kill -9 whatever its sync is shown
by the SIGKILL tests (test_chaos.py), which run with the default interval.

Group commit: several processes on one store share fsyncs. A process that must sync takes an
flock on `wal-sync` beside the database, where the start time of the last completed fsync of
the WAL is recorded; when that fsync started after its own COMMIT returned, its commit is
already on disk and it returns without an fsync of its own (a shared sync), otherwise it
fsyncs and records when it started. The tests below run real processes; which of them share
in a free-running race depends on the disk, so only the sum is checked there, and the
sharing itself is made deterministic by holding the flock in the test.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from dhp import api as dhp
from dhp.core.errors import SchemaViolation
from dhp.store import wal_sync

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
            assert os.path.getsize(store._wal_sync.wal) > 0  # the WAL holds the commit it syncs
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


# ------------------------------------------------------------------ group commit

_ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(
    [str(Path(dhp.__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")])}

# A writer process: its own handoff, claimed, n checkpoints and the completion, every one
# fsynced (fsync_interval=0), started together with the others on "go"; prints its counts.
WRITER = """
import json, os, sys
import dhp
store = dhp.Store(sys.argv[1], fsync_interval=0)
n = int(sys.argv[2])
hid = dhp.dispatch(store, task_kind="k", inputs={"pid": os.getpid()}, output_schema={})
print("ready", flush=True)
sys.stdin.readline()
ctx = dhp.claim(store, hid, "w", heartbeat_interval=0)
for i in range(n):
    ctx.checkpoint({"i": i})
ctx.complete({"n": n})
print(json.dumps({"hid": hid, **store.sync_stats()}), flush=True)
"""


def _python(code: str, *args, **popen) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code, *map(str, args)], env=_ENV,
                            stdout=subprocess.PIPE, text=True, **popen)


def test_concurrent_writers_each_sync_every_durable_commit_own_or_shared(tmp_path):
    dhp.Store(tmp_path)  # made and migrated once, before the writers race
    n, writers = 15, 4
    procs = [_python(WRITER, tmp_path, n, stdin=subprocess.PIPE) for _ in range(writers)]
    try:
        for proc in procs:
            assert proc.stdout.readline().strip() == "ready"
        for proc in procs:
            proc.stdin.write("go\n")
            proc.stdin.flush()
        reports = [json.loads(proc.communicate(timeout=300)[0]) for proc in procs]
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
    assert [proc.returncode for proc in procs] == [0] * writers
    store = dhp.Store(tmp_path)
    for report in reports:
        # dispatch, claim, n checkpoints, complete: each synced before it returned, by an
        # fsync of the writer's own or by another's that started after its commit.
        assert report["fsyncs"] + report["shared"] == n + 3
        assert report["fsyncs"] >= 0 and report["shared"] >= 0
        assert dhp.status(store, report["hid"])["state"] == "completed"
        assert [c["state"]["i"] for c in dhp.checkpoints(store, report["hid"])] == list(range(n))
    assert (tmp_path / wal_sync.SYNC_FILE).is_file()


# One durable write (a dispatch) in a process of its own; prints "waiting" when it first
# finds the sync file's flock held (its commit time is taken by then), then its counts.
ONE_WRITE = """
import json, os, sys, time
import dhp
from dhp.store import wal_sync
wal_sync.SYNC_WAIT_S = 600  # wait for the test, which holds the flock, however long it takes
said = []
def pause(seconds):
    if not said:
        said.append(print("waiting", flush=True))
    time.sleep(seconds)
wal_sync._pause = pause
store = dhp.Store(sys.argv[1], fsync_interval=0)
hid = dhp.dispatch(store, task_kind="k", inputs={"pid": os.getpid()}, output_schema={})
print(json.dumps({"hid": hid, **store.sync_stats()}), flush=True)
"""


@pytest.mark.parametrize("leader_started", ["after the commit", "before the commit"])
def test_a_commit_is_shared_only_by_an_fsync_that_started_after_it(tmp_path, leader_started):
    store = dhp.Store(tmp_path, fsync_interval=0)
    sync_path = tmp_path / wal_sync.SYNC_FILE
    sync_fd = os.open(sync_path, os.O_RDWR | os.O_CREAT, 0o600)
    wal_fd = os.open(store._wal_sync.wal, os.O_RDONLY)
    earlier = time.monotonic()
    try:
        fcntl.flock(sync_fd, fcntl.LOCK_EX)  # the test is the leader, its fsync "in progress"
        writer = _python(ONE_WRITE, tmp_path)
        # Waiting for the flock means its COMMIT returned and its commit time was taken.
        assert writer.stdout.readline().strip() == "waiting"
        if leader_started == "after the commit":
            started = time.monotonic()
            os.fdatasync(wal_fd)
        else:
            started = earlier  # an fsync that began before the writer's commit
        with wal_sync.mapped(sync_fd) as record:
            wal_sync.write_record(record, started, wal_sync.boot_tag())
        fcntl.flock(sync_fd, fcntl.LOCK_UN)
        report = json.loads(writer.communicate(timeout=120)[0])
    finally:
        os.close(sync_fd)
        os.close(wal_fd)
    assert writer.returncode == 0
    if leader_started == "after the commit":
        assert (report["fsyncs"], report["shared"]) == (0, 1)
    else:
        assert (report["fsyncs"], report["shared"]) == (1, 0)  # it fsynced itself
        with open(sync_path, "rb") as f:  # and recorded when its own fsync started
            assert wal_sync._RECORD.unpack(f.read())[0] > started
    assert dhp.status(store, report["hid"])["state"] == "pending"


def test_a_stopped_holder_of_the_sync_lock_does_not_stall_other_processes(tmp_path):
    """A process stopped while it holds the flock (here: the test, which never lets go)
    costs the others at most SYNC_WAIT_S per commit: they fsync on their own."""
    store = dhp.Store(tmp_path, fsync_interval=0)
    sync_fd = os.open(tmp_path / wal_sync.SYNC_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(sync_fd, fcntl.LOCK_EX)
        code = ONE_WRITE.replace("wal_sync.SYNC_WAIT_S = 600", "")  # the default wait
        writer = _python(code, tmp_path)
        assert writer.stdout.readline().strip() == "waiting"
        report = json.loads(writer.communicate(timeout=120)[0])  # while the flock is held
    finally:
        os.close(sync_fd)
    assert writer.returncode == 0
    assert (report["fsyncs"], report["shared"]) == (1, 0)
    assert dhp.status(store, report["hid"])["state"] == "pending"


def test_a_recorded_sync_counts_only_in_this_boot_and_never_from_the_future(tmp_path):
    fd = os.open(tmp_path / "record", os.O_RDWR | os.O_CREAT, 0o600)
    boot = wal_sync.boot_tag()
    try:
        with wal_sync.mapped(fd) as record:
            assert wal_sync.read_record(record, boot) == float("-inf")  # no record yet
            now = time.monotonic()
            wal_sync.write_record(record, now, boot)
            assert wal_sync.read_record(record, boot) == now
            other_boot = wal_sync._RECORD.pack(0.0, b"another-boot")[8:]
            assert wal_sync.read_record(record, other_boot) == float("-inf")
            wal_sync.write_record(record, now + 3600, boot)  # a clock of another boot
            assert wal_sync.read_record(record, boot) == float("-inf")
            wal_sync.write_record(record, float("nan"), boot)
            assert wal_sync.read_record(record, boot) == float("-inf")
        with open(tmp_path / "record", "rb") as f:  # in the file, for the other processes
            assert wal_sync._RECORD.unpack(f.read())[1] == boot
    finally:
        os.close(fd)


@pytest.mark.parametrize("blocker", ["a folder", "a symlink", "a read-only file"])
def test_without_a_usable_sync_file_every_sync_is_an_fsync_of_its_own(tmp_path, blocker):
    sync_path = tmp_path / wal_sync.SYNC_FILE
    if blocker == "a folder":
        sync_path.mkdir(parents=True)
    elif blocker == "a symlink":  # never followed (O_NOFOLLOW), even to a usable file
        (tmp_path / "elsewhere").write_bytes(b"")
        sync_path.symlink_to(tmp_path / "elsewhere")
    else:
        if os.geteuid() == 0:
            pytest.skip("root opens a read-only file for writing")
        tmp_path.mkdir(exist_ok=True)
        sync_path.write_bytes(b"")
        sync_path.chmod(0o400)
    store, ctx, log = _claimed(tmp_path, fsync_interval=0)
    for i in range(3):
        ctx.checkpoint({"i": i})
    ctx.complete({"n": 1})
    assert log.take() == ["FULL"] * 5  # claim, 3 checkpoints, complete
    assert store.sync_stats() == {"fsyncs": 6, "shared": 0}  # and the dispatch
    assert store._wal_sync._sync_fd is None and store._wal_sync._no_sync_file


def test_a_forked_child_opens_its_own_sync_file(tmp_path):
    # An flock belongs to the open file: one inherited across fork would not exclude the
    # parent, so a forked child must open the sync file anew, as it does the WAL.
    store = dhp.Store(tmp_path, fsync_interval=0)
    dhp.dispatch(store, "k", {}, SCHEMA)
    parent_fd = store._wal_sync._sync_fd
    to_parent, from_child = os.pipe()
    to_child, from_parent = os.pipe()
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            dhp.dispatch(store, "k", {"child": True}, SCHEMA)  # syncs through its own fd
            os.write(from_child, b"1")
            os.read(to_child, 1)  # the parent now holds the flock through its fd
            try:
                fcntl.flock(store._wal_sync._sync_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                excluded = False
            except BlockingIOError:
                excluded = True
            report = {"excluded": excluded, **store.sync_stats()}
            os.write(from_child, json.dumps(report).encode())
            status = 0
        finally:
            os._exit(status)
    assert os.read(to_parent, 1) == b"1"
    fcntl.flock(parent_fd, fcntl.LOCK_EX)
    os.write(from_parent, b"1")
    report = json.loads(os.read(to_parent, 1000))
    fcntl.flock(parent_fd, fcntl.LOCK_UN)
    assert os.waitpid(pid, 0)[1] == 0
    for fd in (to_parent, from_child, to_child, from_parent):
        os.close(fd)
    assert report == {"excluded": True, "fsyncs": 1, "shared": 0}  # counted from zero
    assert store.sync_stats() == {"fsyncs": 1, "shared": 0}


# A writer that checkpoints until killed and prints each acknowledged counter.
ENDLESS = """
import os, sys
import dhp
store = dhp.Store(sys.argv[1], fsync_interval=0)
hid = dhp.dispatch(store, task_kind="k", inputs={"pid": os.getpid()}, output_schema={})
ctx = dhp.claim(store, hid, "w", heartbeat_interval=0)
print(hid, flush=True)
i = 0
while True:
    ctx.checkpoint({"i": i})
    print(i, flush=True)
    i += 1
"""


def test_every_acknowledged_checkpoint_survives_sigkill_of_group_committing_writers(tmp_path):
    dhp.Store(tmp_path)
    procs = [_python(ENDLESS, tmp_path) for _ in range(3)]
    hids, acked = [], []
    try:
        hids = [proc.stdout.readline().strip() for proc in procs]
        for proc in procs:  # each has had some checkpoints acknowledged
            acked.append(max(int(proc.stdout.readline()) for _ in range(20)))
        for proc in procs:
            os.kill(proc.pid, signal.SIGKILL)
        for i, proc in enumerate(procs):
            proc.wait()
            acked[i] = max([acked[i], *map(int, proc.stdout.read().split())])
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
    store = dhp.Store(tmp_path)
    for hid, last in zip(hids, acked, strict=True):
        assert dhp.last_checkpoint(store, hid)["i"] >= last


@pytest.mark.parametrize("fsyncs_are", ["fast", "slow"])
def test_a_process_whose_fsyncs_are_fast_does_not_queue_for_the_sync_lock(
        tmp_path, monkeypatch, fsyncs_are):
    """Below SHARE_ABOVE_S per fsync, concurrent fsyncs run side by side in the kernel: after
    its first fsync (measured) a process fsyncs without the lock; above it, it queues."""
    monkeypatch.setattr(wal_sync, "SHARE_ABOVE_S", 3600.0 if fsyncs_are == "fast" else 0.0)
    monkeypatch.setattr(wal_sync, "SYNC_WAIT_S", 0.01)
    waited = []
    monkeypatch.setattr(wal_sync, "_pause", lambda s: waited.append(s) or time.sleep(s))
    store = dhp.Store(tmp_path, fsync_interval=0)
    dhp.dispatch(store, "k", {"n": 1}, SCHEMA)  # the first fsync: its time is measured
    sync_fd = os.open(tmp_path / wal_sync.SYNC_FILE, os.O_RDWR)
    try:
        fcntl.flock(sync_fd, fcntl.LOCK_EX)  # another process's fsync, in progress
        dhp.dispatch(store, "k", {"n": 2}, SCHEMA)
    finally:
        os.close(sync_fd)
    assert bool(waited) == (fsyncs_are == "slow")
    assert store.sync_stats() == {"fsyncs": 2, "shared": 0}
