"""The Python client's GroupMember end to end: a real server, the embedded
Postgres, many members in one process, and an ownership registry that checks
that no partition ever has two owners."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import pytest

from regroup.client import GroupAdmin, GroupMember, MemberOptions, RegroupError, TopicPartition
from regroup.v1 import common_pb2, coordinator_pb2
from tests.support.ownership import OwnershipRegistry
from tests.support.service import Service, ServiceFactory

FAST = {"heartbeat_interval_ms": 100, "session_timeout_ms": 1500}


class Tap(grpc.aio.UnaryUnaryClientInterceptor):  # type: ignore[misc]
    """A client interceptor that records heartbeat requests and can tamper with calls."""

    def __init__(self) -> None:
        self.requests: list[Any] = []
        self.drop_responses = 0  # the server answers, the member never sees it
        self.unavailable = False  # calls fail before reaching the server
        self.rewrite: Callable[[Any], None] | None = None
        self.refuse_leaves = 0  # leaves answered COORDINATOR_NOT_AVAILABLE (a failover) before the server
        self.hang: Callable[[Any], bool] | None = None  # requests whose call never returns

    async def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        if self.unavailable:
            raise _rpc_error(grpc.StatusCode.UNAVAILABLE, "tap: unavailable")
        if self.refuse_leaves and getattr(request, "member_epoch", 0) < 0:
            self.refuse_leaves -= 1
            self.requests.append(request)
            return _heartbeat_response(common_pb2.COORDINATOR_NOT_AVAILABLE)
        if self.hang is not None and self.hang(request):
            self.requests.append(request)
            await asyncio.Event().wait()
        if self.rewrite is not None:
            request = type(request).FromString(request.SerializeToString())
            self.rewrite(request)
        self.requests.append(request)
        call = await continuation(details, request)
        response = await call
        if self.drop_responses > 0:
            self.drop_responses -= 1
            raise _rpc_error(grpc.StatusCode.DEADLINE_EXCEEDED, "tap: response dropped")
        return response


def _heartbeat_response(code: int) -> Any:
    return coordinator_pb2.ConsumerGroupHeartbeatResponse(error_code=code, error_message="tap: moving")


def _rpc_error(code: grpc.StatusCode, details: str) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details=details)


class Fleet:
    """Members of one group sharing a registry."""

    def __init__(self, service: Service, group: str, topic: str, registry: OwnershipRegistry) -> None:
        self.target = f"127.0.0.1:{service.server.port}"
        self.service = service
        self.group = group
        self.topic = topic
        self.registry = registry
        self.members: dict[str, GroupMember] = {}

    async def add(self, name: str, *, instance_id: str | None = None, tap: Tap | None = None) -> GroupMember:
        member = GroupMember(
            self.target,
            listener=self.registry.listener(name),
            options=MemberOptions(client_id=name, session_safety_margin_ms=300),
            interceptors=[tap] if tap else None,
        )
        await member.join(self.group, topics=[self.topic], instance_id=instance_id)
        self.members[name] = member
        return member

    async def remove(self, name: str, **kwargs: Any) -> None:
        await self.members.pop(name).close(**kwargs)

    async def crash(self, name: str) -> None:
        await self.members.pop(name).abort()
        self.registry.crashed(name)

    async def converged(self, partitions: int, timeout: float = 15) -> dict[str, frozenset[TopicPartition]]:
        """Waits until the group is Stable, every partition is owned by exactly one
        live member, the split is balanced and every member holds its target."""
        async with asyncio.timeout(timeout):
            while True:
                self.registry.assert_safe()
                held = {name: m.assignment().partitions for name, m in self.members.items()}
                union = frozenset().union(*held.values()) if held else frozenset()
                sizes = sorted(len(p) for p in held.values())
                group = await self.service.stubs.describe(self.group)
                if (
                    group.group_state == "Stable"
                    and len(union) == partitions == sum(sizes)
                    and (not sizes or sizes[-1] - sizes[0] <= 1)
                    and all(self.registry.held_by(n) == p for n, p in held.items())
                ):
                    return held
                await asyncio.sleep(0.05)

    async def close_all(self) -> None:
        for name in list(self.members):
            await self.remove(name)


@pytest.fixture
async def fast(start_service: ServiceFactory) -> Service:
    return await start_service(**FAST)


@pytest.fixture
async def fleet(fast: Service) -> AsyncIterator[Fleet]:
    await fast.stubs.create_topic("orders", 12)
    fleet = Fleet(fast, "g", "orders", OwnershipRegistry())
    yield fleet
    for member in fleet.members.values():
        await member.abort()


async def test_scale_out_and_in(fleet: Fleet) -> None:
    first = await fleet.add("m0")
    held = await fleet.converged(12)
    assert len(held["m0"]) == 12
    assert first.assignment().member_epoch == first.member_epoch > 0

    for i in range(1, 4):
        await fleet.add(f"m{i}")
    held = await fleet.converged(12)
    assert sorted(len(p) for p in held.values()) == [3, 3, 3, 3]
    # The first member gave partitions up through revocation, never lost them.
    assert fleet.registry.count("m0", "revoked") >= 1
    assert fleet.registry.count("m0", "lost") == 0

    for i in range(4, 12):
        await fleet.add(f"m{i}")
    held = await fleet.converged(12)
    assert sorted(len(p) for p in held.values()) == [1] * 12

    for i in range(1, 11):
        await fleet.remove(f"m{i}")
    held = await fleet.converged(12)
    assert sorted(len(p) for p in held.values()) == [6, 6]
    await fleet.close_all()
    fleet.registry.assert_safe()
    assert fleet.registry.owners == {}
    group = await fleet.service.stubs.describe("g")
    assert group.group_state == "Empty"


async def test_crashed_member_partitions_move_after_its_session(fleet: Fleet) -> None:
    for i in range(3):
        await fleet.add(f"m{i}")
    await fleet.converged(12)
    await fleet.crash("m1")
    held = await fleet.converged(12)
    assert sorted(len(p) for p in held.values()) == [6, 6]
    fleet.registry.assert_safe()


async def test_static_member_restart_gets_its_partitions_back_without_rebalance(fleet: Fleet) -> None:
    await fleet.add("a", instance_id="instance-a")
    await fleet.add("b", instance_id="instance-b")
    held = await fleet.converged(12)
    epoch_before = (await fleet.service.stubs.describe("g")).group_epoch
    b_callbacks = len([e for e in fleet.registry.events if e.member == "b"])

    await fleet.remove("a")  # a static member leaves with epoch -2
    restarted = await fleet.add("a2", instance_id="instance-a")
    await restarted.wait_for_assignment()
    held_again = await fleet.converged(12)

    assert held_again["a2"] == held["a"]
    assert held_again["b"] == held["b"]
    assert (await fleet.service.stubs.describe("g")).group_epoch == epoch_before
    assert len([e for e in fleet.registry.events if e.member == "b"]) == b_callbacks


async def test_lost_heartbeat_response_is_retried_in_full(fleet: Fleet) -> None:
    tap = Tap()
    first = await fleet.add("m0", tap=tap)
    await fleet.converged(12)
    steady = len(tap.requests)
    await asyncio.sleep(0.3)
    incremental = tap.requests[steady:]
    assert incremental, "the member kept heartbeating"
    assert all(
        not r.HasField("subscribed_topic_names") and not r.HasField("rebalance_timeout_ms")
        for r in incremental
    )

    # The responses that tell m0 to give partitions to m1 never arrive.
    tap.drop_responses = 2
    mark = len(tap.requests)
    await fleet.add("m1")
    held = await fleet.converged(12)
    assert sorted(len(p) for p in held.values()) == [6, 6]
    retried = tap.requests[mark + 1 :]
    assert any(r.HasField("subscribed_topic_names") and r.HasField("rebalance_timeout_ms") for r in retried)
    assert fleet.registry.count("m0", "lost") == 0
    assert first.failure is None


async def test_fenced_member_loses_its_partitions_and_rejoins_with_the_same_id(fleet: Fleet) -> None:
    tap = Tap()
    member = await fleet.add("m0", tap=tap)
    await fleet.add("m1")
    await fleet.converged(12)
    member_id = member.member_id

    def bump_epoch(request: Any) -> None:
        if request.member_epoch > 0:
            request.member_epoch += 5  # an epoch the coordinator never gave: FENCED_MEMBER_EPOCH
            tap.rewrite = None

    tap.rewrite = bump_epoch
    await fleet.converged(12)
    async with asyncio.timeout(10):
        while fleet.registry.count("m0", "lost") == 0:
            await asyncio.sleep(0.02)
    held = await fleet.converged(12)
    assert len(held["m0"]) == 6
    assert member.member_id == member_id
    rejoin = [r for r in tap.requests if r.member_epoch == 0]
    assert len(rejoin) == 2 and rejoin[-1].member_id == member_id
    fleet.registry.assert_safe()


async def test_unreachable_coordinator_keeps_partitions_until_the_session_would_expire(fleet: Fleet) -> None:
    tap = Tap()
    await fleet.add("m0", tap=tap)
    await fleet.add("m1")
    held = await fleet.converged(12)

    # A short outage: backoff and retry, nothing lost.
    tap.unavailable = True
    await asyncio.sleep(0.4)
    tap.unavailable = False
    assert await fleet.converged(12) == held
    assert fleet.registry.count("m0", "lost") == 0

    # A long one: m0 drops its partitions before the coordinator gives them to m1.
    tap.unavailable = True
    async with asyncio.timeout(10):
        while fleet.registry.count("m0", "lost") == 0:
            await asyncio.sleep(0.02)
    lost_at = next(e.at for e in fleet.registry.events if e.kind == "lost")
    async with asyncio.timeout(10):
        while len(fleet.registry.held_by("m1")) < 12:
            await asyncio.sleep(0.02)
    taken_at = max(e.at for e in fleet.registry.events if e.member == "m1" and e.kind == "assigned")
    assert lost_at < taken_at
    tap.unavailable = False
    held = await fleet.converged(12)
    assert sorted(len(p) for p in held.values()) == [6, 6]
    fleet.registry.assert_safe()


async def test_a_leave_refused_by_a_moving_coordinator_is_sent_again(fleet: Fleet) -> None:
    """A leave answered COORDINATOR_NOT_AVAILABLE (its group's shard changing hands) is
    retried until taken: the member is gone at once, not after its session timeout."""
    tap = Tap()
    await fleet.add("m0", tap=tap)
    await fleet.add("m1")
    await fleet.converged(12)
    tap.refuse_leaves = 2
    await fleet.remove("m0")
    leaves = [r for r in tap.requests if r.member_epoch == -1]
    assert len(leaves) == 3 and tap.refuse_leaves == 0
    group = await fleet.service.stubs.describe(fleet.group)
    assert [m.client_id for m in group.members] == ["m1"]
    held = await fleet.converged(12, timeout=1.0)  # well inside the 1.5 s session of m0
    assert len(held["m1"]) == 12


async def test_close_returns_while_a_revocation_waits_for_its_acknowledgement(fleet: Fleet) -> None:
    """close() while the heartbeat that acknowledges a revocation is still in flight (it
    never comes back) stops that heartbeat and returns: nobody waits for the ack for ever."""
    tap = Tap()
    member = await fleet.add("m0", tap=tap)
    await fleet.converged(12)
    # The acknowledgement of the revocation that m1's join starts: fewer than 12 owned.
    tap.hang = lambda r: (
        r.member_epoch > 0
        and r.HasField("topic_partitions")
        and sum(len(t.partitions) for t in r.topic_partitions.topics) < 12
    )
    await fleet.add("m1")
    async with asyncio.timeout(10):
        while not any(tap.hang(r) for r in tap.requests):
            await asyncio.sleep(0.02)
    async with asyncio.timeout(5):
        await fleet.remove("m0")
    assert member.assignment().partitions == frozenset()
    assert fleet.registry.count("m0", "lost") == 0
    fleet.registry.assert_safe()


async def test_refused_join_raises(fast: Service) -> None:
    target = f"127.0.0.1:{fast.server.port}"
    async with GroupMember(target) as member:
        with pytest.raises(RegroupError) as refused:
            await member.join("g", regex="orders[")
    assert refused.value.code == common_pb2.INVALID_REGULAR_EXPRESSION
    with pytest.raises(ValueError):
        await GroupMember(target).join("g", topics=["a"], regex="a")


async def test_regex_subscription_and_changing_it(fast: Service) -> None:
    target = f"127.0.0.1:{fast.server.port}"
    await fast.stubs.create_topic("a-1", 2)
    await fast.stubs.create_topic("b-1", 3)
    async with GroupMember(target) as member:
        await member.join("g", regex="a-.*")
        got = await member.wait_for_assignment(lambda a: len(a) == 2)
        assert {tp.topic for tp in got.partitions} == {"a-1"}
        member.subscribe(topics=["b-1"])
        got = await member.wait_for_assignment(lambda a: {tp.topic for tp in a.partitions} == {"b-1"})
        assert len(got) == 3
        assert all(got.token(tp).member_epoch == got.member_epoch for tp in got.partitions)


async def test_logs_and_spans(fast: Service, caplog: pytest.LogCaptureFixture) -> None:
    from tests.support.spans import client_spans

    exporter = client_spans()
    await fast.stubs.create_topic("t", 2)
    caplog.set_level(logging.INFO, logger="regroup.client")
    async with GroupMember(f"127.0.0.1:{fast.server.port}") as member:
        await member.join("g", topics=["t"])
        await member.wait_for_assignment()
    names = {s.name for s in exporter.get_finished_spans()}
    assert {"regroup.join", "regroup.heartbeat", "regroup.assign", "regroup.revoke", "regroup.leave"} <= names
    assert any("joined group g" in r.getMessage() for r in caplog.records)
    assert any("left group g" in r.getMessage() for r in caplog.records)


async def test_admin_client(service: Service) -> None:
    async with GroupAdmin(f"127.0.0.1:{service.server.port}") as admin:
        topic_id = await admin.create_topic("t", 3)
        assert await admin.create_partitions("t", 5) == 5
        (described,) = await admin.describe_topics(["t"])
        assert (described.topic_id, described.num_partitions) == (topic_id, 5)
        with pytest.raises(RegroupError) as exists:
            await admin.create_topic("t", 1)
        assert exists.value.code == common_pb2.TOPIC_ALREADY_EXISTS
        async with GroupMember(f"127.0.0.1:{service.server.port}") as member:
            await member.join("g", topics=["t"])
            await member.wait_for_assignment()
            (listing,) = await admin.list_groups()
            assert (listing.group_id, listing.members) == ("g", 1)
            group = await admin.describe_group("g")
            assert [m.member_id for m in group.members] == [member.member_id]
            with pytest.raises(RegroupError) as busy:
                await admin.delete_group("g")
            assert busy.value.code == common_pb2.NON_EMPTY_GROUP
        await admin.delete_group("g")
        with pytest.raises(RegroupError) as gone:
            await admin.describe_group("g")
        assert gone.value.code == common_pb2.GROUP_ID_NOT_FOUND
        assert await admin.delete_topic("t") == topic_id
