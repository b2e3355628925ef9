"""The transport profile (features transport, transport-tls; spec/transport.md, DHP-TRN-*).

The kit is the other end of a real TCP connection, speaking the protocol with its own code
(dhp_conform.wire): as a shipper against the implementation's server (started through the
adapter's `transport_serve`), with a valid log and then every bad frame the spec names, each
answered with its code and leaving nothing in the store (read back through `status` and
`export_log`, the chain checked by the kit's own oracle); and as a server receiving from the
implementation's shipper (`ship`), checking that the secret never crosses the wire, that the
shipper sends nothing to a server that cannot prove the secret, that the frames and the chain
are valid, and that a connection the kit cuts loses nothing.
"""

from __future__ import annotations

import secrets
import shutil
import socket
import ssl
import subprocess
import time
from typing import Any

from .. import oracle, wire
from .base import SCHEMA, Check, CheckAborted, Ctx, dispatch, take, write

MAX_FRAME = 65536  # what the kit asks the server for, so the oversized frame stays small
DEFAULT_MAX_FRAME = 16 * 1024 * 1024  # a server's maximum when none is asked for (DHP-TRN-002)


# --- what the kit ships -------------------------------------------------------------------

def _secret() -> str:
    return secrets.token_hex(16)  # 32 characters: its UTF-8 bytes are the shared secret


def _handoff(ctx: Ctx, tag: str) -> tuple[str, dict]:
    intent = {"dhp": "1.0", "task_kind": "conform.transport",
              "inputs": {"tag": tag, "n": ctx.rng.getrandbits(48)}, "output_schema": SCHEMA,
              "budget": {}}
    hid = oracle.handoff_id(intent)
    return hid, {"dhp": "1.0", "handoff_id": hid, "intent": intent}


IDENTITY = ("dhp", "handoff_id", "intent")


def envelope_changes(got: Any, sent: dict) -> list[str]:
    """How a received or exported envelope breaks DHP-ENV-006/009 against the one sent:
    the identity members must be equal; a metadata member may be dropped (and created_at
    added), never changed."""
    if not isinstance(got, dict):
        return [f"not an envelope: {_short(got)}"]
    out = [f"{k} changed" for k in IDENTITY if got.get(k) != sent.get(k)]
    for k in set(got) - set(IDENTITY):
        if k in sent and got[k] != sent[k]:
            out.append(f"metadata {k} changed from {sent[k]!r} to {got[k]!r}")
        elif k not in sent and k != "created_at":
            out.append(f"member {k} added")
    return out


def _sealed(body: dict) -> dict:
    return dict(body, hash=oracle.digest(body))


def _record(hid: str, seq: int, prev: str, state: Any, fence: int = 1) -> dict:
    return _sealed({"handoff_id": hid, "seq": seq, "fence": fence, "state": state, "spend": 0,
                    "prev": prev})


def _chain(hid: str, count: int, tag: str = "s") -> list[dict]:
    out: list[dict] = []
    for seq in range(1, count + 1):
        out.append(_record(hid, seq, out[-1]["hash"] if out else hid, {tag: seq}))
    return out


def _result(hid: str, prev: str, result: Any, fence: int = 1) -> dict:
    return _sealed({"handoff_id": hid, "fence": fence, "result": result, "prev": prev})


class Frames:
    """Data frames numbered in sending order, as a shipper numbers them."""

    def __init__(self) -> None:
        self.next = 0

    def make(self, kind: str, payload: dict) -> dict:
        key = "envelope" if kind == "envelope" else "record"
        frame = {"type": kind, "id": self.next, key: payload}
        self.next += 1
        return frame


def _short(value: Any, limit: int = 300) -> str:
    text = value.decode("utf-8", "backslashreplace") if isinstance(value, bytes) else repr(value)
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} chars)"


def _transcript(sent: list[Any], got: list[Any]) -> list[str]:
    return [f"kit sent: {_short(f)}" for f in sent] + [f"server answered: {_short(a)}"
                                                       for a in got]


# --- the implementation's server, through the adapter -----------------------------------

class Peer:
    """The implementation's transport server in one adapter process, and what the kit reads
    back through that process."""

    def __init__(self, ctx: Ctx, name: str, max_frame: int | None = MAX_FRAME):
        self.ctx = ctx
        self.sc = ctx.scenario(name, ttl=5.0)
        self.proc = self.sc.spawn("peer")
        self.secret = _secret()
        serve = {"secret": self.secret, "port": 0}
        if max_frame is not None:  # None: the server's default
            serve["max_frame"] = max_frame
        reply = self.proc.call("transport_serve", serve)
        data = ctx.need(reply, "transport_serve")
        if not isinstance(data, dict) or type(data.get("port")) is not int \
                or type(data.get("max_frame")) is not int:
            ctx.record("DHP-ADP-016", False, "transport_serve must answer {\"port\": int, "
                       f"\"max_frame\": int}}, got {data!r}", ctx.evidence(reply))
            raise CheckAborted("transport_serve gave no port; the check could not go on")
        ctx.record("DHP-ADP-016", True)
        self.port, self.max_frame = data["port"], data["max_frame"]
        self.exports = 0

    def session(self, secret: str | None = None) -> wire.Session:
        return wire.handshake("127.0.0.1", self.port, (secret or self.secret).encode())

    def open(self) -> wire.Session:
        """An authenticated session; abort the check when the handshake fails."""
        s = self.session()
        if not s.ok:
            raise CheckAborted(f"the handshake with the correct secret failed: challenge "
                               f"{_short(s.challenge)}, welcome {_short(s.welcome)}")
        return s

    def stored(self, hid: str) -> dict | None:
        """What the peer holds of a handoff: None when status says not_found, else its state,
        fence, checkpoint hashes (from the exported log, checked by the kit's oracle) and
        result record."""
        reply = self.proc.call("status", {"handoff_id": hid})
        if not reply.ok and reply.code == "not_found":
            return None
        st = self.ctx.need(reply, "status of a shipped handoff")
        out = {"state": st.get("state"), "fence": st.get("fence"),
               "count": (st.get("checkpoints") or {}).get("count"), "hashes": None,
               "result": None, "envelope": None}
        if "export_log" not in self.ctx.features:
            return out
        self.exports += 1
        path = self.sc.data.parent / f"{self.sc.name}-{self.exports}.log.jsonl"
        exported = self.proc.call("export_log", {"handoff_id": hid, "path": str(path)})
        # A store that took a bad record may no longer export it: that is the finding (an
        # ingest that stored what it should have refused), not a reason to stop the check.
        if not exported.ok:
            error = exported.error or {}
            problem = exported.unknown or f"{exported.code}: {error.get('message')}"
            self.ctx.record("DHP-TRN-015", False, f"the peer cannot export {hid} after ingest "
                            f"({problem}): it stored a record it had to refuse",
                            self.ctx.evidence(exported))
            return out
        try:
            log = oracle.check_log(path.read_text(encoding="utf-8"))
        except (OSError, oracle.LogProblem) as exc:
            requirement = getattr(exc, "requirement", "DHP-LOG-001")
            self.ctx.record(requirement, False, f"the log the peer exported after ingest is "
                            f"not valid: {exc}", self.ctx.evidence(exported))
            self.ctx.record("DHP-TRN-015", False, f"the peer stored a chain its own export "
                            f"shows broken: {exc}", self.ctx.evidence(exported))
            return out
        out["hashes"] = [r["hash"] for r in log["checkpoints"]]
        out["result"] = log["result"]
        out["envelope"] = log["envelope"]
        return out


def _exchange(session: wire.Session, frames: list[Any], count: int | None = None) -> list[Any]:
    """Send `frames` in one write (pipelined, as a batch the server reads at once) and read
    up to one answer per frame."""
    session.conn.send(b"".join(f if isinstance(f, bytes) else wire.encode(f) for f in frames))
    return wire.answers(session.conn, len(frames) if count is None else count)


def _is_ack(answer: Any, frame_id: int) -> bool:
    return isinstance(answer, dict) and answer.get("type") == "ack" and answer.get("id") == frame_id


def _error_code(answer: Any) -> str | None:
    if isinstance(answer, dict) and answer.get("type") == "error" \
            and isinstance(answer.get("error"), dict):
        return answer["error"].get("code")
    return None


def _check_answers(ctx: Ctx, answers: list[Any], what: str) -> None:
    """Every answer a valid frame (DHP-TRN-001), every error object valid (DHP-TRN-018)."""
    for a in answers:
        problems = wire.frame_problems(a) if isinstance(a, dict) else ["not a JSON object"]
        if problems:
            ctx.record("DHP-TRN-001", False, f"{what}: the server's answer {_short(a)} is not "
                       f"valid against schemas/transport-frame.json: {problems[:3]}")
        if _error_code(a) is not None and oracle.schema_errors("error", a["error"]):
            ctx.record("DHP-TRN-018", False, f"{what}: the error object of {_short(a)} is not "
                       "valid against schemas/error.json")


# --- the kit as a shipper: a valid log ------------------------------------------------------

def server_valid_log(ctx: Ctx) -> None:
    peer = Peer(ctx, "trn-server-valid")
    s = peer.session()
    ch = s.challenge
    problems = wire.frame_problems(ch) if isinstance(ch, dict) else ["no challenge frame"]
    ctx.record("DHP-TRN-001", not problems, f"the server's challenge {_short(ch)} is not "
               f"valid against schemas/transport-frame.json: {problems[:3]}")
    if problems or not s.ok:
        raise CheckAborted(f"no valid handshake with the correct secret: challenge "
                           f"{_short(ch)}, welcome {_short(s.welcome)}")
    ctx.expect("DHP-TRN-004", ch["version"] == "1.0", f"the server chose version "
               f"{ch['version']!r}, which the kit did not offer")
    expected = wire.proof(peer.secret.encode(), "server", ch["version"], s.hello["nonce"],
                          ch["nonce"])
    ctx.expect("DHP-TRN-005", ch["proof"] == expected, f"the server's proof {ch['proof']} is "
               f"not HMAC-SHA256(secret, 'dhp-transport/1.0 server Nc Ns') = {expected}")
    ctx.expect("DHP-TRN-002", ch["max_frame"] >= 65536 and ch["max_frame"] == peer.max_frame,
               f"the challenge announces max_frame {ch['max_frame']}; transport_serve "
               f"reported {peer.max_frame} (at least 65536 required)")
    ctx.expect("DHP-TRN-005", peer.secret.encode() not in s.conn.received,
               "the server sent the shared secret on the wire")
    # Asked for no maximum, the server bounds frames by the default (DHP-TRN-002).
    by_default = Peer(ctx, "trn-server-default-max-frame", max_frame=None).session()
    announced = by_default.challenge.get("max_frame") \
        if isinstance(by_default.challenge, dict) else None
    ctx.expect("DHP-TRN-002", announced == DEFAULT_MAX_FRAME,
               f"a server started without a max_frame announces {_short(announced)}; the "
               f"default is {DEFAULT_MAX_FRAME} (16 MiB)")
    by_default.conn.close()

    a_id, a_env = _handoff(ctx, "a")
    b_id, b_env = _handoff(ctx, "b")
    # metadata a receiver may drop but must not change (DHP-ENV-006, DHP-ENV-009)
    a_env = dict(a_env, created_at="2025-03-01T12:00:00.5+01:00", **{"x-origin": {"n": 1}})
    a_chain, b_chain = _chain(a_id, 3), _chain(b_id, 2)
    b_result = _result(b_id, b_chain[-1]["hash"], {"total": 7})
    fr = Frames()
    frames = [fr.make("envelope", a_env), *(fr.make("checkpoint", r) for r in a_chain),
              fr.make("envelope", b_env), *(fr.make("checkpoint", r) for r in b_chain),
              fr.make("result", b_result)]
    got = _exchange(s, frames)
    _check_answers(ctx, got, "valid log")
    acked = len(got) == len(frames) and all(_is_ack(a, f["id"]) for a, f in zip(got, frames,
                                                                              strict=True))
    ctx.record("DHP-TRN-018", acked, "a valid log of two handoffs was not answered by one ack "
               "per frame, in order, with the frames' ids", _transcript(frames, got))
    if not acked:
        ctx.record("DHP-TRN-015", False, "a valid envelope, chain and result were not all "
                   "acknowledged", _transcript(frames, got))
        return
    s.conn.close()
    a, b = peer.stored(a_id), peer.stored(b_id)
    ctx.expect("DHP-TRN-017", a is not None and b is not None,
               "acknowledged envelopes are not in the peer's store (status says not_found)")
    if a is None or b is None:
        return
    ctx.expect("DHP-TRN-020", a["state"] == "orphaned" and a["fence"] >= 1,
               f"a shipped handoff with checkpoints is {a['state']} with fence {a['fence']} "
               "on the peer; a standby must be able to recover it (orphaned, fence >= 1)")
    ctx.expect("DHP-TRN-020", b["state"] == "completed",
               f"a shipped handoff whose result arrived is {b['state']}, not completed")
    ctx.expect("DHP-TRN-017", a["count"] == 3 and b["count"] == 2,
               f"the peer reports {a['count']} and {b['count']} checkpoints; 3 and 2 were "
               "acknowledged")
    if a["hashes"] is not None:
        ctx.expect("DHP-TRN-015", a["hashes"] == [r["hash"] for r in a_chain],
                   "the peer's exported log is not exactly the chain shipped")
        changes = envelope_changes(a["envelope"], a_env)
        ctx.expect("DHP-ENV-006", not changes, "the peer's exported envelope is not the one "
                   f"shipped (identity members kept, metadata kept or dropped): {changes}")
        ctx.expect("DHP-TRN-015", b["hashes"] == [r["hash"] for r in b_chain]
                   and b["result"] == b_result,
                   f"the peer's exported log does not end with the shipped result record: "
                   f"{b['result']!r}")
    res = peer.proc.call("result", {"handoff_id": b_id})
    ctx.expect("DHP-TRN-020", res.ok and res.data == {"completed": True, "result": {"total": 7}},
               "result() on the peer does not return the shipped result", res)

    # the same frames again, on a new connection and twice on one: acked, stored once
    s2 = peer.open()
    ctx.expect("DHP-TRN-005", s2.challenge["nonce"] != ch["nonce"],
               "the server reused its nonce on a new connection")
    again = [dict(f, id=i) for i, f in enumerate(frames + frames[1:3])]
    got2 = _exchange(s2, again)
    _check_answers(ctx, got2, "duplicates")
    ctx.record("DHP-TRN-016", len(got2) == len(again)
               and all(_is_ack(x, f["id"]) for x, f in zip(got2, again, strict=True)),
               "frames the peer already holds were not all acknowledged",
               _transcript(again, got2))
    s2.conn.close()
    a2, b2 = peer.stored(a_id), peer.stored(b_id)
    ctx.expect("DHP-TRN-016", a2 is not None and a2["count"] == 3 and b2 is not None
               and b2["count"] == 2 and b2["state"] == "completed"
               and (a2["hashes"] is None or a2["hashes"] == a["hashes"]),
               f"after duplicates the peer holds {a2 and a2['count']} and "
               f"{b2 and b2['count']} checkpoints (3 and 2 expected): a duplicate was stored")


# --- the kit as a shipper: connections that must not get in ----------------------------------

def server_refuses_unauthenticated(ctx: Ctx) -> None:
    peer = Peer(ctx, "trn-server-auth")

    def data(tag: str) -> tuple[str, list[dict]]:
        """A fresh handoff's envelope and first checkpoint, for one case."""
        hid, env = _handoff(ctx, tag)
        fr = Frames()
        return hid, [fr.make("envelope", env), fr.make("checkpoint", _chain(hid, 1)[0])]

    def refused(conn: wire.Conn, sent: list[Any], hid: str, code: str, requirement: str,
                what: str) -> None:
        got = wire.answers(conn, 1, timeout=3.0)
        closed = conn.closed_within(3.0)
        codes = [_error_code(a) for a in got]
        errors_without_id = [a for a in got if _error_code(a) and "id" not in a]
        ctx.record(requirement, codes == [code] and bool(errors_without_id) and closed,
                   f"{what}: expected an error frame without id, code {code}, then the "
                   f"connection closed; got {[_short(a) for a in got]}, "
                   f"{'closed' if closed else 'still open'}", _transcript(sent, got))
        _check_answers(ctx, got, what)
        conn.close()
        ctx.expect(requirement, peer.stored(hid) is None,
                   f"{what}: the server stored handoff {hid} from frames sent without "
                   "authentication")

    # 1. the wrong secret: the proof does not verify
    hid, frames = data("wrong-secret")
    conn = wire.Conn.open("127.0.0.1", peer.port)
    hello = wire.hello_frame()
    conn.send(hello)
    ch = conn.frame()
    if not isinstance(ch, dict) or ch.get("type") != "challenge":
        raise CheckAborted(f"no challenge after hello: {_short(ch)}")
    auth = {"type": "auth", "proof": wire.proof(_secret().encode(), "client", ch["version"],
                                                hello["nonce"], ch["nonce"])}
    for f in (auth, *frames):
        conn.send(f)
    refused(conn, [hello, auth, *frames], hid, "integrity_error", "DHP-TRN-006",
            "auth with the wrong secret")

    # 2. data frames where auth belongs
    hid, frames = data("no-auth")
    conn = wire.Conn.open("127.0.0.1", peer.port)
    hello = wire.hello_frame()
    conn.send(hello)
    conn.frame()
    for f in frames:
        conn.send(f)
    refused(conn, [hello, *frames], hid, "invalid_input", "DHP-TRN-006",
            "data frames instead of auth")

    # 3. data frames before hello
    hid, frames = data("no-hello")
    conn = wire.Conn.open("127.0.0.1", peer.port)
    for f in frames:
        conn.send(f)
    refused(conn, frames, hid, "invalid_input", "DHP-TRN-006", "data frames before hello")

    # 4. a replayed proof: a recorded hello and auth sent again on a new connection
    good = peer.open()
    good.conn.close()
    hid, frames = data("replay")
    conn = wire.Conn.open("127.0.0.1", peer.port)
    conn.send(good.hello)
    ch2 = conn.frame()
    ctx.expect("DHP-TRN-005", not isinstance(ch2, dict) or ch2.get("nonce")
               != good.challenge.get("nonce"),
               "the server sent the same nonce to a replayed hello: a recorded proof would "
               "authenticate again")
    for f in (good.auth, *frames):
        conn.send(f)
    refused(conn, [good.hello, good.auth, *frames], hid, "integrity_error", "DHP-TRN-006",
            "a proof recorded on another connection, replayed")

    # 5. garbage bytes as the first frame
    hid, frames = data("garbage")
    conn = wire.Conn.open("127.0.0.1", peer.port)
    junk = b"\x00\xff\xfe GET / HTTP/1.1 {not json\n"
    conn.send(junk)
    for f in frames:
        conn.send(f)
    refused(conn, [junk, *frames], hid, "invalid_input", "DHP-TRN-001",
            "garbage bytes before hello")


# --- the kit as a shipper: bad data frames -------------------------------------------------

PREAUTH_PROBE_BYTES = 64 * 1024  # far beyond "a few KiB" (DHP-TRN-033): a handshake is ~200 B


def server_bounds_preauth_frames(ctx: Ctx) -> None:
    """A 64 KiB frame before authentication is refused with invalid_input and the
    connection closed (DHP-TRN-033), and nothing is stored."""
    peer = Peer(ctx, "trn-server-preauth")
    hello = dict(wire.hello_frame(), padding="x" * PREAUTH_PROBE_BYTES)
    conn = wire.Conn.open("127.0.0.1", peer.port)
    conn.send(hello)
    got = wire.answers(conn, 1, timeout=5.0)
    closed = conn.closed_within(5.0)
    codes = [_error_code(a) for a in got]
    ctx.record("DHP-TRN-033", codes == ["invalid_input"] and closed,
               f"a {PREAUTH_PROBE_BYTES // 1024} KiB hello before authentication: expected an "
               "invalid_input error frame and the connection closed; got "
               f"{[_short(a) for a in got]}, {'closed' if closed else 'still open'}",
               _transcript([{"type": "hello", "padding": f"<{PREAUTH_PROBE_BYTES} bytes>"}],
                           got))
    conn.close()


def server_rejects_bad_frames(ctx: Ctx) -> None:
    peer = Peer(ctx, "trn-server-reject")
    a_id, a_env = _handoff(ctx, "a")
    chain = _chain(a_id, 3)
    fr = Frames()
    setup = [fr.make("envelope", a_env), *(fr.make("checkpoint", r) for r in chain)]
    s = peer.open()
    got = _exchange(s, setup)
    if not all(_is_ack(x, f["id"]) for x, f in zip(got, setup, strict=False)) \
            or len(got) != len(setup):
        raise CheckAborted("a valid envelope and chain were not acknowledged",
                           _transcript(setup, got))
    baseline = peer.stored(a_id)
    if baseline is None:
        raise CheckAborted(f"status of {a_id} says not_found after its envelope was acked")
    h1, h3 = chain[0]["hash"], chain[2]["hash"]

    def unchanged(what: str, requirement: str) -> None:
        """Nothing of the refused frame stored; each case judged against the state right
        before it, so one wrongly accepted frame is not blamed on the cases after it."""
        nonlocal baseline
        now = peer.stored(a_id)
        same = now is not None and all(now[k] == baseline[k] for k in
                                       ("state", "fence", "count", "hashes"))
        ctx.expect(requirement, same, f"{what}: the peer's copy of the handoff changed: "
                   f"before {_summary(baseline)}, after {_summary(now)}")
        baseline = now or baseline

    def case(what: str, frames: list[Any], code: str, requirement: str, *,
             index: int = 0, closes: bool = False) -> list[Any]:
        """Send `frames` on a fresh session; the answer at `index` must be `code`."""
        sess = peer.open()
        got = _exchange(sess, frames)
        _check_answers(ctx, got, what)
        answer = got[index] if len(got) > index else None
        frame = frames[index]
        want_id = frame.get("id") if isinstance(frame, dict) and not closes else None
        ok = _error_code(answer) == code and answer.get("id") == want_id
        ctx.record(requirement, ok, f"{what}: expected an error frame with code {code} and "
                   + (f"id {want_id}" if want_id is not None else "no id")
                   + f" as answer {index + 1}, got {_short(answer)}", _transcript(frames, got))
        ctx.expect("DHP-TRN-018", all(_is_ack(a, f.get("id")) for a, f in
                                      zip(got[:index], frames[:index], strict=False)),
                   f"{what}: the valid frames before the bad one were not acknowledged in "
                   f"order: {[_short(a) for a in got[:index]]}")
        if closes:
            closed = sess.conn.closed_within(3.0)
            ctx.expect(requirement, closed, f"{what}: the server did not close the connection")
        sess.conn.close()
        return got

    forged_intent = dict(a_env["intent"], inputs={"tag": "forged"})
    forged_id = "sha256:" + secrets.token_hex(32)
    fr = Frames()
    case("an envelope whose handoff_id is not the hash of its intent",
         [fr.make("envelope", dict(a_env, handoff_id=forged_id, intent=forged_intent))],
         "integrity_error", "DHP-TRN-015")
    ctx.expect("DHP-TRN-015", peer.stored(forged_id) is None
               and peer.stored(oracle.handoff_id(forged_intent)) is None,
               "a forged envelope left a handoff in the peer's store")
    case("the envelope of a stored handoff with another intent",
         [fr.make("envelope", dict(a_env, intent=forged_intent))], "integrity_error",
         "DHP-TRN-015")
    unchanged("a forged envelope under a stored id", "DHP-TRN-015")

    tampered = dict(_record(a_id, 4, h3, {"s": 4}), state={"s": "tampered"})
    case("a checkpoint whose hash does not cover its content",
         [fr.make("checkpoint", tampered)], "integrity_error", "DHP-TRN-015")
    unchanged("a checkpoint with a wrong hash", "DHP-TRN-015")

    case("a checkpoint whose prev is not the last stored hash (a broken chain)",
         [fr.make("checkpoint", _record(a_id, 4, h1, {"s": 4}))], "integrity_error",
         "DHP-TRN-015")
    unchanged("a broken chain", "DHP-TRN-015")

    case("a checkpoint with seq 5 after seq 3 (a gap)",
         [fr.make("checkpoint", _record(a_id, 5, h3, {"s": 5}))], "integrity_error",
         "DHP-TRN-015")
    unchanged("a seq gap", "DHP-TRN-015")

    case("a different record at a stored seq (a replay with changes)",
         [fr.make("checkpoint", _record(a_id, 2, h1, {"s": "changed"}))], "integrity_error",
         "DHP-TRN-016")
    unchanged("a changed record at a stored seq", "DHP-TRN-016")

    u_id, _ = _handoff(ctx, "unknown")
    case("a checkpoint of a handoff whose envelope the peer does not hold",
         [fr.make("checkpoint", _chain(u_id, 1)[0])], "not_found", "DHP-TRN-014")
    ctx.expect("DHP-TRN-014", peer.stored(u_id) is None,
               "a checkpoint of an unknown handoff created it on the peer")

    bad_result = _result(a_id, h3, {"total": "seven"})
    case("a result that does not satisfy the output schema", [fr.make("result", bad_result)],
         "schema_violation", "DHP-TRN-015")
    unchanged("a result that does not satisfy the output schema", "DHP-TRN-015")

    # sealed with the member, so only the record's shape is wrong (additionalProperties)
    extra = _sealed({"handoff_id": a_id, "fence": 1, "result": {"total": 7}, "prev": h3,
                     "note": "a member result.json does not define"})
    case("a result record with a member its schema does not define",
         [fr.make("result", extra)], "invalid_input", "DHP-RES-005")
    unchanged("a result record with an undefined member", "DHP-RES-005")

    case("a data frame with an id but not valid against the frame schema",
         [{"type": "checkpoint", "id": fr.make("checkpoint", {})["id"],
           "record": {"handoff_id": a_id, "seq": "four"}}], "invalid_input", "DHP-TRN-001")
    unchanged("a malformed data frame", "DHP-TRN-001")

    bad, good = ({"type": "checkpoint", "id": fr.make("checkpoint", {})["id"],
                  "record": {"handoff_id": a_id, "seq": "four"}}, fr.make("checkpoint", chain[0]))
    sess = peer.open()
    got = _exchange(sess, [bad, good])
    sess.conn.close()
    ctx.expect("DHP-TRN-030", len(got) == 2 and _error_code(got[0]) == "invalid_input"
               and _is_ack(got[1], good["id"]),
               "after refusing a frame that has a valid id, the server must keep the connection "
               "and answer the next frame (here a duplicate, to be acknowledged)",
               _transcript([bad, good], got))

    # behind a valid (duplicate) frame in the same read, so a server that answers the bad line
    # with the previous frame's id, or keeps the connection open, is seen
    case("a line that is not JSON after authentication, behind a valid frame",
         [fr.make("checkpoint", chain[0]), b"{not json at all\n"], "invalid_input",
         "DHP-TRN-001", index=1, closes=True)
    unchanged("a non-JSON line", "DHP-TRN-001")

    big = _record(a_id, 4, h3, {"pad": "x" * (max(peer.max_frame, MAX_FRAME) + 1024)})
    case(f"a frame longer than the announced max_frame ({peer.max_frame} bytes)",
         [fr.make("checkpoint", big)], "invalid_input", "DHP-TRN-002", closes=True)
    unchanged("an oversized frame", "DHP-TRN-002")

    # a reordered pair on its own handoff: seq 2 before seq 1
    r_id, r_env = _handoff(ctx, "r")
    r_chain = _chain(r_id, 2)
    frames = [fr.make("envelope", r_env), fr.make("checkpoint", r_chain[1]),
              fr.make("checkpoint", r_chain[0])]
    got = case("seq 2 sent before seq 1 (a reordered pair)", frames, "integrity_error",
               "DHP-TRN-015", index=1)
    stored = peer.stored(r_id)
    first_acked = len(got) == 3 and _is_ack(got[2], frames[2]["id"])
    ctx.expect("DHP-TRN-015", stored is not None and stored["count"] == (1 if first_acked else 0)
               and (stored["hashes"] is None
                    or stored["hashes"] == [r_chain[0]["hash"]][:stored["count"]]),
               f"after a reordered pair the peer holds {_summary(stored)}; only seq 1 "
               "(if acknowledged) may be stored")

    # after every rejection the server still takes the next valid record
    s = peer.open()
    nxt = fr.make("checkpoint", _record(a_id, 4, h3, {"s": 4}))
    got = _exchange(s, [nxt])
    ctx.expect("DHP-TRN-015", len(got) == 1 and _is_ack(got[0], nxt["id"]),
               f"the valid seq 4 after the rejected ones was not acknowledged: "
               f"{[_short(a) for a in got]}")
    s.conn.close()


def _summary(stored: dict | None) -> str:
    if stored is None:
        return "nothing (not_found)"
    return (f"state {stored['state']}, fence {stored['fence']}, {stored['count']} checkpoints"
            + (f" {[h[7:15] for h in stored['hashes']]}" if stored["hashes"] else ""))


def peer_owns_its_copy(ctx: Ctx) -> None:
    """Once a standby on the peer took the handoff, records still arriving from the first
    host are refused: conflict while it is claimed there, lease_lost for an older fence."""
    peer = Peer(ctx, "trn-server-owner")
    # The history checkers judge states against checkpoint requests; this handoff's chain
    # arrived over the wire, so its recover would look like a state nobody wrote.
    peer.sc.facts["ingested"] = True
    hid, env = _handoff(ctx, "owned")
    chain = _chain(hid, 2)
    fr = Frames()
    frames = [fr.make("envelope", env), *(fr.make("checkpoint", r) for r in chain)]
    s = peer.open()
    got = _exchange(s, frames)
    if len(got) != 3 or not all(_is_ack(a, f["id"]) for a, f in zip(got, frames, strict=True)):
        raise CheckAborted("a valid envelope and chain were not acknowledged",
                           _transcript(frames, got))
    standby = f"{peer.proc.worker}-standby"
    taken = ctx.need(peer.proc.call("recover", {"handoff_id": hid, "worker": standby}),
                     "recover of the shipped handoff on the peer")
    nxt = fr.make("checkpoint", _record(hid, 3, chain[-1]["hash"], {"s": 3}))
    got = _exchange(s, [nxt])
    ctx.record("DHP-TRN-019", len(got) == 1 and _error_code(got[0]) == "conflict",
               "a record for a handoff claimed on the peer under a live lease: expected "
               f"conflict, got {[_short(a) for a in got]}", _transcript([nxt], got))
    ctx.need(write(peer.proc, "release", hid, taken["fence"], worker=standby),
             "release by the standby")
    stale = fr.make("checkpoint", _record(hid, 3, chain[-1]["hash"], {"s": 3}))
    got = _exchange(s, [stale])
    ctx.record("DHP-TRN-019", len(got) == 1 and _error_code(got[0]) == "lease_lost",
               f"a record with fence 1 after the peer granted fence {taken['fence']}: expected "
               f"lease_lost, got {[_short(a) for a in got]}", _transcript([stale], got))
    s.conn.close()
    st = peer.stored(hid)
    ctx.expect("DHP-TRN-019", st is not None and st["count"] == 2,
               f"refused records changed the peer's copy: {_summary(st)}")


def short_secret(ctx: Ctx) -> None:
    sc = ctx.scenario("trn-short-secret", ttl=5.0)
    p = sc.spawn("peer")
    short = "x" * 15
    ctx.expect_code("DHP-TRN-013", p.call("transport_serve", {"secret": short, "port": 0}),
                    "invalid_input", "transport_serve with a 15-byte secret")
    hid = dispatch(ctx, p, kind="conform.transport")
    ctx.expect_code("DHP-TRN-013", p.call("ship", {"handoff_id": hid, "host": "127.0.0.1",
                                                   "port": 9, "secret": short}),
                    "invalid_input", "ship with a 15-byte secret")


# --- the kit as a server: the implementation's shipper -------------------------------------

def _work(ctx: Ctx, proc: Any, steps: int) -> str:
    """A handoff with `steps` checkpoints and a result in the implementation's store."""
    hid = dispatch(ctx, proc, kind="conform.transport")
    fence = ctx.need(take(ctx, proc, hid), "claim")["fence"]
    for n in range(1, steps + 1):
        ctx.need(write(proc, "checkpoint", hid, fence, state={"page": n}), f"checkpoint {n}")
    ctx.need(write(proc, "complete", hid, fence, result={"total": steps}), "complete")
    return hid


def _local_log(ctx: Ctx, sc: Any, proc: Any, hid: str) -> dict | None:
    if "export_log" not in ctx.features:
        return None
    path = sc.data.parent / f"{sc.name}-local.log.jsonl"
    ctx.need(proc.call("export_log", {"handoff_id": hid, "path": str(path)}), "export_log")
    try:
        return oracle.check_log(path.read_text(encoding="utf-8"))
    except (OSError, oracle.LogProblem) as exc:
        raise CheckAborted(f"the shipper's own exported log is not valid: {exc}") from None


def _key(frame: dict) -> tuple:
    """A data frame's content, whatever id it was sent under."""
    if frame.get("type") == "envelope":
        return ("envelope", (frame.get("envelope") or {}).get("handoff_id"))
    record = frame.get("record") or {}
    return (frame.get("type"), record.get("seq"), record.get("hash"))


def _received_log(ctx: Ctx, frames: list[dict], hid: str, what: str) -> dict | None:
    """Rebuild the handoff from frames received (duplicates dropped) and check it with the
    kit's oracle: envelope first, then an intact chain, then the result."""
    seen, unique = set(), []
    for f in frames:
        if _key(f) not in seen:
            seen.add(_key(f))
            unique.append(f)
    mine = [f for f in unique if (f.get("envelope") or f.get("record") or {}).get("handoff_id")
            == hid]
    if not mine or mine[0].get("type") != "envelope":
        ctx.record("DHP-TRN-014", False, f"{what}: the first frame of the handoff was "
                   f"{_short(mine[0] if mine else None)}, not its envelope")
        return None
    lines = [{"type": "header", "envelope": mine[0]["envelope"]}]
    lines += [{"type": f["type"], "record": f["record"]} for f in mine[1:]
              if f.get("type") in ("checkpoint", "result")]
    text = "".join(wire.encode(line).decode("utf-8") for line in lines)
    try:
        return oracle.check_log(text)
    except oracle.LogProblem as exc:
        ctx.record("DHP-TRN-021", False, f"{what}: the frames received do not form an intact "
                   f"log: {exc}", [_short(f) for f in mine[:12]])
        return None


def _secret_absent(ctx: Ctx, server: wire.Server, secret: str, what: str) -> None:
    raw = server.received()
    forms = {secret.encode(), secret.encode().hex().encode()}
    ctx.expect("DHP-TRN-005", not any(f in raw for f in forms),
               f"{what}: the shared secret appears in the bytes the shipper sent")


def shipper_delivers(ctx: Ctx) -> None:
    sc = ctx.scenario("trn-shipper", ttl=5.0)
    w = sc.spawn("worker")
    hid = _work(ctx, w, 4)
    secret = _secret()
    with wire.Server(secret.encode()) as server:
        started = time.monotonic()
        reply = w.call("ship", {"handoff_id": hid, "host": "127.0.0.1", "port": server.port,
                                "secret": secret})
        ctx.need(reply, "ship")
        ctx.expect("DHP-ADP-017", isinstance(reply.data, dict)
                   and type(reply.data.get("frames")) is int,
                   f"ship must answer {{\"frames\": int}}, got {reply.data!r}", reply)
        flushed = w.call("transport_flush", {"timeout": 8.0})
        took = time.monotonic() - started
        peers = list(server.peers)
    ctx.expect("DHP-ADP-018", flushed.ok and flushed.data.get("delivered") is True,
               f"transport_flush after {took:.1f} s: {flushed!r}", flushed)
    if not peers:
        raise CheckAborted("the shipper never connected to the kit's server")
    first = peers[0]
    ctx.expect("DHP-TRN-004", isinstance(first.hello, dict) and first.hello.get("type") == "hello"
               and "1.0" in first.hello.get("versions", []) and not wire.frame_problems(
                   first.hello),
               f"the shipper's first frame is not a valid hello offering 1.0: "
               f"{_short(first.hello)}")
    ctx.expect("DHP-TRN-005", all(p.proof_ok is not False for p in peers)
               and any(p.proof_ok for p in peers),
               "the shipper's proof is not HMAC-SHA256(secret, 'dhp-transport/1.0 client Nc "
               "Ns')")
    nonces = [p.hello.get("nonce") for p in peers if isinstance(p.hello, dict)]
    ctx.expect("DHP-TRN-005", len(set(nonces)) == len(nonces),
               "the shipper reused a nonce on another connection")
    _secret_absent(ctx, server, secret, "shipping with the right secret")
    problems = [x for p in peers for x in p.problems]
    ctx.expect("DHP-TRN-001", not problems, f"the shipper's frames: {problems[:3]}")
    ids = [f.get("id") for p in peers for f in p.data]
    ctx.expect("DHP-TRN-001", all(type(i) is int for i in ids), f"frame ids {ids[:10]}")
    frames = [f for p in peers for f in p.data]
    got = _received_log(ctx, frames, hid, "shipping a completed handoff")
    local = _local_log(ctx, sc, w, hid)
    if got is None:
        return
    ctx.expect("DHP-ADP-017", got["result"] is not None and len(got["checkpoints"]) == 4,
               f"the shipper sent {len(got['checkpoints'])} checkpoints and "
               f"{'a' if got['result'] else 'no'} result for a handoff with 4 and a result")
    if local is not None:
        ctx.expect("DHP-TRN-021", [r["hash"] for r in got["checkpoints"]]
                   == [r["hash"] for r in local["checkpoints"]]
                   and got["result"] == local["result"]
                   and not envelope_changes(got["envelope"], local["envelope"]),
                   "the chain the kit received is not the chain the shipper's store exports")


def shipper_verifies_server(ctx: Ctx) -> None:
    sc = ctx.scenario("trn-shipper-impostor", ttl=5.0)
    w = sc.spawn("worker")
    hid = _work(ctx, w, 2)
    secret = _secret()
    with wire.Server(_secret().encode()) as impostor:
        ctx.need(w.call("ship", {"handoff_id": hid, "host": "127.0.0.1",
                                 "port": impostor.port, "secret": secret}), "ship")
        connected = impostor.wait(lambda: any(p.auth is not None or p.hello is not None
                                              for p in impostor.peers), 5.0)
        time.sleep(0.5)  # room for anything the shipper would send after the challenge
        flushed = w.call("transport_flush", {"timeout": 0})
        ctx.need(w.call("transport_stop", {}), "transport_stop")
        peers = list(impostor.peers)
    if not connected:
        raise CheckAborted("the shipper never connected to the kit's server within 5 s")
    sent = [(p.number, p.auth, len(p.data)) for p in peers if p.auth is not None or p.data]
    ctx.expect("DHP-TRN-007", not sent,
               "the kit's server proved a different secret, yet the shipper went on: "
               + "; ".join(f"connection {n}: auth {_short(a, 120)}, {d} data frames"
                           for n, a, d in sent))
    ctx.expect("DHP-ADP-018", flushed.ok and flushed.data.get("delivered") is False,
               f"transport_flush reported {flushed!r} although nothing was acknowledged",
               flushed)
    _secret_absent(ctx, impostor, secret, "connecting to a server that does not know it")


def shipper_replays(ctx: Ctx) -> None:
    sc = ctx.scenario("trn-shipper-cut", ttl=5.0)
    w = sc.spawn("worker")
    hid = _work(ctx, w, 5)
    secret = _secret()
    kept = 2  # the first connection gets the envelope and seq 1 acknowledged, then is cut
    with wire.Server(secret.encode(), acks=[kept]) as server:
        ctx.need(w.call("ship", {"handoff_id": hid, "host": "127.0.0.1", "port": server.port,
                                 "secret": secret}), "ship")
        flushed = w.call("transport_flush", {"timeout": 8.0})
        peers = list(server.peers)
    ctx.expect("DHP-TRN-021", flushed.ok and flushed.data.get("delivered") is True,
               f"after the kit cut the first connection the shipper did not deliver everything "
               f"within 8 s: {flushed!r}", flushed)
    authed = [p for p in peers if p.proof_ok]
    if not authed or not authed[0].cut:
        raise CheckAborted(f"the kit could not cut a connection mid-stream "
                           f"({len(authed)} authenticated connections, "
                           f"{len(authed[0].data) if authed else 0} data frames on the first)")
    first, later = authed[0], authed[1:]
    acked_keys = {_key(f) for f in first.data[:kept]}
    order = [_key(f) for f in first.data]
    resent = [_key(f) for p in later for f in p.data]
    owed = [k for k in order if k not in acked_keys]
    missing = [k for k in owed if k not in resent]
    ctx.expect("DHP-TRN-021", later and not missing,
               f"{len(missing)} frames the kit never acknowledged were not sent again after "
               f"the connection was cut: {missing[:5]}",
               [f"connection {p.number}: {len(p.data)} data frames, acked {p.acked}"
                for p in authed])
    positions = [resent.index(k) for k in owed if k in resent]
    ctx.expect("DHP-TRN-021", positions == sorted(positions),
               "the unacknowledged frames were sent again out of their original order")
    ctx.expect("DHP-TRN-024", not missing, "a frame left unanswered on a lost connection was "
               "treated as delivered")
    got = _received_log(ctx, [f for p in authed for f in p.data], hid, "after a cut connection")
    if got is not None:
        ctx.expect("DHP-TRN-021", len(got["checkpoints"]) == 5 and got["result"] is not None,
                   f"the kit received {len(got['checkpoints'])} of 5 checkpoints"
                   f"{'' if got['result'] else ' and no result'} after the cut")


def _free_port() -> int:
    """A port nothing listens on right now (bound, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def shipper_resumes_after_restart(ctx: Ctx) -> None:
    """DHP-TRN-031, DHP-ADP-024: frames buffered for a destination that was down survive a
    SIGKILL of the shipper's process; the first ship to that destination after the restart
    (which brings the secret again) sends them, before the new ones."""
    sc = ctx.scenario("trn-shipper-restart", ttl=5.0)
    w = sc.spawn("worker")
    before = _work(ctx, w, 2)
    secret, port = _secret(), _free_port()
    ctx.need(w.call("ship", {"handoff_id": before, "host": "127.0.0.1", "port": port,
                             "secret": secret}), "ship to a destination that is down")
    sc.restart(w)
    after = _work(ctx, w, 1)
    try:
        server = wire.Server(secret.encode(), port=port)
    except OSError as exc:
        raise CheckAborted(f"the kit could not listen on port {port} again: {exc}") from None
    with server:
        ctx.need(w.call("ship", {"handoff_id": after, "host": "127.0.0.1", "port": port,
                                 "secret": secret}), "ship after the restart")
        flushed = w.call("transport_flush", {"timeout": 8.0})
        frames = [f for p in server.peers for f in p.data]
    _secret_absent(ctx, server, secret, "a shipper restarted with a buffer")
    order = [(f.get("envelope") or f.get("record") or {}).get("handoff_id") for f in frames]
    old = _received_log(ctx, frames, before, "the handoff buffered before the restart")
    ctx.expect("DHP-TRN-031", old is not None and len(old["checkpoints"]) == 2
               and old["result"] is not None,
               "the frames buffered before the SIGKILL (an envelope, 2 checkpoints and a result "
               "for a destination that was down) were not sent after the restart",
               [f"{len(frames)} frames received", flushed.data if flushed.ok else flushed])
    ctx.expect("DHP-ADP-024", flushed.ok and flushed.data.get("delivered") is True
               and before in order and after in order
               and max(i for i, h in enumerate(order) if h == before)
               < min(i for i, h in enumerate(order) if h == after),
               "after the restart, the first ship to the destination must resume its buffer: "
               "the old frames first, then the new ones, all delivered by transport_flush",
               [f"order of handoffs in the frames: {[h[:15] if h else h for h in order]}",
                flushed.data if flushed.ok else flushed])


def shipper_peer_down(ctx: Ctx) -> None:
    """Shipping to a peer that is not listening neither fails nor waits (DHP-TRN-023), and
    what was never acknowledged is not reported delivered (DHP-TRN-024)."""
    sc = ctx.scenario("trn-peer-down", ttl=5.0)
    w = sc.spawn("worker")
    hid = _work(ctx, w, 2)
    port = _free_port()
    shipped = w.call("ship", {"handoff_id": hid, "host": "127.0.0.1", "port": port,
                              "secret": _secret()})
    ctx.expect("DHP-TRN-023", shipped.ok, f"ship towards a peer that is not listening was "
               f"answered {shipped!r}: the shipper's call returns once the frames are in its "
               "local buffer, whether or not the peer is reachable", shipped)
    flushed = w.call("transport_flush", {"timeout": 0.5})
    ctx.expect("DHP-TRN-024", flushed.ok and flushed.data.get("delivered") is False,
               f"transport_flush with the peer down answered {flushed!r}: frames no peer "
               "acknowledged were reported delivered", flushed)
    w.call("transport_stop", {})


# --- TLS (feature transport-tls) ------------------------------------------------------------

def _certificate(folder) -> tuple[str, str] | None:
    """A self-signed certificate for 127.0.0.1 made with the openssl tool, or None."""
    tool = shutil.which("openssl")
    if tool is None:
        return None
    cert, key = folder / "tls-cert.pem", folder / "tls-key.pem"
    proc = subprocess.run(
        [tool, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
         "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key),
         "-out", str(cert)], capture_output=True, timeout=30)
    return (str(cert), str(key)) if proc.returncode == 0 else None


def tls_server(ctx: Ctx) -> None:
    sc = ctx.scenario("trn-tls", ttl=5.0)
    made = _certificate(sc.data.parent / sc.name)
    if made is None:
        for rid in ("DHP-TRN-009", "DHP-TRN-010", "DHP-ADP-019"):
            ctx.skip(rid, "the kit could not make a test certificate (the openssl tool is "
                     "missing or failed)")
        return
    cert, key = made
    p = sc.spawn("peer")
    secret = _secret()
    data = ctx.need(p.call("transport_serve", {"secret": secret, "port": 0,
                                               "tls": {"cert": cert, "key": key}}),
                    "transport_serve with tls")
    port = data["port"]
    plain = wire.Conn.open("127.0.0.1", port)
    hello = wire.hello_frame()
    plain.send(hello)
    answer = plain.line(timeout=3.0)
    plain.close()
    ctx.expect("DHP-TRN-010", answer is None or b'"challenge"' not in answer,
               f"a TLS server answered a plaintext hello with {_short(answer)}")
    context = ssl.create_default_context(cafile=cert)
    s = wire.handshake("127.0.0.1", port, secret.encode(), context=context)
    ctx.expect("DHP-TRN-009", s.ok, f"the TLS handshake worked, but the DHP handshake inside "
               f"it did not: challenge {_short(s.challenge)}, welcome {_short(s.welcome)}")
    ctx.expect("DHP-ADP-019", isinstance(s.conn.sock, ssl.SSLSocket) and s.ok,
               "transport_serve with tls did not serve inside TLS")
    s.conn.close()
    # the implementation's shipper inside TLS, towards its own server
    w = sc.spawn("worker")
    hid = _work(ctx, w, 2)
    ctx.need(w.call("ship", {"handoff_id": hid, "host": "127.0.0.1", "port": port,
                             "secret": secret, "tls": {"ca": cert}}), "ship with tls")
    flushed = w.call("transport_flush", {"timeout": 8.0})
    ctx.expect("DHP-ADP-019", flushed.ok and flushed.data.get("delivered") is True,
               f"shipping inside TLS to a server with a certificate from the given ca: "
               f"{flushed!r}", flushed)
    st = p.call("status", {"handoff_id": hid})
    ctx.expect("DHP-ADP-019", st.ok and st.data.get("state") == "completed",
               "the handoff shipped inside TLS is not completed on the peer", st)


FEATURE = "transport"
CHECKS = [
    Check("transport", "server-valid-log",
          ["DHP-TRN-001", "DHP-TRN-002", "DHP-TRN-004", "DHP-TRN-005", "DHP-TRN-015",
           "DHP-TRN-016", "DHP-TRN-017", "DHP-TRN-018", "DHP-TRN-020", "DHP-ADP-016",
           "DHP-ENV-006"],
          server_valid_log, feature=FEATURE, cls="transport"),
    Check("transport", "server-refuses-unauthenticated",
          ["DHP-TRN-001", "DHP-TRN-005", "DHP-TRN-006"],
          server_refuses_unauthenticated, feature=FEATURE, cls="transport"),
    Check("transport", "server-rejects-bad-frames",
          ["DHP-TRN-001", "DHP-TRN-002", "DHP-TRN-014", "DHP-TRN-015", "DHP-TRN-016", "DHP-RES-005",
           "DHP-TRN-030"],
          server_rejects_bad_frames, feature=FEATURE, cls="transport"),
    Check("transport", "peer-owns-its-copy", ["DHP-TRN-019"], peer_owns_its_copy,
          feature=FEATURE, cls="transport"),
    Check("transport", "short-secret", ["DHP-TRN-013"], short_secret, feature=FEATURE,
          cls="transport"),
    Check("transport", "server-bounds-preauth-frames", ["DHP-TRN-033"],
          server_bounds_preauth_frames, feature=FEATURE, cls="transport"),
    Check("transport", "shipper-delivers",
          ["DHP-TRN-001", "DHP-TRN-004", "DHP-TRN-005", "DHP-TRN-014", "DHP-TRN-021",
           "DHP-ADP-017", "DHP-ADP-018"],
          shipper_delivers, feature=FEATURE, cls="transport"),
    Check("transport", "shipper-verifies-server",
          ["DHP-TRN-005", "DHP-TRN-007", "DHP-ADP-018"],
          shipper_verifies_server, feature=FEATURE, cls="transport"),
    Check("transport", "shipper-replays-after-cut",
          ["DHP-TRN-021", "DHP-TRN-024"],
          shipper_replays, feature=FEATURE, cls="transport"),
    Check("transport", "shipper-peer-down", ["DHP-TRN-023", "DHP-TRN-024"], shipper_peer_down,
          feature=FEATURE, cls="transport"),
    Check("transport", "shipper-resumes-after-restart",
          ["DHP-TRN-031", "DHP-ADP-024", "DHP-TRN-021"],
          shipper_resumes_after_restart, feature=FEATURE, cls="transport"),
    Check("transport", "tls",
          ["DHP-TRN-009", "DHP-TRN-010", "DHP-ADP-019"],
          tls_server, feature="transport-tls", cls="transport"),
]
