"""The worker runtime: @dhp.task, `dhp worker`, and the issue's done-when scenario with real
processes: a user writes a task function, starts `dhp worker`, kill -9 one worker process,
and the pool finishes the work from the last checkpoint with no supervisor running."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import dhp
import pytest
from dhp.cli.main import main as dhp_main
from dhp.worker import REGISTRY
from dhp.worker.runtime import Runner

TASKS = textwrap.dedent('''
    import os, time
    import dhp

    @dhp.task("count.slow", output_schema={"type": "object", "required": ["n"]},
              budget={"max_attempts": 5})
    def count(ctx, inputs):
        state = ctx.last_checkpoint or {"i": 0}
        for i in range(state["i"], inputs["n"]):
            time.sleep(inputs["sleep"])
            ctx.checkpoint({"i": i + 1, "pid": os.getpid()})
        return {"n": inputs["n"], "resumed_at": state["i"]}
''')


def start_pool(folder: Path, *args: str, python: tuple[str, ...] = ("-m", "dhp.cli.main")
               ) -> subprocess.Popen:
    """Start `dhp worker user_tasks` and return once it logged its start line."""
    (folder / "user_tasks.py").write_text(TASKS)
    pool = subprocess.Popen([sys.executable, *python, "worker", "user_tasks",
                             "--store", str(folder / "store"), "--create", *args],
                            cwd=folder, stderr=subprocess.PIPE, text=True)
    line = pool.stderr.readline()
    assert " start " in line, line + pool.stderr.read()
    return pool


def wait_for(predicate, timeout: float = 120.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


def stop(pool: subprocess.Popen) -> tuple[int, str]:
    if pool.poll() is None:
        pool.send_signal(signal.SIGTERM)
    try:
        _, log = pool.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        pool.kill()
        _, log = pool.communicate()
    return pool.returncode, log


@pytest.mark.covers("DHP-SCH-005")
def test_kill_9_of_a_pool_worker_resumes_from_the_last_checkpoint_without_a_supervisor(
        tmp_path):
    # A 60 s lease: a takeover before it ran out can only come from the liveness lock.
    pool = start_pool(tmp_path, "--concurrency", "2", "--ttl", "60")
    try:
        store = dhp.Store(tmp_path / "store")
        hid = dhp.dispatch(store, "count.slow", {"n": 40, "sleep": 0.05},
                           {"type": "object", "required": ["n"]}, {"max_attempts": 5})
        before = wait_for(lambda: (lambda s: s["checkpoints"]["count"] >= 5 and s)(
            dhp.status(store, hid)), what="five checkpoints")
        victim = int(before["owner"].rsplit("-", 1)[1])
        os.kill(victim, signal.SIGKILL)
        killed_at = time.monotonic()
        after = wait_for(lambda: (lambda s: s["fence"] == 2 and s)(dhp.status(store, hid)),
                         what="the takeover")
        took = time.monotonic() - killed_at
        assert took < 50, f"the takeover waited {took:.1f}s: for the lease, not the lock"
        assert after["owner"] != before["owner"] and after["attempts"] == 2
        wait_for(lambda: dhp.status(store, hid)["state"] == "completed", what="completion")
    finally:
        code, log = stop(pool)
    result = dhp.result(store, hid)
    records = dhp.checkpoints(store, hid)
    assert result["n"] == 40 and [r["seq"] for r in records] == list(range(1, 41))
    # Resumed from the last checkpoint the killed worker acknowledged: nothing redone.
    first_of_fence_2 = next(r for r in records if r["fence"] == 2)
    assert result["resumed_at"] == first_of_fence_2["seq"] - 1 >= 5
    assert all(r["state"]["pid"] == victim for r in records if r["fence"] == 1)
    assert code == 0, log
    assert f"(pid {victim}) ended by signal 9" in log
    assert f"fence=2 from checkpoint {result['resumed_at']}" in log
    assert log.count(" complete count.slow") == 1


# The pool's CLI with prctl made unavailable: the children watch the parent's pipe instead.
WITHOUT_PDEATHSIG = ("-c", "import sys; from dhp.worker import parent_watch; "
                     "parent_watch.set_pdeathsig = lambda signal_number: False; "
                     "from dhp.cli.main import main; sys.exit(main(sys.argv[1:]))")


def children_of(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(p) for p in path.read_text().split()]


def gone(pid: int) -> bool:
    """Ended, or a zombie waiting to be reaped by its new parent (it runs nothing)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (FileNotFoundError, ProcessLookupError):
        return True


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="reads /proc")
@pytest.mark.parametrize("how", ["pdeathsig", "pipe"])
def test_kill_9_of_the_pools_parent_ends_every_child_and_frees_its_work(tmp_path, how):
    pool = start_pool(tmp_path, "--concurrency", "3", "--ttl", "60", "--grace", "60",
                      **({"python": WITHOUT_PDEATHSIG} if how == "pipe" else {}))
    store = dhp.Store(tmp_path / "store")
    hid = dhp.dispatch(store, "count.slow", {"n": 400, "sleep": 0.05},
                       {"type": "object", "required": ["n"]}, {"max_attempts": 5})
    wait_for(lambda: dhp.status(store, hid)["checkpoints"]["count"] >= 2, what="checkpoints")
    children = wait_for(lambda: (lambda c: len(c) == 3 and c)(children_of(pool.pid)),
                        what="three children")
    pool.send_signal(signal.SIGKILL)
    pool.wait(60)
    try:
        wait_for(lambda: all(gone(c) for c in children), timeout=10,
                 what="every child to end after its parent's kill -9")
    finally:
        for child in children:
            if not gone(child):
                os.kill(child, signal.SIGKILL)
    # Nothing keeps taking work, and the busy child's handoff is free at once (given back,
    # or its owner's liveness lock free), long before its 60 s lease would end. (With the
    # pipe an idle sibling, signalled a moment later, may take the given-back handoff and
    # give it back again: a fence more, no work lost.)
    late = dhp.dispatch(store, "count.slow", {"n": 1, "sleep": 0}, {"type": "object"})
    time.sleep(0.5)
    assert dhp.status(store, late)["state"] == "pending"
    ctx = dhp.recover(store, hid, "standby", heartbeat_interval=0)
    assert ctx.fence >= 2 and ctx.last_checkpoint["i"] >= 2


def test_sigterm_drains_running_work_after_the_grace_time(tmp_path):
    pool = start_pool(tmp_path, "--concurrency", "1", "--grace", "0.5")
    try:
        store = dhp.Store(tmp_path / "store")
        hid = dhp.dispatch(store, "count.slow", {"n": 10_000, "sleep": 0.05},
                           {"type": "object", "required": ["n"]}, {"max_attempts": 5})
        wait_for(lambda: dhp.status(store, hid)["checkpoints"]["count"] >= 2,
                 what="two checkpoints")
    finally:
        code, log = stop(pool)
    assert code == 0, log
    status = dhp.status(store, hid)
    assert status["state"] == "released" and status["not_before_in"] is None, status
    assert "release count.slow" in log and "(drained)" in log


def test_an_idle_pool_stops_at_once_on_sigterm(tmp_path):
    pool = start_pool(tmp_path, "--concurrency", "2", "--threads")
    code, log = stop(pool)
    assert code == 0, log
    assert "stop exit 0" in log


def test_runner_retries_a_failing_function_with_backoff(tmp_path):
    calls = []

    @dhp.task("flaky.once", output_schema={"type": "object"},
              budget={"max_attempts": 3, "backoff_s": 0.2})
    def flaky(ctx, inputs):
        calls.append(ctx.fence)
        if ctx.fence == 1:
            raise ValueError("first try fails")
        return {"fence": ctx.fence}

    try:
        store = dhp.Store(tmp_path / "s")
        hid = flaky.dispatch(store, {"x": 1})
        out = io.StringIO()
        stop_event = threading.Event()
        runner = Runner(store, {"flaky.once": flaky}, "w1", stop=stop_event, out=out)
        runner.run_one(runner.take())
        status = dhp.status(store, hid)
        assert status["state"] == "released" and 0 < status["not_before_in"] <= 0.2
        assert "fail flaky.once" in out.getvalue() and "ValueError: first try fails" \
            in out.getvalue() and "attempt 1 of 3; retry in" in out.getvalue()
        runner.run_one(runner.take())  # waits out the backoff (claim_next's wait)
        assert dhp.result(store, hid) == {"fence": 2} and calls == [1, 2]
    finally:
        REGISTRY.pop("flaky.once", None)


def test_a_result_the_schema_refuses_is_a_failed_attempt(tmp_path):
    @dhp.task("bad.result", output_schema={"type": "object", "required": ["ok"]},
              budget={"max_attempts": 1})
    def bad(ctx, inputs):
        return {"nope": True}

    try:
        store = dhp.Store(tmp_path / "s")
        hid = bad.dispatch(store, {})
        out = io.StringIO()
        runner = Runner(store, {"bad.result": bad}, "w1", stop=threading.Event(), out=out)
        runner.run_one(runner.take())
        assert "schema_violation" in out.getvalue()
        assert dhp.claim_next(store, "bad.result", "w2") is None  # parks it: no attempt left
        assert dhp.status(store, hid)["state"] == "dead_lettered"
    finally:
        REGISTRY.pop("bad.result", None)


def test_task_registration_checks_its_intent_and_refuses_a_second_owner():
    with pytest.raises(dhp.InvalidInput, match="budget"):
        dhp.task("x.bad", output_schema={}, budget={"max_attempts": 0})(lambda c, i: None)

    def one(ctx, inputs):
        return {}

    def two(ctx, inputs):
        return {}

    try:
        made = dhp.task("x.twice", output_schema={})(one)
        assert isinstance(made, dhp.Task) and made(None, {}) == {}
        with pytest.raises(dhp.InvalidInput, match="already registered"):
            dhp.task("x.twice", output_schema={})(two)
    finally:
        REGISTRY.pop("x.twice", None)


@pytest.mark.parametrize("target, message", [
    ("no_such_module_here", "cannot import"),
    ("user_tasks:nothing", "has no attribute"),
    ("user_tasks:os", "is not a @dhp.task"),
])
def test_worker_usage_errors_exit_2(tmp_path, monkeypatch, capsys, target, message):
    (tmp_path / "user_tasks.py").write_text(TASKS)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert dhp_main(["worker", target, "--store", str(tmp_path / "s")]) == 2
    finally:
        REGISTRY.pop("count.slow", None)
        sys.modules.pop("user_tasks", None)
    assert message in capsys.readouterr().err


def test_worker_refuses_an_unknown_kind(tmp_path, monkeypatch, capsys):
    (tmp_path / "user_tasks.py").write_text(TASKS)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert dhp_main(["worker", "user_tasks", "--kinds", "count.slow,nope",
                         "--store", str(tmp_path / "s")]) == 2
    finally:
        REGISTRY.pop("count.slow", None)
        sys.modules.pop("user_tasks", None)
    assert "no task of kind 'nope'" in capsys.readouterr().err


def test_dispatch_delay_on_the_command_line(tmp_path, capsys):
    store = str(tmp_path / "s")
    assert dhp_main(["dispatch", "--store", store, "--kind", "k", "--delay", "60"]) == 0
    hid = capsys.readouterr().out.strip()
    assert 59 < dhp.status(dhp.Store(store), hid)["not_before_in"] <= 60
