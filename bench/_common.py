"""Shared plumbing for the benchmarks: child processes per side, statistics, output.

Every benchmark runs each implementation ("side") in its own child process, started with that
side's interpreter: ours with the interpreter running the benchmark, the original
`dhp-protocol` 1.3.0 with the one from tools/orig_venv.sh (both import as `dhp`, so they can
never share a process). A child prints one JSON line on stdout; progress goes to stderr.

Side-by-side figures come from interleaved windows (see bench/README.md, "How the figures
are made"): `Driven` keeps one long-lived child per side, `interleave` alternates the sides
window by window (the first side alternates too: A B, B A, A B ...), and `paired` turns the
per-window measurements into the median of per-pair ratios with their min-max spread.
`finish` adds the run's environment to the JSON line: CPUs, load average and the raw fsync
rate of the scratch disk at the start and at the end of the run.
"""

from __future__ import annotations

import argparse
import atexit
import datetime as dt
import importlib
import json
import math
import os
import platform
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
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


def paired(num: list[float], den: list[float], digits: int = 3) -> dict | None:
    """The median of per-pair ratios num[i] / den[i] with their spread (min and max over the
    pairs), never one ratio of two totals: pair i was measured in the same short window of
    time, so a drift of the machine that moves both sides cancels out of its ratio."""
    ratios = [a / b for a, b in zip(num, den, strict=True) if a is not None and b]
    if not ratios:
        return None
    return {"median": round(statistics.median(ratios), digits),
            "min": round(min(ratios), digits), "max": round(max(ratios), digits),
            "n": len(ratios)}


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


class BareSQLite:
    """The bare SQLite commit limit, a pseudo-side (`sqlite_full`, `sqlite_normal`): a table
    of (seq, json) and one INSERT + COMMIT per write, WAL, with synchronous FULL (an fsync
    per commit, what an ownership change costs) or NORMAL (no fsync: what a checkpoint inside
    ours' shared fsync interval costs). No protocol, no checks: the ceiling a store on this
    disk can reach, measured in the same run as the sides it bounds."""

    def __init__(self, name: str, root: str):
        self.NAME, self.VERSION = name, sqlite3.sqlite_version
        self.level = name.removeprefix("sqlite_").upper()
        self.durability = f"bare sqlite3 {self.VERSION}, WAL, synchronous={self.level}"
        self.db = sqlite3.connect(os.path.join(root, "bare.db"), isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute(f"PRAGMA synchronous={self.level}")
        self.db.execute("CREATE TABLE c (seq INTEGER PRIMARY KEY, doc TEXT NOT NULL)")
        self.seq = 0

    def write(self, doc: dict) -> None:
        self.seq += 1
        self.db.execute("BEGIN")
        self.db.execute("INSERT INTO c VALUES (?, ?)", (self.seq, json.dumps(doc)))
        self.db.execute("COMMIT")


OUTPUT_SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}},
                 "required": ["n"]}


# ------------------------------------------------------------------ interleaved windows

def order(sides: list[str], window: int) -> list[str]:
    """The sides in the order of window `window`: alternate starts (A B, B A, A B ...), so
    neither side always runs first after a pause or always right after the other."""
    return list(sides) if window % 2 == 0 else list(reversed(sides))


def interleave(sides: list[str], windows: int, measure: Callable[[str, int], object],
               what: str = "") -> dict[str, list]:
    """Run measure(side, window) for every side in every window, the sides alternating;
    returns {side: [one result per window]} in window order."""
    got: dict[str, list] = {side: [] for side in sides}
    for w in range(windows):
        for side in order(sides, w):
            got[side].append(measure(side, w))
        if what:
            log(f"{what}: window {w + 1}/{windows} done")
    return got


class Driven:
    """A long-lived child of this benchmark for one side, driven by one JSON command per line
    on stdin and answering one JSON line on stdout, so the sides can take turns in short
    windows without paying a process start (or a store fill) per window. The child side is
    `serve`; the child prints "ready" once its setup is done."""

    def __init__(self, side: str, script: str, *args: str):
        self.side = side
        self.proc = subprocess.Popen(child_cmd(side, script, "--serve", *map(str, args)),
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self._read()  # "ready": setup finished

    def _read(self):
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"{self.side} child exited with {self.proc.wait()}")
            line = line.strip()
            if line == "ready":
                return None
            if line.startswith("{"):  # anything else is a library talking on stdout
                return json.loads(line)

    def ask(self, op: str, **params):
        self.send(op, **params)
        return self.receive()

    def send(self, op: str, **params) -> None:
        """The command alone, so several children can be started on theirs together."""
        self.proc.stdin.write(json.dumps({"op": op, **params}) + "\n")
        self.proc.stdin.flush()

    def receive(self):
        """The answer to the command sent last."""
        return self._read()

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=60)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()


def serve(handlers: dict[str, Callable[..., dict]]) -> None:
    """The child's loop of `Driven`: after its setup, answer each command with one JSON line."""
    print("ready", flush=True)
    for line in sys.stdin:
        command = json.loads(line)
        emit(handlers[command.pop("op")](**command))


def drive(sides: Iterable[str], script: str, *args: str) -> dict[str, Driven]:
    """One Driven child per side, started one after another (their setups never overlap)."""
    children: dict[str, Driven] = {}
    try:
        for side in sides:
            log(f"{script}: starting the {side} child")
            children[side] = Driven(side, script, *args)
    except BaseException:
        close_all(children)
        raise
    return children


def close_all(children: dict[str, Driven]) -> None:
    for child in children.values():
        child.close()


def written_bytes() -> int | None:
    """Bytes this process has passed to write() so far (Linux /proc/self/io `wchar`): for a
    store in WAL mode, the WAL frames of its commits plus its share of the WAL checkpoints
    into the database file; None where the kernel does not say."""
    try:
        with open("/proc/self/io", encoding="ascii") as f:
            for line in f:
                if line.startswith("wchar:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def cpu_and_wall(step: Callable[[], object]) -> tuple[float, float]:
    """(CPU seconds of this process, wall seconds) spent in step()."""
    cpu, wall = time.process_time(), time.perf_counter()
    step()
    return time.process_time() - cpu, time.perf_counter() - wall


# ------------------------------------------------------------------ arguments, environment

def parse(ap: argparse.ArgumentParser, quick: dict) -> argparse.Namespace:
    """Parse with a --quick flag that swaps in the small defaults `quick` (sizes and reps to
    check the script end to end in seconds, not figures to quote); explicit options win."""
    ap.add_argument("--quick", action="store_true",
                    help="small sizes and few repetitions: checks the script runs, figures "
                         "are not comparable to a full run (" +
                         ", ".join(f"{k}={v}" for k, v in quick.items()) + ")")
    if "--quick" in sys.argv[1:]:
        ap.set_defaults(**quick)
    return ap.parse_args()


def fsync_probe(seconds: float = 1.0, limit: int = 1000) -> dict:
    """Raw fsync rate of the disk under the scratch folder: a loop of a 128-byte append and an
    fsync, for `seconds` or `limit` rounds. A store's commit cannot beat this rate, and it
    moves with the machine's load, so every side-by-side run prints it next to its figures."""
    path = os.path.join(scratch("fsync-probe"), "probe")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    times = []
    try:
        block, deadline = b"x" * 127 + b"\n", time.perf_counter() + seconds
        while len(times) < limit and time.perf_counter() < deadline:
            began = time.perf_counter()
            os.write(fd, block)
            os.fsync(fd)
            times.append(time.perf_counter() - began)
    finally:
        os.close(fd)
    return {"fsyncs": len(times), "per_s": round(len(times) / sum(times), 1),
            "median_ms": round(statistics.median(times) * 1000, 3),
            "p95_ms": round(percentile(times, 95) * 1000, 3)}


def environment() -> dict:
    """What the machine was doing: read at the start and again at the end of a run."""
    return {"time": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "loadavg": [round(x, 2) for x in os.getloadavg()], "fsync": fsync_probe()}


class Run:
    """One benchmark run: the environment at its start; `finish` emits the JSON line with the
    environment at the start and the end, and the fsync rate of both probes."""

    def __init__(self, name: str, args: argparse.Namespace | None = None):
        self.name = name
        self.quick = bool(getattr(args, "quick", False))
        self.start = environment()
        log(f"{name}: fsync probe {self.start['fsync']['per_s']}/s, "
            f"load {self.start['loadavg']}")

    def finish(self, out: dict) -> None:
        end = environment()
        rates = [self.start["fsync"]["per_s"], end["fsync"]["per_s"]]
        out = {"benchmark": self.name, **out, "quick": self.quick,
               "env": {"cpus": os.cpu_count(), "python": platform.python_version(),
                       "sqlite": sqlite3.sqlite_version, "machine": platform.machine(),
                       "start": self.start, "end": end,
                       "fsync_per_s": {"start": rates[0], "end": rates[1],
                                       "min": min(rates), "max": max(rates)}}}
        emit(out)


def backend_cpu_s(conn) -> float:
    """CPU seconds (user + system, from /proc) of the server processes serving the database
    of `conn` (a psycopg connection to it), this connection's own process left out: the
    server's work for the clients of that database, read on the server's host."""
    pids = [r[0] for r in conn.execute(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
        "AND pid <> pg_backend_pid()")]
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # ended since
        total += int(fields[11]) + int(fields[12])
    return total / tick


_DB_COUNTERS = ("xact_commit", "tup_returned", "tup_fetched", "tup_inserted", "tup_updated",
                "tup_deleted")


def db_counters(conn, settle_s: float = 1.5) -> dict[str, int]:
    """pg_stat_database's counters of the database of `conn`, read once they stop moving
    (sessions report theirs within about a second of going idle), waiting up to 10 s."""
    last = None
    deadline = time.monotonic() + 10
    while True:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        now = dict(zip(_DB_COUNTERS, conn.execute(
            f"SELECT {', '.join(_DB_COUNTERS)} FROM pg_stat_database "
            "WHERE datname = current_database()").fetchone(), strict=True))
        if now == last or time.monotonic() > deadline:
            return now
        last = now
        time.sleep(settle_s)


def per_unit(before: dict[str, int], after: dict[str, int], n: int) -> dict[str, float]:
    """Server work per unit from two db_counters readings: commits, rows read, rows written."""
    d = {k: after[k] - before[k] for k in before}
    return {"commits": round(d["xact_commit"] / n, 2),
            "rows_read": round((d["tup_returned"] + d["tup_fetched"]) / n, 1),
            "rows_written": round((d["tup_inserted"] + d["tup_updated"] + d["tup_deleted"]) / n,
                                  2)}
