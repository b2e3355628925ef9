"""A fleet on Postgres beside DBOS Transact: N small units run by P worker processes, DHP
and DBOS (bench/side_dbos.py, pinned by tools/dbos_venv.sh) on the same server, in
interleaved windows (DHP first in odd windows, DBOS first in even ones). A unit is taken
from a queue, records one durable step of 100 B and its result; every unit is enqueued one
by one once the workers are up, and the window ends when the last result is durable.
Server CPU per unit: user + system CPU, from /proc, of the server processes serving the
side's database (_common.backend_cpu_s). Each side has a database of its own on the server:
dhp_fleet_bench and dbos_bench (created if missing). Prints one line of JSON.

Also one unit of --steps steps of 100 B each (steps/s, server CPU per step), run in the
measuring process on both sides.

    python bench/fleet_pg.py [--units 1000] [--procs 1 4] [--steps 200] [--windows 3]
"""

from __future__ import annotations

import argparse
import json
import os
import select
import statistics
import subprocess
import sys
import time

from _common import REPO, Run, backend_cpu_s, db_counters, log, paired, per_unit, summary

SERVER = os.environ.get("DHP_BENCH_POSTGRES_SERVER", "postgresql://postgres@127.0.0.1:5432")
DATABASES = {"dhp": "dhp_fleet_bench", "dbos": "dbos_bench"}
STEP = "x" * 100


def dhp_worker(url: str, wid: str) -> None:
    import dhp

    store = dhp.Store(url)
    store.liveness.token()  # the liveness lock before "ready", as DBOS's launch is
    print("ready", flush=True)
    while not select.select([sys.stdin], [], [], 0)[0]:  # until stdin closes
        ctx = dhp.claim_next(store, "unit", wid, wait=0.2)
        if ctx is not None:
            ctx.checkpoint({"step": STEP})
            ctx.complete({"r": STEP})
    store.close()


def dhp_units(url: str, n: int, procs: int) -> None:
    import dhp
    import psycopg

    with psycopg.connect(url.split("?")[0], autocommit=True) as conn:
        conn.execute("DROP SCHEMA IF EXISTS fleet CASCADE")
    store = dhp.Store(url)
    workers = [subprocess.Popen([sys.executable, "-s", __file__, "--child", "worker", url,
                                 f"w{k}"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                text=True) for k in range(procs)]
    for w in workers:
        assert w.stdout.readline().strip() == "ready"
    with psycopg.connect(url.split("?")[0], autocommit=True) as conn:
        counters = db_counters(conn)
        cpu0 = backend_cpu_s(conn)
        start = time.perf_counter()
        for i in range(n):
            dhp.dispatch(store, "unit", {"i": i}, {})
        while conn.execute("SELECT count(*) FROM fleet.handoffs WHERE state = 'completed'"
                           ).fetchone()[0] < n:
            time.sleep(0.05)  # the poll is server work too: seldom
        wall = time.perf_counter() - start
        cpu = backend_cpu_s(conn) - cpu0
    for w in workers:
        w.stdin.close()
        w.wait(30)
    with psycopg.connect(url.split("?")[0], autocommit=True) as conn:
        work = per_unit(counters, db_counters(conn), n)
    store.close()
    print(json.dumps({"wall_s": wall, "units_per_s": n / wall,
                      "server_cpu_ms_per_unit": 1000 * cpu / n, "per_unit": work}), flush=True)


def dhp_steps(url: str, n: int) -> None:
    import dhp
    import psycopg

    with psycopg.connect(url.split("?")[0], autocommit=True) as conn:
        conn.execute("DROP SCHEMA IF EXISTS fleet CASCADE")
    store = dhp.Store(url)
    store.liveness.token()
    with psycopg.connect(url.split("?")[0], autocommit=True) as conn:
        cpu0 = backend_cpu_s(conn)
        start = time.perf_counter()
        hid = dhp.dispatch(store, "long", {"n": n}, {})
        ctx = dhp.claim(store, hid, "w0")
        for i in range(n):
            ctx.checkpoint({"step": f"{i:0100d}"})
        ctx.complete({"n": n})
        wall = time.perf_counter() - start
        cpu = backend_cpu_s(conn) - cpu0
    store.close()
    print(json.dumps({"wall_s": wall, "steps_per_s": n / wall,
                      "server_cpu_ms_per_step": 1000 * cpu / n}), flush=True)


def ensure_databases() -> None:
    import psycopg

    with psycopg.connect(f"{SERVER}/postgres", autocommit=True) as conn:
        for name in DATABASES.values():
            if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s",
                                (name,)).fetchone():
                conn.execute(f'CREATE DATABASE "{name}"')


def window(side: str, what: str, *args: int) -> dict:
    """One run of `what` ("units" N PROCS, or "steps" N) on one side, in a child."""
    if side == "dhp":
        cmd = [sys.executable, "-s", __file__, "--child", what,
               f"{SERVER}/{DATABASES['dhp']}?schema=fleet", *map(str, args)]
    else:
        dbos_py = subprocess.run(["bash", str(REPO / "tools" / "dbos_venv.sh")], check=True,
                                 stdout=subprocess.PIPE, text=True).stdout.strip()
        cmd = [dbos_py, "-s", str(REPO / "bench" / "side_dbos.py"), what,
               f"{SERVER}/{DATABASES['dbos']}", *map(str, args)]
    out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                         timeout=600, env={**os.environ, "PYTHONPATH": str(REPO / "bench")})
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        if sys.argv[2] == "worker":
            dhp_worker(sys.argv[3], sys.argv[4])
        elif sys.argv[2] == "steps":
            dhp_steps(sys.argv[3], int(sys.argv[4]))
        else:
            dhp_units(sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--units", type=int, default=1000)
    ap.add_argument("--procs", type=int, nargs="+", default=[1, 4])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--windows", type=int, default=3)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    run = Run("fleet_pg", args)
    ensure_databases()
    out = {"units": args.units, "steps": args.steps, "windows": args.windows, "procs": {}}
    runs = [(f"units {p}", "units", "unit", (args.units, p)) for p in args.procs]
    runs.append(("steps", "steps", "step", (args.steps,)))
    for key, what, per, params in runs:
        got = {"dhp": [], "dbos": []}
        for w in range(args.windows):
            for side in (("dhp", "dbos") if w % 2 == 0 else ("dbos", "dhp")):
                got[side].append(window(side, what, *params))
                log(f"{key} window {w} {side}: {got[side][-1]}")
        rate, cpu = f"{per}s_per_s", f"server_cpu_ms_per_{per}"
        figures = {
            **{f"{side}_{rate}": summary([r[rate] for r in rows], 1)
               for side, rows in got.items()},
            **{f"{side}_{cpu}": summary([r[cpu] for r in rows], 3)
               for side, rows in got.items()},
            "rate_x_dbos": paired([r[rate] for r in got["dhp"]], [r[rate] for r in got["dbos"]]),
            "server_cpu_x_dbos": paired([r[cpu] for r in got["dhp"]],
                                        [r[cpu] for r in got["dbos"]])}
        if what == "units":
            # Server work per unit (pg_stat_database), the median over the windows.
            figures["work_per_unit"] = {side: {k: statistics.median(r["per_unit"][k]
                                                                    for r in rows)
                                               for k in rows[0]["per_unit"]}
                                        for side, rows in got.items()}
            out["procs"][str(params[1])] = figures
        else:
            out["one_unit"] = figures
    run.finish(out)


if __name__ == "__main__":
    main()
