"""Observing DHP: OpenTelemetry spans and metrics, a Prometheus endpoint and the live
`dhp dashboard`. Tracing and metrics need the `otel` extra; without it they cost nothing."""
