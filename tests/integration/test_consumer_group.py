"""End to end: members join, converge, survive a restart and expire, over gRPC and Postgres."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from regroup.server.clock import ManualClock
from regroup.v1 import admin_pb2, common_pb2
from tests.support.service import Service, ServiceFactory, _xmax
from tests.support.wire import WireMember, assert_disjoint, converge, owned_pb

# Every test runs with heartbeats through the unary RPCs and again through a MemberStream
# (tests/integration/conftest.py): the stream's answers must be the RPC's.
pytestmark = pytest.mark.heartbeat_transports


async def test_members_join_and_converge_to_a_balanced_assignment(service: Service) -> None:
    topic_id = await service.stubs.create_topic("orders", 12)
    members = [WireMember(service.stubs.coordinator, "g1", f"m{i}", ["orders"]) for i in range(3)]

    rounds = await converge(service.stubs, "g1", members)

    assert rounds <= 3
    group = await service.stubs.describe("g1")
    assert group.group_state == "Stable"
    assert group.group_epoch == group.assignment_epoch == 3
    assert group.assignor_name == "uniform"
    assert sorted(len(m.partitions()) for m in members) == [4, 4, 4]
    assert set().union(*(m.partitions() for m in members)) == {(topic_id, p) for p in range(12)}
    described = {m.member_id: m for m in group.members}
    for member in members:
        assert described[member.member_id].member_state == "STABLE"
        assert described[member.member_id].member_epoch == 3
        owned = {
            (tp.topic_id, p)
            for tp in described[member.member_id].assignment.topic_partitions
            for p in tp.partitions
        }
        assert owned == member.partitions()
        names = {tp.topic_name for tp in described[member.member_id].assignment.topic_partitions}
        assert names == {"orders"}


async def test_heartbeats_that_change_nothing_write_nothing(service: Service) -> None:
    await service.stubs.create_topic("orders", 6)
    members = [WireMember(service.stubs.coordinator, "g1", f"m{i}", ["orders"]) for i in range(2)]
    await converge(service.stubs, "g1", members)
    keeper = service.coordinator.keeper
    commits, rounds, xmax = service.coordinator.store.commits, keeper.rounds, await _xmax(service)

    for _ in range(25):
        for member in members:
            response = await member.heartbeat()
            assert response.error_code == common_pb2.NONE
            assert not response.HasField("assignment")

    assert service.coordinator.store.commits == commits
    # Only the shard leases' renewals (one statement each, every few seconds) may have written
    # meanwhile: on a loaded machine the 50 heartbeats can take longer than a renewal period.
    assert await _xmax(service) - xmax <= keeper.rounds - rounds


async def test_a_heartbeat_waits_for_a_write_of_its_group_in_flight(service: Service) -> None:
    """No-change heartbeats are answered without the group's lock when nothing
    holds it; while a write of the group is in flight they must wait for it and
    answer from the state it stored, never from the state before it."""
    await service.stubs.create_topic("orders", 6)
    members = [WireMember(service.stubs.coordinator, "g1", f"m{i}", ["orders"]) for i in range(2)]
    await converge(service.stubs, "g1", members)
    store = service.coordinator.store
    append, writing, release = store.append, asyncio.Event(), asyncio.Event()

    async def held_append(group_id: str, records: object, fence: object, *history: object) -> object:
        writing.set()
        await release.wait()
        return await append(group_id, records, fence, *history)

    store.append = held_append
    try:
        joiner = WireMember(service.stubs.coordinator, "g1", "m2", ["orders"])
        join = asyncio.create_task(joiner.heartbeat())
        await asyncio.wait_for(writing.wait(), 5)
        heartbeat = asyncio.create_task(members[0].heartbeat())
        await asyncio.sleep(0.2)
        assert not heartbeat.done()  # it waits behind the join's write
        release.set()
        joined, answered = await asyncio.wait_for(asyncio.gather(join, heartbeat), 5)
    finally:
        store.append = append
    assert joined.error_code == answered.error_code == common_pb2.NONE
    # The join bumped the group to epoch 3 and computed its target: the waiting
    # member is answered from it (it moves to the new epoch or revokes first).
    group = await service.stubs.describe("g1")
    assert group.group_epoch == group.assignment_epoch == 3
    assert answered.member_epoch == 3 or answered.HasField("assignment")


async def test_restart_is_invisible_to_members_that_keep_heartbeating(start_service: ServiceFactory) -> None:
    first = await start_service()
    await first.stubs.create_topic("orders", 8)
    members = [WireMember(first.stubs.coordinator, "g1", f"m{i}", ["orders"]) for i in range(3)]
    await converge(first.stubs, "g1", members)
    before = await first.stubs.describe("g1")
    owned_before = {m.member_id: m.partitions() for m in members}
    await first.server.stop()

    second = await start_service()
    for member in members:
        member.stub = second.stubs.coordinator
        response = await member.heartbeat()
        assert response.error_code == common_pb2.NONE, response.error_message
        assert response.member_epoch == before.group_epoch
        assert not response.HasField("assignment")
    after = await second.stubs.describe("g1")
    assert after.group_state == "Stable"
    assert (after.group_epoch, after.assignment_epoch) == (before.group_epoch, before.assignment_epoch)
    assert {m.member_id: m.partitions() for m in members} == owned_before
    assert after == before


async def test_session_expiry_fences_a_silent_member_and_reassigns_its_partitions(
    start_service: ServiceFactory,
) -> None:
    clock = ManualClock()
    service = await start_service(clock=clock, session_timeout_ms=1_000, heartbeat_interval_ms=100)
    await service.stubs.create_topic("orders", 4)
    alive = WireMember(service.stubs.coordinator, "g1", "alive", ["orders"])
    silent = WireMember(service.stubs.coordinator, "g1", "silent", ["orders"])
    await converge(service.stubs, "g1", [alive, silent])
    epoch = (await service.stubs.describe("g1")).group_epoch

    clock.advance(600)
    await alive.heartbeat()
    clock.advance(600)  # silent: 1200 ms without a heartbeat; alive: 600 ms
    fenced = await service.coordinator.expire_due()

    assert [(k.member_id, k.kind) for k in fenced] == [("silent", "session")]
    group = await service.stubs.describe("g1")
    assert [m.member_id for m in group.members] == ["alive"]
    assert group.group_epoch == epoch + 1
    await converge(service.stubs, "g1", [alive])
    assert len(alive.partitions()) == 4


async def test_timer_loop_fences_without_any_request(start_service: ServiceFactory) -> None:
    clock = ManualClock()
    service = await start_service(clock=clock, session_timeout_ms=1_000, heartbeat_interval_ms=100)
    await service.stubs.create_topic("orders", 2)
    member = WireMember(service.stubs.coordinator, "g1", "m", ["orders"])
    await member.heartbeat()

    clock.advance(1_001)
    for _ in range(200):  # wait for the background timer loop, not for wall time
        if not (await service.stubs.describe("g1")).members:
            break
        await service.coordinator.store.fetch("SELECT 1")
    assert (await service.stubs.describe("g1")).group_state == "Empty"


async def test_rebalance_timeout_fences_a_member_that_does_not_revoke(start_service: ServiceFactory) -> None:
    clock = ManualClock()
    service = await start_service(clock=clock, session_timeout_ms=60_000, heartbeat_interval_ms=100)
    await service.stubs.create_topic("orders", 4)
    stubborn = WireMember(service.stubs.coordinator, "g1", "stubborn", ["orders"], rebalance_timeout_ms=500)
    await converge(service.stubs, "g1", [stubborn])
    newcomer = WireMember(service.stubs.coordinator, "g1", "newcomer", ["orders"])
    await newcomer.heartbeat()
    # The stubborn member learns it must revoke, but keeps claiming everything.
    keep = {t: set(p) for t, p in stubborn.owned.items()}
    await stubborn.heartbeat()
    stubborn.owned = keep
    await stubborn.heartbeat()
    assert {m.member_id: m.member_state for m in (await service.stubs.describe("g1")).members}[
        "stubborn"
    ] == ("UNREVOKED_PARTITIONS")

    clock.advance(501)
    fenced = await service.coordinator.expire_due()

    assert [(k.member_id, k.kind) for k in fenced] == [("stubborn", "rebalance")]
    await converge(service.stubs, "g1", [newcomer])
    assert len(newcomer.partitions()) == 4


async def test_topic_growth_rebalances_subscribed_groups(service: Service) -> None:
    topic_id = await service.stubs.create_topic("orders", 2)
    members = [WireMember(service.stubs.coordinator, "g1", f"m{i}", ["orders"]) for i in range(2)]
    await converge(service.stubs, "g1", members)
    epoch = (await service.stubs.describe("g1")).group_epoch

    resp = await service.stubs.admin.CreatePartitions(
        admin_pb2.CreatePartitionsRequest(
            topics=[admin_pb2.CreatePartitionsRequest.Topic(name="orders", count=6)]
        )
    )
    assert resp.topics[0].error_code == common_pb2.NONE
    assert (await service.stubs.describe("g1")).group_epoch == epoch + 1

    rounds = await converge(service.stubs, "g1", members)
    assert rounds == 1
    assert set().union(*(m.partitions() for m in members)) == {(topic_id, p) for p in range(6)}
    assert sorted(len(m.partitions()) for m in members) == [3, 3]


async def test_static_member_restart_gets_its_partitions_back_without_a_rebalance(service: Service) -> None:
    await service.stubs.create_topic("orders", 4)
    static = WireMember(service.stubs.coordinator, "g1", "s-1", ["orders"], instance_id="worker-a")
    other = WireMember(service.stubs.coordinator, "g1", "d-1", ["orders"])
    await converge(service.stubs, "g1", [static, other])
    before = await service.stubs.describe("g1")
    mine = static.partitions()

    leave = await service.stubs.coordinator.ConsumerGroupHeartbeat(
        static.heartbeat_request().__class__(
            group_id="g1", member_id="s-1", member_epoch=-2, instance_id="worker-a"
        )
    )
    assert (leave.error_code, leave.member_epoch) == (common_pb2.NONE, -2)
    restarted = WireMember(service.stubs.coordinator, "g1", "s-2", ["orders"], instance_id="worker-a")
    await restarted.heartbeat()

    assert restarted.partitions() == mine
    assert restarted.epoch == before.group_epoch
    after = await service.stubs.describe("g1")
    assert after.group_epoch == before.group_epoch
    assert sorted(m.member_id for m in after.members) == ["d-1", "s-2"]
    assert_disjoint([restarted, other])


async def test_leaving_member_hands_its_partitions_over(service: Service) -> None:
    await service.stubs.create_topic("orders", 6)
    members = [WireMember(service.stubs.coordinator, "g1", f"m{i}", ["orders"]) for i in range(3)]
    await converge(service.stubs, "g1", members)

    response = await members[0].leave()
    assert (response.error_code, response.member_epoch) == (common_pb2.NONE, -1)
    await converge(service.stubs, "g1", members[1:])
    assert sorted(len(m.partitions()) for m in members[1:]) == [3, 3]


async def test_batched_target_assignment_is_computed_by_the_timer(start_service: ServiceFactory) -> None:
    clock = ManualClock()
    service = await start_service(clock=clock, assignment_interval_ms=1_000)
    await service.stubs.create_topic("orders", 4)
    first = WireMember(service.stubs.coordinator, "g1", "a", ["orders"])
    await first.heartbeat()
    second = WireMember(service.stubs.coordinator, "g1", "b", ["orders"])
    await second.heartbeat()
    assert (await service.stubs.describe("g1")).group_state == "Assigning"
    assert second.partitions() == set()

    clock.advance(1_000)
    await service.coordinator.expire_due()
    group = await service.stubs.describe("g1")
    assert (group.group_epoch, group.assignment_epoch) == (2, 2)
    await converge(service.stubs, "g1", [first, second])
    assert sorted(len(m.partitions()) for m in (first, second)) == [2, 2]


async def test_big_group_target_is_computed_off_the_event_loop(start_service: ServiceFactory) -> None:
    clock = ManualClock()
    service = await start_service(clock=clock, inline_assignment_max_partitions=10)
    await service.stubs.create_topic("orders", 100)
    member = WireMember(service.stubs.coordinator, "g1", "a", ["orders"])
    await member.heartbeat()
    assert (await service.stubs.describe("g1")).group_state == "Assigning"
    assert member.partitions() == set()

    # The assignment timer is due at once; the timer loop has the worker process compute it
    # (starting that process takes a while on a loaded machine: wait on wall time, not rounds).
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if (await service.stubs.describe("g1")).assignment_epoch == 1:
            break
        await service.coordinator.expire_due()
        await asyncio.sleep(0.02)
    assert (await service.stubs.describe("g1")).assignment_epoch == 1
    await converge(service.stubs, "g1", [member])
    assert len(member.partitions()) == 100
    history = await service.stubs.admin.ListGroupEvents(admin_pb2.ListGroupEventsRequest(group_id="g1"))
    [target] = [e for e in history.events if e.type == admin_pb2.GROUP_EVENT_TYPE_TARGET_COMPUTED]
    assert (target.group_epoch, target.assignor, target.partitions_moved) == (1, "uniform", 100)

    # Later computations send the worker only the members that changed (a join, then a
    # leave, learnt from the records the runtime replays): the targets still follow.
    second = WireMember(service.stubs.coordinator, "g1", "b", ["orders"])
    await second.heartbeat()
    await settle_in_worker(service, [member, second], [50, 50])
    await member.leave()
    await settle_in_worker(service, [second], [100])


async def settle_in_worker(service: Service, members: list[WireMember], sizes: list[int]) -> None:
    """Runs due timers and heartbeats until the worker's target is installed and owned."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        await service.coordinator.expire_due()
        for m in members:
            await m.heartbeat()
        assert_disjoint(members)
        group = await service.stubs.describe("g1")
        if group.group_state == "Stable" and [len(m.partitions()) for m in members] == sizes:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"g1 did not settle: {group}")


async def test_a_big_group_answers_its_members_while_its_target_is_computed(
    start_service: ServiceFactory,
) -> None:
    """The worker computes without the group's lock (Kafka's offloaded assignment): members
    are answered meanwhile, a member that leaves meanwhile gets no target when the result
    is installed, and the change it made is computed next."""
    clock = ManualClock()
    service = await start_service(clock=clock, inline_assignment_max_partitions=10)
    await service.stubs.create_topic("orders", 90)
    a = WireMember(service.stubs.coordinator, "g1", "a", ["orders"])
    b = WireMember(service.stubs.coordinator, "g1", "b", ["orders"])
    await a.heartbeat()
    await b.heartbeat()
    await settle_in_worker(service, [a, b], [45, 45])

    # Hold the next computation in the worker until released.
    assigner = service.coordinator.assigner
    real_compute = assigner.compute
    started, release = asyncio.Event(), asyncio.Event()

    async def held_compute(*args: Any) -> Any:
        started.set()
        await release.wait()
        return await real_compute(*args)

    assigner.compute = held_compute
    c = WireMember(service.stubs.coordinator, "g1", "c", ["orders"])
    await c.heartbeat()  # joins: the group epoch moves, the timer asks the worker
    held_epoch = (await service.stubs.describe("g1")).group_epoch
    timers = asyncio.create_task(service.coordinator.expire_due())  # or the timer loop does
    await asyncio.wait_for(started.wait(), 30)

    async with asyncio.timeout(10):  # answered while the computation is held
        await a.heartbeat()
        await b.leave()
    assert (await service.stubs.describe("g1")).assignment_epoch < held_epoch
    release.set()
    await timers
    async with asyncio.timeout(30):
        while (await service.stubs.describe("g1")).assignment_epoch < held_epoch:
            await asyncio.sleep(0.02)
    assigner.compute = real_compute

    # Computed with b (a third each), installed without it; only the next computation,
    # which b's leave asked for, splits the topic between a and c.
    assert "b" not in service.coordinator.groups["g1"].target
    await settle_in_worker(service, [a, c], [45, 45])


async def test_a_lost_answer_is_retried_with_the_previous_epoch_in_a_full_request(service: Service) -> None:
    """KIP-848's lost response: the member moved to a new epoch but never heard of it; its
    retry with the previous epoch (and no more than it is assigned) is accepted and
    answered with the epoch and the whole assignment, writing nothing."""
    await service.stubs.create_topic("orders", 4)
    a = WireMember(service.stubs.coordinator, "g1", "a", ["orders"])
    await converge(service.stubs, "g1", [a])
    b = WireMember(service.stubs.coordinator, "g1", "b", ["orders"])
    await b.heartbeat()
    await a.heartbeat()  # told to revoke two partitions, still at epoch 1
    assert (a.epoch, len(a.partitions())) == (1, 2)
    kept = {t: set(p) for t, p in a.owned.items()}
    acknowledged = await service.stubs.coordinator.ConsumerGroupHeartbeat(a.heartbeat_request())
    assert (acknowledged.error_code, acknowledged.member_epoch) == (common_pb2.NONE, 2)
    commits = service.coordinator.store.commits

    # That answer is lost: the member still believes it is at epoch 1 and retries in full.
    retry = a.heartbeat_request()
    retry.rebalance_timeout_ms = a.rebalance_timeout_ms
    retry.subscribed_topic_names.values.extend(a.topics)
    answered = await service.stubs.coordinator.ConsumerGroupHeartbeat(retry)

    assert answered.error_code == common_pb2.NONE, answered.error_message
    assert answered.member_epoch == 2
    assert {tp.topic_id: set(tp.partitions) for tp in answered.assignment.topic_partitions} == kept
    assert service.coordinator.store.commits == commits


async def test_a_member_behind_by_more_than_a_lost_answer_is_fenced_and_rejoins(service: Service) -> None:
    """Fencing: the previous epoch with partitions the member is no longer assigned, or an
    epoch older than the previous one, is FENCED_MEMBER_EPOCH; the member drops everything
    and rejoins, and no partition ever has two owners."""
    await service.stubs.create_topic("orders", 4)
    a = WireMember(service.stubs.coordinator, "g1", "a", ["orders"])
    b = WireMember(service.stubs.coordinator, "g1", "b", ["orders"])
    await converge(service.stubs, "g1", [a, b])
    everything = {t: {0, 1, 2, 3} for t in a.owned}

    stale = a.heartbeat_request()
    stale.member_epoch = a.epoch - 1  # the previous epoch, as after a lost answer, but ...
    stale.topic_partitions.CopyFrom(owned_pb(everything))  # ... claiming what b owns now
    claims_too_much = a.handle(await service.stubs.coordinator.ConsumerGroupHeartbeat(stale))
    assert claims_too_much.error_code == common_pb2.FENCED_MEMBER_EPOCH, claims_too_much.error_message
    assert a.epoch == 0 and not a.owned
    assert (await a.heartbeat()).error_code == common_pb2.NONE  # rejoins
    await converge(service.stubs, "g1", [a, b])

    behind = a.epoch - 1
    c = WireMember(service.stubs.coordinator, "g1", "c", ["orders"])
    await c.heartbeat()
    await converge(service.stubs, "g1", [a, b, c])
    assert a.epoch - behind == 2
    old = a.heartbeat_request()
    old.member_epoch = behind  # two epochs behind: never a lost answer
    zombie = a.handle(await service.stubs.coordinator.ConsumerGroupHeartbeat(old))
    assert zombie.error_code == common_pb2.FENCED_MEMBER_EPOCH, zombie.error_message

    assert (await a.heartbeat()).error_code == common_pb2.NONE
    await converge(service.stubs, "g1", [a, b, c])
    assert sorted(len(m.partitions()) for m in (a, b, c)) == [1, 1, 2]


async def test_a_static_instance_is_held_by_one_member_at_a_time(service: Service) -> None:
    """Static membership: another member may not take an instance id in use
    (UNRELEASED_INSTANCE_ID); once released (epoch -2) and taken over, the old member's
    heartbeats are FENCED_INSTANCE_ID."""
    await service.stubs.create_topic("orders", 2)
    first = WireMember(service.stubs.coordinator, "g1", "s-1", ["orders"], instance_id="worker-a")
    await converge(service.stubs, "g1", [first])
    taker = WireMember(service.stubs.coordinator, "g1", "s-2", ["orders"], instance_id="worker-a")

    refused = await taker.heartbeat()
    assert refused.error_code == common_pb2.UNRELEASED_INSTANCE_ID, refused.error_message
    leave = await service.stubs.coordinator.ConsumerGroupHeartbeat(
        first.heartbeat_request().__class__(
            group_id="g1", member_id="s-1", member_epoch=-2, instance_id="worker-a"
        )
    )
    assert (leave.error_code, leave.member_epoch) == (common_pb2.NONE, -2)
    taken = await taker.heartbeat()
    assert taken.error_code == common_pb2.NONE, taken.error_message
    assert taker.partitions() == first.partitions()

    fenced = await first.heartbeat()
    assert fenced.error_code == common_pb2.FENCED_INSTANCE_ID, fenced.error_message
    assert [m.member_id for m in (await service.stubs.describe("g1")).members] == ["s-2"]
