"""The TCP transport over real loopback sockets: handshake, frames, acks, strict and idempotent
ingest, the shipper's buffer, TLS, fuzzing, and many shippers at once (spec: transport)."""

from __future__ import annotations

import copy
import hmac
import inspect
import itertools
import logging
import os
import random
import select
import socket
import ssl
import threading
import time

import dhp.transport.shipper as shipper_module
import pytest
from dhp import api
from dhp.core import chain
from dhp.core.errors import IntegrityError, InvalidInput, NotFound
from dhp.store import Store
from dhp.transport import server as net
from dhp.transport.shipper import NetShipper, backoff, connect
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from transport_helpers import (
    SECRET,
    FakeServer,
    RawClient,
    ServerProcess,
    envelope,
    frame,
    make_cert,
    make_signed_cert,
    records,
    result_record,
)


@pytest.fixture
def server(tmp_path):
    srv = net.TransportServer(tmp_path / "peer", port=0, secret=SECRET).start()
    yield srv
    srv.stop()


def shipper(tmp_path, port, name="buf", **kw):
    kw.setdefault("secret", SECRET)
    return NetShipper("127.0.0.1", port, local_logpath=tmp_path / f"{name}.jsonl", **kw)


def snapshot(store) -> list:
    """Everything a peer store holds, to compare before and after a rejection."""
    out = []
    for item in api.list_handoffs(store):
        hid = item["handoff_id"]
        out.append((item, [r["hash"] for r in api.checkpoints(store, hid)],
                    api.status(store, hid)["state"]))
    return out


def codes(answers):
    return [a["error"]["code"] if a["type"] == "error" else "ack" for a in answers]


# --- handshake ------------------------------------------------------------------------------

@pytest.mark.covers("DHP-TRN-004", "DHP-TRN-005")
def test_handshake_negotiates_and_proves_both_ways(server):
    client = RawClient(server.port)
    ch = client.challenge
    assert ch["version"] == "1.0" and ch["max_frame"] == net.DEFAULT_MAX_FRAME
    assert len(ch["nonce"]) == 64 and int(ch["nonce"], 16) >= 0
    other = RawClient(server.port)
    assert other.challenge["nonce"] != ch["nonce"], "a fresh nonce per connection"
    client.close()
    other.close()


@pytest.mark.covers("DHP-TRN-004")
def test_unsupported_version_is_refused(server):
    client = RawClient(server.port, None)
    client.send({"type": "hello", "versions": ["2.0", "3.1"], "nonce": "ab" * 32})
    (answer,) = client.answers(1)
    assert answer["type"] == "error" and answer["error"]["code"] == "unsupported_version"
    assert answer["error"]["requirement"] == "DHP-TRN-004"
    assert client.closed()


@pytest.mark.covers("DHP-TRN-006", "DHP-TRN-001")
@pytest.mark.parametrize("first", [
    lambda env: frame("envelope", 0, env),  # data before any hello
    lambda env: b"not json at all\n",
    lambda env: {"type": "auth", "proof": "00" * 32},
])
def test_nothing_is_accepted_before_hello(server, first):
    before = snapshot(server.store)
    client = RawClient(server.port, None)
    client.send(first(envelope()))
    (answer,) = client.answers(1)
    assert answer["type"] == "error" and "id" not in answer
    assert answer["error"]["code"] == "invalid_input"
    assert client.closed()
    assert snapshot(server.store) == before


@pytest.mark.covers("DHP-TRN-006")
def test_data_instead_of_auth_is_refused(server):
    env = envelope()
    client = RawClient(server.port, None)
    client.send({"type": "hello", "versions": ["1.0"], "nonce": "cd" * 32})
    (challenge,) = client.answers(1)
    assert challenge["type"] == "challenge"
    client.send(frame("envelope", 0, env))
    (answer,) = client.answers(1)
    assert answer["error"]["code"] == "invalid_input" and client.closed()
    assert snapshot(server.store) == []


@pytest.mark.covers("DHP-TRN-006", "DHP-TRN-005")
def test_wrong_client_proof_is_refused_and_nothing_stored(server):
    client = RawClient(server.port, None)
    nonce = "ef" * 32
    client.send({"type": "hello", "versions": ["1.0"], "nonce": nonce})
    (challenge,) = client.answers(1)
    wrong = net.proof(b"another-secret-of-enough-bytes", "client", "1.0", nonce,
                      challenge["nonce"])
    client.send({"type": "auth", "proof": wrong}, frame("envelope", 0, envelope()))
    (answer,) = client.answers(1)
    assert answer["error"]["code"] == "integrity_error"
    assert answer["error"]["requirement"] == "DHP-TRN-006"
    assert client.closed()
    assert snapshot(server.store) == []
    assert server.stats["rejected_connections"] >= 1


@pytest.mark.covers("DHP-TRN-006")
def test_replayed_proof_from_another_connection_is_refused(server):
    """A proof is bound to both nonces: one overheard on a connection is useless on the next."""
    nonce = "12" * 32
    first = RawClient(server.port, None)
    first.send({"type": "hello", "versions": ["1.0"], "nonce": nonce})
    (c1,) = first.answers(1)
    good = net.proof(SECRET, "client", "1.0", nonce, c1["nonce"])
    first.send({"type": "auth", "proof": good})
    assert first.answers(1)[0]["type"] == "welcome"
    second = RawClient(server.port, None)
    second.send({"type": "hello", "versions": ["1.0"], "nonce": nonce})  # same client nonce
    second.answers(1)
    second.send({"type": "auth", "proof": good})
    assert second.answers(1)[0]["error"]["code"] == "integrity_error"
    first.close()


@pytest.mark.covers("DHP-TRN-008")
def test_both_ends_compare_proofs_in_constant_time(server, monkeypatch):
    compared = []
    real = hmac.compare_digest

    def spy(a, b):
        compared.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)
    # The shipper's end checks the server's proof Ps with it...
    client = RawClient(server.port)
    server_proof = client.challenge["proof"]
    assert (server_proof, server_proof) in compared
    client.close()
    # ...and the server's end the shipper's proof Pc, here a wrong one.
    raw = RawClient(server.port, None)
    nonce = "ab" * 32
    raw.send({"type": "hello", "versions": ["1.0"], "nonce": nonce})
    (challenge,) = raw.answers(1)
    raw.send({"type": "auth", "proof": "00" * 32})
    assert raw.answers(1)[0]["error"]["code"] == "integrity_error"
    expected = net.proof(SECRET, "client", "1.0", nonce, challenge["nonce"])
    assert (expected, "00" * 32) in compared
    assert raw.closed()


def _seconds_until_closed(sock: socket.socket, dribble: bytes = b"", limit: float = 5.0):
    """How long the server keeps `sock` open while we send `dribble` a byte per 50 ms (None if
    still open after `limit` seconds)."""
    started = time.monotonic()
    try:
        for i in itertools.count():
            if select.select([sock], [], [], 0.05)[0] and sock.recv(4096) == b"":
                break
            if time.monotonic() - started > limit:
                return None
            if i < len(dribble):
                sock.sendall(dribble[i:i + 1])
    except OSError:  # reset: closed too
        pass
    return time.monotonic() - started


@pytest.mark.covers("DHP-TRN-008")
def test_a_handshake_not_completed_in_time_is_cut_off(tmp_path):
    default = inspect.signature(net.TransportServer).parameters["handshake_timeout"].default
    assert default == 10
    with net.TransportServer(tmp_path / "peer", port=0, secret=SECRET,
                             handshake_timeout=0.3) as srv:
        silent = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
        # Each byte comes well within the limit; the handshake as a whole does not.
        slow = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
        hello = net.encode({"type": "hello", "versions": ["1.0"], "nonce": "ab" * 32})
        took = _seconds_until_closed(slow, hello)
        assert took is not None and took < 2, f"a dribbled hello held the connection {took} s"
        assert _seconds_until_closed(silent, limit=2) is not None
        silent.close()
        slow.close()
        assert srv.stats["rejected_connections"] == 2
        # a handshake that completes in time is not cut off afterwards
        client = RawClient(srv.port)
        time.sleep(0.5)
        client.send(frame("envelope", 0, envelope()))
        assert client.answers(1)[0]["type"] == "ack"
        client.close()


@pytest.mark.covers("DHP-TRN-012")
def test_a_secret_file_open_to_others_is_warned_about(tmp_path, caplog):
    path = tmp_path / "secret"
    path.write_bytes(SECRET + b"\n")
    os.chmod(path, 0o600)
    with caplog.at_level(logging.WARNING, logger="dhp.transport"):
        assert net.load_secret(path) == SECRET
    assert caplog.records == []
    os.chmod(path, 0o640)
    with caplog.at_level(logging.WARNING, logger="dhp.transport"):
        assert net.load_secret(path) == SECRET
    (warning,) = caplog.records
    assert "mode 640" in warning.getMessage() and "chmod 600" in warning.getMessage()
    # dhp-transport says so on stderr when it starts, even with -q
    server = ServerProcess(tmp_path / "peer", str(path))
    assert "accessible to group or others" in server.stop()


@pytest.mark.covers("DHP-TRN-007", "DHP-TRN-005")
def test_shipper_never_talks_to_a_server_without_the_secret(tmp_path):
    fake = FakeServer(secret=b"an-impostor-without-the-secret")
    ship = shipper(tmp_path, fake.port, backoff=(0.02, 0.05))
    env = envelope()
    ship.ship_checkpoint(env, records(env, 1)[0])
    deadline = time.monotonic() + 5
    while fake.connections < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    ship.close(timeout=0.2)
    fake.close()
    assert isinstance(ship.last_error, IntegrityError)
    assert ship.last_error.requirement == "DHP-TRN-007"
    assert fake.frames == [], "no auth and no data frame reached the impostor"
    assert b'"type":"auth"' not in fake.received and b"envelope" not in fake.received


@pytest.mark.covers("DHP-TRN-005")
def test_the_secret_never_crosses_the_wire(tmp_path):
    fake = FakeServer()  # knows the secret: the shipper authenticates and ships to it
    ship = shipper(tmp_path, fake.port)
    env = envelope()
    for r in records(env, 3):
        ship.ship_checkpoint(env, r)
    assert ship.flush(10)
    ship.close()
    fake.close()
    kinds = [f["type"] for f in fake.frames if f["type"] != "bye"]
    assert kinds == ["auth", "envelope", "checkpoint", "checkpoint", "checkpoint"]
    wire = bytes(fake.received)
    for form in (SECRET, SECRET.hex().encode(), SECRET.decode().upper().encode()):
        assert form not in wire


@pytest.mark.covers("DHP-TRN-013")
@pytest.mark.parametrize("bad", [b"", b"short", "fifteen-bytes!!", 12345,
                                 "thirty-one-bytes-of-a-passphras", "abc" * 11])
def test_short_or_odd_secrets_are_refused(tmp_path, bad):
    with pytest.raises(InvalidInput) as info:
        net.TransportServer(tmp_path / "p", port=0, secret=bad)
    assert info.value.requirement == "DHP-TRN-013"
    with pytest.raises(InvalidInput):
        NetShipper("127.0.0.1", 1, local_logpath=tmp_path / "b", secret=bad)


def test_secret_file_loses_its_trailing_newline(tmp_path):
    path = tmp_path / "s"
    path.write_bytes(SECRET + b"\n")
    assert net.load_secret(path) == SECRET


# --- data frames ----------------------------------------------------------------------------

@pytest.mark.covers("DHP-TRN-018", "DHP-TRN-020", "DHP-TRN-017")
def test_frames_are_acked_in_order_and_the_peer_can_resume(server):
    env = envelope()
    recs = records(env, 5)
    client = RawClient(server.port)
    client.send(frame("envelope", 10, env))
    assert client.answers(1) == [{"type": "ack", "id": 10}]
    assert api.status(server.store, env["handoff_id"])["state"] == "pending"
    client.send(*[frame("checkpoint", 11 + i, r) for i, r in enumerate(recs)])
    assert client.answers(5) == [{"type": "ack", "id": 11 + i} for i in range(5)]
    status = api.status(server.store, env["handoff_id"])
    assert status["state"] == "orphaned" and status["fence"] == 1
    assert status["attempts"] == 1 and status["steps"] == 5 and status["spend"] == 2.5
    # a standby on the peer takes over from the last shipped checkpoint, under a higher fence
    with api.recover(server.store, env["handoff_id"], "standby") as ctx:
        assert ctx.last_checkpoint == recs[-1]["state"] and ctx.fence == 2
        ctx.complete({"n": 5})
    assert api.checkpoints(server.store, env["handoff_id"]) == recs
    client.close()


@pytest.mark.covers("DHP-TRN-020")
def test_result_frame_completes_and_fences_count_attempts(server):
    env = envelope("r")
    first = records(env, 2, fence=1)
    second = records(env, 2, fence=3, start=3, prev=first[-1]["hash"])
    res = result_record(env, second[-1], fence=3)
    client = RawClient(server.port)
    client.send(frame("envelope", 0, env),
                *[frame("checkpoint", i + 1, r) for i, r in enumerate(first + second)],
                frame("result", 9, res))
    assert codes(client.answers(6)) == ["ack"] * 6
    status = api.status(server.store, env["handoff_id"])
    assert status["state"] == "completed" and status["fence"] == 3 and status["attempts"] == 2
    assert api.result(server.store, env["handoff_id"]) == {"n": 1}
    client.close()


def _shipped(server, count=3, tag="s"):
    env = envelope(tag)
    recs = records(env, count)
    client = RawClient(server.port)
    client.send(frame("envelope", 0, env), *[frame("checkpoint", i + 1, r)
                                              for i, r in enumerate(recs)])
    assert codes(client.answers(count + 1)) == ["ack"] * (count + 1)
    return client, env, recs


@pytest.mark.covers("DHP-TRN-016")
def test_the_same_frames_again_are_acked_not_duplicated(server):
    client, env, recs = _shipped(server)
    before = snapshot(server.store)
    client.send(frame("envelope", 20, env), *[frame("checkpoint", 21 + i, r)
                                               for i, r in enumerate(recs)])
    answers = client.answers(4)
    assert all(a["type"] == "ack" and a["duplicate"] is True for a in answers)
    assert snapshot(server.store) == before
    assert len(api.checkpoints(server.store, env["handoff_id"])) == 3
    client.close()


def _changed(record, **changes):
    """A record with other content but a correct hash: a replay with changes."""
    body = {k: v for k, v in record.items() if k != "hash"}
    body.update(changes)
    return dict(body, hash=chain.record_hash(body))


BAD_FRAMES = {
    # name: (make frame from (env, recs), expected code, requirement)
    "forged envelope": (lambda env, recs: frame("envelope", 50, dict(
        envelope("other"), handoff_id="sha256:" + "0" * 64)), "integrity_error", "DHP-ENV-002"),
    "forged envelope, known id": (lambda env, recs: frame("envelope", 50, dict(
        envelope("other"), handoff_id=env["handoff_id"])), "integrity_error", "DHP-ENV-002"),
    "tampered state": (lambda env, recs: frame("checkpoint", 50, dict(
        recs[3], state={"step": 999})), "integrity_error", "DHP-CKP-005"),
    "replayed with changes": (lambda env, recs: frame("checkpoint", 50, _changed(
        recs[1], state={"step": "changed"})), "integrity_error", "DHP-TRN-016"),
    "reordered (seq gap)": (lambda env, recs: frame("checkpoint", 50, recs[4]),
                            "integrity_error", "DHP-CKP-002"),
    "wrong prev": (lambda env, recs: frame("checkpoint", 50, _changed(
        recs[3], prev=recs[1]["hash"])), "integrity_error", "DHP-CKP-004"),
    "fence zero": (lambda env, recs: frame("checkpoint", 50, _changed(recs[3], fence=0)),
                   "invalid_input", "DHP-CKP-001"),
    "other handoff's record": (lambda env, recs: frame("checkpoint", 50, records(
        envelope("unknown"), 1)[0]), "not_found", "DHP-TRN-014"),
    "result against the schema": (lambda env, recs: frame("result", 50, chain.make_result_record(
        env["handoff_id"], 1, {"n": "not an integer"}, recs[2]["hash"])),
        "schema_violation", "DHP-RES-001"),
    "result off the chain": (lambda env, recs: frame("result", 50, chain.make_result_record(
        env["handoff_id"], 1, {"n": 1}, recs[0]["hash"])), "integrity_error", "DHP-RES-005"),
    "bad record shape": (lambda env, recs: frame("checkpoint", 50, {"seq": 4}),
                         "invalid_input", "DHP-CKP-001"),
    "extra member": (lambda env, recs: dict(frame("checkpoint", 50, recs[3]), extra=1),
                     "invalid_input", "DHP-TRN-001"),
}


@pytest.mark.covers("DHP-TRN-015", "DHP-TRN-014", "DHP-TRN-016", "DHP-TRN-001", "DHP-SEC-001")
@pytest.mark.parametrize("name", sorted(BAD_FRAMES))
def test_bad_frames_are_rejected_with_their_code_and_nothing_stored(server, name):
    client, env, recs = _shipped(server)
    full = records(env, 5)
    make, code, requirement = BAD_FRAMES[name]
    before = snapshot(server.store)
    client.send(make(env, full))
    (answer,) = client.answers(1)
    assert answer["type"] == "error" and answer["id"] == 50
    assert answer["error"]["code"] == code, answer
    assert answer["error"]["requirement"] == requirement, answer
    assert answer["error"]["definite"] is True
    assert snapshot(server.store) == before
    # the connection is still good: the right next record is stored
    client.send(frame("checkpoint", 51, full[3]))
    assert client.answers(1) == [{"type": "ack", "id": 51}]
    client.close()


@pytest.mark.covers("DHP-TRN-015")
def test_lower_fence_breaks_the_chain(server):
    env = envelope("f")
    high = records(env, 2, fence=2)
    low = records(env, 1, fence=1, start=3, prev=high[-1]["hash"])
    client = RawClient(server.port)
    client.send(frame("envelope", 0, env), *[frame("checkpoint", i + 1, r)
                                              for i, r in enumerate(high + low)])
    answers = client.answers(4)
    assert codes(answers) == ["ack", "ack", "ack", "integrity_error"]
    assert answers[3]["error"]["requirement"] == "DHP-CKP-006"
    assert len(api.checkpoints(server.store, env["handoff_id"])) == 2
    client.close()


@pytest.mark.covers("DHP-TRN-018")
def test_mixed_pipeline_is_answered_in_order(server):
    env = envelope("m")
    recs = records(env, 3)
    client = RawClient(server.port)
    client.send(frame("envelope", 7, env), frame("checkpoint", 8, recs[0]),
                frame("checkpoint", 9, recs[2]), frame("checkpoint", 10, recs[1]),
                frame("checkpoint", 11, recs[2]))
    answers = client.answers(5)
    assert [a["id"] for a in answers] == [7, 8, 9, 10, 11]
    assert codes(answers) == ["ack", "ack", "integrity_error", "ack", "ack"]
    for a in answers:
        assert net.schemas.errors("transport-frame", a) == []
    client.close()


@pytest.mark.covers("DHP-TRN-019")
def test_records_for_a_handoff_taken_over_on_the_peer_are_refused(server):
    client, env, recs = _shipped(server)
    hid = env["handoff_id"]
    more = records(env, 2, start=4, prev=recs[-1]["hash"])
    ctx = api.recover(server.store, hid, "standby")  # claimed live here now (fence 2)
    client.send(frame("checkpoint", 60, more[0]))
    answer = client.answers(1)[0]
    assert answer["error"]["code"] == "conflict"
    assert answer["error"]["requirement"] == "DHP-TRN-019"
    ctx.release()  # released here: fence 2 stays, so the fence-1 record is stale
    client.send(frame("checkpoint", 61, more[0]))
    answer = client.answers(1)[0]
    assert answer["error"]["code"] == "lease_lost"
    with api.recover(server.store, hid, "standby2") as ctx2:
        ctx2.complete({"n": 2})
    client.send(frame("checkpoint", 62, more[0]))
    assert client.answers(1)[0]["error"]["code"] == "conflict"
    assert len(api.checkpoints(server.store, hid)) == 3
    client.close()


# --- frame size, torn frames, fuzz ----------------------------------------------------------

@pytest.mark.covers("DHP-TRN-002")
def test_an_oversized_frame_is_refused_and_the_connection_closed(tmp_path):
    limit = 64 * 1024
    with net.TransportServer(tmp_path / "peer", port=0, secret=SECRET, max_frame=limit) as srv:
        client = RawClient(srv.port)
        assert client.challenge["max_frame"] == limit
        env = envelope()
        client.send(frame("envelope", 0, env))
        client.answers(1)
        big = records(env, 1, pad=limit)[0]
        client.send(frame("checkpoint", 1, big))
        (answer,) = client.answers(1)
        assert answer["error"]["code"] == "invalid_input"
        assert answer["error"]["requirement"] == "DHP-TRN-002"
        assert client.closed()
        assert api.checkpoints(srv.store, env["handoff_id"]) == []
        # a frame that never ends is cut off at the bound, not buffered
        endless = RawClient(srv.port)
        endless.sock.sendall(b"{" + b" " * (limit + 10))
        assert endless.answers(1)[0]["error"]["requirement"] == "DHP-TRN-002"
        # a shipper refuses to queue what the server would refuse
        ship = shipper(tmp_path, srv.port, max_frame=limit)
        with pytest.raises(InvalidInput) as info:
            ship.ship_checkpoint(env, big)
        assert info.value.requirement == "DHP-TRN-002"
        ship.close()
    with pytest.raises(InvalidInput):
        net.TransportServer(tmp_path / "p2", port=0, secret=SECRET, max_frame=1000)


@pytest.mark.covers("DHP-TRN-015")
def test_a_torn_frame_stores_nothing_and_the_next_connection_works(server):
    env = envelope("t")
    recs = records(env, 2)
    client = RawClient(server.port)
    client.send(frame("envelope", 0, env))
    client.answers(1)
    line = net.encode(frame("checkpoint", 1, recs[0]))
    client.sock.sendall(line[: len(line) // 2])  # the shipper dies in the middle of a frame
    client.close()
    time.sleep(0.1)
    assert api.checkpoints(server.store, env["handoff_id"]) == []
    again = RawClient(server.port)
    again.send(frame("checkpoint", 1, recs[0]))
    assert again.answers(1) == [{"type": "ack", "id": 1}]
    again.close()


@pytest.mark.covers("DHP-TRN-001")
@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_frame_parser_fuzz_raises_only_invalid_input(data):
    try:
        net.data_frame(net.parse(data))
    except InvalidInput:
        pass


@pytest.mark.covers("DHP-TRN-001", "DHP-TRN-006")
@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.lists(st.binary(min_size=1, max_size=200), min_size=1, max_size=4),
       authenticated=st.booleans())
def test_server_fuzz_no_crash_no_hang_no_store_change(server, data, authenticated):
    before = snapshot(server.store)
    client = RawClient(server.port, SECRET if authenticated else None, timeout=2)
    client.sock.sendall(b"\n".join(data) + b"\n")
    client.sock.shutdown(socket.SHUT_WR)
    client.sock.settimeout(2)
    try:  # the server answers and/or closes promptly; it never hangs
        while client.sock.recv(65536):
            pass
    except ConnectionResetError:
        pass
    client.close()
    assert snapshot(server.store) == before
    probe = RawClient(server.port)  # still serving
    probe.close()


# --- the shipper ----------------------------------------------------------------------------

@pytest.mark.covers("DHP-TRN-023", "DHP-TRN-021", "DHP-TRN-024")
def test_shipping_never_waits_for_the_network_and_delivers_later(tmp_path):
    with socket.socket() as probe:  # a port with nobody listening (yet)
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    ship = shipper(tmp_path, port, backoff=(0.02, 0.1), timeout=2)
    env = envelope("late")
    recs = records(env, 200)
    begin = time.perf_counter()
    for r in recs:
        ship.ship_checkpoint(env, r)
    assert time.perf_counter() - begin < 1.0, "the worker waited for the network"
    assert not ship.flush(0.3) and ship.pending > 0 and ship.acked == 0
    srv = net.TransportServer(tmp_path / "peer", port=port, secret=SECRET).start()
    try:
        assert ship.flush(15)
        assert ship.acked == 201
        assert api.checkpoints(srv.store, env["handoff_id"]) == recs
    finally:
        ship.close()
        srv.stop()


@pytest.mark.covers("DHP-TRN-021")
def test_a_restarted_shipper_sends_what_its_predecessor_left(tmp_path, server):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        dead_port = probe.getsockname()[1]
    env = envelope("left")
    recs = records(env, 20)
    first = shipper(tmp_path, dead_port, backoff=(0.02, 0.05))
    for r in recs:
        first.ship_checkpoint(env, r)
    assert not first.close(timeout=0.2)
    second = shipper(tmp_path, server.port)  # same buffer file, a live server
    assert second.flush(10)
    second.close()
    assert api.checkpoints(server.store, env["handoff_id"]) == recs
    # a torn last frame in the buffer (a crash mid-append) is dropped, the rest delivered
    env2 = envelope("torn")
    recs2 = records(env2, 2)
    third = shipper(tmp_path, dead_port, name="torn")
    third.ship_checkpoint(env2, recs2[0])
    third.close(timeout=0.1)
    with open(tmp_path / "torn.jsonl", "ab") as f:
        f.write(net.encode(frame("checkpoint", 99, recs2[1]))[:40])
    fourth = shipper(tmp_path, server.port, name="torn")
    assert fourth.flush(10)
    fourth.close()
    assert api.checkpoints(server.store, env2["handoff_id"]) == recs2[:1]


@pytest.mark.covers("DHP-TRN-024")
def test_a_definite_refusal_settles_the_frame_and_is_not_resent(tmp_path, server):
    env = envelope("refused")
    recs = records(env, 3)
    ship = shipper(tmp_path, server.port)
    ship.ship_checkpoint(env, recs[0])
    assert ship.flush(10)
    with api.recover(server.store, env["handoff_id"], "standby"):
        ship.ship_checkpoint(env, recs[1])  # claimed on the peer: conflict
        assert ship.flush(10)
    assert [e.code for _, e in ship.rejected] == ["conflict"]
    assert (tmp_path / "buf.jsonl.rejected").read_text().count("conflict") == 1
    refused = server.stats["rejected_frames"]
    ship.close()
    again = shipper(tmp_path, server.port)  # a restart replays the buffer; the server dedups
    assert again.flush(10)
    again.close()
    assert len(api.checkpoints(server.store, env["handoff_id"])) == 1
    assert server.stats["rejected_frames"] >= refused


@pytest.mark.covers("DHP-TRN-024")
def test_an_unknown_outcome_is_sent_again(tmp_path):
    calls = []

    def answer(f):
        calls.append(f["id"])
        if len(calls) == 1:  # the first answer: outcome unknown
            return {"type": "error", "id": f["id"], "error": {
                "code": "unavailable", "message": "store busy", "definite": False}}
        if len(calls) == 2:  # then the connection drops without an answer
            return "close"
        return {"type": "ack", "id": f["id"]}

    fake = FakeServer(answer=answer)
    ship = shipper(tmp_path, fake.port, backoff=(0.01, 0.02))
    env = envelope()
    (frame_id,) = ship.ship_envelope(env)
    assert ship.flush(10)
    ship.close()
    fake.close()
    assert calls == [frame_id, frame_id, frame_id] and ship.acked == 1


@pytest.mark.covers("DHP-TRN-022")
def test_reconnect_waits_grow_exponentially_randomised_and_capped(tmp_path, monkeypatch):
    steps = [0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0, 2.0]
    waits = list(itertools.islice(backoff(0.05, 2.0, random.Random(7)), len(steps)))
    for wait, step in zip(waits, steps, strict=True):
        assert step / 2 <= wait <= step
    assert len({round(w / s, 9) for w, s in zip(waits, steps, strict=True)}) > 1, \
        "every wait is the same fraction of its step: not randomised"
    assert waits != list(itertools.islice(backoff(0.05, 2.0, random.Random(8)), len(steps)))
    # The shipper draws the waits between its attempts from it, with its own bounds.
    drawn = []

    def recording(first, cap, rng=None):
        for wait in backoff(first, cap, rng):
            drawn.append((first, cap, wait))
            yield wait

    monkeypatch.setattr(shipper_module, "backoff", recording)
    probe = socket.create_server(("127.0.0.1", 0))
    dead_port = probe.getsockname()[1]
    probe.close()
    ship = shipper(tmp_path, dead_port, backoff=(0.01, 0.04))
    ship.ship_envelope(envelope())
    deadline = time.monotonic() + 5
    while len(drawn) < 5 and time.monotonic() < deadline:
        time.sleep(0.01)
    ship.close(timeout=0)
    assert len(drawn) >= 5
    for (first, cap, wait), step in zip(drawn, [0.01, 0.02, 0.04, 0.04, 0.04], strict=False):
        assert (first, cap) == (0.01, 0.04) and step / 2 <= wait <= step


@pytest.mark.covers("DHP-TRN-021")
def test_the_buffer_is_compacted_and_survives_it(tmp_path, server):
    ship = shipper(tmp_path, server.port, compact_bytes=4096)
    env = envelope("compact")
    recs = records(env, 300, pad=100)
    for i, r in enumerate(recs):
        ship.ship_checkpoint(env, r)
        if i % 50 == 0:
            ship.flush(10)
    assert ship.flush(10)
    assert os.path.getsize(tmp_path / "buf.jsonl") < 300 * 200
    ship.close()
    assert api.checkpoints(server.store, env["handoff_id"]) == recs


@pytest.mark.covers("DHP-TRN-016")
def test_several_shippers_at_once_some_shipping_the_same_handoff(tmp_path, server):
    envs = [envelope(f"many{i}") for i in range(6)]
    chains = [records(e, 150) for e in envs]
    jobs = [(envs[i], chains[i]) for i in range(6)] + [(envs[0], chains[0]),
                                                      (envs[1], chains[1])]
    shippers = [shipper(tmp_path, server.port, name=f"s{i}") for i in range(len(jobs))]

    def run(ship, env, recs):
        for r in recs:
            ship.ship_checkpoint(env, r)

    threads = [threading.Thread(target=run, args=(s, *job))
               for s, job in zip(shippers, jobs, strict=True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(s.flush(30) for s in shippers)
    for s in shippers:
        assert s.rejected == []
        s.close()
    for env, recs in zip(envs, chains, strict=True):
        stored = api.checkpoints(server.store, env["handoff_id"])
        assert stored == recs
        chain.verify_chain(env["handoff_id"], stored)
    # Each distinct frame stored once (6 envelopes and their records); every frame of the two
    # repeated handoffs' second shipper a duplicate (more after a reconnect's resend).
    frames = 150 + 1
    assert server.stats["stored"] == 6 * frames
    assert server.stats["duplicates"] >= 2 * frames


# --- TLS ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cert(tmp_path_factory):
    made = make_cert(tmp_path_factory.mktemp("tls"))
    if made is None:
        pytest.skip("no TLS test certificate: the openssl command is not installed")
    return made


@pytest.mark.covers("DHP-TRN-010")
def test_tls_ships_and_refuses_plaintext_and_unverified_certificates(tmp_path, cert):
    certfile, keyfile = cert
    context = net.server_ssl_context(certfile, keyfile)
    with net.TransportServer(tmp_path / "peer", port=0, secret=SECRET,
                             ssl_context=context) as srv:
        env = envelope("tls")
        recs = records(env, 5)
        good = shipper(tmp_path, srv.port, name="tls",
                       ssl_context=net.client_ssl_context(certfile))
        for r in recs:
            good.ship_checkpoint(env, r)
        assert good.flush(10)
        good.close()
        assert api.checkpoints(srv.store, env["handoff_id"]) == recs
        # a plaintext shipper gets nowhere, and nothing it sent is stored
        env2 = envelope("plain")
        plain = shipper(tmp_path, srv.port, name="plain", backoff=(0.02, 0.05), timeout=2)
        plain.ship_checkpoint(env2, records(env2, 1)[0])
        assert not plain.flush(1.0)
        plain.close(timeout=0.1)
        assert plain.last_error is not None and plain.acked == 0
        with pytest.raises(NotFound):
            api.status(srv.store, env2["handoff_id"])
        # a raw plaintext hello is not answered with any frame
        raw = socket.create_connection(("127.0.0.1", srv.port), timeout=3)
        raw.sendall(net.encode({"type": "hello", "versions": ["1.0"], "nonce": "ab" * 32}))
        reply = b""
        try:
            while chunk := raw.recv(4096):
                reply += chunk
        except OSError:
            pass
        raw.close()
        assert b"challenge" not in reply
        # verification is on by default: the system trust store does not know this cert
        with pytest.raises(ssl.SSLCertVerificationError):
            connect("127.0.0.1", srv.port, SECRET, ssl_context=net.client_ssl_context())
        # and the host name is checked
        with pytest.raises(ssl.SSLCertVerificationError):
            connect("127.0.0.1", srv.port, SECRET, server_hostname="elsewhere.example",
                        ssl_context=net.client_ssl_context(certfile))


@pytest.mark.covers("DHP-TRN-010", "DHP-TRN-011")
def test_mutual_tls_requires_a_client_certificate(tmp_path, cert):
    certfile, keyfile = cert
    authority = make_cert(tmp_path, "client-ca")
    client_cert = make_signed_cert(tmp_path, authority, "client")
    context = net.server_ssl_context(certfile, keyfile, client_cafile=authority[0])
    with net.TransportServer(tmp_path / "peer", port=0, secret=SECRET,
                             ssl_context=context) as srv:

        def attempt(**identity):
            return connect("127.0.0.1", srv.port, SECRET,
                           ssl_context=net.client_ssl_context(certfile, **identity))

        with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
            attempt()  # no client certificate
        with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
            attempt(certfile=certfile, keyfile=keyfile)  # one the authority did not sign
        sock, reader, challenge = attempt(certfile=client_cert[0], keyfile=client_cert[1])
        assert challenge["version"] == "1.0"
        sock.close()
        deadline = time.monotonic() + 2  # the server, not the client, refused the first two
        while srv.stats["rejected_connections"] < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert srv.stats["rejected_connections"] == 2


def test_records_are_copied_not_shared(server, tmp_path):
    """The shipper serialises at call time: a caller mutating its dict later changes nothing."""
    env = envelope("copy")
    rec = copy.deepcopy(records(env, 1)[0])
    ship = shipper(tmp_path, server.port)
    ship.ship_checkpoint(env, rec)
    rec["state"]["step"] = 1000
    assert ship.flush(10)
    ship.close()
    assert api.checkpoints(server.store, env["handoff_id"])[0]["state"]["step"] == 1


def test_peer_store_can_be_passed_in(tmp_path):
    store = Store(tmp_path / "given")
    with net.TransportServer(store, port=0, secret=SECRET) as srv:
        client = RawClient(srv.port)
        client.send(frame("envelope", 0, envelope()))
        assert client.answers(1)[0]["type"] == "ack"
        client.close()
    assert len(api.list_handoffs(store)) == 1
    store.close()


@pytest.mark.covers("DHP-TRN-001")
def test_a_record_that_is_not_json_is_refused_by_name_and_queues_nothing(tmp_path, server):
    ship = shipper(tmp_path, server.port)
    env = envelope("not-json")
    good = records(env, 1)[0]
    bad = dict(good, state={"tags": {"a", "b"}})  # a set: no JSON value
    with pytest.raises(InvalidInput, match="not JSON") as refused:
        ship.ship_checkpoint(env, bad)
    assert refused.value.requirement == "DHP-TRN-001"
    ship.ship_checkpoint(env, good)  # the shipper goes on
    assert ship.flush(30)
    ship.close()
    assert api.checkpoints(server.store, env["handoff_id"]) == [good]
