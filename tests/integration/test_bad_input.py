"""Bad input gets a precise error code and message, never a crash, and changes nothing stored."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from regroup.v1 import admin_pb2, common_pb2, coordinator_pb2
from tests.support.service import Service, ServiceFactory
from tests.support.wire import WireMember, converge

# The heartbeat tests also run with heartbeats through a MemberStream (heartbeat_transports,
# conftest.py): the same refusals, codes and messages. The admin tests run once.

Request = coordinator_pb2.ConsumerGroupHeartbeatRequest


def names(*values: str) -> common_pb2.StringList:
    return common_pb2.StringList(values=list(values))


def join(**fields: Any) -> Request:
    base: dict[str, Any] = {
        "group_id": "g1",
        "member_id": "new",
        "member_epoch": 0,
        "rebalance_timeout_ms": 1000,
        "subscribed_topic_names": names("orders"),
        "topic_partitions": common_pb2.TopicPartitionsList(),
    }
    base.update(fields)
    return Request(**{k: v for k, v in base.items() if v is not None})


async def stored_state(service: Service) -> list[Any]:
    rows = []
    for table in ("groups", "members", "target_assignments", "current_assignments", "topics"):
        rows.append(
            [
                tuple(r.values())
                for r in await service.coordinator.store.fetch(f"SELECT * FROM {table} ORDER BY 1, 2")
            ]
        )
    return rows


@pytest.fixture
async def settled(service: Service) -> Service:
    await service.stubs.create_topic("orders", 4)
    members = [WireMember(service.stubs.coordinator, "g1", f"m{i}", ["orders"]) for i in range(2)]
    await converge(service.stubs, "g1", members)
    return service


HEARTBEAT_CASES = [
    ("empty group id", join(group_id=""), common_pb2.INVALID_REQUEST, "GroupId can't be empty."),
    ("blank group id", join(group_id="   "), common_pb2.INVALID_REQUEST, "GroupId can't be empty."),
    ("empty instance id", join(instance_id=""), common_pb2.INVALID_REQUEST, "InstanceId can't be empty."),
    ("empty rack id", join(rack_id=""), common_pb2.INVALID_REQUEST, "RackId can't be empty."),
    (
        "missing member id",
        Request(group_id="g1", member_epoch=3),
        common_pb2.INVALID_REQUEST,
        "MemberId can't be empty.",
    ),
    (
        "join without rebalance timeout",
        join(rebalance_timeout_ms=None),
        common_pb2.INVALID_REQUEST,
        "RebalanceTimeoutMs must be provided in first request.",
    ),
    (
        "join with rebalance timeout -1",
        join(rebalance_timeout_ms=-1),
        common_pb2.INVALID_REQUEST,
        "RebalanceTimeoutMs must be provided in first request.",
    ),
    (
        "join without topic partitions",
        join(topic_partitions=None),
        common_pb2.INVALID_REQUEST,
        "TopicPartitions must be empty when (re-)joining.",
    ),
    (
        "join owning partitions",
        join(
            topic_partitions=common_pb2.TopicPartitionsList(
                topics=[common_pb2.TopicPartitions(topic_name="orders", partitions=[0])]
            )
        ),
        common_pb2.INVALID_REQUEST,
        "TopicPartitions must be empty when (re-)joining.",
    ),
    (
        "join without subscription",
        join(subscribed_topic_names=None),
        common_pb2.INVALID_REQUEST,
        "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining.",
    ),
    (
        "static leave without instance id",
        Request(group_id="g1", member_id="m0", member_epoch=-2),
        common_pb2.INVALID_REQUEST,
        "InstanceId can't be null.",
    ),
    (
        "epoch below -2",
        Request(group_id="g1", member_id="m0", member_epoch=-3),
        common_pb2.INVALID_REQUEST,
        "MemberEpoch is invalid.",
    ),
    (
        "negative rebalance timeout",
        join(rebalance_timeout_ms=-7),
        common_pb2.INVALID_REQUEST,
        "RebalanceTimeoutMs must be -1 (unchanged) or a non-negative number of milliseconds, got -7.",
    ),
    (
        "negative owned partition",
        Request(
            group_id="g1",
            member_id="m0",
            member_epoch=1,
            topic_partitions=common_pb2.TopicPartitionsList(
                topics=[common_pb2.TopicPartitions(topic_name="orders", partitions=[-1])]
            ),
        ),
        common_pb2.INVALID_REQUEST,
        "TopicPartitions contains a negative partition (-1) for topic orders.",
    ),
    (
        "owned entry without a topic",
        Request(
            group_id="g1",
            member_id="m0",
            member_epoch=1,
            topic_partitions=common_pb2.TopicPartitionsList(
                topics=[common_pb2.TopicPartitions(partitions=[0])]
            ),
        ),
        common_pb2.INVALID_REQUEST,
        "TopicPartitions entries must name a topic_id or a topic_name.",
    ),
    (
        "huge group id",
        join(group_id="g" * 1_000_000),
        common_pb2.INVALID_REQUEST,
        "GroupId is longer than 255 characters (1000000).",
    ),
    (
        "huge member id",
        join(member_id="m" * 100_000),
        common_pb2.INVALID_REQUEST,
        "MemberId is longer than 255 characters (100000).",
    ),
    (
        "huge instance id",
        join(instance_id="i" * 300),
        common_pb2.INVALID_REQUEST,
        "InstanceId is longer than 255 characters (300).",
    ),
    (
        "empty topic name",
        join(subscribed_topic_names=names("orders", "")),
        common_pb2.INVALID_REQUEST,
        "SubscribedTopicNames contains an empty topic name.",
    ),
    (
        "huge topic name",
        join(subscribed_topic_names=names("t" * 250)),
        common_pb2.INVALID_REQUEST,
        "SubscribedTopicNames contains a name longer than 249 characters.",
    ),
    (
        "huge regex",
        join(subscribed_topic_names=None, subscribed_topic_regex="a" * 1001),
        common_pb2.INVALID_REQUEST,
        "SubscribedTopicRegex is longer than 1000 characters (1001).",
    ),
    (
        "invalid regex",
        join(subscribed_topic_names=None, subscribed_topic_regex="orders(["),
        common_pb2.INVALID_REGULAR_EXPRESSION,
        "SubscribedTopicRegex `orders([` is not a valid regular expression",
    ),
    (
        "regex with a backreference",
        join(subscribed_topic_names=None, subscribed_topic_regex="(orders)-\\1"),
        common_pb2.INVALID_REGULAR_EXPRESSION,
        "SubscribedTopicRegex `(orders)-\\1` is not a valid regular expression: invalid escape sequence: "
        "\\1. Regexes use RE2 syntax",
    ),
    (
        "regex with a lookahead",
        join(subscribed_topic_names=None, subscribed_topic_regex="(?!orders).*"),
        common_pb2.INVALID_REGULAR_EXPRESSION,
        "invalid perl operator: (?!. Regexes use RE2 syntax",
    ),
    (
        "regex over the memory budget",
        join(subscribed_topic_names=None, subscribed_topic_regex="\\p{L}{100}"),
        common_pb2.INVALID_REGULAR_EXPRESSION,
        "its compiled program exceeds the 1 MiB memory budget",
    ),
    (
        "unknown assignor",
        join(server_assignor="bar"),
        common_pb2.UNSUPPORTED_ASSIGNOR,
        "ServerAssignor bar is not supported. Supported assignors: uniform, range, leader.",
    ),
    (
        "unknown group",
        Request(group_id="nope", member_id="m0", member_epoch=1),
        common_pb2.GROUP_ID_NOT_FOUND,
        "Group nope not found.",
    ),
    (
        "unknown member",
        Request(group_id="g1", member_id="ghost", member_epoch=1),
        common_pb2.UNKNOWN_MEMBER_ID,
        "Member ghost is not a member of group g1.",
    ),
    (
        "epoch from the future",
        Request(group_id="g1", member_id="m0", member_epoch=99),
        common_pb2.FENCED_MEMBER_EPOCH,
        "greater member epoch (99)",
    ),
    (
        "stale epoch without owned partitions",
        Request(group_id="g1", member_id="m0", member_epoch=1),
        common_pb2.FENCED_MEMBER_EPOCH,
        "smaller member epoch (1)",
    ),
    (
        "leave of an unknown member",
        Request(group_id="g1", member_id="ghost", member_epoch=-1),
        common_pb2.UNKNOWN_MEMBER_ID,
        "Member ghost is not a member of group g1.",
    ),
    (
        "static heartbeat of an unknown instance",
        Request(group_id="g1", member_id="m0", member_epoch=2, instance_id="nobody"),
        common_pb2.UNKNOWN_MEMBER_ID,
        "Instance id nobody is unknown.",
    ),
]


@pytest.mark.heartbeat_transports  # the same answers through a MemberStream (conftest.py)
@pytest.mark.parametrize(
    ("case", "request_", "code", "message"), HEARTBEAT_CASES, ids=[c[0] for c in HEARTBEAT_CASES]
)
async def test_bad_heartbeat_is_refused_with_its_code_and_changes_nothing(
    settled: Service, case: str, request_: Request, code: int, message: str
) -> None:
    before = await stored_state(settled)
    groups_before = {g: (grp.group_epoch, len(grp.members)) for g, grp in settled.coordinator.groups.items()}

    response = await settled.stubs.coordinator.ConsumerGroupHeartbeat(request_)

    assert response.error_code == code, response.error_message
    assert message in response.error_message
    assert await stored_state(settled) == before
    assert {
        g: (grp.group_epoch, len(grp.members)) for g, grp in settled.coordinator.groups.items()
    } == groups_before


RE2_SYNTAX = (
    "Regexes use RE2 syntax, which has no backreferences or lookaround assertions "
    "(https://github.com/google/re2/wiki/Syntax)."
)


@pytest.mark.heartbeat_transports  # the same answers through a MemberStream (conftest.py)
async def test_regex_re2_refuses_is_answered_and_the_server_keeps_serving(settled: Service) -> None:
    stubs = settled.stubs
    refused = await stubs.coordinator.ConsumerGroupHeartbeat(
        join(member_id="rx", subscribed_topic_names=None, subscribed_topic_regex="(orders)-\\1")
    )

    assert refused.error_code == common_pb2.INVALID_REGULAR_EXPRESSION
    assert refused.error_message == (
        "SubscribedTopicRegex `(orders)-\\1` is not a valid regular expression: invalid escape sequence: "
        f"\\1. {RE2_SYNTAX}"
    )
    health = await health_pb2_grpc.HealthStub(stubs.channel).Check(health_pb2.HealthCheckRequest())
    assert health.status == health_pb2.HealthCheckResponse.SERVING
    # A regex that backtracks catastrophically in Python's `re` (past the age of the universe against
    # this name) is answered at once: RE2 is linear.
    await stubs.create_topic("a" * 249, 1)
    joined = await asyncio.wait_for(
        stubs.coordinator.ConsumerGroupHeartbeat(
            join(member_id="rx", subscribed_topic_names=None, subscribed_topic_regex="(a*)*b")
        ),
        timeout=10,
    )
    assert joined.error_code == common_pb2.NONE, joined.error_message
    assert not joined.HasField("assignment") or not joined.assignment.topic_partitions
    again = await stubs.coordinator.ConsumerGroupHeartbeat(
        Request(group_id="g1", member_id="rx", member_epoch=joined.member_epoch)
    )
    assert again.error_code == common_pb2.NONE, again.error_message
    group = await stubs.describe("g1")
    assert {m.member_id: m.subscribed_topic_regex for m in group.members} == {
        "m0": "",
        "m1": "",
        "rx": "(a*)*b",
    }


@pytest.mark.heartbeat_transports  # the same answers through a MemberStream (conftest.py)
async def test_stored_regex_re2_refuses_matches_nothing_after_a_restart(
    start_service: ServiceFactory,
) -> None:
    first = await start_service()
    await first.stubs.create_topic("orders", 4)
    await first.stubs.create_topic("ordersorders", 2)
    members = [WireMember(first.stubs.coordinator, "g1", f"m{i}", ["orders"]) for i in range(2)]
    await converge(first.stubs, "g1", members)
    await first.server.stop()
    # As a version that compiled regexes with Python's `re` stored it: there it matched ordersorders.
    conn = await asyncpg.connect(first.settings.database_url)
    try:
        await conn.execute(
            "UPDATE members SET subscribed_topic_regex = $1 WHERE group_id = 'g1' AND member_id = 'm0'",
            "(orders)\\1",
        )
    finally:
        await conn.close()

    second = await start_service()
    for member in members:
        member.stub = second.stubs.coordinator
    # Topics change: the group's subscribed topics, hash and target are computed over the stored regex.
    await second.stubs.create_topic("orders2", 1)
    await second.stubs.admin.CreatePartitions(
        admin_pb2.CreatePartitionsRequest(
            topics=[admin_pb2.CreatePartitionsRequest.Topic(name="ordersorders", count=3)]
        )
    )
    await converge(second.stubs, "g1", members)

    group = await second.stubs.describe("g1")
    assert {m.member_id: m.subscribed_topic_regex for m in group.members} == {"m0": "(orders)\\1", "m1": ""}
    orders = {t for m in members for t, _ in m.partitions()}
    assert len(orders) == 1 and sum(len(m.partitions()) for m in members) == 4
    for member in members:
        response = await member.heartbeat()
        assert response.error_code == common_pb2.NONE, response.error_message


@pytest.mark.heartbeat_transports  # the same answers through a MemberStream (conftest.py)
async def test_group_max_size_refuses_new_members_only(start_service: Any) -> None:
    service = await start_service(max_group_size=2)
    await service.stubs.create_topic("orders", 4)
    members = [WireMember(service.stubs.coordinator, "g1", f"m{i}", ["orders"]) for i in range(2)]
    await converge(service.stubs, "g1", members)

    third = await service.stubs.coordinator.ConsumerGroupHeartbeat(join(member_id="m3"))

    assert third.error_code == common_pb2.GROUP_MAX_SIZE_REACHED
    assert "maximum capacity of 2 members" in third.error_message
    for member in members:
        assert (await member.heartbeat()).error_code == common_pb2.NONE


@pytest.mark.heartbeat_transports  # the same answers through a MemberStream (conftest.py)
async def test_request_larger_than_the_size_limit_is_refused_by_grpc(start_service: Any) -> None:
    service = await start_service(max_message_bytes=64 * 1024)
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await service.stubs.coordinator.ConsumerGroupHeartbeat(join(client_id="x" * 100_000))
    assert error.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    # The service is still fine afterwards.
    await service.stubs.create_topic("orders", 1)
    assert (await service.stubs.coordinator.ConsumerGroupHeartbeat(join())).error_code == common_pb2.NONE


TOPIC_CASES = [
    (
        admin_pb2.CreatableTopic(name="", num_partitions=1),
        common_pb2.INVALID_TOPIC_EXCEPTION,
        "can't be empty",
    ),
    (
        admin_pb2.CreatableTopic(name="a b", num_partitions=1),
        common_pb2.INVALID_TOPIC_EXCEPTION,
        "is illegal",
    ),
    (
        admin_pb2.CreatableTopic(name="..", num_partitions=1),
        common_pb2.INVALID_TOPIC_EXCEPTION,
        "cannot be '..'",
    ),
    (
        admin_pb2.CreatableTopic(name="t" * 250, num_partitions=1),
        common_pb2.INVALID_TOPIC_EXCEPTION,
        "longer than 249",
    ),
    (
        admin_pb2.CreatableTopic(name="neg", num_partitions=-5),
        common_pb2.INVALID_PARTITIONS,
        "Number of partitions must be larger than 0 (got -5).",
    ),
    (admin_pb2.CreatableTopic(name="zero", num_partitions=0), common_pb2.INVALID_PARTITIONS, "larger than 0"),
    (
        admin_pb2.CreatableTopic(name="big", num_partitions=2_000_000_000),
        common_pb2.INVALID_PARTITIONS,
        "at most 1000000",
    ),
    (
        admin_pb2.CreatableTopic(name="racks", num_partitions=2, partition_racks=["a"]),
        common_pb2.INVALID_REQUEST,
        "partition_racks must have one entry per partition (2), got 1.",
    ),
    (
        admin_pb2.CreatableTopic(name="orders", num_partitions=3),
        common_pb2.TOPIC_ALREADY_EXISTS,
        "Topic 'orders' already exists.",
    ),
]


@pytest.mark.parametrize(
    ("topic", "code", "message"), TOPIC_CASES, ids=[str(i) for i in range(len(TOPIC_CASES))]
)
async def test_bad_topic_is_refused_and_the_others_in_the_batch_are_created(
    settled: Service, topic: admin_pb2.CreatableTopic, code: int, message: str
) -> None:
    good = admin_pb2.CreatableTopic(name="fine", num_partitions=2)
    response = await settled.stubs.admin.CreateTopics(admin_pb2.CreateTopicsRequest(topics=[topic, good]))

    bad, ok = response.topics
    assert bad.error_code == code, bad.error_message
    assert message in bad.error_message
    assert ok.error_code == common_pb2.NONE and ok.topic_id
    described = await settled.stubs.admin.DescribeTopics(admin_pb2.DescribeTopicsRequest())
    assert sorted(t.name for t in described.topics) == ["fine", "orders"]


async def test_partitions_cannot_shrink_or_grow_unknown_topics(settled: Service) -> None:
    Topic = admin_pb2.CreatePartitionsRequest.Topic
    response = await settled.stubs.admin.CreatePartitions(
        admin_pb2.CreatePartitionsRequest(
            topics=[
                Topic(name="orders", count=2),
                Topic(name="missing", count=5),
                Topic(topic_id="nope", count=5),
            ]
        )
    )
    shrink, missing, unknown_id = response.topics
    assert shrink.error_code == common_pb2.INVALID_PARTITIONS
    assert "must be larger" in shrink.error_message
    assert missing.error_code == common_pb2.UNKNOWN_TOPIC_OR_PARTITION
    assert unknown_id.error_code == common_pb2.UNKNOWN_TOPIC_ID
    described = await settled.stubs.admin.DescribeTopics(admin_pb2.DescribeTopicsRequest(names=["orders"]))
    assert described.topics[0].num_partitions == 4


async def test_huge_names_in_admin_calls_are_refused_without_echoing_them(settled: Service) -> None:
    huge = "t" * 1_000_000
    deleted = await settled.stubs.admin.DeleteTopics(
        admin_pb2.DeleteTopicsRequest(names=[huge], topic_ids=[huge])
    )
    assert [t.error_code for t in deleted.topics] == [
        common_pb2.INVALID_TOPIC_EXCEPTION,
        common_pb2.INVALID_REQUEST,
    ]
    described = await settled.stubs.admin.DescribeTopics(admin_pb2.DescribeTopicsRequest(names=[huge]))
    assert described.topics[0].error_code == common_pb2.INVALID_TOPIC_EXCEPTION
    groups = await settled.stubs.admin.DescribeGroups(admin_pb2.DescribeGroupsRequest(group_ids=[huge]))
    assert groups.groups[0].error_code == common_pb2.INVALID_REQUEST
    for response in (deleted, described, groups):
        assert response.ByteSize() < 10_000
