"""One conformance run: probe the adapter, run the selected checks, run the history checkers
over every scenario, and assemble the report."""

from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from . import checkers, oracle, report
from .harness import Harness
from .manifest import Impl
from .process import AdapterError
from .requirements import selected
from .suites import SUITES
from .suites.base import Run, run_check

PARALLEL = 3  # checks run side by side when they judge no real time
ALONE = ("concurrency", "chaos")  # suites whose own load is the point

# The history checkers and the requirements each can fail; one PASS each when none fails.
HISTORY_CHECKS = {
    "history:one-owner-per-fence": ["DHP-FEN-005", "DHP-FEN-002"],
    "history:fence-step": ["DHP-FEN-001"],
    "history:one-live-owner": ["DHP-FEN-005", "DHP-STM-007"],
    "history:no-stale-write": ["DHP-FEN-003", "DHP-FEN-004"],
    "history:checkpoint-durable": ["DHP-CKP-009", "DHP-CKP-010"],
    "history:rejected-write-changed-nothing": ["DHP-FEN-004", "DHP-STM-003"],
    "history:checkpoint-record": ["DHP-CKP-001", "DHP-CKP-003", "DHP-CKP-004", "DHP-CKP-005",
                                  "DHP-CKP-006", "DHP-CKP-007"],
    "history:exactly-one-completion": ["DHP-RES-003"],
    "history:result-valid": ["DHP-RES-001"],
    "history:result-durable": ["DHP-RES-004"],
    "history:budget": ["DHP-BUD-001", "DHP-BUD-002", "DHP-BUD-003"],
    "history:terminal": ["DHP-STM-004"],
}


@dataclass
class Outcome:
    report: dict
    exit_code: int
    adapter_errors: list[str] = field(default_factory=list)
    history: Path | None = None


def run(impl: str | Impl, workdir: Path, *, seed: int | None = None, quick: bool = False,
        only: list[str] | None = None, suites: list[str] | None = None,
        timeout: float = 10.0) -> Outcome:
    seed = seed if seed is not None else random.randrange(2**31)
    started = report.now()
    harness = Harness(impl, workdir, timeout=timeout)
    state = Run(harness, seed, quick)
    try:
        probe = harness.scenario("probe", ttl=5.0)
        probe.spawn("probe")
        probe.close()
    except AdapterError as exc:
        harness.adapter_errors.append(f"the adapter did not start: {exc}")
        rep = report.build([], harness.hello, seed, started, incomplete=True)
        return Outcome(rep, 2, harness.adapter_errors, harness.history.save(workdir))
    features = set(harness.hello.get("features", []))
    chosen = []
    for name in suites or list(SUITES):
        for check in SUITES[name].CHECKS:
            if not any(selected(r, only) for r in check.requirements):
                continue
            missing = [f for f in check.features if f not in features]
            if missing:
                for rid in check.requirements:
                    state.results.append({"requirement": rid, "check": check.id,
                                          "status": "SKIP", "reason": f"the implementation "
                                          f"does not claim the feature {', '.join(missing)}",
                                          **({"class": check.cls} if check.cls else {})})
                continue
            chosen.append(check)
    # Checks that judge no real time run side by side; the rest run alone afterwards, so
    # that no other check's load shifts their lease timings.
    calm = [c for c in chosen if not c.timing and c.suite not in ALONE]
    with ThreadPoolExecutor(PARALLEL) as pool:
        list(pool.map(lambda c: _run_one(state, c), calm))
    for check in chosen:
        if check not in calm:
            _run_one(state, check)
    _history_results(state)
    results = report.finalize([r for r in state.results if selected(r["requirement"], only)])
    rep = report.build(results, harness.hello, seed, started,
                       incomplete=bool(harness.adapter_errors), notes=harness.notes)
    problems = oracle.schema_errors("report", rep)
    if problems:
        harness.adapter_errors.append(f"kit bug: the report is not valid against "
                                      f"schemas/report.json: {problems[:3]}")
    harness.adapter_errors[:] = list(dict.fromkeys(harness.adapter_errors))
    failed = any(r["status"] == "FAIL" for r in results)
    code = 2 if harness.adapter_errors else (1 if failed else 0)
    return Outcome(rep, code, harness.adapter_errors, harness.history.save(workdir))


def _run_one(state: Run, check) -> None:
    try:
        run_check(state, check)
    except AdapterError as exc:
        state.harness.adapter_errors.append(f"{check.id}: {exc}")


def _history_results(state: Run) -> None:
    failed: set[tuple[str, str]] = set()
    for sc in state.scenarios:
        if sc.facts.get("ingested"):  # chains that came over the transport, not by requests
            continue
        for f in checkers.check_scenario(sc.events(), sc.ttl, timed=sc.clock == "system"):
            for rid in f.requirements:
                failed.add((rid, f.check))
                state.results.append({"requirement": rid, "check": f.check, "status": "FAIL",
                                      "reason": f"{f.explanation} (scenario {sc.name})",
                                      "evidence": f.evidence()})
    for check, rids in HISTORY_CHECKS.items():
        for rid in rids:
            if (rid, check) not in failed:
                state.results.append({"requirement": rid, "check": check, "status": "PASS"})
    wire = state.harness.wire_findings
    events = state.harness.history.events
    for w in wire:
        state.results.append({
            "requirement": w["requirement"], "check": "wire:response-shape", "status": "FAIL",
            "reason": f"a response is not valid against the adapter schemas: {w['problems']}",
            "evidence": [repr(w["response"])] + [str(events[i]) for i in w["events"]]})
    for rid in ("DHP-ERR-001", "DHP-ERR-002", "DHP-ERR-003"):
        if not any(w["requirement"] == rid for w in wire):
            state.results.append({"requirement": rid, "check": "wire:response-shape",
                                  "status": "PASS"})
