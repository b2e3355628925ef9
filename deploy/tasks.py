"""The example task module the container stack runs (`dhp worker tasks`, from /app).

`demo.steps` does `steps` steps of `step_s` seconds each, checkpointing after every step, so a
worker killed halfway is resumed by another from its last checkpoint. Its result says which
worker finished it and from which step it started, so a takeover is visible in the result
and on the dashboard. Replace this module with your own: mount it over /app/tasks.py, or
build an image `FROM localhost/dhp` that copies your package in (docs/guide/containers.md).
"""

from __future__ import annotations

import socket
import time

import dhp

RESULT = {"type": "object", "required": ["steps", "worker", "resumed_from"],
          "properties": {"steps": {"type": "integer"}, "worker": {"type": "string"},
                         "resumed_from": {"type": "integer"}}}


@dhp.task("demo.steps", output_schema=RESULT, budget={"max_attempts": 5, "backoff_s": 1})
def steps(ctx, inputs):
    done = (ctx.last_checkpoint or {"step": 0})["step"]
    for step in range(done + 1, inputs["steps"] + 1):
        time.sleep(inputs.get("step_s", 0.2))          # the work of one step
        ctx.checkpoint({"step": step})
    return {"steps": inputs["steps"], "worker": socket.gethostname(), "resumed_from": done}
