"""Several replicas on one database: shards spread over them, any replica answers for
any group (forwarding, or NOT_COORDINATOR with the owner's address), FindCoordinator,
and a graceful stop that hands its shards over without a rebalance."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from regroup.client import GroupAdmin
from regroup.server.timers import TimerKey
from regroup.v1 import admin_pb2, common_pb2, coordinator_pb2
from tests.support.replicas import FAST, owned_by, replicas, spread
from tests.support.service import Service, ServiceFactory
from tests.support.wire import WireMember, converge


async def test_shards_spread_over_the_replicas(start_service: ServiceFactory) -> None:
    services = await replicas(start_service, 3)
    sizes = sorted(len(s.coordinator.shards.held) for s in services)
    assert sum(sizes) == 64 and sizes[-1] - sizes[0] <= 1 + 64 % 3, sizes


async def test_any_replica_answers_for_any_group_by_forwarding(start_service: ServiceFactory) -> None:
    a = await start_service(**FAST)
    await a.stubs.create_topic("orders", 4)
    b = await start_service(**FAST)
    await spread([a, b])
    group = owned_by(b)
    # Members talk to a only; b owns the group.
    members = [WireMember(a.stubs.coordinator, group, f"m{i}", ["orders"]) for i in range(2)]
    await converge(a.stubs, group, members)
    assert a.server._forwarder is not None and a.server._forwarder.forwarded > 0
    assert a.coordinator.group(group) is None and b.coordinator.group(group) is not None
    assert sorted(len(m.partitions()) for m in members) == [2, 2]
    # Described alike through either replica.
    for service in (a, b):
        described = await service.stubs.describe(group)
        assert described.error_code == common_pb2.NONE and len(described.members) == 2

    found = await a.stubs.coordinator.FindCoordinator(coordinator_pb2.FindCoordinatorRequest(group_id=group))
    assert (found.error_code, found.address) == (common_pb2.NONE, b.server.address)
    assert found.replica_id == b.coordinator.store.replica_id
    assert found.shard == b.coordinator.shards.shard(group)


async def test_without_forwarding_the_refusal_names_the_owner(start_service: ServiceFactory) -> None:
    a, b = await replicas(start_service, 2, forward=False)
    group = owned_by(b)
    response = await WireMember(a.stubs.coordinator, group, "m", ["orders"]).heartbeat()
    assert response.error_code == common_pb2.NOT_COORDINATOR
    assert response.coordinator_address == b.server.address
    # The address is where the call succeeds.
    answered = await WireMember(b.stubs.coordinator, group, "m", ["orders"]).heartbeat()
    assert answered.error_code == common_pb2.NONE


async def test_find_coordinator_refuses_an_invalid_group_id(service: Service) -> None:
    found = await service.stubs.coordinator.FindCoordinator(
        coordinator_pb2.FindCoordinatorRequest(group_id="")
    )
    assert found.error_code == common_pb2.INVALID_REQUEST and "GroupId" in found.error_message


async def test_a_graceful_stop_hands_its_groups_over_without_a_rebalance(
    start_service: ServiceFactory,
) -> None:
    a = await start_service(**FAST)
    await a.stubs.create_topic("orders", 4)
    b = await start_service(**FAST)
    await spread([a, b])
    group = owned_by(a)
    members = [WireMember(b.stubs.coordinator, group, f"m{i}", ["orders"]) for i in range(2)]
    await converge(b.stubs, group, members)
    epochs = [m.epoch for m in members]
    owned = [m.partitions() for m in members]

    stopped_at = time.monotonic()
    await a.server.stop()
    while b.coordinator.shards.shard(
        group
    ) not in b.coordinator.shards.held or not b.coordinator.shards.serves(
        group, b.coordinator.clock.monotonic_ms()
    ):
        assert time.monotonic() - stopped_at < 2.0, "b did not take the released shards"
        await asyncio.sleep(0.01)
    for member in members:
        response = await member.heartbeat()
        assert response.error_code == common_pb2.NONE
    # Same epochs, same partitions: no rebalance, nobody fenced.
    assert [m.epoch for m in members] == epochs and [m.partitions() for m in members] == owned
    assert len(b.coordinator.shards.held) == 64


async def test_a_topic_change_on_one_replica_bumps_the_groups_another_serves(
    start_service: ServiceFactory,
) -> None:
    a, b = await replicas(start_service, 2)
    await a.stubs.create_topic("orders", 2)
    group = owned_by(b)
    deadline = time.monotonic() + 5
    while "orders" not in b.coordinator.image.by_name:  # b heard of it (NOTIFY) and reloaded
        assert time.monotonic() < deadline, "b never learned of the topic"
        await asyncio.sleep(0.01)
    member = WireMember(b.stubs.coordinator, group, "m", ["orders"])
    await converge(b.stubs, group, [member])
    epoch = b.coordinator.group(group).group_epoch

    # Grown through a: b's group is bumped once, and its member gets the new partitions.
    grown = await a.stubs.admin.CreatePartitions(
        admin_pb2.CreatePartitionsRequest(
            topics=[admin_pb2.CreatePartitionsRequest.Topic(name="orders", count=4)]
        )
    )
    assert grown.topics[0].error_code == common_pb2.NONE
    while b.coordinator.group(group).group_epoch == epoch:
        assert time.monotonic() < deadline + 5, "b's group was never bumped"
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.3)  # any second bump would come now
    assert b.coordinator.group(group).group_epoch == epoch + 1
    await converge(b.stubs, group, [member])
    assert len(member.partitions()) == 4


async def test_any_replica_lists_every_group_page_by_page(start_service: ServiceFactory) -> None:
    a, b, c = await replicas(start_service, 3)
    await a.stubs.create_topic("orders", 1)
    groups = [f"list-{i:02d}" for i in range(30)]
    for group in groups:  # joined through a; each group lives on its shard's owner
        response = await WireMember(a.stubs.coordinator, group, "m", ["orders"]).heartbeat()
        assert response.error_code == common_pb2.NONE
    assert all(len(s.coordinator.group_ids()) < len(groups) for s in (a, b, c))
    for service in (a, b, c):
        listed: list[str] = []
        token = ""
        while True:
            page = await service.stubs.admin.ListGroups(
                admin_pb2.ListGroupsRequest(page_size=7, page_token=token)
            )
            assert page.error_code == common_pb2.NONE and len(page.groups) <= 7
            listed += [g.group_id for g in page.groups]
            token = page.next_page_token
            if not token:
                break
        assert listed == groups  # each once, in order


class _Listener:
    """Counts what a rebalance listener would see of a failover (nothing, if it is invisible)."""

    def __init__(self) -> None:
        self.lost = 0

    async def on_partitions_assigned(self, partitions: Any) -> None:
        pass

    async def on_partitions_revoked(self, partitions: Any) -> None:
        pass

    async def on_partitions_lost(self, partitions: Any) -> None:
        self.lost += 1


async def test_the_client_follows_its_group_to_the_replica_that_serves_it(
    start_service: ServiceFactory,
) -> None:
    """Forwarding off: the member's bootstrap replica a answers NOT_COORDINATOR with b's
    address, the member follows it; b stops gracefully, its shards move (some to a), and
    the member follows again, without being fenced or losing its partitions."""
    from regroup.client import GroupMember, MemberOptions

    a = await start_service(forward=False, heartbeat_interval_ms=200, **FAST)
    await a.stubs.create_topic("orders", 4)
    b = await start_service(forward=False, heartbeat_interval_ms=200, **FAST)
    await spread([a, b])
    group = owned_by(b)
    listener = _Listener()
    options = MemberOptions(retry_backoff_ms=20, retry_backoff_max_ms=200)
    async with GroupMember(f"127.0.0.1:{a.server.port}", listener=listener, options=options) as member:
        await member.join(group, topics=["orders"])
        assignment = await asyncio.wait_for(member.wait_for_assignment(lambda x: len(x.partitions) == 4), 10)
        epoch = member.member_epoch
        assert b.coordinator.group(group) is not None  # b serves it; the member talked to b

        await b.server.stop()
        deadline = time.monotonic() + 10
        while not a.coordinator.shards.serves(group, a.coordinator.clock.monotonic_ms()):
            assert time.monotonic() < deadline
            await asyncio.sleep(0.02)
        described = a.coordinator.group(group)
        assert described is not None and described.members[member.member_id].member_epoch == epoch
        # The member's next heartbeats reach a (b is gone): each renews its session there.
        session = TimerKey(group, member.member_id, "session")
        armed = a.coordinator.timers.deadline(session)
        assert armed is not None
        while a.coordinator.timers.deadline(session) == armed:
            assert time.monotonic() < deadline, "the member never heartbeated on a"
            await asyncio.sleep(0.02)
        assert member.failure is None and listener.lost == 0
        assert member.member_epoch == epoch and member.assignment().partitions == assignment.partitions


async def owning(members: list[WireMember], partitions: int, timeout_s: float = 10.0) -> None:
    """Heartbeats the members until they own `partitions` partitions in all."""
    deadline = time.monotonic() + timeout_s
    while sum(len(m.partitions()) for m in members) != partitions:
        assert time.monotonic() < deadline, [m.partitions() for m in members]
        for member in members:
            assert (await member.heartbeat()).error_code == common_pb2.NONE
        await asyncio.sleep(0.05)


async def test_topic_changes_made_through_one_replica_reach_the_groups_of_another(
    start_service: ServiceFactory,
) -> None:
    a, b = await replicas(start_service, 2)
    group = owned_by(b)
    members = [WireMember(b.stubs.coordinator, group, f"m{i}", ["orders"]) for i in range(2)]
    await converge(b.stubs, group, members)  # nothing to share yet
    assert sum(len(m.partitions()) for m in members) == 0

    await a.stubs.create_topic("orders", 2)
    await owning(members, 2)
    grown = await a.stubs.admin.CreatePartitions(
        admin_pb2.CreatePartitionsRequest(
            topics=[admin_pb2.CreatePartitionsRequest.Topic(name="orders", count=4)]
        )
    )
    assert grown.topics[0].error_code == common_pb2.NONE
    await owning(members, 4)
    deleted = await a.stubs.admin.DeleteTopics(admin_pb2.DeleteTopicsRequest(names=["orders"]))
    assert deleted.topics[0].error_code == common_pb2.NONE
    await owning(members, 0)
    assert "orders" not in b.coordinator.image.by_name


async def test_a_takeover_keeps_the_partitions_of_a_topic_created_through_the_old_owner(
    start_service: ServiceFactory,
) -> None:
    a, b = await replicas(start_service, 2)
    group = owned_by(b)
    await b.stubs.create_topic("orders", 4)
    members = [WireMember(b.stubs.coordinator, group, f"m{i}", ["orders"]) for i in range(2)]
    await owning(members, 4)
    await converge(b.stubs, group, members)
    epochs, owned = [m.epoch for m in members], [m.partitions() for m in members]

    await b.server.stop()  # a takes the group over: with the topic, not without it
    for member in members:
        member.stub = a.stubs.coordinator
    deadline = time.monotonic() + 10
    while (await members[0].heartbeat()).error_code != common_pb2.NONE:
        assert time.monotonic() < deadline, members[0].last
        await asyncio.sleep(0.05)
    for member in members:
        assert (await member.heartbeat()).error_code == common_pb2.NONE
    assert [m.epoch for m in members] == epochs and [m.partitions() for m in members] == owned


async def test_connectors_put_through_one_replica_reach_the_owner_and_survive_a_takeover(
    start_service: ServiceFactory,
) -> None:
    """PutConnectors at a replica that does not own the Connect group is forwarded to the owner,
    which stores them with the group; the replica that takes the group over serves them as they
    were, and takes the next change."""
    a, b = await replicas(start_service, 2)
    group = owned_by(b, "connect-")
    connectors = [("sink", 2), ("source", 1)]
    async with GroupAdmin(a.server.address) as admin:
        assert await admin.put_connectors(group, dict(connectors)) == 0  # a new group, Empty
        assert a.server._forwarder is not None and a.server._forwarder.forwarded == 1
        assert a.coordinator.group(group) is None and b.coordinator.group(group) is not None
        for service in (a, b):
            described = await service.stubs.describe(group)
            assert (described.group_type, described.group_epoch) == ("connect", 0)
            assert sorted((c.name, c.tasks) for c in described.connectors) == connectors

        await b.server.stop()
        deadline = time.monotonic() + 5
        while not a.coordinator.shards.serves(group, a.coordinator.clock.monotonic_ms()):
            assert time.monotonic() < deadline, "a did not take the released shards"
            await asyncio.sleep(0.01)
        described = await a.stubs.describe(group)
        assert sorted((c.name, c.tasks) for c in described.connectors) == connectors
        await admin.put_connectors(group, {"sink": 3})
        described = await a.stubs.describe(group)
        assert [(c.name, c.tasks) for c in described.connectors] == [("sink", 3)]
