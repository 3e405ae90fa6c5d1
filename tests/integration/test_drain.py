"""End to end: GroupAdmin.DrainMember with real members over gRPC and Postgres."""

from __future__ import annotations

from regroup.v1 import admin_pb2, common_pb2
from tests.support.replicas import owned_by, replicas, topics_known
from tests.support.service import Service, ServiceFactory
from tests.support.wire import Stubs, WireMember, converge

GROUP = "g1"


async def drain(stubs: Stubs, undrain: bool = False, **who: str) -> admin_pb2.DrainMemberResponse:
    return await stubs.admin.DrainMember(admin_pb2.DrainMemberRequest(group_id=GROUP, undrain=undrain, **who))


async def drain_states(stubs: Stubs) -> dict[str, str]:
    return {m.member_id: m.drain_state for m in (await stubs.describe(GROUP)).members}


async def drain_events(stubs: Stubs) -> list[tuple[str, str, str]]:
    """The group's drain events and drain-caused bumps, oldest first: (type, member, reason)."""
    wanted = [
        admin_pb2.GROUP_EVENT_TYPE_MEMBER_DRAINING,
        admin_pb2.GROUP_EVENT_TYPE_MEMBER_DRAINED,
        admin_pb2.GROUP_EVENT_TYPE_MEMBER_UNDRAINED,
        admin_pb2.GROUP_EVENT_TYPE_GROUP_EPOCH_BUMPED,
    ]
    answer = await stubs.admin.ListGroupEvents(
        admin_pb2.ListGroupEventsRequest(group_id=GROUP, oldest_first=True, limit=1000, types=wanted)
    )
    assert answer.error_code == common_pb2.NONE, answer.error_message
    return [
        (admin_pb2.GroupEventType.Name(e.type).removeprefix("GROUP_EVENT_TYPE_"), e.member_id, e.reason)
        for e in answer.events
        if e.type != admin_pb2.GROUP_EVENT_TYPE_GROUP_EPOCH_BUMPED or "drain" in e.reason
    ]


def targets(group: admin_pb2.DescribedGroup) -> dict[str, set[tuple[str, int]]]:
    return {
        m.member_id: {(tp.topic_id, p) for tp in m.target_assignment.topic_partitions for p in tp.partitions}
        for m in group.members
    }


async def test_drain_by_member_and_instance_id_then_leave_and_undrain(service: Service) -> None:
    stubs = service.stubs
    topic_id = await stubs.create_topic("orders", 12)
    members = [WireMember(stubs.coordinator, GROUP, f"m{i}", ["orders"]) for i in range(3)]
    members.append(WireMember(stubs.coordinator, GROUP, "m3", ["orders"], instance_id="i3"))
    m0, m1, m2, m3 = members
    await converge(stubs, GROUP, members)
    assert sorted(len(m.partitions()) for m in members) == [3, 3, 3, 3]
    epoch = (await stubs.describe(GROUP)).group_epoch

    # By member id: DRAINING while it still owns its partitions, DRAINED once it released them.
    answer = await drain(stubs, member_id="m1")
    assert answer.error_code == common_pb2.NONE, answer.error_message
    assert (answer.member_id, answer.drain_state, answer.group_epoch) == ("m1", "DRAINING", epoch + 1)
    assert await drain_states(stubs) == {"m0": "", "m1": "DRAINING", "m2": "", "m3": ""}
    await converge(stubs, GROUP, members)
    assert await drain_states(stubs) == {"m0": "", "m1": "DRAINED", "m2": "", "m3": ""}
    assert m1.partitions() == set()
    assert sorted(len(m.partitions()) for m in (m0, m2, m3)) == [4, 4, 4]

    # Again: nothing changes, the state is answered.
    again = await drain(stubs, member_id="m1")
    assert (again.error_code, again.drain_state, again.group_epoch) == (common_pb2.NONE, "DRAINED", epoch + 1)

    # By instance id.
    answer = await drain(stubs, instance_id="i3")
    assert (answer.error_code, answer.member_id, answer.drain_state) == (common_pb2.NONE, "m3", "DRAINING")
    await converge(stubs, GROUP, members)
    assert (await drain_states(stubs))["m3"] == "DRAINED"
    assert m3.partitions() == set() and sorted(len(m.partitions()) for m in (m0, m2)) == [6, 6]
    owned = m0.partitions() | m2.partitions()
    assert owned == {(topic_id, p) for p in range(12)}

    # A drained member that leaves moves nothing: the others' targets stay as they are.
    before = await stubs.describe(GROUP)
    await m1.leave()
    members.remove(m1)
    await converge(stubs, GROUP, members)
    after = await stubs.describe(GROUP)
    assert after.group_epoch == before.group_epoch + 1
    assert {m: t for m, t in targets(after).items()} == {
        m: t for m, t in targets(before).items() if m != "m1"
    }
    assert m0.partitions() | m2.partitions() == owned

    # Undrain: back in service and given its share again.
    answer = await drain(stubs, undrain=True, instance_id="i3")
    assert (answer.error_code, answer.member_id, answer.drain_state) == (common_pb2.NONE, "m3", "")
    await converge(stubs, GROUP, members)
    assert await drain_states(stubs) == {"m0": "", "m2": "", "m3": ""}
    assert sorted(len(m.partitions()) for m in members) == [4, 4, 4]

    # The group's history tells each step (derived from the causes "drain" and "undrain").
    assert await drain_events(stubs) == [
        ("MEMBER_DRAINING", "m1", ""),
        ("GROUP_EPOCH_BUMPED", "", "member_draining"),
        ("MEMBER_DRAINED", "m1", ""),
        ("MEMBER_DRAINING", "m3", ""),
        ("GROUP_EPOCH_BUMPED", "", "member_draining"),
        ("MEMBER_DRAINED", "m3", ""),
        ("MEMBER_UNDRAINED", "m3", ""),
        ("GROUP_EPOCH_BUMPED", "", "member_undrained"),
    ]


async def test_drain_refuses_bad_input_precisely(service: Service) -> None:
    stubs = service.stubs
    await stubs.create_topic("orders", 2)
    member = WireMember(stubs.coordinator, GROUP, "m0", ["orders"])
    await converge(stubs, GROUP, [member])
    cases = [
        ({"member_id": "m0", "instance_id": "i0"}, common_pb2.INVALID_REQUEST, "got both"),
        ({}, common_pb2.INVALID_REQUEST, "got neither"),
        ({"member_id": "nobody"}, common_pb2.UNKNOWN_MEMBER_ID, "Member nobody is not a member of group g1"),
        ({"instance_id": "nobody"}, common_pb2.UNKNOWN_MEMBER_ID, "has instance id nobody"),
    ]
    for who, code, message in cases:
        answer = await drain(stubs, **who)
        assert answer.error_code == code and message in answer.error_message, (who, answer)
    missing = await stubs.admin.DrainMember(admin_pb2.DrainMemberRequest(group_id="nope", member_id="m0"))
    assert missing.error_code == common_pb2.GROUP_ID_NOT_FOUND, missing
    assert await drain_states(stubs) == {"m0": ""}


async def test_draining_is_stored_and_survives_a_restart(start_service: ServiceFactory) -> None:
    first = await start_service()
    await first.stubs.create_topic("orders", 4)
    members = [WireMember(first.stubs.coordinator, GROUP, f"m{i}", ["orders"]) for i in range(2)]
    await converge(first.stubs, GROUP, members)
    assert (await drain(first.stubs, member_id="m0")).error_code == common_pb2.NONE
    await converge(first.stubs, GROUP, members)
    await first.server.stop()

    second = await start_service()
    assert await drain_states(second.stubs) == {"m0": "DRAINED", "m1": ""}
    for member in members:
        member.stub = second.stubs.coordinator
    await converge(second.stubs, GROUP, members)
    assert members[0].partitions() == set() and len(members[1].partitions()) == 4


async def test_drain_and_reset_through_a_replica_that_does_not_own_the_group(
    start_service: ServiceFactory,
) -> None:
    """Both admin calls are answered by the group's owner: forwarded there (or, below, refused
    with NOT_COORDINATOR and its address when forwarding is off)."""
    a, b = await replicas(start_service, 2)
    await a.stubs.create_topic("orders", 4)
    await topics_known([a, b], "orders")
    group = owned_by(b)
    members = [WireMember(a.stubs.coordinator, group, f"m{i}", ["orders"]) for i in range(2)]
    await converge(a.stubs, group, members)
    answer = await a.stubs.admin.DrainMember(admin_pb2.DrainMemberRequest(group_id=group, member_id="m0"))
    assert (answer.error_code, answer.drain_state) == (common_pb2.NONE, "DRAINING"), answer
    await converge(a.stubs, group, members)
    assert members[0].partitions() == set() and len(members[1].partitions()) == 4
    for member in members:
        await member.leave()
    reset = await a.stubs.admin.ResetOffsets(admin_pb2.ResetOffsetsRequest(group_id=group, delete=True))
    assert reset.error_code == common_pb2.NONE, reset


async def test_without_forwarding_drain_and_reset_name_the_owner(start_service: ServiceFactory) -> None:
    c, d = await replicas(start_service, 2, forward=False)
    group = owned_by(d)
    refused = await c.stubs.admin.DrainMember(admin_pb2.DrainMemberRequest(group_id=group, member_id="m0"))
    assert (refused.error_code, refused.coordinator_address) == (common_pb2.NOT_COORDINATOR, d.server.address)
    refused_reset = await c.stubs.admin.ResetOffsets(
        admin_pb2.ResetOffsetsRequest(group_id=group, to_offset=0)
    )
    assert refused_reset.error_code == common_pb2.NOT_COORDINATOR
    assert refused_reset.coordinator_address == d.server.address
