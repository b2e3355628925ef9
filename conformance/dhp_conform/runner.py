"""One conformance run: probe the adapter, run the selected checks, run the history checkers
over every scenario, and assemble the report."""

from __future__ import annotations

import random
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from . import checkers, mcp_http, oracle, report
from .harness import Harness
from .manifest import Impl, resolve
from .process import AdapterError
from .requirements import selected
from .suites import SUITES, mcp_net
from .suites import mcp as mcp_suite
from .suites.base import Run, run_check

PARALLEL = 3  # checks run side by side when they judge no real time
ALONE = ("concurrency", "chaos")  # suites whose own load is the point
ALONE_CHECKS = ("mcp:soak-kill9",)

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
        timeout: float = 10.0, profile: str = "adapter", agent_timeout: float = 8.0,
        progress: Callable[[int, int, str], None] | None = None) -> Outcome:
    """`profile` "mcp": `impl` is an MCP server command template (spec/mcp.md), driven through
    `dhp_conform.mcp_bridge` agents and the mcp suite's own client sessions; with `{port}` in
    it, over streamable HTTP, one server per scenario (mcp_http), whose agent timeout
    (DHP-MCP-020) is `agent_timeout`.
    `progress(done, total, label)` is called as each check ends."""
    seed = seed if seed is not None else random.randrange(2**31)
    started = report.now()
    template = None
    if profile == "mcp":
        impl, template = mcp_impl(impl)
    harness = Harness(impl, workdir, timeout=timeout)
    harness.mcp_template = template
    if template is not None:
        harness.mcp_servers = mcp_http.Servers(template, agent_timeout=agent_timeout,
                                               timeout=timeout, env=impl.env, cwd=impl.cwd)
    state = Run(harness, seed, quick)
    probe = None
    try:
        probe = harness.scenario("probe", ttl=5.0)
        probe.spawn("probe")
        probe.close()
    except AdapterError as exc:
        if probe is not None:
            probe.close()
        harness.adapter_errors.append(f"the adapter did not start: {exc}")
        rep = report.build([], harness.hello, seed, started, incomplete=True)
        return Outcome(rep, 2, harness.adapter_errors, harness.history.save(workdir))
    features = set(harness.hello.get("features", []))
    chosen = []
    for check in _candidates(profile, suites):
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
        state.order[check.id] = len(state.order)
    # Checks that judge no real time run side by side; the rest run alone afterwards, so
    # that no other check's load shifts their lease timings.
    calm = [c for c in chosen
            if not c.timing and c.suite not in ALONE and c.id not in ALONE_CHECKS]
    done = [0]
    done_lock = threading.Lock()

    def one(check) -> None:
        _run_one(state, check)
        with done_lock:
            done[0] += 1
            if progress is not None:
                progress(done[0], len(chosen), f"{check.suite}: {check.id}")

    with ThreadPoolExecutor(PARALLEL) as pool:
        list(pool.map(one, calm))
    for check in chosen:
        if check not in calm:
            one(check)
    _history_results(state)
    results, findings = report.finalize([r for r in state.results
                                         if selected(r["requirement"], only)])
    scope = None  # a run narrowed to some suites answers for what their checks are built for
    if suites:
        scope = {rid for c in chosen for rid in c.requirements}
        scope |= {rid for rids in HISTORY_CHECKS.values() for rid in rids}
    rep = report.build(results, harness.hello, seed, started,
                       incomplete=bool(harness.adapter_errors), notes=harness.notes, only=only,
                       findings=findings, scope=scope)
    problems = oracle.schema_errors("report", rep)
    if problems:
        harness.adapter_errors.append(f"kit bug: the report is not valid against "
                                      f"schemas/report.json: {problems[:3]}")
    harness.adapter_errors[:] = list(dict.fromkeys(harness.adapter_errors))
    code = 2 if harness.adapter_errors else report.exit_code(rep)
    return Outcome(rep, code, harness.adapter_errors, harness.history.save(workdir))


def mcp_impl(impl: str | Impl) -> tuple[Impl, list[str]]:
    """The bridge agent's command for an MCP server command template."""
    server = impl if isinstance(impl, Impl) else resolve(impl)
    bridge = [sys.executable, "-m", "dhp_conform.mcp_bridge", "--", *server.argv]
    return Impl(bridge, server.env, server.cwd), server.argv


def _candidates(profile: str, suites: list[str] | None) -> list:
    if profile == "mcp":
        wanted = [c for name in SUITES if name != "mcp" for c in SUITES[name].CHECKS
                  if c.id in mcp_suite.PROFILE] + list(mcp_suite.CHECKS) + list(mcp_net.CHECKS)
        return [c for c in wanted if not suites or c.suite in suites]
    return [c for name in suites or [s for s in SUITES if s != "mcp"]
            for c in SUITES[name].CHECKS]


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
        check = sc.facts.get("check", sc.name)
        for f in checkers.check_scenario(sc.events(), sc.ttl, timed=sc.clock == "system"):
            # A history checker's first violation is its finding, of the first requirement it
            # names; the others it names, and its later violations (the same bug seen again in
            # other scenarios), follow from it. They never make a check's own judgements
            # consequences: those are the check's.
            at = max(e["index"] for e in f.events) + 1
            for rank, rid in enumerate(f.requirements, 1):
                failed.add((rid, f.check))
                state.results.append({"requirement": rid, "check": f.check, "status": "FAIL",
                                      "reason": f"{f.explanation} (scenario {sc.name})",
                                      "evidence": f.evidence(), "_at": at, "_rank": rank,
                                      "_origin": f.check, "_order": state.order.get(check, 0)})
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
