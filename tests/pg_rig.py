"""A real two-server PostgreSQL 15 rig: a primary and a synchronous streaming standby, each
its own `postgres` process in a temporary folder, and the failover docs/guide/
high-availability.md describes (SIGKILL of the primary's processes, `pg_ctl promote`).

Used by tests/test_store_ha.py and bench/store_failover.py. It follows the page's steps one
by one; tests/test_store_ha.py checks that the page lists every setting below. Optionally the
standby reaches its primary through tests/delay_proxy.py, an emulated round trip, to measure
what a standby in another region costs each acknowledged write. (tc netem in a network
namespace would be the usual tool; this machine's kernel has no sch_netem, so the delay is
made in user space, on the replication connection, which is the one a commit waits for.)

Nothing here touches any other server: the ports are free ones, the folders temporary, and
as root every server command runs as the unprivileged user `postgres`."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

STANDBY_NAME = "standby1"
# The primary's settings for DHP-SRV-011 (docs/guide/high-availability.md, step 1).
PRIMARY_SETTINGS = {
    "wal_level": "replica",
    "synchronous_commit": "on",
    "synchronous_standby_names": f"'FIRST 1 ({STANDBY_NAME})'",
    "fsync": "on",
    "full_page_writes": "on",
    "max_wal_senders": "5",
    "wal_sender_timeout": "'5s'",
}
# The standby's own settings (step 3). It starts with no synchronous standby of its own: once
# promoted it runs alone until a new standby is attached (the page's "availability" choice).
STANDBY_SETTINGS = {
    "hot_standby": "on",
    "wal_receiver_timeout": "'5s'",
    "wal_retrieve_retry_interval": "'200ms'",
    "synchronous_standby_names": "''",
}
PROXY = Path(__file__).resolve().parent / "delay_proxy.py"


def missing() -> str | None:
    """Why the rig cannot run here, or None."""
    for tool in ("initdb", "pg_ctl", "pg_basebackup", "postgres"):
        if shutil.which(tool) is None:
            return f"{tool} is not on PATH (PostgreSQL 15 server binaries)"
    if os.geteuid() == 0:
        try:
            import pwd
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root without a `postgres` user to run the servers as"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PgPair:
    """A primary and a synchronous standby. `rtt_ms`: the standby's replication connection
    goes through a proxy that delays it by that round trip."""

    def __init__(self, rtt_ms: float | None = None):
        self.rtt_ms = rtt_ms
        self.root = Path(tempfile.mkdtemp(prefix="dhp-ha-"))
        self.primary_dir, self.standby_dir = self.root / "primary", self.root / "standby"
        self.primary_port, self.standby_port = free_port(), free_port()
        self.standby_host = "127.0.0.1"
        # Where the standby reaches the primary: directly, or through the delaying proxy.
        self.upstream_port = free_port() if rtt_ms is not None else self.primary_port
        self.proxy: subprocess.Popen | None = None
        self.as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        self.promoted = False

    # --- what a store URL names ---

    def url(self, db: str = "dhp") -> str:
        """The multi-host URL the docs give: whichever of the two accepts writes."""
        return (f"postgresql://postgres@127.0.0.1:{self.primary_port},"
                f"{self.standby_host}:{self.standby_port}/{db}"
                "?target_session_attrs=read-write&connect_timeout=2")

    def primary_url(self, db: str = "dhp") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.primary_port}/{db}"

    def standby_url(self, db: str = "dhp") -> str:
        return f"postgresql://postgres@{self.standby_host}:{self.standby_port}/{db}"

    # --- life cycle ---

    def __enter__(self) -> PgPair:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self, *cmd: str) -> str:
        done = subprocess.run([*self.as_user, *cmd], capture_output=True, text=True,
                              timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed: {done.stdout}{done.stderr}")
        return done.stdout

    def start(self) -> None:
        if self.as_user:
            shutil.chown(self.root, "postgres")
        # Step 1: the primary, with synchronous replication to one named standby.
        self._run("initdb", "-D", str(self.primary_dir), "-U", "postgres", "--auth=trust",
                  "--no-instructions", "-N")
        self._configure(self.primary_dir, self.primary_port, "127.0.0.1", PRIMARY_SETTINGS)
        # (initdb's pg_hba.conf already lets 127.0.0.1 replicate; elsewhere add a line
        # `host replication postgres STANDBY/32 scram-sha-256`.)
        self._pg_ctl(self.primary_dir, "start")
        if self.rtt_ms is not None:
            self.proxy = subprocess.Popen(
                [sys.executable, str(PROXY), str(self.upstream_port), str(self.primary_port),
                 str(self.rtt_ms / 2)], stdout=subprocess.PIPE, text=True)
            assert self.proxy.stdout.readline() == "ready\n"
        # No standby yet to wait for: this one commit waits for the local flush only.
        self._sql(self.primary_url("postgres") + "?options=-csynchronous_commit%3Dlocal",
                  "CREATE DATABASE dhp")
        # Step 2: the standby, a base backup of the primary that follows its WAL.
        self._run("pg_basebackup", "-h", "127.0.0.1", "-p", str(self.primary_port),
                  "-U", "postgres", "-D", str(self.standby_dir), "-X", "stream", "-R",
                  "--checkpoint=fast", "-N")
        # Step 3: its name, by which the primary waits for it, and its own port. -R wrote
        # primary_conninfo into postgresql.auto.conf, which wins over postgresql.conf: the
        # name goes there (a later line wins).
        self._configure(self.standby_dir, self.standby_port, self.standby_host,
                        STANDBY_SETTINGS)
        with open(self.standby_dir / "postgresql.auto.conf", "a") as auto:
            auto.write(f"primary_conninfo = 'host=127.0.0.1 "
                       f"port={self.upstream_port} user=postgres "
                       f"application_name={STANDBY_NAME}'\n")
        self._pg_ctl(self.standby_dir, "start")
        # Step 4: check that the primary sees it as its synchronous standby.
        self.wait_sync()

    def _configure(self, data: Path, port: int, listen: str, settings: dict) -> None:
        lines = {"port": str(port), "listen_addresses": f"'{listen}'",
                 "unix_socket_directories": f"'{self.root}'", "max_connections": "100",
                 "shared_buffers": "'32MB'", **settings}
        with open(data / "postgresql.conf", "a") as conf:
            conf.write("".join(f"{k} = {v}\n" for k, v in lines.items()))

    def _pg_ctl(self, data: Path, action: str) -> None:
        self._run("pg_ctl", "-D", str(data), "-l", str(data.parent / f"{data.name}.log"),
                  "-w", "-t", "60", action)

    @staticmethod
    def _sql(url: str, sql: str) -> list:
        import psycopg

        with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
            cur = conn.execute(sql)
            return cur.fetchall() if cur.description else []

    def wait_sync(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            rows = self._sql(self.primary_url("postgres"),
                             "SELECT application_name, sync_state FROM pg_stat_replication")
            if (STANDBY_NAME, "sync") in rows:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the standby never became synchronous: {rows}")
            time.sleep(0.1)

    # --- the failure and the failover ---

    def kill_primary(self) -> float:
        """SIGKILL the primary's postmaster and every process of it at once, as the loss of
        its machine would; returns the monotonic time of the kill."""
        pid = int((self.primary_dir / "postmaster.pid").read_text().split()[0])
        children = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True,
                                  text=True).stdout.split()
        at = time.monotonic()
        for victim in [pid, *map(int, children)]:
            try:
                os.kill(victim, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return at

    def stop_standby(self) -> None:
        """The standby goes away (cleanly): the primary's commits now wait for it."""
        self._pg_ctl(self.standby_dir, "stop")

    def start_standby(self) -> None:
        self._pg_ctl(self.standby_dir, "start")
        self.wait_sync()

    def promote(self) -> None:
        """Step 5 of the failover: the standby becomes the primary (`pg_ctl promote -w`
        returns once it accepts writes)."""
        try:
            self._pg_ctl(self.standby_dir, "promote")
        except RuntimeError as exc:
            log = (self.root / "standby.log").read_text(errors="replace")
            raise RuntimeError(f"{exc}\nstandby log, last lines:\n"
                               + "\n".join(log.splitlines()[-15:])) from None
        self.promoted = True

    def stop(self) -> None:
        for data in (self.standby_dir, self.primary_dir):
            if (data / "postmaster.pid").exists():
                subprocess.run([*self.as_user, "pg_ctl", "-D", str(data), "-m", "immediate",
                                "-w", "stop"], capture_output=True, timeout=60)
        if self.proxy is not None:
            self.proxy.kill()
            self.proxy.wait()
        shutil.rmtree(self.root, ignore_errors=True)
