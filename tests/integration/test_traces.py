"""The server's spans (issue 21): one per RPC, a child of the caller's span when the call
carries W3C trace context, with the store transaction and the target computation as its
children, and the group, member and epochs as attributes; captured with the SDK's
in-memory exporter. Off by default."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry import propagate
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from regroup.client import GroupMember
from regroup.server.telemetry import tracing_wanted
from regroup.v1 import common_pb2, coordinator_pb2
from tests.support.service import ServiceFactory
from tests.support.spans import client_spans, global_provider
from tests.support.streams import MemberStreamClient

HEARTBEAT = "regroup.v1.GroupCoordinator/ConsumerGroupHeartbeat"


@pytest.fixture
def exported() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


def by_name(spans: tuple[ReadableSpan, ...], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


async def test_an_rpc_span_joins_the_callers_trace_with_its_store_and_assignment_children(
    start_service: ServiceFactory, exported: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    provider, exporter = exported
    service = await start_service(tracer_provider=provider)
    await service.stubs.create_topic("orders", 4)
    # A Spark task's span, say: its context travels in the call's metadata.
    with provider.get_tracer("task").start_as_current_span("spark.task") as task:
        carrier: dict[str, str] = {}
        propagate.inject(carrier)
        response = await service.stubs.coordinator.ConsumerGroupHeartbeat(
            coordinator_pb2.ConsumerGroupHeartbeatRequest(
                group_id="g",
                member_id="m1",
                member_epoch=0,
                rebalance_timeout_ms=60_000,
                subscribed_topic_names=common_pb2.StringList(values=["orders"]),
                topic_partitions=common_pb2.TopicPartitionsList(),
            ),
            metadata=tuple(carrier.items()),
        )
    assert response.error_code == common_pb2.NONE
    spans = exporter.get_finished_spans()
    (rpc,) = by_name(spans, HEARTBEAT)
    assert rpc.kind == SpanKind.SERVER
    assert rpc.context.trace_id == task.get_span_context().trace_id
    assert rpc.parent is not None and rpc.parent.span_id == task.get_span_context().span_id
    attributes = dict(rpc.attributes or {})
    assert attributes["rpc.system"] == "grpc" and attributes["rpc.method"] == "ConsumerGroupHeartbeat"
    assert (attributes["regroup.group_id"], attributes["regroup.member_id"]) == ("g", "m1")
    assert attributes["regroup.member_epoch"] == 0
    assert attributes["regroup.response.member_epoch"] == response.member_epoch == 1
    assert attributes["regroup.error_code"] == 0
    # The join computed the target and stored it: both under the RPC's span.
    (store,) = by_name(spans, "regroup.store.append")
    (compute,) = by_name(spans, "regroup.assignment.compute")
    for child in (store, compute):
        assert child.parent is not None and child.parent.span_id == rpc.context.span_id
    assert dict(compute.attributes or {})["regroup.assignment.mode"] == "inline"
    assert (
        compute.start_time is not None and rpc.start_time is not None and compute.start_time >= rpc.start_time
    )

    # A heartbeat that changes nothing: its span, and no store span.
    exporter.clear()
    await service.stubs.coordinator.ConsumerGroupHeartbeat(
        coordinator_pb2.ConsumerGroupHeartbeatRequest(
            group_id="g", member_id="m1", member_epoch=response.member_epoch
        )
    )
    assert [s.name for s in exporter.get_finished_spans()] == [HEARTBEAT]
    (alone,) = exporter.get_finished_spans()
    assert alone.parent is None  # no caller context: a trace of its own


async def test_the_python_client_carries_its_spans_context(
    start_service: ServiceFactory, exported: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    """GroupMember's calls carry the current span's context, so that the coordinator's spans
    join the application's trace (the client records its spans with the global provider)."""
    provider, exporter = exported
    client = client_spans()
    service = await start_service(tracer_provider=provider)
    await service.stubs.create_topic("orders", 2)
    with global_provider().get_tracer("app").start_as_current_span("spark.task"):
        async with GroupMember(f"127.0.0.1:{service.server.port}") as member:
            await member.join("g", topics=["orders"])
            await member.wait_for_assignment()
    joins = by_name(client.get_finished_spans(), "regroup.join")
    # What the client sent: heartbeats, and the leave (a call of its own).
    sent = {
        s.context.span_id
        for s in client.get_finished_spans()
        if s.name in ("regroup.heartbeat", "regroup.leave")
    }
    served = by_name(exporter.get_finished_spans(), HEARTBEAT)
    assert joins and sent and len(served) >= 2  # the join and the leave at least
    # Every heartbeat the coordinator served is the child of a span of the client, in the
    # application's trace.
    for span in served:
        assert span.parent is not None and span.parent.span_id in sent
        assert span.context.trace_id == joins[0].context.trace_id


def test_traces_are_off_unless_the_standard_variables_ask() -> None:
    assert not tracing_wanted({})
    assert tracing_wanted({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317"})
    assert tracing_wanted({"OTEL_TRACES_EXPORTER": "console"})
    assert not tracing_wanted(
        {"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317"}
    )
    assert not tracing_wanted({"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "console"})


async def test_each_heartbeat_of_a_member_stream_gets_its_span_in_the_streams_trace(
    start_service: ServiceFactory, exported: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    provider, exporter = exported
    service = await start_service(tracer_provider=provider)
    await service.stubs.create_topic("orders", 4)
    with provider.get_tracer("task").start_as_current_span("spark.task") as task:
        carrier: dict[str, str] = {}
        propagate.inject(carrier)
    stream = await MemberStreamClient.open(service.stubs.coordinator, metadata=tuple(carrier.items()))
    try:
        join = coordinator_pb2.ConsumerGroupHeartbeatRequest(
            group_id="g",
            member_id="m1",
            member_epoch=0,
            rebalance_timeout_ms=60_000,
            subscribed_topic_names=common_pb2.StringList(values=["orders"]),
            topic_partitions=common_pb2.TopicPartitionsList(),
        )
        joined = await stream.heartbeat(join)
        await stream.heartbeat(
            coordinator_pb2.ConsumerGroupHeartbeatRequest(
                group_id="g", member_id="m1", member_epoch=joined.member_epoch
            )
        )
    finally:
        await stream.close()
    spans = by_name(exporter.get_finished_spans(), HEARTBEAT)
    # Both heartbeats, the one that changed nothing too (traces on: no answer without its span).
    assert len(spans) == 2
    for span in spans:
        attributes = dict(span.attributes or {})
        assert attributes["regroup.stream"] is True and attributes["regroup.member_id"] == "m1"
        # The stream's metadata carries the trace context it was opened in.
        assert span.context.trace_id == task.get_span_context().trace_id
    assert dict(spans[0].attributes or {})["regroup.response.member_epoch"] == joined.member_epoch
