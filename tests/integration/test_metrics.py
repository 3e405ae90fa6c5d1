"""The server's metrics, read back through its Prometheus endpoint after a scripted rebalance:
the numbers match what happened (issue 21)."""

from __future__ import annotations

import asyncio
import urllib.request
from collections.abc import Mapping

import pytest
from prometheus_client.parser import text_string_to_metric_families

from regroup.v1 import common_pb2, coordinator_pb2
from tests.integration.conftest import Service, ServiceFactory
from tests.support.wire import WireMember, converge

pytestmark = pytest.mark.integration

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


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
    assert total(samples, "regroup_shards_moves_total", move="acquired") == 64
    assert total(samples, "regroup_lease_rounds_total", outcome="ok") >= 1
    assert total(samples, "regroup_lease_rounds_total", outcome="failed") == 0
    # Every call, by method and outcome (the response's error code).
    heartbeats = total(samples, "rpc_server_duration_milliseconds_count", rpc_method="ConsumerGroupHeartbeat")
    assert heartbeats == total(samples, "regroup_heartbeats_total")
    commits = by_label(
        {k: v for k, v in samples.items() if ("rpc_method", "OffsetCommit") in k[1]},
        "rpc_server_duration_milliseconds_count",
        "regroup_error_code",
    )
    assert commits == {"0": 1, str(common_pb2.STALE_MEMBER_EPOCH): 1}  # refused as a whole


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
