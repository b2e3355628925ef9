"""How the kit judges: no false positives on histories a correct implementation can produce,
findings attributed to the requirement their check was built for, and verdicts that say which
requirements no check judged."""

from __future__ import annotations

import re
import sys

import pytest
from dhp_conform import checkers

H = "sha256:" + "c" * 64
KIND = "conform.chaos"


def _event(i, t, kind, op, process="p", **kw):
    return {"index": i, "time": t, "type": kind, "op": op, "process": process,
            "scenario": "s", **kw}


def _blind_take_history(outcome: dict) -> list[dict]:
    """Replayed from a chaos run of the reference: c1 takes the handoff with claim_next
    (fence 1) and is killed; c2's claim_next takes it (fence 2) but c2 is killed before it
    answers, so no event names the handoff; c3's recover then gets fence 3."""
    dispatch = {"task_kind": KIND, "inputs": {"n": 0}, "output_schema": {}, "budget": {}}
    take = {"task_kinds": [KIND]}
    return [
        _event(0, 0.00, "invoke", "dispatch", "feeder", args=dispatch),
        _event(1, 0.01, "ok", "dispatch", "feeder", invoke=0, data={"handoff_id": H}),
        _event(2, 0.02, "invoke", "claim_next", "c1", args=dict(take, worker="c1.1")),
        _event(3, 0.03, "ok", "claim_next", "c1", invoke=2,
               data={"handoff_id": H, "fence": 1, "last_checkpoint": None}),
        _event(4, 0.10, "kill", None, "c1", detail="SIGKILL c1 (worker c1.1)"),
        _event(5, 1.20, "invoke", "claim_next", "c2", args=dict(take, worker="c2.1")),
        _event(6, 1.21, *outcome["event"], "claim_next", "c2", invoke=5, **outcome["fields"]),
        _event(7, 1.22, "kill", None, "c2", detail="SIGKILL c2 (worker c2.1)"),
        _event(8, 2.50, "invoke", "recover", "c3", args={"handoff_id": H, "worker": "c3.1"}),
        _event(9, 2.51, "ok", "recover", "c3", invoke=8,
               data={"handoff_id": H, "fence": 3, "last_checkpoint": None}),
    ]


KILLED = {"event": ("info",), "fields": {"why": "c2 was killed by the kit (SIGKILL)"}}
INDEFINITE = {"event": ("fail",), "fields": {"error": {
    "code": "internal", "message": "lost", "definite": False}}}
NOTHING = {"event": ("ok",), "fields": {"data": None}}


@pytest.mark.covers("DHP-FEN-001")
@pytest.mark.parametrize("outcome", [KILLED, INDEFINITE], ids=["killed", "indefinite-error"])
def test_a_blind_claim_next_of_unknown_outcome_may_have_bumped_the_fence(outcome):
    assert checkers.check_scenario(_blind_take_history(outcome), ttl=1.0) == []


@pytest.mark.covers("DHP-FEN-001")
def test_a_fence_jump_with_no_take_in_flight_is_still_found():
    findings = checkers.check_scenario(_blind_take_history(NOTHING), ttl=1.0)
    assert [f.check for f in findings] == ["history:fence-step"]
    assert findings[0].requirements[0] == "DHP-FEN-001"
    assert "0 take(s) of unknown outcome" in findings[0].explanation


@pytest.mark.covers("DHP-FEN-001")
def test_a_blind_take_of_another_task_kind_explains_no_jump():
    events = _blind_take_history(KILLED)
    events[5]["args"] = {"task_kinds": ["other.kind"], "worker": "c2.1"}
    assert [f.check for f in checkers.check_scenario(events, ttl=1.0)] == ["history:fence-step"]


# --- attribution: findings, consequences, checks that could not run ---------------------------

def _run(tmp_path):
    from dhp_conform.harness import Harness
    from dhp_conform.suites.base import Run

    return Run(Harness(f"{sys.executable} -m dhp.adapter", tmp_path), seed=1, quick=True)


def _results(run, check_fn, requirements):
    from dhp_conform import report
    from dhp_conform.suites.base import Check, run_check

    check = Check("judge", "planted", requirements, check_fn)
    run.order[check.id] = 0
    run_check(run, check)
    return report.finalize(run.results)


def test_later_failures_of_a_check_are_consequences_of_its_first(tmp_path):
    def planted(ctx):
        ctx.record("DHP-FEN-003", False, "a stale write was accepted")
        ctx.record("DHP-STM-004", False, "the count is off, since the stale write landed")
        ctx.record("DHP-FEN-003", True)

    results, findings = _results(_run(tmp_path), planted, ["DHP-FEN-003"])
    assert [(f["requirement"], f["check"]) for f in findings] == [("DHP-FEN-003",
                                                                    "judge:planted")]
    after = next(r for r in results if r["requirement"] == "DHP-STM-004")
    assert after["status"] == "CONSEQUENCE"
    assert after["consequence_of"] == "DHP-FEN-003 (judge:planted)"
    assert after["reason"].startswith("consequence of DHP-FEN-003 (judge:planted): ")


def test_an_aborted_check_does_not_fail_what_it_could_not_judge(tmp_path):
    from dhp_conform.suites.base import CheckAborted

    def planted(ctx):
        ctx.record("DHP-FEN-001", True)
        raise CheckAborted("claim after expiry failed (timeout), a step the check depends on")

    results, findings = _results(_run(tmp_path), planted,
                                 ["DHP-FEN-001", "DHP-FEN-003", "DHP-FEN-004"])
    assert findings == []
    by = {r["requirement"]: r for r in results}
    assert by["DHP-FEN-001"]["status"] == "PASS"
    for rid in ("DHP-FEN-003", "DHP-FEN-004"):
        assert by[rid]["status"] == "NOT_RUN"
        assert by[rid]["reason"].startswith("could not run: claim after expiry failed")


def test_back_on_track_judges_what_follows_afresh(tmp_path):
    def planted(ctx):
        ctx.record("DHP-LSE-003", False, "claim after expiry refused")
        ctx.back_on_track()  # taken over another way; judged at once, before any request
        ctx.record("DHP-FEN-001", False, "the takeover got fence 3, not 2")

    results, findings = _results(_run(tmp_path), planted, ["DHP-LSE-003", "DHP-FEN-001"])
    assert [f["requirement"] for f in findings] == ["DHP-LSE-003", "DHP-FEN-001"]
    assert all(r["status"] == "FAIL" for r in results)


# --- verdicts: every requirement judged, or said which are not ----------------------------------

@pytest.mark.covers("DHP-GEN-002")
def test_a_class_with_an_unjudged_must_is_incomplete_and_lists_it():
    from dhp_conform import report
    from dhp_conform.requirements import all_ids, level, member_of

    sup = [rid for rid in all_ids() if member_of(rid) == "supervisor"]
    must = [rid for rid in sup if level(rid) == "MUST"]
    raw = [{"requirement": rid, "check": "c", "status": "PASS"} for rid in sup]
    results, _ = report.finalize(raw)
    assert report.verdicts(results, ["supervisor"], False)["supervisor"]["verdict"] == "PASS"
    missing = must[-1]
    raw = [r for r in raw if r["requirement"] != missing]
    raw.append({"requirement": missing, "check": "c", "status": "NOT_RUN",
                "reason": "could not run: a step failed"})
    results, _ = report.finalize(raw)
    verdict = report.verdicts(results, ["supervisor"], False)["supervisor"]
    assert verdict["verdict"] == "INCOMPLETE" and missing in verdict["unjudged"]
    assert report.exit_code({"verdicts": {"supervisor": verdict}}) == 3


def test_requirements_no_run_can_judge_are_listed_not_blocking():
    from dhp_conform import report
    from dhp_conform.requirements import BEYOND_A_RUN, all_ids, member_of

    store = [rid for rid in all_ids() if member_of(rid) == "store"]
    raw = [{"requirement": rid, "check": "c", "status": "PASS"} for rid in store
           if rid not in BEYOND_A_RUN]
    verdict = report.verdicts(report.finalize(raw)[0], ["store"], False)["store"]
    assert verdict["verdict"] == "PASS" and verdict["unjudged"] == []
    assert set(verdict["beyond_a_run"]) == {r for r in BEYOND_A_RUN if r in store}


# --- runs that can be trusted --------------------------------------------------------------------

def test_history_folder_of_an_earlier_run_is_cleared_a_foreign_one_refused(tmp_path):
    from dhp_conform import rundir

    folder = tmp_path / "run"
    (folder / "data" / "001-old").mkdir(parents=True)
    (folder / "history.jsonl").write_text("{}\n")
    assert rundir.prepare(folder, "x-") == (folder, True)
    assert list(folder.iterdir()) == []
    (folder / "notes.txt").write_text("mine")
    with pytest.raises(rundir.RunDirError, match="notes.txt"):
        rundir.prepare(folder, "x-")
    assert (folder / "notes.txt").read_text() == "mine"


ECHO = """
import json, sys
for line in sys.stdin:
    request = json.loads(line)
    print(json.dumps({"id": request["id"], "ok": True, "data": {}}), flush=True)
"""


def test_a_killed_incarnation_never_fails_its_successors_requests(tmp_path):
    """The reader of a killed incarnation that notices its end late must not settle the
    requests of the incarnation that replaced it (they would read "not running (exit -9)")."""
    from dhp_conform.process import AdapterProcess, ProcessDied

    proc = AdapterProcess("echo", [sys.executable, "-c", ECHO], tmp_path / "err.log")
    proc.start()
    try:
        old = proc.proc
        proc.kill()
        proc.start()
        pending = proc.send("status", {})
        proc._fail_all(ProcessDied("the old incarnation ended"), of=old)  # the late reader
        assert pending.wait(10) == {"id": pending.id, "ok": True, "data": {}}
    finally:
        proc.close()




@pytest.mark.covers("DHP-LSE-003", "DHP-STM-007")
def test_chaos_takes_work_by_name_without_claim_next(tmp_path):
    """A path the implementation does not offer (claim_next) is replaced by one it does
    (claim or recover by id), so the workload still runs and its checks still judge."""
    import subprocess

    from test_conform import CLAIMS_LESS

    proc = subprocess.run([sys.executable, "-m", "dhp_conform.chaos_cli", "--impl",
                           f"{CLAIMS_LESS} claim_next liveness", "--seconds", "3", "--seed", "5",
                           "--workers", "3", "--handoffs", "4"],
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    done = re.search(r"(\d+) handoffs \((\d+) completed\)", proc.stdout)
    assert done and done.group(1) == done.group(2) and int(done.group(1)) >= 4, proc.stdout


def test_a_request_the_kit_paused_is_not_an_adapter_error(tmp_path):
    """A process paused (and resumed) while a request was in flight may miss the timeout:
    that silence is the kit's doing, not a broken adapter (seen in a chaos soak: a restarted
    adapter paused three times during its hello)."""
    from types import SimpleNamespace

    harness = _run(tmp_path).harness
    sc = harness.scenario("paused", ttl=1.0)
    proc = SimpleNamespace(name="c4", worker="c4.2", incarnation=2)
    hello = harness.history.add("invoke", scenario=sc.name, process="c4", op="hello", args={})
    assert not sc.expect_silence(proc, hello)
    sc.fault("stop", proc)
    sc.stopped.discard("c4")  # resumed since, as the waker does
    assert sc.expect_silence(proc, hello)
    later = harness.history.add("invoke", scenario=sc.name, process="c4", op="status", args={})
    assert not sc.expect_silence(proc, later)


@pytest.mark.covers("DHP-LOG-003")
def test_a_frozen_writers_late_acknowledgement_is_no_log_order_problem():
    """c1 commits step 1 and is frozen before it answers; c2 takes over, writes step 2 and is
    acknowledged; then c1 thaws and its answer arrives. The log rightly holds step 1 first."""
    from dhp_conform.suites.chaos import log_order
    one, two = {"step": 1, "by": "c1"}, {"step": 2, "by": "c2"}
    acked = [(5, 9, two), (1, 12, one)]  # in acknowledgement order: c2's ok came first
    assert log_order(acked, [one, two]) == ([], [], {0: 1, 1: 0})


@pytest.mark.covers("DHP-LOG-003", "DHP-CKP-009")
def test_a_log_out_of_real_time_order_or_lacking_a_checkpoint_is_found():
    from dhp_conform.suites.chaos import log_order
    one, two, three = ({"step": i} for i in (1, 2, 3))
    acked = [(0, 1, one), (2, 3, two), (4, 5, three)]  # one after another
    missing, inverted, _ = log_order(acked, [two, one, three])
    assert missing == [] and inverted == [(0, 1)]
    missing, inverted, _ = log_order(acked, [one, three])
    assert missing == [two] and inverted == []


def _frozen_taker_history(late_fence: int, late_start: float) -> list[dict]:
    """c1 claims (fence 1) and is killed; c5's recover commits fence 2 but c5 is frozen
    (SIGSTOP) before it answers; c5's lease expires and c4 recovers with fence 3, answered
    before c5 thaws and answers. Then c6 recovers, invoked at `late_start`, and is granted
    `late_fence`."""
    dispatch = {"task_kind": KIND, "inputs": {"n": 0}, "output_schema": {}, "budget": {}}

    def recover(i, t0, t1, proc, fence):
        return [_event(i, t0, "invoke", "recover", proc,
                       args={"handoff_id": H, "worker": f"{proc}.1", "ttl": 1.0}),
                _event(i + 1, t1, "ok", "recover", proc, invoke=i,
                       data={"handoff_id": H, "fence": fence, "last_checkpoint": None})]
    return [
        _event(0, 0.00, "invoke", "dispatch", "feeder", args=dispatch),
        _event(1, 0.01, "ok", "dispatch", "feeder", invoke=0, data={"handoff_id": H}),
        _event(2, 0.02, "invoke", "claim", "c1", args={"handoff_id": H, "worker": "c1.1",
                                                        "ttl": 1.0}),
        _event(3, 0.03, "ok", "claim", "c1", invoke=2,
               data={"handoff_id": H, "fence": 1, "last_checkpoint": None}),
        _event(4, 0.10, "kill", None, "c1", detail="SIGKILL c1"),
        _event(5, 1.20, "invoke", "recover", "c5",
               args={"handoff_id": H, "worker": "c5.1", "ttl": 1.0}),
        _event(6, 1.25, "stop", None, "c5", detail="SIGSTOP c5"),
        *recover(7, 2.50, 2.51, "c4", 3),
        _event(9, 3.00, "cont", None, "c5", detail="SIGCONT c5"),
        _event(10, 3.01, "ok", "recover", "c5", invoke=5,
               data={"handoff_id": H, "fence": 2, "last_checkpoint": None}),
        _event(11, late_start - 0.5, "kill", None, "c4", detail="SIGKILL c4"),
        *recover(12, late_start, late_start + 0.01, "c6", late_fence),
    ]


@pytest.mark.covers("DHP-FEN-001", "DHP-FEN-002")
def test_a_frozen_takers_late_answer_is_no_fence_going_backwards():
    assert checkers.check_scenario(_frozen_taker_history(4, 5.0), ttl=1.0) == []


@pytest.mark.covers("DHP-FEN-002")
def test_a_lower_fence_granted_after_a_higher_one_was_answered_is_found():
    findings = checkers.check_scenario(_frozen_taker_history(1, 5.0), ttl=1.0)
    assert "history:fence-monotonic" in [f.check for f in findings], findings
    assert all("DHP-FEN-002" in f.requirements for f in findings
               if f.check == "history:fence-monotonic")


@pytest.mark.covers("DHP-FEN-002", "DHP-FEN-005")
def test_a_fence_handed_out_again_after_a_release_is_no_second_live_owner():
    """Replayed from dhp-protocol 1.3.0 (fencing:stale-fence): p2 recovers with fence 2,
    releases, and its next claim gets fence 0 again. The fences went backwards; the fence-0
    lease began after the fence-2 take, so nobody took a live lease from anybody."""
    dispatch = {"task_kind": KIND, "inputs": {"n": 0}, "output_schema": {}, "budget": {}}
    args = {"handoff_id": H, "worker": "p2.1"}
    events = [
        _event(0, 0.00, "invoke", "dispatch", "p1", args=dispatch),
        _event(1, 0.01, "ok", "dispatch", "p1", invoke=0, data={"handoff_id": H}),
        _event(2, 1.00, "invoke", "recover", "p2", args=dict(args, ttl=30.0)),
        _event(3, 1.01, "ok", "recover", "p2", invoke=2,
               data={"handoff_id": H, "fence": 2, "last_checkpoint": None}),
        _event(4, 1.02, "invoke", "release", "p2", args=dict(args, fence=2)),
        _event(5, 1.03, "ok", "release", "p2", invoke=4, data={}),
        _event(6, 1.04, "invoke", "claim", "p2", args=args),
        _event(7, 1.05, "ok", "claim", "p2", invoke=6,
               data={"handoff_id": H, "fence": 0, "last_checkpoint": None}),
    ]
    checks = [f.check for f in checkers.check_scenario(events, ttl=0.5)]
    assert "history:fence-monotonic" in checks, checks
    assert "history:one-live-owner" not in checks, checks
