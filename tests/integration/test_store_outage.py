"""A Postgres outage, on a real embedded Postgres stopped (immediate shutdown) and restarted.

A member must never lose its session because the coordinator could not store:
members that keep heartbeating through an outage of any length keep their
membership, epoch and partitions once Postgres is back, and nothing bumps the
group epoch but the changes that were really made.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator

import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from regroup.client import GroupMember, MemberOptions, RegroupError
from regroup.reconciler.model import MemberMetadata, MemberState
from regroup.reconciler.records import CurrentAssignmentRecord, GroupMetadataRecord, MemberMetadataRecord
from regroup.server.clock import ManualClock
from regroup.server.store import PostgresStore, StoreUnavailable
from regroup.server.writepath import STORE_UNREACHABLE
from regroup.v1 import admin_pb2, common_pb2, coordinator_pb2
from tests.support.leases import hold_all
from tests.support.ownership import OwnershipRegistry
from tests.support.pg import StoppablePostgres
from tests.support.service import Service, ServiceFactory
from tests.support.wire import WireMember, assert_disjoint, converge

SESSION_MS = 3_000
INTERVAL_MS = 1_000
#: The store is pinged this often (real time): readiness follows it within a tick.
CHECK_MS = 50
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
#: The clock moves in steps this long; each member heartbeats in its own step
#: of every interval, so the members' heartbeats are spread over the interval.
STEP_MS = 250


@pytest.fixture(scope="module")
def stoppable_postgres() -> Iterator[StoppablePostgres]:
    pg = StoppablePostgres()
    yield pg
    pg.close()


@pytest.fixture
async def database(stoppable_postgres: StoppablePostgres) -> AsyncIterator[str]:
    """This module's tests run on a Postgres of their own, which they stop."""
    yield await stoppable_postgres.migrated_database()
    # A failed test must not leave the next one without a database.
    await asyncio.to_thread(stoppable_postgres.restart)


MEMBER = MemberMetadataRecord("m", MemberMetadata(subscribed_topic_names=("t",), rebalance_timeout_ms=1000))


def _step(epoch: int) -> CurrentAssignmentRecord:
    return CurrentAssignmentRecord("m", MemberState.STABLE, epoch, epoch - 1, {"t": frozenset({0})}, {})


async def _health(service: Service, name: str = "") -> int:
    health = health_pb2_grpc.HealthStub(service.stubs.channel)
    status: int = (await health.Check(health_pb2.HealthCheckRequest(service=name))).status
    return status


async def _wait_health(service: Service, wanted: int, timeout_s: float = 10.0) -> None:
    """Until readiness says `wanted`, as a probe polling it would see."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while await _health(service) != wanted:
        assert asyncio.get_running_loop().time() < deadline, f"health never became {wanted}"
        await asyncio.sleep(CHECK_MS / 1000)


async def _restart(pg: StoppablePostgres, service: Service) -> None:
    await asyncio.to_thread(pg.restart)
    await _wait_health(service, SERVING)


async def _manual_service(start_service: ServiceFactory, clock: ManualClock, **overrides: int) -> Service:
    """A service on the test's clock, whose timers run only when the test calls expire_due."""
    settings = {
        "session_timeout_ms": SESSION_MS,
        "heartbeat_interval_ms": INTERVAL_MS,
        "store_check_ms": CHECK_MS,
        **overrides,
    }
    return await start_service(clock=clock, run_timers=False, **settings)


async def _fleet(service: Service, count: int) -> list[WireMember]:
    await service.stubs.create_topic("orders", 2 * count)
    members = [WireMember(service.stubs.coordinator, "g", f"m{i:02}", ["orders"]) for i in range(count)]
    await converge(service.stubs, "g", members)
    return members


async def _commit(service: Service, member: WireMember) -> coordinator_pb2.OffsetCommitResponse:
    topic_id, partitions = next(iter(member.owned.items()))
    return await service.stubs.coordinator.OffsetCommit(
        coordinator_pb2.OffsetCommitRequest(
            group_id="g",
            member_id=member.member_id,
            member_epoch=member.epoch,
            topics=[
                coordinator_pb2.OffsetCommitRequest.Topic(
                    topic_id=topic_id,
                    partitions=[
                        coordinator_pb2.OffsetCommitRequest.Partition(partition=min(partitions), offset=7)
                    ],
                )
            ],
        )
    )


async def _spread_heartbeats(
    service: Service, clock: ManualClock, members: list[WireMember], duration_ms: int
) -> list[coordinator_pb2.ConsumerGroupHeartbeatResponse]:
    """Moves the clock by `duration_ms`; in every step, the members whose turn it is
    heartbeat, then the due timers run. Returns the responses."""
    responses = []
    slots = INTERVAL_MS // STEP_MS
    for step in range(duration_ms // STEP_MS):
        clock.advance(STEP_MS)
        for i, member in enumerate(members):
            if i % slots == step % slots:
                responses.append(await member.heartbeat())
        await service.coordinator.expire_due()
    return responses


@pytest.mark.parametrize("outage_ms", [SESSION_MS // 2, 3 * SESSION_MS], ids=["shorter", "longer"])
async def test_members_heartbeating_through_an_outage_keep_their_partitions(
    start_service: ServiceFactory, stoppable_postgres: StoppablePostgres, outage_ms: int
) -> None:
    clock = ManualClock()
    service = await _manual_service(start_service, clock)
    members = await _fleet(service, 12)
    before = await service.stubs.describe("g")
    owned = {m.member_id: (m.epoch, m.partitions()) for m in members}

    await asyncio.to_thread(stoppable_postgres.stop_immediately)
    # A write fails (an offset commit): the group is stale until it can be reloaded,
    # so from now on every heartbeat is refused with COORDINATOR_NOT_AVAILABLE.
    assert (await _commit(service, members[0])).error_code == common_pb2.COORDINATOR_NOT_AVAILABLE
    during = await _spread_heartbeats(service, clock, members, outage_ms)

    assert {r.error_code for r in during} == {common_pb2.COORDINATOR_NOT_AVAILABLE}
    # Each refusal says that the member's session was renewed at its epoch.
    assert all(r.session_renewed and r.session_timeout_ms == SESSION_MS for r in during)
    assert all(r.member_epoch == owned[r.member_id][0] for r in during)

    await _restart(stoppable_postgres, service)
    after = await _spread_heartbeats(service, clock, members, 2 * SESSION_MS)

    assert {r.error_code for r in after} == {common_pb2.NONE}
    assert {m.member_id: (m.epoch, m.partitions()) for m in members} == owned
    assert_disjoint(members)
    group = await service.stubs.describe("g")
    assert (group.group_epoch, group.assignment_epoch) == (before.group_epoch, before.assignment_epoch)
    assert group.group_state == "Stable"
    assert sorted(m.member_id for m in group.members) == sorted(owned)
    assert (await _commit(service, members[0])).error_code == common_pb2.NONE


async def test_timers_that_came_due_during_an_outage_give_a_full_session_after_it(
    start_service: ServiceFactory, stoppable_postgres: StoppablePostgres
) -> None:
    """As on a start: every member of a group reloaded after the store came back
    gets a full session from then, even one whose timer ran out while the store
    was away and was being retried (the members here did not heartbeat at all)."""
    clock = ManualClock()
    service = await _manual_service(start_service, clock)
    members = await _fleet(service, 4)
    await _spread_heartbeats(service, clock, members, INTERVAL_MS)  # sessions end at spread times
    before = await service.stubs.describe("g")

    await asyncio.to_thread(stoppable_postgres.stop_immediately)
    for _ in range(3 * SESSION_MS // STEP_MS):
        clock.advance(STEP_MS)
        assert await service.coordinator.expire_due() == []
    await _restart(stoppable_postgres, service)

    # The first retry reloads the group; the others, still queued and overdue, must
    # not fence anyone: every session starts again from the reload.
    for _ in range((SESSION_MS - 500) // STEP_MS):
        clock.advance(STEP_MS)
        assert await service.coordinator.expire_due() == []
    for member in members:
        assert (await member.heartbeat()).error_code == common_pb2.NONE
    group = await service.stubs.describe("g")
    assert (group.group_epoch, len(group.members)) == (before.group_epoch, 4)


async def test_a_member_the_failed_write_may_have_removed_is_not_renewed(
    start_service: ServiceFactory, stoppable_postgres: StoppablePostgres
) -> None:
    """A session timeout whose fencing failed in doubt may have committed: that
    member is not told that its session lives (it would keep partitions that the
    store may have freed), while the others are."""
    clock = ManualClock()
    # No ping of its own: a watch that saw the outage first would refuse the fencing
    # without trying it, and then nothing would be in doubt.
    service = await _manual_service(start_service, clock, store_check_ms=3_600_000)
    alive, silent = await _fleet(service, 2)

    clock.advance(SESSION_MS - 500)
    await alive.heartbeat()
    await asyncio.to_thread(stoppable_postgres.stop_immediately)
    clock.advance(1_000)  # the silent member's session runs out; fencing it fails
    assert await service.coordinator.expire_due() == []

    refused = await silent.heartbeat()
    renewed = await alive.heartbeat()
    assert refused.error_code == renewed.error_code == common_pb2.COORDINATOR_NOT_AVAILABLE
    assert not refused.session_renewed
    assert renewed.session_renewed and renewed.member_epoch == alive.epoch
    await asyncio.to_thread(stoppable_postgres.restart)


async def test_real_clients_keep_their_partitions_through_an_outage_three_sessions_long(
    start_service: ServiceFactory, stoppable_postgres: StoppablePostgres
) -> None:
    """The report, end to end: the real client, twelve members heartbeating at their
    own times, Postgres gone for three session timeouts. Nobody loses anything, no
    partition ever has two owners, and the group epoch is where it was."""
    session_ms = 1_500
    service = await start_service(
        session_timeout_ms=session_ms, heartbeat_interval_ms=200, store_check_ms=CHECK_MS
    )
    await service.stubs.create_topic("orders", 24)
    registry = OwnershipRegistry()
    target = f"127.0.0.1:{service.server.port}"
    members = [
        GroupMember(
            target,
            listener=registry.listener(f"m{i:02}"),
            member_id=f"m{i:02}",
            options=MemberOptions(client_id=f"m{i:02}", session_safety_margin_ms=300),
        )
        for i in range(12)
    ]
    try:
        for member in members:
            await member.join("g", topics=["orders"])
        for member in members:
            await member.wait_for_assignment(lambda a: len(a.partitions) == 2)
        before = await service.stubs.describe("g")
        owned = {m.member_id: (m.member_epoch, m.assignment().partitions) for m in members}

        await asyncio.to_thread(stoppable_postgres.stop_immediately)
        partition = next(iter(members[0].assignment().partitions))
        with pytest.raises(RegroupError) as refused:
            # A write fails (the group goes stale); retried within the timeout, then raised.
            await members[0].commit({partition: 7}, timeout=0.5)
        assert refused.value.code == common_pb2.COORDINATOR_NOT_AVAILABLE
        await asyncio.sleep(3 * session_ms / 1000)
        await _restart(stoppable_postgres, service)
        await members[0].commit({partition: 7})
        await asyncio.sleep(4 * 200 / 1000)  # a few heartbeats after the store is back

        assert registry.violations == []
        assert [e for e in registry.events if e.kind == "lost"] == []
        assert {m.member_id: (m.member_epoch, m.assignment().partitions) for m in members} == owned
        group = await service.stubs.describe("g")
        assert (group.group_epoch, group.group_state) == (before.group_epoch, "Stable")
        assert all(m.failure is None for m in members)
    finally:
        for member in members:
            await member.close()


async def test_health_follows_the_store_and_the_process_name_does_not(
    start_service: ServiceFactory, stoppable_postgres: StoppablePostgres
) -> None:
    service = await start_service(store_check_ms=CHECK_MS)
    await _wait_health(service, SERVING)
    names = ("", "regroup.v1.GroupCoordinator", "regroup.v1.GroupAdmin")

    await asyncio.to_thread(stoppable_postgres.stop_immediately)
    await _wait_health(service, NOT_SERVING)  # nothing wrote: the ping alone found it
    assert [await _health(service, name) for name in names] == [NOT_SERVING] * 3
    assert await _health(service, "process") == SERVING

    await _restart(stoppable_postgres, service)
    assert [await _health(service, name) for name in (*names, "process")] == [SERVING] * 4


async def test_while_the_store_is_known_down_writes_are_refused_at_once_and_sessions_renewed(
    start_service: ServiceFactory, stoppable_postgres: StoppablePostgres
) -> None:
    """A store away behind a silent network would hang every attempt; once the watch
    knows it is down, nothing is tried: the refusal is immediate, nothing is in doubt,
    and a member whose heartbeat needed a write still has its session renewed."""
    clock = ManualClock()
    service = await start_service(clock=clock, store_check_ms=CHECK_MS, run_timers=False)
    a, b = await _fleet(service, 2)
    commits = service.coordinator.store.commits

    await asyncio.to_thread(stoppable_postgres.stop_immediately)
    await _wait_health(service, NOT_SERVING)
    assert service.coordinator.store_down
    # A changed field makes the heartbeat a write (the member's metadata).
    refused = await a.heartbeat(rebalance_timeout_ms=a.rebalance_timeout_ms + 1)
    assert refused.error_code == common_pb2.COORDINATOR_NOT_AVAILABLE
    assert "unreachable" in refused.error_message
    assert refused.session_renewed and refused.member_epoch == a.epoch
    assert service.coordinator.store.commits == commits

    await _restart(stoppable_postgres, service)
    assert not service.coordinator.store_down
    assert (await a.heartbeat(rebalance_timeout_ms=a.rebalance_timeout_ms + 1)).error_code == common_pb2.NONE
    assert (await b.heartbeat()).error_code == common_pb2.NONE


async def test_the_store_closes_after_an_outage_killed_its_connections(
    database: str, stoppable_postgres: StoppablePostgres
) -> None:
    """Connections the server closed while the store held them for step writes go back
    to the pool, which would otherwise wait for them forever when the service stops."""
    store = await PostgresStore.connect(database, "r1", timeout_s=2)
    try:
        fence = await hold_all(store)
        for g in ("g0", "g1", "g2"):
            await store.append(g, [GroupMetadataRecord(1, 0, "consumer"), MEMBER, _step(1)], fence(g))
        await asyncio.gather(*(store.append(g, [_step(2)], fence(g)) for g in ("g0", "g1", "g2")))
        assert store._held

        await asyncio.to_thread(stoppable_postgres.stop_immediately)
        with pytest.raises(StoreUnavailable):
            await store.append("g0", [_step(3)], fence("g0"))
        await asyncio.to_thread(stoppable_postgres.restart)
        for epoch in range(3, 8):
            with contextlib.suppress(StoreUnavailable):
                await store.append("g0", [_step(epoch)], fence("g0"))
                break
        await store.append("g1", [_step(3)], fence("g1"))
    finally:
        await asyncio.wait_for(store.close(), 10)


async def _grow(service: Service, topic: str, count: int) -> admin_pb2.CreatePartitionsResponse:
    return await service.stubs.admin.CreatePartitions(
        admin_pb2.CreatePartitionsRequest(
            topics=[admin_pb2.CreatePartitionsRequest.Topic(name=topic, count=count)]
        )
    )


async def test_a_growth_acknowledged_right_after_an_outage_reaches_every_group(
    start_service: ServiceFactory, stoppable_postgres: StoppablePostgres
) -> None:
    """Issue 37, item 7: CreatePartitions sent as soon as Postgres answers again, while
    the coordinator still believes it away (its watch checks once a second), is
    acknowledged; the groups' refresh, refused on that belief, must not be dropped.
    Two groups of idle members (they heartbeat, nothing else) reach the new partitions."""
    service = await start_service(session_timeout_ms=60_000, store_check_ms=1_000)
    await service.stubs.create_topic("ev-topic", 8)
    groups = {
        g: [WireMember(service.stubs.coordinator, g, f"{g}-m{i}", ["ev-topic"]) for i in range(2)]
        for g in ("ev-a", "ev-b")
    }
    for group_id, members in groups.items():
        await converge(service.stubs, group_id, members)

    await asyncio.to_thread(stoppable_postgres.stop_immediately)
    await _wait_health(service, NOT_SERVING)
    await asyncio.to_thread(stoppable_postgres.restart)
    grown = await _grow(service, "ev-topic", 10)
    assert grown.topics[0].error_code == common_pb2.NONE, grown.topics[0].error_message

    loop = asyncio.get_running_loop()
    deadline = loop.time() + 20
    while any(sum(len(m.partitions()) for m in members) != 10 for members in groups.values()):
        assert loop.time() < deadline, {g: [m.partitions() for m in ms] for g, ms in groups.items()}
        for members in groups.values():
            for member in members:
                await member.heartbeat()
            assert_disjoint(members)
        await asyncio.sleep(0.05)
    for group_id in groups:
        events = await service.stubs.admin.ListGroupEvents(
            admin_pb2.ListGroupEventsRequest(
                group_id=group_id, types=[admin_pb2.GROUP_EVENT_TYPE_TOPIC_GROWN]
            )
        )
        assert [(e.topic_name, e.partition_count) for e in events.events] == [("ev-topic", 10)]


async def test_a_join_the_store_failed_is_refused_with_the_documented_message(
    start_service: ServiceFactory, stoppable_postgres: StoppablePostgres
) -> None:
    """The join finds Postgres gone (the watch has not looked yet): the answer is the
    documented refusal, not the driver's text (FileNotFoundError on the socket)."""
    service = await start_service(store_check_ms=3_600_000)
    await service.stubs.create_topic("orders", 2)
    await asyncio.to_thread(stoppable_postgres.stop_immediately)

    refused = await WireMember(service.stubs.coordinator, "g", "m", ["orders"]).heartbeat()
    assert refused.error_code == common_pb2.COORDINATOR_NOT_AVAILABLE
    assert refused.error_message == STORE_UNREACHABLE
    await asyncio.to_thread(stoppable_postgres.restart)
