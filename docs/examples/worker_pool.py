"""A worker pool: claim_next hands out the oldest pending, released or orphaned handoff of
the given kinds, or None when there is nothing to do."""

import dhp

store = dhp.Store("./data")
schema = {"type": "object", "required": ["upper"]}
for word in ["alpha", "beta", "gamma"]:
    dhp.dispatch(store, "text.upper", {"word": word}, schema)
dhp.dispatch(store, "text.other", {"word": "skipped"}, schema)  # a kind this pool ignores

while (ctx := dhp.claim_next(store, ["text.upper"], worker_id="pool-1")) is not None:
    with ctx:
        word = ctx.inputs["word"]
        ctx.complete({"upper": word.upper()})
        print("done", word)

for s in dhp.list_handoffs(store):
    print(s["task_kind"], s["state"])
