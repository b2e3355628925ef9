"""`dhp-chaos`: a randomized fault workload against an implementation for a given time, then
the invariant summary.

Worker processes run handoffs to completion, checkpointing every step; every 50-250 ms the kit
SIGKILLs a random worker (or supervisor) and restarts it on the same data, or pauses one
(SIGSTOP, then SIGCONT after 1.2-2 leases, so it wakes up as a zombie); at the end it
proves the history invariants (one owner per fence, no stale write accepted, no acknowledged
checkpoint lost, rework at most one checkpoint, exactly one completion, valid and durable
results, intact exported logs). Reproducible from --seed.

Exit status: 0 every invariant held, 1 a violation, 2 adapter or harness error.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
from pathlib import Path

from . import __version__, checkers, rundir
from .harness import Harness
from .manifest import ManifestError, add_arguments, resolve
from .process import AdapterError
from .progress import Progress
from .requirements import level
from .runner import HISTORY_CHECKS
from .suites import chaos
from .suites.base import Check, CheckAborted, Ctx, Run

EPILOG = """examples:
  dhp-chaos --impl 'python -m dhp.adapter' --seconds 30
  dhp-chaos --impl @adapter.json --seconds 300 --workers 8 --seed 7 --history ./chaos-run

exit codes:
  0  every invariant held
  1  an invariant was violated (the summary shows the evidence)
  2  usage error, adapter command not found, or the adapter or harness broke (not judged)"""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="dhp-chaos", description=__doc__, epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"dhp-chaos {__version__} (DHP/1.0)")
    add_arguments(p)
    p.add_argument("--seconds", type=float, default=30.0,
                   help="how long to inject kills (default 30)")
    p.add_argument("--workers", type=int, default=6, help="worker processes (default 6)")
    p.add_argument("--handoffs", type=int, default=8,
                   help="handoffs dispatched per batch (default 8)")
    p.add_argument("--pauses", type=float, default=chaos.PAUSE_SHARE, metavar="SHARE",
                   help="share of the faults that are pauses (SIGSTOP, SIGCONT after more than "
                        f"a lease) rather than SIGKILLs (default {chaos.PAUSE_SHARE:g}; 0: kills "
                        "only)")
    p.add_argument("--history", type=Path,
                   help="keep the run folder here; a folder of an earlier run is cleared first")
    p.add_argument("--json", type=Path, help="also write the outcome here as JSON: seed, "
                   "verdict, fault and request counts, failures and adapter errors")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        impl = resolve(args.impl, args.manifest)
    except ManifestError as exc:
        print(f"dhp-chaos: {exc}", file=sys.stderr)
        return 2
    if args.seconds <= 0 or args.workers < 1 or args.handoffs < 1:
        print("dhp-chaos: --seconds, --workers and --handoffs must be positive", file=sys.stderr)
        return 2
    if not 0 <= args.pauses <= 1:
        print("dhp-chaos: --pauses is a share between 0 and 1", file=sys.stderr)
        return 2
    seed = args.seed if args.seed is not None else random.randrange(2**31)
    try:
        workdir, keep = rundir.prepare(args.history, "dhp-chaos-")
    except rundir.RunDirError as exc:
        print(f"dhp-chaos: {exc}", file=sys.stderr)
        return 2
    harness = Harness(impl, workdir, timeout=args.timeout)
    state = Run(harness, seed, quick=False)
    check = Check("chaos", "dhp-chaos", ["DHP-CKP-009", "DHP-LSE-003", "DHP-LOG-007"],
                  lambda ctx: None)
    ctx = Ctx(state, check)
    stats: dict = {}
    progress = Progress("dhp-chaos")
    progress.say(f"{impl.describe()}, seed {seed} (repeat with --seed {seed})")
    try:
        probe = harness.scenario("probe", ttl=5.0)
        probe.spawn("probe")
        probe.close()
        with progress.ticking(args.seconds,
                              lambda: f"{len(harness.history.events)} events recorded"):
            stats = chaos.workload(ctx, workers=args.workers, handoffs=args.handoffs,
                                   faults=None, seconds=args.seconds, pause_share=args.pauses)
    except CheckAborted as exc:
        harness.adapter_errors.append(f"the workload could not go on: {exc.args[0]}")
    except AdapterError as exc:
        harness.adapter_errors.append(str(exc))
    finally:
        for sc in ctx.scenarios:
            sc.close()
    print(summary(ctx, stats, seed, harness))
    harness.history.save(workdir)
    failures = [r for r in state.results if r["status"] == "FAIL"]
    code = 2 if harness.adapter_errors else (1 if failures else 0)
    if args.json:
        args.json.write_text(json.dumps({
            "seed": seed, "verdict": {0: "PASS", 1: "FAIL", 2: "NOT JUDGED"}[code],
            **stats, "failures": failures, "adapter_errors": harness.adapter_errors},
            default=repr) + "\n", encoding="utf-8")
    if code:
        print(f"rerun with --seed {seed}; history and process logs kept in {workdir}")
    elif not keep:
        shutil.rmtree(workdir, ignore_errors=True)
    return code


def summary(ctx: Ctx, stats: dict, seed: int, harness: Harness) -> str:
    """The invariants over the whole history, one line each, then what was found."""
    state = ctx.run
    found: dict[str, list] = {}
    for sc in ctx.scenarios:
        for f in checkers.check_scenario(sc.events(), sc.ttl):
            found.setdefault(f.check, []).append(f)
            for rid in f.requirements:
                state.results.append({"requirement": rid, "check": f.check, "status": "FAIL",
                                      "reason": f.explanation, "evidence": f.evidence()})
    lines = [f"dhp-chaos: {harness.impl.describe()}, seed {seed}"]
    if stats:
        lines.append(f"  faults: {stats['kills']} SIGKILLs ({stats['supervisor_kills']} of "
                     f"supervisors), {stats['pauses']} pauses across the lease "
                     f"({stats['supervisor_pauses']} of supervisors)")
        lines.append(f"  {stats['requests']} requests, {stats['handoffs']} handoffs "
                     f"({stats['completed']} completed), {stats['acked_checkpoints']} "
                     "acknowledged checkpoints")
    lines.append("invariants:")
    for name, rids in HISTORY_CHECKS.items():
        bad = found.pop(name, [])
        lines.append(f"  {'FAIL' if bad else 'PASS'} {name} ({', '.join(rids)})"
                     + (f": {len(bad)} violation(s)" if bad else ""))
        for f in bad[:3]:
            lines.append(f"         {f.explanation}")
            lines.extend(f"           | {e}" for e in f.evidence()[:8])
    for name, bad in found.items():  # checkers outside the table (fence-monotonic, ...)
        lines.append(f"  FAIL {name}: {len(bad)} violation(s)")
        for f in bad[:3]:
            lines.append(f"         {f.explanation}")
    for r in state.results:
        if r["status"] == "FAIL" and level(r["requirement"]) != "MUST":
            r["status"] = "WARN"  # a SHOULD or MAY not met: said, never a FAIL
        if r["status"] in ("FAIL", "WARN") and not r["check"].startswith("history:"):
            lines.append(f"  {r['status']} {r['requirement']} {r['check']}: {r.get('reason')}")
    for err in harness.adapter_errors:
        lines.append(f"  ADAPTER ERROR: {err}")
    failed = any(r["status"] == "FAIL" for r in state.results)
    verdict = "NOT JUDGED" if harness.adapter_errors else ("FAIL" if failed else "PASS")
    lines.append(f"verdict: {verdict}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
