"""Spans and metrics of every SDK operation: one OpenTelemetry trace per handoff, across
every attempt and every host.

A handoff's trace is named by the handoff itself: its trace id is the first 128 bits of the
handoff id (already a SHA-256), its root a remote parent span whose id is the next 64 bits.
Every process that touches the handoff (the dispatcher, each worker, a supervisor, a peer
resuming from shipped checkpoints) joins the same trace without storing or shipping any
trace context, on every backend. An operation called inside a span of the caller's own keeps
that parent and links to the handoff's trace instead, so neither trace loses it.

Without opentelemetry installed, `traced` returns the function unchanged: zero cost. With it
installed, nothing is imported until the application itself has imported OpenTelemetry (it
cannot have set up a provider before), so the command line starts without it. Each traced
call also counts in the metrics (dhp.observe.metrics).
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import sys
import time
from collections.abc import Callable
from typing import Any

from dhp.core.errors import DHPError
from dhp.observe import metrics

TRACER = "dhp"
Attributes = Callable[[tuple, dict, Any], dict]


@functools.cache
def installed() -> bool:
    """Whether the `otel` extra is there (looked up once, imported only when used)."""
    try:
        return importlib.util.find_spec("opentelemetry") is not None
    except (ImportError, ValueError):
        return False


def handoff_span_context(handoff_id: str) -> Any:
    """The remote root of a handoff's trace, derived from its id alone."""
    from opentelemetry import trace
    from opentelemetry.trace import SpanContext

    digest = handoff_id.removeprefix("sha256:")
    return SpanContext(trace_id=int(digest[:32], 16), span_id=int(digest[32:48], 16) or 1,
                       is_remote=True, trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED))


@functools.cache
def _tracer() -> Any:
    """Once per process: before a provider is set this is the API's proxy, which follows the
    provider set later."""
    from opentelemetry import trace

    return trace.get_tracer(TRACER)


def configured() -> bool:
    """Whether an OpenTelemetry SDK is set up (a tracer or meter provider other than the API's
    proxy); until then every operation skips tracing at the cost of this check."""
    if "opentelemetry.trace" not in sys.modules and "opentelemetry.metrics" not in sys.modules:
        return False  # never imported by the application, so never configured
    from opentelemetry import trace

    providers = (trace.get_tracer_provider(), metrics.meter_provider())
    return any(not type(p).__name__.lstrip("_").startswith(("Proxy", "NoOp"))
               for p in providers if p is not None)


def traced(operation: str, attributes: Attributes, *, quiet_when_none: bool = False) -> Callable:
    """Decorator: a span `dhp.<operation>` for each call, in the trace of the handoff named
    by `attributes(args, kwargs, result)` (result is None when the call raised). With
    `quiet_when_none`, a call that returns None makes no span and counts nothing: an idle
    worker's claim_next wakes every few seconds, and a root span per wake would bury the
    handoffs' traces."""
    def wrap(fn: Callable) -> Callable:
        if not installed():
            return fn

        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> Any:
            if not configured():
                return fn(*args, **kwargs)
            started = time.time_ns()
            try:
                result = fn(*args, **kwargs)
            except DHPError as exc:
                found = attributes(args, kwargs, None)
                emit(operation, started, found, exc)
                metrics.count(operation, found, exc)
                raise
            if result is None and quiet_when_none:
                return result
            found = attributes(args, kwargs, result)
            emit(operation, started, found)
            metrics.count(operation, found)
            return result
        return call
    return wrap


# Checkpoints are the hot path: a span each would cost a fifth of a checkpoint. The
# checkpoints of one lease are reported as one span per window instead (its attributes give
# the first and last seq and the count); 0 makes it one span per checkpoint. A process killed
# mid-window loses that window's span, never a checkpoint.
CHECKPOINT_WINDOW_S = float(os.environ.get("DHP_TRACE_CHECKPOINT_WINDOW", "1"))


def traced_checkpoint(fn: Callable) -> Callable:
    """Decorator for TaskContext.checkpoint: windowed spans and counts (see above)."""
    if not installed():
        return fn

    @functools.wraps(fn)
    def call(ctx: Any, *args: Any, **kwargs: Any) -> Any:
        if not configured():
            return fn(ctx, *args, **kwargs)
        started = time.time_ns()
        try:
            record = fn(ctx, *args, **kwargs)
        except DHPError as exc:
            flush_checkpoints(ctx)
            found = _lease(ctx)
            emit("checkpoint", started, found, exc)
            metrics.count("checkpoint", found, exc)
            raise
        window = ctx.__dict__.setdefault("_trace_window", {"started": started, "count": 0,
                                                           "first": record["seq"]})
        window["count"] += 1
        window["last"] = record["seq"]
        if time.time_ns() - window["started"] >= CHECKPOINT_WINDOW_S * 1e9:
            flush_checkpoints(ctx)
        return record
    return call


def flush_checkpoints(ctx: Any) -> None:
    """Report the lease's pending checkpoints (before its complete, release or loss)."""
    window = ctx.__dict__.pop("_trace_window", None)
    if window is None:
        return
    found = dict(_lease(ctx), **{"dhp.seq": window["last"], "dhp.seq.first": window["first"],
                                 "dhp.checkpoints": window["count"]})
    emit("checkpoint", window["started"], found)
    metrics.count("checkpoint", found, n=window["count"])


def emit(operation: str, started_ns: int, attributes: dict, error: DHPError | None = None):
    """Record one finished operation as a span (a no-op until OpenTelemetry is set up)."""
    if not configured():
        return
    from opentelemetry import trace
    from opentelemetry.trace import Link, NonRecordingSpan, Status, StatusCode

    attributes = {k: v for k, v in attributes.items() if v is not None}
    handoff_id = attributes.get("dhp.handoff_id")
    caller = trace.get_current_span().get_span_context()
    context, links = None, []
    if handoff_id is not None:
        root = handoff_span_context(handoff_id)
        if caller.is_valid and caller.trace_id != root.trace_id:
            links = [Link(root, {"dhp.link": "handoff"})]  # keep the caller's parent
        elif not caller.is_valid:
            context = trace.set_span_in_context(NonRecordingSpan(root))
    span = _tracer().start_span(f"dhp.{operation}", context=context, links=links,
                                start_time=started_ns, attributes=attributes)
    if error is not None:
        span.set_attribute("dhp.error.code", error.code)
        span.set_status(Status(StatusCode.ERROR, str(error)))
    span.end()


# --- the transport: frames shipped and ingested ---------------------------------------------

_HANDOFF_ID = re.compile(r"^sha256:[0-9a-f]{64}$")


def transport(operation: str, frames: list[dict], **attributes: Any) -> None:
    """Spans `dhp.<operation>` (transport.ship: queued until answered; transport.ingest:
    verified and stored) of a batch of frames, one per handoff, in that handoff's trace.
    Each frame is {"handoff_id", "seq" (checkpoints), "fence", "started" (time_ns),
    "outcome" (stored, duplicate, ack or the DHPError that refused it)}; `attributes` are
    added to every span (dhp.peer, dhp.source)."""
    if not installed() or not configured():
        return
    groups: dict[str, list[dict]] = {}
    for frame in frames:
        hid = frame.get("handoff_id")
        groups.setdefault(hid if isinstance(hid, str) and _HANDOFF_ID.match(hid) else "",
                          []).append(frame)
    for hid, group in groups.items():
        seqs = [f["seq"] for f in group if type(f.get("seq")) is int]
        fences = [f["fence"] for f in group if type(f.get("fence")) is int]
        errors = [f["outcome"] for f in group if isinstance(f["outcome"], DHPError)]
        emit(operation, min(f["started"] for f in group), {
            "dhp.handoff_id": hid or None, "dhp.frames": len(group),
            "dhp.seq.first": min(seqs, default=None), "dhp.seq": max(seqs, default=None),
            "dhp.fence": max(fences, default=None),
            "dhp.duplicates": sum(f["outcome"] == "duplicate" for f in group),
            "dhp.rejected": len(errors), **attributes}, errors[0] if errors else None)


def frame_of(kind: str, payload: Any, started_ns: int, outcome: Any = None) -> dict:
    """What `transport` needs of one frame's payload (an envelope or a record)."""
    found = payload if isinstance(payload, dict) else {}
    return {"handoff_id": found.get("handoff_id"),
            "seq": found.get("seq") if kind == "checkpoint" else None,
            "fence": found.get("fence"), "started": started_ns, "outcome": outcome}


# --- what each SDK call's span says --------------------------------------------------------

def _arg(args: tuple, kwargs: dict, index: int, name: str) -> Any:
    return kwargs[name] if name in kwargs else args[index] if len(args) > index else None


def _lease(ctx: Any) -> dict:
    """Attributes of a claimed handoff (a TaskContext)."""
    return {"dhp.handoff_id": ctx.handoff_id, "dhp.task_kind": ctx.intent["task_kind"],
            "dhp.worker_id": ctx.worker_id, "dhp.fence": ctx.fence,
            "dhp.attempt": ctx.attempt}


def dispatched(args: tuple, kwargs: dict, result: Any) -> dict:
    return {"dhp.handoff_id": result, "dhp.task_kind": _arg(args, kwargs, 1, "task_kind")}


def taken(args: tuple, kwargs: dict, result: Any) -> dict:
    """claim / recover (store, handoff_id, worker_id) and claim_next (store, kinds, worker)."""
    if result is not None:
        found = _lease(result)
        event = result.lease_event or {}
        if event.get("lost_s") is not None:  # it ended a lost owner's lease
            found.update({"dhp.lost": event["how"], "dhp.takeover.delay_s": event["lost_s"]})
        return found
    wanted = _arg(args, kwargs, 1, "handoff_id")  # claim_next's is a kind (or kinds), no id
    return {"dhp.handoff_id": wanted if isinstance(wanted, str)
            and wanted.startswith("sha256:") else None,
            "dhp.worker_id": _arg(args, kwargs, 2, "worker_id")}


def leased(args: tuple, kwargs: dict, result: Any) -> dict:
    """complete / release (a TaskContext): reports the lease's pending checkpoints first."""
    flush_checkpoints(args[0])
    failure = kwargs.get("failure")
    if isinstance(failure, dict) and isinstance(failure.get("type"), str):  # a failed attempt
        return dict(_lease(args[0]), **{"dhp.error_type": failure["type"][:200]})
    return _lease(args[0])


def by_id(args: tuple, kwargs: dict, result: Any) -> dict:
    """cancel / requeue / orphan (store, handoff_id)."""
    return {"dhp.handoff_id": _arg(args, kwargs, 1, "handoff_id")}
