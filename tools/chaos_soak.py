"""Run `dhp-chaos` against an implementation many times, one run after another, and print one
line of JSON: how many runs, how many found something, the faults injected in total.

The clean reference must come out of every run with zero findings: the kit must never fail a
correct implementation (issue 9). A run that finds something keeps its folder and is named in
the output with its seed, so it can be replayed.

    python tools/chaos_soak.py --runs 100 --seconds 8
    python tools/chaos_soak.py --runs 100 --seconds 8 --impl 'my-adapter --flag'
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

COUNTS = ("kills", "supervisor_kills", "pauses", "supervisor_pauses", "requests", "handoffs",
          "completed", "acked_checkpoints")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=100)
    p.add_argument("--seconds", type=float, default=8.0, help="faults per run for this long")
    p.add_argument("--first-seed", type=int, default=1)
    p.add_argument("--impl", default=f"{sys.executable} -m dhp.adapter")
    p.add_argument("--folder", type=Path, help="keep the folders of runs that found something "
                   "here (default: a new temporary folder)")
    args = p.parse_args()
    folder = args.folder or Path(tempfile.mkdtemp(prefix="dhp-chaos-soak-"))
    totals = dict.fromkeys(COUNTS, 0)
    bad: list[dict] = []
    started = time.monotonic()
    for seed in range(args.first_seed, args.first_seed + args.runs):
        run = folder / f"seed-{seed}"
        out = folder / f"seed-{seed}.json"
        proc = subprocess.run(
            [sys.executable, "-m", "dhp_conform.chaos_cli", "--impl", args.impl, "--seed",
             str(seed), "--seconds", str(args.seconds), "--history", str(run),
             "--json", str(out)], capture_output=True, text=True)
        outcome = json.loads(out.read_text()) if out.exists() else {"verdict": "NO OUTPUT"}
        for key in COUNTS:
            totals[key] += outcome.get(key, 0)
        if proc.returncode or outcome["verdict"] != "PASS":
            (folder / f"seed-{seed}.txt").write_text(proc.stdout + proc.stderr)
            bad.append({"seed": seed, "verdict": outcome["verdict"],
                        "checks": sorted({f["check"] for f in outcome.get("failures", [])}),
                        "adapter_errors": outcome.get("adapter_errors", [])[:3]})
        else:
            shutil.rmtree(run, ignore_errors=True)
            out.unlink()
        print(f"seed {seed}: {outcome['verdict']}", file=sys.stderr, flush=True)
    print(json.dumps({"bench": "chaos_soak", "runs": args.runs, "seconds_per_run": args.seconds,
                      "runs_with_findings": len(bad), "findings": bad, **totals,
                      "wall_s": round(time.monotonic() - started, 1), "kept": str(folder)}))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
