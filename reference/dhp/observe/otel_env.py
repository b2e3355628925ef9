"""Set up the OpenTelemetry SDK from the standard OTEL_* environment variables, for the
long-running commands (`dhp worker`, `dhp supervisor`, `dhp-mcp`, `dhp-a2a`), so their spans
and metrics can be exported without code in a task module.

The SDK's own environment-driven configurator does the work (the one opentelemetry-distro
builds on: exporters by entry point from OTEL_TRACES_EXPORTER / OTEL_METRICS_EXPORTER, the
resource from OTEL_SERVICE_NAME / OTEL_RESOURCE_ATTRIBUTES, the sampler, the batch
processors). Two things are added: nothing happens unless an exporter variable is set (an
endpoint alone means OTLP, the specification's default), and `otlp` means OTLP over HTTP,
the exporter the `otel` extra installs, when no package registers `otlp` itself.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

from dhp.core.errors import InvalidInput
from dhp.observe import tracing

SIGNALS = {"traces": "OTEL_TRACES_EXPORTER", "metrics": "OTEL_METRICS_EXPORTER"}
ENDPOINTS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
             "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")
OTLP_HTTP = "otlp_proto_http"


def wanted(environ: MutableMapping[str, str] = os.environ) -> bool:
    """Whether any exporter variable is set (else the command exports nothing)."""
    return any(environ.get(v, "").strip() for v in (*SIGNALS.values(), *ENDPOINTS))


def configure(service: str, environ: MutableMapping[str, str] = os.environ, *,
              stdout_free: bool = True) -> str | None:
    """Set up the global tracer and meter providers from `environ`; returns what it set up
    ("traces: console; metrics: none"), or None when no exporter variable is set. Raises
    InvalidInput for an exporter no installed package provides, a missing `otel` extra, or
    the console exporter when stdout is not free (an MCP server speaking on stdio)."""
    if not wanted(environ):
        return None
    if not tracing.installed():
        raise InvalidInput("OTEL_* exporter variables are set but OpenTelemetry is not "
                           "installed: install durable-handoff with the otel extra")
    from importlib.metadata import entry_points

    from opentelemetry.sdk._configuration import _OTelSDKConfigurator

    endpoint = any(environ.get(v, "").strip() for v in ENDPOINTS)
    said = []
    for signal, variable in SIGNALS.items():
        names = [n.strip() for n in environ.get(variable, "").split(",") if n.strip()]
        if not names:  # unset: OTLP when an endpoint is given (the specification's default)
            names = ["otlp"] if endpoint else ["none"]
        known = {e.name for e in entry_points(group=f"opentelemetry_{signal}_exporter")}
        names = [OTLP_HTTP if n == "otlp" and n not in known else n for n in names]
        if "console" in names and not stdout_free:
            raise InvalidInput(f"{variable}=console would write into the protocol on stdout: "
                               "use otlp, or serve over HTTP")
        unknown = [n for n in names if n != "none" and n not in known]
        if unknown:
            raise InvalidInput(f"{variable}: no installed exporter {unknown[0]!r} (installed: "
                               f"{', '.join(sorted(known)) or 'none'})")
        environ[variable] = ",".join(names)  # what the SDK's configurator reads
        said.append(f"{signal}: {environ[variable]}")
    named = environ.get("OTEL_SERVICE_NAME") or \
        "service.name=" in environ.get("OTEL_RESOURCE_ATTRIBUTES", "")
    _OTelSDKConfigurator().configure(
        resource_attributes={} if named else {"service.name": service})
    return "; ".join(said)


def flush() -> None:
    """Export what the providers hold: a forked worker leaves by os._exit, which skips the
    SDK's own flush at exit."""
    if not tracing.installed() or not tracing.configured():
        return
    from opentelemetry import metrics, trace

    for provider in (trace.get_tracer_provider(), metrics.get_meter_provider()):
        force = getattr(provider, "force_flush", None)
        if force is not None:
            force()
