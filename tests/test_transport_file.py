"""The file transport: one log per handoff in a shared folder, locked atomic appends, torn
tails cut, and an ingest that verifies everything before storing anything (spec: transport,
DHP-TRN-026..029)."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time

import pytest
from dhp import api
from dhp.core import chain
from dhp.core.errors import Conflict, IntegrityError
from dhp.core.logfile import read_log
from dhp.store import Store
from dhp.transport.file import FileShipper, Ingest, ingest_file, ingest_folder, log_name
from transport_helpers import HERE, envelope, records, result_record


def lines_of(path):
    return [(kind, obj) for _, kind, obj in read_log(path)]


def snapshot(store):
    return [(h["handoff_id"], h["state"], [r["hash"] for r in api.checkpoints(
        store, h["handoff_id"])]) for h in api.list_handoffs(store)]


@pytest.mark.covers("DHP-TRN-026", "DHP-TRN-028", "DHP-TRN-029", "DHP-TRN-020")
def test_ship_into_a_folder_and_a_peer_resumes(tmp_path):
    folder = tmp_path / "shared"
    env = envelope("file")
    recs = records(env, 4)
    with FileShipper(folder) as ship:
        ship.ship_envelope(env)
        for r in recs:
            ship.ship_checkpoint(env, r)
    path = folder / (env["handoff_id"][7:] + ".dhp.jsonl")
    assert path == folder / log_name(env["handoff_id"]) and path.is_file()
    assert [k for k, _ in lines_of(path)] == ["header"] + ["checkpoint"] * 4
    assert not [p for p in folder.iterdir() if p != path], "no temporary file left behind"
    peer = Store(tmp_path / "peer")
    report = ingest_folder(peer, folder)
    assert report[path.name]["stored"] == 5
    status = api.status(peer, env["handoff_id"])
    assert status["state"] == "orphaned" and status["fence"] == 1
    with api.recover(peer, env["handoff_id"], "standby") as ctx:
        assert ctx.last_checkpoint == recs[-1]["state"]
        ctx.complete({"n": 4})
    peer.close()


@pytest.mark.covers("DHP-TRN-027", "DHP-TRN-016")
def test_appends_are_idempotent_and_never_fork_the_chain(tmp_path):
    env = envelope("fork")
    recs = records(env, 3)
    a, b = FileShipper(tmp_path), FileShipper(tmp_path)  # two writers, e.g. two processes
    for r in recs[:2]:
        a.ship_checkpoint(env, r)
    b.ship_chain(env, recs)  # the first two are already there: skipped
    a.ship_checkpoint(env, recs[2])  # already written by b
    path = tmp_path / log_name(env["handoff_id"])
    assert [o for k, o in lines_of(path) if k == "checkpoint"] == recs
    other = records(env, 1, fence=2, start=3, prev=recs[1]["hash"])[0]  # a stale fork at seq 3
    with pytest.raises(IntegrityError) as info:
        a.ship_checkpoint(env, other)
    assert info.value.requirement == "DHP-TRN-027"
    gap = records(env, 1, start=5, prev=recs[2]["hash"])[0]
    with pytest.raises(IntegrityError):
        b.ship_checkpoint(env, gap)
    a.ship_result(env, result_record(env, recs[-1]))
    with pytest.raises(Conflict):
        b.ship_checkpoint(env, records(env, 1, start=4, prev=recs[2]["hash"])[0])
    assert len(lines_of(path)) == 5


@pytest.mark.covers("DHP-TRN-027")
def test_a_torn_tail_is_cut_before_the_next_append(tmp_path):
    env = envelope("torn")
    recs = records(env, 3)
    ship = FileShipper(tmp_path)
    ship.ship_checkpoint(env, recs[0])
    path = tmp_path / log_name(env["handoff_id"])
    with open(path, "ab") as f:  # a writer died in the middle of its line
        f.write(json.dumps({"type": "checkpoint", "record": recs[1]}).encode()[:50])
    later = FileShipper(tmp_path)  # another process: it finds the torn tail under the lock
    later.ship_checkpoint(env, recs[1])
    later.ship_checkpoint(env, recs[2])
    assert [o for k, o in lines_of(path) if k == "checkpoint"] == recs
    assert path.read_bytes().endswith(b"\n")


@pytest.mark.covers("DHP-TRN-028")
def test_a_crash_while_creating_the_header_leaves_no_log(tmp_path, monkeypatch):
    env = envelope("hdr")

    def crash(src, dst):
        raise KeyboardInterrupt("killed")

    monkeypatch.setattr(os, "link", crash)
    with pytest.raises(KeyboardInterrupt):
        FileShipper(tmp_path).ship_envelope(env)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.covers("DHP-TRN-027", "DHP-TRN-029")
def test_writers_killed_mid_append_leave_a_valid_log(tmp_path):
    folder = tmp_path / "shared"
    rng = random.Random(3)
    env_path = os.pathsep.join([str(HERE.parent), os.environ.get("PYTHONPATH", "")])
    shipped = 0
    for _ in range(6):
        proc = subprocess.Popen(
            [sys.executable, str(HERE / "file_writer.py"), str(folder), "killed", "400",
             "20000"], stdout=subprocess.PIPE, text=True,
            env=dict(os.environ, PYTHONPATH=env_path))
        deadline = time.monotonic() + 20
        want = rng.randint(2, 30)
        seen = []
        while len(seen) < want and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            seen.append(line)
        time.sleep(rng.uniform(0, 0.01))
        proc.kill()
        proc.wait()
        proc.stdout.close()
        done = [int(x.split()[1]) for x in seen if x.endswith("\n")]
        shipped = max([shipped, *done])
        # whatever the kill interrupted, what the writer reported is in a valid log
        path = folder / log_name(envelope("killed")["handoff_id"])
        found = [o for k, o in lines_of(path) if k == "checkpoint"]
        assert len(found) >= shipped
    peer = Store(tmp_path / "peer")
    report = ingest_folder(peer, folder)
    (entry,) = report.values()
    assert "error" not in entry, entry
    stored = api.checkpoints(peer, envelope("killed")["handoff_id"])
    assert len(stored) >= shipped
    chain.verify_chain(envelope("killed")["handoff_id"], stored)
    peer.close()


def _tamper(path, line_no, change):
    lines = path.read_bytes().split(b"\n")
    obj = json.loads(lines[line_no])
    change(obj)
    lines[line_no] = json.dumps(obj).encode()
    path.write_bytes(b"\n".join(lines))


@pytest.mark.covers("DHP-TRN-029", "DHP-SEC-001", "DHP-LOG-008")
@pytest.mark.parametrize("line_no, change, code", [
    (0, lambda o: o["envelope"]["intent"]["inputs"].update(tag="forged"), "integrity_error"),
    (2, lambda o: o["record"]["state"].update(step=99), "integrity_error"),
    (3, lambda o: o["record"].update(seq=7), "integrity_error"),
    (4, lambda o: o.update(type="nonsense"), "invalid_input"),
])
def test_ingest_rejects_a_tampered_log_and_stores_nothing(tmp_path, line_no, change, code):
    env = envelope("tampered")
    ship = FileShipper(tmp_path / "shared")
    ship.ship_chain(env, records(env, 4))
    path = tmp_path / "shared" / log_name(env["handoff_id"])
    _tamper(path, line_no, change)
    peer = Store(tmp_path / "peer")
    report = ingest_folder(peer, tmp_path / "shared")
    assert report[path.name]["error"]["code"] == code
    assert snapshot(peer) == []
    peer.close()


@pytest.mark.covers("DHP-TRN-029", "DHP-TRN-016", "DHP-TRN-019")
def test_ingest_twice_and_after_a_takeover(tmp_path):
    env = envelope("twice")
    recs = records(env, 3)
    ship = FileShipper(tmp_path / "shared")
    ship.ship_chain(env, recs)
    path = tmp_path / "shared" / log_name(env["handoff_id"])
    peer = Store(tmp_path / "peer")
    ingest = Ingest(peer)
    assert ingest_file(peer, path, ingest)["stored"] == 4
    before = snapshot(peer)
    again = ingest_file(peer, path, ingest)
    assert again["stored"] == 0 and again["duplicates"] == 4 and snapshot(peer) == before
    # a standby here took the handoff over; the first host's later records are refused whole
    with api.recover(peer, env["handoff_id"], "standby") as ctx:
        ship.ship_checkpoint(env, records(env, 1, start=4, prev=recs[-1]["hash"])[0])
        with pytest.raises(Conflict):
            ingest_file(peer, path)
        ctx.release()
    assert snapshot(peer) != before and len(api.checkpoints(peer, env["handoff_id"])) == 3
    peer.close()
