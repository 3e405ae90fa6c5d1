"""The server's metrics, read back through its Prometheus endpoint after a scripted rebalance:
the numbers match what happened (issue 21)."""

from __future__ import annotations

import asyncio
import math
import urllib.request
from collections.abc import Mapping

from prometheus_client.parser import text_string_to_metric_families

from regroup.v1 import common_pb2, coordinator_pb2
from tests.support.monitoring import alert_rules, dashboard_queries, metric_names
from tests.support.service import Service, ServiceFactory
from tests.support.wire import WireMember, converge

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]

#: rpc.server.call.duration's count, as Prometheus names it.
CALLS = "rpc_server_call_duration_seconds_count"
COORDINATOR = "regroup.v1.GroupCoordinator"


def _scrape(service: Service) -> Samples:
    port = service.server.metrics_port
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


async def scrape(service: Service) -> Samples:
    return await asyncio.to_thread(_scrape, service)


def total(samples: Samples, name: str, **labels: str | int) -> float:
    """The sum of `name`'s samples whose labels include `labels`."""
    wanted = {(k, str(v)) for k, v in labels.items()}
    return sum(v for (n, ls), v in samples.items() if n == name and wanted <= ls)


def by_label(samples: Samples, name: str, label: str) -> Mapping[str, float]:
    out: dict[str, float] = {}
    for (n, ls), v in samples.items():
        if n == name:
            key = dict(ls).get(label, "")
            out[key] = out.get(key, 0) + v
    return {k: v for k, v in out.items() if v}


async def test_metrics_tell_what_a_scripted_rebalance_did(start_service: ServiceFactory) -> None:
    service = await start_service(metrics_listen="127.0.0.1:0")
    assert service.server.metrics_port > 0
    topic_id = await service.stubs.create_topic("orders", 4)
    m1 = WireMember(service.stubs.coordinator, "g", "m1", ["orders"])
    m2 = WireMember(service.stubs.coordinator, "g", "m2", ["orders"])
    await converge(service.stubs, "g", [m1])  # bump 1: m1 joins
    await converge(service.stubs, "g", [m1, m2])  # bump 2: m2 joins, two partitions move
    before = await scrape(service)

    # Heartbeats that change nothing: counted as such, and nothing written for them.
    for _ in range(5):
        assert (await m1.heartbeat()).error_code == common_pb2.NONE
    after = await scrape(service)
    assert (
        total(after, "regroup_heartbeats_total", outcome="unchanged")
        - total(before, "regroup_heartbeats_total", outcome="unchanged")
        == 5
    )
    assert total(after, "regroup_heartbeats_total", outcome="written") == total(
        before, "regroup_heartbeats_total", outcome="written"
    )
    assert total(after, "regroup_store_transactions_total") == total(
        before, "regroup_store_transactions_total"
    )

    # One offset committed, one refused (an epoch the member no longer has).
    (p1, *_) = sorted(m1.owned[topic_id])
    for epoch in (m1.epoch, m1.epoch - 1):
        await service.stubs.coordinator.OffsetCommit(
            coordinator_pb2.OffsetCommitRequest(
                group_id="g",
                member_id=m1.member_id,
                member_epoch=epoch,
                topics=[
                    coordinator_pb2.OffsetCommitRequest.Topic(
                        topic_id=topic_id,
                        partitions=[coordinator_pb2.OffsetCommitRequest.Partition(partition=p1, offset=42)],
                    )
                ],
            )
        )
    await m2.leave()  # bump 3
    await converge(service.stubs, "g", [m1])
    group = await service.stubs.describe("g")
    assert group.group_epoch == 3 and group.group_state == "Stable"

    samples = await scrape(service)
    assert by_label(samples, "regroup_group_epoch_bumps_total", "reason") == {
        "member_joined": 2,
        "member_left": 1,
    }
    # Each bump computed one target (inline: the group is small) and ended Stable.
    assert by_label(samples, "regroup_assignment_computations_total", "mode") == {"inline": 3}
    assert total(samples, "regroup_group_stabilization_duration_seconds_count") == 3
    assert by_label(samples, "regroup_offsets_total", "outcome") == {"none": 1, "stale_member_epoch": 1}
    assert total(samples, "regroup_store_transactions_total", outcome="failed") == 0
    assert total(samples, "regroup_store_transactions_total", outcome="ok") > 0
    assert total(samples, "regroup_timeouts_total") == 0
    # The gauges, read from the groups in memory at the scrape.
    assert total(samples, "regroup_groups", group_type="consumer", group_state="Stable") == 1
    assert total(samples, "regroup_members") == 1
    assert total(samples, "regroup_revocations_pending") == 0
    assert total(samples, "regroup_shards_held") == 64
    assert total(samples, "regroup_shard_moves_total", move="acquired") == 64
    assert total(samples, "regroup_lease_rounds_total", outcome="ok") >= 1
    assert total(samples, "regroup_lease_rounds_total", outcome="failed") == 0
    # Every call, by method and outcome (the response's error code, by name as offsets have it).
    heartbeats = total(samples, CALLS, rpc_method=f"{COORDINATOR}/ConsumerGroupHeartbeat")
    assert heartbeats == total(samples, "regroup_heartbeats_total")
    commits = by_label(
        {k: v for k, v in samples.items() if ("rpc_method", f"{COORDINATOR}/OffsetCommit") in k[1]},
        CALLS,
        "regroup_error_code",
    )
    assert commits == {"none": 1, "stale_member_epoch": 1}  # refused as a whole
    assert total(samples, CALLS, rpc_system_name="grpc") == total(samples, CALLS)


async def test_session_timeouts_are_counted(start_service: ServiceFactory) -> None:
    service = await start_service(
        metrics_listen="127.0.0.1:0", session_timeout_ms=300, heartbeat_interval_ms=100
    )
    await service.stubs.create_topic("orders", 2)
    member = WireMember(service.stubs.coordinator, "g", "m1", ["orders"])
    await converge(service.stubs, "g", [member])
    for _ in range(100):
        samples = await scrape(service)
        if total(samples, "regroup_timeouts_total", kind="session"):
            break
        await asyncio.sleep(0.05)
    assert total(samples, "regroup_timeouts_total", kind="session") == 1
    assert by_label(samples, "regroup_group_epoch_bumps_total", "reason") == {
        "member_joined": 1,
        "session_expired": 1,
    }


def bounds(samples: Samples, name: str) -> list[float]:
    return sorted({float(dict(ls)["le"]) for (n, ls), _ in samples.items() if n == f"{name}_bucket"})


async def test_counters_start_at_zero_and_histograms_have_bounds_in_seconds(
    start_service: ServiceFactory,
) -> None:
    """Scraped right after the start: every counter with known labels is there at 0 (a rate
    over a series that appears at its first increase misses it), the store is up, and the
    histograms' buckets are in seconds, from 100 us."""
    service = await start_service(metrics_listen="127.0.0.1:0")
    samples = await scrape(service)
    for name, label, values in (
        ("regroup_timeouts_total", "kind", {"session", "rebalance"}),
        ("regroup_store_transactions_total", "outcome", {"ok", "failed"}),
        ("regroup_assignment_computations_total", "mode", {"inline", "offloaded"}),
        ("regroup_heartbeats_total", "outcome", {"unchanged", "written"}),
        ("regroup_lease_rounds_total", "outcome", {"ok", "failed"}),
        ("regroup_shard_moves_total", "move", {"acquired", "released", "lost"}),
        ("regroup_offsets_total", "outcome", {"none", "stale_member_epoch"}),
        ("regroup_group_epoch_bumps_total", "reason", {"member_joined", "session_expired"}),
    ):
        found = {dict(ls).get(label) for (n, ls) in samples if n == name}
        assert values <= found, (name, found)
    assert total(samples, "regroup_timeouts_total") == 0
    assert total(samples, "regroup_store_available") == 1

    await service.stubs.create_topic("orders", 2)
    await converge(service.stubs, "g", [WireMember(service.stubs.coordinator, "g", "m1", ["orders"])])
    samples = await scrape(service)
    call_bounds = [
        0.0001,
        0.00025,
        0.0005,
        0.001,
        0.0025,
        0.005,
        0.01,
        0.025,
        0.05,
        0.1,
        0.25,
        0.5,
        1,
        2.5,
        5,
        10,
    ]
    assert bounds(samples, "rpc_server_call_duration_seconds") == [*call_bounds, math.inf]
    assert bounds(samples, "regroup_store_transaction_duration_seconds") == [*call_bounds, math.inf]
    assert bounds(samples, "regroup_assignment_computation_duration_seconds") == [
        *call_bounds,
        30,
        60,
        math.inf,
    ]
    assert bounds(samples, "regroup_group_stabilization_duration_seconds")[:2] == [0.01, 0.025]


async def test_the_dashboard_and_alerts_read_metrics_the_server_exports(
    start_service: ServiceFactory,
) -> None:
    """Every metric name the Grafana dashboard's queries and the alert rules read is one a
    running server exports (after a group settled: histograms appear at their first record)."""
    service = await start_service(metrics_listen="127.0.0.1:0")
    await service.stubs.create_topic("orders", 2)
    await converge(service.stubs, "g", [WireMember(service.stubs.coordinator, "g", "m1", ["orders"])])
    exported = {name for name, _ in await scrape(service)}
    read = {
        where: metric_names(expr)
        for where, expr in [*dashboard_queries().items(), *((r["alert"], r["expr"]) for r in alert_rules())]
    }
    assert all(read.values()), [where for where, names in read.items() if not names]
    unknown = {where: names - exported for where, names in read.items() if names - exported}
    assert not unknown
