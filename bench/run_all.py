"""Rerun every benchmark figure of bench/README.md and regenerate its tables.

Each benchmark runs as its own process, one after another (never two at once: they would
measure each other); its JSON line is saved to bench/results/<name>.json with the command,
the date, the host's CPU count and load average at the start and the end. Then
tools/gen_bench_tables.py renders the README's tables from those files.

    python bench/run_all.py                     # everything, full size (about an hour)
    python bench/run_all.py --only failover,sdk_ops --quick
    python bench/run_all.py --list

--quick runs each script with its --quick sizes: it checks they run end to end; the figures
it saves are marked quick in the README and are not to be quoted. Set DHP_ORIG_VENV (or let
tools/orig_venv.sh make .venv-orig) for the original, and DHP_BENCH_POSTGRES for Postgres.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
RESULTS = BENCH / "results"

# name (results/<name>.json): the script and its options for the figures of the README.
BENCHMARKS: dict[str, list[str]] = {
    "failover": ["failover.py", "--sides", "ours,orig,ours_pg"],
    "checkpoint_rate": ["checkpoint_rate.py"],
    "supervisor_pass": ["supervisor_pass.py"],
    "sdk_ops": ["sdk_ops.py"],
    "write_cost": ["write_cost.py"],
    "dispatch": ["dispatch_bench.py"],
    "list": ["list_bench.py"],
    "transport": ["transport_bench.py"],
    "preauth_attack": ["preauth_attack.py"],
    "worker_pool": ["worker_pool.py"],
    "worker_concurrency": ["worker_concurrency.py"],
    "pickup_latency": ["pickup_latency.py"],
    "tracing_overhead": ["tracing_overhead.py"],
    "startup": ["startup.py"],
    "mcp": ["mcp_bench.py"],
    "server_load": ["server_load.py"],
    "throughput": ["throughput.py"],
    "claim_latency": ["claim_latency.py"],
    "group_commit": ["group_commit.py"],
    "group_commit_slow": ["group_commit.py", "--flush-ms", "5"],
    "validate": ["validate_bench.py"],
    "fleet_pg": ["fleet_pg.py"],
    "container": ["container_bench.py", "--cold"],
    "store_failover": ["store_failover.py"],
}

# sides include ours_pg
USES_POSTGRES = {"failover", "throughput", "claim_latency", "pickup_latency", "mcp",
                 "worker_concurrency", "fleet_pg"}


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def run_one(name: str, quick: bool) -> bool:
    script, *options = BENCHMARKS[name]
    argv = [sys.executable, str(BENCH / script), *options, *(["--quick"] if quick else [])]
    command = " ".join(["python", f"bench/{script}", *argv[2:]])
    print(f"== {name}: {command}", file=sys.stderr, flush=True)
    started, load_start = time.monotonic(), os.getloadavg()
    date = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    proc = subprocess.run(argv, stdout=subprocess.PIPE, text=True, cwd=REPO)
    lines = [x for x in proc.stdout.splitlines() if x.startswith("{")]
    if proc.returncode != 0 or not lines:
        print(f"== {name}: FAILED (exit {proc.returncode}); bench/results/{name}.json kept",
              file=sys.stderr, flush=True)
        return False
    record = {"name": name, "command": command, "quick": quick, "date": date,
              "seconds": round(time.monotonic() - started, 1),
              "host": {"cpus": os.cpu_count(), "cpu_model": cpu_model(),
                       "loadavg_start": [round(x, 2) for x in load_start],
                       "loadavg_end": [round(x, 2) for x in os.getloadavg()]},
              "result": json.loads(lines[-1])}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(record, indent=1, sort_keys=True) + "\n",
                                          encoding="utf-8")
    print(f"== {name}: saved in {record['seconds']} s", file=sys.stderr, flush=True)
    return True


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="comma-separated names (see --list)")
    ap.add_argument("--skip", default="", help="comma-separated names not to run")
    ap.add_argument("--quick", action="store_true",
                    help="each script's --quick sizes: checks, not figures")
    ap.add_argument("--list", action="store_true", help="print the names and commands")
    ap.add_argument("--no-tables", action="store_true",
                    help="do not regenerate bench/README.md afterwards")
    args = ap.parse_args()
    if args.list:
        for name, (script, *options) in BENCHMARKS.items():
            print(f"{name:18} python bench/{script} {' '.join(options)}".rstrip())
        return 0
    names = args.only.split(",") if args.only else list(BENCHMARKS)
    unknown = [n for n in names + [s for s in args.skip.split(",") if s]
               if n not in BENCHMARKS]
    if unknown:
        ap.error(f"unknown benchmark(s) {', '.join(unknown)}; see --list")
    ran = [n for n in names if n not in args.skip.split(",")]
    failed = [n for n in ran if not run_one(n, args.quick)]
    if USES_POSTGRES.intersection(ran):
        # Every run made fresh schemas (dhp_bench_*): drop them, as the README asks.
        subprocess.run([sys.executable, str(BENCH / "side_ours_pg.py"), "--drop"], cwd=BENCH)
    if not args.no_tables:
        subprocess.run([sys.executable, str(REPO / "tools" / "gen_bench_tables.py")],
                       check=True)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
