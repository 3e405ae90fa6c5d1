"""With the standard OTEL_EXPORTER_OTLP_ENDPOINT set, the server exports its metrics (the RPC
histogram it keeps itself included) and its spans over OTLP/gRPC: a collector of the test's own,
on a loopback port, receives them (issue 21)."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from tests.support.service import ServiceFactory
from tests.support.wire import WireMember, converge


class Collector(metrics_service_pb2_grpc.MetricsServiceServicer, trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self) -> None:
        self.metrics: list[Any] = []
        self.spans: list[Any] = []

    async def Export(self, request: Any, context: Any) -> Any:
        if isinstance(request, metrics_service_pb2.ExportMetricsServiceRequest):
            self.metrics.extend(
                m for rm in request.resource_metrics for sm in rm.scope_metrics for m in sm.metrics
            )
            return metrics_service_pb2.ExportMetricsServiceResponse()
        self.spans.extend(s for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans)
        return trace_service_pb2.ExportTraceServiceResponse()


async def test_metrics_and_spans_reach_an_otlp_collector(
    start_service: ServiceFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    collector = Collector()
    server = grpc.aio.server()
    metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(collector, server)
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(collector, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{port}")
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_INSECURE", "true")
        monkeypatch.setenv("OTEL_METRIC_EXPORT_INTERVAL", "200")
        monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
        service = await start_service()  # metrics_listen off: OTLP alone
        assert service.server.metrics_port == 0
        await service.stubs.create_topic("orders", 2)
        await converge(service.stubs, "g", [WireMember(service.stubs.coordinator, "g", "m1", ["orders"])])
        for _ in range(100):
            names = {m.name for m in collector.metrics}
            spans = {s.name for s in collector.spans}
            if {
                "rpc.server.call.duration",
                "regroup.heartbeats",
            } <= names and "regroup.store.append" in spans:
                break
            await asyncio.sleep(0.1)
        assert {"rpc.server.call.duration", "regroup.heartbeats", "regroup.group.epoch_bumps"} <= names
        assert "regroup.v1.GroupCoordinator/ConsumerGroupHeartbeat" in spans
        assert "regroup.store.append" in spans
        (durations, *_) = [m for m in collector.metrics if m.name == "rpc.server.call.duration"]
        assert durations.unit == "s" and durations.histogram.data_points
        await service.server.stop()  # its last export, while the collector still listens
    finally:
        await server.stop(0)
