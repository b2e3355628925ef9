"""A worker process that checkpoints and ships every checkpoint over TCP (test_net_chaos.py).

  ship_worker.py STORE BUFFER PORT HANDOFF_ID STEPS PAD

Recovers the handoff in its local STORE (the previous incarnation was killed, so its liveness
lock is free), ships the stored chain (DHP-TRN-025), then runs the remaining steps up to
STEPS: one checkpoint each (state padded by PAD bytes so a frame takes a while to send),
shipped with a NetShipper buffering in BUFFER; then completes and ships the result. Prints
(flushed) "ack SEQ" when the server acknowledged the frame of checkpoint SEQ, "ack result"
for the result, and "done" once everything is acknowledged.
"""

from __future__ import annotations

import sys
import threading

from dhp import api
from dhp.core import operations
from dhp.transport.shipper import NetShipper

from transport_helpers import SECRET

_OUT = threading.Lock()


def say(line: str) -> None:
    """One whole line in one write: print() writes the text and its newline separately, so
    the shipper thread's "ack N" and the main thread's "done" could interleave."""
    with _OUT:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def main() -> None:
    store_path, buffer, port, hid, steps, pad = sys.argv[1:7]
    steps, pad = int(steps), int(pad)
    store = api.Store(store_path)
    seq_of: dict[int, object] = {}
    mutex = threading.Lock()

    def on_ack(frame_id: int, duplicate: bool) -> None:
        with mutex:
            what = seq_of.get(frame_id)
        if what is not None:
            say(f"ack {what}")

    shipper = NetShipper("127.0.0.1", int(port), local_logpath=buffer, secret=SECRET,
                             backoff=(0.01, 0.2), on_ack=on_ack)
    row = operations.get_row(store, hid)
    done = row["result"]
    if done is not None:  # completed before the last kill: only the shipping is left
        stored = api.checkpoints(store, hid)
        with mutex:
            ids = shipper.ship_chain(row["envelope"], stored, done)
            for frame_id, record in zip(ids[1:], [*stored, done], strict=True):
                seq_of[frame_id] = record.get("seq", "result")
    else:
        run(store, hid, steps, pad, shipper, seq_of, mutex)
    if shipper.flush(30):
        say("done")
    shipper.close()


def run(store, hid: str, steps: int, pad: int, shipper, seq_of: dict, mutex) -> None:
    with api.recover(store, hid, "worker") as ctx:
        stored = api.checkpoints(store, hid)
        with mutex:
            ids = shipper.ship_chain(ctx.envelope, stored)
            for frame_id, record in zip(ids[1:], stored, strict=True):
                seq_of[frame_id] = record["seq"]
        for step in range(len(stored) + 1, steps + 1):
            record = ctx.checkpoint({"step": step, "pad": "p" * pad})
            with mutex:
                ids = shipper.ship_checkpoint(ctx.envelope, record)
                seq_of[ids[-1]] = record["seq"]
        record = ctx.complete({"n": steps})
        with mutex:
            seq_of[shipper.ship_result(ctx.envelope, record)[-1]] = "result"


if __name__ == "__main__":
    main()
