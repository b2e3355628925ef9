"""A DHP worker behind `dhp-a2a`: it takes `pages.count` handoffs and does them page by page,
checkpointing each page, so a standby resumes from the last page when this process dies.

    python a2a_worker.py STORE WORKER_ID
"""

import sys
import time

import dhp

KIND = "pages.count"


def take(store, me):
    """The next handoff: a waiting one, or one whose owner process died (claim_next takes a
    dead owner's work at once, with a higher fence); waits for one without polling."""
    ctx = None
    while ctx is None:
        ctx = dhp.claim_next(store, KIND, me, wait=5)
    return ctx


def main(store_path, me):
    store = dhp.Store(store_path)
    with take(store, me) as ctx:
        state = ctx.last_checkpoint or {"page": 0, "words": 0}
        print(f"{me}: took {ctx.handoff_id[:15]} at fence {ctx.fence}, "
              f"resuming after page {state['page']}", flush=True)
        for page in range(state["page"] + 1, ctx.envelope["intent"]["inputs"]["pages"] + 1):
            time.sleep(0.2)  # the real work: fetch and count one page
            state = {"page": page, "words": state["words"] + 100 * page}
            ctx.checkpoint(state)
            print(f"{me}: checkpoint page {page}", flush=True)
        ctx.complete({"pages": state["page"], "words": state["words"]})
        print(f"{me}: completed", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
