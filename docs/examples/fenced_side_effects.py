"""Side effects on an external system, made safe with the fence and the idempotency key.

Worker A charges a card, then stalls (no heartbeats) until its lease runs out. Worker B
takes over under fence 2 and finds, in the last checkpoint, the key of A's charge: it
repeats the call with the same key, which the payment system deduplicates. When A wakes
up, the payment system refuses its fence-1 call and the store refuses its checkpoint.
"""

import time

import dhp


class Payments:
    """A stand-in for an external API that accepts an idempotency key and a fence."""

    def __init__(self):
        self.charges = {}  # idempotency key -> amount
        self.highest_fence = {}  # handoff id -> highest fence seen

    def charge(self, handoff_id, fence, key, amount):
        if fence < self.highest_fence.get(handoff_id, 0):
            return "refused: stale fence"
        self.highest_fence[handoff_id] = fence
        if key in self.charges:
            return "duplicate: already charged"
        self.charges[key] = amount
        return "charged"


payments = Payments()
store = dhp.Store("./data")
hid = dhp.dispatch(store, "orders.pay", {"order": 42, "amount": 1999}, {"type": "object"})

# Worker A: a short lease and no background heartbeat, so that a pause loses the lease.
a = dhp.claim(store, hid, "worker-a", ttl=0.5, heartbeat_interval=0)
key = a.idempotency_key("charge")
a.checkpoint({"charge_key": key})  # record the key *before* calling out
print("A:", payments.charge(hid, a.fence, key, a.inputs["amount"]))
time.sleep(0.6)  # A stalls (GC pause, swapped out, SIGSTOP...): its lease expires

# Worker B: the handoff is orphaned now; B claims it under a higher fence.
with dhp.claim(store, hid, "worker-b") as b:
    print("B: fence", b.fence, "resumes from", list(b.last_checkpoint))
    key = b.last_checkpoint["charge_key"]  # A's key: the same charge, not a new one
    print("B:", payments.charge(hid, b.fence, key, b.inputs["amount"]))
    b.checkpoint({"charge_key": key, "charged": True})
    b.complete({"paid": True})

# A wakes up and carries on as if nothing happened.
print("A:", payments.charge(hid, a.fence, a.idempotency_key("receipt"), 0))
try:
    a.checkpoint({"charge_key": key, "charged": True})
except dhp.LeaseLost as exc:
    print("A: store says", exc.code)
print("charges made:", len(payments.charges))
