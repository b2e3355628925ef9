"""Shared plumbing for the benchmarks: child processes per side, statistics, output.

Every benchmark runs each implementation ("side") in its own child process, started with that
side's interpreter: ours with the interpreter running the benchmark, the original
`dhp-protocol` 1.3.0 with the one from tools/orig_venv.sh (both import as `dhp`, so they can
never share a process). A child prints one JSON line on stdout; progress goes to stderr.
"""

from __future__ import annotations

import atexit
import importlib
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
SIDES = ("ours", "orig", "ours_fsync", "ours_pg")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def emit(obj: dict) -> None:
    """The benchmark's single line of JSON on stdout."""
    print(json.dumps(obj, sort_keys=True), flush=True)


def orig_python() -> str:
    """Interpreter of the original's venv: $DHP_ORIG_PYTHON, else made by tools/orig_venv.sh."""
    explicit = os.environ.get("DHP_ORIG_PYTHON")
    if explicit:
        return explicit
    out = subprocess.run(["bash", str(REPO / "tools" / "orig_venv.sh")], check=True,
                         stdout=subprocess.PIPE, text=True).stdout
    return out.strip().splitlines()[-1]


def python_for(side: str) -> str:
    return orig_python() if side == "orig" else sys.executable


def child_cmd(side: str, script: str, *args: str) -> list[str]:
    # -s: no user site-packages, so neither side can pick up a stray `dhp`.
    return [python_for(side), "-s", str(BENCH / script), "--child", side, *map(str, args)]


def run_child(side: str, script: str, *args: str, timeout: float = 3600) -> dict:
    """Run a child of this benchmark for one side and return its JSON line."""
    cmd = child_cmd(side, script, *args)
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{side} child failed (exit {proc.returncode}): {' '.join(cmd)}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def load_side(side: str):
    """Import the adapter of one side (bench/side_<side>.py)."""
    if side not in SIDES:
        raise SystemExit(f"unknown side {side!r}; expected one of {SIDES}")
    sys.path.insert(0, str(BENCH))
    return importlib.import_module(f"side_{side}")


def _session() -> str:
    """This run's folder for stores, shared with child processes through the environment and
    removed by the process that made it when it exits (unless DHP_BENCH_KEEP is set)."""
    path = os.environ.get("DHP_BENCH_SESSION")
    if not path:
        path = tempfile.mkdtemp(prefix="dhp-bench-", dir=os.environ.get("DHP_BENCH_TMP"))
        os.environ["DHP_BENCH_SESSION"] = path
        if not os.environ.get("DHP_BENCH_KEEP"):
            atexit.register(shutil.rmtree, path, True)
    return path


def scratch(prefix: str) -> str:
    """A fresh folder for one store; on local disk so fsync costs are real."""
    return tempfile.mkdtemp(prefix=f"{prefix}-", dir=_session())


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100): a value that was really observed."""
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


def summary(values: list[float], digits: int = 4) -> dict:
    return {"n": len(values), "median": round(statistics.median(values), digits),
            "p95": round(percentile(values, 95), digits), "min": round(min(values), digits),
            "max": round(max(values), digits), "mean": round(statistics.fmean(values), digits)}


def ratio(a: float | None, b: float | None, digits: int = 2) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return round(a / b, digits)


def padded_state(size: int, i: int) -> dict:
    """A checkpoint state whose JSON is about `size` bytes."""
    base = {"i": i, "pad": ""}
    fill = max(0, size - len(json.dumps(base)))
    base["pad"] = "x" * fill
    return base


OUTPUT_SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}},
                 "required": ["n"]}
