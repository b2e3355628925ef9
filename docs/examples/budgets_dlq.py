"""Budgets: the write that would exceed a cap is refused and the handoff is parked, intact,
in the dead-letter queue, from where an operator can requeue it."""

import dhp

store = dhp.Store("./data")
hid = dhp.dispatch(store, "crawl.site", {"site": "example.org"}, {"type": "object"},
                   budget={"max_steps": 3, "max_spend": 1.0})

try:
    with dhp.claim(store, hid, "w1") as ctx:
        for page in range(1, 10):
            ctx.checkpoint({"pages": page}, spend=0.25)  # spend: e.g. dollars of API calls
            print("checkpoint", page)
except dhp.BudgetExceeded as exc:
    print("refused:", exc.code, "->", dhp.status(store, hid)["state"])

for entry in dhp.dlq(store):
    print("dlq:", entry["reason"], "checkpoints", entry["checkpoints"]["count"],
          "last state", dhp.last_checkpoint(store, entry["handoff_id"]))

dhp.requeue(store, hid)  # back to pending; attempts, steps and spend start again
print("after requeue:", dhp.status(store, hid)["state"])
with dhp.claim(store, hid, "w2") as ctx:
    print("w2 resumes from", ctx.last_checkpoint, "under fence", ctx.fence)
    ctx.complete({"pages": ctx.last_checkpoint["pages"]})
print("result:", dhp.result(store, hid))
