"""Results are validated against the output schema; cancellation reaches a running worker
at its next heartbeat or write."""

import dhp

store = dhp.Store("./data")
schema = {"type": "object", "required": ["rows"],
          "properties": {"rows": {"type": "integer", "minimum": 0}},
          "additionalProperties": False}

hid = dhp.dispatch(store, "etl.import", {"file": "a.csv"}, schema)
with dhp.claim(store, hid, "w1") as ctx:
    try:
        ctx.complete({"rows": -1, "note": "oops"})
    except dhp.SchemaViolation as exc:
        for error in exc.details:  # every error, with its JSON path
            print("schema violation at", error["path"] + ":", error["message"])
    print("still", dhp.status(store, hid)["state"], "by", dhp.status(store, hid)["owner"])
    ctx.complete({"rows": 120})
print("result:", dhp.result(store, hid))

hid = dhp.dispatch(store, "etl.import", {"file": "b.csv"}, schema)
with dhp.claim(store, hid, "w1") as ctx:
    ctx.checkpoint({"rows": 10})
    dhp.cancel(store, hid)  # from anywhere: another process, the CLI, an operator
    try:
        ctx.checkpoint({"rows": 20})
    except dhp.Cancelled as exc:
        print("worker told:", exc.code)
print("state:", dhp.status(store, hid)["state"])
