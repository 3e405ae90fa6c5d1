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


def test_rpc_durations_reach_a_reader_as_the_sdk_would_aggregate_them() -> None:
    """The hot path's own histogram, merged into each collection, against the SDK's own
    explicit-bucket histogram fed the same values: same counts, sum, min, max, buckets."""
    from opentelemetry.sdk.metrics.export import HistogramDataPoint

    from regroup.server.telemetry import RPC_BOUNDS, RpcDurations, merging

    durations = RpcDurations()
    values = [0.0, 0.3, 5.0, 5.01, 12.0, 99.9, 100.0, 20_000.0]
    key = ("regroup.v1.GroupCoordinator", "ConsumerGroupHeartbeat", 0, "OK")
    reader = merging(InMemoryMetricReader, durations.points)()
    sdk_reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader, sdk_reader])
    reference = provider.get_meter("reference").create_histogram("reference", unit="ms")
    Metrics(provider.get_meter("regroup.server"), durations)  # the scope the durations join
    for ms in values:
        durations.record(key, ms)
        reference.record(ms, {"k": "v"})

    def point(data: object, name: str) -> HistogramDataPoint:
        (found,) = [
            p
            for rm in data.resource_metrics  # type: ignore[attr-defined]
            for sm in rm.scope_metrics
            for m in sm.metrics
            if m.name == name
            for p in m.data.data_points
        ]
        assert isinstance(found, HistogramDataPoint)
        return found

    ours = point(reader.get_metrics_data(), "rpc.server.duration")
    theirs = point(sdk_reader.get_metrics_data(), "reference")
    assert list(ours.explicit_bounds) == list(theirs.explicit_bounds) == list(RPC_BOUNDS)
    assert list(ours.bucket_counts) == list(theirs.bucket_counts)
    assert (ours.count, ours.sum, ours.min, ours.max) == (theirs.count, theirs.sum, theirs.min, theirs.max)
    assert ours.attributes == {
        "rpc.system": "grpc",
        "rpc.service": "regroup.v1.GroupCoordinator",
        "rpc.method": "ConsumerGroupHeartbeat",
        "rpc.grpc.status_code": "OK",
        "regroup.error_code": 0,
    }
    provider.shutdown()


def test_the_health_port_setting() -> None:
    assert load_settings({}).health_listen == "off"
    assert load_settings({"REGROUP_HEALTH_LISTEN": "0.0.0.0:8086"}).health_listen == "0.0.0.0:8086"
    with pytest.raises(ConfigError, match="REGROUP_HEALTH_LISTEN must be host:port or off"):
        load_settings({"REGROUP_HEALTH_LISTEN": "8086"})
