"""Behaviours the mutation run (tools/mutation.py, bench/mutation/) found that no test held:
each test here kills a mutant that the module's own test files let survive."""

from __future__ import annotations

import threading
import time

import dhp
import pytest
from dhp import InvalidInput, api
from dhp.transport import server as net
from dhp.transport.file import STORED, Ingest
from dhp.transport.shipper import NetShipper, encode
from transport_helpers import SECRET, RawClient, envelope, frame, records, result_record

KIND = "mutation.found"


def _nested(depth: int, objects: bool) -> object:
    value: object = 0
    for _ in range(depth):
        value = {"k": value} if objects else [value]
    return value


@pytest.mark.covers("DHP-LIM-001", "DHP-LIM-004")
@pytest.mark.parametrize("objects", [False, True], ids=["arrays", "objects"])
def test_the_depth_limit_counts_objects_as_well_as_arrays(tmp_path, objects):
    """Inputs are `{"deep": ...}`: one level for the outer object. 128 levels (the default
    limit) are stored; 129 are refused, naming the path, whether the levels are objects or
    arrays (a walk that counted only arrays let any depth of objects through)."""
    store = api.Store(tmp_path)
    try:
        api.dispatch(store, KIND, {"deep": _nested(127, objects)}, {}, None)
        with pytest.raises(InvalidInput) as info:
            api.dispatch(store, KIND, {"deep": _nested(128, objects), "n": 2}, {}, None)
        assert info.value.requirement == "DHP-LIM-004"
        assert "$.inputs.deep" in info.value.message
        assert len(api.list_handoffs(store)) == 1
    finally:
        store.close()


@pytest.mark.covers("DHP-TRN-017")
def test_a_failed_group_commit_fails_only_its_own_requests(tmp_path, monkeypatch):
    """Ingest commits the requests that queued up meanwhile together (group commit), and an
    atomic one (a whole log) alone after them. When the shared transaction fails, its
    requests get the error, and the atomic request queued behind them is still served: it
    must neither get their error nor come back empty."""
    store = api.Store(tmp_path)
    ingest = Ingest(store)
    envs = [dhp.make_envelope(dhp.make_intent(KIND, {"n": n}, {})) for n in range(2)]
    real, calls = store.transaction, []

    def failing_once(*args, **kwargs):
        calls.append(kwargs)
        if len(calls) == 1:
            raise OSError("disk full (injected)")
        return real(*args, **kwargs)

    monkeypatch.setattr(store, "transaction", failing_once)
    outcome: dict = {}

    def apply(name, env, atomic):
        try:
            outcome[name] = ingest.apply([("envelope", env)], atomic=atomic)
        except Exception as exc:  # noqa: BLE001 - the outcome under test
            outcome[name] = exc

    threads = [threading.Thread(target=apply, args=("shared", envs[0], False)),
               threading.Thread(target=apply, args=("whole", envs[1], True))]
    with ingest._lock:  # both queue up before either commits
        for t in threads:
            t.start()
        deadline = time.monotonic() + 30
        while len(ingest._queue) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(ingest._queue) == 2
    for t in threads:
        t.join(30)
    try:
        assert isinstance(outcome["shared"], OSError)
        assert outcome["whole"] == [STORED]
        assert [h["handoff_id"] for h in api.list_handoffs(store)] == [envs[1]["handoff_id"]]
    finally:
        monkeypatch.undo()
        store.close()


@pytest.mark.covers("DHP-TRN-002")
def test_a_frame_of_exactly_an_odd_max_frame_is_shipped(tmp_path):
    """A frame longer than the shipper's read chunk (1 MiB) is read whole, up to its LF, at
    max_frame + 1 bytes: also for an odd max_frame, where max_frame | 1 would stop one byte
    short and the frame would never leave the buffer."""
    limit = 2 * 1024 * 1024 + 1  # odd
    env = envelope()
    base = records(env, 1)[0]
    short = len(encode({"type": "checkpoint", "id": 1, "record": base})) - 1
    (record,) = records(env, 1, pad=limit - short)
    assert len(encode({"type": "checkpoint", "id": 1, "record": record})) - 1 == limit
    with net.TransportServer(tmp_path / "peer", port=0, secret=SECRET,
                             max_frame=4 * 1024 * 1024) as srv:
        ship = NetShipper("127.0.0.1", srv.port, local_logpath=tmp_path / "buf.jsonl",
                          secret=SECRET, max_frame=limit)
        try:
            assert ship.ship_checkpoint(env, record) == [0, 1]
            assert ship.flush(60)
            assert [r["hash"] for r in api.checkpoints(srv.store, env["handoff_id"])] \
                == [record["hash"]]
        finally:
            ship.close()


class _Counting:
    """A socket that counts the bytes taken from it."""

    def __init__(self, sock):
        self.sock, self.taken = sock, 0

    def recv(self, n: int) -> bytes:
        data = self.sock.recv(n)
        self.taken += len(data)
        return data

    def fileno(self) -> int:
        return self.sock.fileno()

    def gettimeout(self):
        return self.sock.gettimeout()

    def settimeout(self, timeout) -> None:
        self.sock.settimeout(timeout)


@pytest.mark.covers("DHP-TRN-002")
def test_a_draining_read_takes_no_more_than_the_frame_bound(tmp_path):
    """A complete frame, then a frame that does not end: the server's reader, also when it
    drains what has arrived behind the complete frame, takes at most max_frame + 1 bytes of
    the unfinished one from the socket before it refuses it (DHP-TRN-002)."""
    import socket

    limit = 64 * 1024
    ours, theirs = socket.socketpair()

    def send() -> None:
        with theirs:
            try:
                theirs.sendall(b"x\n" + b"y" * (8 * limit))
            except OSError:  # the reader refused and closed: what it took is what counts
                pass

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    time.sleep(0.3)  # what the peer sent is waiting to be read
    sock = _Counting(ours)
    reader = net._Reader(sock, limit)
    try:
        with pytest.raises(net.FrameTooLarge):
            while True:
                reader.frames(drain=True)
        assert sock.taken <= len(b"x\n") + limit + 1
    finally:
        ours.close()
        sender.join(10)


@pytest.mark.covers("DHP-LIM-007")
def test_worker_ids_with_c0_del_or_c1_controls_are_refused_at_both_ends(tmp_path):
    """Every control character, the ends of each range included, is refused; the first
    character past them (U+00A0) is not."""
    store = api.Store(tmp_path)
    try:
        hid = api.dispatch(store, KIND, {"n": 1}, {})
        for c in ("\x00", "\x1f", "\x7f", "\x80", "\x9f"):
            with pytest.raises(InvalidInput) as info:
                api.claim(store, hid, f"w{c}")
            assert info.value.requirement == "DHP-LIM-007", repr(c)
        with api.claim(store, hid, "w\xa0", heartbeat_interval=0) as ctx:
            assert ctx.fence == 1
            ctx.release()
    finally:
        store.close()


@pytest.mark.covers("DHP-LSE-007")
def test_a_stalled_claim_is_orphaned_only_after_its_progress_timeout(tmp_path):
    """The store accepts the supervisor's orphan of a live lease once the handoff has made
    no progress for longer than its progress timeout, and not before."""
    store = api.Store(tmp_path)
    try:
        hid = api.dispatch(store, KIND, {"n": 2}, {}, progress_timeout_s=0.3)
        with api.claim(store, hid, "w1", ttl=60, heartbeat_interval=0):
            with pytest.raises(dhp.Conflict):
                api.orphan(store, hid)
            time.sleep(0.45)
            assert api.orphan(store, hid)
            assert api.status(store, hid)["state"] == "orphaned"
    finally:
        store.close()


@pytest.mark.covers("DHP-TRN-001")
def test_a_bye_after_data_is_answered_with_bye_and_the_data_kept(tmp_path):
    """The shipper's `{"type": "bye"}` ends the session cleanly: what came before it is
    acknowledged and kept, the server answers bye and closes (no error frame)."""
    env = envelope()
    with net.TransportServer(tmp_path / "peer", port=0, secret=SECRET) as srv:
        client = RawClient(srv.port)
        try:
            client.send(frame("envelope", 0, env), {"type": "bye"})
            assert client.answers(2) == [{"type": "ack", "id": 0}, {"type": "bye"}]
            assert client.closed()
        finally:
            client.close()
        assert [h["handoff_id"] for h in api.list_handoffs(srv.store)] == [env["handoff_id"]]


@pytest.mark.covers("DHP-TRN-027", "DHP-TRN-028")
@pytest.mark.parametrize("fsync", [True, False])
def test_a_new_log_file_is_durable_in_its_folder_before_shipping_returns(tmp_path,
                                                                          monkeypatch, fsync):
    """Creating a handoff's file links it into the folder: with fsync on (the default), the
    folder is fsynced too before the ship call returns, or a power loss could lose the file
    whose lines were reported shipped; with fsync off, it is not."""
    import dhp.transport.file as file_transport

    synced: list = []
    monkeypatch.setattr(file_transport, "_fsync_dir", lambda folder: synced.append(folder))
    env = envelope()
    ship = file_transport.FileShipper(tmp_path / "shared", fsync=fsync)
    ship.ship_checkpoint(env, records(env, 1)[0])
    assert synced == ([tmp_path / "shared"] if fsync else [])


@pytest.mark.covers("DHP-TRN-029", "DHP-RES-001")
def test_a_shipped_log_with_a_result_is_ingested_with_it(tmp_path):
    """The file transport carries a finished handoff: its header, checkpoints and result line
    arrive at the peer as the envelope, the chain and the result."""
    from dhp.transport.file import FileShipper, ingest_file, log_name

    env = envelope()
    recs = records(env, 2)
    done = result_record(env, recs[-1])
    FileShipper(tmp_path / "shared").ship_chain(env, recs, done)
    peer = api.Store(tmp_path / "peer")
    try:
        got = ingest_file(peer, tmp_path / "shared" / log_name(env["handoff_id"]))
        assert got["stored"] == 4 and got["handoff_id"] == env["handoff_id"]
        assert api.status(peer, env["handoff_id"])["state"] == "completed"
        assert api.result(peer, env["handoff_id"]) == {"n": 1}
    finally:
        peer.close()


@pytest.mark.covers("DHP-CKP-008", "DHP-FEN-001")
def test_the_integrity_check_accepts_a_fence_above_the_chains(tmp_path):
    """A handoff taken again after its last checkpoint holds a fence above every fence in its
    chain: that is sound, and the store's integrity check finds nothing."""
    store = api.Store(tmp_path)
    try:
        hid = api.dispatch(store, KIND, {"n": 3}, {})
        with api.claim(store, hid, "w1", heartbeat_interval=0) as ctx:
            ctx.checkpoint({"step": 1})
            ctx.release()
        with api.claim(store, hid, "w2", heartbeat_interval=0) as ctx:
            assert ctx.fence == 2
            assert api.check_integrity(store) == []
            ctx.release()
    finally:
        store.close()
