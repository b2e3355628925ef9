"""Workers on several hosts share one Postgres store (needs: postgres). A worker crashes
holding page 3; one supervisor pass sees its session's liveness lock gone and orphans the
page at once; another worker (on any host) takes it from its checkpoint and finishes the
queue; the CLI reads the same store by URL."""

import json
import os
import signal
import subprocess
import sys

import dhp

SERVER = os.environ.get("DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")

if sys.argv[1:2] == ["worker"]:  # `python many_hosts.py worker URL NAME`: one host's worker
    store = dhp.Store(sys.argv[2])
    while (ctx := dhp.claim_next(store, ["pages"], sys.argv[3])) is not None:
        with ctx:
            page = ctx.inputs["page"]
            ctx.checkpoint({"page": page, "fetched": True})
            if page == 3 and sys.argv[3] == "crashy":
                os.kill(os.getpid(), signal.SIGKILL)  # dies holding page 3
            ctx.complete({"page": page})
    sys.exit(0)

schema = f"example_{os.getpid()}"  # a schema of its own for each run of this example
url = f"{SERVER}?schema={schema}"
store = dhp.Store(url)  # created on first use
pages = [dhp.dispatch(store, "pages", {"page": n}, {}) for n in range(1, 7)]

crashy = subprocess.run([sys.executable, __file__, "worker", url, "crashy"])
print("crashy worker killed:", crashy.returncode == -signal.SIGKILL)
status = dhp.status(store, pages[2])
print("page 3 is", status["state"], "by", status["owner"])

sup = subprocess.run(["dhp-supervisor", "--store", url, "--id", "sup-1", "--once"],
                     capture_output=True, text=True)
print("supervisor:", [json.loads(line)["action"] for line in sup.stdout.splitlines()])

subprocess.run([sys.executable, __file__, "worker", url, "steady"], check=True)
print("page 3 checkpoints by fence:", [c["fence"] for c in dhp.checkpoints(store, pages[2])])
ls = subprocess.run(["dhp", "ls", "--store", url, "--state", "completed", "--json"],
                    capture_output=True, text=True, check=True)
print("dhp ls --state completed:", ls.stdout.count('"handoff_id"'), "handoffs")
store.close()

import psycopg  # noqa: E402 (cleanup: drop this run's schema)

with psycopg.connect(SERVER, autocommit=True) as conn:
    conn.execute(f"DROP SCHEMA {schema} CASCADE")
