"""The worker runtime: `@dhp.task` registers the function of a task kind (task.py), a Runner
takes and runs work in a loop (runtime.py), and `dhp worker` runs a pool of them (pool.py)."""

from dhp.worker.task import REGISTRY, Task, task

__all__ = ["REGISTRY", "Task", "task"]
