"""DHP's metrics through the OpenTelemetry metrics API, and a Prometheus text endpoint.

Two kinds. Counted where the work happens, in every process that runs operations (workers,
dispatchers): operations by outcome (checkpoints among them), fence bumps, failed attempts
by error type, budget refusals by cap; each operation's latency is its span's. Read from the
store on each collection, in any process that calls `observe_store` (the dashboard, `dhp
metrics --serve`): handoffs by state, live and expired leases, DLQ depth, and the takeover
delay (time from an owner's loss to the next take) of every take any process made, followed
in the store's lease journal (dhp.core.journal). Names are in docs/guide/observing.md.

Nothing is imported until the application has imported OpenTelemetry (tracing.configured).
"""

from __future__ import annotations

import functools
import sys
import threading
import time
from typing import Any

from dhp.core import machine

METER = "dhp"
TAKES = {"claim", "recover", "claim_next"}
# Seconds: from the sub-second takeover of a dead owner to a lease or two gone by unseen.
TAKEOVER_BUCKETS_S = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
ERROR_TYPES = 50  # distinct dhp.error_type labels per process (bounded cardinality)
_error_types: set[str] = set()
_instruments: dict[str, Any] = {}
_lock = threading.Lock()


def _meter_instruments() -> dict[str, Any]:
    """Created on first use, so a MeterProvider set up after `import dhp` is the one used."""
    from opentelemetry import metrics

    with _lock:
        if not _instruments:
            meter = metrics.get_meter(METER)
            _instruments.update(
                operations=meter.create_counter(
                    "dhp.operations", unit="{operation}",
                    description="SDK operations by dhp.operation and dhp.outcome (ok or the "
                                "error code); checkpoints/s is the rate of operation "
                                "checkpoint, outcome ok"),
                fence_bumps=meter.create_counter(
                    "dhp.fence_bumps", unit="{take}",
                    description="claims and recoveries that took a handoff (each bumps its "
                                "fence)"),
                failed_attempts=meter.create_counter(
                    "dhp.failed_attempts", unit="{attempt}",
                    description="attempts released as failed, by the error's type name "
                                "(dhp.error_type; the first ERROR_TYPES names a process "
                                "sees, then \"other\")"),
                budget_refusals=meter.create_counter(
                    "dhp.budget_refusals", unit="{refusal}",
                    description="writes refused by a budget cap (dhp.cap); each parks the "
                                "handoff in the DLQ"))
    return _instruments


@functools.cache
def _labels(operation: str, outcome: str) -> dict[str, str]:
    return {"dhp.operation": operation, "dhp.outcome": outcome}  # built once per pair


def meter_provider() -> Any:
    """The global MeterProvider, if the application has imported the metrics API."""
    found = sys.modules.get("opentelemetry.metrics")
    return None if found is None else found.get_meter_provider()


def count(operation: str, attributes: dict, error: Any = None, n: int = 1) -> None:
    """Record `n` finished operations (called by the tracing decorators): one counter add;
    the rare takes and refusals add one more."""
    found = _instruments or _meter_instruments()
    found["operations"].add(n, _labels(operation, "ok" if error is None else error.code))
    if error is None and operation in TAKES and attributes.get("dhp.handoff_id"):
        found["fence_bumps"].add(1)
    if error is None and attributes.get("dhp.error_type"):
        found["failed_attempts"].add(1, {"dhp.error_type": error_type(
            attributes["dhp.error_type"])})
    if error is not None and error.code == "budget_exceeded":
        cap = (error.details or {}).get("cap") if isinstance(error.details, dict) else None
        found["budget_refusals"].add(1, {"dhp.cap": cap or _cap_named(str(error))})


def error_type(name: str) -> str:
    """The label of an error type: its name while fewer than ERROR_TYPES names are in use,
    else "other", so a flood of generated class names cannot grow the series without end."""
    with _lock:
        if name in _error_types or len(_error_types) < ERROR_TYPES:
            _error_types.add(name)
            return name
    return "other"


def _cap_named(message: str) -> str:
    for cap in ("max_attempts", "max_steps", "max_spend", "max_wall_clock_s"):
        if cap in message:
            return cap
    return "unknown"


def store_counts(store: Any) -> dict[str, Any]:
    """Handoffs by effective state, live and expired leases, DLQ depth: one read of the
    store (every handoff's record; no checkpoints)."""
    with store.transaction(write=False) as tx:
        now = store.now()
        records = [row["record"] for row in tx.select()]
    states = dict.fromkeys(machine.STATES, 0)
    live = expired = 0
    for record in records:
        states[machine.effective_state(record, now)] += 1
        if record["state"] == "claimed":
            if record["lease_expires_at"] > now:
                live += 1
            else:
                expired += 1
    return {"states": states, "leases": {"live": live, "expired": expired},
            "dlq": states["dead_lettered"]}


def observe_store(store: Any, max_age_s: float = 2.0) -> None:
    """Register gauges read from `store` at each collection (cached `max_age_s`, so several
    gauges in one scrape cost one read). Needs the `otel` extra."""
    from opentelemetry import metrics
    from opentelemetry.metrics import Observation

    cache: dict[str, Any] = {"at": -1e9, "value": None}
    meter = metrics.get_meter(METER)
    takeovers = meter.create_histogram(
        "dhp.takeover.delay", unit="s",
        description="seconds from the instant a handoff's owner was known lost (dhp.lost: "
                    "lease_expired at its expiry, owner_dead or no_progress when a probe or "
                    "the supervisor found it) to the take that ended it, for every take "
                    "journaled in the store",
        explicit_bucket_boundaries_advisory=TAKEOVER_BUCKETS_S)
    follower = JournalFollower()

    def counts() -> dict[str, Any]:
        if time.monotonic() - cache["at"] > max_age_s:
            cache.update(at=time.monotonic(), value=store_counts(store))
            # Recorded while the collection runs its callbacks, before it reads the
            # histogram: a collection includes every take journaled before it.
            for entry in follower.new_takeovers(store):
                takeovers.record(entry["lost_s"], {"dhp.lost": entry["how"]})
        return cache["value"]

    meter.create_observable_gauge(
        "dhp.handoffs", unit="{handoff}", description="handoffs by effective state (dhp.state)",
        callbacks=[lambda options: [Observation(n, {"dhp.state": s})
                                    for s, n in counts()["states"].items()]])
    meter.create_observable_gauge(
        "dhp.leases", unit="{lease}", description="claimed handoffs by lease (dhp.lease: live "
                                                  "or expired)",
        callbacks=[lambda options: [Observation(n, {"dhp.lease": k})
                                    for k, n in counts()["leases"].items()]])
    meter.create_observable_gauge(
        "dhp.dlq.depth", unit="{handoff}", description="handoffs in the dead-letter queue",
        callbacks=[lambda options: [Observation(counts()["dlq"])]])


class JournalFollower:
    """Reads each journal entry once, in id order. A Postgres writer may commit an id after
    a higher one is visible, so each read starts LOOKBACK ids behind the highest seen and
    skips the ids already seen. A call reads at most PAGES pages: the journal a large store
    already holds is caught up with over the first collections, at a bounded cost each."""

    LOOKBACK = 256
    PAGE = 5000
    PAGES = 4

    def __init__(self) -> None:
        self.highest = 0
        self.seen: set[int] = set()

    def new_takeovers(self, store: Any) -> list[dict]:
        """The takes journaled since the last call that ended a lost owner's lease."""
        out = []
        with store.transaction(write=False) as tx:
            for _page in range(self.PAGES):
                found = tx.lease_events_after(max(0, self.highest - self.LOOKBACK), self.PAGE)
                fresh = [e for e in found if e["id"] not in self.seen]
                for entry in fresh:
                    self.seen.add(entry["id"])
                    self.highest = max(self.highest, entry["id"])
                    if entry["lost_s"] is not None:
                        out.append(entry)
                if len(found) < self.PAGE or not fresh:
                    break
        self.seen = {i for i in self.seen if i > self.highest - self.LOOKBACK}
        return out


def prometheus_reader() -> Any:
    """Make the global MeterProvider export to Prometheus (prometheus_client's registry);
    returns the reader. Needs the `otel` extra."""
    from opentelemetry import metrics
    from opentelemetry.exporter.prometheus import PrometheusMetricReader
    from opentelemetry.sdk.metrics import MeterProvider

    reader = PrometheusMetricReader()
    metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
    return reader
