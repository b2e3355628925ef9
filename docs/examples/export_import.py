"""Move a handoff to another host: export its portable JSON-lines log, import it into the
other host's store (the whole chain is verified first), and finish the work there."""

import json
from pathlib import Path

import dhp

host_a = dhp.Store("./host-a")
hid = dhp.dispatch(host_a, "report.build", {"month": "2025-01"}, {"type": "object"})
with dhp.claim(host_a, hid, "a-1") as ctx:
    ctx.checkpoint({"section": 1})
    ctx.checkpoint({"section": 2})
    # leaving the block without complete() releases the lease
dhp.export_log(host_a, hid, "handoff.jsonl")

with open("handoff.jsonl", encoding="utf-8") as f:
    print("log lines:", [json.loads(line)["type"] for line in f])

host_b = dhp.Store("./host-b")  # any store, on any host
assert dhp.import_log(host_b, "handoff.jsonl") == hid
with dhp.claim(host_b, hid, "b-1") as ctx:
    print("host B resumes from", ctx.last_checkpoint, "under fence", ctx.fence)
    ctx.checkpoint({"section": 3})
    ctx.complete({"sections": 3})
print("host B:", dhp.status(host_b, hid)["state"], dhp.result(host_b, hid))

# A tampered log is refused before anything is stored.
lines = Path("handoff.jsonl").read_text(encoding="utf-8").splitlines()
lines[1] = lines[1].replace('"section":1', '"section":9')
Path("tampered.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
try:
    dhp.import_log(dhp.Store("./host-c"), "tampered.jsonl")
except dhp.IntegrityError as exc:
    print("tampered log refused:", exc.code, exc.requirement)
