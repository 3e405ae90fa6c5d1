"""server/telemetry.py without a server: the log processor's trace ids, the tracing switch,
the metrics setting, and the hot path's counts read by the observable counter."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider

from regroup.server.config import ConfigError, load_settings
from regroup.server.telemetry import Metrics, add_trace_ids, start_tracing


def test_log_lines_in_a_span_carry_its_ids() -> None:
    assert add_trace_ids(None, "info", {"event": "x"}) == {"event": "x"}
    tracer = TracerProvider().get_tracer("t")
    with tracer.start_as_current_span("s") as span:
        event = add_trace_ids(None, "info", {"event": "x"})
    context = span.get_span_context()
    assert event["trace_id"] == format(context.trace_id, "032x")
    assert event["span_id"] == format(context.span_id, "016x")


def test_tracing_is_off_by_default_and_unknown_exporters_are_refused() -> None:
    assert start_tracing("r", {}) is None
    provider = start_tracing("r", {"OTEL_TRACES_EXPORTER": "console"})
    assert isinstance(provider, TracerProvider)
    provider.shutdown()
    with pytest.raises(ValueError, match="unknown exporter 'jaeger'"):
        start_tracing("r", {"OTEL_TRACES_EXPORTER": "jaeger"})


def test_the_metrics_endpoint_setting() -> None:
    assert load_settings({}).metrics_listen == "127.0.0.1:9464"
    assert load_settings({"REGROUP_METRICS_LISTEN": "OFF"}).metrics_listen == "off"
    assert load_settings({"REGROUP_METRICS_LISTEN": "[::]:9100"}).metrics_listen == "[::]:9100"
    for bad in ("9464", "host:", "host:99999", "host:port"):
        with pytest.raises(ConfigError, match="REGROUP_METRICS_LISTEN must be host:port or off"):
            load_settings({"REGROUP_METRICS_LISTEN": bad})


def test_heartbeat_counts_are_collected_as_a_counter() -> None:
    reader = InMemoryMetricReader()
    metrics = Metrics(MeterProvider(metric_readers=[reader]).get_meter("t"))
    for written in (False, False, True):
        metrics.heartbeat(written)
    data = reader.get_metrics_data()
    assert data is not None
    (points,) = [
        m.data.data_points
        for rm in data.resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
        if m.name == "regroup.heartbeats"
    ]
    assert {p.attributes["outcome"]: p.value for p in points} == {"unchanged": 2, "written": 1}
