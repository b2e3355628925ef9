"""The harness: scenarios of adapter processes, every request and fault recorded in the history.

A `Scenario` owns a fresh data folder and the processes that share it. `Proc.call()` sends one
request and records `invoke` then `ok` / `fail` / `info`; `Scenario.kill()` / `stop()` /
`cont()` / `restart()` record faults. Every response is checked against the adapter schemas as
it arrives, so a malformed answer is reported with the requirement it breaks.
"""

from __future__ import annotations

import signal
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import ADAPTER_PROTOCOL, oracle
from .history import History
from .manifest import Impl, resolve
from .process import AdapterError, AdapterProcess, ProcessDied, Timeout

ERROR_REQUIREMENT = {"code": "DHP-ERR-002", "definite": "DHP-ERR-003"}


@dataclass
class Reply:
    """The outcome of one request as the kit saw it."""

    op: str
    ok: bool
    data: Any = None
    error: dict | None = None
    unknown: str | None = None  # why the outcome is unknown (info event)
    events: list[int] = field(default_factory=list)

    @property
    def code(self) -> str | None:
        return self.error.get("code") if self.error else None

    def __repr__(self) -> str:
        if self.unknown:
            return f"<{self.op}: unknown ({self.unknown})>"
        if self.ok:
            return f"<{self.op}: ok {self.data!r}>"
        return f"<{self.op}: {self.code}: {self.error.get('message')}>"


class Proc:
    """One adapter process of a scenario, acting as one worker (or supervisor) at a time."""

    def __init__(self, scenario: Scenario, name: str):
        self.scenario, self.name = scenario, name
        self.incarnation = 0
        self.clock = 0.0  # this process's manual store clock, when the scenario uses one
        harness = scenario.harness
        self.process = AdapterProcess(
            f"{scenario.name}/{name}", harness.impl.argv,
            harness.workdir / "stderr" / scenario.name / f"{name}.log", env=harness.impl.env,
            cwd=harness.impl.cwd)

    @property
    def worker(self) -> str:
        """The worker id this incarnation uses: a restart is a new worker."""
        return f"{self.name}.{self.incarnation}"

    def start(self, handshake: bool = True) -> None:
        self.incarnation += 1
        self.clock = 0.0
        self.process.start()
        if handshake:
            self.handshake()

    def handshake(self) -> None:
        """hello (checked against schemas/adapter-hello.json), then init."""
        harness = self.scenario.harness
        hello = self.request("hello", {"protocols": [ADAPTER_PROTOCOL], "dhp": "1.0"})
        if not hello.ok:
            raise AdapterError(f"{self.process.name}: no answer to hello: {hello.unknown}"
                               if hello.unknown else
                               f"{self.process.name}: hello was refused: {hello.error}")
        problems = oracle.schema_errors("adapter-hello", hello.data)
        if problems:
            raise AdapterError(f"{self.process.name}: hello data is not valid against "
                               f"schemas/adapter-hello.json (DHP-ADP-003): {problems}")
        harness.hello = harness.hello or hello.data
        args = {"data": str(self.scenario.data), "ttl": self.scenario.ttl,
                "heartbeat_interval": None, "process": self.name}
        if self.scenario.clock != "system":
            args["clock"] = self.scenario.clock
        init = self.request("init", args)
        if not init.ok:
            raise AdapterError(f"{self.process.name}: init failed: {init.unknown or init.error}")

    def request(self, op: str, args: dict, timeout: float | None = None,
                raw_args: str | None = None) -> Reply:
        return self.wait(self.send(op, args, raw_args), timeout)

    call = request

    def advance_to(self, at: float) -> Reply | None:
        """Move this process's manual clock forward to `at` (DHP-ADP-013); None if it is
        already there."""
        if at <= self.clock:
            return None
        reply = self.request("advance_clock", {"seconds": at - self.clock})
        if reply.ok:
            self.clock = at
        return reply

    def send(self, op: str, args: dict, raw_args: str | None = None) -> tuple:
        """Send without waiting (to fault the process mid-request); pair with wait()."""
        history = self.scenario.harness.history
        extra = {"raw_args": raw_args} if raw_args is not None else {}
        invoke = history.add("invoke", scenario=self.scenario.name, process=self.name,
                             op=op, args=args, **extra)
        return self.process.send(op, args, raw_args), invoke

    def wait(self, handle: tuple, timeout: float | None = None) -> Reply:
        pending, invoke = handle
        scenario, history = self.scenario, self.scenario.harness.history
        common = {"scenario": scenario.name, "process": self.name, "op": invoke["op"],
                  "invoke": invoke["index"]}
        try:
            response = pending.wait(timeout or scenario.harness.timeout)
        except (ProcessDied, Timeout) as exc:
            if not isinstance(exc, ProcessDied) and not scenario.expect_silence(self, invoke):
                scenario.harness.adapter_errors.append(str(exc))
            event = history.add("info", why=str(exc), **common)
            return Reply(invoke["op"], False, unknown=str(exc),
                         events=[invoke["index"], event["index"]])
        except AdapterError as exc:
            scenario.harness.adapter_errors.append(str(exc))
            event = history.add("info", why=str(exc), **common)
            return Reply(invoke["op"], False, unknown=str(exc),
                         events=[invoke["index"], event["index"]])
        self.scenario.harness.check_wire(response, invoke)
        if response.get("ok") is True:
            event = history.add("ok", data=response.get("data"), **common)
            return Reply(invoke["op"], True, data=response.get("data"),
                         events=[invoke["index"], event["index"]])
        error = response.get("error") if isinstance(response.get("error"), dict) else {}
        event = history.add("fail", error=error, **common)
        return Reply(invoke["op"], False, error=error, events=[invoke["index"], event["index"]])


class Scenario:
    """A fresh data folder and the adapter processes that share it."""

    def __init__(self, harness: Harness, name: str, ttl: float, clock: str = "system"):
        self.harness, self.name, self.ttl, self.clock = harness, name, ttl, clock
        self.data = harness.workdir / "data" / name
        self.data.mkdir(parents=True, exist_ok=True)
        self.procs: dict[str, Proc] = {}
        self.stopped: set[str] = set()
        self.facts: dict[str, Any] = {}  # what checkers need: ttl, budgets, schemas
        self.server: Any = None  # the MCP profile's HTTP server of this scenario (mcp_http)
        self.params: dict[str, Any] = {}  # how the MCP profile reaches it (mcp_http)

    def spawn(self, name: str, handshake: bool = True) -> Proc:
        proc = Proc(self, name)
        self.procs[name] = proc
        self.fault("start", proc)
        proc.start(handshake)
        return proc

    def fault(self, kind: str, proc: Proc, detail: str = "") -> None:
        self.harness.history.add(kind, scenario=self.name, process=proc.name,
                                 worker=proc.worker if proc.incarnation else None,
                                 detail=detail or f"{kind} {proc.name}")

    def kill(self, proc: Proc) -> None:
        self.fault("kill", proc, f"SIGKILL {proc.name} (worker {proc.worker})")
        self.stopped.discard(proc.name)
        proc.process.kill()

    def stop(self, proc: Proc) -> None:
        self.fault("stop", proc, f"SIGSTOP {proc.name} (worker {proc.worker})")
        self.stopped.add(proc.name)
        proc.process.signal(signal.SIGSTOP)

    def cont(self, proc: Proc) -> None:
        self.fault("cont", proc, f"SIGCONT {proc.name} (worker {proc.worker})")
        self.stopped.discard(proc.name)
        proc.process.signal(signal.SIGCONT)

    def restart(self, proc: Proc) -> None:
        """Start the process again on the same data (a new incarnation, a new worker id)."""
        if proc.process.alive():
            self.kill(proc)
        self.fault("start", proc, f"restart {proc.name} on the same data")
        proc.start()

    def expect_silence(self, proc: Proc, since: dict | None = None) -> bool:
        """Whether the kit itself kept `proc` from answering: it is paused now, or was paused
        at some time after the request `since` was sent (the pause ate into its time)."""
        if proc.name in self.stopped:
            return True
        if since is None:
            return False
        later = self.harness.history.events[since["index"]:]
        return any(e["type"] == "stop" and e.get("process") == proc.name
                   and e.get("scenario") == self.name for e in later)

    def events(self) -> list[dict]:
        return self.harness.history.of(self.name)

    def close(self) -> None:
        threads = [threading.Thread(target=p.process.close) for p in self.procs.values()]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if self.server is not None:
            self.server.stop()


class Harness:
    def __init__(self, impl: str | Impl, workdir: Path, *, timeout: float = 10.0):
        self.impl = impl if isinstance(impl, Impl) else resolve(impl)
        self.workdir = workdir
        self.timeout = timeout
        self.history = History()
        self.hello: dict | None = None
        self.adapter_errors: list[str] = []   # protocol breakage: the run cannot be trusted
        self.wire_findings: list[dict] = []   # malformed responses or errors (ERR-*, ADP-*)
        self.notes: list[str] = []  # what the summary must say beyond the results
        self.mcp_template: list[str] | None = None  # the MCP profile's server command
        self.mcp_servers: Any = None  # mcp_http.Servers: fills in the MCP profile's scenarios
        self._count = 0
        self._count_lock = threading.Lock()

    @property
    def features(self) -> set[str]:
        return set((self.hello or {}).get("features", []))

    def scenario(self, name: str, ttl: float = 1.0, clock: str = "system",
                 server: dict | None = None) -> Scenario:
        """`server`: placeholders of the MCP profile's server command this scenario sets."""
        with self._count_lock:
            self._count += 1
            number = self._count
        sc = Scenario(self, f"{number:03d}-{name}", ttl, clock)
        if self.mcp_servers is not None:
            self.mcp_servers.prepare(sc, server)
        return sc

    def check_wire(self, response: dict, invoke: dict) -> None:
        """Validate a response against schemas/adapter-response.json and its error against
        schemas/error.json; record a finding naming the broken requirement."""
        problems = oracle.schema_errors("adapter-response", response)
        if not problems:
            return
        requirement = "DHP-ADP-002"
        error = response.get("error")
        if isinstance(error, dict):
            if oracle.schema_errors("error", error):
                requirement = "DHP-ERR-001"
                keys = {"code", "message", "definite"}
                if keys <= error.keys():
                    codes = oracle.validator("error").schema["properties"]["code"]["enum"]
                    requirement = "DHP-ERR-002" if error["code"] not in codes else "DHP-ERR-003"
        self.wire_findings.append({"requirement": requirement, "events": [invoke["index"]],
                                   "response": response, "problems": problems[:5]})
