"""The process-wide OpenTelemetry tracer provider for tests of the client's spans.

The client records with the global provider, which a process may set only once: the first
test that wants one sets it, and every test adds an in-memory exporter of its own to it."""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


def global_provider() -> TracerProvider:
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        trace.set_tracer_provider(TracerProvider())
        provider = trace.get_tracer_provider()
    assert isinstance(provider, TracerProvider)
    return provider


def client_spans() -> InMemorySpanExporter:
    """A new exporter receiving every span the global provider ends from now on."""
    exporter = InMemorySpanExporter()
    global_provider().add_span_processor(SimpleSpanProcessor(exporter))
    return exporter
