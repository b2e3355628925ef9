"""DBOS Transact (pinned by tools/dbos_venv.sh) beside DHP on the same Postgres: run with the
DBOS venv's python by bench/fleet_pg.py; never imports dhp.

    side_dbos.py units URL N PROCS   N small units (a workflow of one step returning 100 B),
                                     enqueued by a client once PROCS worker processes are
                                     up; prints units/s and the server CPU they cost
    side_dbos.py worker URL ID       one worker process (executor ID), until stdin closes
    side_dbos.py steps URL N         one unit of N steps of 100 B each, run in this process;
                                     prints steps/s and the server CPU per step

A unit of DBOS's is the same work as a unit of DHP's in fleet_pg.py: taken from a queue,
one durable step recorded, the result recorded."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import psycopg
from _common import backend_cpu_s, db_counters, per_unit

QUEUE = "units"


def worker(url: str, executor: str) -> None:
    from dbos import DBOS

    DBOS(config={"name": "dhpbench", "system_database_url": url, "executor_id": executor})
    @DBOS.step()
    def step(i: int) -> str:
        return f"{i:0100d}"

    @DBOS.workflow(name="unit")
    def unit(i: int) -> str:
        return step(i)

    DBOS.launch()
    DBOS.register_queue(QUEUE)  # persisted in the system database: after launch
    print("ready", flush=True)
    sys.stdin.read()
    DBOS.destroy()


def units(url: str, n: int, procs: int) -> None:
    from dbos import DBOSClient

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP SCHEMA IF EXISTS dbos CASCADE")
    workers = [subprocess.Popen([sys.executable, "-s", __file__, "worker", url, f"w{k}"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
               for k in range(procs)]
    for w in workers:
        assert w.stdout.readline().strip() == "ready"
    client = DBOSClient(system_database_url=url)
    with psycopg.connect(url, autocommit=True) as conn:
        counters = db_counters(conn)
        cpu0 = backend_cpu_s(conn)
        start = time.perf_counter()
        for i in range(n):
            client.enqueue({"queue_name": QUEUE, "workflow_name": "unit"}, i)
        while conn.execute("SELECT count(*) FROM dbos.workflow_status "
                           "WHERE status = 'SUCCESS'").fetchone()[0] < n:
            time.sleep(0.05)  # the poll is server work too: seldom
        wall = time.perf_counter() - start
        cpu = backend_cpu_s(conn) - cpu0
    client.destroy()
    for w in workers:
        w.stdin.close()
        w.wait(30)
    with psycopg.connect(url.split("?")[0], autocommit=True) as conn:
        work = per_unit(counters, db_counters(conn), n)
    print(json.dumps({"wall_s": wall, "units_per_s": n / wall, "server_cpu_ms_per_unit":
                      1000 * cpu / n, "per_unit": work}), flush=True)


def steps(url: str, n: int) -> None:
    from dbos import DBOS

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP SCHEMA IF EXISTS dbos CASCADE")
    DBOS(config={"name": "dhpbench", "system_database_url": url})

    @DBOS.step()
    def step(i: int) -> str:
        return f"{i:0100d}"

    @DBOS.workflow(name="long")
    def long(n: int) -> int:
        for i in range(n):
            step(i)
        return n

    DBOS.launch()
    with psycopg.connect(url, autocommit=True) as conn:
        cpu0 = backend_cpu_s(conn)
        start = time.perf_counter()
        long(n)
        wall = time.perf_counter() - start
        cpu = backend_cpu_s(conn) - cpu0
    DBOS.destroy()
    print(json.dumps({"wall_s": wall, "steps_per_s": n / wall,
                      "server_cpu_ms_per_step": 1000 * cpu / n}), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "worker":
        worker(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "steps":
        steps(sys.argv[2], int(sys.argv[3]))
    else:
        units(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
