"""End to end: GroupAdmin.ResetOffsets on offsets committed by real members, over gRPC and Postgres."""

from __future__ import annotations

from typing import Any

from regroup.v1 import admin_pb2, common_pb2, coordinator_pb2
from tests.support.service import Service
from tests.support.wire import Stubs, WireMember, commit_request, converge

GROUP = "g"
Topic = admin_pb2.ResetOffsetsRequest.Topic


async def reset(stubs: Stubs, **fields: Any) -> admin_pb2.ResetOffsetsResponse:
    return await stubs.admin.ResetOffsets(admin_pb2.ResetOffsetsRequest(group_id=GROUP, **fields))


async def committed(stubs: Stubs) -> dict[tuple[str, int], tuple[int, int]]:
    """(topic name, partition) -> (offset, committing member epoch), as an admin fetches them."""
    fetched = await stubs.coordinator.OffsetFetch(
        coordinator_pb2.OffsetFetchRequest(group_id=GROUP, member_epoch=-1)
    )
    assert fetched.error_code == common_pb2.NONE, fetched.error_message
    return {
        (t.name, p.partition): (p.offset, p.committed_member_epoch)
        for t in fetched.topics
        for p in t.partitions
    }


def lines(answer: admin_pb2.ResetOffsetsResponse) -> list[tuple[str, int, int, int]]:
    return [(p.topic_name, p.partition, p.current_offset, p.new_offset) for p in answer.partitions]


async def test_reset_offsets_dry_run_then_each_mode(service: Service) -> None:
    stubs = service.stubs
    orders = await stubs.create_topic("orders", 4)
    audit = await stubs.create_topic("audit", 2)
    members = [WireMember(stubs.coordinator, GROUP, f"m{i}", ["orders", "audit"]) for i in range(2)]
    await converge(stubs, GROUP, members)
    for member in members:
        for topic_id, offset in ((orders, 100), (audit, 7)):
            mine = {p: offset + p for t, p in member.partitions() if t == topic_id}
            if mine:
                response = await stubs.coordinator.OffsetCommit(commit_request(member, topic_id, mine))
                assert response.error_code == common_pb2.NONE
    before = await committed(stubs)
    assert {k: v[0] for k, v in before.items()} == {
        ("orders", 0): 100,
        ("orders", 1): 101,
        ("orders", 2): 102,
        ("orders", 3): 103,
        ("audit", 0): 7,
        ("audit", 1): 8,
    }

    # While a member is in: refused, whatever it asks.
    busy = await reset(stubs, to_offset=0, dry_run=True)
    assert busy.error_code == common_pb2.NON_EMPTY_GROUP and "has 2 members" in busy.error_message
    assert not busy.applied and not busy.partitions
    await members[0].leave()
    busy = await reset(stubs, delete=True)
    assert busy.error_code == common_pb2.NON_EMPTY_GROUP and "has 1 members" in busy.error_message
    await members[1].leave()

    # A dry run answers the plan and changes nothing.
    dry = await reset(stubs, topics=[Topic(name="orders")], shift_by=-101, dry_run=True)
    assert dry.error_code == common_pb2.NONE and not dry.applied
    assert lines(dry) == [
        ("orders", 0, 100, 0),
        ("orders", 1, 101, 0),
        ("orders", 2, 102, 1),
        ("orders", 3, 103, 2),
    ]
    assert await committed(stubs) == before

    # Applied: the same plan, stored as admin commits (member epoch -1).
    wet = await reset(stubs, topics=[Topic(name="orders")], shift_by=-101)
    assert wet.applied and lines(wet) == lines(dry)
    after = await committed(stubs)
    assert after[("orders", 2)] == (1, -1) and after[("audit", 0)] == before[("audit", 0)]

    # To an offset, named by id, some partitions.
    to = await reset(stubs, topics=[Topic(topic_id=audit, partitions=[1])], to_offset=42)
    assert to.applied and lines(to) == [("audit", 1, 8, 42)]
    assert [p.topic_id for p in to.partitions] == [audit]
    assert (await committed(stubs))[("audit", 1)] == (42, -1)

    # Delete everything the group committed (no topic listed).
    gone = await reset(stubs, delete=True)
    assert gone.applied
    assert lines(gone) == [
        ("audit", 0, 7, -1),
        ("audit", 1, 42, -1),
        ("orders", 0, 0, -1),
        ("orders", 1, 0, -1),
        ("orders", 2, 1, -1),
        ("orders", 3, 2, -1),
    ]
    assert await committed(stubs) == {}
    # Nothing left to shift: nothing planned, nothing stored.
    nothing = await reset(stubs, shift_by=5)
    assert nothing.error_code == common_pb2.NONE and not nothing.applied and not nothing.partitions

    # The history has one event per applied reset (cause "reset_offsets"), none for the dry run.
    events = await stubs.admin.ListGroupEvents(
        admin_pb2.ListGroupEventsRequest(
            group_id=GROUP, oldest_first=True, types=[admin_pb2.GROUP_EVENT_TYPE_OFFSETS_RESET]
        )
    )
    assert [(e.reason, e.partition_count) for e in events.events] == [
        ("shift_by", 4),
        ("to_offset", 1),
        ("delete", 6),
    ]


async def test_reset_offsets_refuses_bad_input_precisely(service: Service) -> None:
    stubs = service.stubs
    await stubs.create_topic("orders", 2)
    member = WireMember(stubs.coordinator, GROUP, "m0", ["orders"])
    await converge(stubs, GROUP, [member])
    await member.leave()

    missing = await stubs.admin.ResetOffsets(admin_pb2.ResetOffsetsRequest(group_id="nope", to_offset=1))
    assert missing.error_code == common_pb2.GROUP_ID_NOT_FOUND and not missing.applied
    for fields, message in [
        ({}, "none was"),
        ({"delete": False}, "none was"),
        ({"to_offset": -3}, "to_offset must be >= 0, got -3."),
    ]:
        answer = await reset(stubs, **fields)
        assert answer.error_code == common_pb2.INVALID_REQUEST and message in answer.error_message, fields
    empty_id = await stubs.admin.ResetOffsets(admin_pb2.ResetOffsetsRequest(group_id="", to_offset=1))
    assert empty_id.error_code == common_pb2.INVALID_REQUEST

    partial = await reset(
        stubs,
        topics=[Topic(name="orders", partitions=[1, 5]), Topic(name="ghost", partitions=[0])],
        to_offset=9,
    )
    assert partial.error_code == common_pb2.NONE and partial.applied
    assert [(p.topic_name, p.partition, p.error_code, p.error_message) for p in partial.partitions] == [
        ("ghost", 0, common_pb2.UNKNOWN_TOPIC_OR_PARTITION, "Topic ghost does not exist."),
        ("orders", 1, common_pb2.NONE, ""),
        (
            "orders",
            5,
            common_pb2.UNKNOWN_TOPIC_OR_PARTITION,
            "Partition orders-5 does not exist: orders has 2 partitions.",
        ),
    ]
    assert await committed(stubs) == {("orders", 1): (9, -1)}
