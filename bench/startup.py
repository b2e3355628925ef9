"""Start-up time of the command line: `dhp --version` and `dhp status ID` (a store with one
handoff), each run as a fresh process, interleaved, wall time; also Python's own start-up
(`python -c pass`) in the same rounds, the floor under both. With the `mcp` extra, also
`dhp-mcp`: from the process's start to the answer to its first `tools/list` over stdio
(initialize, initialized, tools/list as raw JSON-RPC lines, as a client sends them), once with
the bytecode caches and once with none (an empty PYTHONPYCACHEPREFIX, nothing written: every
module compiled at start, the worst first start).

Each command runs once untimed first, with Python allowed to write its bytecode caches (as
an installed package has them: pip compiles on install), so the timed runs measure start-up,
not compilation, even where PYTHONDONTWRITEBYTECODE is set.

Prints one JSON line: median and p90 in ms per command.

    python bench/startup.py [--runs 30] [--quick]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import _common as C
from _common import log

# Bytecode caches written and used, as in an installed package.
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def timed(cmd: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=ENV)
    return (time.perf_counter() - started) * 1000


def mcp_first_list(cmd: list[str], env: dict | None = None) -> float:
    """ms from spawning `dhp-mcp` to its answer to the first tools/list."""
    hello = {"protocolVersion": "2025-06-18", "capabilities": {},
             "clientInfo": {"name": "bench", "version": "0"}}
    lines = [{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello},
             {"jsonrpc": "2.0", "method": "notifications/initialized"},
             {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}]
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, env=env or ENV, text=True)
    try:
        proc.stdin.write("".join(json.dumps(m) + "\n" for m in lines))
        proc.stdin.flush()
        for line in proc.stdout:
            if json.loads(line).get("id") == 2:
                return (time.perf_counter() - started) * 1000
        raise RuntimeError("dhp-mcp closed stdout before answering tools/list")
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=30)
    args = C.parse(p, {"runs": 3})
    run = C.Run("startup", args)
    folder = Path(C.scratch("startup"))
    try:
        dhp = [sys.executable, "-m", "dhp.cli.main"]
        store = str(folder / "store")
        hid = subprocess.run([*dhp, "dispatch", "--store", store, "--kind", "bench"],
                             check=True, capture_output=True, text=True).stdout.strip()
        commands = {"python": [sys.executable, "-c", "pass"],
                    "dhp --version": [*dhp, "--version"],
                    "dhp status": [*dhp, "status", "--store", store, hid]}
        measure = {name: timed for name in commands}
        if importlib.util.find_spec("mcp") is not None:
            commands["dhp-mcp tools/list"] = [sys.executable, "-m", "dhp.agents.mcp_cli",
                                              "--root", store]
            measure["dhp-mcp tools/list"] = mcp_first_list
            cold = dict(ENV, PYTHONDONTWRITEBYTECODE="1",
                        PYTHONPYCACHEPREFIX=str(folder / "no-pycache"))
            commands["dhp-mcp tools/list, no bytecode"] = commands["dhp-mcp tools/list"]
            measure["dhp-mcp tools/list, no bytecode"] = lambda cmd: mcp_first_list(cmd, cold)
        times: dict[str, list[float]] = {name: [] for name in commands}
        for name, cmd in commands.items():
            measure[name](cmd)  # untimed: writes the bytecode caches, warms the file cache
        for i in range(args.runs):
            for name, cmd in commands.items():
                times[name].append(measure[name](cmd))
            if i % 10 == 9:
                log(f"{i + 1} runs")
        run.finish({"runs": args.runs, "bytecode_cache": True, "ms": {
            name: {"median": round(statistics.median(v), 1),
                   "p90": round(statistics.quantiles(v, n=10)[-1], 1)}
            for name, v in times.items()}})
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
