"""The container image and the compose stack: image sizes, build times, stack start time.

- build: `tools/container_image.sh` wall time, warm (base image and dependency layer present:
  the usual rebuild after a code change, wheel built and installed again). With `--cold` the
  run first removes the three images (localhost/dhp-base:bookworm, localhost/dhp,
  localhost/dhp-postgres:15) and podman's build cache, and times the build from nothing too
  (debootstrap and every download included), as on a new machine.
- sizes: `podman image inspect` of each image (uncompressed, all layers).
- start: `podman-compose up -d` of deploy/compose.yaml (its own project, fresh volumes) until
  both workers have started their pools (the database made, `dhp init` done, every DHP
  container past `dhp-when-ready`); then until a dispatched handoff is completed; and
  `podman-compose down` (every container stopped, workers drained). `--runs` repeats it.

Needs root, podman, runc, podman-compose (debootstrap for --cold). Prints one JSON line.

    python bench/container_bench.py [--cold] [--runs 3] [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import _common as C
from _common import log

DEPLOY = C.REPO / "deploy"
PROJECT = "dhpbench"
ENV = {**os.environ, "CONTAINERS_CONF": os.environ.get("CONTAINERS_CONF",
                                                       str(DEPLOY / "containers.conf")),
       "PYTHON": sys.executable, "DHP_PG_PORT": "18432", "DHP_DASHBOARD_PORT": "18480",
       "DHP_MCP_PORT": "18471"}   # host networking: on 127.0.0.1, beside a `dhp` stack
IMAGES = {"base": "localhost/dhp-base:bookworm", "dhp": "localhost/dhp:latest",
          "postgres": "localhost/dhp-postgres:15"}


def sh(*cmd: str, timeout: float = 1800) -> str:
    proc = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {proc.returncode}\n{proc.stderr[-3000:]}")
    return proc.stdout


def build() -> float:
    began = time.perf_counter()
    sh("bash", str(C.REPO / "tools" / "container_image.sh"))
    return round(time.perf_counter() - began, 1)


def compose(*args: str) -> None:
    sh(sys.executable, "-m", "podman_compose", "-p", PROJECT, "-f",
       str(DEPLOY / "compose.yaml"), *args, timeout=600)


def logs(name: str) -> str:
    proc = subprocess.run(["podman", "logs", f"{PROJECT}_{name}"], env=ENV,
                          capture_output=True, text=True)
    return proc.stdout + proc.stderr


def until(pred, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise RuntimeError("timed out")
        time.sleep(0.2)


def start_once(i: int) -> dict:
    compose("down", "--remove-orphans", "-v")
    began = time.perf_counter()
    compose("up", "-d")
    until(lambda: all(" start " in logs(f"worker_{n}") for n in (1, 2)))
    ready = time.perf_counter() - began
    script = ("import os, dhp, tasks; s = dhp.Store(os.environ['DHP_STORE']); "
              f"print(tasks.steps.dispatch(s, {{'steps': 1, 'step_s': 0, 'n': {i}}}))")
    hid = sh("podman", "exec", f"{PROJECT}_supervisor-1_1", "python3", "-c", script).strip()
    until(lambda: f"complete demo.steps {hid[:19]}" in logs("worker_1") + logs("worker_2"))
    first = time.perf_counter() - began
    stop = time.perf_counter()
    compose("down", "--remove-orphans", "-v")
    return {"ready_s": round(ready, 1), "first_result_s": round(first, 1),
            "down_s": round(time.perf_counter() - stop, 1)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cold", action="store_true",
                   help="also time a build from nothing (removes the images first)")
    p.add_argument("--runs", type=int, default=3, help="stack starts to time")
    args = C.parse(p, {"runs": 1})
    run = C.Run("container", args)
    out: dict = {"build_s": {}}
    if args.cold:
        for image in IMAGES.values():
            subprocess.run(["podman", "rmi", "-f", image, "localhost/dhp:0.1.0"], env=ENV,
                           capture_output=True)
        subprocess.run(["podman", "image", "prune", "-f"], env=ENV, capture_output=True)
        log("cold build (debootstrap and every download)")
        out["build_s"]["cold"] = build()
    log("warm build")
    build()   # the layers of this tree cached, so the timed run is the usual rebuild
    out["build_s"]["warm"] = build()
    out["size_mb"] = {k: round(int(json.loads(sh("podman", "image", "inspect", v))[0]["Size"])
                               / 1e6) for k, v in IMAGES.items()}
    runs = []
    try:
        for i in range(args.runs):
            runs.append(start_once(i))
            log(f"start {i + 1}: {runs[-1]}")
    finally:
        compose("down", "--remove-orphans", "-v")
    out["start"] = {key: {"median": round(statistics.median(r[key] for r in runs), 1),
                          "max": max(r[key] for r in runs)} for key in runs[0]}
    out["runs"] = args.runs
    run.finish(out)


if __name__ == "__main__":
    main()
