"""server/telemetry.py without a server: the log processor's trace ids, the tracing switch,
the metrics setting, the hot path's counts read by the observable counter, the RPC histogram's
names, and every histogram's bounds and counter's starting series."""

from __future__ import annotations

from typing import Any

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


def _points(data: object, name: str) -> list[Any]:
    return [
        p
        for rm in data.resource_metrics  # type: ignore[attr-defined]
        for sm in rm.scope_metrics
        for m in sm.metrics
        if m.name == name
        for p in m.data.data_points
    ]


def test_rpc_durations_reach_a_reader_as_the_sdk_would_aggregate_them() -> None:
    """The hot path's own histogram, merged into each collection, against the SDK's own
    explicit-bucket histogram fed the same values: same counts, sum, min, max, buckets."""
    from opentelemetry.sdk.metrics.export import HistogramDataPoint

    from regroup.server.telemetry import CALL_BOUNDS, RpcDurations, merging

    durations = RpcDurations()
    values = [0.0, 0.00003, 0.0001, 0.0005, 0.00050001, 0.012, 0.0999, 0.1, 20.0]
    key = ("regroup.v1.GroupCoordinator", "ConsumerGroupHeartbeat", 0, "OK")
    reader = merging(InMemoryMetricReader, durations.points)()
    sdk_reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader, sdk_reader])
    reference = provider.get_meter("reference").create_histogram(
        "reference", unit="s", explicit_bucket_boundaries_advisory=CALL_BOUNDS
    )
    Metrics(provider.get_meter("regroup.server"), durations)  # the scope the durations join
    for seconds in values:
        durations.record(key, seconds)
        reference.record(seconds, {"k": "v"})

    (ours,) = _points(reader.get_metrics_data(), "rpc.server.call.duration")
    (theirs,) = _points(sdk_reader.get_metrics_data(), "reference")
    assert isinstance(ours, HistogramDataPoint) and isinstance(theirs, HistogramDataPoint)
    assert list(ours.explicit_bounds) == list(theirs.explicit_bounds) == list(CALL_BOUNDS)
    assert list(ours.bucket_counts) == list(theirs.bucket_counts)
    assert (ours.count, ours.sum, ours.min, ours.max) == (theirs.count, theirs.sum, theirs.min, theirs.max)
    # OpenTelemetry's current RPC conventions (rpc.system.name, the fully-qualified
    # rpc.method, rpc.response.status_code), and the error code by name.
    assert ours.attributes == {
        "rpc.system.name": "grpc",
        "rpc.method": "regroup.v1.GroupCoordinator/ConsumerGroupHeartbeat",
        "rpc.response.status_code": "OK",
        "regroup.error_code": "none",
    }
    provider.shutdown()


def test_rpc_attributes_name_the_error_and_mark_server_errors_only() -> None:
    from regroup.server.telemetry import rpc_attributes

    service = "regroup.v1.GroupCoordinator"
    refused = rpc_attributes((service, "OffsetCommit", 113, "OK"))
    assert refused["regroup.error_code"] == "stale_member_epoch" and "error.type" not in refused
    # The caller's fault (a status the conventions do not count as the server's): no error.type.
    assert "error.type" not in rpc_attributes((service, "OffsetCommit", 0, "PERMISSION_DENIED"))
    failed = rpc_attributes((service, "OffsetCommit", 0, "INTERNAL"))
    assert failed["error.type"] == "INTERNAL" and failed["rpc.response.status_code"] == "INTERNAL"
    # A code this build does not know keeps its number rather than failing the collection.
    assert rpc_attributes((service, "OffsetCommit", 4242, "OK"))["regroup.error_code"] == "4242"


def test_every_histogram_has_bounds_in_seconds_that_fit_what_it_measures() -> None:
    """OpenTelemetry's default bounds (0, 5, 10, ... 10,000) are for milliseconds: on a
    histogram in seconds every store write landed in le=5 and read as 2.5 s at p50."""
    from regroup.server.telemetry import CALL_BOUNDS, COMPUTATION_BOUNDS, STABILIZATION_BOUNDS

    reader = InMemoryMetricReader()
    metrics = Metrics(MeterProvider(metric_readers=[reader]).get_meter("t"))
    metrics.stored(0.0005, ok=True)
    metrics.computed("inline", 0.0005)
    metrics.stable(0.0005)
    data = reader.get_metrics_data()
    expected = {
        "regroup.store.transaction.duration": CALL_BOUNDS,
        "regroup.assignment.computation.duration": COMPUTATION_BOUNDS,
        "regroup.group.stabilization.duration": STABILIZATION_BOUNDS,
    }
    for name, bounds in expected.items():
        (point,) = _points(data, name)
        assert list(point.explicit_bounds) == list(bounds), name
    (store,) = _points(data, "regroup.store.transaction.duration")
    # 0.5 ms is in the bucket (0.25 ms, 0.5 ms], not in (0, 5 s].
    landed = [bound for bound, n in zip(store.explicit_bounds, store.bucket_counts, strict=False) if n]
    assert landed == [0.0005]
    assert CALL_BOUNDS[0] == 0.0001 and CALL_BOUNDS[-1] == 10.0


def test_counters_with_known_labels_are_collected_at_zero_from_the_start() -> None:
    """A series that first appears at its first increase hides that increase from rate()."""
    from regroup.reconciler.history import BUMP_CAUSES

    reader = InMemoryMetricReader()
    Metrics(MeterProvider(metric_readers=[reader]).get_meter("t"))
    data = reader.get_metrics_data()

    def zeros(name: str, label: str) -> set[str]:
        points = _points(data, name)
        assert all(p.value == 0 for p in points), name
        return {str(p.attributes[label]) for p in points}

    assert zeros("regroup.timeouts", "kind") == {"session", "rebalance"}
    assert zeros("regroup.store.transactions", "outcome") == {"ok", "failed"}
    assert zeros("regroup.assignment.computations", "mode") == {"inline", "offloaded"}
    assert zeros("regroup.heartbeats", "outcome") == {"unchanged", "written"}
    reasons = zeros("regroup.group.epoch_bumps", "reason")
    assert {"member_joined", "member_left", "member_fenced", *BUMP_CAUSES.values()} <= reasons
    assert {"none", "stale_member_epoch", "partition_not_owned"} <= zeros("regroup.offsets", "outcome")


def test_the_store_gauge_reads_whether_the_store_answers() -> None:
    from regroup.server.telemetry import Gauges

    reader = InMemoryMetricReader()
    metrics = Metrics(MeterProvider(metric_readers=[reader]).get_meter("t"))
    available = [True]
    metrics.observe(Gauges(dict, lambda: 0, lambda: 0, lambda: 0, store_available=lambda: available[0]))
    (up,) = _points(reader.get_metrics_data(), "regroup.store.available")
    available[0] = False
    (down,) = _points(reader.get_metrics_data(), "regroup.store.available")
    assert (up.value, down.value) == (1, 0)


async def test_the_longest_rebalance_counts_from_the_bump_until_stable_and_not_while_empty() -> None:
    """regroup.group.rebalance.longest, read from a coordinator on the memory store: what
    the alert on rebalances that never reach Stable watches."""
    from regroup.reconciler import ConsumerGroupHeartbeat, GroupConfig, OwnedTopicPartitions
    from regroup.server.clock import ManualClock
    from regroup.server.memstore import MemoryStore
    from regroup.server.runtime import Coordinator
    from tests.support.leases import MANUAL_LEASES

    clock = ManualClock()
    config = GroupConfig(assignment_interval_ms=0)
    c = Coordinator(MemoryStore(), config, clock, run_timers=False, leases=MANUAL_LEASES)
    await c.start()
    longest = c.gauges().rebalance_longest

    async def beat(member_id: str, epoch: int | None = None) -> None:
        member = c.groups["g"].members.get(member_id) if "g" in c.groups else None
        if epoch is None and member is not None and member.member_epoch > 0:
            owned = tuple(OwnedTopicPartitions(t, "", tuple(p)) for t, p in member.assigned.items())
            request = ConsumerGroupHeartbeat(
                "g", member_id, member.member_epoch, owned_topic_partitions=owned
            )
        else:
            request = ConsumerGroupHeartbeat(
                "g",
                member_id,
                0 if epoch is None else epoch,
                rebalance_timeout_ms=5_000,
                subscribed_topic_names=("orders",),
                owned_topic_partitions=(),
            )
        await c.consumer_group_heartbeat(request)

    async def settle(members: list[str]) -> None:
        for _ in range(10):
            for m in members:
                await beat(m)
            if c.groups["g"].state().value == "Stable":
                return
        raise AssertionError("the group did not settle")

    try:
        await c.create_topics([("orders", 4, ())])
        await settle(["m1"])
        assert longest() == 0
        await beat("m2")  # a bump: m1 must give up two partitions first
        clock.advance(7_000)
        assert c.groups["g"].state().value != "Stable" and longest() == 7.0
        await settle(["m1", "m2"])
        assert longest() == 0
        for m in ("m1", "m2"):
            await beat(m, epoch=-1)  # leaves: Empty, nothing to reconcile
        clock.advance(60_000)
        assert c.groups["g"].state().value == "Empty" and longest() == 0
    finally:
        await c.stop()


def test_the_health_port_setting() -> None:
    assert load_settings({}).health_listen == "off"
    assert load_settings({"REGROUP_HEALTH_LISTEN": "0.0.0.0:8086"}).health_listen == "0.0.0.0:8086"
    with pytest.raises(ConfigError, match="REGROUP_HEALTH_LISTEN must be host:port or off"):
        load_settings({"REGROUP_HEALTH_LISTEN": "8086"})
