"""Tracing and metrics stories for tests/test_observe.py, each in a process of its own (the
OpenTelemetry providers are process-wide). Prints one JSON document on stdout.

    otel_story.py worker STORE HID NAME SPANS   claim or recover, checkpoint twice, SIGKILL self
    otel_story.py finish STORE HID SPANS        recover, checkpoint, complete; print the spans
    otel_story.py caller STORE                  claim inside a span of the caller's own
    otel_story.py metrics STORE                 operations, then the metrics read back
    otel_story.py transport DIR                 ship a handoff over TCP to a peer in this
                                                process (one frame tampered), import its log;
                                                the transport spans
    otel_story.py takeover STORE KIND N         claim_next N times; the take spans and the
                                                takeover-delay histogram read back
    otel_story.py idle STORE                    claim_next on nothing (no span), then on
                                                work; the span names
    otel_story.py bare                          with opentelemetry made unimportable
"""

import json
import os
import signal
import sys


def tracer_to(path=None):
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    provider = TracerProvider()
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    if path is not None:  # every span is written when it ends: a SIGKILL loses none
        out = open(path, "a")  # noqa: SIM115 (lives as long as the process)
        provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(
            out=out, formatter=lambda span: span.to_json(indent=None) + "\n")))
    trace.set_tracer_provider(provider)
    return memory


def summary(span):
    return {"name": span.name, "trace_id": format(span.context.trace_id, "032x"),
            "parent": format(span.parent.span_id, "016x") if span.parent else None,
            "links": [format(link.context.trace_id, "032x") for link in span.links],
            "attributes": dict(span.attributes), "status": span.status.status_code.name}


def main(argv):
    story = argv[0]
    if story == "bare":
        class NoOtel:  # an import hook: as if the `otel` extra were not installed
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] == "opentelemetry":
                    raise ImportError("opentelemetry is not installed (test)")
        sys.meta_path.insert(0, NoOtel())
        import tempfile

        import dhp
        from dhp import api
        store = dhp.Store(tempfile.mkdtemp())
        hid = dhp.dispatch(store, "bare", {}, {"type": "object"})
        with dhp.claim(store, hid, "w") as ctx:
            ctx.checkpoint({"n": 1})
            ctx.complete({})
        print(json.dumps({"wrapped": hasattr(api.dispatch, "__wrapped__")
                          or hasattr(api.TaskContext.checkpoint, "__wrapped__"),
                          "otel_modules": sorted(m for m in sys.modules
                                                 if m.startswith("opentelemetry")),
                          "state": dhp.status(store, hid)["state"]}))
        return
    import dhp
    if story == "worker":
        store_path, hid, name, spans = argv[1:5]
        tracer_to(spans)
        store = dhp.Store(store_path)
        take = dhp.claim if dhp.status(store, hid)["fence"] == 0 else dhp.recover
        ctx = take(store, hid, name)
        state = ctx.last_checkpoint or {"n": 0}
        for _ in range(2):
            state = {"n": state["n"] + 1}
            ctx.checkpoint(state)
        os.kill(os.getpid(), signal.SIGKILL)
    if story == "finish":
        store_path, hid, spans = argv[1:4]
        memory = tracer_to()
        store = dhp.Store(store_path)
        with dhp.recover(store, hid, "finisher") as ctx:
            ctx.checkpoint({"n": ctx.last_checkpoint["n"] + 1})
            ctx.complete({"n": ctx.last_checkpoint["n"]})
        from opentelemetry.sdk.trace import ReadableSpan  # noqa: F401 (the SDK is there)
        killed = [json.loads(line) for line in open(spans)]
        print(json.dumps({"killed": [{"name": s["name"], "trace_id": s["context"]["trace_id"],
                                      "attributes": s["attributes"]} for s in killed],
                          "finisher": [summary(s) for s in memory.get_finished_spans()]}))
    if story == "caller":
        memory = tracer_to()
        from opentelemetry import trace
        store = dhp.Store(argv[1])
        hid = dhp.dispatch(store, "caller", {}, {"type": "object"})
        with trace.get_tracer("app").start_as_current_span("my request") as mine:
            with dhp.claim(store, hid, "w") as ctx:
                for n in range(3):
                    ctx.checkpoint({"n": n})
                ctx.complete({})
        print(json.dumps({"mine": format(mine.get_span_context().trace_id, "032x"),
                          "mine_span": format(mine.get_span_context().span_id, "016x"),
                          "hid": hid, "spans": [summary(s) for s in memory.get_finished_spans()]}))
    if story == "metrics":
        from dhp.observe import metrics as dhp_metrics
        from opentelemetry import metrics
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader
        reader = InMemoryMetricReader()
        metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
        store = dhp.Store(argv[1])
        dhp_metrics.observe_store(store, max_age_s=0)
        hid = dhp.dispatch(store, "m", {}, {"type": "object"}, {"max_steps": 2})
        ctx = dhp.claim(store, hid, "w", heartbeat_interval=0)
        ctx.checkpoint({"n": 1})
        ctx.checkpoint({"n": 2})
        try:
            ctx.checkpoint({"n": 3})
        except dhp.BudgetExceeded:
            pass
        other = dhp.dispatch(store, "m", {"other": True}, {"type": "object"})
        for error in (ValueError("bad"), ConnectionError("503")):  # two failed attempts
            dhp.claim(store, other, "w2", heartbeat_interval=0).fail(error)
        dhp.claim(store, other, "w2", heartbeat_interval=0)
        dhp.dispatch(store, "m", {"third": True}, {"type": "object"})
        found = {}
        for rm in reader.get_metrics_data().resource_metrics:
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    for point in metric.data.data_points:
                        key = metric.name + json.dumps(dict(point.attributes), sort_keys=True)
                        found[key] = getattr(point, "value", getattr(point, "count", None))
        print(json.dumps(found))
    if story == "transport":
        memory = tracer_to()
        base = argv[1]
        store = dhp.Store(f"{base}/worker")
        hid = dhp.dispatch(store, "shipped", {}, {"type": "object"})
        from dhp.transport.server import generate_secret
        secret = generate_secret()
        with dhp.TransportServer(f"{base}/peer", port=0, secret=secret).start() as server, \
                dhp.NetShipper("127.0.0.1", server.port, local_logpath=f"{base}/buffer.jsonl",
                               secret=secret) as shipper:
            with dhp.claim(store, hid, "w", ship_to=shipper) as ctx:
                ctx.checkpoint({"n": 1})
                ctx.checkpoint({"n": 2})
                forged = dict(dhp.checkpoints(store, hid)[-1], seq=3)  # its hash is wrong
                shipper.ship_checkpoint(ctx.envelope, forged)
                assert shipper.flush(30)
                ctx.complete({"n": 2})
            assert shipper.flush(30)
            peer = f"127.0.0.1:{server.port}"
        dhp.export_log(store, hid, f"{base}/h.jsonl")
        dhp.import_log(dhp.Store(f"{base}/imported"), f"{base}/h.jsonl")
        print(json.dumps({"hid": hid, "peer": peer, "spans": [
            summary(s) for s in memory.get_finished_spans()
            if s.name.startswith("dhp.transport.")]}))
    if story == "idle":
        memory = tracer_to()
        store = dhp.Store(argv[1])
        for _ in range(3):
            assert dhp.claim_next(store, "idle", "w", wait=0) is None
        assert dhp.claim_next(store, "idle", "w", wait=0.05) is None  # a wait that ends
        hid = dhp.dispatch(store, "idle", {}, {"type": "object"})
        dhp.claim_next(store, "idle", "w", heartbeat_interval=0).release()
        names = [(s.name, s.attributes.get("dhp.handoff_id")) for s in memory.get_finished_spans()]
        print(json.dumps({"hid": hid, "spans": names}))
        return
    if story == "takeover":
        from dhp.observe import metrics as dhp_metrics
        from opentelemetry import metrics
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader
        memory = tracer_to()
        reader = InMemoryMetricReader()
        metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
        store = dhp.Store(argv[1])
        dhp_metrics.observe_store(store, max_age_s=0)
        for n in range(int(argv[3])):
            dhp.claim_next(store, argv[2], f"standby-{n}", heartbeat_interval=0)
        points = [{"attributes": dict(p.attributes), "count": p.count, "sum": p.sum}
                  for rm in reader.get_metrics_data().resource_metrics
                  for sm in rm.scope_metrics for m in sm.metrics
                  if m.name == "dhp.takeover.delay" for p in m.data.data_points
                  if isinstance(p, HistogramDataPoint)]
        print(json.dumps({"points": points, "spans": [
            summary(s) for s in memory.get_finished_spans() if s.name == "dhp.claim_next"]}))


if __name__ == "__main__":
    main(sys.argv[1:])
