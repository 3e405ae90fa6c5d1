"""Offsets fenced by member epoch and ownership, on the real server and Postgres."""

from __future__ import annotations

import pytest

from regroup.client import CommitFailed, GroupAdmin, GroupMember, RegroupError, TopicPartition
from regroup.server.clock import ManualClock
from regroup.v1 import common_pb2, coordinator_pb2
from tests.support.service import Service, ServiceFactory
from tests.support.wire import WireMember, commit_request, converge


async def test_commit_fencing_cases(service: Service) -> None:
    topic = await service.stubs.create_topic("orders", 4)
    a = WireMember(service.stubs.coordinator, "g", "a", ["orders"])
    b = WireMember(service.stubs.coordinator, "g", "b", ["orders"])
    await converge(service.stubs, "g", [a, b])
    stub = service.stubs.coordinator
    mine = sorted(p for _, p in a.partitions())
    theirs = sorted(p for _, p in b.partitions())

    response = await stub.OffsetCommit(commit_request(a, topic, {mine[0]: 10, theirs[0]: 20}))
    assert response.error_code == common_pb2.NONE
    codes = {p.partition: p.error_code for p in response.topics[0].partitions}
    assert codes == {mine[0]: common_pb2.NONE, theirs[0]: common_pb2.PARTITION_NOT_OWNED}

    stale = await stub.OffsetCommit(commit_request(a, topic, {mine[0]: 11}, member_epoch=a.epoch - 1))
    assert stale.error_code == common_pb2.STALE_MEMBER_EPOCH
    unknown = await stub.OffsetCommit(commit_request(a, topic, {mine[0]: 11}, member_id="nobody"))
    assert unknown.error_code == common_pb2.UNKNOWN_MEMBER_ID
    missing = await stub.OffsetCommit(commit_request(a, topic, {mine[0]: 11}, group_id="nope"))
    assert missing.error_code == common_pb2.GROUP_ID_NOT_FOUND
    admin = await stub.OffsetCommit(commit_request(a, topic, {0: 1}, member_id="", member_epoch=-1))
    assert admin.error_code == common_pb2.UNKNOWN_MEMBER_ID and "empty" in admin.error_message
    bad = await stub.OffsetCommit(commit_request(a, topic, {mine[0]: -5, 99: 1}))
    assert [p.error_code for p in bad.topics[0].partitions] == [
        common_pb2.INVALID_REQUEST,
        common_pb2.UNKNOWN_TOPIC_OR_PARTITION,
    ]

    fetched = await stub.OffsetFetch(
        coordinator_pb2.OffsetFetchRequest(group_id="g", member_id="a", member_epoch=a.epoch)
    )
    assert [(p.partition, p.offset, p.committed_member_epoch) for p in fetched.topics[0].partitions] == [
        (mine[0], 10, a.epoch)
    ]
    assert fetched.topics[0].name == "orders"


async def test_a_former_owner_cannot_commit_after_its_partition_moved(service: Service) -> None:
    await service.stubs.create_topic("orders", 2)
    topic = TopicPartition("orders", 0)
    async with GroupMember(f"127.0.0.1:{service.server.port}") as first:
        await first.join("g", topics=["orders"])
        owned = await first.wait_for_assignment(lambda a: len(a) == 2)
        tp = sorted(owned.partitions)[0]
        await first.commit({tp: (5, "first")})
        async with GroupMember(f"127.0.0.1:{service.server.port}") as second:
            await second.join("g", topics=["orders"])
            await second.wait_for_assignment(lambda a: len(a) == 1)
            await first.wait_for_assignment(lambda a: len(a) == 1)
            moved = next(iter(second.assignment().partitions))
            # The first member, told to give it up, no longer owns it: its commit is refused.
            with pytest.raises(CommitFailed) as refused:
                await first.commit({moved: 100})
            assert refused.value.partitions[moved].code == common_pb2.PARTITION_NOT_OWNED
            await second.commit({moved: 7})
            assert (await second.committed([moved]))[moved] == 7
    assert topic.topic == "orders"


async def test_admin_commit_into_an_empty_group_and_fetch_after_restart(
    start_service: ServiceFactory,
) -> None:
    first = await start_service()
    await first.stubs.create_topic("orders", 3)
    async with GroupAdmin(f"127.0.0.1:{first.server.port}") as admin:
        await admin.commit_offsets("fresh", {("orders", 0): 42, ("orders", 2): 7})
        assert await admin.fetch_offsets("fresh") == {("orders", 0): 42, ("orders", 2): 7}
        (listing,) = await admin.list_groups()
        assert (listing.group_id, listing.group_state) == ("fresh", "Empty")
    await first.server.stop()

    second = await start_service()
    async with GroupAdmin(f"127.0.0.1:{second.server.port}") as admin:
        assert await admin.fetch_offsets("fresh") == {("orders", 0): 42, ("orders", 2): 7}
        async with GroupMember(f"127.0.0.1:{second.server.port}") as member:
            await member.join("fresh", topics=["orders"])
            await member.wait_for_assignment(lambda a: len(a) == 3)
            committed = await member.committed()
            assert {(tp.topic, tp.partition): o for tp, o in committed.items()} == {
                ("orders", 0): 42,
                ("orders", 2): 7,
            }
            with pytest.raises(RegroupError) as busy:
                await admin.commit_offsets("fresh", {("orders", 1): 1})
            assert busy.value.code == common_pb2.UNKNOWN_MEMBER_ID
        await admin.delete_group("fresh")
        with pytest.raises(RegroupError):
            await admin.describe_group("fresh")
        assert await admin.fetch_offsets("fresh") == {}
    rows = await second.coordinator.store.fetch("SELECT count(*) AS n FROM offsets WHERE group_id = 'fresh'")
    assert rows[0]["n"] == 0


async def test_offsets_of_an_empty_group_expire_after_the_retention(start_service: ServiceFactory) -> None:
    clock = ManualClock()
    service = await start_service(clock=clock, offsets_retention_ms=10_000)
    await service.stubs.create_topic("orders", 2)
    async with GroupAdmin(f"127.0.0.1:{service.server.port}") as admin:
        await admin.commit_offsets("g", {("orders", 0): 1})
        clock.advance(6_000)
        await admin.commit_offsets("g", {("orders", 1): 2})
        clock.advance(5_000)
        assert await service.coordinator.expire_offsets() == 1
        assert await admin.fetch_offsets("g") == {("orders", 1): 2}
        clock.advance(6_000)
        assert await service.coordinator.expire_offsets() == 1
        assert await admin.fetch_offsets("g") == {}
