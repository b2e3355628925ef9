"""Cost of tracing and metrics on the checkpoint path: CPU per checkpoint in three setups,
interleaved in short rounds (A B C A B C ...), each round a fresh child process:

    bare  opentelemetry made unimportable (as without the `otel` extra)
    api   the API installed, no SDK configured (what a user gets before setting one up)
    sdk   TracerProvider + BatchSpanProcessor (spans dropped by a no-op exporter) and a
          MeterProvider with an in-memory reader: every span and metric is really made

Prints one JSON line: CPU µs per checkpoint (median of rounds) per setup and the median of
per-round ratios to `bare` with their spread (min..max).

    python bench/tracing_overhead.py [--rounds 7] [--checkpoints 2000] [--quick]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile

import _common as C
from _common import log

CHILD = r"""
import sys, tempfile, time
mode, n = sys.argv[1], int(sys.argv[2])
if mode == "bare":
    class NoOtel:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] == "opentelemetry":
                raise ImportError(name)
    sys.meta_path.insert(0, NoOtel())
if mode == "sdk":
    from opentelemetry import metrics, trace
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
    class Drop(SpanExporter):
        def export(self, spans):
            return SpanExportResult.SUCCESS
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Drop()))
    trace.set_tracer_provider(provider)
    metrics.set_meter_provider(MeterProvider(metric_readers=[InMemoryMetricReader()]))
import dhp
store = dhp.Store(tempfile.mkdtemp(dir=sys.argv[3]), fsync_interval=3600)  # CPU, not the disk
hid = dhp.dispatch(store, "bench", {}, {"type": "object"})
ctx = dhp.claim(store, hid, "w", heartbeat_interval=0)
for i in range(200):
    ctx.checkpoint({"i": i, "pad": "x" * 80})
start = time.process_time()
for i in range(n):
    ctx.checkpoint({"i": i, "pad": "x" * 80})
print((time.process_time() - start) / n * 1e6)
"""
MODES = ("bare", "api", "sdk")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--checkpoints", type=int, default=2000)
    args = C.parse(p, {"rounds": 2, "checkpoints": 200})
    run = C.Run("tracing_overhead", args)
    cpu: dict[str, list[float]] = {m: [] for m in MODES}
    for r in range(args.rounds):
        for mode in MODES:
            out = subprocess.run([sys.executable, "-c", CHILD, mode, str(args.checkpoints),
                                  C.scratch("tracing")],
                                 capture_output=True, text=True, check=True,
                                 cwd=tempfile.gettempdir())
            cpu[mode].append(float(out.stdout))
        log(f"round {r + 1}: " + json.dumps({m: round(v[-1], 1) for m, v in cpu.items()}))
    result = {"rounds": args.rounds,
              "checkpoints_per_round": args.checkpoints,
              "cpu_us_per_checkpoint": {m: round(statistics.median(v), 1)
                                        for m, v in cpu.items()}}
    for mode in ("api", "sdk"):
        result[f"{mode}_over_bare"] = C.paired(cpu[mode], cpu["bare"])
    run.finish(result)


if __name__ == "__main__":
    main()
