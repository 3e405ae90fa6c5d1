"""End to end: issue 24's member fields (capacity, rack, require_co_partitioning)
sent by the real client, kept across a restart, and reported by DescribeGroups."""

from __future__ import annotations

import asyncio

import pytest

from regroup.client import CommitFailed, GroupMember, RegroupError
from regroup.v1 import admin_pb2, common_pb2
from tests.support.service import ServiceFactory

FAST = {"heartbeat_interval_ms": 100, "session_timeout_ms": 3000}


async def _create(admin: object, name: str, partitions: int, racks: list[str] | None = None) -> None:
    answer = await admin.CreateTopics(  # type: ignore[attr-defined]
        admin_pb2.CreateTopicsRequest(
            topics=[
                admin_pb2.CreatableTopic(name=name, num_partitions=partitions, partition_racks=racks or [])
            ]
        )
    )
    assert answer.topics[0].error_code == common_pb2.NONE, answer.topics[0].error_message


async def test_weights_racks_and_co_partitioning_are_sent_kept_and_described(
    start_service: ServiceFactory,
) -> None:
    service = await start_service(**FAST)
    racks = ["r1", "r1", "r2", "r2"]
    await _create(service.stubs.admin, "clicks", 4, racks)
    await _create(service.stubs.admin, "views", 4, racks)
    await _create(service.stubs.admin, "orders", 3)
    target = f"127.0.0.1:{service.server.port}"

    async with GroupMember(target) as refused:
        with pytest.raises(RegroupError) as error:
            await refused.join(
                "g", topics=["clicks", "orders"], assignor="range", require_co_partitioning=True
            )
        assert error.value.code == common_pb2.INVALID_REQUEST
        assert "topic clicks has 4 partitions and topic orders has 3" in str(error.value)

    async with GroupMember(target) as member:
        await member.join(
            "g",
            topics=["clicks", "views"],
            assignor="range",
            rack_id="r1",
            capacity=7,
            require_co_partitioning=True,
        )
        await member.wait_for_assignment(lambda a: len(a) == 8)
        group = await service.stubs.describe("g")
        (described,) = group.members
        assert (described.capacity, described.rack_id, described.rack_local_partitions) == (7, "r1", 4)
        assert [list(s.values) for s in group.co_partitioning.co_partitioned_topics] == [["clicks", "views"]]
        assert group.co_partitioning.error == ""
        locality = group.rack_locality
        assert (locality.partitions_with_rack, locality.rack_local_partitions, locality.best_achievable) == (
            8,
            4,
            4,
        )

        # A topic grown afterwards breaks co-partitioning: reported, not refused.
        grown = await service.stubs.admin.CreatePartitions(
            admin_pb2.CreatePartitionsRequest(
                topics=[
                    admin_pb2.CreatePartitionsRequest.Topic(name="views", count=5, new_partition_racks=["r1"])
                ]
            )
        )
        assert grown.topics[0].error_code == common_pb2.NONE, grown.topics[0].error_message
        await member.wait_for_assignment(lambda a: len(a) == 9)
        group = await service.stubs.describe("g")
        assert list(group.co_partitioning.co_partitioned_topics) == []
        assert group.co_partitioning.error == (
            f"Member {member.member_id} requires co-partitioning, but topic clicks has 4 partitions "
            "and topic views has 5."
        )

        member_id = member.member_id
        await member.abort()  # no leave: the member stays in the stored group

    # The metadata is stored: another coordinator on the same database describes the same.
    await service.server.stop()
    again = await start_service(**FAST)
    group = await again.stubs.describe("g")
    assert [(m.member_id, m.capacity, m.rack_id) for m in group.members] == [(member_id, 7, "r1")]


async def test_a_redundant_group_puts_each_partition_on_two_members_with_progress_per_copy(
    start_service: ServiceFactory,
) -> None:
    service = await start_service(**FAST)
    await _create(service.stubs.admin, "docs", 4)
    target = f"127.0.0.1:{service.server.port}"
    members = [GroupMember(target) for _ in range(3)]

    async def holders(copies: int, loads: list[int]) -> dict[int, list[GroupMember]]:
        """Waits until the group is Stable with `copies` holders of each partition."""
        async with asyncio.timeout(15):
            while True:
                held: dict[int, list[GroupMember]] = {}
                for m in members:
                    for tp in m.assignment().partitions:
                        held.setdefault(tp.partition, []).append(m)
                group = await service.stubs.describe("docs-indexers")
                if (
                    group.group_state == "Stable"
                    and sorted(held) == [0, 1, 2, 3]
                    and all(len(h) == copies for h in held.values())
                    and sorted(len(m.assignment().partitions) for m in members) == loads
                ):
                    return held
                await asyncio.sleep(0.05)

    try:
        for m in members:
            await m.join("docs-indexers", topics=["docs"], replicas=2)
        held = await holders(copies=2, loads=[2, 3, 3])
        group = await service.stubs.describe("docs-indexers")
        assert (group.replicas, group.effective_replicas) == (2, 2)
        # DescribeGroups shows each member's partitions as the member sees them.
        for described in group.members:
            (topic,) = described.assignment.topic_partitions
            assert topic.topic_name == "docs" and len(topic.partitions) in (2, 3)

        # Each copy's holder commits its own progress and reads its own back.
        first, second = held[0]
        (tp,) = [tp for tp in first.assignment().partitions if tp.partition == 0]
        await first.commit({tp: 100})
        await second.commit({tp: 200})
        assert await first.committed([tp]) == {tp: 100}
        assert await second.committed([tp]) == {tp: 200}
        (other,) = [m for m in members if m not in held[0]]
        with pytest.raises(CommitFailed):
            await other.commit({tp: 300})

        # One member leaves: the two left hold every partition, once each.
        await members.pop().close()
        await holders(copies=2, loads=[4, 4])
        for m in members:
            await m.abort()  # no leave: they stay in the stored group
        before = await service.stubs.describe("docs-indexers")
    finally:
        for m in members:
            await m.abort()

    # The copies are stored as any assignment: another coordinator loads the same group.
    await service.server.stop()
    again = await start_service(**FAST)
    after = await again.stubs.describe("docs-indexers")
    assert (after.replicas, after.effective_replicas, after.group_epoch) == (2, 2, before.group_epoch)
    assert [m.assignment for m in after.members] == [m.assignment for m in before.members]
