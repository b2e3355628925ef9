"""Limits (spec/limits.md, DHP-LIM-*): over-limit sizes, deep nesting, spend past 2^53-1,
odd worker ids and the largest fence are refused with `invalid_input` (or `conflict`) and
store nothing. The kit checks the default limits, which the spec fixes."""

from __future__ import annotations

import json

from .. import oracle
from .base import Check, Ctx, dispatch, state_mark, take, write

MiB = 1024 * 1024
MAX_SAFE = 2**53 - 1


def _nested(depth: int, objects: bool = False) -> object:
    """A value `depth` containers deep: arrays, or objects (`{"k": ...}`)."""
    value: object = 0
    for _ in range(depth):
        value = {"k": value} if objects else [value]
    return value


def _checkpoints(ctx: Ctx, proc, hid: str) -> int:
    data = ctx.need(proc.call("status", {"handoff_id": hid}), "status")
    return data["checkpoints"]["count"]


def values(ctx: Ctx) -> None:
    """Sizes, depth, spend and worker ids, on one adapter (each scenario costs a process)."""
    p = ctx.scenario("values", ttl=30.0).spawn("p1")
    _sizes_and_depth(ctx, p)
    _spend_total(ctx, p)
    _worker_ids(ctx, p)


def _sizes_and_depth(ctx: Ctx, p) -> None:
    big = {"task_kind": "conform.limits", "inputs": {"pad": "x" * (4 * MiB + 1024)},
           "output_schema": {}, "budget": {}}
    reply = p.call("dispatch", big)
    ctx.expect_code("DHP-LIM-003", reply, "invalid_input", "dispatch of 4 MiB + 1 KiB of inputs")
    unknown = p.call("status", {"handoff_id": oracle.handoff_id(oracle.intent_of(big))})
    ctx.expect_code("DHP-LIM-003", unknown, "not_found", "status of the refused dispatch")
    for objects, kind in ((False, "arrays"), (True, "objects")):
        deep = dict(big, inputs={"deep": _nested(128, objects)})
        ctx.expect_code("DHP-LIM-004", p.call("dispatch", deep), "invalid_input",
                        f"dispatch of inputs nested 129 levels deep ({kind})")
        edge = dict(big, inputs={"deep": _nested(127, objects), "n": ctx.rng.random()})
        ctx.expect_ok("DHP-LIM-001", p.call("dispatch", edge),
                      f"dispatch of inputs nested exactly 128 levels deep ({kind}), the limit")
    hid = dispatch(ctx, p)
    fence = ctx.need(take(ctx, p, hid), "claim")["fence"]
    over = write(p, "checkpoint", hid, fence, state={"pad": "x" * (4 * MiB + 1024)})
    ctx.expect_code("DHP-LIM-001", over, "invalid_input", "checkpoint of a 4 MiB + 1 KiB state")
    too_deep = write(p, "checkpoint", hid, fence, state={"deep": _nested(900)})
    ctx.expect_code("DHP-LIM-004", too_deep, "invalid_input", "checkpoint nested 900 deep")
    ctx.expect("DHP-LIM-003", _checkpoints(ctx, p, hid) == 0,
               "a refused over-limit checkpoint was stored")
    ok = write(p, "checkpoint", hid, fence, state=state_mark(ctx, 1))
    ctx.expect_ok("DHP-LIM-003", ok, "a small checkpoint after the refused ones")


def _spend_total(ctx: Ctx, p) -> None:
    hid = dispatch(ctx, p)
    fence = ctx.need(take(ctx, p, hid), "claim")["fence"]
    huge = write(p, "checkpoint", hid, fence, state=state_mark(ctx, 1), spend=1e308)
    ctx.expect_code("DHP-LIM-005", huge, "invalid_input", "a spend of 1e308")
    ctx.need(write(p, "checkpoint", hid, fence, state=state_mark(ctx, 2), spend=MAX_SAFE),
             "a spend of 2^53-1")
    past = write(p, "checkpoint", hid, fence, state=state_mark(ctx, 3), spend=1)
    ctx.expect_code("DHP-LIM-005", past, "invalid_input", "a spend past a total of 2^53-1")
    data = ctx.need(p.call("status", {"handoff_id": hid}), "status")
    ctx.expect("DHP-LIM-005", data["spend"] == MAX_SAFE,
               f"the running total is {data['spend']!r}, not 2^53-1")


def _worker_ids(ctx: Ctx, p) -> None:
    hid = dispatch(ctx, p)
    refused = [(f"w{c}", f"the control character U+{ord(c):04X}")
               for c in ("\u0001", "\u001f", "\u007f", "\u0080", "\u009f")]
    for worker, what in refused + [("w\ud800", "a lone surrogate"),
                                   ("w" * 201, "201 characters")]:
        reply = p.call("claim", {"handoff_id": hid, "worker": worker})
        ctx.expect_code("DHP-LIM-007", reply, "invalid_input", f"a worker id with {what}")
    data = ctx.need(p.call("status", {"handoff_id": hid}), "status")
    ctx.expect("DHP-LIM-007", data["state"] == "pending" and data["fence"] == 0,
               f"a refused claim changed the handoff: {data['state']}, fence {data['fence']}")
    edge = "\u00a0" + "w" * 199  # 200 characters, the first one just past the controls
    ctx.expect_ok("DHP-LIM-007", p.call("claim", {"handoff_id": hid, "worker": edge}),
                  "claim by a worker id of 200 characters starting with U+00A0")


def largest_fence(ctx: Ctx) -> None:
    sc = ctx.scenario("fence-export", ttl=30.0)
    p = sc.spawn("p1")
    hid = dispatch(ctx, p)
    fence = ctx.need(take(ctx, p, hid), "claim")["fence"]
    ctx.need(write(p, "checkpoint", hid, fence, state=state_mark(ctx, 1)), "checkpoint")
    path = sc.data.parent / f"{sc.name}.jsonl"
    ctx.need(p.call("export_log", {"handoff_id": hid, "path": str(path)}), "export_log")
    header, line = path.read_text(encoding="utf-8").splitlines()[:2]
    checkpoint = json.loads(line)
    record = {k: v for k, v in checkpoint["record"].items() if k != "hash"}
    record["fence"] = MAX_SAFE
    checkpoint["record"] = dict(record, hash=oracle.digest(record))
    top = sc.data.parent / f"{sc.name}-top.jsonl"
    top.write_text(header + "\n" + json.dumps(checkpoint) + "\n", encoding="utf-8")
    other = ctx.scenario("fence-import", ttl=30.0).spawn("p1")
    reply = other.call("import_log", {"path": str(top)})
    ctx.expect_code("DHP-LIM-006", reply, "invalid_input",
                    "import of a live handoff at the largest fence")
    ctx.expect_code("DHP-LIM-006", other.call("status", {"handoff_id": hid}), "not_found",
                    "status after the refused import")


CHECKS = [
    Check("limits", "values", ["DHP-LIM-001", "DHP-LIM-003", "DHP-LIM-004", "DHP-LIM-005",
                               "DHP-LIM-007"], values),
    Check("limits", "largest-fence", ["DHP-LIM-006"], largest_fence, feature="export_log"),
]
