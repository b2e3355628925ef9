"""`dhp-conform`: run the conformance kit against an implementation's adapter.

Progress (suite, checks done of all, elapsed) goes to stderr: a bar on a terminal, plain
lines otherwise; the seed comes first, so a run that is cut short can still be repeated.

Exit status: 0 every claimed class PASS, 1 a class FAIL (not conformant), 2 adapter or
harness error (not judged), 3 a class INCOMPLETE (a MUST of it judged by no check).
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
from pathlib import Path

from . import __version__, coverage, mcp_http, report, rundir, runner
from .harness import Harness
from .manifest import Impl, ManifestError, add_arguments, resolve
from .mcp_client import sdk_missing
from .process import AdapterError
from .progress import Progress
from .suites import SUITES

MCP_TIMEOUT = 60.0

EPILOG = """examples:
  dhp-conform --impl 'python -m dhp.adapter' --quick
  dhp-conform smoke --impl 'python -m dhp.adapter'
  dhp-conform --impl @adapter.json --seed 42 --report report.json --junit junit.xml
  dhp-conform --impl ./my-adapter --only 'DHP-FEN-*'

exit codes:
  0  conformant: every selected check passed
  1  not conformant: a check failed (the summary names the requirement)
  2  usage error, adapter command not found, or the adapter or harness broke (not judged)"""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="dhp-conform", description=__doc__, epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version",
                   version=f"dhp-conform {__version__} (DHP/1.0)")
    p.add_argument("mode", nargs="?", choices=["run", "smoke", "coverage"], default="run",
                   help="run (default): the conformance run; smoke: check the wiring only; "
                   "coverage: which kit checks judge each requirement, and the gaps (needs no "
                   "implementation; --report writes it as JSON)")
    add_arguments(p)
    p.add_argument("--profile", choices=["adapter", "mcp"], default="adapter",
                   help="adapter (default): --impl is a conformance adapter; mcp: --impl is an "
                        "MCP server command with {data} and {ttl} placeholders, e.g. 'dhp-mcp "
                        "--root {data} --create --ttl {ttl}', certified through MCP client "
                        "sessions "
                        "(needs the mcp SDK; --timeout defaults to 60 then). With {port} in the "
                        "command, over streamable HTTP: one server per scenario on a free port "
                        "the kit picks, e.g. 'dhp-mcp --root {data} --create --ttl {ttl} --http "
                        "{host}:{port} --agent-timeout {agent_timeout}' (docs/agents/mcp.md "
                        "lists every placeholder)")
    p.add_argument("--agent-timeout", type=float, default=8.0, metavar="SECONDS",
                   help="the MCP server's agent timeout over HTTP (DHP-MCP-020; default 8, the "
                        "spec allows at most 10): filled into {agent_timeout}, and the bound "
                        "the kit judges a client without an event stream by")
    p.add_argument("--quick", action="store_true", help="fewer processes, rounds and faults")
    p.add_argument("--only", action="append", metavar="PATTERN",
                   help="only requirements matching this glob, e.g. 'DHP-FEN-*' (repeatable)")
    p.add_argument("--suite", action="append", choices=sorted(SUITES),
                   help="only this suite (repeatable)")
    p.add_argument("--strict", action="store_true",
                   help="a SHOULD-level finding (WARN) fails the run too (exit status 1)")
    p.add_argument("--report", type=Path, help="write the JSON report here")
    p.add_argument("--junit", type=Path, help="write JUnit XML here")
    p.add_argument("--history", type=Path,
                   help="keep the run folder (history, stderr of every process, data) here; "
                        "a folder of an earlier run is cleared first")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.mode == "coverage":
        rows = coverage.table()
        print(coverage.render(rows))
        if args.report:
            args.report.write_text(json.dumps({"summary": coverage.summary(rows),
                                               "requirements": rows}, indent=1) + "\n",
                                   encoding="utf-8")
        return 0
    try:
        impl = resolve(args.impl, args.manifest)
    except ManifestError as exc:
        print(f"dhp-conform: {exc}", file=sys.stderr)
        return 2
    try:
        workdir, keep = rundir.prepare(args.history, "dhp-conform-")
    except rundir.RunDirError as exc:
        print(f"dhp-conform: {exc}", file=sys.stderr)
        return 2
    timeout, template = args.timeout, None
    if args.profile == "mcp":
        missing = sdk_missing()
        if missing:
            print(f"dhp-conform: {missing}", file=sys.stderr)
            return 2
        timeout = max(timeout, MCP_TIMEOUT)  # a server and an SDK client start per agent
        if args.mode == "smoke":
            impl, template = runner.mcp_impl(impl)
    if args.mode == "smoke":
        code = smoke(impl, workdir, timeout, template, args.agent_timeout)
        if code == 0 and not keep:
            shutil.rmtree(workdir, ignore_errors=True)
        elif code:
            print(f"process logs kept in {workdir}")
        return code
    seed = args.seed if args.seed is not None else random.randrange(2**31)
    progress = Progress("dhp-conform")
    progress.say(f"{impl.describe()}, seed {seed} (repeat with --seed {seed})")
    try:
        outcome = runner.run(impl, workdir, seed=seed, quick=args.quick, only=args.only,
                             suites=args.suite, timeout=timeout, profile=args.profile,
                             agent_timeout=args.agent_timeout, progress=progress.step)
    finally:
        progress.close()
    print(report.summary(outcome.report, outcome.adapter_errors))
    if args.report:
        report.write_json(outcome.report, args.report)
    if args.junit:
        report.write_junit(outcome.report, args.junit)
    if args.strict and not outcome.exit_code \
            and any(r["status"] == "WARN" for r in outcome.report["results"]):
        print("--strict: a SHOULD-level requirement is not met (WARN)")
        outcome.exit_code = 1
    if outcome.exit_code:
        what = {1: "not conformant", 2: "not judged", 3: "incomplete"}[outcome.exit_code]
        print(f"{what}: rerun with --seed {outcome.report['seed']}; "
              f"history and process logs kept in {workdir}")
    elif not keep:
        shutil.rmtree(workdir, ignore_errors=True)
    return outcome.exit_code


def smoke(impl: str | Impl, workdir: Path, timeout: float, template: list[str] | None = None,
          agent_timeout: float = 8.0) -> int:
    """Check the wiring: start, hello, init, and one handoff from dispatch to result.
    `template`: the MCP profile's server command, which `impl` (the bridge) reaches."""
    harness = Harness(impl, workdir, timeout=timeout)
    if template is not None:
        harness.mcp_servers = mcp_http.Servers(template, agent_timeout=agent_timeout,
                                               timeout=timeout, env=harness.impl.env,
                                               cwd=harness.impl.cwd)
    try:
        sc = harness.scenario("smoke", ttl=5.0)
    except AdapterError as exc:
        print(f"FAIL start of the MCP server: {exc}")
        return 2
    try:
        p = sc.spawn("p1")
    except AdapterError as exc:
        sc.close()
        print(f"FAIL start/hello/init: {exc}")
        return 2
    impl_info = harness.hello["implementation"]
    print(f"ok   hello: {impl_info['name']} {impl_info['version']} ({impl_info['language']}), "
          f"classes {harness.hello['classes']}, features {harness.hello['features']}")
    ok = True
    schema = {"type": "object"}
    reply = p.call("dispatch", {"task_kind": "smoke", "inputs": {}, "output_schema": schema})
    steps = [("dispatch", reply)]
    if reply.ok:
        hid = reply.data["handoff_id"]
        take = p.call("claim", {"handoff_id": hid, "worker": p.worker})
        steps.append(("claim", take))
        fence = take.data["fence"] if take.ok else 1
        base = {"handoff_id": hid, "worker": p.worker, "fence": fence}
        steps.append(("checkpoint", p.call("checkpoint", dict(base, state={"n": 1}))))
        steps.append(("complete", p.call("complete", dict(base, result={"n": 1}))))
        steps.append(("result", p.call("result", {"handoff_id": hid})))
        steps.append(("status", p.call("status", {"handoff_id": hid})))
    for name, r in steps:
        ok = ok and r.ok
        print(f"{'ok  ' if r.ok else 'FAIL'} {name}: {r.data if r.ok else r.error or r.unknown}")
    for w in harness.wire_findings:
        ok = False
        print(f"FAIL {w['requirement']}: malformed response {w['response']!r}: {w['problems']}")
    sc.close()
    if not ok:
        print(f"stderr of the adapter: {p.process.stderr_path}")
    return 0 if ok else 2


if __name__ == "__main__":
    sys.exit(main())
