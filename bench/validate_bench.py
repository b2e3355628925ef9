"""Benchmark `dhp validate` on a large log: lines per second and the child's peak memory.

    python bench/validate_bench.py [--lines 1000000] [--keep DIR] [--quick]

Writes a valid log of `--lines` lines (1 header + checkpoints) into a temporary folder, runs
`python -m dhp.cli.main validate` on it in a subprocess, and prints one JSON line:
{"bench": "validate", "lines": .., "seconds": .., "lines_per_s": .., "peak_rss_mib": ..,
"cpu_seconds": ..}.
Peak RSS comes from getrusage(RUSAGE_CHILDREN), i.e. the validator process only. The log is
generated without `dhp` (rfc8785 + hashlib when installed, else sorted compact json.dumps,
which is the same bytes for this ASCII/integer data), so generation does not share code
with what is measured.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _common as C


def _canon(obj) -> bytes:
    # Keys are ASCII and numbers are small integers, so sorted compact JSON is RFC 8785.
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def _digest(obj) -> str:
    return "sha256:" + hashlib.sha256(_canon(obj)).hexdigest()


def write_log(path: Path, lines: int) -> None:
    intent = {"dhp": "1.0", "task_kind": "bench", "inputs": {"n": lines},
              "output_schema": {"type": "object"}, "budget": {}}
    hid = _digest(intent)
    prev = hid
    with open(path, "wb", buffering=1 << 20) as f:
        f.write(_canon({"type": "header",
                        "envelope": {"dhp": "1.0", "handoff_id": hid, "intent": intent}}) + b"\n")
        for seq in range(1, lines):
            body = {"handoff_id": hid, "seq": seq, "fence": 1 + seq // 100000,
                    "state": {"step": seq, "cursor": f"item-{seq}", "done": [seq - 1, seq]},
                    "spend": seq % 7, "prev": prev}
            prev = _digest(body)
            body["hash"] = prev
            f.write(_canon({"type": "checkpoint", "record": body}) + b"\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--keep", metavar="DIR", help="write the log here and keep it")
    args = C.parse(parser, {"lines": 20_000})
    run = C.Run("validate", args)
    with tempfile.TemporaryDirectory(dir=C.scratch("validate")) as tmp:
        folder = Path(args.keep or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        log = folder / f"bench-{args.lines}.jsonl"
        write_log(log, args.lines)
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "dhp.cli.main", "validate", str(log)],
                              capture_output=True, text=True)
        seconds = time.perf_counter() - start
        if proc.returncode != 0:
            print(proc.stdout[-2000:], proc.stderr[-2000:], file=sys.stderr)
            return 1
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)  # the validator only
    # cpu_seconds tells a slow machine from a busy one (wall time includes waiting for a CPU)
    run.finish({"lines": args.lines, "seconds": round(seconds, 3),
                "lines_per_s": round(args.lines / seconds),
                "peak_rss_mib": round(usage.ru_maxrss / 1024, 1),  # KiB on Linux
                "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 3)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
