"""Issue 24, point 10: `dhp migrate --from-dhp-protocol` carries the work of a store made by
dhp-protocol 1.3.0 (in its own venv, tools/orig_venv.sh; skipped, saying so, without it)
over to a DHP store, where a worker finishes it."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import time

import pytest
from dhp import api
from dhp.cli.main import main as dhp_main
from dhp.migrate import migrate
from test_orig_adapter import orig_python

# Four handoffs made by 1.3.0's own SDK: pending, running with three checkpoints (its
# worker gone), completed, and failed (a result its schema refused).
MAKE_13 = """
import sys, dhp
s = dhp.Store(sys.argv[1])
schema = {"type": "object", "required": ["pages"]}
dhp.dispatch(s, "pages", {"n": 1}, schema)
ctx = dhp.claim(s, dhp.dispatch(s, "pages", {"n": 2}, schema), "w1")
for page in (1, 2, 3):
    ctx.checkpoint({"page": page})
ctx = dhp.claim(s, dhp.dispatch(s, "pages", {"n": 3}, schema), "w1")
ctx.checkpoint({"page": 1})
ctx.complete({"pages": 3})
ctx = dhp.claim(s, dhp.dispatch(s, "pages", {"n": 4}, schema), "w1")
try:
    ctx.complete({"x": 1})
except Exception:
    pass
"""


# The DHP side: a task that resumes from the last checkpoint and says where it started.
WORKER_TASKS = """
import dhp

@dhp.task("pages", output_schema={"type": "object", "required": ["pages"]})
def pages(ctx, inputs):
    start = (ctx.last_checkpoint or {"page": 0})["page"]
    return {"pages": inputs["n"], "resumed_at": start}
"""


@pytest.fixture
def old_store(tmp_path):
    root = tmp_path / "old"
    done = subprocess.run([str(orig_python()), "-c", MAKE_13, str(root)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return root


def _by_status(items):
    return {i.status: i for i in items}


def test_a_13_store_is_carried_over_once_and_its_work_finished(old_store, tmp_path, capsys):
    store = api.Store(tmp_path / "new")
    planned = migrate(store, old_store, dry_run=True)
    assert api.list_handoffs(store) == []  # a dry run stores nothing
    items = _by_status(migrate(store, old_store))
    assert [i.handoff_id for i in planned] == [i.handoff_id for i in items.values()]
    assert {s: (i.action, i.state, i.checkpoints, i.result) for s, i in items.items()} == {
        "pending": ("carry", "pending", 0, False),
        "running": ("carry", "orphaned", 3, False),
        "completed": ("carry", "completed", 1, True),
        "failed": ("skip", "pending", 0, False)}
    assert any("lease of w1" in n for n in items["running"].notes)
    assert api.result(store, items["completed"].handoff_id) == {"pages": 3}
    assert api.check_integrity(store) == []
    before = [(r["handoff_id"], r["state"]) for r in api.list_handoffs(store)]

    # Idempotent: the second run (here through the command line) changes nothing.
    assert dhp_main(["migrate", "--from-dhp-protocol", str(old_store), "--store",
                     str(tmp_path / "new"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["counts"] == {"carry": 0, "already": 3, "skip": 1, "error": 0}
    assert [(r["handoff_id"], r["state"]) for r in api.list_handoffs(store)] == before

    # The work resumes where 1.3 left it and `dhp worker` finishes it.
    store.close()
    (tmp_path / "pages_tasks.py").write_text(WORKER_TASKS)
    worker = subprocess.Popen([sys.executable, "-m", "dhp.cli.main", "worker", "pages_tasks",
                               "--store", str(tmp_path / "new")], cwd=tmp_path,
                              stderr=subprocess.PIPE, text=True)
    try:
        store = api.Store(tmp_path / "new")
        wanted = [items["running"].handoff_id, items["pending"].handoff_id]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and any(
                api.status(store, h)["state"] != "completed" for h in wanted):
            time.sleep(0.1)
        assert api.result(store, items["running"].handoff_id) == {"pages": 2, "resumed_at": 3}
        assert api.result(store, items["pending"].handoff_id) == {"pages": 1, "resumed_at": 0}
        store.close()
    finally:
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(60) == 0, worker.stderr.read()


def test_a_changed_13_checkpoint_is_refused_and_nothing_of_it_stored(old_store, tmp_path):
    with sqlite3.connect(old_store / "dhp.sqlite3") as conn:
        conn.execute("UPDATE checkpoints SET state_json = '{\"page\": 9}' WHERE seq = 2")
    store = api.Store(tmp_path / "new")
    items = _by_status(migrate(store, old_store, include_failed=True))
    assert items["running"].action == "error"
    assert "state_hash" in items["running"].notes[-1]
    assert items["failed"].action == "carry"  # carried as work to run again
    held = {r["handoff_id"] for r in api.list_handoffs(store)}
    assert items["running"].handoff_id not in held and items["failed"].handoff_id in held
    store.close()


def test_a_folder_without_a_13_store_is_refused(tmp_path):
    assert dhp_main(["migrate", "--from-dhp-protocol", str(tmp_path), "--store",
                     str(tmp_path / "new")]) == 2
