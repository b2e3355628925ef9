"""Reach of what crosses hosts: logs imported into a store that already holds the handoff,
chains with several fences and float states, results arriving after a standby took over, and
a transport hello that offers several versions. Part of the reach suite."""

from __future__ import annotations

import json
import secrets
import socket
import time
from typing import Any

from .. import oracle, wire
from .base import Check, CheckAborted, Ctx, take, write
from .transport import (
    MAX_FRAME,
    Frames,
    Peer,
    _error_code,
    _exchange,
    _is_ack,
    _sealed,
    _short,
    _transcript,
)

RESULT_SCHEMA = {"type": "object", "required": ["total"],
                 "properties": {"total": {"type": "number"}}}
FLOATS = [{"x": 0.1, "y": -2.5e-7}, {"x": 1234.5678, "y": 1e21}, {"x": 0.3, "y": 5e-324}]
SPENDS = [0.25, 0.5, 0.125]


def _status(ctx: Ctx, proc: Any, hid: str, what: str) -> dict:
    return ctx.need(proc.call("status", {"handoff_id": hid}), f"status {what}")


def _at_least(ctx: Ctx, requirement: str, st: dict, floor: dict, what: str) -> bool:
    """Every counter of the status at least its floor (fence, attempts, steps, spend)."""
    low = {k: st.get(k) for k, v in floor.items()
           if not isinstance(st.get(k), (int, float)) or st.get(k) < v - 1e-9}
    return ctx.expect(requirement, not low, f"{what}: status has {low}, below the chain's "
                      f"{ {k: floor[k] for k in low} }")


# --- import into a store that already holds the handoff ---------------------------------

def import_over_existing(ctx: Ctx) -> None:
    src = ctx.scenario("import-source", ttl=30.0).spawn("a")
    dst = ctx.scenario("import-target", ttl=30.0).spawn("b")
    args = {"task_kind": "conform.reach-import", "inputs": {"n": ctx.rng.getrandbits(48)},
            "output_schema": RESULT_SCHEMA, "budget": {}}
    hid = ctx.need(src.call("dispatch", args), "dispatch")["handoff_id"]
    fence = ctx.need(take(ctx, src, hid), "claim")["fence"]
    for state, spend in zip(FLOATS[:2], SPENDS[:2], strict=True):
        ctx.need(write(src, "checkpoint", hid, fence, state=state, spend=spend), "checkpoint")
    first = src.scenario.data.parent / f"{src.scenario.name}-1.jsonl"
    ctx.need(src.call("export_log", {"handoff_id": hid, "path": str(first)}), "export_log")
    ctx.need(write(src, "release", hid, fence), "release")
    fence2 = ctx.need(src.call("claim", {"handoff_id": hid, "worker": "a-second"}),
                      "second claim")["fence"]
    ctx.need(write(src, "checkpoint", hid, fence2, worker="a-second", state=FLOATS[2],
                   spend=SPENDS[2]), "checkpoint under the second fence")
    second = src.scenario.data.parent / f"{src.scenario.name}-2.jsonl"
    ctx.need(src.call("export_log", {"handoff_id": hid, "path": str(second)}), "export_log")

    ctx.need(dst.call("import_log", {"path": str(first)}), "import of the first log")
    st = _status(ctx, dst, hid, "after the first import")
    ctx.expect("DHP-LOG-010", st.get("state") == "orphaned", f"an imported handoff with "
               f"checkpoints is {st.get('state')}, not orphaned (ready for a standby)")
    _at_least(ctx, "DHP-LOG-010", st, {"fence": fence, "steps": 2, "spend": 0.75},
              "after importing a chain written under fence 1")
    reply = dst.call("import_log", {"path": str(second)})
    ctx.expect_ok("DHP-LOG-010", reply, "import of a longer log of the same chain into a store "
                  "that holds its first part")
    if not reply.ok:
        return
    st = _status(ctx, dst, hid, "after the second import")
    ctx.expect("DHP-CKP-009", (st.get("checkpoints") or {}).get("count") == 3,
               f"after importing 3 checkpoints the status counts {st.get('checkpoints')}")
    _at_least(ctx, "DHP-LOG-010", st, {"fence": fence2, "attempts": 2, "steps": 3,
                                       "spend": sum(SPENDS)},
              f"after importing a chain whose highest fence is {fence2}")
    last = ctx.need(dst.call("last_checkpoint", {"handoff_id": hid}), "last_checkpoint")
    ctx.expect("DHP-CKP-009", last.get("state") == FLOATS[2] and last.get("seq") == 3,
               f"after import, last_checkpoint is {last}, expected seq 3 with {FLOATS[2]} "
               "(floats must come back as they went in)")
    taken = take(ctx, dst, hid)
    got = taken.data.get("fence") if taken.ok else None
    ctx.expect("DHP-LOG-010", taken.ok and isinstance(got, int) and got > fence2,
               f"the standby's claim after import got {got if taken.ok else taken!r}; it must "
               f"write above the chain's highest fence {fence2}", taken)


# --- the transport: several fences, floats, results after a takeover --------------------

def _handoff(ctx: Ctx, tag: str) -> tuple[str, dict]:
    intent = {"dhp": "1.0", "task_kind": "conform.reach-transport",
              "inputs": {"tag": tag, "n": ctx.rng.getrandbits(48)},
              "output_schema": RESULT_SCHEMA, "budget": {}}
    hid = oracle.handoff_id(intent)
    return hid, {"dhp": "1.0", "handoff_id": hid, "intent": intent}


def _fenced_chain(hid: str) -> list[dict]:
    """Three records under fences 1, 1, 2, with float states and spends."""
    out: list[dict] = []
    for seq, (state, spend, fence) in enumerate(zip(FLOATS, SPENDS, (1, 1, 2), strict=True), 1):
        out.append(_sealed({"handoff_id": hid, "seq": seq, "fence": fence, "state": state,
                            "spend": spend, "prev": out[-1]["hash"] if out else hid}))
    return out


def _result(hid: str, prev: str, fence: int, total: float) -> dict:
    return _sealed({"handoff_id": hid, "fence": fence, "result": {"total": total},
                    "prev": prev})


def ingest_takeover(ctx: Ctx) -> None:
    peer = Peer(ctx, "reach-ingest")
    peer.sc.facts["ingested"] = True  # chains that came over the wire, not by requests
    hid, env = _handoff(ctx, "takeover")
    chain = _fenced_chain(hid)
    fr = Frames()
    frames = [fr.make("envelope", env), *(fr.make("checkpoint", r) for r in chain)]
    s = peer.open()
    got = _exchange(s, frames)
    if len(got) != len(frames) or not all(_is_ack(a, f["id"])
                                          for a, f in zip(got, frames, strict=True)):
        raise CheckAborted("a valid envelope and a chain under fences 1, 1, 2 were not all "
                           "acknowledged", _transcript(frames, got))
    st = _status(ctx, peer.proc, hid, "after ingest")
    ctx.expect("DHP-TRN-020", st.get("state") == "orphaned",
               f"an ingested handoff with checkpoints is {st.get('state')}, not orphaned")
    _at_least(ctx, "DHP-TRN-020", st, {"fence": 2, "attempts": 2, "steps": 3,
                                       "spend": sum(SPENDS)},
              "after ingesting a chain under fences 1, 1, 2")
    stored = peer.stored(hid)
    if stored is not None and stored.get("hashes") is not None:
        ctx.expect("DHP-TRN-015", stored["hashes"] == [r["hash"] for r in chain],
                   "the peer's exported chain differs from the shipped one (floats must come "
                   "back as they went in)")
    standby = f"{peer.proc.worker}-standby"
    taken = ctx.need(peer.proc.call("recover", {"handoff_id": hid, "worker": standby}),
                     "recover of the ingested handoff on the peer")
    ctx.expect("DHP-TRN-020", taken.get("fence") == st.get("fence", 0) + 1 and
               taken["fence"] > 2, f"the standby's recover got fence {taken.get('fence')} "
               f"after a chain whose highest fence is 2")
    ctx.expect("DHP-ADP-010", taken.get("last_checkpoint") == FLOATS[2],
               f"the standby resumes from {taken.get('last_checkpoint')!r}, not {FLOATS[2]!r}")
    late = fr.make("result", _result(hid, chain[-1]["hash"], 2, 0.1))
    got = _exchange(s, [late])
    ctx.record("DHP-TRN-019", len(got) == 1 and _error_code(got[0]) == "conflict",
               "a result from the first host after the peer's standby took the handoff (claimed "
               f"there under a live lease): expected conflict, got {[_short(a) for a in got]}",
               _transcript([late], got))
    ctx.need(write(peer.proc, "release", hid, taken["fence"], worker=standby),
             "release by the standby")
    stale = fr.make("result", _result(hid, chain[-1]["hash"], 2, 0.1))
    got = _exchange(s, [stale])
    ctx.record("DHP-TRN-019", len(got) == 1 and _error_code(got[0]) == "lease_lost",
               f"a result under fence 2 after the peer granted fence {taken['fence']}: expected "
               f"lease_lost, got {[_short(a) for a in got]}", _transcript([stale], got))
    again = ctx.need(peer.proc.call("claim", {"handoff_id": hid, "worker": standby}),
                     "claim by the standby")
    ctx.need(write(peer.proc, "complete", hid, again["fence"], worker=standby,
                   result={"total": 2.5}), "complete by the standby")
    done = fr.make("result", _result(hid, chain[-1]["hash"], again["fence"], 0.1))
    got = _exchange(s, [done])
    # conflict (DHP-TRN-019), or integrity_error as a result other than the stored one
    # (DHP-TRN-016): both refuse it
    ctx.record("DHP-TRN-019", len(got) == 1
               and _error_code(got[0]) in ("conflict", "integrity_error"),
               "a result from the first host for a handoff completed on the peer: expected "
               f"conflict or integrity_error, got {[_short(a) for a in got]}",
               _transcript([done], got))
    s.conn.close()
    res = ctx.need(peer.proc.call("result", {"handoff_id": hid}), "result")
    ctx.expect("DHP-RES-003", res.get("result") == {"total": 2.5},
               f"the peer's result is {res.get('result')!r}; the standby completed it with "
               "{'total': 2.5} and later results were refused")


def hello_versions(ctx: Ctx) -> None:
    peer = Peer(ctx, "reach-hello")
    ctx.expect("DHP-ADP-020", peer.max_frame == MAX_FRAME, f"transport_serve asked for "
               f"max_frame {MAX_FRAME}; the server announces {peer.max_frame}")
    conn = wire.Conn.open("127.0.0.1", peer.port)
    hello = wire.hello_frame(versions=["9.9", "1.0", "0.1"])
    conn.send(hello)
    ch = conn.frame(5.0)
    ctx.expect("DHP-TRN-004", isinstance(ch, dict) and ch.get("type") == "challenge"
               and ch.get("version") == "1.0",
               f"a hello offering ['9.9', '1.0', '0.1'] must get a challenge naming 1.0, got "
               f"{_short(ch)}")
    conn.close()
    conn = wire.Conn.open("127.0.0.1", peer.port)
    conn.send(wire.hello_frame(versions=["9.9", "2.0"]))
    answer = conn.frame(5.0)
    ctx.expect("DHP-TRN-004", _error_code(answer) == "unsupported_version"
               and conn.closed_within(5.0),
               "a hello offering only ['9.9', '2.0'] must be refused with unsupported_version "
               f"and the connection closed, got {_short(answer)}")
    conn.close()


# --- the file transport -----------------------------------------------------------------

def _read_log(ctx: Ctx, path, what: str) -> dict | None:
    """The file, checked by the kit's own log oracle; None (recorded) when it is not valid."""
    try:
        text = path.read_text(encoding="utf-8")
        return dict(oracle.check_log(text), lines=text.count("\n"), text=text)
    except OSError as exc:
        ctx.record("DHP-TRN-026", False, f"{what}: cannot read {path.name}: {exc}")
    except oracle.LogProblem as exc:
        ctx.record("DHP-TRN-027", False, f"{what}: {path.name} is not a valid log: {exc}")
        ctx.record(exc.requirement, False, f"{what}: {path.name}: {exc}")
    return None


def file_transport(ctx: Ctx) -> None:
    sc = ctx.scenario("file-ship", ttl=30.0)
    a = sc.spawn("a")
    folder = sc.data.parent / f"{sc.name}-shared"
    folder.mkdir(parents=True, exist_ok=True)
    args = {"task_kind": "conform.reach-file", "inputs": {"n": ctx.rng.getrandbits(48)},
            "output_schema": RESULT_SCHEMA, "budget": {}}
    hid = ctx.need(a.call("dispatch", args), "dispatch")["handoff_id"]
    fence = ctx.need(take(ctx, a, hid), "claim")["fence"]
    for state, spend in zip(FLOATS[:2], SPENDS[:2], strict=True):
        ctx.need(write(a, "checkpoint", hid, fence, state=state, spend=spend), "checkpoint")
    ship = {"handoff_id": hid, "folder": str(folder)}
    ctx.need(a.call("file_ship", ship), "file_ship")
    path = folder / f"{hid.split(':', 1)[1]}.dhp.jsonl"
    names = sorted(p.name for p in folder.iterdir())
    ctx.expect("DHP-TRN-026", path.name in names, f"after file_ship the shared folder holds "
               f"{names}; expected the file {path.name}")
    ctx.expect("DHP-TRN-028", names == [path.name], f"after file_ship the shared folder holds "
               f"{names}: a file written in place of the atomic header was left behind")
    log = _read_log(ctx, path, "after the first file_ship")
    if log is None:
        return
    ctx.expect("DHP-ADP-025", [r["state"] for r in log["checkpoints"]] == FLOATS[:2],
               f"the file holds the states {[r['state'] for r in log['checkpoints']]}, not the "
               f"two checkpointed ones {FLOATS[:2]} (floats must come back as they went in)")

    with path.open("ab") as f:  # a writer that died in the middle of a line
        f.write(b'{"type": "checkpoint", "record": {"handoff_id": "sha2')
    ctx.need(write(a, "checkpoint", hid, fence, state=FLOATS[2], spend=SPENDS[2]), "checkpoint")
    ctx.need(write(a, "complete", hid, fence, result={"total": 0.1}), "complete")
    again = a.call("file_ship", ship)
    if not ctx.expect_ok("DHP-TRN-027", again, "file_ship of the whole chain again, after a "
                         "writer left a torn line (the torn line must be cut, the records "
                         "already in the file skipped)"):
        return
    log = _read_log(ctx, path, "after a torn line and a second file_ship")
    if log is None:
        return
    ctx.expect("DHP-TRN-027", log["lines"] == 5 and [r["state"] for r in log["checkpoints"]]
               == FLOATS and (log["result"] or {}).get("result") == {"total": 0.1},
               f"after the torn line was cut and the whole chain shipped again the file has "
               f"{log['lines']} lines (expected the header, 3 checkpoints and the result, each "
               "once)")

    b = ctx.scenario("file-other", ttl=30.0).spawn("b")  # the same handoff, another chain
    ctx.need(b.call("dispatch", args), "dispatch on the second host")
    other = ctx.need(take(ctx, b, hid), "claim on the second host")["fence"]
    ctx.need(write(b, "checkpoint", hid, other, state={"other": True}), "checkpoint")
    refused = b.call("file_ship", ship)
    ctx.expect_code("DHP-TRN-027", refused, "integrity_error",
                    "file_ship of a different record at a seq the file holds")
    ctx.expect("DHP-TRN-027", path.read_text(encoding="utf-8") == log["text"],
               "a refused file_ship changed the file")
    # The other way round: the second host ingests the file, whose seq 1 differs from its own
    # (DHP-TRN-029 by DHP-TRN-016: all of it or, on a rejection, nothing).
    reply = b.call("file_ingest", {"folder": str(folder)})
    ctx.expect("DHP-ADP-026", reply.ok, f"file_ingest of a folder with a file the store must "
               f"refuse failed as a whole ({reply.code}: {(reply.error or {}).get('message')}) "
               "instead of naming the file with its error", reply)
    entry = (((reply.data or {}) if reply.ok else {}).get("files") or {}).get(path.name) or {}
    ctx.expect("DHP-TRN-029", (entry.get("error") or {}).get("code") == "integrity_error",
               f"a file whose seq 1 differs from the stored seq 1 must be refused with "
               f"integrity_error, got {entry!r}")
    kept = _status(ctx, b, hid, "after the refused file_ingest")
    ctx.expect("DHP-TRN-029", (kept.get("checkpoints") or {}).get("count") == 1
               and kept.get("state") == "claimed",
               f"after a refused file the host's own chain changed: {kept!r}")

    c = ctx.scenario("file-ingest", ttl=30.0).spawn("c")
    got = ctx.need(c.call("file_ingest", {"folder": str(folder)}), "file_ingest")
    files = got.get("files") if isinstance(got, dict) else None
    ctx.expect("DHP-ADP-026", isinstance(files, dict)
               and (files.get(path.name) or {}).get("handoff_id") == hid,
               f"file_ingest must name {path.name} with the handoff id {hid}, got {got!r}")
    st = _status(ctx, c, hid, "after file_ingest")
    ctx.expect("DHP-TRN-029", st.get("state") == "completed",
               f"after ingesting a file with a result the handoff is {st.get('state')}")
    res = ctx.need(c.call("result", {"handoff_id": hid}), "result after file_ingest")
    ctx.expect("DHP-TRN-029", res.get("result") == {"total": 0.1},
               f"the ingested result is {res.get('result')!r}, not {{'total': 0.1}}")

    bad = sc.data.parent / f"{sc.name}-tampered"
    bad.mkdir(parents=True, exist_ok=True)
    lines = log["text"].splitlines(keepends=True)
    changed = lines[2].replace("1234.5678", "1234.5679")
    (bad / path.name).write_text("".join(lines[:2] + [changed] + lines[3:4]), encoding="utf-8")
    d = ctx.scenario("file-ingest-bad", ttl=30.0).spawn("d")
    got = ctx.need(d.call("file_ingest", {"folder": str(bad)}), "file_ingest of a tampered file")
    entry = ((got or {}).get("files") or {}).get(path.name) or {}
    ctx.expect("DHP-TRN-029", (entry.get("error") or {}).get("code") == "integrity_error",
               f"a file whose second checkpoint was changed must be refused with "
               f"integrity_error, got {entry!r}")
    gone = d.call("status", {"handoff_id": hid})
    ctx.expect_code("DHP-TRN-029", gone, "not_found",
                    "status after a refused file (nothing of it may be stored)")


# --- inputs nobody sends ------------------------------------------------------------------

def remote_ref(ctx: Ctx) -> None:
    """An output schema whose $ref points at a server the kit listens on: the store must not
    fetch it, whatever it answers (DHP-SEC-003)."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.5)
    port = listener.getsockname()[1]
    try:
        p = ctx.scenario("remote-ref", ttl=30.0).spawn("p1")
        schema = {"type": "object", "properties": {"x": {"$ref":
                  f"http://127.0.0.1:{port}/schema.json"}}}
        args = {"task_kind": "conform.reach-ref", "inputs": {}, "output_schema": schema,
                "budget": {}}
        reply = p.call("dispatch", args)
        if reply.ok:
            hid = reply.data["handoff_id"]
            taken = take(ctx, p, hid)
            if taken.ok:
                write(p, "complete", hid, taken.data["fence"], result={"x": 1})
        try:
            conn, _ = listener.accept()
            conn.close()
            fetched = True
        except (TimeoutError, OSError):
            fetched = False
        ctx.expect("DHP-SEC-003", not fetched, "dispatching and completing a handoff whose "
                   f"output schema has $ref http://127.0.0.1:{port}/schema.json made the store "
                   "connect to that address", reply)
    finally:
        listener.close()


# Valid in an older JSON Schema draft, invalid in 2020-12 (DHP-ENV-004).
OLDER_DRAFTS = {
    "draft-04 boolean exclusiveMinimum": {"type": "object", "properties": {
        "n": {"type": "number", "minimum": 0, "exclusiveMinimum": True}}},
    "draft-07 array form of items": {"type": "array", "items": [{"type": "string"}]},
    "draft-04 required as a boolean": {"type": "object", "properties": {
        "n": {"type": "integer", "required": True}}},
}


def older_draft_schemas(ctx: Ctx) -> None:
    """Output schemas that an older draft accepts and 2020-12 does not: refused with
    invalid_input by dispatch and by import_log, and nothing is stored."""
    sc = ctx.scenario("older-drafts", ttl=30.0)
    p = sc.spawn("p1")
    for what, schema in OLDER_DRAFTS.items():
        args = {"task_kind": "conform.reach-draft", "inputs": {"what": what},
                "output_schema": schema, "budget": {}}
        ctx.expect_code("DHP-ENV-004", p.call("dispatch", args), "invalid_input",
                        f"dispatch with an output schema valid only before 2020-12 ({what})")
        if "import_log" not in ctx.features:
            continue
        intent = oracle.intent_of(args)
        hid = oracle.handoff_id(intent)
        path = sc.data.parent / f"{sc.name}-{len(what)}.jsonl"
        path.write_text(json.dumps({"type": "header", "envelope": {
            "dhp": "1.0", "handoff_id": hid, "intent": intent}}) + "\n", encoding="utf-8")
        ctx.expect_code("DHP-ENV-004", p.call("import_log", {"path": str(path)}),
                        "invalid_input", f"import of a log whose envelope's output schema is "
                        f"valid only before 2020-12 ({what})")
        ctx.expect_code("DHP-ENV-004", p.call("status", {"handoff_id": hid}), "not_found",
                        f"status after the refused dispatch and import ({what})")


def deep_nesting(ctx: Ctx) -> None:
    """JSON nested 100000 deep: refused with invalid_input, and the adapter stays up."""
    p = ctx.scenario("deep-nesting", ttl=30.0).spawn("p1")
    depth = 100_000
    raw = ('{"task_kind": "conform.reach-deep", "output_schema": {}, "inputs": {"a": '
           + "[" * depth + "]" * depth + "}}")
    reply = p.call("dispatch", {"raw": "deep"}, raw_args=raw)
    ctx.expect_code("DHP-SEC-002", reply, "invalid_input",
                    f"dispatch whose inputs are nested {depth} arrays deep")
    ctx.expect_ok("DHP-SEC-002", p.call("dlq", {}), "the next request after the deep one")


def ship_unreachable(ctx: Ctx) -> None:
    """`ship` towards a port nobody listens on answers at once, from the local buffer."""
    sc = ctx.scenario("ship-unreachable", ttl=30.0)
    p = sc.spawn("p1")
    hid = ctx.need(p.call("dispatch", {"task_kind": "conform.reach-ship", "inputs": {},
                                        "output_schema": {}, "budget": {}}), "dispatch")
    hid = hid["handoff_id"]
    fence = ctx.need(take(ctx, p, hid), "claim")["fence"]
    ctx.need(write(p, "checkpoint", hid, fence, state=FLOATS[0]), "checkpoint")
    probe = socket.create_server(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()  # now nobody listens there
    started = time.monotonic()
    reply = p.call("ship", {"handoff_id": hid, "host": "127.0.0.1", "port": port,
                            "secret": secrets.token_hex(16)})  # a secret DHP-TRN-013 accepts
    took = time.monotonic() - started
    ctx.expect("DHP-TRN-023", reply.ok and took < 5.0, f"ship towards a port nobody listens "
               f"on answered {reply!r} after {took:.2f} s; it must answer ok from the local "
               "buffer without waiting for the network", reply)
    ctx.expect_ok("DHP-TRN-023", write(p, "checkpoint", hid, fence, state=FLOATS[1]),
                  "a checkpoint while the peer is unreachable")
    p.call("transport_stop", {})


def bye(ctx: Ctx) -> None:
    """`bye` is a valid frame (schemas/transport-frame.json): the server takes it as the end of
    the session, answers it with no error and closes (DHP-TRN-001)."""
    peer = Peer(ctx, "reach-bye")
    peer.sc.facts["ingested"] = True
    hid, env = _handoff(ctx, "bye")
    s = peer.open()
    frame = Frames().make("envelope", env)
    got = _exchange(s, [frame])
    if len(got) != 1 or not _is_ack(got[0], frame["id"]):
        raise CheckAborted("a valid envelope was not acknowledged", _transcript([frame], got))
    s.conn.send({"type": "bye"})
    closed = s.conn.closed_within(10.0)
    after = wire.answers(s.conn, 1, timeout=0.5)
    s.conn.close()
    ctx.expect("DHP-TRN-001", closed and not any(_error_code(a) for a in after),
               "after a bye the server must close the connection without an error frame; "
               f"{'it closed' if closed else 'it did not close within 10 s'}, answering "
               f"{[_short(a) for a in after]}")


def silent_connection(ctx: Ctx) -> None:
    """A connection that never says hello is closed in bounded time (DHP-TRN-008: 10 s by
    default; the kit waits 20 s)."""
    peer = Peer(ctx, "reach-silent")
    conn = wire.Conn.open("127.0.0.1", peer.port)
    try:
        closed = conn.closed_within(20.0)
    finally:
        conn.close()
    ctx.expect("DHP-TRN-008", closed, "a connection that sent nothing was still open after "
               "20 s: the server must bound the time a handshake may take")


CHECKS = [
    Check("reach", "import-over-existing", ["DHP-LOG-010", "DHP-CKP-009"],
          import_over_existing, feature="import_log"),
    Check("reach", "ingest-takeover", ["DHP-TRN-015", "DHP-TRN-019", "DHP-TRN-020",
                                       "DHP-ADP-010", "DHP-RES-003"],
          ingest_takeover, feature="transport", cls="transport"),
    Check("reach", "file-transport", ["DHP-ADP-025", "DHP-ADP-026", "DHP-TRN-026",
                                      "DHP-TRN-027", "DHP-TRN-028", "DHP-TRN-029"],
          file_transport,
          feature="file-transport", cls="transport"),
    Check("reach", "hello-versions", ["DHP-TRN-004", "DHP-ADP-020"], hello_versions,
          feature="transport", cls="transport"),
    Check("reach", "ship-unreachable", ["DHP-TRN-023"], ship_unreachable, feature="transport",
          cls="transport"),
    Check("reach", "bye", ["DHP-TRN-001"], bye, feature="transport", cls="transport"),
    Check("reach", "silent-connection", ["DHP-TRN-008"], silent_connection,
          feature="transport", cls="transport"),
    Check("reach", "remote-ref", ["DHP-SEC-003"], remote_ref),
    Check("reach", "deep-nesting", ["DHP-SEC-002"], deep_nesting),
    Check("reach", "older-draft-schemas", ["DHP-ENV-004"], older_draft_schemas),
]
