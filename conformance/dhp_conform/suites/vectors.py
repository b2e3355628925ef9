"""The shipped vectors, run through the adapter where the adapter exposes the function:
identity via dispatch (the returned id against the vector's), envelopes, logs and checkpoint
chains via import_log. Each vector is first checked against the kit's own oracle, so a wrong
vector is a harness error rather than a finding. The decision-table vectors (lifecycle traces,
the fencing table) run through operations on a manual store clock (decisions.py)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import dhp_data

from .. import oracle
from . import decisions
from .base import Check, Ctx


def _load(suite: str) -> list[dict]:
    path = dhp_data.path("vectors", f"{suite}.json")
    return json.loads(path.read_text(encoding="utf-8"))["tests"] if path.exists() else []


def _value(test: dict):
    if "input_text" in test:
        try:
            return json.loads(test["input_text"])
        except ValueError:
            return None
    return test["input"]


def _transportable(value) -> bool:
    """True when the JSON text the kit sends parses back to exactly this value."""
    try:
        text = json.dumps(value, allow_nan=False)
    except ValueError:
        return False
    return json.loads(text) == value and not _has_float_int_ambiguity(value)


def _has_float_int_ambiguity(value) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, dict):
        return any(_has_float_int_ambiguity(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_float_int_ambiguity(v) for v in value)
    return False


def identity(ctx: Ctx) -> None:
    """Each intent goes to dispatch whole, under args.intent (DHP-ADP-021): verbatim when the
    vector has input_text, so a sixth or missing member, another version, big numbers and
    duplicate members all reach the implementation as written."""
    sc = ctx.scenario("identity", ttl=5.0)
    p = sc.spawn("p1")
    for test in _load("identity"):
        intent, raw = _value(test), test.get("input_text")
        if raw is not None:  # a raw LF or CR can only be whitespace: keep one line per request
            raw = raw.replace("\r", " ").replace("\n", " ")
        expected = test["expected"]
        if raw is None and not _transportable(intent):
            continue
        if "handoff_id" in expected and raw is None \
                and oracle.handoff_id(intent) != expected["handoff_id"]:
            sc.harness.adapter_errors.append(f"vector {test['id']} disagrees with the kit's "
                                             "RFC 8785 oracle; the vector is wrong")
            continue
        reply = p.call("dispatch", {"intent": intent},
                       raw_args=None if raw is None else '{"intent": ' + raw + "}")
        for rid in [*test["requirements"], "DHP-ADP-021"]:
            if "handoff_id" in expected:
                got = reply.data.get("handoff_id") if reply.ok else reply
                ctx.expect(rid, reply.ok and got == expected["handoff_id"],
                           f"{test['id']} ({test['description']}): dispatch gave {got!r}, the "
                           f"vector's id is {expected['handoff_id']}", reply)
            else:
                ctx.expect_code(rid, reply, expected["error"],
                                f"{test['id']} ({test['description']})")


def envelopes(ctx: Ctx) -> None:
    sc = ctx.scenario("envelope", ttl=5.0)
    p = sc.spawn("p1")
    folder = sc.data.parent / f"{sc.name}-logs"
    folder.mkdir(parents=True, exist_ok=True)
    for test in _load("envelope"):
        text = test.get("input_text") or json.dumps(test["input"], ensure_ascii=False)
        path = folder / f"{test['id']}.jsonl"
        path.write_bytes(b'{"type": "header", "envelope": ' + text.encode("utf-8",
                                                                           "surrogatepass")
                         + b"}\n")
        reply = p.call("import_log", {"path": str(path)})
        expected = test["expected"]
        for rid in test["requirements"]:
            if expected.get("valid"):
                ctx.expect_ok(rid, reply, f"{test['id']} ({test['description']}): import of "
                              "a header-only log with this envelope")
            else:
                ctx.expect_code(rid, reply, expected["error"], f"{test['id']} "
                                f"({test['description']}): import of this envelope")


def logs(ctx: Ctx) -> None:
    """Bad logs go to one store (a refused import changes nothing, DHP-LOG-008); each valid
    log gets a fresh store, since several vectors share a handoff with different chains."""
    shared = ctx.scenario("log", ttl=5.0).spawn("p1")
    base = dhp_data.path("vectors")
    for test in _load("log"):
        path = Path(base, test["input"]["file"])
        expected = test["expected"]
        p = ctx.scenario("log-valid", ttl=5.0).spawn("p1") if expected.get("valid") else shared
        reply = p.call("import_log", {"path": str(path)})
        if p is not shared:
            p.scenario.close()
        for rid in test["requirements"]:
            if expected.get("valid"):
                ctx.expect_ok(rid, reply, f"{test['id']} ({test['description']}): import_log")
            else:
                bad = expected["errors"][0]
                ctx.expect(rid, not reply.ok and reply.code == bad["code"],
                           f"{test['id']} ({test['description']}): import_log was "
                           f"{'accepted' if reply.ok else reply.code}; the log is bad at line "
                           f"{bad['line']} ({bad['requirement']}) and is refused with "
                           f"{bad['code']} (DHP-LOG-011)", reply)


def chains(ctx: Ctx) -> None:
    """Each chain becomes a log (a header with the vector's own intent, then its records) for
    import_log: a valid chain is imported into a fresh store, a broken one refused with the
    vector's code."""
    tests = _load("checkpoint-chain")
    shared = None
    sent = 0
    for test in tests:
        hid, intent = test["input"]["handoff_id"], test["input"].get("intent")
        if not isinstance(intent, dict) or oracle.handoff_id(intent) != hid:
            ctx.run.harness.adapter_errors.append(f"vector {test['id']}: input.intent is "
                                                  "missing or does not hash to "
                                                  "input.handoff_id; the vector is wrong")
            continue
        envelope = {"dhp": "1.0", "handoff_id": hid, "intent": intent}
        sent += 1
        sc = ctx.scenario("chain", ttl=5.0) if test["expected"].get("valid") or shared is None \
            else shared.scenario
        p = sc.procs.get("p1") or sc.spawn("p1")
        if not test["expected"].get("valid"):
            shared = p
        lines = [{"type": "header", "envelope": envelope}]
        lines += [{"type": "checkpoint", "record": r} for r in test["input"]["records"]]
        path = sc.data.parent / f"{sc.name}-{test['id']}.jsonl"
        path.write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines),
                        encoding="utf-8")
        reply = p.call("import_log", {"path": str(path)})
        label = test["id"]
        for rid in test["requirements"]:
            if test["expected"].get("valid"):
                ctx.record(rid, reply.ok, f"{label} ({test['description']}): import_log of a "
                           f"log with this valid chain failed: {reply!r}",
                           ctx.evidence(reply), label=label)
            else:
                code = test["expected"]["error"]
                ctx.record(rid, not reply.ok and reply.code == code,
                           f"{label} ({test['description']}): import_log of a log with this "
                           f"chain (bad at record {test['expected']['at']}) must fail with "
                           f"{code}, got {'ok' if reply.ok else reply.code}",
                           ctx.evidence(reply), label=label)
        if test["expected"].get("valid") and p is not shared:
            sc.close()
    ctx.run.harness.notes.append(f"checkpoint-chain vectors: {sent} of {len(tests)} sent "
                                 "through the adapter as logs (import_log)")


CHECKS = [
    Check("vectors", "identity", ["DHP-ID-001", "DHP-ADP-021"], identity),
    Check("vectors", "envelope", ["DHP-ENV-001"], envelopes, feature="import_log"),
    Check("vectors", "log", ["DHP-LOG-007"], logs, feature="import_log"),
    Check("vectors", "checkpoint-chain", decisions.cited("checkpoint-chain"), chains,
          feature="import_log"),
    *decisions.CHECKS,
]
