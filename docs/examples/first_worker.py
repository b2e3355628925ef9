"""A first DHP worker: dispatch a job, do it step by step, checkpoint every step."""

import dhp

store = dhp.Store("./data")  # SQLite in WAL mode, created on first use

hid = dhp.dispatch(
    store,
    task_kind="squares.sum",
    inputs={"n": 5},
    output_schema={"type": "object", "required": ["total"],
                   "properties": {"total": {"type": "integer"}}},
    budget={"max_attempts": 3},
)
print("dispatched", hid[:19] + "...")

with dhp.claim(store, hid, worker_id="w1") as ctx:  # heartbeats in the background
    # Resume where the previous owner stopped (None on the first attempt).
    state = ctx.last_checkpoint or {"i": 0, "total": 0}
    while state["i"] < ctx.inputs["n"]:
        i = state["i"] + 1
        state = {"i": i, "total": state["total"] + i * i}
        ctx.checkpoint(state)  # survives kill -9 once it returns; fsynced within 0.1 s
        print("step", i, "total", state["total"])
    ctx.complete({"total": state["total"]})  # validated against output_schema

print("state:", dhp.status(store, hid)["state"])
print("result:", dhp.result(store, hid))

# Dispatching the same intent again is idempotent: the same id, nothing new stored.
again = dhp.dispatch(store, "squares.sum", {"n": 5},
                     {"type": "object", "required": ["total"],
                      "properties": {"total": {"type": "integer"}}},
                     {"max_attempts": 3})
print("same id:", again == hid)
