"""Writes that Postgres refuses for a constraint, because another writer got there
first: they answer their real reason, not COORDINATOR_NOT_AVAILABLE (which clients
retry forever), and the coordinator learns what the store holds."""

from __future__ import annotations

from regroup.v1 import admin_pb2, common_pb2
from tests.support.service import Service
from tests.support.wire import WireMember, converge


async def test_a_topic_another_writer_created_answers_topic_already_exists(service: Service) -> None:
    member = WireMember(service.stubs.coordinator, "g", "m", ["orders"])
    await member.heartbeat()  # subscribed to a topic that does not exist yet
    rows = await service.coordinator.store.fetch(
        "INSERT INTO topics (topic_id, name, num_partitions, partition_racks)"
        " VALUES (gen_random_uuid(), 'orders', 3, '{}') RETURNING topic_id"
    )
    elsewhere = str(rows[0]["topic_id"])

    created = await service.stubs.admin.CreateTopics(
        admin_pb2.CreateTopicsRequest(topics=[admin_pb2.CreatableTopic(name="orders", num_partitions=5)])
    )

    assert created.topics[0].error_code == common_pb2.TOPIC_ALREADY_EXISTS
    assert created.topics[0].error_message == "Topic 'orders' already exists."
    assert not service.coordinator.store_down
    # The coordinator learnt the other writer's topic, and the group that wanted it got it.
    described = await service.stubs.admin.DescribeTopics(admin_pb2.DescribeTopicsRequest(names=["orders"]))
    assert [(t.topic_id, t.num_partitions) for t in described.topics] == [(elsewhere, 3)]
    await converge(service.stubs, "g", [member])
    assert member.partitions() == {(elsewhere, p) for p in range(3)}
    # The same request again is refused the same way, from memory this time.
    again = await service.stubs.admin.CreateTopics(
        admin_pb2.CreateTopicsRequest(topics=[admin_pb2.CreatableTopic(name="orders", num_partitions=5)])
    )
    assert again.topics[0].error_code == common_pb2.TOPIC_ALREADY_EXISTS


async def test_a_group_write_another_writer_made_impossible_reloads_the_group(service: Service) -> None:
    await service.stubs.create_topic("orders", 2)
    member = WireMember(service.stubs.coordinator, "g", "m", ["orders"])
    await converge(service.stubs, "g", [member])
    # Another writer deletes the group (its rows go with it).
    await service.coordinator.store.fetch("DELETE FROM groups WHERE group_id = 'g'")

    # A change of the member's metadata alone writes a member row, which now has no group.
    refused = await member.heartbeat(rebalance_timeout_ms=member.rebalance_timeout_ms + 1)
    assert refused.error_code == common_pb2.COORDINATOR_NOT_AVAILABLE
    assert "conflicted" in refused.error_message
    assert not refused.session_renewed  # the store may not have the member: it does not

    # The retry runs against what the store holds: no such group (Kafka's answer to a
    # heartbeat past epoch 0 for a group that does not exist). A rejoin creates it again.
    retried = await member.heartbeat(rebalance_timeout_ms=member.rebalance_timeout_ms + 1)
    assert retried.error_code == common_pb2.GROUP_ID_NOT_FOUND
    member.epoch, member.owned = 0, {}
    await converge(service.stubs, "g", [member])
    assert len(member.partitions()) == 2
