"""The kit's transport profile (conformance/dhp_conform/suites/transport.py) against the
reference, against an adapter that does not claim the feature, and the kit's own wire code
(dhp_conform.wire) against itself. The planted-bug mutant of the transport
(`ingest-without-hash-check`) runs with the others in tests/test_conform.py."""

from __future__ import annotations

import hashlib
import hmac
import time

import pytest
from dhp_conform import oracle, wire
from test_conform import _script, conform

TRANSPORT_IDS = ("DHP-TRN-001", "DHP-TRN-002", "DHP-TRN-004", "DHP-TRN-005", "DHP-TRN-006",
                 "DHP-TRN-007", "DHP-TRN-014", "DHP-TRN-015", "DHP-TRN-016", "DHP-TRN-017",
                 "DHP-TRN-018", "DHP-TRN-020", "DHP-TRN-021", "DHP-TRN-024", "DHP-TRN-030",
                 "DHP-TRN-031", "DHP-ENV-006", "DHP-ADP-024")


@pytest.mark.covers(*TRANSPORT_IDS, "DHP-ADP-016", "DHP-ADP-017", "DHP-ADP-018")
def test_reference_passes_the_transport_profile_quickly(tmp_path):
    code, report, output = conform(tmp_path, "--quick", "--suite", "transport")
    assert code == 0, output
    assert oracle.schema_errors("report", report) == []
    assert report["verdicts"]["transport"]["verdict"] == "PASS", output
    judged = {r["requirement"] for r in report["results"]
              if r["check"].startswith("transport:") and r["status"] == "PASS"}
    assert set(TRANSPORT_IDS) <= judged, sorted(set(TRANSPORT_IDS) - judged)


# Forwards to the reference adapter but claims no transport.
NO_TRANSPORT = """
import json, subprocess, sys
child = subprocess.Popen([sys.executable, "-m", "dhp.adapter"], stdin=sys.stdin,
                         stdout=subprocess.PIPE, text=True)
for line in child.stdout:
    msg = json.loads(line)
    data = msg.get("data")
    if isinstance(data, dict) and "features" in data:
        data["features"] = [f for f in data["features"] if not f.startswith("transport")]
        data["classes"] = [c for c in data["classes"] if c != "transport"]
    sys.stdout.write(json.dumps(msg) + "\\n")
    sys.stdout.flush()
"""


@pytest.mark.covers("DHP-ADP-003")
def test_profile_is_skipped_with_a_reason_without_the_feature(tmp_path):
    code, report, output = conform(tmp_path, "--quick", "--suite", "transport",
                                   impl=_script(tmp_path, "plain", NO_TRANSPORT))
    assert code == 0, output
    mine = [r for r in report["results"] if r["check"].startswith("transport:")]
    assert mine and all(r["status"] == "SKIP" for r in mine)
    assert all("transport" in r["reason"] for r in mine)


def test_the_kit_proof_is_the_spec_formula():
    """DHP-TRN-005, computed here with hmac directly."""
    secret, nc, ns = b"k" * 32, "a" * 64, "b" * 64
    message = f"dhp-transport/1.0 client {nc} {ns}".encode("ascii")
    assert wire.proof(secret, "client", "1.0", nc, ns) == \
        hmac.new(secret, message, hashlib.sha256).hexdigest()
    assert wire.proof(secret, "server", "1.0", nc, ns) != wire.proof(secret, "client", "1.0",
                                                                     nc, ns)
    assert len(wire.new_nonce()) == 64 and wire.new_nonce() != wire.new_nonce()


def test_kit_server_and_client_agree_and_the_server_cuts_as_told():
    secret = b"s" * 32
    with wire.Server(secret, acks=[1]) as server:
        s = wire.handshake("127.0.0.1", server.port, secret)
        assert s.ok, (s.challenge, s.welcome)
        assert wire.frame_problems(s.challenge) == []
        frames = [{"type": "envelope", "id": i, "envelope": {}} for i in range(3)]
        for f in frames:
            s.conn.send(f)
        got = wire.answers(s.conn, 3, timeout=2.0)
        assert got == [{"type": "ack", "id": 0}]  # one ack, then the cut
        assert s.conn.closed_within(2.0)
        assert server.wait(lambda: server.peers and server.peers[0].cut, 2.0)
        assert server.peers[0].proof_ok is True
        assert secret not in server.received()
        # the wrong secret: the kit's server refuses the proof and stores nothing
        bad = wire.handshake("127.0.0.1", server.port, b"x" * 32)
        assert not bad.ok and bad.welcome["error"]["code"] == "integrity_error"


def test_kit_as_shipper_sees_a_server_that_never_answers():
    """A listener that accepts and stays silent: the handshake ends without a challenge
    instead of hanging the run."""
    import socket

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        started = time.monotonic()
        s = wire.handshake("127.0.0.1", listener.getsockname()[1], b"k" * 32, timeout=0.5)
        assert s.challenge is None and not s.ok
        assert time.monotonic() - started < 3


@pytest.mark.parametrize("suite", ["transport"])
def test_suite_is_registered_and_in_the_default_run(suite):
    from dhp_conform.suites import SUITES

    assert suite in SUITES
    checks = SUITES[suite].CHECKS
    assert all(c.feature in ("transport", "transport-tls") for c in checks)
    assert not any(c.timing for c in checks)  # runs beside other checks, in --quick too


@pytest.mark.covers("DHP-ADP-020")
def test_the_reference_adapter_serves_with_the_max_frame_asked_for(tmp_path):
    """The kit asks transport_serve for a small max_frame so its oversized frame stays small;
    the reference's server must announce exactly that in its challenge."""
    import json

    from dhp.adapter import Adapter
    from dhp.transport.shipper import connect

    secret = "adapter-max-frame-secret-0123456"
    adapter = Adapter()

    def call(op, args):
        return adapter.handle(json.dumps({"id": 1, "op": op, "args": args}))

    assert call("init", {"data": str(tmp_path / "data"), "ttl": 5.0})["ok"]
    served = call("transport_serve", {"secret": secret, "max_frame": 70000})
    try:
        assert served["ok"] and served["data"]["max_frame"] == 70000, served
        sock, _, challenge = connect("127.0.0.1", served["data"]["port"], secret.encode())
        sock.close()
        assert challenge["max_frame"] == 70000
    finally:
        assert call("transport_stop", {})["ok"]
        adapter.store.close()


@pytest.mark.covers("DHP-ENV-006", "DHP-ENV-009")
def test_the_kit_lets_a_receiver_drop_metadata_but_never_change_it():
    from dhp_conform.suites.transport import envelope_changes

    intent = {"dhp": "1.0", "task_kind": "t", "inputs": {}, "output_schema": {}, "budget": {}}
    sent = {"dhp": "1.0", "handoff_id": oracle.handoff_id(intent), "intent": intent,
            "created_at": "2025-03-01T12:00:00Z", "x-origin": {"host": "a"}}
    identity = {k: sent[k] for k in ("dhp", "handoff_id", "intent")}
    assert envelope_changes(dict(sent), sent) == []
    assert envelope_changes(identity, sent) == []  # both metadata members dropped
    assert envelope_changes(dict(identity, created_at="2026-01-01T00:00:00Z"), identity) == []
    assert envelope_changes(dict(sent, created_at="2025-03-01T12:00:01Z"), sent) == [
        "metadata created_at changed from '2025-03-01T12:00:00Z' to '2025-03-01T12:00:01Z'"]
    assert envelope_changes(dict(identity, **{"x-new": 1}), identity) == ["member x-new added"]
    assert envelope_changes(dict(sent, intent=dict(intent, inputs={"a": 1})), sent) == [
        "intent changed"]
