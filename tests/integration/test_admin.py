"""The admin API: the topic registry and group listing, description and deletion."""

from __future__ import annotations

from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from regroup.v1 import admin_pb2, common_pb2
from tests.support.service import Service
from tests.support.wire import WireMember, converge


async def test_topics_are_created_described_grown_and_deleted(service: Service) -> None:
    admin = service.stubs.admin
    created = await admin.CreateTopics(
        admin_pb2.CreateTopicsRequest(
            topics=[
                admin_pb2.CreatableTopic(name="orders", num_partitions=3, partition_racks=["a", "b", "c"]),
                admin_pb2.CreatableTopic(name="clicks", num_partitions=1),
            ]
        )
    )
    assert [(t.name, t.error_code, t.num_partitions) for t in created.topics] == [
        ("orders", common_pb2.NONE, 3),
        ("clicks", common_pb2.NONE, 1),
    ]
    grown = await admin.CreatePartitions(
        admin_pb2.CreatePartitionsRequest(
            topics=[
                admin_pb2.CreatePartitionsRequest.Topic(
                    name="orders", count=5, new_partition_racks=["a", "b"]
                )
            ]
        )
    )
    assert grown.topics[0].num_partitions == 5

    described = await admin.DescribeTopics(admin_pb2.DescribeTopicsRequest())
    assert [(t.name, t.num_partitions, list(t.partition_racks)) for t in described.topics] == [
        ("clicks", 1, []),
        ("orders", 5, ["a", "b", "c", "a", "b"]),
    ]
    deleted = await admin.DeleteTopics(admin_pb2.DeleteTopicsRequest(names=["clicks", "nope"]))
    assert [(t.name, t.error_code) for t in deleted.topics] == [
        ("clicks", common_pb2.NONE),
        ("nope", common_pb2.UNKNOWN_TOPIC_OR_PARTITION),
    ]
    missing = await admin.DescribeTopics(admin_pb2.DescribeTopicsRequest(names=["clicks"]))
    assert missing.topics[0].error_code == common_pb2.UNKNOWN_TOPIC_OR_PARTITION


async def test_deleting_a_subscribed_topic_revokes_its_partitions(service: Service) -> None:
    await service.stubs.create_topic("orders", 2)
    clicks = await service.stubs.create_topic("clicks", 2)
    member = WireMember(service.stubs.coordinator, "g1", "m", ["orders", "clicks"])
    await converge(service.stubs, "g1", [member])
    assert len(member.partitions()) == 4

    await service.stubs.admin.DeleteTopics(admin_pb2.DeleteTopicsRequest(topic_ids=[clicks]))
    await converge(service.stubs, "g1", [member])

    assert {t for t, _ in member.partitions()} != {clicks}
    assert len(member.partitions()) == 2


async def test_groups_are_listed_with_filters_and_described(service: Service) -> None:
    await service.stubs.create_topic("orders", 2)
    stable = WireMember(service.stubs.coordinator, "stable-group", "a", ["orders"])
    await converge(service.stubs, "stable-group", [stable])
    left = WireMember(service.stubs.coordinator, "empty-group", "b", ["orders"])
    await left.heartbeat()
    await left.leave()

    listed = await service.stubs.admin.ListGroups(admin_pb2.ListGroupsRequest())
    assert [(g.group_id, g.group_state, g.group_type) for g in listed.groups] == [
        ("empty-group", "Empty", "consumer"),
        ("stable-group", "Stable", "consumer"),
    ]
    only_stable = await service.stubs.admin.ListGroups(admin_pb2.ListGroupsRequest(states_filter=["STABLE"]))
    assert [g.group_id for g in only_stable.groups] == ["stable-group"]
    none = await service.stubs.admin.ListGroups(admin_pb2.ListGroupsRequest(types_filter=["classic"]))
    assert list(none.groups) == []

    described = await service.stubs.describe("stable-group")
    assert (described.group_state, described.assignor_name) == ("Stable", "uniform")
    (member,) = described.members
    assert member.member_id == "a"
    assert list(member.subscribed_topic_names) == ["orders"]
    assert member.target_assignment == member.assignment
    assert member.client_host == "127.0.0.1"


async def test_only_empty_groups_can_be_deleted(service: Service) -> None:
    await service.stubs.create_topic("orders", 2)
    busy = WireMember(service.stubs.coordinator, "busy", "a", ["orders"])
    await busy.heartbeat()
    gone = WireMember(service.stubs.coordinator, "gone", "b", ["orders"])
    await gone.heartbeat()
    await gone.leave()

    response = await service.stubs.admin.DeleteGroups(
        admin_pb2.DeleteGroupsRequest(group_ids=["busy", "gone", "never", ""])
    )
    assert [(r.group_id, r.error_code) for r in response.results] == [
        ("busy", common_pb2.NON_EMPTY_GROUP),
        ("gone", common_pb2.NONE),
        ("never", common_pb2.GROUP_ID_NOT_FOUND),
        ("", common_pb2.INVALID_REQUEST),
    ]
    rows = await service.coordinator.store.fetch("SELECT group_id FROM groups ORDER BY group_id")
    assert [r["group_id"] for r in rows] == ["busy"]
    assert (await service.stubs.describe("gone")).error_code == common_pb2.GROUP_ID_NOT_FOUND


async def test_health_and_reflection_are_served(service: Service) -> None:
    health = health_pb2_grpc.HealthStub(service.stubs.channel)
    for name in ("", "regroup.v1.GroupCoordinator", "regroup.v1.GroupAdmin"):
        status = await health.Check(health_pb2.HealthCheckRequest(service=name))
        assert status.status == health_pb2.HealthCheckResponse.SERVING

    stub = reflection_pb2_grpc.ServerReflectionStub(service.stubs.channel)
    call = stub.ServerReflectionInfo()
    await call.write(reflection_pb2.ServerReflectionRequest(list_services=""))
    response = await call.read()
    await call.done_writing()
    services = {s.name for s in response.list_services_response.service}
    assert {"regroup.v1.GroupCoordinator", "regroup.v1.GroupAdmin", "grpc.health.v1.Health"} <= services


async def test_a_new_topic_rebalances_only_the_groups_it_concerns(service: Service) -> None:
    await service.stubs.create_topic("orders", 1)
    await service.stubs.create_topic("clicks", 1)
    by_regex = WireMember(service.stubs.coordinator, "regex-group", "r", [])
    await service.stubs.coordinator.ConsumerGroupHeartbeat(
        by_regex.join_request().__class__(
            group_id="regex-group",
            member_id="r",
            member_epoch=0,
            rebalance_timeout_ms=1000,
            subscribed_topic_regex="orders.*",
            topic_partitions=common_pb2.TopicPartitionsList(),
        )
    )
    other = WireMember(service.stubs.coordinator, "click-group", "c", ["clicks"])
    await other.heartbeat()
    before = {g: (await service.stubs.describe(g)).group_epoch for g in ("regex-group", "click-group")}

    await service.stubs.create_topic("orders-eu", 2)

    after = {g: (await service.stubs.describe(g)).group_epoch for g in ("regex-group", "click-group")}
    assert after == {"regex-group": before["regex-group"] + 1, "click-group": before["click-group"]}
